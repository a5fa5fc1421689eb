"""ONNX backend node-test conformance, through tierserve's HTTP API.

Every node test of Debian's libonnx-testdata (``<data>/node/test_x/model.onnx`` plus
``test_data_set_N/{input,output}_K.pb``) becomes one model of a symlinked Triton-layout
repository; ONE worker serves them all (EXECUTION_MODE=cpu, warm-up off, failed loads
tolerated; more than MAX_MODELS_PER_WORKER tests are served in shards, since a worker takes
at most 1024 models).  Each data set is sent as a binary-tensor infer request and the reply
is compared with the reference outputs: datatype (also against GET /v2/models/<m>), shape,
values (rtol 1e-3 / atol 1e-5 for floats, NaN and Inf positions exact; exact otherwise).
Then the same request goes again with every JSON-representable input as JSON data and the
outputs asked for as JSON: the JSON reply, read without rounding or wrapping, must hold
exactly the values of the binary reply (bit for bit; NaN for NaN).

Each test ends as passed, an expected failure (listed, with a category and the failure
it records, in tests/conformance/expected_failures.txt) or an unexpected failure.  Every
failure of a test is collected (each data set, each output, both encodings), not only the
first.  The test fails on any unexpected failure, on a listed test that now fails
differently from what its line records (a new regression must not hide behind a listed
failure), and on any listed test that now passes (so the list stays honest).

    /usr/bin/python3 -m pytest tests/e2e/test_conformance.py -q -s

Environment:
    ONNX_NODE_TESTS=<dir>          the node test folder (default Debian's)
    CONFORMANCE_ONLY=<regex>       run only matching test names (list checks limited to them)
    CONFORMANCE_REGENERATE=1       rewrite expected_failures.txt from this run (review it!)
    CONFORMANCE_REPORT=<file>      write every test's outcome and reason as JSON
    CONFORMANCE_JSON_ALL=1         re-read every test's replies as JSON (default: about half)
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
# Every other test (in name order) has its replies re-read as JSON; the rest only where
# their outputs are not plain FP32 numbers (see _json_worth_it). CONFORMANCE_JSON_ALL=1:
# every test (about a second more).
JSON_ALL = os.environ.get("CONFORMANCE_JSON_ALL") == "1"
MAX_MODELS_PER_WORKER = 1000

onnx = pytest.importorskip("onnx", reason="python3-onnx is needed to read the node tests")
from onnx import TensorProto, numpy_helper  # noqa: E402

import tritonlike  # noqa: E402
from exactjson import decode_data, exact_json, same_bits  # noqa: E402

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
# Listed failures whose numbers change from run to run: recorded with '#' for each number.
VOLATILE = {"nondeterministic"}

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


def _first_difference(kdt, a, b):
    """Index and the two values of the first element where a and b differ (same_bits)."""
    a, b = np.asarray(a).reshape(-1), np.asarray(b).reshape(-1)
    for i in range(min(a.size, b.size)):
        if not same_bits(kdt, a[i:i + 1], b[i:i + 1]):
            return i, a[i], b[i]
    return min(a.size, b.size), None, None


def same_offset_ids(inputs, outputs_a, outputs_b):
    """Request ids that give two requests with these inputs (all binary) and these output
    lists JSON headers of one odd length. ONNX Runtime reads binary inputs where they lie in
    the request body, and some kernels (e.g. ReduceProd) round differently on data that
    another offset aligns otherwise: with one offset, one model gives one answer. Odd, so
    that no input is ever aligned at all, whatever the body's own address."""
    hl = [_header_len(inputs, outputs_a), _header_len(inputs, outputs_b)]
    if None in hl:  # no binary input at all: nothing lies in the body
        return "", ""
    target = max(hl) | 1
    return "x" * (1 + target - hl[0]), "x" * (1 + target - hl[1])


def _header_len(inputs, outputs):
    """The JSON header length of an infer request with request id "x"."""
    return tritonlike.build_infer_body(inputs, outputs, request_id="x")[1]


def check_json(client, name, tag, inputs, req_id, outs, binary_got):
    """Sends the data set again, the inputs binary at the same offsets as before (req_id
    from same_offset_ids), every output JSON can carry asked for as JSON; each must hold
    exactly what the binary reply held (binary_got: output name -> array): the same model
    on the same bytes, so the same bits. Returns the failures found."""
    req_outs = [(o, not (kdt != "BYTES" or _json_ok(exp, kdt))) for o, kdt, exp in outs]
    try:
        res = client.infer(name, inputs, outputs=req_outs, request_id=req_id)
    except tritonlike.InferenceServerException as e:
        return [f"{tag}: json: infer: {str(e)[:400]}"]
    except Exception as e:  # noqa: BLE001 - transport trouble: keep going with a new socket
        client.close()
        return [f"{tag}: json: infer: {type(e).__name__}: {e}"]
    hl = next((v for k, v in res.headers if k.lower() == "inference-header-content-length"), None)
    head = exact_json(res.decoded_body[:int(hl)] if hl is not None else res.decoded_body)
    by_name = {o["name"]: o for o in head.get("outputs", [])}
    failures = []
    for o, kdt, _ in outs:
        if o not in binary_got:
            continue  # the binary reply already failed for this output
        out = by_name.get(o)
        if out is None:
            failures.append(f"{tag}: json: output '{o}' missing from the reply")
            continue
        try:
            got = decode_data(kdt, out["data"], out["shape"]) if "data" in out else res.as_numpy(o)
        except (AssertionError, KeyError, ValueError, TypeError) as e:
            failures.append(f"{tag}: json: output '{o}' undecodable: {type(e).__name__}: {e}")
            continue
        want = binary_got[o]
        if tuple(got.shape) != tuple(want.shape):
            failures.append(f"{tag}: json: output '{o}': shape {list(got.shape)}, binary reply {list(want.shape)}")
        elif not same_bits(kdt, got, want):
            i, g, w = _first_difference(kdt, got, want)
            failures.append(f"{tag}: json: output '{o}': element {i} is {g!r}, binary reply has {w!r}")
    return failures


def _json_worth_it(json_all, got):
    """Whether to re-send a data set for JSON outputs (binary reply got: name -> array).
    json_all: always. Otherwise (half the sweep, to keep its time) only outputs where the
    JSON writer meets something besides ordinary FP32 numbers: another datatype, or NaN,
    +-Inf, -0.0 or a subnormal."""
    if json_all:
        return True
    for a in got.values():
        if a.dtype != np.float32 or not np.isfinite(a).all():
            return True
        if np.signbit(a[a == 0]).any() or (np.abs(a[a != 0]) < np.finfo(np.float32).tiny).any():
            return True  # -0.0, subnormals
    return False


def run_test(url, name, index_entry, check_json_replies=True, json_all=True):
    """-> (outcome, reason): outcome 'pass' or 'fail'; reason has a category prefix when the
    failure is one the server cannot help (load failures), else is plain text: every
    failure found, in data set and output order, joined by ' | '. check_json_replies=False
    skips the JSON re-send (a model whose outputs are random draws); json_all=False re-sends
    only where _json_worth_it says so."""
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
    failures = []
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
        inputs = [(n, arr, kdt, True) for n, (kdt, arr, _) in zip(ins, in_t)]
        out_names = outs[:len(out_t)]
        bin_outs = [(o, True) for o in out_names]
        json_outs = [(o, not (kdt != "BYTES" or _json_ok(exp, kdt))) for o, (kdt, exp, _) in zip(out_names, out_t)]
        bin_id, json_id = same_offset_ids(inputs, bin_outs, json_outs)
        try:
            res = client.infer(name, inputs, outputs=bin_outs, request_id=bin_id)
        except tritonlike.InferenceServerException as e:
            failures.append(f"{tag}: infer: {str(e)[:400]}")
            continue
        except Exception as e:  # noqa: BLE001 - transport trouble: keep going with a new socket
            client.close()
            failures.append(f"{tag}: infer: {type(e).__name__}: {e}")
            continue
        binary_got = {}
        for o, (kdt, exp, _) in zip(out_names, out_t):
            got_meta = res.get_output(o)
            if got_meta is None:
                failures.append(f"{tag}: output '{o}' missing from the reply")
                continue
            if got_meta["datatype"] != kdt:
                failures.append(f"{tag}: output '{o}' came back as {got_meta['datatype']}, expected {kdt}")
                continue
            try:
                got = res.as_numpy(o)
            except Exception as e:  # noqa: BLE001
                failures.append(f"{tag}: output '{o}' undecodable: {type(e).__name__}: {e}")
                continue
            binary_got[o] = got
            why = compare(o, exp, got)
            if why:
                failures.append(f"{tag}: {why}")
        if check_json_replies and binary_got and _json_worth_it(json_all, binary_got):
            failures += check_json(client, name, tag, inputs, json_id,
                                   [(o, kdt, exp) for o, (kdt, exp, _) in zip(out_names, out_t)], binary_got)
    return ("fail", " | ".join(failures)) if failures else ("pass", "")


RECORD_SEP = "  => "  # between a line's reviewed reason and the failure it records
# what '#' stands for in a recorded failure: one number (or boolean) standing alone
_NUM = r"(?:[-+]?(?:\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|inf|nan)|True|False)"
_NUM_ALONE = re.compile(r"(?<![\w.])" + _NUM + r"(?![\w.])")


def read_expected(path=EXPECTED_FILE):
    """{test name: "<category>: <reason>  => <recorded failure>"} from the list."""
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


def _category(entry):
    return entry.partition(":")[0]


def _recorded(entry):
    """The failure a list line records (None if the line has none)."""
    _, sep, rec = entry.partition(RECORD_SEP)
    return rec.strip() if sep else None


def _clean(reason):
    """A failure as the list records it: no temp paths or ORT source locations, one line."""
    r = re.sub(r"Load model from \S+ failed:", "", reason)
    r = re.sub(r"/onnxruntime_src/\S+:\d+ ", "", r)
    r = re.sub(r"Exception during initialization: ", "", r)
    return " ".join(r.split())


def _short(reason):
    """A list-friendly reason: _clean, bounded."""
    r = _clean(reason)
    return r if len(r) <= 160 else r[:157] + "..."


def _mask(failure):
    """The failure with every number or boolean that stands alone written as '#' (VOLATILE
    lines)."""
    return _NUM_ALONE.sub("#", failure)


def _matches(recorded, failure):
    """Whether a run's failure is the one a line records: the same text, where each '#'
    of the record stands for one number."""
    rx = _NUM.join(re.escape(part) for part in recorded.split("#"))
    return re.fullmatch(rx, _clean(failure)) is not None


def _record_for(category, failure, old=None):
    """What a line records for a failure: the old record while it still matches, else
    the failure itself (numbers masked for VOLATILE categories)."""
    if old is not None and _matches(old, failure):
        return old
    return _mask(_clean(failure)) if category in VOLATILE else _clean(failure)


def write_expected(results, path=EXPECTED_FILE):
    """Rewrites the list from a full run: a listed test that still fails keeps its reviewed
    reason (unless its load-failure category changed) and records the failure seen now
    (the old record if it still matches); a new failure gets the category its load reason
    shows, or 'REVIEW' for a human to decide (never list a server bug); tests that pass are
    dropped, except MAY_PASS ones."""
    old = read_expected(path)
    lines = []
    for name in sorted(results):
        outcome, reason = results[name]
        cat, sep, rest = reason.partition(": ")
        known = bool(sep) and cat in CATEGORIES
        if name in old and outcome == "pass" and _category(old[name]) in MAY_PASS:
            lines.append(f"{name}  {old[name]}")
            continue
        if outcome == "pass":
            continue
        if name in old and (not known or _category(old[name]) == cat):
            reviewed = old[name].partition(RECORD_SEP)[0].strip()
            rec = _record_for(_category(old[name]), reason, _recorded(old[name]))
            lines.append(f"{name}  {reviewed}{RECORD_SEP}{rec}")
            continue
        if not known:
            cat, rest = "REVIEW", reason
        lines.append(f"{name}  {cat}: {_short(rest)}{RECORD_SEP}{_record_for(cat, reason)}")
    head = ("# ONNX node tests that tierserve is expected to fail, with a category (see README.md).\n"
            "# Format: <test_name>  <category>: <reason>  => <the failure the run must show>.\n"
            "# Sorted. '#' in a recorded failure stands for any one number. Regenerate with\n"
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
    expected = read_expected()
    random_outputs = {n for n, e in expected.items() if _category(e) in VOLATILE}
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
                futs = {n: pool.submit(run_test, w.url, n, index.get(n), n not in random_outputs,
                                       JSON_ALL or i % 2 == 0)
                        for i, n in enumerate(shard, start=k)}
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
    # a listed failure that now fails otherwise than its line records: whatever changed
    # (a new regression in the same test) would hide behind the listing
    changed = [n for n in exp_fail if _recorded(expected[n]) is not None
               and not _matches(_recorded(expected[n]), results[n][1])]
    stale = [] if only else sorted(set(expected) - set(names))
    bad_cat = sorted(n for n, r in expected.items() if r.partition(":")[0] not in CATEGORIES)
    no_record = sorted(n for n, r in expected.items() if _recorded(r) is None)

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
    for n in changed:
        print(f"  {n} fails otherwise than recorded:\n    recorded: {_recorded(expected[n])}\n"
              f"    now:      {_clean(results[n][1])}")
    for n in no_record:
        print(f"  no recorded failure ('{RECORD_SEP.strip()} ...'), fix the list: {n}")

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
    if changed:
        problems.append(f"{len(changed)} listed failure(s) now fail otherwise than recorded: {changed}")
    if no_record:
        problems.append(f"{EXPECTED_FILE.name} has lines without a recorded failure: {no_record}")
    assert not problems, "\n".join(problems)
