"""tierbench drill surge: a surge replayed through a real router in front of real CPU-tier workers
(the "GPU" pool runs EXECUTION_MODE=cpu workers behind min_tier cpu: this machine has no GPU),
then through the simulator with pool lines `tierbench calibrate` measured on the same workers.

What is held:
- every arrival is accounted for on both sides (the live requests and the simulator's arrivals
  equal the trace's), the report names P95 per priority, each pool's share, the stage changes
  of the GPU pool (from the router's own /metrics) and the cost shares;
- the surge moves the live router's stages (at least one stage up), so the comparison is not
  between two idle runs;
- a model of the stack that is wrong (service times 20x the calibrated ones) is called out:
  exit 2, the P95 rows DISAGREE;
- bad arguments exit 64 with a message naming the problem.
Agreement itself is printed and reported (docs/operate/tuning.md), not asserted: on two shared
cores the live P95 moves with whatever else runs.
"""
import json
import pathlib

from conftest import run_tierbench as tierbench
from test_router import Router, pools_config, slow_workers

POLICY = ("policy:\n  queue: {high: 1.5, low: 0.5}\n  p95_ms: {high: 40, low: 20}\n  require: 2\n"
          "  sustain_s: 0.5\n  cooldown_s: 1\n  stage_hold_s: 0.5\n  rollback_hold_s: 1\n"
          "  stages: [0, 0.5, 1]\nadmission: {queue_timeout_ms: 2000}\n")
SIM_POLICY = ("policy queue.high=1.5,queue.low=0.5,p95_ms.high=40,p95_ms.low=20,require=2,sustain_s=0.5,"
              "cooldown_s=1,stage_hold_s=0.5,rollback_hold_s=1,stages=0/0.5/1\n"
              "probe-interval-ms 100\nqueue-timeout-ms 2000\n")
MAX_IN_FLIGHT = 4
ROWS = 16  # rows per request: about 30 ms of `slow` each, so two GPU-pool workers take ~60/s


def surge_trace(path):
    """Poisson arrivals (fixed seed): 10/s for 12 s, 80/s from 3 s to 7 s (above what the GPU
    pool can serve, wherever this runs), every priority, ROWS rows each."""
    import random
    rng, t, lines = random.Random(7), 0.0, []
    while True:
        t += rng.expovariate(80.0 if 3.0 <= t < 7.0 else 10.0)
        if t >= 12.0:
            break
        prio = rng.choice(("urgent", "normal", "normal", "batch"))
        lines.append(f"{t:.4f},{prio},acme,public,slow,{ROWS}")
    path.write_text("t_s,priority,tenant,data_class,model,size\n" + "\n".join(lines) + "\n")
    return path, len(lines)


def stack(tmp_path, test_repo):
    gpu = slow_workers(tmp_path, test_repo, 2)
    cpu = slow_workers(tmp_path, test_repo, 2)
    pools = [("gpu", "gpu", False, [w.port for w in gpu], None, "cpu"),
             ("cpu", "cpu", True, [w.port for w in cpu], None)]
    cfg = pools_config(pools, POLICY).replace("    backends:", f"    max_in_flight: {MAX_IN_FLIGHT}\n    backends:")
    return gpu, cpu, Router(cfg, tmp_path)


def calibrated(tmp_path, worker, scale=1.0):
    """A sim config: the calibrated pool line for both pools (same workers, same model),
    the router's policy and probe interval."""
    conf = tmp_path / "cal.conf"
    rc, out, err = tierbench("calibrate", "--url", f"http://127.0.0.1:{worker.port}", "--model", "slow",
                             "--rows", str(ROWS), "--out", conf, timeout=120)
    assert rc == 0, out + err
    line = [l for l in conf.read_text().splitlines() if l.startswith("pool ")][0]
    kv = dict(p.split("=", 1) for p in line[5:].split(","))
    for k in ("mean_ms", "p95_ms"):
        kv[k] = f"{float(kv[k]) * scale:.4g}"
    # one runner per worker (TIERSERVE_INSTANCES=1): the knee calibrate finds on a shared
    # machine is not always 1, and the model must say what the stack is
    kv.update(backends="2", max_in_flight=str(MAX_IN_FLIGHT), slots="1")
    lines = []
    for name, kind, extra in (("gpu", "gpu", ",cost=8"), ("cpu", "cpu", ",sensitive=1,cost=1")):
        kv.update(name=name, kind=kind)
        lines.append("pool " + ",".join(f"{k}={v}" for k, v in kv.items() if k not in ("cost", "sensitive")) + extra)
    out_conf = tmp_path / f"sim-{scale}.conf"
    out_conf.write_text("\n".join(lines) + "\n" + SIM_POLICY)
    return out_conf, float(kv["mean_ms"])


def surge(router, conf, tmp_path, *extra):
    js = tmp_path / "surge.json"
    trace, _ = surge_trace(tmp_path / "surge.csv")
    rc, out, err = tierbench("drill", "surge", "--url", f"http://{router.url}", "--sim-config", conf,
                             "--trace", trace, "--connections", "64", "--timeout", "10", "--json", js, *extra,
                             timeout=120)
    assert rc in (0, 2), out + err
    return rc, out, json.loads(js.read_text())


def rows(rep):
    return {r["name"]: r for r in rep["rows"]}


def test_surge_live_and_sim_side_by_side(tmp_path, test_repo):
    gpu, cpu, router = stack(tmp_path, test_repo)
    conf, mean_ms = calibrated(tmp_path, gpu[0])
    rc, out, rep = surge(router, conf, tmp_path)
    print(out)
    r = rows(rep)
    _, n = surge_trace(tmp_path / "expect.csv")
    assert rep["requests"] == rep["sim_arrivals"] == n > 300, rep
    for name in ("p95 urgent", "p95 normal", "p95 batch", "p95 all", "share gpu", "share cpu",
                 "stage ups gpu", "stage downs gpu", "requests lost", "cost share gpu", "cost share cpu"):
        assert name in r, (name, out)
    assert r["stage ups gpu"]["live"] >= 1, out
    assert r["p95 all"]["judged"] and r["share gpu"]["judged"], out
    assert ("verdict: the simulator agrees" in out) == (rc == 0), out


def test_a_wrong_model_of_the_stack_is_called_out(tmp_path, test_repo):
    gpu, cpu, router = stack(tmp_path, test_repo)
    conf, _ = calibrated(tmp_path, gpu[0], scale=20)
    rc, out, rep = surge(router, conf, tmp_path)
    assert rc == 2, out
    r = rows(rep)
    assert r["p95 all"]["judged"] and not r["p95 all"]["agree"], out
    assert "DISAGREE" in out and "calibrate its pools" in out, out


def test_bad_arguments(tmp_path):
    rc, out, err = tierbench("drill", "surge", "--url", "http://127.0.0.1:1", "--rate", "1")
    assert rc == 64 and "--sim-config FILE is required" in err, err
    bad = tmp_path / "bad.conf"
    bad.write_text("pool kind=gpu,mean_ms=oops\n")
    rc, out, err = tierbench("drill", "surge", "--url", "http://127.0.0.1:1", "--sim-config", bad, "--rate", "1")
    assert rc == 64 and "bad.conf:1" in err and "mean_ms" in err, err
    good = tmp_path / "good.conf"
    good.write_text("pool kind=gpu,mean_ms=5\n")
    rc, out, err = tierbench("drill", "surge", "--url", "http://127.0.0.1:1", "--sim-config", good, "--p95-agree", "x")
    assert rc == 64 and "--p95-agree" in err, err
