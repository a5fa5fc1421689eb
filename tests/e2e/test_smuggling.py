"""Request smuggling through decoded path segments and header names, in both programs, and
the router's defence in depth: a reply is matched to its request or dropped.

A client that could put CR, LF, a space or '/' into a request line the router builds for a
worker could split one request into two; the worker answers both, and the extra reply sits
on a pooled connection waiting for the next request, which may be another tenant's. These
tests talk raw HTTP/1.1 over sockets: no client library re-sends, re-frames or decodes
anything behind the test's back.
"""
import json
import re
import socket
import threading
import time

import numpy as np
import pytest

from conftest import start_worker
from fakehttp import FakeHTTP, echo_id
from gen_demo import demo_reference
from test_router import DEMO, Router, config, pools_config, worker_seen

# Percent-encoded bytes that must never come back decoded into a request line.
INJECTIONS = ["%0D", "%0A", "%0D%0A", "%00", "%20", "%2F", "%09", "%7F",
              "1%20HTTP%2F1.1%0D%0A%0D%0AGET%20%2Fv2"]


def _read_reply(f):
    """One HTTP/1.1 response from a socket file: (status, headers with lower-case names,
    body). Raises on anything that is not a well-framed reply."""
    line = f.readline()
    if not line:
        raise ConnectionError("connection closed before a reply")
    m = re.match(rb"HTTP/1\.[01] (\d{3}) ", line)
    assert m, line
    headers = {}
    while True:
        h = f.readline()
        assert h, "headers cut off"
        if h in (b"\r\n", b"\n"):
            break
        k, v = h.decode("latin-1").split(":", 1)
        headers[k.strip().lower()] = v.strip()
    if headers.get("transfer-encoding", "").lower() == "chunked":
        body = b""
        while True:
            size = int(f.readline().split(b";")[0], 16)
            if size == 0:
                f.readline()
                break
            body += f.read(size)
            f.readline()
    else:
        body = f.read(int(headers.get("content-length", "0")))
    return int(m.group(1)), headers, body


class Conn:
    """A keep-alive raw connection: send bytes, read exactly one reply per request."""

    def __init__(self, url, timeout=10):
        host, port = url.rsplit(":", 1)
        self.s = socket.create_connection((host, int(port)), timeout=timeout)
        self.f = self.s.makefile("rb")

    def request(self, method, path, headers=None, body=b""):
        head = f"{method} {path} HTTP/1.1\r\nHost: t\r\nContent-Length: {len(body)}\r\n"
        head += "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
        self.s.sendall(head.encode() + b"\r\n" + body)
        return _read_reply(self.f)

    def nothing_more(self, wait=0.3):
        """True when no further byte arrives on the connection within `wait` seconds."""
        self.s.settimeout(wait)
        try:
            self.s.recv(1, socket.MSG_PEEK)  # a byte, or b"" for a close: both are wrong here
            return False
        except socket.timeout:
            return True
        finally:
            self.s.settimeout(10)

    def close(self):
        self.f.close()
        self.s.close()


def _paths(payload):
    """The payload in every segment of every model endpoint."""
    return [f"/v2/models/demo{payload}/ready", f"/v2/models/demo/versions/1{payload}/ready",
            f"/v2/models/demo/versions/{payload}/infer", f"/v2/models/{payload}demo",
            f"/v2/models/demo/versions/1/ready{payload}", f"/v2{payload}/health/live"]


def _assert_refused_naming_segment(code, body, path):
    assert code == 400, (path, code, body)
    msg = json.loads(body)["error"]
    assert re.search(r"request path segment \d+ \(", msg), msg
    assert "\r" not in msg and "\n" not in msg and "\x00" not in msg


@pytest.fixture(scope="module")
def worker(tmp_path_factory):
    w = start_worker(DEMO, tmp_path_factory.mktemp("smuggle-w"), env={"EXECUTION_MODE": "cpu"})
    yield w
    assert w.stop() == 0


@pytest.mark.parametrize("payload", INJECTIONS)
def test_worker_refuses_decoded_control_bytes_in_any_segment(worker, payload):
    c = Conn(worker.url)
    try:
        for path in _paths(payload):
            method = "POST" if path.endswith("infer") else "GET"
            code, _, body = c.request(method, path)
            _assert_refused_naming_segment(code, body, path)
        # one reply per request: nothing extra was queued behind them, and the connection
        # still serves the next request correctly
        assert c.nothing_more()
        assert c.request("GET", "/v2/health/live")[0] == 200
    finally:
        c.close()


@pytest.mark.parametrize("payload", INJECTIONS)
def test_router_refuses_decoded_control_bytes_before_any_backend(stack_once, payload):
    r, workers = stack_once
    before = [worker_seen(w) for w in workers]
    c = Conn(r.url)
    try:
        for path in _paths(payload):
            method = "POST" if path.endswith("infer") else "GET"
            code, _, body = c.request(method, path, {"X-Data-Class": "sensitive"})
            _assert_refused_naming_segment(code, body, path)
        assert c.nothing_more()
    finally:
        c.close()
    assert [worker_seen(w) for w in workers] == before


@pytest.fixture(scope="module")
def stack_once(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("smuggle-r")
    gpu = start_worker(DEMO, tmp, env={"EXECUTION_MODE": "cpu"})
    cpu = start_worker(DEMO, tmp, env={"EXECUTION_MODE": "cpu"})
    r = Router(config([gpu.port], [cpu.port]), tmp)
    r.wait_healthy(2)
    yield r, [gpu, cpu]
    assert r.stop() == 0
    gpu.stop()
    cpu.stop()


def _infer_body(x):
    return json.dumps({"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 4],
                                   "data": x.ravel().tolist()}],
                       "outputs": [{"name": "probabilities"}]}).encode()


def test_concurrent_tenants_always_get_their_own_replies(stack_once):
    """An attacker cycles injection attempts through every segment (sensitive data class, a
    keep-alive connection) while two tenants send inference requests: every tenant reply
    carries the tenant's own request id and the outputs of the tenant's own input."""
    r, _ = stack_once
    stop = threading.Event()
    errors, counts = [], {"attack": 0, "victim": 0}
    lock = threading.Lock()

    def attacker():
        c = Conn(r.url)
        try:
            while not stop.is_set():
                for p in INJECTIONS:
                    for path in _paths(p):
                        code, _, body = c.request("POST" if path.endswith("infer") else "GET", path,
                                                  {"X-Data-Class": "sensitive"}, _infer_body(np.ones(4, np.float32))
                                                  if path.endswith("infer") else b"")
                        if code != 400:
                            errors.append(("attack not refused", path, code, body[:200]))
                        with lock:
                            counts["attack"] += 1
        except Exception as e:  # noqa: BLE001 - any failure of the attacker's framing is a finding
            errors.append(("attacker", repr(e)))
        finally:
            c.close()

    def victim(k):
        c = Conn(r.url)
        rng = np.random.default_rng(k)
        try:
            i = 0
            while not stop.is_set():
                x = rng.uniform(0, 8, 4).astype(np.float32)
                rid = f"tenant{k}-{i}"
                code, h, body = c.request("POST", "/v2/models/demo/infer",
                                          {"X-Request-Id": rid, "Content-Type": "application/json"}, _infer_body(x))
                if code != 200 or h.get("x-request-id") != rid:
                    errors.append(("wrong reply", rid, code, h.get("x-request-id"), body[:200]))
                    return
                got = np.array(json.loads(body)["outputs"][0]["data"], dtype=np.float64)
                want = demo_reference(x)["probabilities"].ravel()
                if not np.allclose(got, want, atol=1e-5):
                    errors.append(("someone else's outputs", rid, got.tolist(), want.tolist()))
                    return
                i += 1
                with lock:
                    counts["victim"] += 1
        except Exception as e:  # noqa: BLE001
            errors.append(("victim", k, repr(e)))
        finally:
            c.close()

    threads = [threading.Thread(target=attacker)] + [threading.Thread(target=victim, args=(k,)) for k in (1, 2)]
    for t in threads:
        t.start()
    time.sleep(3.0)
    stop.set()
    for t in threads:
        t.join(timeout=30)
    print(f"\n{counts['attack']} injection attempts, {counts['victim']} tenant requests, {len(errors)} errors")
    assert not errors, errors[:5]
    assert counts["attack"] > 50 and counts["victim"] > 50, counts


@pytest.mark.parametrize("target", ["worker", "router"])
def test_whitespace_before_a_colon_is_refused(worker, stack_once, target):
    """RFC 9112 5.1: "Transfer-Encoding : chunked" must be a 400 (and the connection closed),
    never a header that lookups miss while the bytes behind it become the next request."""
    url = worker.url if target == "worker" else stack_once[0].url
    host, port = url.rsplit(":", 1)
    s = socket.create_connection((host, int(port)), timeout=10)
    f = s.makefile("rb")
    try:
        body = b"5\r\nhello\r\n0\r\n\r\n"
        s.sendall(b"POST /v2/models/demo/infer HTTP/1.1\r\nHost: t\r\nTransfer-Encoding : chunked\r\n\r\n" + body
                  + b"GET /v2/health/live HTTP/1.1\r\nHost: t\r\n\r\n")
        code, h, rbody = _read_reply(f)
        assert code == 400, (code, rbody)
        assert "header name" in json.loads(rbody)["error"]
        assert h.get("connection", "").lower() == "close"
        assert f.read() == b""  # closed: the smuggled GET behind it got no reply
    finally:
        f.close()
        s.close()


class ExtraReplyBackend(FakeHTTP):
    """Answers each inference request properly (echoing X-Request-Id) and then sends a second
    reply nobody asked for: in the same write ('same-write') or a little later ('late')."""

    def __init__(self, mode):
        self.mode = mode
        super().__init__()

    def respond(self, c, head, body):
        out = json.dumps({"model_name": "demo", "outputs": [{"name": "label", "datatype": "INT64", "shape": [1],
                                                              "data": [0]}]}).encode()
        real = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n" + echo_id(head) +
                b"Content-Length: %d\r\n\r\n" % len(out) + out)
        leak = b"LEAKED-REPLY-OF-ANOTHER-REQUEST"
        extra = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Request-Id: smuggled\r\n"
                 b"Content-Length: %d\r\n\r\n" % len(leak) + leak)
        if self.mode == "same-write":
            c.sendall(real + extra)
        else:
            c.sendall(real)
            time.sleep(0.3)
            c.sendall(extra)
        return True


@pytest.mark.parametrize("mode", ["same-write", "late"])
def test_a_reply_nobody_asked_for_never_reaches_a_client(tmp_path, mode):
    bad = ExtraReplyBackend(mode)
    good = start_worker(DEMO, tmp_path, env={"EXECUTION_MODE": "cpu"})
    r = Router(pools_config([("gpu", "gpu", False, [bad.port, good.port], None)]), tmp_path)
    try:
        r.wait_healthy(2)
        for i in range(20):
            c = Conn(r.url)
            try:
                rid = f"seq-{mode}-{i}"
                code, h, body = c.request("POST", "/v2/models/demo/infer", {"X-Request-Id": rid},
                                          _infer_body(np.ones(4, np.float32)))
            finally:
                c.close()
            assert b"LEAKED" not in body, (i, body)
            assert code == 200, (i, code, body)
            assert h.get("x-request-id") == rid
        assert bad.hits >= 5
        metrics = Conn(r.url)
        try:
            text = metrics.request("GET", "/metrics")[2].decode()
        finally:
            metrics.close()
        dropped = int(re.search(r"tierrouter_backend_reply_mismatches_total (\d+)", text).group(1))
        print(f"\n{mode}: {bad.hits} requests met the bad backend; {dropped} replies dropped by id")
        if mode == "late":
            assert dropped >= 1
    finally:
        assert r.stop() == 0
        bad.close()
        good.stop()


# Trailer fields in every position a framing field could try to take effect from: a length,
# a transfer coding, a connection option, a host, a field folded onto the next line, and a
# request line hiding in a trailer value. None may change how the bytes are framed: the
# chunked request is answered, the pipelined GET behind it is answered, nothing more.
@pytest.mark.parametrize("trailer", [
    b"Content-Length: 40\r\n",
    b"Transfer-Encoding: chunked\r\n",
    b"Connection: close\r\n",
    b"Host: evil.example\r\n",
    b"X-A: b\r\nContent-Length: 0\r\nX-B: GET /v2/models/smuggled HTTP/1.1\r\n",
    b"Expect: 100-continue\r\n",
])
@pytest.mark.parametrize("target", ["worker", "router"])
def test_trailers_never_change_the_framing(worker, stack_once, target, trailer):
    url = worker.url if target == "worker" else stack_once[0].url
    host, port = url.rsplit(":", 1)
    x = np.array([[5.1, 3.5, 1.4, 0.2]], np.float32)
    body = _infer_body(x)
    s = socket.create_connection((host, int(port)), timeout=10)
    f = s.makefile("rb")
    try:
        s.sendall(b"POST /v2/models/demo/infer HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
                  + b"%x\r\n" % len(body) + body + b"\r\n0\r\n" + trailer + b"\r\n"
                  + b"GET /v2/health/live HTTP/1.1\r\nHost: t\r\n\r\n")
        code, h, rbody = _read_reply(f)
        assert code == 200, (code, rbody)
        got = json.loads(rbody)["outputs"]
        probs = [o for o in got if o["name"] == "probabilities"][0]["data"]
        assert np.allclose(probs, demo_reference(x)["probabilities"].ravel(), atol=1e-5)
        assert h.get("connection", "").lower() != "close"  # a trailer's Connection: close is no option
        code, h, rbody = _read_reply(f)
        assert code == 200, (code, rbody)  # the pipelined GET, framed where the head said
        s.settimeout(0.3)
        try:
            assert s.recv(1, socket.MSG_PEEK) == b"", "a reply nobody asked for"
        except socket.timeout:
            pass
    finally:
        f.close()
        s.close()
