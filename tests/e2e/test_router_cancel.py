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
from test_router_v1 import metric

SIZE = 256 << 20  # far more than the socket buffers between the fake, the router and the client


class Endless(FakeHTTP):
    """Answers with a Content-Length reply of SIZE bytes, written until done or the router
    closes the connection; records how it ended."""

    def __init__(self):
        self.sent = 0
        self.ended = None  # "complete" | "closed by the router"
        super().__init__()

    def respond(self, c, head, body):
        c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n" + echo_id(head) +
                  b"Content-Length: %d\r\n\r\n" % SIZE)
        block = b"x" * (1 << 16)
        try:
            while self.sent < SIZE:
                c.sendall(block)
                self.sent += len(block)
        except OSError:
            self.ended = "closed by the router"
            return False
        self.ended = "complete"
        return True


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
        s = socket.create_connection(("127.0.0.1", r.port), timeout=20)
        body = json.dumps({"inputs": [{"name": "x", "datatype": "BYTES", "shape": [1], "data": ["hi"]}]}).encode()
        s.sendall(b"POST /v2/models/blob/infer HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
        got = b""
        while b"\r\n\r\n" not in got:
            data = s.recv(65536)
            assert data, got
            got += data
        assert got.startswith(b"HTTP/1.1 200")
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
