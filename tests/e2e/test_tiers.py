"""Execution-tier resolution end to end, against the real ONNX Runtime provider libraries.

This machine has no GPU: the TensorRT and CUDA provider libraries are present but their
dependencies (libnvinfer, libcuda/libcublas) are not, so every GPU tier must fail with
ORT's real loader message, and the worker must say so everywhere.
"""
import json
import re
import socket
import subprocess
import tempfile
import threading

import pytest

from conftest import BIN, ROOT, sanitizer_env, start_worker
from helpers import free_port

DEMO_REPO = ROOT / "models"
UNAVAILABLE = re.compile(r"^EP (\w+) unavailable: .*lib\S+: cannot open shared object file")


def msgs(worker):
    return [l["msg"] for l in worker.log_lines()]


def test_auto_falls_back_loudly(tmp_path):
    w = start_worker(DEMO_REPO, tmp_path, env={"EXECUTION_MODE": "auto"})
    try:
        lines = msgs(w)
        failed = [UNAVAILABLE.match(m).group(1) for m in lines if UNAVAILABLE.match(m)]
        assert failed == ["TensorrtExecutionProvider", "CUDAExecutionProvider"], lines[:10]
        i_cpu = lines.index("resolved to CPU only")
        i_active = lines.index("Active EP: CPUExecutionProvider (requested=auto strict=0 tier=cpu-fallback)")
        assert max(i for i, m in enumerate(lines) if UNAVAILABLE.match(m)) < i_cpu < i_active
        code, st = w.get_json("/v2/status")
        assert code == 200
        assert st["tier"] == "cpu-fallback" and st["degraded"] is True
        assert st["requested"] == "auto" and st["strict"] is False
        assert st["active_provider"] == "CPUExecutionProvider"
        assert [a["provider"] for a in st["attempts"]] == ["TensorrtExecutionProvider",
                                                           "CUDAExecutionProvider"]
        assert all(not a["ok"] and "cannot open shared object file" in a["reason"]
                   for a in st["attempts"])
        _, _, metrics = w.http("GET", "/metrics")
        text = metrics.decode()
        assert "tierserve_ep_degraded 1" in text
        assert ('tierserve_execution_provider_info{requested="auto",'
                'active="CPUExecutionProvider",tier="cpu-fallback"} 1') in text
        # degraded is still a working worker: it serves
        code, _, body = w.http("POST", "/v2/models/demo/infer", json.dumps(
            {"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 4],
                         "data": [5.1, 3.5, 1.4, 0.2]}]}).encode())
        assert code == 200, body
    finally:
        assert w.stop() == 0


def test_every_log_line_is_json_without_ansi(tmp_path):
    w = start_worker(DEMO_REPO, tmp_path, env={"EXECUTION_MODE": "auto", "TIERSERVE_ORT_LOG_LEVEL": "info"})
    w.stop()
    text = w.log_text()
    assert "\x1b[" not in text
    for line in text.splitlines():
        obj = json.loads(line)  # raises if any line is not JSON
        assert {"ts", "level", "msg"} <= obj.keys()
    # ORT's own lines came through our logger
    assert any(l.get("source") == "onnxruntime" for l in w.log_lines())


def test_cpu_mode_is_not_degraded(tmp_path):
    w = start_worker(DEMO_REPO, tmp_path, env={"EXECUTION_MODE": "cpu", "STRICT_EP": "1"})
    try:
        lines = msgs(w)
        assert not any(UNAVAILABLE.match(m) for m in lines), "cpu mode must not probe GPU tiers"
        assert "resolved to CPU only" not in lines
        assert "Active EP: CPUExecutionProvider (requested=cpu strict=1 tier=cpu)" in lines
        _, st = w.get_json("/v2/status")
        assert st["tier"] == "cpu" and st["degraded"] is False and st["attempts"] == []
        _, _, metrics = w.http("GET", "/metrics")
        assert "tierserve_ep_degraded 0" in metrics.decode()
    finally:
        assert w.stop() == 0


@pytest.mark.parametrize("mode,degraded_tier", [("tensorrt", "cpu-fallback"), ("cuda", "cpu-fallback")])
def test_pinned_gpu_tier_degrades_without_strict(tmp_path, mode, degraded_tier):
    w = start_worker(DEMO_REPO, tmp_path, env={"EXECUTION_MODE": mode})
    try:
        _, st = w.get_json("/v2/status")
        assert st["requested"] == mode and st["tier"] == degraded_tier and st["degraded"] is True
        warn = [l for l in w.log_lines() if l["msg"].startswith("execution tier degraded")]
        assert warn and warn[0]["level"] == "warn"
        if mode == "cuda":  # a CUDA pin never tries TensorRT
            assert not any("TensorrtExecutionProvider unavailable" in m for m in msgs(w))
    finally:
        assert w.stop() == 0


def run_probing_port(cmd, env, port, timeout=60):
    """Runs cmd to its end while another thread tries to connect to 127.0.0.1:port in a tight
    loop, from before the process starts until after it has exited (the port of a process
    that has exited is always closed: only probing while it runs can see it open).
    Returns (returncode, stderr bytes, connect attempts, attempts that connected)."""
    with socket.socket() as s:
        assert s.connect_ex(("127.0.0.1", port)) != 0, f"port {port} is already taken"
    done = threading.Event()
    counts = {"tries": 0, "connected": 0}

    def probe():
        while True:
            last = done.is_set()  # one more full try after the process has gone
            with socket.socket() as s:
                s.settimeout(1.0)  # a full accept backlog drops SYNs: do not hang on it
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    counts["connected"] += 1
            counts["tries"] += 1
            if last:
                return

    t = threading.Thread(target=probe)
    t.start()
    try:
        with tempfile.TemporaryFile() as err:
            p = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=err)
            try:
                code = p.wait(timeout=timeout)
            finally:
                if p.poll() is None:
                    p.kill()
                    p.wait()
            err.seek(0)
            stderr = err.read()
    finally:
        done.set()
        t.join(timeout=10)
    assert not t.is_alive()
    return code, stderr, counts["tries"], counts["connected"]


@pytest.mark.parametrize("mode", ["tensorrt", "cuda", "auto"])
def test_strict_refuses_with_78_and_never_listens(tmp_path, mode):
    port = free_port()
    env = dict(sanitizer_env(), EXECUTION_MODE=mode, STRICT_EP="1",
               TIERSERVE_HTTP_PORT=str(port), TIERSERVE_HTTP_ADDRESS="127.0.0.1",
               PATH="/usr/bin:/bin")
    code, stderr, tries, connected = run_probing_port([BIN, f"--model-repository={DEMO_REPO}"], env, port)
    assert code == 78, stderr.decode()[-2000:]
    lines = [json.loads(l) for l in stderr.decode().splitlines()]
    refusal = [l for l in lines if "refusing to start" in l["msg"]]
    assert len(refusal) == 1
    msg = refusal[0]["msg"]
    assert refusal[0]["level"] == "error"
    assert f"requested tier {mode}" in msg
    assert re.search(r"lib\S+: cannot open shared object file", msg)
    assert "fix:" in msg and "EXECUTION_MODE" in msg
    assert "\n" not in msg
    assert not any(l["msg"].startswith("listening on") for l in lines)
    # nothing ever listened on the port, at any moment of the process's life
    assert tries >= 100, f"only {tries} connect attempts while the worker ran"
    assert connected == 0, f"{connected} of {tries} connect attempts reached a listening port"


def test_port_probe_sees_a_port_open_only_briefly(tmp_path):
    """The probe above can see a port that a short-lived process opens and closes again."""
    port = free_port()
    code, _, tries, connected = run_probing_port(
        ["/usr/bin/python3", "-c", "import socket, time; s = socket.socket(); "
         f"s.bind(('127.0.0.1', {port})); s.listen(8); time.sleep(0.1)"], None, port)
    assert code == 0 and connected >= 1, (tries, connected)


def test_bad_settings_exit_64(tmp_path):
    for env, args in [({"EXECUTION_MODE": "gpu"}, []), ({}, ["--http-port=notaport"]),
                      ({}, ["--no-such-flag"]), ({"TIERSERVE_MODEL_REPOSITORY": ""}, [])]:
        e = dict(sanitizer_env(), PATH="/usr/bin:/bin", **env)
        cmd = [BIN] + ([f"--model-repository={DEMO_REPO}"] if "TIERSERVE_MODEL_REPOSITORY" not in env else []) + args
        p = subprocess.run(cmd, env=e, capture_output=True, timeout=30)
        assert p.returncode == 64, (env, args, p.stderr.decode())
        assert "bad settings" in p.stderr.decode()
    p = subprocess.run([BIN, "--model-repository=/nonexistent/repo"], capture_output=True,
                       env=dict(sanitizer_env(), EXECUTION_MODE="cpu"), timeout=30)
    assert p.returncode == 64 and b"/nonexistent/repo" in p.stderr


def test_hwmap_command_and_status_hardware(tmp_path):
    p = subprocess.run([BIN, "hwmap"], capture_output=True, timeout=30, env=sanitizer_env() or None)
    assert p.returncode == 0, p.stderr
    hw = json.loads(p.stdout)
    assert hw["cpu"]["cores"] >= 1 and hw["cpu"]["threads"] >= hw["cpu"]["cores"]
    assert hw["cpu"]["numa_nodes"] >= 1
    assert hw["gpus"] == [] and hw["profile"] == "cpu"  # no NVIDIA driver here
    assert isinstance(hw["nics"], list)
    w = start_worker(DEMO_REPO, tmp_path, env={"EXECUTION_MODE": "cpu"})
    try:
        _, st = w.get_json("/v2/status")
        assert st["hardware"]["profile"] == "cpu"
        assert st["hardware"]["cpu"] == hw["cpu"]
    finally:
        w.stop()
