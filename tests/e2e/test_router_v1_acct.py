"""The router's side of /v1 accounting, against a scripted fake worker on real sockets: what a
try sends the worker (Tierserve-Accounting: 1, never the client's own, no deadline header),
and how the worker's `: tierserve-usage` line is taken out of a stream however the reads
split it, while every other byte (other comment lines too, even ones that start like it)
reaches the client as the worker wrote it. The real worker's side is in test_llm_router.py.

Clients are raw sockets: one request, sent once, read to the end and decoded strictly.
"""
import json
import re
import socket
import time

import pytest

from fakehttp import FakeHTTP, echo_id
from rawhttp import dechunk, read_to_close
from test_router import Router, pools_config
from test_router_v1 import metric

USD_PER_HOUR = 3600.0  # a dollar per compute second


class Scripted(FakeHTTP):
    """Streams `pieces` (bytes), one HTTP chunk and one write each, 30 ms apart, so that the
    router reads them one by one; records every /v1 request's head."""

    def __init__(self):
        self.pieces = []
        self.heads = []
        super().__init__()

    def respond(self, c, head, body):
        self.heads.append(head)
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n" + echo_id(head) +
                  b"Transfer-Encoding: chunked\r\n\r\n")
        for p in self.pieces:
            c.sendall(b"%x\r\n" % len(p) + p + b"\r\n")
            time.sleep(0.03)
        c.sendall(b"0\r\n\r\n")
        return True


@pytest.fixture()
def one(tmp_path):
    w = Scripted()
    cfg = pools_config([("llm", "cpu", False, [w.port], [("chat", "tiny")])])
    cfg = cfg.replace("    models:\n", f"    cost: {{model: usage, usd_per_hour: {USD_PER_HOUR}}}\n    models:\n")
    r = Router(cfg, tmp_path)
    r.wait_healthy(1)
    yield r, w
    assert r.stop() == 0
    w.close()


def stream(r, extra=b""):
    body = json.dumps({"model": "chat", "prompt": "x", "stream": True}).encode()
    s = socket.create_connection(("127.0.0.1", r.port), timeout=20)
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\n" +
              extra + b"Content-Length: %d\r\n\r\n" % len(body) + body)
    head, _, rest = read_to_close(s).partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), head
    return dechunk(rest)


def tokens(r):
    return tuple(metric(r, "tierrouter_tokens_total", pool="llm", priority="normal", kind=k)
                 for k in ("prompt", "completion"))


def cost(r):
    return metric(r, "tierrouter_cost_usd_total", pool="llm", tenant="unknown", priority="normal") or 0.0


def test_the_accounting_line_is_the_routers_however_it_is_split(one):
    r, w = one
    data = b'data: {"choices":[{"index":0,"text":"a"}]}\n\n'
    w.pieces = [data[:7], data[7:] + b": keep",  # a comment that starts like the line, cut short
                b"alive\n\n: tierserve-us", b"age prompt_tokens=11 completion_tokens=7 compute_ms=250.5",
                b"\ndata: [DONE]\n\n: tier"]  # and a last line that ends with the stream
    got = stream(r, b"Tierserve-Accounting: 0\r\nX-Request-Timeout-Ms: 5\r\nX-Deadline-Ms: 30000\r\n")
    assert got == data + b": keepalive\n\ndata: [DONE]\n\n: tier"
    # the worker's exact counts, and its compute time at the pool's price per second
    assert tokens(r) == (11, 7)
    assert cost(r) == pytest.approx(0.2505 * USD_PER_HOUR / 3600)
    # what the try carried: the router's accounting request, once; not the client's, nor a deadline
    head = w.heads[0].decode()
    assert re.findall(r"(?im)^tierserve-accounting:[^\r\n]*", head) == ["Tierserve-Accounting: 1"], head
    assert not re.search(r"(?im)^(x-request-timeout-ms|x-deadline-ms):", head), head


def test_a_malformed_accounting_line_is_taken_out_and_ignored(one):
    r, w = one
    data = b'data: {"choices":[{"index":0,"text":"a"}]}\n\n'
    w.pieces = [data, b": tierserve-usage prompt_tokens=1 completion_tokens=x compute_ms=1\n", b"data: [DONE]\n\n"]
    assert stream(r) == data + b"data: [DONE]\n\n"
    assert tokens(r) == (0, 1)  # as without a line: one token per chunk with content, no prompt
    assert cost(r) == 0
