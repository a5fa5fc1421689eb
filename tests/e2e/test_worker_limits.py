"""The worker's limits and its contract with the router, against a real tierserve.

- X-Request-Id: echoed on every reply tierserve writes itself, and in the request's log lines
- --auth-token: a bearer token on everything but the two health probes (401 otherwise)
- --max-connections: the connection past the limit gets a 503 and is closed at once
- --max-pending-reply-bytes: replies waiting for slow readers are bounded, and a reply that
  has not drained in the HTTP timeout is cut
- --max-inflight-body-bytes: request bodies (raw, inflated, parsed, and still being read) are
  bounded together, and inflating and parsing big bodies happens off the event loop

Raw sockets throughout (helpers from test_hostile.py): no client library retries or reads
leniently behind a test's back. Every socket has a timeout and every loop a deadline.
"""
import gzip
import json
import socket
import threading
import time

import numpy as np
import pytest

from conftest import SANITIZED, start_worker
from helpers import metric as metric_value
from test_hostile import (BASE_ENV, HTTP_TIMEOUT_S, INFER, SLOW, SOCK_TIMEOUT, Conn, J, _metric,
                          assert_serving, bin_inp, binary, error_text, exchange, http_bytes, inp,
                          make_worker, proc_status, repo, req, slow_request, stop_worker,
                          wait_idle)

assert repo  # the module-scoped model repository fixture, shared with test_hostile.py


def metric(w, name):
    """An unlabelled metric's value, scraped on a raw connection (the worker may be at its
    connection cap: a refusal fails here, which metric_or_none reads as "not yet")."""
    resp = exchange(w, http_bytes("GET", "/metrics"))
    assert resp is not None and resp[0] == 200, resp
    return metric_value(resp[2].decode(), name, required=True)


@pytest.fixture(scope="module")
def plain(repo, tmp_path_factory):
    """A worker with the hostile suite's small limits and debug logs."""
    w = make_worker(repo, tmp_path_factory, "limits", TIERSERVE_LOG_LEVEL="debug")
    yield w
    stop_worker(w)


# ---- X-Request-Id --------------------------------------------------------------------------

RID = "req-7f3a.b2_c9:Z~!"


def _rid_cases():
    x = np.ones((256, 512), dtype="<f4").tobytes()
    timeout_body, timeout_headers = binary(
        req(bin_inp("x", shape=(256, 512), size=len(x)), parameters={"timeout": 1000}), x)
    return [
        ("GET", "/v2", b"", {}, 200),
        ("GET", "/v2/health/live", b"", {}, 200),
        ("GET", "/v2/status", b"", {}, 200),
        ("GET", "/nope", b"", {}, 404),
        ("POST", "/v2", b"", {}, 405),
        ("GET", "/v2/models/nope", b"", {}, 404),
        ("POST", INFER, J(req()), {}, 200),
        ("POST", INFER, b"{", {}, 400),
        ("POST", INFER, b"x", {"Content-Encoding": "br"}, 415),
        ("POST", "/v2/models/slow/infer", timeout_body, timeout_headers, 504),
    ]


def test_request_id_is_echoed_on_every_reply(plain):
    """The router matches each reply to its request by X-Request-Id: every reply tierserve
    writes carries it back, successes, errors, refusals and timeouts alike."""
    for method, path, body, headers, status in _rid_cases():
        resp = exchange(plain, http_bytes(method, path, body, {**headers, "X-Request-Id": RID}))
        assert resp is not None and resp[0] == status, (method, path, resp)
        assert resp[1].get("x-request-id") == RID, (method, path, resp[:2])
        # and none when the client sent none
        resp = exchange(plain, http_bytes(method, path, body, headers))
        assert resp[0] == status and "x-request-id" not in resp[1], (method, path, resp[:2])


def test_request_id_on_503_queue_full(repo, tmp_path_factory):
    w = make_worker(repo, tmp_path_factory, "rid-503", TIERSERVE_QUEUE_SIZE="1",
                    TIERSERVE_INSTANCES="1")
    try:
        conns = []
        for k in range(4):
            c = Conn(w, timeout=30)
            data = slow_request(256)
            i = data.index(b"\r\n") + 2
            c.send(data[:i] + f"X-Request-Id: q{k}\r\n".encode() + data[i:])
            conns.append(c)
        got = [c.response() for c in conns]
        for c in conns:
            c.close()
        assert 503 in [r[0] for r in got] and 200 in [r[0] for r in got], [r[:2] for r in got]
        for k, r in enumerate(got):
            assert r[1].get("x-request-id") == f"q{k}", r[:2]
    finally:
        stop_worker(w)


@pytest.mark.parametrize("bad", ["", "has space", "x" * 129, "tab\there", "caf\xe9"],
                         ids=["empty", "space", "129-bytes", "control", "non-ascii"])
def test_unusable_request_id_is_not_echoed(plain, bad):
    resp = exchange(plain, http_bytes("GET", "/v2", headers={"X-Request-Id": bad}))
    assert resp[0] == 200 and "x-request-id" not in resp[1], resp[:2]


def test_request_id_at_128_bytes_is_echoed(plain):
    rid = "r" * 128
    resp = exchange(plain, http_bytes("GET", "/v2", headers={"X-Request-Id": rid}))
    assert resp[1].get("x-request-id") == rid, resp[:2]


def test_request_id_in_log_lines(plain):
    """A log line about a request carries its id as request_id."""
    x = np.ones((256, 512), dtype="<f4").tobytes()
    body, headers = binary(req(bin_inp("x", shape=(256, 512), size=len(x)),
                               parameters={"timeout": 1000}), x)
    resp = exchange(plain, http_bytes("POST", "/v2/models/slow/infer", body,
                                      {**headers, "X-Request-Id": "log-me-42"}))
    assert resp[0] == 504, resp[:2]
    deadline = time.monotonic() + 5
    while True:
        lines = [ln for ln in plain.log_lines() if ln.get("request_id") == "log-me-42"]
        if lines or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert lines and "timed out" in lines[0]["msg"] and lines[0].get("model") == "slow", lines


# ---- --auth-token --------------------------------------------------------------------------

TOKEN = "s3cret-Token_0123456789"


@pytest.fixture(scope="module")
def authed(repo, tmp_path_factory):
    # (start_worker's readiness probe is /v2/health/ready, which needs no token)
    w = start_worker(repo, tmp_path_factory.mktemp("auth"),
                     env={**BASE_ENV, "TIERSERVE_AUTH_TOKEN": TOKEN})
    yield w
    stop_worker(w)


def _unauthorized(resp):
    assert resp is not None and resp[0] == 401, resp
    assert resp[1].get("www-authenticate") == "Bearer", resp[:2]
    return error_text(resp)


def test_auth_token_required(authed):
    w = authed
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    for method, path, body in (("GET", "/v2", b""), ("GET", "/v2/status", b""),
                               ("GET", "/metrics", b""), ("POST", INFER, J(req())),
                               ("GET", "/v2/models/demo", b""), ("GET", "/nope", b""),
                               ("POST", "/v2/health/live", b""), ("GET", "/v2/health", b"")):
        assert "bearer" in _unauthorized(exchange(w, http_bytes(method, path, body))).lower()
        for bad in ("Bearer wrong", f"Bearer {TOKEN}x", f"Bearer {TOKEN[:-1]}", f"Basic {TOKEN}",
                    TOKEN, "Bearer", "Bearer "):
            _unauthorized(exchange(w, http_bytes(method, path, body, {"Authorization": bad})))
    # the probes kubelet sends carry no token
    for path in ("/v2/health/live", "/v2/health/ready"):
        assert exchange(w, http_bytes("GET", path))[0] == 200
        assert exchange(w, http_bytes("HEAD", path), head=True)[0] == 200
    # with the token everything works as usual
    assert exchange(w, http_bytes("GET", "/v2", headers=bearer))[0] == 200
    assert exchange(w, http_bytes("GET", "/nope", headers=bearer))[0] == 404
    assert exchange(w, http_bytes("GET", "/v2", headers={"Authorization": f"bearer {TOKEN}"}))[0] == 200
    resp = exchange(w, http_bytes("POST", INFER, J(req()), bearer))
    assert resp[0] == 200 and len(json.loads(resp[2])["outputs"]) == 2, resp[:2]
    resp = exchange(w, http_bytes("GET", "/metrics", headers=bearer))
    assert resp[0] == 200
    line = [ln for ln in resp[2].decode().splitlines()
            if ln.startswith("tierserve_unauthorized_total ")]
    assert line and float(line[0].split()[1]) >= 8 * 8, line


def test_auth_token_on_keepalive_connection(authed):
    """Each request on a connection is checked, not only the first."""
    c = Conn(authed)
    try:
        c.send(http_bytes("GET", "/v2", headers={"Authorization": f"Bearer {TOKEN}"}))
        assert c.response()[0] == 200
        c.send(http_bytes("GET", "/v2"))
        _unauthorized(c.response())
    finally:
        c.close()


# ---- --max-connections -----------------------------------------------------------------------

MAX_CONNS = 6


@pytest.fixture()
def capped(repo, tmp_path_factory):
    # a long HTTP timeout: the idle connections the test holds must not be cut meanwhile
    w = make_worker(repo, tmp_path_factory, "capped", TIERSERVE_MAX_CONNECTIONS=str(MAX_CONNS),
                    TIERSERVE_HTTP_TIMEOUT_S="30")
    yield w
    stop_worker(w)


def test_connections_past_the_limit_are_refused(capped):
    """With MAX_CONNS connections open, the next one gets a 503 + Retry-After naming the
    limit and is closed at once (before the worker reads a byte of it); once one closes,
    new connections are served again; the gauge and the refusal counter say so."""
    w = capped
    held = [Conn(w) for _ in range(MAX_CONNS)]
    try:
        held[0].send(http_bytes("GET", "/v2"))  # a used keep-alive connection counts too
        assert held[0].response()[0] == 200
        for _ in range(3):
            c = Conn(w)
            try:
                c.send(http_bytes("GET", "/v2/health/live"))
            except (BrokenPipeError, ConnectionResetError):
                pass
            resp = c.response()
            c.close()
            assert resp is not None and resp[0] == 503, resp
            assert resp[1].get("retry-after") == "1" and resp[1].get("connection") == "close", resp[:2]
            assert "TIERSERVE_MAX_CONNECTIONS" in error_text(resp)
        held.pop().close()
        # the worker learns of the close when it reads the FIN: allow it a moment
        deadline = time.monotonic() + 5 * SLOW
        while True:
            resp = exchange(w, http_bytes("GET", "/metrics"))
            if resp[0] == 200 or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert resp[0] == 200, resp[:2]
        m = {ln.split()[0]: float(ln.split()[1]) for ln in resp[2].decode().splitlines()
             if ln.startswith("tierserve_connections")}
        assert m["tierserve_connections"] == MAX_CONNS, m  # the held ones and this one
        assert m["tierserve_connections_refused_total"] >= 3, m
    finally:
        for c in held:
            c.close()
    deadline = time.monotonic() + 5 * SLOW
    while metric_or_none(w, "tierserve_connections") != 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert metric(w, "tierserve_connections") == 1
    assert_serving(w, w.baseline_probs)


def metric_or_none(w, name):
    try:
        return metric(w, name)
    except AssertionError:
        return None


def test_connection_flood_at_the_limit(capped):
    """200 connections at once: all but MAX_CONNS get the 503 at once (the client sends
    nothing, so nothing can reset the connection before the reply is read), and the worker
    serves normally afterwards."""
    w = capped
    socks = []
    try:
        for _ in range(200):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.settimeout(SOCK_TIMEOUT)  # a full accept queue delays a connect by a SYN retry
            s.connect(("127.0.0.1", w.port))
            socks.append(s)
        refused = 0
        for s in socks:
            s.settimeout(0.5 * SLOW)
            try:
                data = s.recv(4096)
            except socket.timeout:
                continue  # one of the admitted ones
            assert data.startswith(b"HTTP/1.1 503 "), data[:100]
            refused += 1
        assert refused >= len(socks) - MAX_CONNS, refused
    finally:
        for s in socks:
            s.close()
    deadline = time.monotonic() + 5 * SLOW
    while metric_or_none(w, "tierserve_connections") != 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert_serving(w, w.baseline_probs)


# ---- slow readers: --max-pending-reply-bytes and the reply deadline -----------------------------

ID32 = "/v2/models/identity_fp32/infer"
PENDING_LIMIT = 8 << 20


def big_reply_request(n=1 << 20):
    """4n bytes of FP32 in (binary), about 12n bytes of JSON out (n = 1M: more than the
    kernel's socket buffers hold for a client that does not read)."""
    x = (np.arange(n, dtype="<f4") * np.float32(1.0001) + np.float32(0.123)).tobytes()
    body, headers = binary(req(bin_inp("INPUT0", shape=(1, n), size=len(x))), x)
    return http_bytes("POST", ID32, body, headers)


def stuck_client(w, data, rcvbuf=4096):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.settimeout(SOCK_TIMEOUT)
    s.connect(("127.0.0.1", w.port))
    s.sendall(data)
    return s


@pytest.fixture()
def big_replies(repo, tmp_path_factory):
    w = make_worker(repo, tmp_path_factory, "big-replies", TIERSERVE_MAX_BODY_BYTES=str(32 << 20),
                    TIERSERVE_MAX_PENDING_REPLY_BYTES=str(PENDING_LIMIT))
    yield w
    stop_worker(w)


def test_replies_waiting_for_slow_readers_are_bounded(big_replies):
    """Clients that never read hold their replies in the worker. Past
    TIERSERVE_MAX_PENDING_REPLY_BYTES new inference requests get 503 + Retry-After naming
    the budget (health and status still answer); once the stuck connections are dropped
    the bytes are released and inference works again."""
    w = big_replies
    data = big_reply_request()
    stuck = [stuck_client(w, data) for _ in range(3)]
    try:
        deadline = time.monotonic() + 10 * SLOW
        while (metric_or_none(w, "tierserve_pending_reply_bytes") or 0) < PENDING_LIMIT:
            if time.monotonic() > deadline:
                break  # the 503 check below says what is wrong
            time.sleep(0.05)
        resp = exchange(w, http_bytes("POST", INFER, J(req())))
        assert resp[0] == 503 and resp[1].get("retry-after") == "1", (
            f"three clients hold ~36 MB of unread replies, yet a new request got {resp[:2]}")
        assert metric(w, "tierserve_pending_reply_bytes") >= PENDING_LIMIT
        assert "TIERSERVE_MAX_PENDING_REPLY_BYTES" in error_text(resp)
        assert metric(w, "tierserve_pending_reply_refusals_total") >= 1
        assert exchange(w, http_bytes("GET", "/v2/health/live"))[0] == 200
        assert exchange(w, http_bytes("GET", "/v2/status"))[0] == 200
        # dropped within the HTTP timeout (+ the once-a-second sweep): the bytes come back
        deadline = time.monotonic() + HTTP_TIMEOUT_S + 3 * SLOW
        while metric(w, "tierserve_pending_reply_bytes") > 0:
            assert time.monotonic() < deadline, "stuck replies still held after the HTTP timeout"
            time.sleep(0.1)
        assert_serving(w, w.baseline_probs)
    finally:
        for s in stuck:
            s.close()


def test_trickling_reader_is_cut_after_the_http_timeout(big_replies):
    """A client that reads its ~48 MB reply 64 KB at a time and sends a byte now and then
    keeps both of libevent's timeouts from firing (each read makes the socket writable, each
    byte restarts the read timeout): it held the reply, and the worker's memory, for as long
    as it liked. The reply must drain within TIERSERVE_HTTP_TIMEOUT_S or the connection is
    cut (and reset, so the kernel drops what it still queues for the client too)."""
    w = big_replies
    cut0 = metric_or_none(w, "tierserve_connections_cut_total")
    s = stuck_client(w, big_reply_request(4 << 20), rcvbuf=65536)
    got = 0
    t0 = time.monotonic()
    cut_at = None
    try:
        while time.monotonic() - t0 < HTTP_TIMEOUT_S + 4 * SLOW:
            try:
                chunk = s.recv(65536)
                s.send(b"G")
            except (ConnectionResetError, BrokenPipeError):
                chunk = b""
            if not chunk:
                cut_at = time.monotonic() - t0
                break
            got += len(chunk)
            time.sleep(0.015)
    finally:
        s.close()
    assert cut_at is not None, (
        f"a trickling reader still held its reply after {time.monotonic() - t0:.1f} s "
        f"({got} bytes read; HTTP timeout {HTTP_TIMEOUT_S} s)")
    assert got < 40 << 20, got
    assert metric(w, "tierserve_connections_cut_total") >= cut0 + 1
    deadline = time.monotonic() + 3 * SLOW
    while metric(w, "tierserve_pending_reply_bytes") > 0:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert_serving(w, w.baseline_probs)


# ---- --max-inflight-body-bytes, and decoding off the event loop -----------------------------------

def test_body_budget_counts_bodies_still_being_read(repo, tmp_path_factory):
    """A body counts against the budget from the moment its length is announced, not once it
    has all arrived: a client that announces 1 MiB and sends 100 bytes holds 1 MiB, so a
    600 KB request next to it passes the 1.5 MiB budget (503 naming it); once that client
    leaves, the same request is served."""
    w = make_worker(repo, tmp_path_factory, "budget-reading",
                    TIERSERVE_MAX_INFLIGHT_BODY_BYTES=str(3 << 19))
    try:
        n = 150_000
        x = np.full(n, 0.5, dtype="<f4").tobytes()
        bbody, headers = binary(req(bin_inp("INPUT0", shape=(1, n), size=len(x)),
                                    parameters={"binary_data_output": True}), x)
        assert 600_000 < len(bbody) < 700_000
        slow = Conn(w)
        slow.send(http_bytes("POST", ID32, b"{" * 100, {"Content-Length": str(1 << 20)}))
        deadline = time.monotonic() + 10 * SLOW  # a wait, not a bound: it ends once the body is counted
        while metric(w, "tierserve_inflight_body_bytes") < 1 << 20 and time.monotonic() < deadline:
            time.sleep(0.02)
        resp = exchange(w, http_bytes("POST", ID32, bbody, headers))
        assert resp[0] == 503, f"a body still being read was not counted: {resp[:2]}"
        assert resp[1].get("retry-after") == "1", resp[:2]
        assert "TIERSERVE_MAX_INFLIGHT_BODY_BYTES" in error_text(resp)
        slow.close()
        deadline = time.monotonic() + 3 * SLOW
        while metric(w, "tierserve_inflight_body_bytes") > 0:
            assert time.monotonic() < deadline, "the departed client's body is still held"
            time.sleep(0.05)
        resp = exchange(w, http_bytes("POST", ID32, bbody, headers))
        assert resp[0] == 200, resp[:2]
        assert resp[2].endswith(x)
    finally:
        stop_worker(w)


def test_body_budget_refuses_with_503(repo, tmp_path_factory):
    """A JSON body costs its text, a copy and its tensors while it is parsed: with a 1 MiB
    budget a 700 KB JSON request gets 503 + Retry-After naming the budget, while a binary
    request of the same size (its tensors point into the body) is served; the budget is
    whole again afterwards."""
    w = make_worker(repo, tmp_path_factory, "budget",
                    TIERSERVE_MAX_INFLIGHT_BODY_BYTES=str(1 << 20))
    try:
        n = 140_000
        body = J(req(inp("INPUT0", "FP32", (1, n), [0.5] * n)))
        assert 600_000 < len(body) < 800_000
        resp = exchange(w, http_bytes("POST", ID32, body))
        assert resp[0] == 503 and resp[1].get("retry-after") == "1", resp[:2]
        assert "TIERSERVE_MAX_INFLIGHT_BODY_BYTES" in error_text(resp)
        assert metric(w, "tierserve_inflight_body_refusals_total") == 1
        x = np.full(n, 0.5, dtype="<f4").tobytes()
        bbody, headers = binary(req(bin_inp("INPUT0", shape=(1, n), size=len(x)),
                                    parameters={"binary_data_output": True}), x)
        resp = exchange(w, http_bytes("POST", ID32, bbody, headers))
        assert resp[0] == 200, resp[:2]
        assert resp[2].endswith(x)
        assert metric(w, "tierserve_inflight_body_bytes") == 0
        assert metric(w, "tierserve_inflight_body_limit_bytes") == 1 << 20
        assert_serving(w, w.baseline_probs)
    finally:
        stop_worker(w)


def test_bad_budget_setting_is_refused(repo, tmp_path):
    """A budget below the body limit could never take a body the limit allows: exit 64."""
    w = start_worker(repo, tmp_path, env={**BASE_ENV, "TIERSERVE_MAX_INFLIGHT_BODY_BYTES": "500000"},
                     wait_ready=False)
    assert w.proc.wait(timeout=30) == 64
    assert "TIERSERVE_MAX_INFLIGHT_BODY_BYTES" in w.log_text()


# The finding: ten ~58 KB gzip bodies, each inflating to ~60 MB of "0,0,0,..." whose element
# count does not match its shape (so the parse falls back to building a jansson tree of 30M
# numbers, ~1.2 GB), sent at once. The worker grew from 62 MB to 1.3 GB and its event loop
# stalled for over 10 s (35 s measured here). The ASan build runs a quarter of the size.
BOMB_SCALE = 4 if SANITIZED else 1
BOMB_ELEMS = 30_000_000 // BOMB_SCALE
BOMB_BUDGET = (256 << 20) // BOMB_SCALE
BOMB_SLACK = 96 << 20


def _bombs():
    out = []
    for head in (b'{"inputs":[{"name":"input","shape":[1,4],"datatype":"FP32","data":[',
                 b'{"inputs":[{"name":"input","shape":[%d,4],"datatype":"INT32","data":['
                 % (BOMB_ELEMS // 4)):
        raw = head + b"0," * (BOMB_ELEMS - 1) + b"0]}]}"
        out.append(gzip.compress(raw, 9))
    return out


@pytest.fixture(scope="module")
def bomb_worker(repo, tmp_path_factory):
    w = make_worker(repo, tmp_path_factory, "bombs", TIERSERVE_MAX_BODY_BYTES=str(64 << 20),
                    TIERSERVE_MAX_INFLIGHT_BODY_BYTES=str(BOMB_BUDGET),
                    TIERSERVE_HTTP_TIMEOUT_S="30")
    yield w
    stop_worker(w)


@pytest.mark.parametrize("kind", [0, 1], ids=["jansson-tree", "fast-path-int32"])
def test_inflating_bodies_are_bounded_and_off_the_loop(bomb_worker, kind):
    """Ten ~60 MB-inflating gzip bodies at once: /v2/health/live answers within 1 s every
    time it is polled meanwhile, peak RSS grows by less than the budget plus 96 MiB, every
    request is answered (400, or 503 + Retry-After naming the budget), and afterwards the
    budget is whole and the worker serves normally."""
    w = bomb_worker
    gz = _bombs()[kind]
    assert len(gz) < 80_000 // BOMB_SCALE + 1000
    data = http_bytes("POST", INFER, gz, {"Content-Encoding": "gzip"})
    before = proc_status(w)
    refusals0 = metric(w, "tierserve_inflight_body_refusals_total") if kind else None
    results = [None] * 10

    def one(k):
        try:
            c = Conn(w, timeout=60)
            try:
                c.send(data)
                results[k] = c.response()
            finally:
                c.close()
        except Exception as e:  # reported below
            results[k] = e

    threads = [threading.Thread(target=one, args=(k,), daemon=True) for k in range(10)]
    for t in threads:
        t.start()
    worst = 0.0
    polls = 0
    while any(t.is_alive() for t in threads):
        t0 = time.monotonic()
        live = exchange(w, http_bytes("GET", "/v2/health/live"), timeout=30)
        took = time.monotonic() - t0
        worst = max(worst, took)
        polls += 1
        assert live is not None and live[0] == 200, live
        time.sleep(0.05)
    for t in threads:
        t.join(60)
    assert worst < 1.0 * SLOW, f"/v2/health/live took {worst:.2f} s during the attack ({polls} polls)"
    errors = [r for r in results if not isinstance(r, tuple)]
    assert not errors, errors[:3]
    statuses = sorted(r[0] for r in results)
    assert set(statuses) <= {400, 503}, statuses
    for r in results:
        if r[0] == 503:
            assert r[1].get("retry-after") == "1", r[:2]
            assert "TIERSERVE_MAX_INFLIGHT_BODY_BYTES" in error_text(r)
    assert 503 in statuses
    if not SANITIZED:  # ASan's shadow memory and quarantine make RSS meaningless
        grew = proc_status(w)["VmHWM"] - before["VmHWM"]
        assert grew < BOMB_BUDGET + BOMB_SLACK, f"peak RSS grew by {grew >> 20} MiB"
    assert metric(w, "tierserve_inflight_body_bytes") == 0
    if refusals0 is not None:
        assert metric(w, "tierserve_inflight_body_refusals_total") >= refusals0 + statuses.count(503)
    assert_serving(w, w.baseline_probs)
