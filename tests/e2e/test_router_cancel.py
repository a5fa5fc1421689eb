"""A client that leaves while its (KServe) reply is still streaming: the router closes the
backend connection instead of reading the rest for nobody, and counts the request
`cancelled`. (/v1 streams, where this is what frees a worker's slot, are in
test_llm_router.py against the real worker.) Raw sockets, no retries."""
import json
import socket
import struct
import time

import pytest

from fakehttp import FakeHTTP, echo_id
from test_router import Router, pools_config
from helpers import metric, wait_until

SIZE = 256 << 20  # far more than the socket buffers between the fake, the router and the client


class Endless(FakeHTTP):
    """Answers with a reply of `size` bytes (Content-Length, or chunked), after `delay`
    seconds, written until done or the router closes the connection; records how it ended.
    `extra`: more header lines."""

    def __init__(self, size=SIZE, chunked=False, delay=0.0, extra=b""):
        self.size, self.chunked, self.delay, self.extra = size, chunked, delay, extra
        self.sent = 0
        self.ended = None  # "complete" | "closed by the router"
        super().__init__()

    def respond(self, c, head, body):
        time.sleep(self.delay)
        framing = b"Transfer-Encoding: chunked\r\n" if self.chunked else b"Content-Length: %d\r\n" % self.size
        block = b"x" * (1 << 16)
        try:
            c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n" + echo_id(head) +
                      self.extra + framing + b"\r\n")
            while self.sent < self.size:
                c.sendall(b"%x\r\n" % len(block) + block + b"\r\n" if self.chunked else block)
                self.sent += len(block)
            if self.chunked:
                c.sendall(b"0\r\n\r\n")
        except OSError:
            self.ended = "closed by the router"
            return False
        self.ended = "complete"
        return True


def send_infer(r):
    """One KServe inference request on a raw socket, sent once."""
    s = socket.create_connection(("127.0.0.1", r.port), timeout=20)
    body = json.dumps({"inputs": [{"name": "x", "datatype": "BYTES", "shape": [1], "data": ["hi"]}]}).encode()
    s.sendall(b"POST /v2/models/blob/infer HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    return s


def read_head(s):
    """Reads until the reply's head is in (and maybe some body); asserts a 200."""
    got = b""
    while b"\r\n\r\n" not in got:
        data = s.recv(65536)
        assert data, got
        got += data
    assert got.startswith(b"HTTP/1.1 200"), got[:200]
    return got


def outcomes(r, pool="cpu"):
    return {o: metric(r, "tierrouter_requests_total", pool=pool, priority="normal", outcome=o) or 0
            for o in ("cancelled", "success", "backend_error")}


USAGE = "    cost: {model: usage, usd_per_hour: 3600}\n    backends:"  # a dollar per compute second


@pytest.mark.parametrize("how", ["close", "reset"])
def test_a_client_that_leaves_mid_reply_closes_the_backend_try(tmp_path, how):
    """close: the client stops reading after the head and closes (the router, paused on its
    backpressure, sees the end on the client's socket); reset: it reads 4 MiB at full speed,
    then resets (a write to the client fails inside the backend's body callback, which must
    finish with the request intact before the try is closed)."""
    be = Endless()
    r = Router(pools_config([("cpu", "cpu", False, [be.port], None)]), tmp_path)
    try:
        r.wait_healthy(1)
        s = send_infer(r)
        got = read_head(s)
        if how == "reset":
            n = len(got)
            while n < (4 << 20):
                data = s.recv(1 << 20)
                assert data
                n += len(data)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.close()  # mid-reply: the rest is for nobody
        deadline = time.time() + 20
        while be.ended is None and time.time() < deadline:
            time.sleep(0.05)
        assert be.ended == "closed by the router", (be.ended, be.sent)
        assert metric(r, "tierrouter_requests_total", pool="cpu", priority="normal", outcome="cancelled") == 1
        assert metric(r, "tierrouter_requests_total", pool="cpu", priority="normal", outcome="success") == 0
        # the backend did not fail: no failure counted against it
        assert r.backend(be.port)["failures"] == 0
    finally:
        assert r.stop() == 0
        be.close()


def test_a_cancelled_reply_is_billed_the_compute_time_its_head_reported(tmp_path):
    """The worker's Tierserve-Compute-Ms comes with the head, when the work is done: a client
    that leaves while the body streams still pays for it."""
    be = Endless(size=64 << 20, extra=b"Tierserve-Compute-Ms: 1000\r\n")
    r = Router(pools_config([("cpu", "cpu", False, [be.port], None)]).replace("    backends:", USAGE), tmp_path)
    try:
        r.wait_healthy(1)
        s = send_infer(r)
        read_head(s)
        s.close()
        wait_until(lambda: be.ended is not None)
        assert be.ended == "closed by the router", (be.ended, be.sent)
        assert outcomes(r)["cancelled"] == 1
        assert metric(r, "tierrouter_cost_usd_total", pool="cpu", tenant="unknown", priority="normal") == 1.0
    finally:
        assert r.stop() == 0
        be.close()


def test_a_client_gone_before_the_head_is_not_read_for_when_the_reply_streams(tmp_path):
    """The client leaves while the backend works (a KServe try then is read to its end, to
    keep the connection); the reply that comes is a long chunked stream: closed, not read."""
    be = Endless(size=64 << 20, chunked=True, delay=1.0)
    r = Router(pools_config([("cpu", "cpu", False, [be.port], None)]), tmp_path)
    try:
        r.wait_healthy(1)
        s = send_infer(r)
        time.sleep(0.3)
        s.close()
        wait_until(lambda: be.ended is not None)
        assert be.ended == "closed by the router", (be.ended, be.sent)
        wait_until(lambda: outcomes(r)["cancelled"] == 1, 5)
        assert outcomes(r) == {"cancelled": 1, "success": 0, "backend_error": 0}
    finally:
        assert r.stop() == 0
        be.close()


class Slow503(FakeHTTP):
    """Answers 503 after `delay` seconds."""

    def __init__(self, delay):
        self.delay = delay
        super().__init__()

    def respond(self, c, head, body):
        time.sleep(self.delay)
        b = b'{"error":"overloaded"}'
        c.sendall(b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n" + echo_id(head) +
                  b"Content-Length: %d\r\n\r\n" % len(b) + b)
        return True


def test_a_client_gone_gets_no_retry(tmp_path):
    """A 5xx that comes after the client left is not tried again elsewhere: nobody would
    read the answer, and the retry would cost a backend the work."""
    a, b = Slow503(0.5), Slow503(0.5)
    r = Router(pools_config([("cpu", "cpu", False, [a.port, b.port], None)]), tmp_path)
    try:
        r.wait_healthy(1)
        wait_until(lambda: r.status()["pools"][0]["healthy"] == 2, 10)
        s = send_infer(r)
        time.sleep(0.2)
        s.close()
        wait_until(lambda: a.hits + b.hits > 1 or outcomes(r)["backend_error"] > 0, 10)
        assert a.hits + b.hits == 1
        assert outcomes(r) == {"cancelled": 0, "success": 0, "backend_error": 1}
    finally:
        assert r.stop() == 0
        a.close()
        b.close()
