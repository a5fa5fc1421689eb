"""Worker lifecycle: GPU fault latch, SIGTERM drain, model load failures, warm-up."""
import json
import pathlib
import shutil
import signal
import threading
import time

import numpy as np

from conftest import ROOT, start_worker
import tritonlike

DEMO_REPO = ROOT / "models"
DEMO_BODY = json.dumps({"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 4],
                                    "data": [5.1, 3.5, 1.4, 0.2]}]}).encode()


def infer_demo(w):
    return w.http("POST", "/v2/models/demo/infer", DEMO_BODY)


def test_gpu_fault_latches_not_live(tmp_path):
    w = start_worker(DEMO_REPO, tmp_path, env={"EXECUTION_MODE": "cpu",
                                                "TIERSERVE_FAULT_INJECT_GPU_RUN": "3"})
    try:
        assert infer_demo(w)[0] == 200
        assert infer_demo(w)[0] == 200
        code, _, body = infer_demo(w)  # the third run reports a CUDA error
        assert code == 500
        assert "CUDA failure" in json.loads(body)["error"]
        fault = [l for l in w.log_lines() if l["msg"].startswith("GPU fault: ")]
        assert len(fault) == 1 and fault[0]["msg"].endswith("; marking not live")
        assert fault[0]["level"] == "error" and fault[0]["model"] == "demo"
        assert w.http("GET", "/v2/health/live")[0] == 503
        assert w.http("GET", "/v2/health/ready")[0] == 503
        assert w.http("GET", "/v2/models/demo/ready")[0] == 503
        _, st = w.get_json("/v2/status")
        assert st["live"] is False and st["ready"] is False
        assert "CUDA failure" in st["gpu_fault"]
        metrics = w.http("GET", "/metrics")[2].decode()
        assert "tierserve_gpu_fault 1" in metrics and "tierserve_live 0" in metrics
        code, headers, body = infer_demo(w)  # a faulted worker refuses work, so a router retries
        assert code == 503 and "GPU fault" in json.loads(body)["error"]
        assert headers.get("Retry-After")
    finally:
        assert w.stop() == 0


def test_sigterm_drains_every_request(tmp_path, test_repo):
    w = start_worker(test_repo, tmp_path, env={"EXECUTION_MODE": "cpu", "TIERSERVE_INSTANCES": "1",
                                                "TIERSERVE_QUEUE_SIZE": "64"})
    # every request must still be running or queued when SIGTERM arrives: size one from a
    # request timed here (the worker's own thread choice and the machine set its speed), so
    # that eight of them, one at a time, take about two seconds
    c0 = tritonlike.TritonLikeClient(w.url)
    probe = np.random.default_rng(0).standard_normal((64, 512)).astype(np.float32)
    c0.infer("slow", [("x", probe, "FP32")])  # warm
    t0 = time.monotonic()
    c0.infer("slow", [("x", probe, "FP32")])
    per_row = (time.monotonic() - t0) / 64
    rows = int(min(8192, max(64, 0.25 / max(per_row, 1e-6))))
    x = np.random.default_rng(1).standard_normal((rows, 512)).astype(np.float32)
    results, errors = [], []

    def one():
        try:
            c = tritonlike.TritonLikeClient(w.url)
            r = c.infer("slow", [("x", x, "FP32")])
            results.append(r.as_numpy("y"))
        except Exception as e:  # noqa: BLE001 - the assertion below reports it
            errors.append(repr(e))

    threads = [threading.Thread(target=one) for _ in range(8)]
    for t in threads:
        t.start()
    deadline = time.time() + 10
    while time.time() < deadline:  # wait until they are all queued or running
        _, st = w.get_json("/v2/status")
        if st["in_flight"] == 8:
            break
        time.sleep(0.01)
    assert st["in_flight"] == 8, st
    w.proc.send_signal(signal.SIGTERM)
    # while draining (the worker says when it starts): not ready, still live, new work
    # refused with 503; the 8 requests keep it draining for a while yet
    assert w.wait_log("SIGTERM received: not ready; draining", timeout=10), w.log_text()[-2000:]
    assert w.proc.poll() is None, "the worker exited before the drain could be observed"
    assert w.http("GET", "/v2/health/ready")[0] == 503
    assert w.http("GET", "/v2/health/live")[0] == 200
    code, headers, _ = w.http("POST", "/v2/models/demo/infer", DEMO_BODY)
    assert code == 503 and headers.get("Retry-After")
    for t in threads:
        t.join(timeout=60)
    assert w.proc.wait(timeout=30) == 0
    assert errors == [] and len(results) == 8
    for y in results[1:]:
        np.testing.assert_array_equal(y, results[0])
    msgs = [l["msg"] for l in w.log_lines()]
    assert any(m.startswith("SIGTERM received: not ready; draining") for m in msgs)
    assert "drained: no request in flight; exiting" in msgs


def make_repo(tmp_path, broken=False, config=None):
    repo = tmp_path / "repo"
    shutil.copytree(DEMO_REPO / "demo", repo / "demo", ignore=shutil.ignore_patterns("*.md"))
    if config is not None:
        (repo / "demo" / "config.yaml").write_text(config)
    if broken:
        (repo / "broken" / "1").mkdir(parents=True)
        (repo / "broken" / "1" / "model.onnx").write_bytes(b"this is not an onnx model")
    return repo


def test_failed_model_stops_worker_by_default(tmp_path):
    w = start_worker(make_repo(tmp_path, broken=True), tmp_path, env={"EXECUTION_MODE": "cpu"},
                     wait_ready=False)
    assert w.proc.wait(timeout=60) == 1
    failed = [l for l in w.log_lines() if l["msg"].startswith("model failed to load")]
    assert failed and failed[0]["model"] == "broken"
    assert any("--exit-on-error" in l["msg"] for l in w.log_lines())


def test_failed_model_with_exit_on_error_off(tmp_path):
    repo = make_repo(tmp_path, broken=True)
    w = start_worker(repo, tmp_path, env={"EXECUTION_MODE": "cpu"}, args=["--exit-on-error=false"],
                     wait_ready=False)
    try:
        assert w.wait_log("server ready")
        assert w.http("GET", "/v2/health/ready")[0] == 503  # strict readiness: a model is down
        _, st = w.get_json("/v2/status")
        broken = [m for m in st["models"] if m["name"] == "broken"][0]
        assert broken["state"] == "UNAVAILABLE" and broken["reason"]
        assert infer_demo(w)[0] == 200  # the healthy model serves
        code, _, body = w.http("POST", "/v2/models/broken/infer", DEMO_BODY)
        assert code == 503 and "unavailable" in json.loads(body)["error"]
    finally:
        assert w.stop() == 0
    w = start_worker(repo, tmp_path, env={"EXECUTION_MODE": "cpu"},
                     args=["--exit-on-error=false", "--strict-readiness=false"])
    try:
        assert w.http("GET", "/v2/health/ready")[0] == 200
    finally:
        assert w.stop() == 0


def test_configured_warmup_runs_before_ready(tmp_path):
    cfg = ("model_warmup:\n"
           "  - name: iris_batch\n    batch_size: 4\n    count: 3\n"
           "    inputs:\n      input:\n        data_type: TYPE_FP32\n        dims: [4]\n"
           "        random_data: true\n")
    w = start_worker(make_repo(tmp_path, config=cfg), tmp_path, env={"EXECUTION_MODE": "cpu"})
    try:
        msgs = [l["msg"] for l in w.log_lines()]
        i_warm = msgs.index("warm-up sample 1/1 (iris_batch) done: 3 run(s)")
        i_ready = msgs.index("model ready")
        assert i_warm < i_ready < next(i for i, m in enumerate(msgs) if m.startswith("server ready"))
        ready = [l for l in w.log_lines() if l["msg"] == "model ready"][0]
        assert float(ready["warmup_ms"]) > 0 and float(ready["load_ms"]) >= float(ready["warmup_ms"])
        _, st = w.get_json("/v2/status")
        assert st["models"][0]["warmup_ms"] > 0
    finally:
        assert w.stop() == 0


def test_bad_config_names_key_and_line(tmp_path):
    cfg = "max_batch_size: 4\ndynamic_batching:\n  max_queue_delay_usec: 100\n"
    w = start_worker(make_repo(tmp_path, config=cfg), tmp_path, env={"EXECUTION_MODE": "cpu"},
                     wait_ready=False)
    assert w.proc.wait(timeout=60) == 1
    failed = [l["msg"] for l in w.log_lines() if l["msg"].startswith("model failed to load")]
    assert failed and "config.yaml:3:" in failed[0] and "max_queue_delay_usec" in failed[0]
