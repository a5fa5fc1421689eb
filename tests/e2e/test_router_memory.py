"""tierrouter's memory after a burst of large backend replies: what an idle backend connection
keeps must not depend on what it once carried (docs/router.md "Memory").

The router keeps up to max_in_flight idle connections per backend. A client that opens that
many requests at once, for replies that are large (or whose heads are), made every one of
them keep a 64 KiB read buffer (and a head buffer as large as the largest head) for as long
as it idled: max_in_flight x 64 KiB and more per backend, held after the burst, and the slow
RSS creep of bench/targets.py's memory row.

The fake backend holds every reply until all N requests of the burst have arrived, so the
router has N connections open to it at once; the clients have hung up by then, so the router
reads each reply to its end and drops it: nothing is queued for a client, and what the
router holds after the burst is what its idle connections keep. The bound is generous: the
old code grew by 11 to 21 MiB (N = 200: N x 64 KiB of read buffers, and about as much of
head buffers), the new one by about 2 MiB. The client is raw sockets, never retried. Under
the sanitizers RSS means nothing (shadow memory, quarantine): the burst still runs there,
for ASan's sake, and only the RSS check is skipped.
"""
import json
import re
import socket
import threading
import time

import pytest

from conftest import SANITIZED
from helpers import rss_kb
from fakehttp import FakeHTTP, echo_id
from test_router import Router, pools_config

N = 200
BODY = json.dumps({"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 4],
                               "data": [1, 2, 3, 4]}]}).encode()
GROWTH_BOUND_KB = 6144


class HeldReplies(FakeHTTP):
    """Answers each inference with a large reply (a 256 KiB body, or a 48 KiB head the router
    does not forward), but only once release is set."""

    status = {**FakeHTTP.status, "models": [{"name": "demo", "version": "1", "ready": True}]}

    def __init__(self, big_head):
        self.big_head = big_head
        self.arrived = 0
        self.lock = threading.Lock()
        self.release = threading.Event()
        self.release.set()  # the warm-up is answered at once
        super().__init__()

    def respond(self, c, head, body):
        with self.lock:
            self.arrived += 1
        if not self.release.wait(30):
            return False
        if self.big_head:  # named by Connection: hop-by-hop, never copied to a client
            extra, payload = b"Connection: X-Pad\r\nX-Pad: " + b"p" * (48 << 10) + b"\r\n", b"{}"
        else:
            extra, payload = b"", b"0" * (256 << 10)
        c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n" + echo_id(head) + extra +
                  b"Content-Length: %d\r\n\r\n" % len(payload) + payload)
        return True


def infer_whole(port):
    """One inference on a fresh connection, read to its end (Content-Length framed)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(b"POST /v2/models/demo/infer HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
                  b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(BODY) + BODY)
        data = b""
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            chunk = s.recv(1 << 16)
            if not chunk:
                break
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 "), head[:200]
    n = int(re.search(rb"(?im)^content-length: *(\d+)", head).group(1))
    assert len(body) == n, (len(body), n)


def backend_state(r):
    return r.status()["pools"][0]["backends"][0]


def wait_healthy(r):
    deadline = time.monotonic() + 15
    while not backend_state(r).get("healthy") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert backend_state(r).get("healthy"), backend_state(r)


@pytest.mark.parametrize("big_head", [False, True], ids=["large-bodies", "large-heads"])
def test_idle_backend_connections_keep_no_buffers_after_a_burst(tmp_path, big_head):
    fake = HeldReplies(big_head)
    cfg = pools_config([("p", "cpu", False, [fake.port], None)])
    # probes at 1 s (their timeout 2 s), not the tests' usual 100 ms: while 200 threads of this
    # Python backend send their replies, a /v2/status probe can wait past 200 ms for its turn,
    # and the backend would be marked unhealthy for the final request (seen once in CI: 503
    # "no healthy backend can take model 'demo' now" after a probe "failed: no answer")
    cfg = cfg.replace("probe_interval_ms: 100\n", "probe_interval_ms: 1000\n")
    r = Router(cfg.replace("    min_tier: cpu\n", "    min_tier: cpu\n    max_in_flight: 256\n"), tmp_path)
    try:
        wait_healthy(r)
        for _ in range(5):  # warm-up: the one read buffer, the code paths, the first allocations
            infer_whole(r.port)
        base = rss_kb(r.proc.pid)

        fake.release.clear()
        fake.arrived = 0
        clients = []
        try:
            for _ in range(N):
                s = socket.create_connection(("127.0.0.1", r.port), timeout=10)
                s.sendall(b"POST /v2/models/demo/infer HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                          b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(BODY) + BODY)
                clients.append(s)
            deadline = time.monotonic() + 30
            while fake.arrived < N and time.monotonic() < deadline:
                time.sleep(0.05)
            assert fake.arrived == N, f"only {fake.arrived} of {N} requests reached the backend at once"
        finally:
            for s in clients:  # hung up: the router reads each reply to its end and drops it
                s.close()
        time.sleep(0.3)
        fake.release.set()
        deadline = time.monotonic() + 60
        while backend_state(r)["in_flight"] and time.monotonic() < deadline:
            time.sleep(0.1)
        b = backend_state(r)
        assert b["in_flight"] == 0, b
        wait_healthy(r)  # (a probe the burst delayed past its timeout is answered again)
        infer_whole(r.port)  # the router still serves, over a connection the burst left idle
        grown = rss_kb(r.proc.pid) - base
        print(f"router RSS {base} KB before the burst, +{grown} KB after it")
        if not SANITIZED:
            assert grown < GROWTH_BOUND_KB, (
                f"router RSS grew by {grown} KB after {N} large replies on {N} backend connections "
                f"(bound {GROWTH_BOUND_KB} KB): idle connections keep buffers")
    finally:
        code = r.stop()  # no sanitizer report in its log
        fake.close()
    assert code == 0
