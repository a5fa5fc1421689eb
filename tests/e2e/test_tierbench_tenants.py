"""Tenants in the simulator (issue 26 item 5): weighted fair share in the admission queue
bounds a bursting tenant's effect on another, and budgets demote then refuse over a day. The
sim runs the router's own policy code (src/policy/tenant.c), deterministically for a seed.
"""
import json

from conftest import run_tierbench

CPU = "kind=cpu,name=cpu,max_in_flight=2"


def gen(tmp_path, name, *args):
    out = tmp_path / f"{name}.csv"
    code, _, err = run_tierbench("gen", *args, "--out", out)
    assert code == 0, err
    return out


def merge(tmp_path, *parts):
    lines = []
    for p in parts:
        lines += p.read_text().splitlines()[1:]
    out = tmp_path / "merged.csv"
    out.write_text("t_s,priority,tenant,data_class,model,size\n" +
                   "\n".join(sorted(lines, key=lambda l: float(l.split(",")[0]))) + "\n")
    return out


def sim(tmp_path, trace, *args):
    out = tmp_path / "r.json"
    code, _, err = run_tierbench("sim", "--trace", trace, "--json", out, "--quiet", *args)
    assert code == 0, err
    r = json.loads(out.read_text())
    return r, {t["name"]: t for t in r["tenants"]}


def test_a_bursting_tenant_does_not_take_the_others_share(tmp_path):
    normal = ("--mix", "urgent=0,normal=1,batch=0")
    quiet = gen(tmp_path, "quiet", "--rate", 5, "--duration", 120, "--tenants", "quiet", *normal, "--seed", 3)
    hog = gen(tmp_path, "hog", "--rate", 2, "--duration", 120, "--surge", "30:60:30", "--tenants", "hog", *normal,
              "--seed", 4)
    both = merge(tmp_path, quiet, hog)
    opts = ("--pool", CPU, "--queue-timeout-ms", 2000)
    _, alone = sim(tmp_path, quiet, *opts)
    _, fair = sim(tmp_path, both, *opts)
    _, fifo = sim(tmp_path, both, *opts, "--fifo")
    p95 = alone["quiet"]["latency_ms"]["p95"]
    # the burst is far past capacity: it loses requests either way
    assert fair["hog"]["lost"] > fair["hog"]["served"] / 2
    # fair share: every quiet request served, its P95 within 2x of what it gets alone
    assert fair["quiet"]["served"] == fair["quiet"]["arrivals"], fair["quiet"]
    assert fair["quiet"]["latency_ms"]["p95"] <= 2 * p95, (fair["quiet"], p95)
    # arrival order (what fair share replaced): the burst takes the quiet tenant's place
    assert fifo["quiet"]["lost"] > 0.1 * fifo["quiet"]["arrivals"], fifo["quiet"]
    assert fifo["quiet"]["latency_ms"]["p95"] > 2 * p95


def test_budgets_demote_then_refuse_over_a_day(tmp_path):
    day = gen(tmp_path, "day", "--day", 3600, "--duration", 86400, "--rate", 0.5, "--tenants", "acme,globex",
              "--mix", "urgent=0.15,normal=0.6,batch=0.25", "--seed", 7)
    # a day of policy ticks at the router's 250 ms is most of the time here (not the
    # requests): budgets need no finer clock than seconds
    day_opts = ("--probe-interval-ms", 5000, "--timeline-step", 60)
    _, free = sim(tmp_path, day, *day_opts)
    spent = free["acme"]["cost"]  # what acme spends in a day with no budget
    hour = free["acme"]["peak_hour"]
    soft_h, hard_h, soft_d, hard_d = 0.7 * hour, 0.9 * hour, 0.4 * spent, 0.6 * spent
    r, t = sim(tmp_path, day, *day_opts, "--tenant",
               f"acme:soft_per_hour={soft_h},hard_per_hour={hard_h},soft_per_day={soft_d},hard_per_day={hard_d}")
    acme, globex = t["acme"], t["globex"]
    assert acme["demoted"] > 0 and acme["refused_budget"] > 0, acme
    # the budgets hold, give or take the request that crossed them (each costs a few 1e-5)
    assert acme["cost"] <= hard_d + 1e-3 and acme["peak_hour"] <= hard_h + 1e-3, acme
    assert acme["arrivals"] == acme["served"] + acme["refused_budget"] + acme["lost"]
    assert r["priorities"]["all"]["refusals"]["budget"] == acme["refused_budget"]
    # the other tenant is untouched
    assert globex["demoted"] == globex["refused_budget"] == globex["lost"] == 0
    assert globex["served"] == globex["arrivals"] == free["globex"]["arrivals"]


def test_gen_splits_arrivals_by_tenant_share(tmp_path):
    """`gen --tenants NAME:SHARE,...` draws each arrival's tenant by share; equal shares (or
    none given) give the trace the same seed always gave; a bad share names itself."""
    from collections import Counter
    t = gen(tmp_path, "shares", "--rate", "200", "--duration", "20", "--tenants", "acme:3,globex:1", "--seed", "3")
    n = Counter(l.split(",")[2] for l in t.read_text().splitlines()[1:])
    total = sum(n.values())
    assert total > 3000 and abs(n["acme"] / total - 0.75) < 0.03, n
    plain = gen(tmp_path, "plain", "--rate", "50", "--duration", "10", "--tenants", "acme,globex", "--seed", "3")
    ones = gen(tmp_path, "ones", "--rate", "50", "--duration", "10", "--tenants", "acme:1,globex:1", "--seed", "3")
    assert plain.read_text() == ones.read_text()
    # a name may hold ':'; a share that does not parse stays part of the name
    odd = gen(tmp_path, "odd", "--rate", "50", "--duration", "2", "--tenants", "team:a,b:2", "--seed", "3")
    assert {l.split(",")[2] for l in odd.read_text().splitlines()[1:]} == {"team:a", "b"}
    code, _, err = run_tierbench("gen", "--tenants", "acme:0", "--out", tmp_path / "bad.csv")
    assert code == 64 and "--tenants: 'acme:0': the share must be in (0, 1e6]" in err, err
