"""What an idle client connection costs the HTTP layer (src/net/h1srv.c): between requests,
with nothing buffered, a connection holds no read buffer (docs/router.md "Memory").

Before, every connection kept a 64 KiB read buffer for its whole life, idle keep-alive
connections included. A request whose head (or chunked body) fills most of that buffer
touches its pages, so N connections that each sent one such request and now idle held
N x 64 KiB of RSS: 200 connections, about 12 MiB. Now every read lands in one buffer per
loop thread and is parsed at once; the request's own buffers (its head, its body) are freed
with it, so the growth is what the connections' small structures and the allocator keep.

Raw sockets, never retried; every socket has a timeout and every loop a deadline. Under the
sanitizers RSS means nothing (shadow memory, quarantine): the connections are still made
there, for ASan's sake, and only the RSS check is skipped.
"""
import re
import socket
import time

import pytest

from conftest import SANITIZED, start_worker
from helpers import rss_kb
from test_router import Router, pools_config
from test_router_conns import read_reply as read_framed

N = 200
PAD = 56 << 10           # most of the 64 KiB a connection's read buffer was
GROWTH_BOUND_KB = 4096   # the old code grew by N x 64 KiB = 12.5 MiB and more


def big_request(kind):
    """One request that fills most of a read buffer: a head with a large field, or a chunked
    body (never read straight into a body buffer: its bytes pass through the read buffer)."""
    if kind == "head":
        return (b"GET /no-such-path HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pad: " + b"p" * PAD + b"\r\n\r\n")
    body = b"x" * PAD
    return (b"POST /no-such-path HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n" +
            b"%x\r\n" % len(body) + body + b"\r\n0\r\n\r\n")


def read_reply(s):
    """One Content-Length framed reply on a connection that stays open: (status, head)."""
    status, head, _ = read_framed(s)
    assert not re.search(rb"(?im)^connection: *close", head), head
    return status, head


def idle_connections_growth(port, pid, kind):
    """Opens N connections, each sending one big request and reading its reply, and leaves
    them idle; returns the process's RSS growth in KB. Each stays usable afterwards."""
    for _ in range(5):  # warm-up: the read buffer, the code paths, the first allocations
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(big_request(kind))
            assert read_reply(s)[0] == 404
    time.sleep(0.2)
    base = rss_kb(pid)
    conns = []
    try:
        for _ in range(N):
            s = socket.create_connection(("127.0.0.1", port), timeout=10)
            conns.append(s)
            s.sendall(big_request(kind))
            status, head = read_reply(s)
            assert status == 404, head[:300]
        time.sleep(0.3)
        grown = rss_kb(pid) - base
        for s in conns[:3]:  # idle, not dead: a second request on the same connection
            s.sendall(b"GET /no-such-path HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            assert read_reply(s)[0] == 404
    finally:
        for s in conns:
            s.close()
    print(f"RSS {base} KB before, +{grown} KB with {N} idle connections ({kind})")
    return grown


@pytest.fixture
def worker(tmp_path_factory):
    """A fresh worker per case: memory one case freed would hide the next case's growth."""
    import gen_test_models
    tmp = tmp_path_factory.mktemp("idle-conns")
    model = tmp / "repo" / "demo" / "1" / "model.onnx"
    model.parent.mkdir(parents=True)
    model.write_bytes(gen_test_models.build_model("demo", 1).SerializeToString())
    w = start_worker(tmp / "repo", tmp, env={"EXECUTION_MODE": "cpu", "TIERSERVE_MAX_CONNECTIONS": "1024"})
    yield w
    code = w.stop()
    assert code == 0, w.log_text()[-4000:]
    assert not w.sanitizer_reports(), w.log_text()[-8000:]


@pytest.mark.parametrize("kind", ["head", "chunked-body"])
def test_worker_idle_connections_hold_no_read_buffer(worker, kind):
    grown = idle_connections_growth(worker.port, worker.proc.pid, kind)
    if not SANITIZED:
        assert grown < GROWTH_BOUND_KB, (
            f"tierserve RSS grew by {grown} KB with {N} idle connections that each read one "
            f"{PAD >> 10} KiB request (bound {GROWTH_BOUND_KB} KB): idle connections keep read buffers")


def test_router_idle_connections_hold_no_read_buffer(tmp_path):
    # a pool whose one backend is a port where nothing listens: the 404s are the router's own
    with socket.socket() as hole:
        hole.bind(("127.0.0.1", 0))
        dead = hole.getsockname()[1]
    r = Router(pools_config([("p", "cpu", False, [dead], None)]), tmp_path)
    try:
        grown = idle_connections_growth(r.port, r.proc.pid, "head")
        if not SANITIZED:
            assert grown < GROWTH_BOUND_KB, (
                f"tierrouter RSS grew by {grown} KB with {N} idle client connections that each "
                f"read one {PAD >> 10} KiB request head (bound {GROWTH_BOUND_KB} KB)")
    finally:
        code = r.stop()
    assert code == 0
