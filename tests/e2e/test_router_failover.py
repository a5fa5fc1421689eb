"""tierrouter failover timing against real workers: a dead GPU pool is failed over within one
probe interval (plus the probe's round trip), with no traffic to tell the router earlier.

The "GPU" worker runs EXECUTION_MODE=cpu behind a pool with min_tier cpu (this machine has no
GPU); the policy cannot tell the difference.
"""
import datetime
import os
import re
import signal
import time

from conftest import start_worker
from test_router import DEMO, Router, config

INTERVAL_S = 1.0  # long, so that one interval and two are far apart
# Where in the tick cycle the worker dies: 0.3 s after a tick (whose probe has been answered).
# The next probe finds it dead 0.7 s later; acting on that answer at once gives ~0.7 s, waiting
# for the tick after (the old router) ~1.7 s.
KILL_PHASE_S = 0.3
# One interval plus the probe's round trip is the bound; 0.3 s more for a loaded machine (two
# shared cores, the sanitizer build). Still well under the ~1.7 s of acting a tick late.
BOUND_S = INTERVAL_S + 0.3


def log_time(ts):
    """A log line's ts (src/common/log.c: gettimeofday, UTC, microseconds) as Unix time."""
    return datetime.datetime.strptime(ts, "%Y-%m-%dT%H:%M:%S.%fZ").replace(
        tzinfo=datetime.timezone.utc).timestamp()


def first_line(r, pattern, pool):
    for line in r.log_lines():
        if re.match(pattern, line.get("msg", "")) and line.get("pool") == pool:
            return line
    return None


def test_idle_gpu_pool_fails_over_within_one_probe_interval(tmp_path):
    gpu = start_worker(DEMO, tmp_path, env={"EXECUTION_MODE": "cpu"})
    cpu = start_worker(DEMO, tmp_path, env={"EXECUTION_MODE": "cpu"})
    r = Router(config([gpu.port], [cpu.port]).replace("probe_interval_ms: 100\n",
                                                      f"probe_interval_ms: {int(INTERVAL_S * 1000)}\n"), tmp_path)
    try:
        r.wait_healthy(2)
        # The tick is a persistent timer added just before the "listening on" line: it fires
        # every interval from then on (libevent reschedules a timer from its last due time).
        listening = next(line for line in r.log_lines() if line.get("msg", "").startswith("tierrouter "))
        started = log_time(listening["ts"])
        now = time.time()
        ticks = int((now - started) / INTERVAL_S) + 1
        kill_at = started + ticks * INTERVAL_S + KILL_PHASE_S
        time.sleep(max(0.0, kill_at - time.time()))
        assert first_line(r, "policy hard_failover", "gpu") is None, "failed over before the kill"
        killed = time.time()  # before the kill: the measure can only come out longer
        os.kill(gpu.proc.pid, signal.SIGKILL)
        gpu.proc.wait(timeout=10)
        deadline = time.monotonic() + 5 * INTERVAL_S
        line = None
        while time.monotonic() < deadline and line is None:
            line = first_line(r, "policy hard_failover", "gpu")
            time.sleep(0.01)
        assert line, r.log.read_text()[-4000:]
        delay = log_time(line["ts"]) - killed
        unhealthy = first_line(r, r"backend \S+ is now unhealthy", "gpu")
        print(f"killed {(killed - started) % INTERVAL_S:.3f} s after a tick: "
              f"hard failover {delay:.3f} s after the kill (bound {BOUND_S:.1f} s)")
        assert line["healthy_gpu_backends"] == "0" and line["stage_to"] == "3", line
        # the probe answer that found it dead is what turned failover on, not a later tick
        assert unhealthy and "probe failed" in unhealthy["msg"], unhealthy
        assert log_time(unhealthy["ts"]) <= log_time(line["ts"])
        assert 0 < delay < BOUND_S, (f"hard failover {delay:.3f} s after the kill: more than one probe "
                                     f"interval ({INTERVAL_S} s) plus margin")
        assert r.status()["hard_failover"] is True
    finally:
        assert r.stop() == 0
        cpu.stop()
