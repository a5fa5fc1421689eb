"""tierbench drill against a real router in front of real CPU-tier workers (the "GPU" pool runs
EXECUTION_MODE=cpu workers behind min_tier cpu: this machine has no GPU).

What is held: a GPU worker SIGKILLed under ~100 req/s costs no request (the router retries a
dead backend's connect failures elsewhere), the router stops sending to it within STOP_BOUND_S,
and the pool is whole again after --restart; a rolling restart of both GPU workers costs no
request; and when requests do fail (the only backend killed), the drill counts every one and
exits 2.
"""
import json
import os
import shlex
import signal

from conftest import BIN, SANITIZER_MARKERS, start_worker, run_tierbench as tierbench
from test_router import DEMO, Router, config, pools_config

# The router probes every 100 ms and a connect failure ejects at once; 1.5 s leaves room for
# a loaded machine (two shared cores, the sanitizer build).
STOP_BOUND_S = 1.5


def drill(*args, timeout=40):
    return tierbench("drill", *args, timeout=timeout)


def restart_cmd(tmp_path, port, name):
    """A shell command that starts a CPU worker on `port` again and leaves its pid in a file
    (the drill's children outlive it: the test stops them)."""
    pidfile = tmp_path / f"{name}.pid"
    log = tmp_path / f"{name}.log"
    cmd = (f"echo $$ > {shlex.quote(str(pidfile))}; TIERSERVE_HTTP_ADDRESS=127.0.0.1 TIERSERVE_HTTP_PORT={port} "
           f"EXECUTION_MODE=cpu exec {shlex.quote(BIN)} --model-repository={shlex.quote(str(DEMO))} "
           f"> {shlex.quote(str(log))} 2>&1")
    return cmd, pidfile, log


def stop_pidfile(pidfile, log):
    if not pidfile.exists():
        return
    pid = int(pidfile.read_text())
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    # not our child: wait for the port's owner to go by polling the pid
    import time
    deadline = time.time() + 20
    while time.time() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        os.kill(pid, signal.SIGKILL)
    text = log.read_text(errors="replace") if log.exists() else ""
    assert not [m for m in SANITIZER_MARKERS if m in text], text[-4000:]


def test_gpu_outage_costs_no_request_and_recovers(tmp_path):
    gpus = [start_worker(DEMO, tmp_path, env={"EXECUTION_MODE": "cpu"}) for _ in range(2)]
    cpu = start_worker(DEMO, tmp_path, env={"EXECUTION_MODE": "cpu"})
    r = Router(config([g.port for g in gpus], [cpu.port]), tmp_path)
    victim = gpus[0]
    cmd, pidfile, log = restart_cmd(tmp_path, victim.port, "restarted")
    try:
        r.wait_healthy(3)
        out_json = tmp_path / "drill.json"
        rc, out, err = drill("gpu-outage", "--url", f"http://{r.url}", "--backend", victim.port,
                             "--kill-pid", victim.proc.pid, "--at", 1.5, "--restart", cmd,
                             "--stop-within", STOP_BOUND_S, "--p95-within", 100, "--p95-floor-ms", 50,
                             "--rate", 100, "--fixed", "--duration", 5, "--seed", 3, "--json", out_json)
        print(out, err)
        rep = json.loads(out_json.read_text())
        assert rep["requests"] == 500 and rep["ok"] + rep["failed"] == 500, rep
        assert rep["failed"] == 0, rep
        assert rep["kill_s"] is not None and rep["stop_s"] is not None and rep["stop_s"] <= STOP_BOUND_S, rep
        assert rep["unhealthy_after_kill_s"] is not None, rep
        assert rep["healthy_after_kill_s"] is not None and rep["goal_recovered"], rep
        assert victim.proc.wait(timeout=5) == -signal.SIGKILL
        # the restarted worker is the one the router counts healthy again
        assert pidfile.exists() and int(pidfile.read_text()) == rep["restart_pid"]
        assert r.backend(victim.port)["healthy"], r.status()
        # The P95 goal is judged, not assumed: on a shared 2-core machine a kill and restart
        # can more than double the P95 for reasons that are not the router's. Check that the
        # drill applies its stated rule (--p95-within 100, --p95-floor-ms 50) and exits by it.
        pre, post = rep["p95_before_ms"], rep["p95_after_ms"]
        want = (rep["n_before"] >= 20 and rep["n_after"] >= 20 and
                (post <= pre * 2 or post - pre <= 50))
        assert rep["goal_p95"] == want, rep
        assert rc == (0 if want else 2), (rc, out, err)
    finally:
        stop_pidfile(pidfile, log)
        assert r.stop() == 0
        for w in gpus[1:] + [cpu]:
            w.stop()


def test_gpu_outage_by_injected_fault_costs_no_request(tmp_path):
    """--fault-url: the drill sends inferences straight to an armed worker until its injected
    CUDA error latches it not live; the router must stop sending to it, with no failed request."""
    victim = start_worker(DEMO, tmp_path, env={"EXECUTION_MODE": "cpu", "TIERSERVE_FAULT_INJECT_GPU_RUN": "120"})
    other = start_worker(DEMO, tmp_path, env={"EXECUTION_MODE": "cpu"})
    cpu = start_worker(DEMO, tmp_path, env={"EXECUTION_MODE": "cpu"})
    r = Router(config([victim.port, other.port], [cpu.port]), tmp_path)
    try:
        r.wait_healthy(3)
        out_json = tmp_path / "drill.json"
        # ~50 of the load's requests reach the victim before 1 s: the drill's own fire the 120th run
        rc, out, err = drill("gpu-outage", "--url", f"http://{r.url}", "--fault-url", f"http://{victim.url}",
                             "--fault-requests", 200, "--at", 1, "--stop-within", STOP_BOUND_S,
                             "--p95-within", 100, "--p95-floor-ms", 50,
                             "--rate", 100, "--fixed", "--duration", 3, "--seed", 6, "--json", out_json)
        print(out, err)
        rep = json.loads(out_json.read_text())
        assert rep["error"] == "" and rep["backend"] == victim.url, rep
        assert 1 <= rep["fault_requests"] <= 120, rep
        assert victim.http("GET", "/v2/health/live")[0] == 503  # latched not live by the fault
        assert r.backend(victim.port)["healthy"] is False, r.status()
        assert rep["failed"] == 0 and rep["ok"] == rep["requests"] == 300, rep
        assert rep["stop_s"] is not None and rep["stop_s"] <= STOP_BOUND_S, rep
        assert rc == 0, (rc, out, err)
    finally:
        assert r.stop() == 0
        for w in (victim, other, cpu):
            w.stop()


def test_rolling_restart_of_both_gpu_workers_costs_no_request(tmp_path):
    gpus = [start_worker(DEMO, tmp_path, env={"EXECUTION_MODE": "cpu"}) for _ in range(2)]
    cpu = start_worker(DEMO, tmp_path, env={"EXECUTION_MODE": "cpu"})
    r = Router(config([g.port for g in gpus], [cpu.port]), tmp_path)
    restarts = [restart_cmd(tmp_path, g.port, f"rolled{i}") for i, g in enumerate(gpus)]
    try:
        r.wait_healthy(3)
        out_json = tmp_path / "drill.json"
        args = []
        for g, (cmd, _, _) in zip(gpus, restarts):
            args += ["--worker", f"{g.proc.pid}:{g.port}={cmd}"]
        rc, out, err = drill("rolling", "--url", f"http://{r.url}", *args, "--at", 0.5,
                             "--rate", 100, "--fixed", "--duration", 4, "--seed", 4, "--json", out_json)
        print(out, err)
        rep = json.loads(out_json.read_text())
        assert rep["ok"] + rep["failed"] == rep["requests"] == 400, rep
        assert rep["failed"] == 0, rep
        assert rep["error"] == "" and rep["goal_rolled"], rep
        for g, w, (_, pidfile, _) in zip(gpus, rep["workers"], restarts):
            assert g.proc.wait(timeout=5) == -signal.SIGTERM or g.proc.returncode == 0
            assert w["healthy_s"] is not None and w["healthy_s"] > w["restarted_s"] > w["signalled_s"], w
            assert int(pidfile.read_text()) == w["pid"]
        # one at a time: the second was signalled only after the first was back
        assert rep["workers"][1]["signalled_s"] >= rep["workers"][0]["healthy_s"], rep
        assert rc == 0, (rc, out, err)
        st = r.status()
        assert all(b["healthy"] for p in st["pools"] for b in p["backends"]), st
    finally:
        for _, pidfile, log in restarts:
            stop_pidfile(pidfile, log)
        assert r.stop() == 0
        cpu.stop()


def test_drill_counts_every_failed_request_and_exits_2(tmp_path):
    """The only backend dies and nothing restarts it: every request after the kill fails, and
    the drill's tally must say so (ok + failed == sent, each failure by kind)."""
    w = start_worker(DEMO, tmp_path, env={"EXECUTION_MODE": "cpu"})
    r = Router(pools_config([("cpu", "cpu", True, [w.port], None)]), tmp_path)
    try:
        r.wait_healthy(1)
        out_json = tmp_path / "drill.json"
        rc, out, err = drill("gpu-outage", "--url", f"http://{r.url}", "--backend", f"127.0.0.1:{w.port}",
                             "--kill-pid", w.proc.pid, "--at", 0.6, "--rate", 100, "--fixed", "--duration", 1.5,
                             "--seed", 5, "--json", out_json)
        print(out, err)
        rep = json.loads(out_json.read_text())
        assert rc == 2, (rc, out, err)
        assert rep["requests"] == 150 and rep["ok"] + rep["failed"] == 150, rep
        # at 100 req/s, killed at 0.6 s of 1.5 s: ~90 requests after the kill, all failed
        assert 60 <= rep["failed"] <= 95, rep
        by = rep["failed_by"]
        assert sum(by.values()) == rep["failed"], rep
        assert not rep["goal_no_failed"], rep
        assert "goal 0 failed: MISSED" in out, out
    finally:
        assert r.stop() == 0
