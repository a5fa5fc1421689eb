"""ONNX backend node-test conformance, through tierserve's HTTP API.

Every node test of Debian's libonnx-testdata (``<data>/node/test_x/model.onnx`` plus
``test_data_set_N/{input,output}_K.pb``) becomes one model of a symlinked Triton-layout
repository; ONE worker serves them all (EXECUTION_MODE=cpu, warm-up off, failed loads
tolerated; more than MAX_MODELS_PER_WORKER tests are served in shards, since a worker takes
at most 1024 models).  Each data set is sent as a binary-tensor infer request and the reply
is compared with the reference outputs: datatype (also against GET /v2/models/<m>), shape,
values (rtol 1e-3 / atol 1e-5 for floats, NaN and Inf positions exact; exact otherwise).

Each test ends as passed, an expected failure (listed, with a category, in
tests/conformance/expected_failures.txt) or an unexpected failure.  The test fails on any
unexpected failure and on any listed test that now passes (so the list stays honest).

    /usr/bin/python3 -m pytest tests/e2e/test_conformance.py -q -s

Environment:
    ONNX_NODE_TESTS=<dir>          the node test folder (default Debian's)
    CONFORMANCE_ONLY=<regex>       run only matching test names (list checks limited to them)
    CONFORMANCE_REGENERATE=1       rewrite expected_failures.txt from this run (review it!)
    CONFORMANCE_REPORT=<file>      write every test's outcome and reason as JSON
    CONFORMANCE_JSON=1             send JSON-representable tensors as JSON, not binary
See tests/conformance/README.md.
"""
import concurrent.futures
import glob
import json
import os
import pathlib
import re
import threading
import time

import numpy as np
import pytest

from conftest import ROOT, SANITIZED, start_worker

DATA_DIR = pathlib.Path(os.environ.get("ONNX_NODE_TESTS", "/usr/share/libonnx-testdata/data/node"))
EXPECTED_FILE = ROOT / "tests" / "conformance" / "expected_failures.txt"
RTOL, ATOL = 1e-3, 1e-5
N_THREADS = 3
MAX_MODELS_PER_WORKER = 1000
# CONFORMANCE_JSON=1: send every tensor JSON can carry as JSON data (and ask for JSON
# outputs); BF16, NaN/Inf and non-UTF-8 strings stay binary.  Default: all binary.
JSON_MODE = os.environ.get("CONFORMANCE_JSON") == "1"

onnx = pytest.importorskip("onnx", reason="python3-onnx is needed to read the node tests")
from onnx import TensorProto, numpy_helper  # noqa: E402

import tritonlike  # noqa: E402

pytestmark = [
    pytest.mark.skipif(SANITIZED, reason="conformance sweep loads ~900 ORT sessions and sends "
                       "~1000 requests: too slow under ASan, and the regular e2e suite already "
                       "covers the same server code paths there"),
    pytest.mark.skipif(not DATA_DIR.is_dir(),
                       reason=f"{DATA_DIR} missing (apt-get install libonnx-testdata)"),
]

# ONNX TensorProto element type -> KServe v2 datatype (None: KServe v2 has no such type)
ONNX_TO_KSERVE = {
    TensorProto.BOOL: "BOOL", TensorProto.UINT8: "UINT8", TensorProto.UINT16: "UINT16",
    TensorProto.UINT32: "UINT32", TensorProto.UINT64: "UINT64", TensorProto.INT8: "INT8",
    TensorProto.INT16: "INT16", TensorProto.INT32: "INT32", TensorProto.INT64: "INT64",
    TensorProto.FLOAT16: "FP16", TensorProto.FLOAT: "FP32", TensorProto.DOUBLE: "FP64",
    TensorProto.STRING: "BYTES", TensorProto.BFLOAT16: "BF16",
}

# Categories an expected failure may have (see tests/conformance/README.md).
CATEGORIES = {
    "non-tensor-io": "sequence/map/optional input or output: not servable over KServe v2",
    "kserve-dtype": "an element type KServe v2 has no datatype for (complex, float8, int4, ...)",
    "ort-unsupported": "ONNX Runtime 1.29 (CPU EP) has no kernel / rejects the model at load",
    "ort-environment": "ONNX Runtime needs something this host lacks (e.g. a locale)",
    "nondeterministic": "the reference output is random draws; any correct run differs",
    "reference-mismatch": "ONNX Runtime's result differs from the ONNX 1.12 reference data",
    "bad-test-data": "the test data contradicts the model (ONNX Runtime would refuse it too)",
}
# Listed tests in these categories may pass on some hosts or by chance: not flagged.
MAY_PASS = {"ort-environment", "nondeterministic"}

_LOAD_REASON_CATEGORIES = [
    (re.compile(r"is not a tensor"), "non-tensor-io"),
    (re.compile(r"KServe v2 cannot carry"), "kserve-dtype"),
    (re.compile(r"not a registered function/op|Could not find an implementation|"
                r"layout_ == 0 was false|NOT_IMPLEMENTED"), "ort-unsupported"),
    (re.compile(r"Locale|locale"), "ort-environment"),
]


# --------------------------------------------------------------------------------------
# test data
# --------------------------------------------------------------------------------------
def _graph_io(model_path):
    """(input names without initializers, output names, {name: ONNX elem type}), graph order."""
    m = onnx.load(str(model_path), load_external_data=False)
    inits = {t.name for t in m.graph.initializer}
    ins = [i.name for i in m.graph.input if i.name not in inits]
    types = {v.name: v.type.tensor_type.elem_type
             for v in list(m.graph.input) + list(m.graph.output) if v.type.HasField("tensor_type")}
    return ins, [o.name for o in m.graph.output], types


def _tensor(path, model_type=None):
    """(kserve datatype, ndarray in the form the client sends/decodes, onnx elem type).

    ONNX 1.12 stores the bfloat16 cast tests' data as UINT16 tensors holding bf16 bits
    (numpy has no bfloat16); where the model declares BFLOAT16 they are read as such."""
    t = onnx.load_tensor(str(path))
    et = t.data_type
    if et == TensorProto.UINT16 and model_type == TensorProto.BFLOAT16:
        bits = numpy_helper.to_array(t).astype("<u4") << 16
        return "BF16", np.array(bits.view("<f4"), order="C"), TensorProto.BFLOAT16
    kdt = ONNX_TO_KSERVE.get(et)
    if et == TensorProto.STRING:
        arr = np.array(list(t.string_data), dtype=np.object_).reshape(tuple(t.dims))
    else:
        arr = numpy_helper.to_array(t)  # BF16 comes out as float32 (the client's BF16 form)
    return kdt, np.array(arr, order="C"), et  # (np.ascontiguousarray would make 0-d 1-d)


def _sorted_pbs(d, prefix):
    files = glob.glob(os.path.join(d, f"{prefix}_*.pb"))
    return sorted(files, key=lambda p: int(re.search(r"_(\d+)\.pb$", p).group(1)))


def discover():
    return sorted(p.name for p in DATA_DIR.iterdir()
                  if p.is_dir() and (p / "model.onnx").is_file())


def build_repo(names, repo):
    for n in names:
        v = repo / n / "1"
        v.mkdir(parents=True)
        (v / "model.onnx").symlink_to(DATA_DIR / n / "model.onnx")


# --------------------------------------------------------------------------------------
# comparison
# --------------------------------------------------------------------------------------
def compare(name, exp, got):
    """None if equal within tolerance, else a short reason."""
    if tuple(got.shape) != tuple(exp.shape):
        return f"output '{name}': shape {list(got.shape)}, expected {list(exp.shape)}"
    if exp.dtype == np.object_:
        e = [x.encode() if isinstance(x, str) else bytes(x) for x in exp.reshape(-1)]
        g = [x.encode() if isinstance(x, str) else bytes(x) for x in got.reshape(-1)]
        if e != g:
            bad = next(i for i in range(len(e)) if e[i] != g[i])
            return f"output '{name}': element {bad} is {g[bad]!r}, expected {e[bad]!r}"
        return None
    if exp.dtype.kind in "fc":
        e = exp.astype(np.float64)
        g = got.astype(np.float64)
        nan_e, nan_g = np.isnan(e), np.isnan(g)
        if not np.array_equal(nan_e, nan_g):
            return f"output '{name}': NaN positions differ ({int(nan_e.sum())} expected, {int(nan_g.sum())} got)"
        e, g = e[~nan_e], g[~nan_g]
        inf = np.isinf(e) | np.isinf(g)
        if not np.array_equal(e[inf], g[inf]):
            return f"output '{name}': infinities differ"
        e, g = e[~inf], g[~inf]
        err = np.abs(g - e)
        ok = err <= ATOL + RTOL * np.abs(e)
        if not ok.all():
            i = int(np.argmax(~ok))
            return (f"output '{name}': {int((~ok).sum())}/{ok.size} finite elements off "
                    f"(max abs err {float(err.max()):.3g}; first: got {g[i]!r}, expected {e[i]!r})")
        return None
    if not np.array_equal(got, exp):
        diff = np.argwhere(got != exp)
        i = tuple(diff[0])
        return (f"output '{name}': {len(diff)}/{exp.size} elements differ "
                f"(first at {list(i)}: got {got[i]!r}, expected {exp[i]!r})")
    return None


# --------------------------------------------------------------------------------------
# running
# --------------------------------------------------------------------------------------
_local = threading.local()


def _client(url):
    c = getattr(_local, "client", None)
    if c is None:
        c = _local.client = tritonlike.TritonLikeClient(url, network_timeout=120)
    return c


def _json_ok(arr, kdt):
    """Whether this tensor can travel as JSON data."""
    if kdt == "BF16":
        return False
    if arr.dtype.kind == "f":
        return bool(np.isfinite(arr).all())
    if kdt == "BYTES":
        try:
            for x in arr.reshape(-1):
                x.decode("utf-8") if isinstance(x, bytes) else None
        except UnicodeDecodeError:
            return False
    return True


def run_test(url, name, index_entry):
    """-> (outcome, reason): outcome 'pass' or 'fail'; reason has a category prefix when the
    failure is one the server cannot help (load failures), else is plain text."""
    if index_entry is None:
        return "fail", "model missing from the repository index"
    if index_entry["state"] != "READY":
        reason = index_entry.get("reason", "").strip()
        cat = next((c for rx, c in _LOAD_REASON_CATEGORIES if rx.search(reason)), None)
        return "fail", f"{cat or 'load-failed'}: {reason[:300]}"
    d = DATA_DIR / name
    ins, outs, types = _graph_io(d / "model.onnx")
    client = _client(url)
    try:
        meta = client.get_model_metadata(name)
    except tritonlike.InferenceServerException as e:
        return "fail", f"metadata: {e}"
    meta_in = {t["name"]: t for t in meta.get("inputs", [])}
    meta_out = {t["name"]: t for t in meta.get("outputs", [])}
    if [t["name"] for t in meta.get("inputs", [])] != ins:
        return "fail", f"metadata inputs {list(meta_in)} != graph inputs {ins}"
    if [t["name"] for t in meta.get("outputs", [])] != outs:
        return "fail", f"metadata outputs {list(meta_out)} != graph outputs {outs}"
    sets = sorted(glob.glob(str(d / "test_data_set_*")))
    if not sets:
        return "fail", "no test_data_set_* folders"
    for ds in sets:
        tag = os.path.basename(ds)
        try:
            in_t = [_tensor(p, types.get(n)) for p, n in zip(_sorted_pbs(ds, "input"), ins)]
            out_t = [_tensor(p, types.get(n)) for p, n in zip(_sorted_pbs(ds, "output"), outs)]
            if (len(in_t), len(out_t)) != (len(_sorted_pbs(ds, "input")), len(_sorted_pbs(ds, "output"))):
                return "fail", f"{tag}: more test data files than model inputs/outputs"
        except Exception as e:  # noqa: BLE001 - e.g. a SequenceProto where a tensor was assumed
            return "fail", f"{tag}: cannot read test data as tensors: {e}"
        for (kdt, _, et), n in zip(in_t + out_t, ins[:len(in_t)] + outs[:len(out_t)]):
            if kdt is None:
                return "fail", f"kserve-dtype: '{n}' has ONNX element type {TensorProto.DataType.Name(et)}"
            m = meta_in.get(n) or meta_out.get(n)
            if m["datatype"] != kdt:
                return "fail", (f"{tag}: metadata says '{n}' is {m['datatype']}, but the test "
                                f"data is ONNX {TensorProto.DataType.Name(et)} = KServe {kdt}")
        inputs = [(n, arr, kdt, not (JSON_MODE and _json_ok(arr, kdt)))
                  for n, (kdt, arr, _) in zip(ins, in_t)]
        out_names = outs[:len(out_t)]
        req_outs = [(o, not (JSON_MODE and _json_ok(arr, kdt))) for o, (kdt, arr, _) in zip(out_names, out_t)]
        try:
            res = client.infer(name, inputs, outputs=req_outs)
        except tritonlike.InferenceServerException as e:
            return "fail", f"{tag}: infer: {str(e)[:400]}"
        except Exception as e:  # noqa: BLE001 - transport trouble: keep going with a new socket
            client.close()
            return "fail", f"{tag}: infer: {type(e).__name__}: {e}"
        for o, (kdt, exp, _) in zip(out_names, out_t):
            got_meta = res.get_output(o)
            if got_meta is None:
                return "fail", f"{tag}: output '{o}' missing from the reply"
            if got_meta["datatype"] != kdt:
                return "fail", f"{tag}: output '{o}' came back as {got_meta['datatype']}, expected {kdt}"
            try:
                got = res.as_numpy(o)
            except Exception as e:  # noqa: BLE001
                return "fail", f"{tag}: output '{o}' undecodable: {type(e).__name__}: {e}"
            why = compare(o, exp, got)
            if why:
                return "fail", f"{tag}: {why}"
    return "pass", ""


def read_expected(path=EXPECTED_FILE):
    out = {}
    if not path.exists():
        return out
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, _, rest = line.partition(" ")
        out[name] = rest.strip()
    return out


def _short(reason):
    """A list-friendly reason: no temp paths or ORT source locations, one line, bounded."""
    r = re.sub(r"Load model from \S+ failed:", "", reason)
    r = re.sub(r"/onnxruntime_src/\S+:\d+ ", "", r)
    r = re.sub(r"Exception during initialization: ", "", r)
    r = " ".join(r.split())
    return r if len(r) <= 160 else r[:157] + "..."


def write_expected(results, path=EXPECTED_FILE):
    """Rewrites the list from a full run: a listed test that still fails keeps its reviewed
    line (unless its load-failure category changed); a new failure gets the category its
    load reason shows, or 'REVIEW' for a human to decide (never list a server bug); tests
    that pass are dropped, except MAY_PASS ones."""
    old = read_expected(path)
    lines = []
    for name in sorted(results):
        outcome, reason = results[name]
        cat, sep, rest = reason.partition(": ")
        known = bool(sep) and cat in CATEGORIES
        if name in old and (outcome == "pass" and old[name].partition(":")[0] in MAY_PASS
                            or outcome != "pass" and (not known or old[name].partition(":")[0] == cat)):
            lines.append(f"{name}  {old[name]}")
            continue
        if outcome == "pass":
            continue
        if not known:
            cat, rest = "REVIEW", reason
        lines.append(f"{name}  {cat}: {_short(rest)}")
    head = ("# ONNX node tests that tierserve is expected to fail, with a category (see README.md).\n"
            "# Format: <test_name>  <category>: <reason>.  Sorted.  Regenerate with\n"
            "# CONFORMANCE_REGENERATE=1, then review every line: never list a server bug.\n")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(head + "\n".join(lines) + "\n")


def test_onnx_node_conformance(tmp_path):
    t0 = time.monotonic()
    names = discover()
    only = os.environ.get("CONFORMANCE_ONLY")
    if only:
        names = [n for n in names if re.search(only, n)]
    assert names, f"no node tests found under {DATA_DIR}"
    # One worker serves every test; the repository scan caps a worker at 1024 models
    # (REPO_MAX_MODELS in src/model.c), so a larger test set is served in shards.
    results, load_s, alive, codes, workers = {}, 0.0, True, [], []
    for k in range(0, len(names), MAX_MODELS_PER_WORKER):
        shard = names[k:k + MAX_MODELS_PER_WORKER]
        repo = tmp_path / f"repo{k // MAX_MODELS_PER_WORKER}"
        build_repo(shard, repo)
        t_start = time.monotonic()
        w = start_worker(repo, tmp_path, env={"EXECUTION_MODE": "cpu"},
                         args=["--exit-on-error=0", "--strict-readiness=0", "--warmup=0",
                               "--intra-op-threads=1"],
                         timeout=300)
        workers.append(w)
        load_s += time.monotonic() - t_start
        try:
            index = {e["name"]: e for e in
                     tritonlike.TritonLikeClient(w.url).get_model_repository_index()}
            with concurrent.futures.ThreadPoolExecutor(N_THREADS) as pool:
                futs = {n: pool.submit(run_test, w.url, n, index.get(n)) for n in shard}
                results.update({n: f.result() for n, f in futs.items()})
            alive = alive and w.proc.poll() is None
        finally:
            codes.append(w.stop())
    elapsed = time.monotonic() - t0

    if os.environ.get("CONFORMANCE_REPORT"):
        pathlib.Path(os.environ["CONFORMANCE_REPORT"]).write_text(
            json.dumps({n: {"outcome": o, "reason": r} for n, (o, r) in results.items()}, indent=1))
    if os.environ.get("CONFORMANCE_REGENERATE") == "1":
        assert not only, "regenerate from a full run (unset CONFORMANCE_ONLY)"
        write_expected(results)

    expected = read_expected()
    passed = [n for n in names if results[n][0] == "pass"]
    exp_fail = [n for n in names if results[n][0] != "pass" and n in expected]
    unexpected = [n for n in names if results[n][0] != "pass" and n not in expected]
    now_passing = [n for n in passed if n in expected
                   and expected[n].partition(":")[0] not in MAY_PASS]
    # a listed load failure that now fails for another category of reason
    moved = [n for n in exp_fail
             if results[n][1].partition(": ")[0] in CATEGORIES
             and results[n][1].partition(": ")[0] != expected[n].partition(":")[0]]
    stale = [] if only else sorted(set(expected) - set(names))
    bad_cat = sorted(n for n, r in expected.items() if r.partition(":")[0] not in CATEGORIES)

    cats = {}
    for n in exp_fail:
        c = expected[n].partition(":")[0]
        cats[c] = cats.get(c, 0) + 1
    print(f"\nconformance: {len(passed)} passed / {len(names)} total, {len(exp_fail)} expected "
          f"failures, {len(unexpected)} unexpected failures  "
          f"({len(workers)} worker(s), load {load_s:.1f}s, total {elapsed:.1f}s)")
    print("expected failures by category: " + ", ".join(f"{c}={k}" for c, k in sorted(cats.items())))
    for n in unexpected:
        print(f"  UNEXPECTED FAILURE {n}: {results[n][1]}")
    for n in now_passing:
        print(f"  now passing, remove from list: {n}  ({expected[n]})")
    for n in stale:
        print(f"  listed but no such test, remove from list: {n}")
    for n in bad_cat:
        print(f"  unknown category, fix the list: {n}  {expected[n]}")
    for n in moved:
        print(f"  listed as '{expected[n]}' but now fails with: {results[n][1]}")

    for w, code in zip(workers, codes):
        assert alive, f"a worker died during the sweep:\n{w.log_text()[-4000:]}"
        assert code == 0, f"worker exit code {code}:\n{w.log_text()[-4000:]}"
    problems = []
    if unexpected:
        problems.append(f"{len(unexpected)} unexpected failure(s): {unexpected[:20]}")
    if now_passing:
        problems.append(f"{len(now_passing)} expected failure(s) now pass, remove from "
                        f"{EXPECTED_FILE.name}: {now_passing}")
    if stale:
        problems.append(f"{EXPECTED_FILE.name} lists tests that do not exist: {stale}")
    if bad_cat:
        problems.append(f"{EXPECTED_FILE.name} has lines with an unknown category: {bad_cat}")
    if moved:
        problems.append(f"listed failures whose reason changed category: {moved}")
    assert not problems, "\n".join(problems)
