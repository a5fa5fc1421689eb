"""Monitoring: deploy/prometheus (scrape config, alert rules) and deploy/grafana (dashboard),
checked with the real tools against a real worker and router.

- promtool checks the configs and the rules and runs the rules' unit tests
  (deploy/prometheus/tests/*.test.yml); every alert has a firing and a quiet case there.
- promtool checks the live /metrics of a worker and a router.
- A real Prometheus (127.0.0.1, a free port, a temporary storage folder, 1 s scrapes and rule
  evaluations) scrapes a worker pool (serving the KServe demo model and the tiny test LLM,
  streamed through the router) and a router with deploy/prometheus/prometheus.yml's
  jobs and alerts.yml loaded; the tests read the tier back through /api/v1/query, see the
  rules evaluate cleanly, and run every Grafana panel query against it.
- Every metric name in a rule or a panel must be one the scrape has (or a recording rule's);
  the only exception is the NVML GPU metrics, and only on a machine without an NVIDIA GPU.

Tests that need promtool or prometheus skip, saying so, only when the binary is absent
(Debian package `prometheus`, installed by scripts/setup.sh).
"""
import json
import re
import shutil
import subprocess
import time
import urllib.parse

import pytest
import yaml

from conftest import ROOT, start_worker, track
from helpers import free_port, get, post
from llm_fixture import write_tiny_llm
from test_router import DEMO, Router

PROM_DIR = ROOT / "deploy" / "prometheus"
PROM_CONFIG = PROM_DIR / "prometheus.yml"
K8S_CONFIG = PROM_DIR / "prometheus-kubernetes.yml"
RULES = PROM_DIR / "alerts.yml"
RULE_TESTS = sorted((PROM_DIR / "tests").glob("*.test.yml"))
DASHBOARD = ROOT / "deploy" / "grafana" / "tierserve-dashboard.json"
GRAFANA_PROVISIONING = ROOT / "deploy" / "grafana" / "provisioning"
MONITORING_DOC = ROOT / "docs" / "operate" / "monitoring.md"

PROMTOOL = shutil.which("promtool")
PROMETHEUS = shutil.which("prometheus")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None, reason="promtool is not installed (Debian package prometheus; scripts/setup.sh installs it)")
needs_prometheus = pytest.mark.skipif(
    PROMETHEUS is None, reason="prometheus is not installed (Debian package prometheus; scripts/setup.sh installs it)")

# Exported by the worker only where NVML finds an NVIDIA GPU (src/worker/status.c).
GPU_ONLY = {"tierserve_gpu_utilization_ratio", "tierserve_gpu_memory_used_bytes",
            "tierserve_gpu_memory_total_bytes", "tierserve_gpu_power_watts"}
# Grafana's own variables, as a query would see them at a 1 s scrape interval.
GRAFANA_VARS = {"$__rate_interval": "1m", "$__interval": "1s", "$__range": "5m"}
SLO_OBJECTIVE_LE = {"urgent": "0.1", "normal": "0.25", "batch": "2.5"}
# The LLM stream targets' defaults (the fallbacks of the recording rules in alerts.yml and the
# table in monitoring.md), in seconds; the router's own slo_ttft_ms / slo_itl_ms win.
LLM_TARGETS = {"ttft": {"urgent": 0.5, "normal": 1.0, "batch": 5.0},
               "itl": {"urgent": 0.05, "normal": 0.1, "batch": 0.25}}
LLM_HISTOGRAMS = {"ttft": "tierrouter_time_to_first_token_seconds", "itl": "tierrouter_inter_token_latency_seconds"}


def run_promtool(*args, stdin=None):
    p = subprocess.run([PROMTOOL, *args], input=stdin, capture_output=True, timeout=60)
    return p.returncode, (p.stdout + p.stderr).decode(errors="replace")


def load_yaml(path):
    with open(path) as f:
        return yaml.safe_load(f)


def rules():
    """(group, rule) for every rule in alerts.yml."""
    return [(g["name"], r) for g in load_yaml(RULES)["groups"] for r in g["rules"]]


def dashboard_targets():
    """(panel title, expr) of every target of every panel."""
    d = json.loads(DASHBOARD.read_text())
    out = []
    for p in d["panels"]:
        for t in p.get("targets", []):
            out.append((p["title"], t["expr"]))
    return out


def grafana_expr(expr):
    for k, v in GRAFANA_VARS.items():
        expr = expr.replace(k, v)
    assert "$" not in expr, f"a Grafana variable the test does not know: {expr}"
    return expr


PROMQL_KEYWORDS = {"and", "or", "unless", "bool", "by", "without", "on", "ignoring", "group_left",
                   "group_right", "offset", "inf", "nan"}


def promql_names(expr):
    """The metric names an expression selects: strings, label matchers, ranges and grouping
    label lists removed; what is left and not called like a function is a metric name."""
    s = re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'', '""', expr)
    s = re.sub(r"\{[^}]*\}", " ", s)
    s = re.sub(r"\[[^\]]*\]", " ", s)
    s = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", s)
    names = set()
    for m in re.finditer(r"(?<![\w:.])([A-Za-z_:][\w:]*)(\s*\()?", s):
        if not m.group(2) and m.group(1) not in PROMQL_KEYWORDS:
            names.add(m.group(1))
    return names


def test_promql_names_finds_names_and_nothing_else():
    assert promql_names('sum by (pool, le) (rate(tierrouter_x_bucket{pool!="none",le="0.1"}[5m])) * 3600') \
        == {"tierrouter_x_bucket"}
    assert promql_names("(a == 1) * on (job, instance) group_left (tier) b_info") == {"a", "b_info"}
    assert promql_names("max_over_time(up[15m]) == 0 or changes(up[15m]) >= 4") == {"up"}
    assert promql_names("x:ratio:rate1h > (14.4 * 0.05) and y > 1e3") == {"x:ratio:rate1h", "y"}
    assert promql_names('histogram_quantile(0.95, sum by (le) (rate(h_bucket{a="by (x)"}[1m])))') == {"h_bucket"}


# ---- static checks: configs, rules, unit tests, docs ------------------------------------------

@needs_promtool
def test_promtool_checks_the_static_config_and_its_rules():
    code, out = run_promtool("check", "config", str(PROM_CONFIG))
    assert code == 0, out
    assert "alerts.yml" in out and "SUCCESS" in out, out  # the rule file was found and checked
    code, out = run_promtool("check", "rules", str(RULES))
    assert code == 0, out
    assert f"SUCCESS: {len(rules())} rules found" in out, out


@needs_promtool
def test_kubernetes_config_checks_where_promtool_has_kubernetes_discovery(tmp_path):
    """Debian's Prometheus is built without Kubernetes discovery: it must fail on that field
    alone; the rest of the file is checked with the discovery blocks swapped for static ones."""
    code, out = run_promtool("check", "config", str(K8S_CONFIG))
    if code != 0:
        errors = [ln for ln in out.splitlines() if re.match(r"\s+line \d+:", ln)]
        assert errors and all("field kubernetes_sd_configs not found" in ln for ln in errors), out
        cfg = load_yaml(K8S_CONFIG)
        for job in cfg["scrape_configs"]:
            assert job.pop("kubernetes_sd_configs") == [{"role": "pod"}], job["job_name"]
            job["static_configs"] = [{"targets": ["127.0.0.1:1"]}]
        cfg["rule_files"] = [str(RULES)]
        copy = tmp_path / "prometheus-kubernetes-static.yml"
        copy.write_text(yaml.safe_dump(cfg))
        code, out = run_promtool("check", "config", str(copy))
    assert code == 0, out
    # the same scrape settings as the static file, so the rules see the same series
    static, k8s = load_yaml(PROM_CONFIG), load_yaml(K8S_CONFIG)
    assert static["global"] == k8s["global"] and static["rule_files"] == k8s["rule_files"]


def relabel(rules_, labels):
    """Prometheus' relabelling for the actions the configs use (keep, drop, replace);
    returns the target's labels or None when dropped."""
    labels = dict(labels)
    for r in rules_:
        action = r.get("action", "replace")
        value = r.get("separator", ";").join(labels.get(n, "") for n in r.get("source_labels", []))
        m = re.fullmatch(r.get("regex", "(.*)"), value)
        if action == "keep":
            if not m:
                return None
        elif action == "drop":
            if m:
                return None
        elif action == "replace":
            if m:
                repl = re.sub(r"\$\{?(\d+)\}?", lambda g: m.group(int(g.group(1))) or "",
                              r.get("replacement", "$1"))
                if repl:
                    labels[r["target_label"]] = repl
                else:
                    labels.pop(r["target_label"], None)
        else:
            raise AssertionError(f"relabel action {action} not modelled by this test")
    return {k: v for k, v in labels.items() if not k.startswith("__")}


def pod(name, pool, port_name="http", **extra):
    return {"__meta_kubernetes_namespace": "ml", "__meta_kubernetes_pod_name": f"{name}-7d9f",
            "__meta_kubernetes_pod_node_name": "node-1",
            "__meta_kubernetes_pod_label_app_kubernetes_io_name": name,
            "__meta_kubernetes_pod_label_tierserve_io_pool": pool,
            "__meta_kubernetes_pod_container_port_name": port_name, **extra}


def test_shipped_manifests_carry_what_the_kubernetes_jobs_select():
    """deploy/k8s's pods must have the labels and port name the relabelling keeps, or
    Prometheus in a cluster would scrape nothing and every worker alert would stay quiet."""
    jobs = {j["job_name"]: j["relabel_configs"] for j in load_yaml(K8S_CONFIG)["scrape_configs"]}
    deployments = [d for f in sorted((ROOT / "deploy" / "k8s" / "base").rglob("deployment.yaml"))
                   for d in [load_yaml(f)] if d and d.get("kind") == "Deployment"]
    assert deployments
    seen = set()
    for d in deployments:
        tmpl = d["spec"]["template"]
        meta = {f"__meta_kubernetes_pod_label_{k.replace('.', '_').replace('/', '_').replace('-', '_')}": v
                for k, v in tmpl["metadata"]["labels"].items()}
        for c in tmpl["spec"]["containers"]:
            for port in c.get("ports", []):
                labels = {"__meta_kubernetes_namespace": "ml", "__meta_kubernetes_pod_name": "p",
                          "__meta_kubernetes_pod_node_name": "n", **meta,
                          "__meta_kubernetes_pod_container_port_name": port.get("name", "")}
                for job, rules in jobs.items():
                    out = relabel(rules, labels)
                    if out:
                        seen.add((job, out.get("pool")))
    assert {j for j, _ in seen} == set(jobs), seen
    assert {p for j, p in seen if j == "tierserve-kubernetes"} >= {"cpu", "gpu"}, seen


def test_kubernetes_relabelling_gives_the_jobs_the_rules_select():
    jobs = {j["job_name"]: j["relabel_configs"] for j in load_yaml(K8S_CONFIG)["scrape_configs"]}
    workers, routers = jobs["tierserve-kubernetes"], jobs["tierrouter-kubernetes"]
    assert relabel(workers, pod("tierserve", "gpu")) == {
        "job": "tierserve", "namespace": "ml", "pod": "tierserve-7d9f", "node": "node-1", "pool": "gpu"}
    assert relabel(routers, pod("tierrouter", "gateway")) == {
        "job": "tierrouter", "namespace": "ml", "pod": "tierrouter-7d9f"}
    # each pod lands in its own job only, and only on its port named http
    assert relabel(workers, pod("tierrouter", "gateway")) is None
    assert relabel(routers, pod("tierserve", "gpu")) is None
    assert relabel(workers, pod("tierserve", "gpu", port_name="grpc")) is None
    assert relabel(workers, pod("tierserve-extra", "gpu")) is None  # regexes are anchored


@needs_promtool
def test_rule_unit_tests_pass():
    assert len(RULE_TESTS) >= 5, RULE_TESTS
    code, out = run_promtool("test", "rules", *map(str, RULE_TESTS))
    assert code == 0, out
    assert out.count("SUCCESS") == len(RULE_TESTS), out


def test_every_rule_has_a_firing_and_a_quiet_unit_test():
    fired, quiet, recorded = set(), set(), set()
    for path in RULE_TESTS:
        doc = load_yaml(path)
        assert doc["rule_files"] == ["../alerts.yml"], path
        for case in doc["tests"]:
            for t in case.get("alert_rule_test", []):
                (fired if t.get("exp_alerts") else quiet).add(t["alertname"])
            for t in case.get("promql_expr_test", []):
                recorded |= promql_names(t["expr"])
    alerts = {r["alert"] for _, r in rules() if "alert" in r}
    records = {r["record"] for _, r in rules() if "record" in r}
    assert len(alerts) >= 17
    assert alerts - fired == set(), "alerts with no firing case"
    assert alerts - quiet == set(), "alerts with no quiet case"
    assert fired | quiet <= alerts, "tests of alerts that do not exist"
    assert records - recorded == set(), "recording rules no promql_expr_test checks"


def test_slo_rules_agree_on_the_thresholds():
    """The four windows must use one threshold per priority (they are written out four times)."""
    slo = [r for _, r in rules() if r.get("record", "").startswith("tierrouter:slo_slow_ratio:")]
    assert [r["record"].rsplit(":", 1)[1] for r in slo] == ["rate5m", "rate30m", "rate1h", "rate6h"]
    for r in slo:
        pairs = dict(re.findall(r'priority="(\w+)",le="([^"]+)"', r["expr"]))
        assert pairs == SLO_OBJECTIVE_LE, r["record"]
        window = r["record"].rsplit("rate", 1)[1]
        assert set(re.findall(r"\[(\w+)\]", r["expr"])) == {window}, r["record"]


def llm_target_rules():
    """{"ttft"|"itl": {priority: seconds}} as alerts.yml's target recording rules write them."""
    out = {}
    for kind in LLM_TARGETS:
        (r,) = [r for _, r in rules() if r.get("record") == f"tierrouter:llm_{kind}_target_seconds"]
        pairs = re.findall(r'label_replace\(vector\(([\d.]+)\), "priority", "(\w+)", "", ""\)', r["expr"])
        out[kind] = {prio: float(v) for v, prio in pairs}
    return out


def test_llm_targets_agree_in_rules_and_runbook():
    """One number per priority and kind: the recording rules the alerts and the dashboard read,
    and the runbook's table (which operators copy into the router's slo_ttft_ms / slo_itl_ms)."""
    assert llm_target_rules() == LLM_TARGETS
    doc = MONITORING_DOC.read_text()
    for kind, row in (("ttft", "time to first token"), ("itl", "between tokens")):
        want = " | ".join(f"{LLM_TARGETS[kind][p]:g} s" for p in ("urgent", "normal", "batch"))
        assert f"| {row} | {want} |" in doc, (kind, want)
    ms = {k: "{" + ", ".join(f"{p}: {round(v * 1000)}" for p, v in t.items()) + "}" for k, t in LLM_TARGETS.items()}
    flat = " ".join(doc.split())
    assert f"`slo_ttft_ms: {ms['ttft']}`" in flat and f"`slo_itl_ms: {ms['itl']}`" in flat, ms


def md_anchors(path):
    """GitHub's heading anchors of a Markdown file."""
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-")
            for h in re.findall(r"^#+ (.+)$", path.read_text(), re.M)}


def test_every_alert_has_a_runbook_section():
    anchors = md_anchors(MONITORING_DOC)
    for _, r in rules():
        if "alert" in r:
            link = r["annotations"]["runbook"]
            assert link == f"docs/operate/monitoring.md#{r['alert'].lower()}", link
            assert r["alert"].lower() in anchors, f"no section for {r['alert']} in {MONITORING_DOC}"
            assert r["labels"]["severity"] in ("critical", "warning"), r["alert"]
    links = re.findall(r"\]\((\.\./[^)#]+)(?:#([^)]+))?\)", MONITORING_DOC.read_text())
    assert len(links) >= 5
    for link, anchor in links:
        target = (MONITORING_DOC.parent / link).resolve()
        assert target.is_file(), link
        assert not anchor or anchor in md_anchors(target), f"{link}#{anchor}"


DOC_RUN = "# run by tests/e2e/test_prometheus.py"
DOC_NOT_RUN = "# not run by the tests"


def doc_command_blocks():
    """(marker line, commands) of every sh block in the monitoring page."""
    out = []
    for block in re.findall(r"^```sh\n(.*?)^```", MONITORING_DOC.read_text(), re.M | re.S):
        lines = block.splitlines()
        out.append((lines[0], [ln for ln in lines if ln.strip() and not ln.startswith("#")]))
    return out


def test_doc_commands_are_marked():
    blocks = doc_command_blocks()
    assert len(blocks) >= 3
    for marker, commands in blocks:
        assert marker == DOC_RUN or marker.startswith(DOC_NOT_RUN), (marker, commands)
        assert commands, marker


@needs_promtool
def test_doc_commands_marked_as_run_succeed():
    ran = 0
    for marker, commands in doc_command_blocks():
        if marker != DOC_RUN:
            continue
        for cmd in commands:
            assert cmd.startswith("promtool "), f"only promtool commands run here: {cmd}"
            p = subprocess.run(["bash", "-c", cmd], cwd=ROOT, capture_output=True, timeout=120)
            assert p.returncode == 0, (cmd, (p.stdout + p.stderr).decode(errors="replace"))
            ran += 1
    assert ran >= 3


def test_dashboard_and_provisioning_are_well_formed():
    d = json.loads(DASHBOARD.read_text())
    ids = [p["id"] for p in d["panels"]]
    assert len(ids) == len(set(ids)), "panel ids repeat"
    variables = {v["name"]: v for v in d["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    for p in d["panels"]:
        if p["type"] == "row":
            continue
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, p["title"]
        assert p["targets"], p["title"]
        refs = [t["refId"] for t in p["targets"]]
        assert len(refs) == len(set(refs)), p["title"]
        for t in p["targets"]:
            assert t["datasource"] == p["datasource"] and t["expr"].strip(), p["title"]
        g = p["gridPos"]
        assert 0 <= g["x"] and g["x"] + g["w"] <= 24, p["title"]
    titles = " ".join(p["title"].lower() for p in d["panels"])
    for what in ("tier", "degraded", "latency", "stage", "pressure", "cpu share", "queue", "gpu memory", "cost"):
        assert what in titles, f"no panel about {what}"
    # no two panels share a grid cell (rows are one unit high and span the width)
    cells = {}
    for p in d["panels"]:
        g = p["gridPos"]
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, f"{p['title']!r} overlaps {cells[(x, y)]!r}"
                cells[(x, y)] = p["title"]
    # the LLM row: its panels sit under it, before the next row
    rows = sorted((p["gridPos"]["y"], p["title"]) for p in d["panels"] if p["type"] == "row")
    llm_rows = [y for y, title in rows if title == "LLM serving"]
    assert len(llm_rows) == 1, f"no single LLM serving row: {rows}"
    y0 = llm_rows[0]
    y1 = min([y for y, _ in rows if y > y0], default=10 ** 6)
    llm = " ".join(p["title"].lower() for p in d["panels"] if p["type"] != "row" and y0 < p["gridPos"]["y"] < y1)
    for what in ("time to first token", "inter-token", "tokens per second", "sequences running and waiting",
                 "kv cache", "cost per 1k tokens", "refused"):
        assert what in llm, f"no LLM panel about {what}"
    ds = load_yaml(GRAFANA_PROVISIONING / "datasources" / "prometheus.yml")
    assert ds["apiVersion"] == 1 and ds["datasources"][0]["type"] == "prometheus"
    prov = load_yaml(GRAFANA_PROVISIONING / "dashboards" / "tierserve.yml")
    assert prov["apiVersion"] == 1 and prov["providers"][0]["type"] == "file"
    assert prov["providers"][0]["options"]["path"]


# ---- live: a worker pool, a router, promtool check metrics, a real Prometheus ----------------

ROUTER_CONFIG = """\
address: 127.0.0.1
probe_interval_ms: 100
slo_p95_ms: {{urgent: 100, normal: 250, batch: 2500}}
slo_ttft_ms: {{urgent: 500, normal: 2500, batch: 5000}}
slo_itl_ms: {{urgent: 50, normal: 100, batch: 250}}
tenants: [{{name: acme, budget: {{soft_per_hour: 1000, hard_per_hour: 2000, soft_per_day: 10000, hard_per_day: 20000}}}}]
pools:
  - name: gpu
    kind: gpu
    sensitive: false
    min_tier: cpu          # the "GPU" worker here may have fallen back to CPU: still capacity
    backends: ["127.0.0.1:{gpu}"]
    cost: {{model: usage, usd_per_hour: 4.0, usd_per_1k_tokens: 0.002}}
  - name: cpu
    kind: cpu
    sensitive: true
    backends: ["127.0.0.1:{cpu}"]
    cost: {{model: fixed, usd_per_hour: 0.5, usd_per_1k_tokens: 0.0005}}
"""
INFER = json.dumps({"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 4],
                                "data": [5.1, 3.5, 1.4, 0.2]}]}).encode()


def http_get(port, path, timeout=10):
    """One GET, no retry: (status, body)."""
    r = get(port, path, timeout=timeout)
    return r.status, r.body


def stream_chat(port, priority, data_class=None):
    """One streamed /v1 chat completion of the tiny LLM, read to its end; no retry."""
    headers = {"X-Priority": priority, **({"X-Data-Class": data_class} if data_class else {})}
    code, _, body = post(port, "/v1/chat/completions", {
        "model": "tiny", "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 6,
        "temperature": 0, "stream": True, "stream_options": {"include_usage": True}}, headers)
    text = body.decode()
    assert code == 200, (priority, code, text)
    assert text.rstrip().endswith("data: [DONE]"), text[-500:]


def infer(port, priority, data_class=None):
    headers = {"X-Priority": priority, **({"X-Data-Class": data_class} if data_class else {})}
    code, _, body = post(port, "/v2/models/demo/infer", INFER, headers, timeout=30)
    assert code == 200, (priority, code, body)


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    """A 'GPU' worker in EXECUTION_MODE=auto (on a machine without a GPU it falls back to CPU:
    degraded), a CPU worker, and a router over both with SLO targets and priced pools. Both
    workers serve the demo model and the tiny test LLM. Every priority is sent through it,
    KServe and streamed /v1, to both pools, so each histogram series exists."""
    tmp = tmp_path_factory.mktemp("prom-stack")
    repo = tmp / "repo"
    shutil.copytree(DEMO / "demo", repo / "demo")
    write_tiny_llm(repo / "tiny" / "1")
    gpu = start_worker(repo, tmp, env={"EXECUTION_MODE": "auto"})
    cpu = start_worker(repo, tmp, env={"EXECUTION_MODE": "cpu"})
    router = Router(ROUTER_CONFIG.format(gpu=gpu.port, cpu=cpu.port), tmp)
    router.wait_healthy(2)
    for prio in ("urgent", "normal", "batch"):
        infer(router.port, prio)
        infer(router.port, prio, data_class="sensitive")  # pinned to the sensitive CPU pool
        stream_chat(router.port, prio)
        stream_chat(router.port, prio, data_class="sensitive")
    yield {"gpu": gpu, "cpu": cpu, "router": router}
    assert router.stop() == 0
    for w in (gpu, cpu):
        assert w.stop() == 0, w.log_text()[-4000:]


def metrics_text(port):
    code, body = http_get(port, "/metrics")
    assert code == 200, body[:500]
    return body


@needs_promtool
@pytest.mark.parametrize("who", ["gpu", "cpu", "router"])
def test_promtool_check_metrics_on_live_metrics(stack, who):
    """Exposition format and Prometheus' naming lint (units, _total, help text)."""
    proc = stack[who].proc
    port = stack[who].port
    code, out = run_promtool("check", "metrics", stdin=metrics_text(port))
    assert proc.poll() is None
    # The model server protocol's names (vllm:num_requests_waiting, ...) are what inference
    # gateways scrape, colon and all; the lint's "should not contain ':'" is the one finding
    # allowed, and only for them.
    lines = [l for l in out.splitlines() if l.strip()]
    allowed = [l for l in lines if l.startswith("vllm:") and "should not contain ':'" in l]
    rest = [l for l in lines if l not in allowed]
    assert code == 0 or (allowed and not rest), f"promtool check metrics on {who}'s /metrics:\n{out}"


class Prometheus:
    def __init__(self, config, tmp):
        self.port = free_port()
        self.log = tmp / "prometheus.log"
        cfg = tmp / "prometheus.yml"
        cfg.write_text(yaml.safe_dump(config))
        with open(self.log, "wb") as log:
            self.proc = track(subprocess.Popen(
                [PROMETHEUS, f"--config.file={cfg}", f"--storage.tsdb.path={tmp / 'data'}",
                 f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"],
                stdout=subprocess.DEVNULL, stderr=log))

    def log_text(self):
        return self.log.read_text(errors="replace")[-4000:]

    def api(self, path, **params):
        q = f"/api/v1/{path}" + (f"?{urllib.parse.urlencode(params)}" if params else "")
        code, body = http_get(self.port, q)
        doc = json.loads(body)
        assert code == 200 and doc["status"] == "success", (path, params, code, doc)
        return doc["data"]

    def query(self, q):
        """An instant query's result list."""
        return self.api("query", query=q)["result"]

    def wait(self, what, check, timeout=30):
        """Polls check() (returns a truthy result when done) until the deadline."""
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, f"prometheus exited {self.proc.returncode}:\n{self.log_text()}"
            try:
                last = check()
            except (ConnectionError, OSError):
                last = None
            if last:
                return last
            time.sleep(0.2)
        raise AssertionError(f"prometheus: {what} not reached in {timeout}s (last: {last})\n{self.log_text()}")

    def stop(self):
        self.proc.terminate()
        return self.proc.wait(timeout=30)


def prometheus_config_for(stack):
    """deploy/prometheus/prometheus.yml with 1 s scrapes and evaluations, alerts.yml by
    absolute path, and its static targets replaced by the stack's processes (the two
    worker groups keep their pool labels)."""
    cfg = load_yaml(PROM_CONFIG)
    cfg["global"].update({"scrape_interval": "1s", "evaluation_interval": "1s"})
    assert cfg["rule_files"] == ["alerts.yml"]
    cfg["rule_files"] = [str(RULES)]
    jobs = {j["job_name"]: j for j in cfg["scrape_configs"]}
    assert set(jobs) == {"tierserve", "tierrouter"}
    groups = jobs["tierserve"]["static_configs"]
    assert [g["labels"]["pool"] for g in groups] == ["gpu", "cpu"]
    groups[0]["targets"] = [f"127.0.0.1:{stack['gpu'].port}"]
    groups[1]["targets"] = [f"127.0.0.1:{stack['cpu'].port}"]
    jobs["tierrouter"]["static_configs"] = [{"targets": [f"127.0.0.1:{stack['router'].port}"]}]
    return cfg


@pytest.fixture(scope="module")
def prom(stack, tmp_path_factory):
    p = Prometheus(prometheus_config_for(stack), tmp_path_factory.mktemp("prometheus"))
    p.wait("ready", lambda: http_get(p.port, "/-/ready")[0] == 200)
    p.wait("three targets up", lambda: sorted(
        (r["metric"]["job"], r["value"][1]) for r in p.query("up")) == [
            ("tierrouter", "1"), ("tierserve", "1"), ("tierserve", "1")])
    yield p
    assert p.stop() == 0, p.log_text()


@needs_prometheus
def test_prometheus_reads_the_tier_back(stack, prom):
    """What each worker says in /v2/status is what Prometheus has scraped."""
    for pool in ("gpu", "cpu"):
        w = stack[pool]
        code, st = w.get_json("/v2/status")
        assert code == 200
        instance = f"127.0.0.1:{w.port}"
        info = prom.wait(f"{pool} tier info", lambda: prom.query(
            f'tierserve_execution_provider_info{{instance="{instance}"}}'))
        assert len(info) == 1
        m = info[0]["metric"]
        assert (m["job"], m["pool"]) == ("tierserve", pool)
        assert (m["requested"], m["active"], m["tier"]) == (st["requested"], st["active_provider"], st["tier"])
        assert info[0]["value"][1] == "1"
        degraded = prom.query(f'tierserve_ep_degraded{{instance="{instance}"}}')
        assert [d["value"][1] for d in degraded] == ["1" if st["degraded"] else "0"]
    assert stack["cpu"].get_json("/v2/status")[1]["tier"] == "cpu"


@needs_prometheus
def test_degraded_alert_follows_the_real_worker(stack, prom):
    """TierserveTierDegraded goes pending (for: 5m) for the auto worker exactly when it fell
    back (on a machine without a GPU it does), and never for the CPU worker."""
    st = stack["gpu"].get_json("/v2/status")[1]

    def alerts():
        return [a for a in prom.api("alerts")["alerts"] if a["labels"]["alertname"] == "TierserveTierDegraded"]

    prom.wait("every rule evaluated", lambda: evaluated_rules(prom))
    if st["degraded"]:
        got = prom.wait("TierserveTierDegraded pending", alerts)
        assert [(a["labels"]["instance"], a["labels"]["tier"], a["labels"]["requested"], a["state"]) for a in got] \
            == [(f"127.0.0.1:{stack['gpu'].port}", st["tier"], "auto", "pending")]
    else:
        time.sleep(2)  # two more evaluations
        assert alerts() == []


def evaluated_rules(prom):
    """(group, rule) of every loaded rule once each has been evaluated at least once."""
    got = [(g["name"], r) for g in prom.api("rules")["groups"] for r in g["rules"]]
    never = "0001-01-01T00:00:00Z"  # Go's zero time: not evaluated yet
    return got if got and all(r["lastEvaluation"] != never for _, r in got) else None


def scraped_names(prom):
    return set(prom.api("label/__name__/values"))


def recorded_names(prom):
    return {r["name"] for g in prom.api("rules")["groups"] for r in g["rules"] if r["type"] == "recording"}


def no_gpu(stack):
    return stack["gpu"].get_json("/v2/status")[1]["gpu_memory_used_fraction"] is None


def check_names(where, names, known, stack):
    missing = names - known
    if no_gpu(stack):
        status_c = (ROOT / "src" / "worker" / "status.c").read_text()
        gpu = {n for n in missing & GPU_ONLY if f'"{n}' in status_c}
        missing -= gpu
    assert not missing, f"{where} uses metric names the scrape does not have: {sorted(missing)}"


@needs_prometheus
def test_rules_load_and_evaluate_cleanly(stack, prom):
    """Every rule of alerts.yml is loaded, evaluates without error against the real scrape,
    and uses only metric names the worker and router export."""
    want = {(g, r.get("alert") or r["record"]) for g, r in rules()}

    got = prom.wait("every rule evaluated", lambda: evaluated_rules(prom))
    assert {(g, r["name"]) for g, r in got} == want
    for g, r in got:
        assert r["health"] == "ok" and not r.get("lastError"), (g, r)
    known = scraped_names(prom) | recorded_names(prom)
    for g, r in rules():
        check_names(f"rule {r.get('alert') or r['record']}", promql_names(r["expr"]), known, stack)


@needs_prometheus
def test_slo_thresholds_are_router_bucket_bounds(stack, prom):
    les = {r["metric"]["le"] for r in prom.query("tierrouter_request_duration_seconds_bucket")}
    assert set(SLO_OBJECTIVE_LE.values()) <= les, les


@needs_prometheus
def test_llm_targets_are_router_bucket_bounds_and_its_own(stack, prom):
    """Each LLM target is a bucket bound of the router's histogram (so a p95 from the buckets
    is exact against it), and the recording rules the alerts read follow the router's own
    targets (tierrouter_slo_{ttft,itl}_target_seconds): the stack's router sets normal's time
    to first token to 2.5 s, not the rules' default of 1 s, and Prometheus reads 2.5 s."""
    st = stack["router"].status()
    for kind, metric in LLM_HISTOGRAMS.items():
        les = {float(r["metric"]["le"]) for r in prom.query(f"{metric}_bucket")}
        assert set(LLM_TARGETS[kind].values()) <= les, (kind, sorted(les))
        own = {p: st["slo"][p][kind]["target_p95_ms"] / 1e3 for p in LLM_TARGETS[kind]}
        assert set(own.values()) <= les, (kind, own)

        def rules_follow():
            got = {r["metric"]["priority"]: float(r["value"][1])
                   for r in prom.query(f"tierrouter:llm_{kind}_target_seconds")}
            return got if got == own else None
        prom.wait(f"{kind} targets as the router has them", rules_follow)
    assert st["slo"]["normal"]["ttft"]["target_p95_ms"] == 2500 != LLM_TARGETS["ttft"]["normal"] * 1e3


@needs_prometheus
def test_every_dashboard_query_runs_and_selects_series(stack, prom):
    """Each panel target's expr, with Grafana's variables filled in, is a valid query over
    metric names the scrape (or a loaded recording rule) has, and returns series once the
    recording rules have run; GPU-only panels are empty where there is no GPU."""
    targets = dashboard_targets()
    assert len(targets) >= 51
    known = scraped_names(prom) | recorded_names(prom)
    for title, expr in targets:
        check_names(f"panel {title!r}", promql_names(grafana_expr(expr)), known, stack)

    def empty():
        out = []
        for title, expr in targets:
            if promql_names(expr) & GPU_ONLY and no_gpu(stack):
                continue
            if not prom.query(grafana_expr(expr)):
                out.append((title, expr))
        return out

    deadline = time.monotonic() + 20
    left = empty()
    while left and time.monotonic() < deadline:
        time.sleep(0.5)
        left = empty()
    assert left == [], "panel queries that select nothing"
