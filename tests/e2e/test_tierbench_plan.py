"""tierbench plan (issue 26): the cheapest fleet and policy meeting per-priority SLOs on a day
trace, written as a router config, a kustomize overlay and a report.

Every check re-derives what it holds the planner to from outside the planner: the SLOs are
re-checked on `tierbench sim --json` of the plan.conf the planner wrote, the router config on a
real `tierrouter --check-config`, the overlay with `kubectl kustomize` and test_k8s's checks.
The day is small (4 compressed minutes, 28k requests) so the grid runs in
seconds. Its sensitive share (2 %) stays under 5 % of urgent: sensitive requests run on the CPU
pool only, so with more of them the urgent P95 is a CPU latency whatever the fleet
(docs/operate/capacity.md).
"""
import json
import subprocess

import pytest
import yaml

import test_k8s as k8s
from conftest import ROOT, run_tierbench
from helpers import ROUTER_BIN

K8S_BASE = ROOT / "deploy" / "k8s" / "base"
FLEET = """\
pool kind=gpu,name=gpu,backends=2,min=2,max=4,reserved=2,max_in_flight=5,slots=4,mean_ms=40,p95_ms=52,cost=7
pool kind=cpu,name=cpu,sensitive=1,backends=2,min=2,max=8,reserved=2,max_in_flight=2,slots=1,mean_ms=150,p95_ms=220,cost=1
"""
REF = "pool kind=gpu,name=gpu,sensitive=1,backends=5,max_in_flight=8,slots=4,mean_ms=40,p95_ms=52,cost=7\n"
# 8 candidates; the cheaper ones refuse a tenth of normal in the surge, so a planner that
# stopped counting refusals would pick one of them
AXES = "gpu.min=2/4,gpu.max=4/5,cpu.max=4/8"
SLO = "urgent.refused=0,normal.refused=0.005,urgent.p95_x=1.25,cost_x=0.9"


@pytest.fixture(scope="module")
def day(tmp_path_factory):
    d = tmp_path_factory.mktemp("plan")
    rc, _, err = run_tierbench("gen", "--day", "10", "--duration", "240", "--rate", "150", "--surge", "190:25:3",
                               "--mix", "urgent=0.15,normal=0.6,batch=0.25", "--sensitive", "0.02", "--seed", "7",
                               "--out", d / "day.trace")
    assert rc == 0, err
    (d / "fleet.conf").write_text(FLEET)
    (d / "ref.conf").write_text(REF)
    return d


def plan(day, out, slo=SLO, axes=AXES, *extra):
    return run_tierbench("plan", "--trace", day / "day.trace", "--config", day / "fleet.conf", "--ref",
                         day / "ref.conf", "--slo", slo, "--axis", axes, "--seed", "3", "--k8s-base", K8S_BASE,
                         "--out", day / out, *extra, timeout=600)


@pytest.fixture(scope="module")
def planned(day):
    rc, out, err = plan(day, "a")
    assert rc == 0, out + err
    return day / "a", out


def sim_json(day, config):
    rc, out, err = run_tierbench("sim", "--trace", day / "day.trace", "--config", config, "--json", "-", "--quiet")
    assert rc == 0, err
    return json.loads(out)


def prio(res, p):
    return res["priorities"][p]


def served_share(res, p):
    x = prio(res, p)
    return x["served"] / x["arrivals"] if x["arrivals"] else 1.0


def cost(res):
    return res["cost"]["provisioned"]


def test_the_plan_meets_its_slos_when_simulated_again(day, planned):
    d, _ = planned
    res, ref = sim_json(day, d / "plan.conf"), sim_json(day, day / "ref.conf")
    assert prio(res, "urgent")["arrivals"] > 1000 and prio(res, "normal")["arrivals"] > 5000
    assert served_share(res, "urgent") == 1.0
    assert served_share(res, "normal") >= 0.995
    assert prio(res, "urgent")["latency_ms"]["p95"] <= 1.25 * prio(ref, "urgent")["latency_ms"]["p95"]
    assert cost(res) <= 0.9 * cost(ref)
    report = (d / "report.md").read_text()
    assert "| urgent.refused |" in report and "**missed**" not in report
    assert (d / "day.svg").read_text().startswith("<svg")


def test_same_seed_same_bytes(day, planned):
    d, out = planned
    rc, out2, err = plan(day, "b")
    assert rc == 0, err
    assert out2 == out
    for f in ("plan.conf", "router.yaml", "report.md", "day.svg", "overlay/kustomization.yaml",
              "overlay/hpa-gpu.yaml", "overlay/hpa-sensitive.yaml"):
        assert (day / "b" / f).read_bytes() == (d / f).read_bytes(), f


def plan_cost(out):
    line = next(ln for ln in out.splitlines() if ln.startswith("plan: cost "))
    return float(line.split()[2].rstrip(","))


def test_a_tighter_slo_never_yields_a_cheaper_plan(day, planned):
    _, out = planned
    rc, tight, err = plan(day, "t", SLO.replace("urgent.p95_x=1.25", "urgent.p95_x=1.1")
                          .replace("normal.refused=0.005", "normal.refused=0.001"))
    assert rc in (0, 2), err
    if rc == 0:
        assert plan_cost(tight) >= plan_cost(out)


def test_an_impossible_slo_names_the_binding_one(day):
    rc, out, err = plan(day, "x", "urgent.refused=0,normal.refused=0.005,urgent.p95_ms=1")
    assert rc == 2, out + err
    assert "no plan meets the SLOs: urgent.p95_ms binds" in out, out
    assert not (day / "x" / "router.yaml").exists()
    assert "The binding SLO is `urgent.p95_ms`" in (day / "x" / "report.md").read_text()


def test_a_grid_over_the_budget_is_refused(day):
    rc, _, err = plan(day, "y", SLO, AXES, "--budget", "7")
    assert rc == 64 and "over the --budget of 7" in err


def test_the_router_config_loads_in_tierrouter(planned):
    d, _ = planned
    p = subprocess.run([ROUTER_BIN, "--check-config", "--config", str(d / "router.yaml")],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, p.stderr
    doc = yaml.safe_load((d / "router.yaml").read_text())
    conf = (d / "plan.conf").read_text()
    assert [x["name"] for x in doc["pools"]] == ["gpu", "cpu"]
    assert f"max_in_flight=5" in conf and doc["pools"][0]["max_in_flight"] == 5


def test_the_overlay_passes_the_k8s_checks(planned):
    d, _ = planned
    p = subprocess.run([k8s.kubectl(), "kustomize", str(d / "overlay")], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    objs = [o for o in yaml.safe_load_all(p.stdout) if o]
    for check in k8s.CHECKS:
        problems = check(objs)
        assert problems == [], f"{check.__name__}: " + "\n".join(problems)
    # the HPAs carry the plan's bounds (plan.conf's last word on each pool)
    conf = (d / "plan.conf").read_text().splitlines()
    hpas = {o["metadata"]["name"]: o["spec"] for o in objs if o["kind"] == "HorizontalPodAutoscaler"}
    for pool, base in (("gpu", "gpu"), ("cpu", "sensitive")):  # the CPU pool takes sensitive data
        lo = [ln.split("=")[1] for ln in conf if ln.startswith(f"set {pool}.min=")]
        hi = [ln.split("=")[1] for ln in conf if ln.startswith(f"set {pool}.max=")]
        h = hpas[f"tierserve-{base}"]
        if lo:
            assert h["minReplicas"] == int(float(lo[-1])), pool
        if hi:
            assert h["maxReplicas"] == int(float(hi[-1])), pool
    # a plan with no spot capacity has no spot objects
    assert not [o for o in objs if o["metadata"]["name"].endswith("-spot")
                or k8s.CAPACITY in o["metadata"].get("labels", {})]
    assert not list((d / "overlay").glob("spot-*")) and not list((d / "overlay").glob("floor-*"))


# ---- spot capacity in the overlay, zone reclaims in the figures ------------------------------

SPOT_FLEET = FLEET.replace("reserved=2,max_in_flight=5",
                           "reserved=2,max_in_flight=5,spot=1,spot_zones=2,zone_reclaims_per_h=20,notice_s=100")
SPOT_AXES = "gpu.max=4/6"


def render(overlay):
    p = subprocess.run([k8s.kubectl(), "kustomize", str(overlay)], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return [o for o in yaml.safe_load_all(p.stdout) if o]


@pytest.fixture(scope="module")
def spot_planned(day):
    (day / "spot.conf").write_text(SPOT_FLEET)
    rc, out, err = run_tierbench("plan", "--trace", day / "day.trace", "--config", day / "spot.conf",
                                 "--slo", "urgent.refused=0.001", "--axis", SPOT_AXES, "--seed", "3",
                                 "--k8s-base", K8S_BASE, "--out", day / "spot", timeout=600)
    assert rc == 0, out + err
    return day / "spot"


def by(objs, kind, name):
    found = [o for o in objs if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind} {name}: {len(found)}"
    return found[0]


def test_a_spot_plan_marks_its_spot_part_in_the_overlay(spot_planned):
    d = spot_planned
    objs = render(d / "overlay")
    for check in k8s.CHECKS:
        problems = check(objs)
        assert problems == [], f"{check.__name__}: " + "\n".join(problems)
    conf = (d / "plan.conf").read_text().splitlines()
    hi = int(float([ln.split("=")[1] for ln in conf if ln.startswith("set gpu.max=")][-1]))
    floor, spot = by(objs, "Deployment", "tierserve-gpu"), by(objs, "Deployment", "tierserve-gpu-spot")
    fs, ss = k8s.pod_spec(floor), k8s.pod_spec(spot)
    # the floor: reserved pods only, kept off spot nodes, fixed at the reserved count
    assert k8s.pod_labels(floor)[k8s.CAPACITY] == "reserved"
    assert floor["spec"]["selector"]["matchLabels"][k8s.CAPACITY] == "reserved"
    terms = fs["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert {"key": k8s.CAPACITY, "operator": "NotIn", "values": ["spot"]} in terms[0]["matchExpressions"]
    assert k8s.CAPACITY not in fs.get("nodeSelector", {})
    h = by(objs, "HorizontalPodAutoscaler", "tierserve-gpu")["spec"]
    assert h["minReplicas"] == h["maxReplicas"] == 2
    # the spot part: on the spot nodes, tolerating their taint (and the GPU's), spread over
    # zones, scaled from 0/1 to max - reserved
    assert k8s.pod_labels(spot)[k8s.CAPACITY] == "spot"
    assert spot["spec"]["selector"]["matchLabels"][k8s.CAPACITY] == "spot"
    assert ss["nodeSelector"][k8s.CAPACITY] == "spot" and ss["nodeSelector"]["nvidia.com/gpu.present"] == "true"
    keys = {t["key"] for t in ss["tolerations"]}
    assert keys == {k8s.CAPACITY, "nvidia.com/gpu"}, keys
    assert any(c["topologyKey"] == "topology.kubernetes.io/zone" for c in ss["topologySpreadConstraints"])
    hs = by(objs, "HorizontalPodAutoscaler", "tierserve-gpu-spot")["spec"]
    assert hs["scaleTargetRef"]["name"] == "tierserve-gpu-spot" and hs["maxReplicas"] == hi - 2
    # the grace period: after preStop + drain, within the 100 s notice
    pre, drain = k8s.prestop_seconds(k8s.container(spot)), int(k8s.worker_setting(spot, "TIERSERVE_DRAIN_TIMEOUT_S"))
    assert pre + drain < ss["terminationGracePeriodSeconds"] <= 100
    # each part its own Service (the router sends to both), PodDisruptionBudget
    doc = yaml.safe_load((d / "router.yaml").read_text())
    backends = doc["pools"][0]["backends"]
    assert [b.split(".")[0] for b in backends] == ["tierserve-gpu", "tierserve-gpu-spot"]
    for n in ("tierserve-gpu", "tierserve-gpu-spot"):
        assert k8s.CAPACITY in by(objs, "PodDisruptionBudget", n)["spec"]["selector"]["matchLabels"]
    # the NetworkPolicies still let the routers in (the label is not in their peers)
    for n in ("tierserve-gpu", "tierserve-gpu-spot"):
        peers = by(objs, "NetworkPolicy", n)["spec"]["ingress"][0]["from"][0]["podSelector"]["matchLabels"]
        assert k8s.CAPACITY not in peers


def test_an_on_demand_plan_above_its_reserved_floor_has_no_spot_objects(day, spot_planned):
    # the spot fleet with spot=0: the same floor and bounds, the rest on demand
    rc, out, err = run_tierbench("plan", "--trace", day / "day.trace", "--config", day / "spot.conf",
                                 "--set", "gpu.spot=0", "--slo", "urgent.refused=0.001", "--axis", "gpu.max=6",
                                 "--seed", "3", "--k8s-base", K8S_BASE, "--out", day / "ondemand", timeout=600)
    assert rc == 0, out + err
    objs = render(day / "ondemand" / "overlay")
    assert not [o for o in objs if o["metadata"]["name"].endswith("-spot")
                or k8s.CAPACITY in o["metadata"].get("labels", {})]
    assert by(objs, "HorizontalPodAutoscaler", "tierserve-gpu")["spec"]["maxReplicas"] == 6
    doc = yaml.safe_load((day / "ondemand" / "router.yaml").read_text())
    assert len(doc["pools"][0]["backends"]) == 1


def test_the_plans_figures_include_zone_reclaims(day, spot_planned):
    d = spot_planned
    res = sim_json(day, d / "plan.conf")
    a = next(p for p in res["pools"] if p["name"] == "gpu")["autoscale"]
    assert a["spot_zones"] == 2 and a["zone_reclaims"] > 0, a
    row = next(ln for ln in (d / "report.md").read_text().splitlines() if ln.startswith("| gpu |"))
    assert "spot in 2 zones" in row
    assert f"| {a['preempted']} ({a['zone_reclaims']}, at most {a['zone_reclaim_max']} backends at once) |" in row
    # the reclaims cost something: without them the same plan is served at least as well
    calm = (d / "plan.conf").read_text() + "set gpu.zone_reclaims_per_h=0\n"
    (day / "calm.conf").write_text(calm)
    res0 = sim_json(day, day / "calm.conf")
    a0 = next(p for p in res0["pools"] if p["name"] == "gpu")["autoscale"]
    assert a0["zone_reclaims"] == 0 and res0 != res


# ---- stage changes per surge ------------------------------------------------------------------

TWO_SURGES = ("--day", "10", "--duration", "240", "--rate", "150", "--surge", "100:15:4", "--surge", "190:15:4")
SURGE_FLEET = """\
pool kind=gpu,name=gpu,backends=2,max_in_flight=16,slots=4,mean_ms=40,p95_ms=52,cost=7
pool kind=cpu,name=cpu,sensitive=1,backends=4,max_in_flight=2,slots=1,mean_ms=150,p95_ms=220,cost=1
"""


@pytest.fixture(scope="module")
def surges(tmp_path_factory):
    d = tmp_path_factory.mktemp("surges")
    rc, _, err = run_tierbench("gen", *TWO_SURGES, "--mix", "urgent=0.15,normal=0.6,batch=0.25", "--sensitive", "0.02",
                               "--seed", "7", "--out", d / "day.trace")
    assert rc == 0, err
    (d / "fleet.conf").write_text(SURGE_FLEET)
    return d


def plan_surges(d, out, slo, *extra):
    return run_tierbench("plan", "--trace", d / "day.trace", "--config", d / "fleet.conf", "--slo", slo,
                         "--axis", "gpu.backends=2", "--seed", "3", "--k8s-base", K8S_BASE, "--out", d / out, *extra)


def surge_rows(report):
    return [[c.strip() for c in ln.strip("|").split("|")] for ln in report.splitlines()
            if ln.startswith("| ") and ln.split("|")[1].strip().isdigit()]


def test_stage_changes_are_counted_per_surge(surges):
    rc, out, err = plan_surges(surges, "a", "stage_changes_per_surge=99,stage_changes=99")
    assert rc == 0, out + err
    report = (surges / "a" / "report.md").read_text()
    rows = surge_rows(report)
    # the two surges the trace was made with, where they were made (10 s an hour: 1 s buckets)
    assert len(rows) == 2, report
    starts = [float(r[1].split()[0]) for r in rows]
    ends = [float(r[2].split()[0]) for r in rows]
    assert abs(starts[0] - 100) <= 3 and abs(starts[1] - 190) <= 3, rows
    assert abs(ends[0] - 115) <= 3 and abs(ends[1] - 205) <= 3, rows
    # each surge's count is the sim's stage changes from its start to an hour (10 s) after its end
    res = sim_json(surges, surges / "a" / "plan.conf")
    times = [e["t"] for e in res["policy"]["events"] if e["event"] in ("stage_up", "stage_down")]
    per = [sum(s <= t < e + 10 for t in times) for s, e in zip(starts, ends)]
    assert [int(r[4]) for r in rows] == per
    assert sum(per) < len(times)  # a change outside the surges is the day's, not a surge's
    slo = {r[0].strip(): r[2].strip() for r in (ln.strip("|").split("|") for ln in report.splitlines()
                                                if ln.startswith("| stage_changes"))}
    assert int(slo["stage_changes_per_surge"]) == max(per) and int(slo["stage_changes"]) == len(times)
    # the SLO binds on the worst surge, not on the day
    rc, out, _ = plan_surges(surges, "b", f"stage_changes_per_surge={max(per) - 1}")
    assert rc == 2 and "stage_changes_per_surge binds" in out, out
    rc, out, _ = plan_surges(surges, "c", f"stage_changes_per_surge={max(per)}")
    assert rc == 0, out


def test_a_surge_factor_must_be_above_1(surges):
    rc, _, err = plan_surges(surges, "d", "stage_changes_per_surge=2", "--surge-factor", "1")
    assert rc == 64 and "--surge-factor" in err
