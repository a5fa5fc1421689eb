"""Credentials before bodies (issue 19, Medium 1), on both programs.

A request's credentials are checked on its head, before "100 Continue" and before a byte of
its body is read, buffered or counted against a body budget: a client with no or wrong
credentials gets its 401 while its body is still unsent, and the connection is closed. The
router also holds every body against an in-flight budget (max_inflight_body_bytes), 503 +
Retry-After past it.

Each client here is a raw socket that sends exactly what the test says, so "the body was
never sent" is true on the wire: the reply is read while the body sits in the test.
"""
import json
import socket
import threading
import time

import pytest

from conftest import SANITIZED, start_worker
from helpers import vm_bytes, wait_until
from rawhttp import read_to_close
from test_router import DEMO, Router, pools_config
from test_router_hostile import BODY, Recorder, Reply, raw

TOKEN = "w0rker-t0ken-for-bodies"
KEY = "acme-key-0001"
ADMIN = "s3cret-admin-token"
WAIT_S = 10  # the longest a reply that comes from the head may take to arrive


def head(method, path, headers=(), length=None, chunked=False, expect=False):
    out = f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
    for k, v in headers:
        out += f"{k}: {v}\r\n"
    if length is not None:
        out += f"Content-Length: {length}\r\n"
    if chunked:
        out += "Transfer-Encoding: chunked\r\n"
    if expect:
        out += "Expect: 100-continue\r\n"
    return (out + "\r\n").encode()


def reply_to_head(port, request_head):
    """Sends a request's head and nothing of its body; returns everything the server sends
    until it closes. Fails (naming it) when the server waits for the body instead."""
    s = socket.create_connection(("127.0.0.1", port), timeout=WAIT_S)
    s.sendall(request_head)
    try:
        return read_to_close(s)
    except socket.timeout:
        s.close()
        pytest.fail(f"no reply within {WAIT_S} s to a head whose body was never sent: the server waits "
                    f"for the body before checking credentials\n{request_head!r}")


def refused_unread(port, request_head, status=401):
    """The reply to a head whose body is never sent: one final reply with this status, no
    100 Continue before it, and the connection closed after it."""
    data = reply_to_head(port, request_head)
    assert not data.startswith(b"HTTP/1.1 100"), f"100 Continue before the credentials were checked: {data[:200]!r}"
    rep = Reply(data)
    assert rep.status == status, data[:400]
    assert rep.header("Connection") == "close", rep.headers
    return rep


def continue_then_send(port, request_head, body):
    """The good-credentials case: 100 Continue comes first, then the body goes, then the
    final reply."""
    s = socket.create_connection(("127.0.0.1", port), timeout=WAIT_S)
    s.sendall(request_head)
    first = s.recv(65536)
    assert first.startswith(b"HTTP/1.1 100 Continue\r\n\r\n"), first[:200]
    s.sendall(body)
    data = first[len(b"HTTP/1.1 100 Continue\r\n\r\n"):]
    while b"\r\n\r\n" not in data:
        data += s.recv(65536)
    h, _, rest = data.partition(b"\r\n\r\n")
    n = int([ln.split(b":")[1] for ln in h.split(b"\r\n") if ln.lower().startswith(b"content-length:")][0])
    while len(rest) < n:
        rest += s.recv(65536)
    s.close()
    return Reply(h + b"\r\n\r\n" + rest)


def metrics(r):
    """The router's unlabelled metrics, by name."""
    rep = raw(r.port, "GET", "/metrics")
    out = {}
    for line in rep.body.decode().splitlines():
        parts = line.split()
        if len(parts) == 2 and not line.startswith("#") and "{" not in parts[0]:
            out[parts[0]] = float(parts[1])
    return out


# ---- the worker ----------------------------------------------------------------------------

MAX_BODY = 1 << 20
BUDGET = 4 << 20


@pytest.fixture(scope="module")
def worker(tmp_path_factory):
    w = start_worker(DEMO, tmp_path_factory.mktemp("authbody"),
                     env={"EXECUTION_MODE": "cpu", "TIERSERVE_AUTH_TOKEN": TOKEN,
                          "TIERSERVE_MAX_BODY_BYTES": str(MAX_BODY),
                          "TIERSERVE_MAX_INFLIGHT_BODY_BYTES": str(BUDGET)})
    yield w
    assert w.stop() == 0, w.log_text()[-4000:]
    assert not w.sanitizer_reports(), w.log_text()[-8000:]


INFER = "/v2/models/demo/infer"


@pytest.mark.parametrize("auth", [None, "Bearer wrong-token", f"Bearer {TOKEN}x", f"Basic {TOKEN}"])
def test_worker_answers_401_before_100_continue(worker, auth):
    hdrs = [("Authorization", auth)] if auth else []
    rep = refused_unread(worker.port, head("POST", INFER, hdrs, length=len(BODY), expect=True))
    assert rep.header("WWW-Authenticate") == "Bearer", rep.headers
    assert "bearer token" in rep.json()["error"], rep.body
    # /v1 keeps OpenAI's error shape when the layer answers from the head
    rep = refused_unread(worker.port, head("POST", "/v1/chat/completions", hdrs, length=40, expect=True))
    assert rep.json()["error"]["type"] == "authentication_error", rep.body


def test_worker_with_its_token_still_gets_100_continue(worker):
    rep = continue_then_send(worker.port, head("POST", INFER, [("Authorization", f"Bearer {TOKEN}")],
                                                length=len(BODY), expect=True), BODY)
    assert rep.status == 200 and rep.json()["outputs"], rep.body


def test_worker_answers_a_large_body_from_its_head(worker):
    """No Expect: the client just starts; the 401 arrives before a byte of the body left it
    (a Content-Length body and a chunked one)."""
    refused_unread(worker.port, head("POST", INFER, length=MAX_BODY))
    refused_unread(worker.port, head("POST", INFER, chunked=True))


def test_worker_open_endpoints_take_no_body_without_the_token(worker):
    """The health probes and the dashboard need no token, so they read no body from a client
    without one; with the token the body is read as before."""
    rep = refused_unread(worker.port, head("GET", "/v2/health/live", length=MAX_BODY), status=413)
    assert "TIERSERVE_AUTH_TOKEN" in rep.json()["error"], rep.body
    # a method the endpoint does not take: its handler's 405 and Allow, from the head
    rep = refused_unread(worker.port, head("POST", "/dashboard", length=MAX_BODY), status=405)
    assert rep.header("Allow") == "GET, HEAD", rep.headers
    rep = continue_then_send(worker.port, head("GET", "/v2/health/live", [("Authorization", f"Bearer {TOKEN}")],
                                                length=4, expect=True), b"abcd")
    assert rep.status == 200


def test_unauthenticated_chunked_heads_do_not_spend_the_worker_budget(worker):
    """Each chunked head used to hold max_body_bytes of the body budget while its body was
    awaited: budget / max_body + 1 of them left the router's real requests 503. Now each is
    answered 401 and closed from its head, and a request with the token gets through."""
    n = BUDGET // MAX_BODY + 1
    socks = []
    try:
        for _ in range(n):
            s = socket.create_connection(("127.0.0.1", worker.port), timeout=WAIT_S)
            s.sendall(head("POST", INFER, chunked=True) + b"10\r\n" + b"x" * 16 + b"\r\n")  # then nothing
            socks.append(s)
        good = continue_then_send(worker.port, head("POST", INFER, [("Authorization", f"Bearer {TOKEN}")],
                                                     length=len(BODY), expect=True), BODY)
        assert good.status == 200, (good.status, good.body)
        for s in socks:
            assert Reply(read_to_close(s)).status == 401
    finally:
        for s in socks:
            s.close()


# ---- the router ----------------------------------------------------------------------------

@pytest.fixture()
def backend():
    b = Recorder()
    yield b
    b.close()


@pytest.fixture()
def router(tmp_path):
    started = []

    def start(cfg):
        started.append(Router(cfg, tmp_path))
        return started[-1]

    yield start
    for r in started:
        assert r.stop() == 0


def keyed_config(backend, extra=""):
    return pools_config([("cpu", "cpu", True, [backend.port], None)],
                        f"admin_token: {ADMIN}\ntenants:\n  - {{name: acme, api_key: {KEY}}}\n{extra}")


def wait_routable(r, backend):
    wait_until(lambda: continue_then_send(r.port, head("POST", INFER, [("X-Api-Key", KEY)], length=len(BODY),
                                                       expect=True), BODY).status == 200,
               15, "the router to route a request to its backend", interval=0.1)


@pytest.mark.parametrize("cred", [None, ("X-Api-Key", "not-a-key-0001"), ("Authorization", "Bearer not-a-key-0001")])
def test_router_answers_401_before_100_continue(router, backend, cred):
    r = router(keyed_config(backend))
    hdrs = [cred] if cred else []
    rep = refused_unread(r.port, head("POST", INFER, hdrs, length=len(BODY), expect=True))
    assert "X-Api-Key" in rep.json()["error"], rep.body
    rep = refused_unread(r.port, head("POST", "/v1/chat/completions", hdrs, length=60, expect=True))
    assert rep.json()["error"]["type"] == "authentication_error", rep.body
    assert "X-Api-Key" in rep.json()["error"]["message"], rep.body
    rep = refused_unread(r.port, head("POST", "/v2/repository/index", hdrs, length=2, expect=True))
    assert rep.header("WWW-Authenticate") == "Bearer", rep.headers
    # the admin token's endpoints: a tenant key is not it
    rep = refused_unread(r.port, head("POST", "/admin/status", [("Authorization", f"Bearer {KEY}")], length=2,
                                      expect=True))
    assert rep.header("WWW-Authenticate") == "Bearer" and "admin_token" in rep.json()["error"], rep.body
    assert backend.recorded(probes=False) == []  # nothing reached a worker


def test_router_with_a_key_still_gets_100_continue(router, backend):
    r = router(keyed_config(backend))
    wait_routable(r, backend)
    rep = continue_then_send(r.port, head("POST", "/v2/repository/index", [("Authorization", f"Bearer {ADMIN}")],
                                          length=2, expect=True), b"{}")
    assert rep.status == 200, rep.body


def test_router_answers_a_large_body_from_its_head(router, backend):
    r = router(keyed_config(backend))
    refused_unread(r.port, head("POST", INFER, length=60 << 20))
    refused_unread(r.port, head("POST", "/v1/completions", chunked=True))
    # an endpoint that needs no credentials reads no body once the router has some
    rep = refused_unread(r.port, head("GET", "/v2/health/live", length=60 << 20), status=413)
    assert "takes none" in rep.json()["error"], rep.body
    for method, path, allow in (("POST", "/dashboard", "GET, HEAD"), ("PUT", INFER, "POST"),
                                ("POST", "/v2/models/demo", "GET, HEAD"), ("GET", "/v1/completions", "POST")):
        rep = refused_unread(r.port, head(method, path, length=60 << 20), status=405)
        assert rep.header("Allow") == allow, (method, path, rep.headers)


def test_router_memory_does_not_hold_unauthenticated_bodies(router, backend):
    """Clients with no key send whole large bodies at once. The router used to read and hold
    each (max_body_bytes apiece, up to max_connections of them); now it answers from the head
    and drops what follows unread, so its peak memory grows by far less than one body."""
    r = router(keyed_config(backend))
    body_size, clients = 32 << 20, 4
    body = b"x" * body_size
    before = vm_bytes(r.proc.pid)

    def send():
        try:
            with socket.create_connection(("127.0.0.1", r.port), timeout=WAIT_S) as s:
                s.sendall(head("POST", INFER, length=body_size) + body)
                s.recv(4096)
        except OSError:
            pass  # the router closed after its 401: the rest of the body had nowhere to go

    threads = [threading.Thread(target=send) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    after = vm_bytes(r.proc.pid)
    grew_peak, grew_rss = after["VmHWM"] - before["VmHWM"], after["VmRSS"] - before["VmRSS"]
    print(f"router VmHWM +{grew_peak >> 10} KiB, VmRSS +{grew_rss >> 10} KiB after {clients} unauthenticated "
          f"{body_size >> 20} MiB bodies")
    if SANITIZED:
        return  # shadow memory and quarantine: RSS means nothing under ASan
    assert grew_peak < body_size // 4, f"router peak memory grew by {grew_peak} bytes for unauthenticated bodies"
    assert grew_rss < body_size // 4, f"router RSS grew by {grew_rss} bytes for unauthenticated bodies"


def test_router_body_budget_answers_503_past_it(router, backend):
    """max_inflight_body_bytes: two admitted bodies still being sent hold the whole budget;
    the next body gets 503 + Retry-After from its head; once they go, bodies are read again."""
    limit = 65536
    r = router(pools_config([("cpu", "cpu", True, [backend.port], None)],
                            f"max_body_bytes: {limit}\nmax_inflight_body_bytes: {2 * limit}\n"))
    holders = []
    try:
        for framing in ({"length": limit}, {"chunked": True}):  # chunked: held at max_body_bytes
            s = socket.create_connection(("127.0.0.1", r.port), timeout=WAIT_S)
            s.sendall(head("POST", INFER, expect=True, **framing))
            assert s.recv(4096).startswith(b"HTTP/1.1 100 Continue"), "the holder's body was not admitted"
            holders.append(s)
        rep = refused_unread(r.port, head("POST", INFER, length=len(BODY)), status=503)
        assert rep.header("Retry-After"), rep.headers
        assert "max_inflight_body_bytes" in rep.json()["error"], rep.body
        rep = refused_unread(r.port, head("POST", "/v1/completions", length=10), status=503)
        assert rep.json()["error"]["type"] == "server_error", rep.body
    finally:
        for s in holders:
            s.close()
    # the holders' shares come back when their requests end, and so does every other body's
    deadline = time.time() + WAIT_S
    while (rep := raw(r.port, "POST", INFER, body=BODY)).status != 200:
        assert time.time() < deadline, f"the budget never came back after its holders left: {rep.status} {rep.body!r}"
        time.sleep(0.05)
    deadline = time.time() + WAIT_S
    while (m := metrics(r))["tierrouter_inflight_body_bytes"] != 0:  # nothing held once every request ended
        assert time.time() < deadline, m
        time.sleep(0.05)
    assert m["tierrouter_inflight_body_refusals_total"] == 2, m
    assert m["tierrouter_inflight_body_limit_bytes"] == 2 * limit, m


def test_router_refuses_a_budget_below_max_body_bytes(tmp_path, backend):
    import subprocess
    from test_router import ROUTER_BIN
    cfg = tmp_path / "r.yaml"
    cfg.write_text(pools_config([("cpu", "cpu", True, [backend.port], None)],
                                "max_body_bytes: 1048576\nmax_inflight_body_bytes: 65536\n"))
    p = subprocess.run([ROUTER_BIN, "--check-config", "--config", str(cfg)], capture_output=True, timeout=20)
    assert p.returncode == 64 and b"max_inflight_body_bytes: 65536 is below max_body_bytes" in p.stderr, p.stderr
