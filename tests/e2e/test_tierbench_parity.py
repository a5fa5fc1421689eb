"""tierbench parity: the quality gate between tiers and model variants, against real workers
and a real router whose per-pool model map serves `demo` as demo_fp16 on the "GPU" pool and
as demo_int8 on the CPU pool (models/variants.py; the GPU pool runs an EXECUTION_MODE=cpu
worker with min_tier cpu, as in test_router.py).

Thresholds held here (measured with 256 requests x 64 rows, seed 7, against FP32 on CPU:
FP16 max abs 4.9e-4, max rel 1.9e-3, top-1 99.98 %; INT8 3.0e-3, 9.5e-3, 99.76 %;
the broken twin 9.0e-2, 0.23, 77.5 %):
  FP16 vs FP32  --max-abs 1e-3 --max-rel 1e-2 --min-top1 0.99
  INT8 vs FP32  --max-abs 1e-2 --max-rel 5e-2 --min-top1 0.98
"""
import json
import sys

import pytest

from conftest import ROOT, start_worker
from fakehttp import FakeHTTP, echo_id
from test_router import Router, pools_config
from helpers import free_port
from test_tierbench_load import tierbench

sys.path.insert(0, str(ROOT / "models"))
import variants  # noqa: E402

FP16 = ("--max-abs", "1e-3", "--max-rel", "1e-2", "--min-top1", "0.99")
INT8 = ("--max-abs", "1e-2", "--max-rel", "5e-2", "--min-top1", "0.98")


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    """Two CPU workers on the variants repository, a router mapping demo per pool."""
    tmp = tmp_path_factory.mktemp("parity")
    repo = tmp / "repo"
    variants.write_variants(str(repo))
    ws = [start_worker(repo, tmp, env={"EXECUTION_MODE": "cpu"}) for _ in range(2)]
    r = Router(pools_config([("gpu", "gpu", False, [ws[0].port], [("demo", "demo_fp16")]),
                             ("cpu", "cpu", True, [ws[1].port], [("demo", "demo_int8")])]), tmp)
    r.wait_healthy(2)
    yield r, ws
    assert r.stop() == 0
    for w in ws:
        assert w.stop() == 0


def url(port):
    return f"http://127.0.0.1:{port}"


def parity(tmp_path, *args):
    """Runs tierbench parity with --json; returns (rc, report or None, stdout, stderr)."""
    out = tmp_path / f"p{len(list(tmp_path.iterdir()))}.json"
    rc, so, se = tierbench("parity", "--requests", "8", "--rows", "16", *args, "--json", out)
    rep = json.loads(out.read_text()) if out.exists() else None
    return rc, rep, so, se


def figures(rep):
    return {o["name"]: (o.get("max_abs"), o.get("max_rel"), o.get("top1")) for o in rep["outputs"]}


def test_fp16_and_int8_pools_pass_their_gates_a_broken_twin_fails(stack, tmp_path):
    r, (w0, w1) = stack
    fp32 = url(w0.port)
    # FP16 on the "GPU" pool (public traffic) against FP32 on a worker: tight thresholds
    rc, rep, so, se = parity(tmp_path, "--target", f"http://{r.url}", "--header", "X-Data-Class: public",
                             "--baseline", fp32, *FP16)
    assert rc == 0, so + se
    assert rep["pass"] and rep["target_pool"] == "gpu", rep
    f = figures(rep)
    assert 0 < f["probabilities"][0] <= 1e-3 and f["label"][2] >= 0.99, f
    # INT8 on the CPU pool (sensitive traffic may only go there): reasonable thresholds
    rc, rep, so, se = parity(tmp_path, "--target", f"http://{r.url}", "--header", "X-Data-Class: sensitive",
                             "--baseline", fp32, *INT8)
    assert rc == 0, so + se
    assert rep["target_pool"] == "cpu", rep
    f = figures(rep)
    assert 1e-4 < f["probabilities"][0] <= 1e-2 and f["probabilities"][2] >= 0.98, f
    # the same INT8 does not pass FP16's gate: the thresholds bite
    rc, rep, so, se = parity(tmp_path, "--target", f"http://{r.url}", "--header", "X-Data-Class: sensitive",
                             "--baseline", fp32, "--max-abs", "1e-4")
    assert rc == 2 and "BROKEN" in so and not rep["pass"], so + se
    # the two pools of one router against each other, told apart by the data class
    rc, rep, so, se = parity(tmp_path, "--target", f"http://{r.url}", "--header", "X-Data-Class: sensitive",
                             "--baseline", f"http://{r.url}", "--baseline-header", "X-Data-Class: public", *INT8)
    assert rc == 0 and (rep["target_pool"], rep["baseline_pool"]) == ("cpu", "gpu"), so + se
    # perturbed weights: INT8's thresholds fail it, non-zero exit, the output named
    rc, rep, so, se = parity(tmp_path, "--target", url(w1.port), "--model", "demo_broken", "--baseline", fp32,
                             "--baseline-model", "demo", *INT8)
    assert rc == 2, so + se
    bad = {o["name"]: o for o in rep["outputs"]}
    assert not bad["probabilities"]["pass"] and bad["probabilities"]["max_abs"] > 1e-2, rep
    assert "FAIL" in so


def test_record_then_replay_round_trips(stack, tmp_path):
    r, (w0, w1) = stack
    ref = tmp_path / "ref.json"
    rc, so, se = tierbench("parity", "--target", url(w0.port), "--record", ref, "--requests", "5", "--rows", "3",
                           "--seed", "42")
    assert rc == 0, so + se
    doc = json.loads(ref.read_text())
    assert doc["format"] == "tierbench-parity-1" and doc["model"] == "demo" and len(doc["requests"]) == 5
    q = doc["requests"][0]
    assert q["inputs"][0]["name"] == "input" and q["inputs"][0]["shape"] == [3, 4]
    assert {o["name"] for o in q["outputs"]} == {"probabilities", "label"}
    # the same model on the other worker reproduces it exactly (the inputs round-trip bit for bit)
    rc, rep, so, se = parity(tmp_path, "--target", url(w1.port), "--reference", ref, "--max-abs", "0",
                             "--min-top1", "1")
    assert rc == 0, so + se
    assert rep["requests"] == 5 and figures(rep)["probabilities"][0] == 0, rep
    # a new image that serves the broken twin: the replay fails the gate
    rc, rep, so, se = parity(tmp_path, "--target", url(w1.port), "--model", "demo_broken", "--reference", ref, *INT8)
    assert rc == 2, so + se
    # a reference changed by hand: the difference is found where it was put
    probs = next(o for o in doc["requests"][3]["outputs"] if o["name"] == "probabilities")
    probs["data"][1] += 0.5
    ref.write_text(json.dumps(doc))
    rc, rep, so, se = parity(tmp_path, "--target", url(w1.port), "--reference", ref, "--max-abs", "1e-6")
    assert rc == 2 and "request 3, element 1" in so, so + se
    assert abs(figures(rep)["probabilities"][0] - 0.5) < 1e-6, rep


def test_thresholds_file_per_output_and_flags_override(stack, tmp_path):
    r, (w0, w1) = stack
    th = tmp_path / "th.json"
    th.write_text(json.dumps({"max_abs": 1e-2, "min_top1": 0.98, "outputs": {"probabilities": {"max_abs": 1e-5}}}))
    args = ("--target", url(w1.port), "--model", "demo_int8", "--baseline", url(w0.port), "--baseline-model", "demo",
            "--thresholds", th)
    rc, rep, so, se = parity(tmp_path, *args)  # the per-output 1e-5 holds probabilities
    assert rc == 2, so + se
    lim = {o["name"]: o["limits"] for o in rep["outputs"]}
    assert lim["probabilities"]["max_abs"] == 1e-5 and lim["label"]["min_top1"] == 0.98, lim
    rc, rep, so, se = parity(tmp_path, *args, "--max-abs", "1e-2")  # a flag beats the file
    assert rc == 0, so + se


class WrongShape(FakeHTTP):
    """A KServe server whose demo answers one row short, in a chunked reply."""

    def respond(self, c, head, body):
        if head.startswith(b"GET /v2/models/"):
            m = json.dumps({"name": "demo", "inputs": [{"name": "input", "datatype": "FP32", "shape": [-1, 4]}]})
            c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(m), m.encode()))
            return True
        rows = json.loads(body)["inputs"][0]["shape"][0] - 1
        out = json.dumps({"outputs": [{"name": "label", "datatype": "INT64", "shape": [rows], "data": [0] * rows}]})
        half = len(out) // 2
        chunks = b"%x\r\n%s\r\n%x\r\n%s\r\n0\r\n\r\n" % (half, out[:half].encode(), len(out) - half,
                                                          out[half:].encode())
        c.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n" + echo_id(head) + b"\r\n" + chunks)
        return True


def test_structure_breaks_and_failures_have_their_exit_codes(stack, tmp_path):
    r, (w0, w1) = stack
    f = WrongShape()
    try:
        rc, rep, so, se = parity(tmp_path, "--target", url(f.port), "--baseline", url(w0.port))
    finally:
        f.close()
    assert rc == 2 and "shape [15]" in so, so + se  # no thresholds given: structure alone is held
    rc, rep, so, se = parity(tmp_path, "--target", url(w0.port), "--model", "nope", "--baseline", url(w0.port),
                             "--baseline-model", "demo")
    assert rc == 1 and "404" in se and "nope" in se, se
    rc, rep, so, se = parity(tmp_path, "--target", url(free_port()), "--baseline", url(w0.port))
    assert rc == 1 and "connect" in se, se


def test_bad_arguments_and_files_exit_64(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"max_abs": 1, "typo": 2}')
    notref = tmp_path / "notref.json"
    notref.write_text('{"format": "other", "model": "demo", "requests": []}')
    u = "http://127.0.0.1:1"
    for args, needle in [((), "--target"), (("--target", u), "exactly one"),
                         (("--target", u, "--baseline", u, "--record", "x"), "exactly one"),
                         (("--target", "https://x:1", "--baseline", u), "not http://"),
                         (("--target", u, "--baseline", u, "--min-top1", "2"), "--min-top1"),
                         (("--target", u, "--baseline", u, "--header", "no colon"), "--header"),
                         (("--target", u, "--baseline", u, "--model", "../x"), "--model"),
                         (("--target", u, "--baseline", u, "--thresholds", bad), "typo"),
                         (("--target", u, "--reference", notref), "format"),
                         (("--target", u, "--reference", tmp_path / "missing.json"), "missing.json")]:
        rc, so, se = tierbench("parity", *map(str, args))
        assert rc == 64 and needle in se, (args, rc, se)
