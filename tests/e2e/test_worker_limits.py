"""The worker's limits and its contract with the router, against a real tierserve.

- X-Request-Id: echoed on every reply tierserve writes itself, and in the request's log lines
- --auth-token: a bearer token on everything but the two health probes (401 otherwise)
- --max-connections: the connection past the limit gets a 503 and is closed at once
- --max-pending-reply-bytes: replies waiting for slow readers are bounded, and a reply that
  has not drained in the HTTP timeout is cut
- --max-inflight-body-bytes: request bodies (raw, inflated, parsed) are bounded together, and
  inflating and parsing big bodies happens off the event loop

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
from test_hostile import (BASE_ENV, HTTP_TIMEOUT_S, INFER, SLOW, SOCK_TIMEOUT, Conn, J, _metric,
                          assert_serving, bin_inp, binary, error_text, exchange, http_bytes, inp,
                          make_worker, proc_status, repo, req, slow_request, stop_worker,
                          wait_idle)

assert repo  # the module-scoped model repository fixture, shared with test_hostile.py


def metric(w, name):
    """An unlabelled metric's value."""
    resp = exchange(w, http_bytes("GET", "/metrics"))
    assert resp is not None and resp[0] == 200, resp
    for line in resp[2].decode().splitlines():
        if line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no {name} in /metrics")


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
