"""tierrouter's front against hostile clients: classification headers that fail closed,
credentials (constant-time compare, a per-address limit on wrong ones), what /metrics and
the repository index show to whom, request ids, /admin/cost's window, 405s with Allow, and
the worker token the router sends to its backends.

The backends are fake (fakehttp): they answer probes as healthy CPU workers, answer every
inference with a fixed reply and record every request head they get, so a test sees exactly
what the router forwarded, and nothing here waits for a model to load. The client is a raw
socket, one connection per request, never retried, so duplicate and control-character
headers reach the router exactly as written.
"""
import json
import os
import re
import socket
import subprocess
import threading
import time

import pytest

from conftest import sanitizer_env
from helpers import wait_until
from rawhttp import read_to_close
from fakehttp import FakeHTTP, echo_id
from test_router import ROUTER_BIN, Router, pools_config

BODY = json.dumps({"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 4],
                               "data": [1, 2, 3, 4]}]}).encode()
REPLY = json.dumps({"model_name": "demo", "model_version": "1", "outputs": []}).encode()


class Recorder(FakeHTTP):
    """A healthy fake worker that records the head of every request, probes included."""

    def __init__(self):
        self.heads = []
        self.lock = threading.Lock()
        super().__init__()

    status = {**FakeHTTP.status, "models": [{"name": "demo", "version": "1", "ready": True}]}

    def seen(self, head):
        with self.lock:
            self.heads.append(head)

    def respond(self, c, head, body):
        c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n" + echo_id(head) +
                  b"Content-Length: %d\r\n\r\n" % len(REPLY) + REPLY)
        return True

    def recorded(self, probes):
        """Heads recorded so far: the probes, or every other request."""
        with self.lock:
            return [h for h in self.heads if h.startswith(b"GET /v2/status") == probes]


class Reply:
    def __init__(self, raw):
        head, _, self.body = raw.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        self.status = int(lines[0].split()[1])
        self.headers = [tuple(x.strip() for x in line.split(":", 1)) for line in lines[1:]]

    def header(self, name):
        vals = [v for k, v in self.headers if k.lower() == name.lower()]
        assert len(vals) <= 1, (name, self.headers)
        return vals[0] if vals else None

    def json(self):
        return json.loads(self.body)


def raw(port, method, path, headers=(), body=None, src="127.0.0.1"):
    """One request on a fresh connection, exactly as given (duplicates, any bytes); the
    reply read to the end. Never retried."""
    if body is None and method == "POST":
        body = b""
    out = f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n".encode()
    for k, v in headers:
        out += k.encode() + b": " + (v if isinstance(v, bytes) else v.encode()) + b"\r\n"
    if body is not None:
        out += b"Content-Length: %d\r\n" % len(body)
    with socket.create_connection(("127.0.0.1", port), timeout=10, source_address=(src, 0)) as s:
        s.sendall(out + b"\r\n" + (body or b""))
        return Reply(read_to_close(s, within=10))


def head_values(head, name):
    """Every value of the header called name in a recorded request head."""
    return [line.split(b":", 1)[1].strip() for line in head.split(b"\r\n")[1:]
            if line.split(b":", 1)[0].strip().lower() == name.lower()]


def infer(r, headers=(), src="127.0.0.1"):
    return raw(r.port, "POST", "/v2/models/demo/infer", headers, BODY, src)


def wait_healthy(r, n, headers=()):
    """Waits until /admin/status, read over raw HTTP with those headers, counts n healthy backends."""
    def healthy():
        rep = raw(r.port, "GET", "/admin/status", headers)
        assert rep.status == 200, rep.body
        return sum(p["healthy"] for p in rep.json()["pools"]) >= n
    wait_until(healthy, 15, f"the router to see {n} healthy backends")


@pytest.fixture()
def fakes():
    """Two recording backends: one for a non-sensitive pool, one for a sensitive one."""
    a, b = Recorder(), Recorder()
    yield a, b
    a.close()
    b.close()


def two_pools(fakes, extra=""):
    a, b = fakes
    return pools_config([("gpu", "gpu", False, [a.port], None), ("cpu", "cpu", True, [b.port], None)], extra)


@pytest.fixture()
def router(tmp_path):
    """Starts routers; each is stopped (exit 0, no sanitizer report) when the test ends."""
    started = []

    def start(cfg, env=None):
        started.append(Router(cfg, tmp_path, env))
        return started[-1]

    yield start
    for r in started:
        assert r.stop() == 0


# ---- 5: classification headers fail closed ---------------------------------------------

@pytest.mark.parametrize("headers,name", [
    ([("X-Data-Class", "public"), ("X-Data-Class", "sensitive")], "X-Data-Class"),
    ([("X-Data-Class", "sensitive"), ("x-data-class", "public")], "X-Data-Class"),
    ([("X-Data-Class", "public, sensitive")], "X-Data-Class"),
    ([("X-Data-Class", "secret")], "X-Data-Class"),
    ([("X-Data-Class", "")], "X-Data-Class"),
    ([("X-Priority", "batch"), ("X-Priority", "urgent")], "X-Priority"),
    ([("X-Api-Key", "acme-key-0001"), ("X-Api-Key", "other-key-0002")], "X-Api-Key"),
    ([("X-Tenant", "acme"), ("X-Tenant", "clinic")], "X-Tenant"),
])
def test_duplicate_or_unknown_classification_is_400_naming_the_header(fakes, router, headers, name):
    r = router(two_pools(fakes))
    wait_healthy(r, 2)
    rep = infer(r, headers)
    assert rep.status == 400, (rep.status, rep.body)
    assert name in rep.json()["error"]
    assert rep.header("X-Tierrouter-Backend") is None
    assert fakes[0].hits == fakes[1].hits == 0  # no backend saw it


def test_known_data_classes_any_case(fakes, router):
    r = router(two_pools(fakes))
    wait_healthy(r, 2)
    for value, pool in [("SENSITIVE", "cpu"), ("sensitive", "cpu"), ("Public", "gpu"), ("internal", "gpu"),
                        ("normal", "gpu"), (None, "gpu")]:
        rep = infer(r, [("X-Data-Class", value)] if value is not None else [])
        assert rep.status == 200, (value, rep.body)
        assert rep.header("X-Tierrouter-Pool") == pool, value


def test_configured_header_names_are_the_ones_checked(fakes, router):
    # admin_open: keys without an admin token refuse to start; wait_healthy reads /admin/status
    extra = ("data_class_header: X-Class\npriority_header: X-Prio\napi_key_header: X-Key\nadmin_open: true\n"
             "tenants:\n  - {name: acme, api_key: acme-key-0001}\n")
    r = router(two_pools(fakes, extra))
    wait_healthy(r, 2)
    key = ("X-Key", "acme-key-0001")
    for headers, name in [([key, ("X-Class", "public"), ("x-class", "sensitive")], "X-Class"),
                          ([key, ("X-Prio", "batch"), ("X-PRIO", "urgent")], "X-Prio"),
                          ([key, key], "X-Key")]:
        rep = infer(r, headers)
        assert rep.status == 400 and name in rep.json()["error"], (headers, rep.body)
    rep = infer(r, [key, ("X-Class", "Sensitive")])
    assert rep.status == 200 and rep.header("X-Tierrouter-Pool") == "cpu"
    # the default names mean nothing here
    rep = infer(r, [key, ("X-Data-Class", "x"), ("X-Data-Class", "y")])
    assert rep.status == 200 and rep.header("X-Tierrouter-Pool") == "gpu"
    assert fakes[1].hits == 1 and fakes[0].hits == 1


# ---- 6: wrong credentials, per address ---------------------------------------------------

def test_wrong_keys_from_one_address_get_429_for_a_while(fakes, router):
    extra = ("admin_token: s3cret-admin-token\nauth_limit: {max_failures: 3, window_s: 60, block_s: 2}\n"
             "tenants:\n  - {name: acme, api_key: acme-key-0001}\n")
    admin = [("Authorization", "Bearer s3cret-admin-token")]
    good = [("X-Api-Key", "acme-key-0001")]
    r = router(two_pools(fakes, extra))
    wait_healthy(r, 2, admin)
    # a missing key guesses nothing: never counted
    for _ in range(5):
        assert infer(r).status == 401
    assert infer(r, good).status == 200
    # wrong keys close to the right one (same length, a prefix, a longer one) are wrong
    for bad in ("acme-key-0002", "acme-key-000", "acme-key-00011"):
        rep = infer(r, [("X-Api-Key", bad)])
        assert rep.status == 401 and "X-Api-Key" in rep.json()["error"], bad
    # the third wrong one blocked the address: the right key too, and the admin token
    blocked = infer(r, good)
    assert blocked.status == 429, blocked.body
    assert 1 <= int(blocked.header("Retry-After")) <= 2
    assert "failed authentication" in blocked.json()["error"]
    assert raw(r.port, "GET", "/admin/status", admin).status == 429
    assert fakes[0].hits + fakes[1].hits == 1
    # another address is not blocked, and its wrong key is a plain 401
    assert infer(r, good, src="127.0.0.2").status == 200
    assert infer(r, [("X-Api-Key", "x" * 8192)], src="127.0.0.2").status == 401
    # the block ends
    time.sleep(int(blocked.header("Retry-After")) + 0.2)
    deadline = time.time() + 5
    while (rep := infer(r, good)).status == 429 and time.time() < deadline:
        time.sleep(0.1)
    assert rep.status == 200, rep.body
    assert "failed authentication attempts from one address" in r.log.read_text()


@pytest.mark.parametrize("text,needle", [
    ("auth_limit: {max_failures: 100001}\n", "auth_limit.max_failures"),
    ("auth_limit: {block_s: 90000}\n", "auth_limit.block_s"),
    ("admin_token: \"has a space in it\"\n", "admin_token"),
    ("metrics_token: \"tab\\there-and-more\"\n", "metrics_token"),
    ("worker_token: \"line\\nbreak-token\"\n", "worker_token"),
    ("worker_token: short\n", "worker_token"),
])
def test_bad_auth_settings_are_refused_naming_the_key(tmp_path, text, needle):
    cfg = tmp_path / "bad.yaml"
    # a config the router wrongly accepted would start it: on loopback, on a free port
    cfg.write_text(text + "address: 127.0.0.1\npools:\n  - name: g\n    kind: gpu\n    backends: [\"127.0.0.1:1\"]\n")
    p = subprocess.run([ROUTER_BIN, "--config", str(cfg)], capture_output=True, timeout=20,
                       env=dict(os.environ, **sanitizer_env(), TIERROUTER_PORT="0"))
    assert p.returncode == 64, p.stderr
    assert needle in p.stderr.decode(), p.stderr.decode()


# ---- 7: /metrics and the repository index ------------------------------------------------

def test_metrics_and_repository_index_need_credentials_when_configured(fakes, router):
    extra = ("admin_token: s3cret-admin-token\nmetrics_token: scrape-token-0001\n"
             "tenants:\n  - {name: acme, api_key: acme-key-0001}\n")
    admin = ("Authorization", "Bearer s3cret-admin-token")
    scrape = ("Authorization", "Bearer scrape-token-0001")
    r = router(two_pools(fakes, extra))
    wait_healthy(r, 2, [admin])
    assert infer(r, [("X-Api-Key", "acme-key-0001")]).status == 200  # a tenant in the metrics
    rep = raw(r.port, "GET", "/metrics")
    assert rep.status == 401 and rep.header("WWW-Authenticate") == "Bearer" and "acme" not in rep.body.decode()
    assert raw(r.port, "GET", "/metrics", [("Authorization", "Bearer scrape-token-0002")]).status == 401
    for cred in (scrape, admin, ("Authorization", "bearer scrape-token-0001")):
        rep = raw(r.port, "GET", "/metrics", [cred])
        assert rep.status == 200 and 'tenant="acme"' in rep.body.decode(), cred
    # the scrape token opens /metrics only
    assert raw(r.port, "GET", "/admin/status", [scrape]).status == 401
    assert raw(r.port, "GET", "/admin/cost", [scrape]).status == 401
    # the index: an API key (what clients have) or the admin token
    index = "/v2/repository/index"
    assert raw(r.port, "POST", index).status == 401
    assert raw(r.port, "POST", index, [("X-Api-Key", "nope-nope-nope")]).status == 401
    assert raw(r.port, "POST", index, [scrape]).status == 401
    for cred in (("X-Api-Key", "acme-key-0001"), admin):
        rep = raw(r.port, "POST", index, [cred])
        assert rep.status == 200 and rep.json() == [{"name": "demo", "version": "1", "state": "READY"}], cred


@pytest.mark.parametrize("extra,metrics,admin,index", [
    ("", 200, 200, 200),                                                   # nothing set: open
    ("metrics_token: scrape-token-0001\n", 401, 200, 200),                 # the scrape token alone
    # keys alone (admin_open: without it such a config refuses to start)
    ("admin_open: true\ntenants:\n  - {name: acme, api_key: acme-key-0001}\n", 200, 200, 401),
])
def test_what_each_setting_closes(fakes, router, extra, metrics, admin, index):
    r = router(two_pools(fakes, extra))
    assert raw(r.port, "GET", "/metrics").status == metrics
    assert raw(r.port, "GET", "/admin/status").status == admin
    assert raw(r.port, "POST", "/v2/repository/index").status == index


# ---- 9: request ids ----------------------------------------------------------------------

@pytest.mark.parametrize("value", [b"ab cd", b"\xc3\xa9t\xc3\xa9", b"x" * 80, b""])
def test_request_id_not_visible_ascii_is_replaced_and_logged_without_its_bytes(fakes, router, value):
    r = router(two_pools(fakes))
    wait_healthy(r, 2)
    rep = infer(r, [("X-Request-Id", value)])
    assert rep.status == 200, rep.body
    rid = rep.header("X-Request-Id")
    assert re.fullmatch(r"tr-\d+-\d+", rid), rid
    (head,) = fakes[0].recorded(probes=False)
    assert head_values(head, b"X-Request-Id") == [rid.encode()]
    # one warning names the header and the id used; the refused bytes are not in the log
    deadline = time.time() + 5
    while "X-Request-Id refused" not in (log := r.log.read_text(errors="replace")) and time.time() < deadline:
        time.sleep(0.05)
    line = next(ln for ln in log.splitlines() if "X-Request-Id refused" in ln)
    assert json.loads(line)["request_id"] == rid
    raw_log = r.log.read_bytes()
    if value:
        assert value not in raw_log
        assert json.dumps(value.decode("latin-1"))[1:-1].encode() not in raw_log


@pytest.mark.parametrize("value", [b"ab\x01cd", b"ab\x7fcd"])
def test_control_bytes_in_a_header_are_refused_at_the_door(fakes, router, value):
    """A control byte is no part of any field value (RFC 9110 5.5): the front's parser
    refuses the request with a JSON 400; nothing reaches a backend or the log."""
    r = router(two_pools(fakes))
    wait_healthy(r, 2)
    rep = infer(r, [("X-Request-Id", value)])
    assert rep.status == 400, rep.body
    assert "error" in json.loads(rep.body)
    assert fakes[0].recorded(probes=False) == [] and fakes[1].recorded(probes=False) == []
    assert value not in r.log.read_bytes()


def test_request_id_visible_ascii_passes_once(fakes, router):
    r = router(two_pools(fakes))
    wait_healthy(r, 2)
    good = "A-z_0.9~!#$%&'*+^`|" + "x" * 60  # 79 bytes: the longest kept
    rep = infer(r, [("X-Request-Id", good)])
    assert rep.status == 200 and rep.header("X-Request-Id") == good
    rep = infer(r, [("X-Request-Id", "one"), ("X-Request-Id", "two")])  # which one? neither
    assert rep.status == 200 and re.fullmatch(r"tr-\d+-\d+", rep.header("X-Request-Id"))
    heads = fakes[0].recorded(probes=False)
    assert head_values(heads[0], b"X-Request-Id") == [good.encode()]
    assert head_values(heads[1], b"X-Request-Id") == [rep.header("X-Request-Id").encode()]
    # the second copy is named in the warning, with the id used instead
    deadline = time.time() + 5
    while "sent more than once" not in (log := r.log.read_text(errors="replace")) and time.time() < deadline:
        time.sleep(0.05)
    line = next(ln for ln in log.splitlines() if "sent more than once" in ln)
    assert json.loads(line)["request_id"] == rep.header("X-Request-Id")


# ---- 10: /admin/cost?window= -------------------------------------------------------------

@pytest.mark.parametrize("query", ["window=nan", "window=NaN", "window=inf", "window=abc", "window=",
                                   "window=1e999", "window=-5", "window=0", "window=3601", "window=60s",
                                   "window=%2060", "window=60&foo=1", "foo=1", "window=60&window=30", "window"])
def test_cost_window_is_validated(fakes, router, query):
    r = router(two_pools(fakes))
    rep = raw(r.port, "GET", f"/admin/cost?{query}")
    assert rep.status == 400, (query, rep.status, rep.body)
    assert "window" in rep.json()["error"]


@pytest.mark.parametrize("query,window", [("", 300), ("window=60", 60), ("window=3600", 3600),
                                          ("window=1e2", 100)])
def test_cost_window_valid(fakes, router, query, window):
    r = router(two_pools(fakes))
    rep = raw(r.port, "GET", "/admin/cost" + (f"?{query}" if query else ""))
    assert rep.status == 200, rep.body
    assert rep.json()["window_s"] == window


# ---- the backend's request line ------------------------------------------------------------

def test_backend_target_is_rebuilt_with_version_and_verb(fakes, router):
    """The target a worker gets is rebuilt from the decoded segments, each percent-encoded
    again: model, then /versions/V when the client named one, then the verb (none for the
    metadata)."""
    r = router(two_pools(fakes))
    wait_healthy(r, 2)
    for method, path, line in [("POST", "/v2/models/demo/infer", b"POST /v2/models/demo/infer "),
                               ("POST", "/v2/models/demo/versions/1/infer", b"POST /v2/models/demo/versions/1/infer "),
                               ("GET", "/v2/models/demo/versions/7/ready", b"GET /v2/models/demo/versions/7/ready "),
                               ("GET", "/v2/models/demo", b"GET /v2/models/demo "),
                               ("POST", "/v2/models/a%2Bb/versions/1/infer", b"POST /v2/models/a%2Bb/versions/1/infer ")]:
        rep = raw(r.port, method, path, (), BODY if method == "POST" else None)
        assert rep.status == 200, (path, rep.status, rep.body)
        assert fakes[0].recorded(probes=False)[-1].startswith(line), (path, fakes[0].recorded(probes=False)[-1])


# ---- 405 ---------------------------------------------------------------------------------

def test_every_405_says_what_is_allowed(fakes, router):
    r = router(two_pools(fakes))
    for method, path, allow in [("GET", "/v2/repository/index", "POST"),
                                ("GET", "/v2/models/demo/infer", "POST"),
                                ("PUT", "/v2/models/demo/versions/1/infer", "POST"),
                                ("POST", "/v2/models/demo", "GET, HEAD"),
                                ("DELETE", "/v2/models/demo/ready", "GET, HEAD"),
                                ("PATCH", "/v2/models/demo/config", "GET, HEAD")]:
        rep = raw(r.port, method, path)
        assert rep.status == 405, (method, path, rep.status)
        assert rep.header("Allow") == allow, (method, path, rep.headers)
        assert "error" in rep.json()


# ---- 11: the worker token ----------------------------------------------------------------

@pytest.mark.parametrize("cfg_token,env_token,sent", [
    ("w0rker-t0ken-123", None, b"Bearer w0rker-t0ken-123"),
    ("w0rker-t0ken-123", "env-t0ken-4567", b"Bearer env-t0ken-4567"),  # the env var wins
    (None, "env-t0ken-4567", b"Bearer env-t0ken-4567"),
    (None, None, None),
])
def test_worker_token_goes_with_probes_and_requests(fakes, router, cfg_token, env_token, sent):
    extra = f"worker_token: {cfg_token}\n" if cfg_token else ""
    r = router(two_pools(fakes, extra), env={"TIERROUTER_WORKER_TOKEN": env_token} if env_token else None)
    wait_healthy(r, 2)
    # the client's own Authorization is never what a worker gets
    assert infer(r, [("Authorization", "Bearer client-own-token")]).status == 200
    assert infer(r, [("X-Data-Class", "sensitive")]).status == 200
    for f in fakes:
        probes, requests = f.recorded(probes=True), f.recorded(probes=False)
        assert probes and requests
        for head in probes + requests:
            assert head_values(head, b"Authorization") == ([sent] if sent else []), head


def test_worker_token_from_env_is_checked(fakes, tmp_path):
    cfg = tmp_path / "r.yaml"
    cfg.write_text(two_pools(fakes))
    p = subprocess.run([ROUTER_BIN, "--config", str(cfg)], capture_output=True, timeout=20,
                       env=dict(os.environ, **sanitizer_env(), TIERROUTER_PORT="0", TIERROUTER_WORKER_TOKEN="short"))
    assert p.returncode == 64 and b"TIERROUTER_WORKER_TOKEN" in p.stderr, p.stderr


# ---- 12: made-up model names and the metrics' model label --------------------------------

def duration_counts(text):
    """{model label: requests} of tierrouter_request_duration_seconds, all pools and priorities."""
    out = {}
    for m in re.finditer(r'^tierrouter_request_duration_seconds_count\{[^}]*model="((?:[^"\\]|\\.)*)"\} (\d+)$',
                         text, re.M):
        out[m.group(1)] = out.get(m.group(1), 0) + int(m.group(2))
    return out


def test_made_up_model_names_share_the_other_label(fakes, router):
    """Pools without a models list forward any name (the fakes answer them all 200); only
    what a pool serves (here: demo, from the backends' /v2/status) gets a label of its own,
    however many made-up names came first."""
    r = router(two_pools(fakes))
    wait_healthy(r, 2)
    for i in range(40):
        rep = raw(r.port, "POST", f"/v2/models/junk{i}%3Cimg%3E%C2%9B/infer", (), BODY)
        assert rep.status == 200, rep.body  # forwarded: the label is the only guard
    assert infer(r).status == 200
    counts = duration_counts(raw(r.port, "GET", "/metrics").body.decode())
    assert counts == {"other": 40, "demo": 1}, counts
