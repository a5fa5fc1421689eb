"""tierrouter's settings: one table gives every key its default, bounds and help; a key the
file sets keeps its value, 0 included; TIERROUTER_* overrides are parsed strictly; --help
prints the table and --check-config the effective values.

Nothing here proxies inference through a real worker: the backends are fakes or addresses
nobody listens on. A config the router wrongly accepted would start it, so every refusal is
run as a real start (on 127.0.0.1, a free port) with a time limit, never as a dry run that an
older binary could refuse for another reason.
"""
import http.client
import os
import re
import signal
import subprocess
import time

import pytest

from conftest import ROOT, SANITIZER_MARKERS, sanitizer_env, track
from helpers import get
from fakehttp import FakeHTTP
from test_router import ROUTER_BIN, Router, pools_config

SAMPLE = ROOT / "config" / "router.sample.yaml"
ENV_VARS = ["TIERROUTER_LOG_LEVEL", "TIERROUTER_ADDRESS", "TIERROUTER_PORT", "TIERROUTER_ADMIN_TOKEN",
            "TIERROUTER_METRICS_TOKEN", "TIERROUTER_WORKER_TOKEN", "TIERROUTER_DRAIN_TIMEOUT_S", "TIERROUTER_ACCESS_LOG"]
# backends where nothing listens: a config test never needs a live one
ONE_POOL = "pools:\n  - name: g\n    kind: gpu\n    backends: [\"127.0.0.1:1\"]\n"


def clean_env(**extra):
    """The environment without any TIERROUTER_* the caller's shell may carry."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TIERROUTER_")}
    env.update(sanitizer_env())
    env.update(extra)
    return env


def run(args, env=None, timeout=20):
    return subprocess.run([ROUTER_BIN, *args], capture_output=True, timeout=timeout, env=env or clean_env())


def refused(tmp_path, text, env=None):
    """Starts the router for real on text (on 127.0.0.1 and a free port unless the caller's
    env says otherwise) and expects it to refuse: exit 64, one log line. Returns that line.
    A router that starts instead is killed when the time is up and the test fails."""
    cfg = tmp_path / f"r-{time.monotonic_ns()}.yaml"
    cfg.write_text("address: 127.0.0.1\n" + text)
    p = run(["--config", str(cfg)], clean_env(**{"TIERROUTER_PORT": "0", **(env or {})}), timeout=15)
    err = p.stderr.decode(errors="replace")
    assert p.returncode == 64, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


def effective(tmp_path, text, env=None):
    """--check-config on text: {key: value} of every effective setting."""
    cfg = tmp_path / f"c-{time.monotonic_ns()}.yaml"
    cfg.write_text(text)
    p = run(["--check-config", "--config", str(cfg)], clean_env(**(env or {})))
    assert p.returncode == 0, p.stderr
    assert not [m for m in SANITIZER_MARKERS if m.encode() in p.stderr], p.stderr
    return dict(line.split(": ", 1) for line in p.stdout.decode().splitlines())


def help_rows():
    """--help's table: {key: (env var or '', the rest of the line)}."""
    p = run(["--help"])
    assert p.returncode == 0, p.stderr
    rows = {}
    for line in p.stdout.decode().splitlines():
        m = re.match(r"^  (\S+)\s+(TIERROUTER_\w+)?\s*(\[.*)$", line)
        if m:
            rows[m.group(1)] = (m.group(2) or "", m.group(3))
    return rows, p.stdout.decode()


class Proc:
    """A router started with exactly the environment given (Router always sets TIERROUTER_PORT)."""

    def __init__(self, tmp_path, text, env):
        cfg = tmp_path / f"p-{time.monotonic_ns()}.yaml"
        cfg.write_text(text)
        self.log = tmp_path / f"p-{time.monotonic_ns()}.log"
        self.proc = track(subprocess.Popen([ROUTER_BIN, "--config", str(cfg)], stderr=open(self.log, "wb"), env=env))
        self.listening = None
        deadline = time.time() + 20
        while time.time() < deadline and self.proc.poll() is None:
            m = re.search(r"listening on (\S+):(\d+) ", self.log.read_text())
            if m:
                self.listening = (m.group(1), int(m.group(2)))
                break
            time.sleep(0.05)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout=20)
        text = self.log.read_text(errors="replace")
        assert not [m for m in SANITIZER_MARKERS if m in text], text[-4000:]
        return code


# ---- --help and the command line ---------------------------------------------------------

def test_help_prints_every_key_with_its_variable_default_and_bounds():
    rows, text = help_rows()
    assert len(rows) > 50, text
    assert rows["port"] == ("TIERROUTER_PORT", rows["port"][1]) and rows["port"][1].startswith("[9000] 0..65535")
    assert rows["retry.budget_ratio"][1].startswith("[0.2] 0..1")
    assert rows["policy.stages"][1].startswith("[0, 0.25, 0.5, 1]")
    assert rows["pools[].max_in_flight"][1].startswith("[64] 1..4096")
    assert rows["pools[].min_tier"][1].startswith("[cuda; cpu pools: cpu] cpu|cuda|tensorrt")
    assert rows["pools"][1].startswith("[required] 1..8 entries")
    assert rows["admin_token"][1].startswith("[unset] 8..255 visible ASCII")
    assert {v for v, _ in rows.values() if v} == set(ENV_VARS)
    assert "TIERROUTER_CONFIG" in text and "--check-config" in text
    assert "request_timeout_ms" not in rows
    # each row is followed by its help text
    for key in ("port", "retry.min_concurrency", "pools[].pool_max_in_flight"):
        after = text.split(f"  {key} ", 1)[1].splitlines()[1]
        assert after.startswith("      ") and len(after.strip()) > 10, after


@pytest.mark.parametrize("args,needle", [
    (["--bogus"], "unknown argument '--bogus'"),
    (["--config"], "--config needs a file"),
    (["--config="], "no config"),
    (["--check-config"], "no config"),
    ([], "no config"),
])
def test_bad_arguments_exit_64(args, needle):
    p = run(args, clean_env(TIERROUTER_PORT="0"), timeout=15)
    err = p.stderr.decode()
    assert p.returncode == 64 and needle in err and len(err.strip().splitlines()) == 1, err


def test_every_key_is_in_the_sample_config():
    rows, _ = help_rows()
    sample = SAMPLE.read_text()
    assert len(rows) > 50
    for key in rows:
        last = re.sub(r"^.*\.", "", key)
        assert re.search(r"(^|[\s{,])#? ?%s:" % re.escape(last), sample, re.M), key
    for var in ENV_VARS + ["TIERROUTER_CONFIG"]:
        assert var in sample, var


# ---- defaults, and zero kept as a value --------------------------------------------------

def test_sample_states_the_defaults(tmp_path):
    sample = effective(tmp_path, SAMPLE.read_text())
    minimal = effective(tmp_path, ONE_POOL)
    top = {k: v for k, v in minimal.items() if "[" not in k and k != "pools"}
    assert len(top) > 40
    assert {k: sample[k] for k in top} == top
    assert minimal["port"] == "9000" and minimal["retry.budget_ratio"] == "0.2"
    assert minimal["pools[0].min_tier"] == "cuda" and minimal["pools[0].max_in_flight"] == "64"
    cpu = effective(tmp_path, ONE_POOL.replace("kind: gpu", "kind: cpu"))
    assert cpu["pools[0].min_tier"] == "cpu"


def test_sample_pools_are_the_shipped_hybrid(tmp_path):
    """The sample's pools are tools/tierbench/configs/hybrid.conf, the fleet that meets issue 26's
    bar on the shipped traces (docs/operate/tuning.md): the same pools in the same order, the
    same kinds, data classes and in-flight limits, and the policy and admission the plan was
    simulated with (the defaults; test_sample_states_the_defaults holds those)."""
    conf = ROOT / "tools" / "tierbench" / "configs" / "hybrid.conf"
    pools = [dict(kv.split("=", 1) for kv in line.split(None, 1)[1].split(","))
             for line in conf.read_text().splitlines() if line.startswith("pool ")]
    assert not [l for l in conf.read_text().splitlines() if l and not l.startswith(("#", "pool "))]
    sample = effective(tmp_path, SAMPLE.read_text())
    assert len(pools) == 2 and not any(k.startswith("pools[2]") for k in sample)
    for i, p in enumerate(pools):
        assert sample[f"pools[{i}].name"] == p["name"] and sample[f"pools[{i}].kind"] == p["kind"]
        assert sample[f"pools[{i}].sensitive"] == ("true" if p.get("sensitive") == "1" else "false"), p
        assert sample[f"pools[{i}].max_in_flight"] == p["max_in_flight"], p
        assert sample[f"pools[{i}].scale_target"] == p.get("scale_target", "0"), p


def test_sample_config_starts_the_router(tmp_path):
    """The sample, unchanged, with the per-pod overrides a test needs: loopback, a free port.
    Its backends need not answer for the router to start."""
    r = Router(SAMPLE.read_text(), tmp_path, env=clean_env(TIERROUTER_ADDRESS="127.0.0.1", TIERROUTER_PORT="0"))
    try:
        assert re.search(r"listening on 127\.0\.0\.1:%d with 2 pool\(s\)" % r.port, r.log.read_text())
        assert get(r.port, "/v2/health/live")[0] == 200
    finally:
        assert r.stop() == 0


@pytest.mark.parametrize("text,key,value", [
    ("port: 0\n", "port", "0"),
    ("retry: {budget_ratio: 0}\n", "retry.budget_ratio", "0"),
    ("retry: {min_concurrency: 0}\n", "retry.min_concurrency", "0"),
    ("policy: {sustain_s: 0}\n", "policy.sustain_s", "0"),
    ("policy: {cooldown_s: 0}\n", "policy.cooldown_s", "0"),
    ("policy: {queue: {high: 4, low: 0}}\n", "policy.queue.low", "0"),
    ("admission: {queue_size: 0}\n", "admission.queue_size", "0"),
    ("admission: {queue_timeout_ms: 0}\n", "admission.queue_timeout_ms", "0"),
    ("slo_p95_ms: {urgent: 0, normal: 10}\n", "slo_p95_ms.urgent", "0"),
    ("auth_limit: {window_s: 1}\n", "auth_limit.max_failures", "10"),  # siblings keep defaults
    ("policy: {queue: {high: 4}}\n", "policy.queue.low", "2"),
])
def test_a_key_set_to_zero_keeps_it(tmp_path, text, key, value):
    assert effective(tmp_path, text + ONE_POOL)[key] == value


def test_port_0_in_the_file_picks_a_free_port(tmp_path):
    p = Proc(tmp_path, "address: 127.0.0.1\nport: 0\n" + ONE_POOL, clean_env())
    try:
        assert p.listening, p.log.read_text()
        host, port = p.listening
        assert host == "127.0.0.1" and port not in (0, 9000), p.listening
        assert get(port, "/v2/health/live")[0] == 200
    finally:
        assert p.stop() == 0


class Failing(FakeHTTP):
    """A backend that answers every inference 500 (echoing the request's id, as a worker
    does, so the router sees a 5xx and not a stray reply)."""

    def respond(self, c, head, body):
        m = re.search(rb"(?im)^x-request-id: *(\S+)", head)
        out = b'{"error": "boom"}'
        c.sendall(b"HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/json\r\nX-Request-Id: " +
                  (m.group(1) if m else b"") + b"\r\nContent-Length: %d\r\n\r\n" % len(out) + out)


@pytest.mark.parametrize("retry,tries", [
    ("retry: {budget_ratio: 0, min_concurrency: 0}\n", 1),  # no budget, no floor: no 5xx retry
    ("retry: {budget_ratio: 0}\n", 2),                      # no budget, the floor of 3 retries it
])
def test_budget_ratio_0_leaves_only_the_floor(tmp_path, retry, tries):
    fakes = [Failing(), Failing()]
    r = Router(pools_config([("p", "cpu", False, [f.port for f in fakes], None)], retry), tmp_path)
    try:
        r.wait_healthy(2)
        c = http.client.HTTPConnection("127.0.0.1", r.port, timeout=15)
        c.request("POST", "/v2/models/demo/infer", body=b'{"inputs": [{"name": "input", "datatype": "FP32", '
                  b'"shape": [1, 4], "data": [1, 2, 3, 4]}]}', headers={"Content-Type": "application/json"})
        rep = c.getresponse()
        rep.read()
        c.close()
        assert rep.status >= 500
        assert sum(f.hits for f in fakes) == tries
        metrics = get(r.port, "/metrics").body.decode()
        assert re.search(r"^tierrouter_retries_total %d$" % (tries - 1), metrics, re.M), metrics
    finally:
        assert r.stop() == 0
        for f in fakes:
            f.close()


# ---- bad values name the key and where it is ----------------------------------------------

@pytest.mark.parametrize("text,needle", [
    ("dns_refresh_s: 0\n", "dns_refresh_s: 0 is not in 1..3600 (line 2, column 16)"),
    ("max_body_bytes: 10\n", "max_body_bytes: 10 is not in 1024..4294967295"),
    ("deadline_ms: {urgent: 0}\n", "deadline_ms.urgent: 0 is not in 1..3600000"),
    ("retry: {budget_ratio: 1.5}\n", "retry.budget_ratio: 1.5 is not in 0..1"),
    ("ejection: {consecutive_failures: 0}\n", "ejection.consecutive_failures: 0 is not in 1..1000"),
    ("ejection: {base_ms: 5000, max_ms: 1000}\n", "ejection.max_ms: 1000 is below ejection.base_ms"),
    ("policy: {stage_hold_s: 0}\n", "policy.stage_hold_s: 0 is not in 0.001..86400"),
    ("policy: {gpu_memory: {high: 1.5}}\n", "policy.gpu_memory.high: 1.5 is not in 0..1"),
    ("policy: {stages: [0, 0.5, 2]}\n", "policy.stages: stage 2 is 2, not a share in 0..1"),
    ("priority_header: \"X Priority\"\n", "priority_header: 'X Priority' is not an HTTP header name"),
    ("dns_nameserver: \"\"\n", 'dns_nameserver: \\"\\" is 0 characters, not 3..63'),
    ("log_level: loud\n", "log_level"),
    ("pools_extra: 1\n", "pools_extra"),
    ("tenants:\n  - {name: a, api_key: short}\n", "tenants[0].api_key: 5 characters, not 8..255"),
])
def test_bad_values_name_the_key_and_line(tmp_path, text, needle):
    assert needle in refused(tmp_path, text + ONE_POOL)


@pytest.mark.parametrize("pool_extra,needle", [
    ("    max_in_flight: 0\n", "pools[0].max_in_flight: 0 is not in 1..4096 (line 6, column 20)"),
    ("    kind2: gpu\n", "kind2"),
    ("    cost: {model: usage, usd_per_hour: -1}\n", "pools[0].cost.usd_per_hour: -1 is not in 0..1e+06"),
])
def test_bad_pool_values_name_the_pool_key(tmp_path, pool_extra, needle):
    assert needle in refused(tmp_path, ONE_POOL + pool_extra)


def test_request_timeout_ms_is_refused_naming_deadline_ms(tmp_path):
    line = refused(tmp_path, "request_timeout_ms: 30000\n" + ONE_POOL)
    assert "request_timeout_ms" in line and "deadline_ms" in line and "line 2" in line, line


def test_aliases_are_refused(tmp_path):
    """A key reached through an alias would look absent and get its default."""
    line = refused(tmp_path, "deadline_ms: &d {urgent: 100, normal: 100, batch: 100}\nslo_p95_ms: *d\n" + ONE_POOL)
    assert "alias" in line, line


# ---- TIERROUTER_* overrides ----------------------------------------------------------------

@pytest.mark.parametrize("var,value,secret", [
    ("TIERROUTER_PORT", "abc", False),
    ("TIERROUTER_PORT", "70000", False),
    ("TIERROUTER_PORT", "-1", False),
    ("TIERROUTER_PORT", "", False),
    ("TIERROUTER_PORT", "80 ", False),
    ("TIERROUTER_PORT", "0x50", False),
    ("TIERROUTER_LOG_LEVEL", "loud", False),
    ("TIERROUTER_ADDRESS", "", False),
    ("TIERROUTER_ADMIN_TOKEN", "short", True),
    ("TIERROUTER_METRICS_TOKEN", "has a space", True),
    ("TIERROUTER_WORKER_TOKEN", "tab\there-and-more", True),
])
def test_bad_override_exits_64_naming_variable_and_value(tmp_path, var, value, secret):
    line = refused(tmp_path, ONE_POOL, env={var: value})
    assert var in line, line
    if secret:
        assert value not in line, line
    else:
        assert f'\\"{value}\\"' in line, line


def test_overrides_win_over_the_file(tmp_path):
    text = ("address: 0.0.0.0\nport: 9000\nlog_level: warn\nadmin_token: file-admin-token\n"
            "metrics_token: file-scrape-token\nworker_token: file-worker-token\n" + ONE_POOL)
    env = {"TIERROUTER_ADDRESS": "127.0.0.1", "TIERROUTER_PORT": "0", "TIERROUTER_LOG_LEVEL": "debug",
           "TIERROUTER_ADMIN_TOKEN": "env-admin-token", "TIERROUTER_METRICS_TOKEN": "env-scrape-token",
           "TIERROUTER_WORKER_TOKEN": "env-worker-token"}
    eff = effective(tmp_path, text, env)
    assert (eff["address"], eff["port"], eff["log_level"]) == ("127.0.0.1", "0", "debug")
    p = Proc(tmp_path, text, clean_env(**env))
    try:
        assert p.listening and p.listening[0] == "127.0.0.1", p.log.read_text()
        port = p.listening[1]
        assert get(port, "/admin/status")[0] == 401
        assert get(port, "/admin/status", {"Authorization": "Bearer file-admin-token"})[0] == 401
        assert get(port, "/admin/status", {"Authorization": "Bearer env-admin-token"})[0] == 200
        assert get(port, "/metrics", {"Authorization": "Bearer file-scrape-token"})[0] == 401
        assert get(port, "/metrics", {"Authorization": "Bearer env-scrape-token"})[0] == 200
    finally:
        assert p.stop() == 0


class Probed(FakeHTTP):
    """Records the Authorization header of every probe."""

    def __init__(self):
        self.auth = []
        super().__init__()

    def handle(self, c):
        c.settimeout(10)
        try:
            while not self.stop.is_set():
                head = c.recv(65536)
                if not head:
                    return
                m = re.search(rb"(?im)^authorization: *([^\r\n]*)", head)
                self.auth.append(m.group(1) if m else None)
                st = b'{"live": true, "ready": true, "tier": "cpu", "queue_depth": 0}'
                c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
                          % len(st) + st)
        except OSError:
            return


def test_worker_token_variable_still_reaches_the_backends(tmp_path):
    f = Probed()
    r = Router(pools_config([("p", "cpu", False, [f.port], None)], "worker_token: file-worker-token\n"), tmp_path,
               env={"TIERROUTER_WORKER_TOKEN": "env-worker-token"})
    try:
        r.wait_healthy(1)
        assert f.auth and set(f.auth) == {b"Bearer env-worker-token"}, f.auth
    finally:
        assert r.stop() == 0
        f.close()


def test_check_config_never_prints_a_secret(tmp_path):
    text = ("admin_token: file-admin-token\ntenants:\n  - {name: acme, api_key: acme-key-0001}\n" + ONE_POOL)
    cfg = tmp_path / "s.yaml"
    cfg.write_text(text)
    p = run(["--check-config", "--config", str(cfg)], clean_env(TIERROUTER_WORKER_TOKEN="env-worker-token"))
    out = p.stdout.decode()
    assert p.returncode == 0, p.stderr
    assert "admin_token: (set)" in out and "worker_token: (set)" in out and "tenants[0].api_key: (set)" in out
    assert "metrics_token: ~" in out and "tenants[0].name: acme" in out
    for secret in ("file-admin-token", "acme-key-0001", "env-worker-token"):
        assert secret not in out


# ---- tenant keys and the admin token ------------------------------------------------------

def test_tenant_keys_without_admin_token_refuse_to_start_unless_admin_open(tmp_path):
    """Keys close inference; without an admin token /admin/* and /metrics (tenant names,
    costs) would stay open unnoticed. Refused, naming the three keys; admin_open: true starts
    the router open on purpose, with one warning at start."""
    keys = "tenants:\n  - {name: free}\n  - {name: acme, api_key: acme-key-0001}\n"
    line = refused(tmp_path, keys + ONE_POOL)
    for needle in ("tenants[].api_key", "admin_token", "admin_open", "/admin/*", "/metrics"):
        assert needle in line, line
    # --check-config judges the same way
    cfg = tmp_path / "keys.yaml"
    cfg.write_text(keys + ONE_POOL)
    p = run(["--check-config", "--config", str(cfg)])
    assert p.returncode == 64 and "admin_open" in p.stderr.decode(), p.stderr
    # the token from its variable is enough; so is admin_open: true
    assert effective(tmp_path, keys + ONE_POOL, {"TIERROUTER_ADMIN_TOKEN": "env-admin-token"})["admin_open"] == "false"
    assert effective(tmp_path, "admin_open: true\n" + keys + ONE_POOL)["admin_open"] == "true"
    # tenants without keys (nothing closed) need neither
    assert effective(tmp_path, "tenants:\n  - {name: free}\n" + ONE_POOL)["tenants[0].name"] == "free"
    r = Router("address: 127.0.0.1\nadmin_open: true\n" + keys + ONE_POOL, tmp_path, env=clean_env())
    try:
        warned = [ln for ln in r.log.read_text().splitlines() if "admin_open" in ln]
        assert len(warned) == 1, r.log.read_text()
        assert '"level":"warn"' in warned[0] and "OPEN" in warned[0] and "/metrics" in warned[0], warned
        assert get(r.port, "/admin/status")[0] == 200  # open, as it said
        assert get(r.port, "/v2/models/demo")[0] == 401  # the keys still hold
    finally:
        assert r.stop() == 0
    # with an admin token the same file starts without the warning
    r = Router("address: 127.0.0.1\nadmin_token: file-admin-token\n" + keys + ONE_POOL, tmp_path, env=clean_env())
    try:
        assert "admin_open" not in r.log.read_text()
        assert get(r.port, "/admin/status")[0] == 401
    finally:
        assert r.stop() == 0
