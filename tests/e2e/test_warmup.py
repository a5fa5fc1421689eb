"""Warm-up: a synthesised warm-up that fails leaves the model serving; a configured one fails it.

The worker synthesises a warm-up request for every model without model_warmup: each input
zero-filled, dynamic dims 1. A model whose inputs carry values (here a Reshape whose target
shape comes from the request) fails that request although it serves real requests, so such a
failure must not stop the worker. A model_warmup sample the user configured that fails is a
load failure, as in Triton.
"""
import json
import shutil

import numpy as np
import onnx
from onnx import TensorProto, helper

from conftest import ROOT, start_worker
from helpers import model_status

MODEL = "reshape_by_request"


def reshape_model():
    """x FP32 [2,3], shape INT64 [1] -> y FP32 [n] = Reshape(x, shape). The synthesised shape is [0],
    which Reshape reads as "copy dim 0": [2] cannot hold 6 elements, so Run() fails; shape
    [6] (or [-1]) flattens x."""
    g = helper.make_graph(
        [helper.make_node("Reshape", ["x", "shape"], ["y"], name="reshape")],
        MODEL,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
         helper.make_tensor_value_info("shape", TensorProto.INT64, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n"])])
    m = helper.make_model(g, producer_name="tierserve-gen", producer_version="1",
                          opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m, full_check=True)
    return m


def make_repo(tmp_path, config=None):
    repo = tmp_path / "repo"
    (repo / MODEL / "1").mkdir(parents=True)
    onnx.save(reshape_model(), str(repo / MODEL / "1" / "model.onnx"))
    if config is not None:
        (repo / MODEL / "config.yaml").write_text(config)
    # a model that warms up fine, to see both values of warmed_up side by side
    shutil.copytree(ROOT / "models" / "demo", repo / "demo", ignore=shutil.ignore_patterns("*.md"))
    return repo


def test_failed_synthesised_warmup_still_serves(tmp_path):
    # default settings: warm-up on, --exit-on-error=true, strict readiness
    w = start_worker(make_repo(tmp_path), tmp_path, env={"EXECUTION_MODE": "cpu"})
    try:
        assert w.http("GET", "/v2/health/ready")[0] == 200
        assert w.http("GET", f"/v2/models/{MODEL}/ready")[0] == 200
        m = model_status(w, MODEL)
        assert m["ready"] is True and m["state"] == "READY", m
        assert m["warmed_up"] is False, m
        # ORT's own reason, naming the node that failed
        assert "reshape" in m["warmup_error"].lower() and "synthesised" in m["warmup_error"], m
        assert "warmup_ms" in m
        demo = model_status(w, "demo")
        assert demo["warmed_up"] is True and demo["warmup_error"] is None, demo

        warns = [l for l in w.log_lines() if l["level"] == "warn" and l.get("model") == MODEL
                 and "warm-up" in l["msg"]]
        assert len(warns) == 1, w.log_text()[-4000:]
        assert m["warmup_error"] in warns[0]["msg"]
        ready = [l for l in w.log_lines() if l["msg"] == "model ready" and l.get("model") == MODEL]
        assert ready and ready[0]["warmed_up"] == "false"

        x = np.arange(6, dtype=np.float32).reshape(2, 3)
        body = json.dumps({"inputs": [
            {"name": "x", "datatype": "FP32", "shape": [2, 3], "data": x.flatten().tolist()},
            {"name": "shape", "datatype": "INT64", "shape": [1], "data": [6]}]}).encode()
        code, _, reply = w.http("POST", f"/v2/models/{MODEL}/infer", body)
        assert code == 200, reply
        out = json.loads(reply)["outputs"][0]
        assert out["name"] == "y" and out["shape"] == [6]
        np.testing.assert_array_equal(np.array(out["data"], dtype=np.float32), x.flatten())
    finally:
        assert w.stop() == 0


def test_failed_synthesised_warmup_keeps_io_binding(tmp_path):
    # The run through the binding fails, and so does a plain Run() of the same input: the
    # input is to blame, not the binding, so the model serves, through its binding.
    w = start_worker(make_repo(tmp_path), tmp_path,
                     env={"EXECUTION_MODE": "cpu", "TIERSERVE_IO_BINDING": "on"})
    try:
        m = model_status(w, MODEL)
        assert m["ready"] is True and m["warmed_up"] is False, m
        assert m["io_binding"] is True and m["io_binding_note"].startswith("on: "), m
        assert "requested shape" in m["warmup_error"], m  # ORT's whole reason, not cut short
        x = np.ones((2, 3), dtype=np.float32)
        body = json.dumps({"inputs": [
            {"name": "x", "datatype": "FP32", "shape": [2, 3], "data": x.flatten().tolist()},
            {"name": "shape", "datatype": "INT64", "shape": [1], "data": [-1]}]}).encode()
        code, _, reply = w.http("POST", f"/v2/models/{MODEL}/infer", body)
        assert code == 200, reply
        assert json.loads(reply)["outputs"][0]["shape"] == [6]
    finally:
        assert w.stop() == 0


def test_warmup_off_reports_not_warmed_up(tmp_path):
    w = start_worker(make_repo(tmp_path), tmp_path, env={"EXECUTION_MODE": "cpu"},
                     args=["--warmup=0"])
    try:
        for name in (MODEL, "demo"):
            m = model_status(w, name)
            assert m["ready"] is True and m["warmed_up"] is False and m["warmup_error"] is None, m
        assert not [l for l in w.log_lines() if l["level"] == "warn"], w.log_text()[-4000:]
    finally:
        assert w.stop() == 0


# A sample the user configured: x given, shape left to the synthesiser (zeros) -> Run() fails.
BAD_SAMPLE = ("model_warmup:\n"
              "  - name: bad_shape\n    count: 1\n"
              "    inputs:\n      x:\n        data_type: TYPE_FP32\n        dims: [2, 3]\n"
              "        zero_data: true\n")


def test_failed_configured_warmup_stops_worker(tmp_path):
    w = start_worker(make_repo(tmp_path, config=BAD_SAMPLE), tmp_path,
                     env={"EXECUTION_MODE": "cpu"}, wait_ready=False)
    assert w.proc.wait(timeout=60) == 1
    failed = [l for l in w.log_lines() if l["msg"].startswith("model failed to load")]
    assert failed and failed[0]["model"] == MODEL, w.log_text()[-4000:]
    assert "bad_shape" in failed[0]["msg"] and "reshape" in failed[0]["msg"].lower()


def test_failed_configured_warmup_unavailable_without_exit_on_error(tmp_path):
    w = start_worker(make_repo(tmp_path, config=BAD_SAMPLE), tmp_path,
                     env={"EXECUTION_MODE": "cpu"}, args=["--exit-on-error=false"],
                     wait_ready=False)
    try:
        assert w.wait_log("server ready")
        assert w.http("GET", "/v2/health/ready")[0] == 503  # strict readiness: a model is down
        assert w.http("GET", f"/v2/models/{MODEL}/ready")[0] != 200
        m = model_status(w, MODEL)
        assert m["ready"] is False and m["state"] == "UNAVAILABLE", m
        assert "bad_shape" in m["reason"] and "reshape" in m["reason"].lower(), m
        assert m["warmed_up"] is False
        assert model_status(w, "demo")["ready"] is True
    finally:
        assert w.stop() == 0
