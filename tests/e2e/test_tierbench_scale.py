"""tierbench sim's autoscaling and prices (issue 26): the scaler the simulator models is the one
deploy/k8s deploys, a scaled-down or preempted backend drains before it goes, and what a
fleet costs follows its price classes.

The HPA check reads deploy/k8s/base/pool-{gpu,cpu}/hpa.yaml and the settings the simulator
reports for an autoscaled pool of each kind (its defaults), and fails on any difference: a
change to one without the other would make every simulated day answer for a fleet that is
not deployed.
"""
import json

import yaml

from conftest import ROOT, run_tierbench

K8S = ROOT / "deploy" / "k8s" / "base"


def sim_json(*args):
    rc, out, err = run_tierbench("sim", *args, "--json", "-", "--quiet")
    assert rc == 0, err
    return json.loads(out)


def hpa(pool):
    return yaml.safe_load((K8S / f"pool-{pool}" / "hpa.yaml").read_text())


def rates(policies):
    return [{"type": p["type"], "value": float(p["value"]), "period_s": float(p["periodSeconds"])} for p in policies]


def test_sim_scaler_defaults_are_the_deployed_hpas():
    h = {k: hpa(k) for k in ("gpu", "cpu")}
    # an autoscaled pool of each kind, every scaler setting left at the simulator's default
    # except max (a fixed pool unless it is given): the HPA's own
    res = sim_json("--rate", "2", "--duration", "30",
                   "--pool", f"kind=gpu,name=gpu,backends={h['gpu']['spec']['minReplicas']},"
                             f"max={h['gpu']['spec']['maxReplicas']}",
                   "--pool", f"kind=cpu,name=cpu,backends={h['cpu']['spec']['minReplicas']},"
                             f"max={h['cpu']['spec']['maxReplicas']}")
    for p in res["pools"]:
        spec = h[p["kind"]]["spec"]
        a = p["autoscale"]
        (m,) = spec["metrics"]
        assert m["type"] == "Pods" and m["pods"]["metric"]["name"] == "tierserve_queue_depth"
        assert a["metric"] == "queue"  # the workers' queue depth, averaged per pod
        assert m["pods"]["target"]["type"] == "AverageValue"
        assert a["target"] == float(m["pods"]["target"]["averageValue"]), p["kind"]
        assert a["min"] == spec["minReplicas"], p["kind"]
        up, down = spec["behavior"]["scaleUp"], spec["behavior"]["scaleDown"]
        assert a["up_window_s"] == up["stabilizationWindowSeconds"], p["kind"]
        assert a["down_window_s"] == down["stabilizationWindowSeconds"], p["kind"]
        assert a["up"] == rates(up["policies"]), p["kind"]
        assert a["down"] == rates(down["policies"]), p["kind"]
        assert up.get("selectPolicy", "Max") == "Max" and down.get("selectPolicy", "Max") == "Max"
        assert a["tolerance"] == 0.1 and a["sync_s"] == 15  # the controller's defaults


def wave_pools(extra_cpu=""):
    # a calm GPU pool and an autoscaled CPU pool that takes every request (the GPU serves no
    # model of the trace), fast cold starts so the day fits in minutes
    return ("--pool", "kind=gpu,name=gpu,backends=1,models=none",
            "--pool", "kind=cpu,name=cpu,backends=2,min=2,max=12,max_in_flight=4,slots=1,mean_ms=100,p95_ms=150,"
                      "scale_metric=desired,provision_s=5,pull_s=3,load_s=1,warmup_s=1,up_window_s=15,"
                      "down_window_s=60,up=pods:4:30,down=pods:2:30" + extra_cpu)


def test_scaling_follows_the_load_and_drains_lose_nothing():
    # quiet, a long busy stretch, quiet again: the pool grows, then shrinks by draining
    res = sim_json("--rate", "8", "--duration", "900", "--surge", "200:300:6", "--seed", "3", *wave_pools())
    cpu = next(p for p in res["pools"] if p["name"] == "cpu")
    a = cpu["autoscale"]
    assert a["started"] >= 3 and a["removed"] >= 3, a
    assert a["peak_backends"] > 4 and a["low_backends"] == 2, a
    allp = res["priorities"]["all"]
    # a backend removed by the scaler drained first: no request failed, none was cut and
    # retried elsewhere
    assert allp["failed"] == 0, allp
    assert res["retries"] == 0 and cpu["dead_tries"] == 0, (res["retries"], cpu["dead_tries"])
    # it paid for what it held, not for its maximum the whole time
    assert 2 * res["duration_s"] / 3600 < cpu["backend_hours"] < 12 * res["duration_s"] / 3600
    # a fixed pool of the same peak size costs more
    fixed = sim_json("--rate", "8", "--duration", "900", "--surge", "200:300:6", "--seed", "3",
                     "--pool", "kind=gpu,name=gpu,backends=1,models=none",
                     "--pool", f"kind=cpu,name=cpu,backends={a['peak_backends']},max_in_flight=4,slots=1,"
                               "mean_ms=100,p95_ms=150")
    assert cpu["cost"] < next(p for p in fixed["pools"] if p["name"] == "cpu")["cost"]


def test_spot_preemption_with_a_notice_drains_first():
    # spot backends preempted about every 2 minutes each: with a notice longer than a request
    # the router stops sending to them first and nothing is lost; with no notice, requests
    # on them are cut and must be retried
    common = ("--rate", "20", "--duration", "600", "--seed", "5")
    spot = ",spot=1,preempt_per_h=30,min=4,backends=4"
    res = sim_json(*common, *wave_pools(spot + ",notice_s=10"))
    cpu = next(p for p in res["pools"] if p["name"] == "cpu")
    assert cpu["autoscale"]["preempted"] >= 5, cpu["autoscale"]
    assert cpu["dead_tries"] == 0 and res["retries"] == 0
    assert res["priorities"]["all"]["failed"] == 0
    cut = sim_json(*common, *wave_pools(spot + ",notice_s=0"))
    assert next(p for p in cut["pools"] if p["name"] == "cpu")["autoscale"]["preempted"] >= 5
    assert cut["retries"] > 0  # requests on a backend preempted without notice were reset
    # spot costs less than on demand for the same backend-hours
    ondemand = sim_json(*common, *wave_pools(",min=4,backends=4"))
    od = next(p for p in ondemand["pools"] if p["name"] == "cpu")
    assert cpu["cost"] / cpu["backend_hours"] < od["cost"] / od["backend_hours"]


def test_a_fixed_spot_pool_replaces_what_is_preempted():
    # a fixed pool (no min/max) on spot: its Deployment's ReplicaSet replaces a preempted
    # backend, so the pool keeps its 2 backends (paid) and keeps serving; before, the first
    # preemption left it one short for the rest of the run (0.175 backend-hours of 0.333 here)
    res = sim_json("--rate", "20", "--duration", "600", "--seed", "5",
                   "--pool", "kind=gpu,name=gpu,backends=1",
                   "--pool", "kind=cpu,name=cpu,sensitive=1,backends=2,spot=1,preempt_per_h=30,notice_s=10")
    cpu = next(p for p in res["pools"] if p["name"] == "cpu")
    hours = res["duration_s"] / 3600
    assert cpu["backend_hours"] >= 0.98 * 2 * hours, (cpu["backend_hours"], hours)


def test_reserved_backends_are_paid_always():
    # 3 reserved on a pool that never holds more than 2: paid for 3 the whole time, at the
    # reserved price
    res = sim_json("--rate", "1", "--duration", "360",
                   "--pool", "kind=gpu,name=gpu,backends=1,models=none",
                   "--pool", "kind=cpu,name=cpu,backends=2,reserved=3,cost=1,reserved_cost=0.5")
    cpu = next(p for p in res["pools"] if p["name"] == "cpu")
    hours = res["duration_s"] / 3600
    assert abs(cpu["backend_hours"] - 3 * hours) < 1e-6
    assert abs(cpu["cost"] - 3 * hours * 0.5) < 1e-6


def zone_pool(zones, extra=""):
    # 4 spot backends, the pool fixed at 4 (min = max): no independent preemptions, only
    # whole-zone reclaims, about one every 2 minutes per zone
    return wave_pools(f",min=4,max=4,backends=4,spot=1,spot_zones={zones},zone_reclaims_per_h=30{extra}")


def test_a_zone_reclaim_takes_every_spot_backend_of_the_zone_at_once():
    common = ("--rate", "20", "--duration", "600", "--seed", "5")
    one = sim_json(*common, *zone_pool(1, ",notice_s=10"))
    a = next(p for p in one["pools"] if p["name"] == "cpu")["autoscale"]
    assert a["zone_reclaims"] >= 1 and a["spot_zones"] == 1, a
    # one zone: a reclaim takes the whole pool at once; the ReplicaSet starts replacements as
    # the reclaimed ones leave (a pool at its max has no free slot at the notice)
    assert a["zone_reclaim_max"] == 4 and a["low_backends"] < 4, a
    assert a["preempted"] == a["zone_reclaimed"], a
    # with a notice longer than a request, the router drained them all first: nothing cut
    assert one["retries"] == 0 and one["priorities"]["all"]["failed"] == 0
    two = sim_json(*common, *zone_pool(2, ",notice_s=10"))
    b = next(p for p in two["pools"] if p["name"] == "cpu")["autoscale"]
    # two zones: several backends go together, never one by one
    assert b["zone_reclaims"] >= 2 and b["zone_reclaim_max"] >= 2, b
    assert b["preempted"] == b["zone_reclaimed"] > b["zone_reclaims"], b
    # no notice: the requests on the zone's backends are cut and retried elsewhere
    cut = sim_json(*common, *zone_pool(2, ",notice_s=0"))
    assert cut["retries"] > 0
    # the reserved backends are never reclaimed: 2 of 4 reserved, one zone, a reclaim takes 2
    res = sim_json(*common, *zone_pool(1, ",notice_s=10,reserved=2"))
    r = next(p for p in res["pools"] if p["name"] == "cpu")["autoscale"]
    assert r["zone_reclaims"] >= 1 and r["zone_reclaim_max"] == 2 and r["low_backends"] == 2, r


def test_zone_reclaims_are_deterministic_for_a_seed():
    common = ("--rate", "20", "--duration", "600")
    a = sim_json(*common, "--seed", "5", *zone_pool(2, ",notice_s=10"))
    b = sim_json(*common, "--seed", "5", *zone_pool(2, ",notice_s=10"))
    assert a == b
    rc, _, err = run_tierbench("sim", *common, *zone_pool(0))
    assert rc != 0 and "spot_zones" in err
