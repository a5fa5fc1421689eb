"""tierbench sim and gen as an operator runs them: the real binary, its files and exit codes.

The simulator's properties (determinism, accounting, M/M/c, flap-bait, failover) are unit
tests (tests/unit/test_sim.c); here: the command line, the outputs it writes, the traces it
ships, and how it refuses bad input.
"""
import json
import os
import subprocess
import xml.etree.ElementTree as ET

from conftest import ROOT, sanitizer_env, TIERBENCH, run_tierbench as tierbench

TRACES = ROOT / "tools" / "traces"


def test_sim_writes_the_same_bytes_in_every_run(tmp_path):
    outs = []
    for run in ("a", "b"):
        d = tmp_path / run
        d.mkdir()
        rc, stdout, err = tierbench("sim", "--trace", TRACES / "surge.csv", "--json", d / "s.json", "--csv",
                                    d / "s.csv", "--timeline", d / "t.csv", "--svg", d / "t.svg")
        assert rc == 0, err
        outs.append([stdout] + [(d / f).read_bytes() for f in ("s.json", "s.csv", "t.csv", "t.svg")])
    assert outs[0] == outs[1]
    svg = ET.fromstring(outs[0][4])
    lines = svg.findall("{http://www.w3.org/2000/svg}polyline")
    assert len(lines) == 4 and all(len(l.get("points").split()) > 200 for l in lines)  # one point per second
    rc, stdout, err = tierbench("sim", "--trace", TRACES / "surge.csv", "--seed", "2")
    assert rc == 0, err
    assert stdout != outs[0][0]


def test_json_summary_adds_up(tmp_path):
    rc, _, err = tierbench("sim", "--trace", TRACES / "gpu-outage.csv", "--quiet", "--json", tmp_path / "s.json")
    assert rc == 0, err
    s = json.loads((tmp_path / "s.json").read_text())
    lines = [l for l in (TRACES / "gpu-outage.csv").read_text().splitlines()
             if l and not l.startswith(("#", "t_s,")) and ",event," not in l]
    assert s["arrivals"] == len(lines)
    total = 0
    for name in ("urgent", "normal", "batch"):
        p = s["priorities"][name]
        ends = sum(p[k] for k in ("served", "refused", "queue_timeout", "deadline", "failed"))
        assert ends == p["arrivals"], (name, p)
        assert sum(p["served_by_pool"].values()) == p["served"]
        total += p["arrivals"]
    assert total == s["arrivals"]
    assert abs(sum(p["share"] for p in s["pools"]) - 1) < 1e-9
    [f] = s["failovers"]
    assert f["t_dead"] == 60.1 and 0 < f["delay_s"] <= 0.25
    gpu = next(p for p in s["pools"] if p["name"] == "gpu")
    assert gpu["dead_tries_in_failover"] == 0
    kinds = [e["event"] for e in s["policy"]["events"]]
    assert kinds[0] == "hard_failover" and "gpu_recovered" in kinds and kinds[-1] == "stage_down"


def test_gen_then_sim_replays_every_line(tmp_path):
    trace = tmp_path / "t.csv"
    rc, _, err = tierbench("gen", "--rate", "20", "--duration", "30", "--fixed", "--kill", "10:cpu:1", "--out", trace)
    assert rc == 0, err
    text = trace.read_text().splitlines()
    assert text[0] == "t_s,priority,tenant,data_class,model,size"
    assert "10.0000,event,kill,cpu,1" in text
    assert len([l for l in text[1:] if ",event," not in l]) == 600  # evenly spaced: exactly rate x duration
    rc, stdout, err = tierbench("sim", "--trace", trace, "--json", "-", "--quiet")
    assert rc == 0, err
    assert json.loads(stdout)["arrivals"] == 600


def test_shipped_traces_are_small_and_regenerate_exactly(tmp_path):
    subprocess.run(["sh", str(TRACES / "make.sh"), TIERBENCH, str(tmp_path)], check=True, timeout=60,
                   env=dict(os.environ, **sanitizer_env()))
    names = sorted(p.name for p in TRACES.glob("*.csv"))
    assert names == ["flap-bait.csv", "gpu-outage.csv", "steady.csv", "surge.csv"]
    for n in names:
        assert (TRACES / n).stat().st_size < 200 * 1024, n
        assert (TRACES / n).read_bytes() == (tmp_path / n).read_bytes(), n


def test_config_file_and_flags(tmp_path):
    cfg = tmp_path / "sim.conf"
    cfg.write_text("# one GPU pool, one CPU pool\n"
                   "pool kind=gpu,name=big,backends=3,mean_ms=30,p95_ms=60,cost=10\n"
                   "pool kind=cpu,name=small,backends=2\n"
                   "policy stages=0/0.5/1,sustain_s=2\n")
    rc, stdout, err = tierbench("sim", "--config", cfg, "--rate", "5", "--duration", "20", "--json", "-", "--quiet")
    assert rc == 0, err
    s = json.loads(stdout)
    assert [(p["name"], p["kind"], p["backends"]) for p in s["pools"]] == [("big", "gpu", 3), ("small", "cpu", 2)]


def test_bad_input_is_refused_with_the_place_named(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("t_s,priority,tenant,data_class,model,size\n1.0,normal,acme,public,demo,1\n"
                   "2.0,urgnet,acme,public,demo,1\n")
    rc, _, err = tierbench("sim", "--trace", bad)
    assert rc == 64
    assert "bad.csv:3: priority: 'urgnet' is not urgent, normal or batch" in err
    bad.write_text("5.0,normal,acme,public,demo,1\n4.0,normal,acme,public,demo,1\n")
    rc, _, err = tierbench("sim", "--trace", bad)
    assert rc == 64 and "bad.csv:2: t_s: 4 is before the line above (5)" in err
    bad.write_text("1.0,normal,acme,public,demo,1," + "x" * 2000 + "\n")
    rc, _, err = tierbench("sim", "--trace", bad)
    assert rc == 64 and "bad.csv:1: line longer than 1024 bytes" in err
    bad.write_bytes(b"1.0,normal,ac\x00me,public,demo,1\n")
    rc, _, err = tierbench("sim", "--trace", bad)
    assert rc == 64 and "bad.csv:1: a NUL byte in the line" in err
    bad.write_text("1.0,event,kill,tpu,all\n")
    rc, _, err = tierbench("sim", "--trace", bad)
    assert rc == 64 and "no pool named 'tpu'" in err
    rc, _, err = tierbench("sim", "--pool", "kind=gpu,mean_ms=100,p95_ms=900")
    assert rc == 64 and "pool gpu: a lognormal's p95_ms must be above its mean_ms and at most 3.87 x it" in err
    rc, _, err = tierbench("sim", "--policy", "queue.high=1,queue.low=2")
    assert rc == 64 and "queue_per_backend: low mark 2 must be below the high mark 1" in err
    rc, _, err = tierbench("sim", "--trace", TRACES / "steady.csv", "--rate", "5")
    assert rc == 64 and "not both" in err
    rc, _, err = tierbench("sim", "--bogus", "1")
    assert rc == 64 and "unknown option --bogus" in err
    rc, _, err = tierbench("frobnicate")
    assert rc == 64 and "unknown command" in err


CONFIGS = ROOT / "tools" / "tierbench" / "configs"


def surge_figures(conf, tmp_path):
    rc, _, err = tierbench("sim", "--config", CONFIGS / "ref-surge.conf", "--config", CONFIGS / conf, "--quiet",
                           "--json", tmp_path / (conf + ".json"))
    assert rc == 0, err
    s = json.loads((tmp_path / (conf + ".json")).read_text())
    a = s["priorities"]["all"]
    return a["throughput_rps"], s["cost"]["provisioned"], s["priorities"]["normal"]["latency_ms"]["p95"]


def test_shipped_hybrid_beats_the_guidance_on_the_surge_trace(tmp_path):
    """docs/operate/tuning.md, "The reference table": a policy or routing change that breaks
    one of these three fails here."""
    gpu_rps, gpu_cost, gpu_p95 = surge_figures("ref-gpu-only.conf", tmp_path)
    rps, cost, p95 = surge_figures("ref-hybrid.conf", tmp_path)
    assert rps >= 0.85 * gpu_rps, (rps, gpu_rps)
    assert cost <= 0.50 * gpu_cost, (cost, gpu_cost)
    assert p95 <= 1.25 * gpu_p95, (p95, gpu_p95)


def sim_json(trace, conf, tmp_path, *extra):
    out = tmp_path / f"{trace}-{conf}.json"
    rc, _, err = tierbench("sim", "--trace", TRACES / f"{trace}.csv", "--config", CONFIGS / conf, *extra, "--quiet",
                           "--json", out)
    assert rc == 0, err
    return json.loads(out.read_text())


# the stage changes the bar allows on each trace: 2 per surge (flap-bait has two, steady none)
SURGES = {"steady": 0, "surge": 1, "flap-bait": 2}


def test_shipped_hybrid_meets_the_bar_on_the_shipped_traces(tmp_path):
    """docs/operate/tuning.md, "The shipped traces against the bar": hybrid.conf against
    ref-gpu-one.conf (the GPU-only fleet sized for the traces' 50/s peak) on every shipped trace:
    every urgent request served, urgent P95 within 1.25x of GPU-only's, at least 99.5 % of normal
    served, at most half of GPU-only's cost, at most 2 stage changes per surge. The hybrid keeps
    sensitive data off its GPUs, which a GPU-only fleet cannot: the 1.25x compares the public
    urgent requests (both fleets serve them on GPUs), and every urgent request, sensitive ones on
    CPUs included, stays within 375 ms (1.25x the guidance's CPU-only 300 ms). On gpu-outage,
    where GPU-only itself refuses a quarter of the traffic, that 375 ms is the urgent bound.
    Checked at two seeds: the margin on normal requests through the outage is a few tenths of a
    percent."""
    pools = [l for l in (CONFIGS / "hybrid.conf").read_text().splitlines() if l.startswith("pool ")]
    assert [p for p in pools if "kind=gpu" in p and "sensitive=1" not in p] == pools[:1], pools  # GPU: public only
    for seed in ("1", "2"):
        for trace in ("steady", "surge", "flap-bait", "gpu-outage"):
            ref = sim_json(trace, "ref-gpu-one.conf", tmp_path, "--seed", seed)
            hyb = sim_json(trace, "hybrid.conf", tmp_path, "--seed", seed)
            u, n = hyb["priorities"]["urgent"], hyb["priorities"]["normal"]
            where = (seed, trace)
            assert u["served"] == u["arrivals"], (where, u)
            assert n["served"] >= 0.995 * n["arrivals"], (where, n)
            # the cost is provisioned backend-hours x price, written to 6 digits
            assert hyb["cost"]["provisioned"] <= 0.5 * ref["cost"]["provisioned"] * (1 + 1e-5), (where, hyb["cost"])
            assert u["latency_ms"]["p95"] <= 375, (where, u["latency_ms"])
            # the sensitive urgent requests ran on CPUs: the P95 over all of them is not GPU latency
            assert u["latency_public_ms"]["count"] < u["latency_ms"]["count"], (where, u)
            if trace == "gpu-outage":
                ru = ref["priorities"]["urgent"]
                assert ru["served"] < 0.8 * ru["arrivals"], ru  # why GPU-only is no reference there
            else:
                p95 = u["latency_public_ms"]["p95"]
                assert p95 <= 1.25 * ref["priorities"]["urgent"]["latency_public_ms"]["p95"], (where, p95)
                pol = hyb["policy"]
                assert pol["stage_ups"] + pol["stage_downs"] <= 2 * SURGES[trace], (where, pol["stage_ups"])


def test_sweep_prints_the_frontier_and_its_csv(tmp_path):
    args = ("sim", "--trace", TRACES / "surge.csv", "--sweep", "queue.high=4/16,p95_ms.high=150/400",
            "--sweep", "stage_hold_s=5/10", "--sweep-csv", tmp_path / "f.csv")
    rc, out, err = tierbench(*args)
    assert rc == 0, err
    rows = (tmp_path / "f.csv").read_text().splitlines()
    assert rows[0].startswith("queue.high,p95_ms.high,stage_hold_s,usage_cost,")
    assert len(rows) == 1 + 8
    frontier = [r for r in rows[1:] if r.endswith(",1")]
    assert frontier and out.startswith("sweep: 8 runs, 0 skipped")
    # the table lists exactly the frontier's points
    table = [l for l in out.splitlines()[3:] if l.strip()]
    assert len(table) == len(frontier)
    rc2, out2, _ = tierbench(*args)
    assert rc2 == 0 and out2 == out
    rc, _, err = tierbench("sim", "--trace", TRACES / "surge.csv", "--sweep", "queue.hi=1/2")
    assert rc == 64 and "queue.hi" in err
