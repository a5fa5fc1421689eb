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
from helpers import metric, wait_for

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


class WholeReply(FakeHTTP):
    """Answers every /v1 request with `reply(head)`: one write, head and body."""

    def __init__(self, reply):
        self.reply = reply
        super().__init__()

    def respond(self, c, head, body):
        c.sendall(self.reply(head))
        return True


def usage_router(tmp_path, w, extra=""):
    """A router with one usage-priced pool `llm` of backend w serving `chat` as `tiny`."""
    cfg = pools_config([("llm", "cpu", False, [w.port], [("chat", "tiny")])], extra)
    cfg = cfg.replace("    models:\n", f"    cost: {{model: usage, usd_per_hour: {USD_PER_HOUR}}}\n    models:\n")
    r = Router(cfg, tmp_path)
    r.wait_healthy(1)
    return r


@pytest.fixture()
def one(tmp_path):
    w = Scripted()
    r = usage_router(tmp_path, w)
    yield r, w
    assert r.stop() == 0
    w.close()


def request(r, extra=b"", stream=True):
    """One /v1/completions request, sent once and read to the close: (head, raw body)."""
    body = json.dumps({"model": "chat", "prompt": "x", "stream": stream}).encode()
    s = socket.create_connection(("127.0.0.1", r.port), timeout=20)
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\n" +
              extra + b"Content-Length: %d\r\n\r\n" % len(body) + body)
    head, _, rest = read_to_close(s).partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), head
    return head, rest


def stream(r, extra=b""):
    head, rest = request(r, extra)
    assert re.search(rb"(?im)^transfer-encoding: *chunked\r?$", head), head
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


def test_an_accounting_line_of_256_bytes_is_read_within_its_bytes(one):
    """The line's last value ends exactly where the line's buffer does: its parse must stop
    there (under ASan a read past it is a heap-buffer-overflow in the router)."""
    r, w = one
    data = b'data: {"choices":[{"index":0,"text":"a"}]}\n\n'
    pre, tail = b": tierserve-usage prompt_tokens=3 completion_tokens=4 pad=", b" compute_ms=5"
    line = pre + b"x" * (256 - len(pre) - len(tail)) + tail
    assert len(line) == 256
    w.pieces = [data + line + b"\ndata: [DONE]\n\n"]
    assert stream(r) == data + b"data: [DONE]\n\n"
    assert tokens(r) == (3, 4)
    assert cost(r) == pytest.approx(0.005 * USD_PER_HOUR / 3600)


def test_an_sse_reply_with_a_length_is_rechunked_without_its_accounting_line(tmp_path):
    """A worker may frame a stream with Content-Length (over the 64 KiB the router holds
    whole): the client's copy is shorter by the accounting line, so it cannot keep that
    length; it is re-chunked, every other byte intact."""
    event = b'data: {"choices":[{"index":0,"text":"' + b"a" * 100 + b'"}]}\n\n'
    events = event * 700
    payload = events + b": tierserve-usage prompt_tokens=1 completion_tokens=2 compute_ms=5\n" + b"data: [DONE]\n\n"
    assert len(payload) > 65536
    w = WholeReply(lambda head: b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n" + echo_id(head) +
                   b"Content-Length: %d\r\n\r\n" % len(payload) + payload)
    r = usage_router(tmp_path, w)
    try:
        assert stream(r) == events + b"data: [DONE]\n\n"
        assert tokens(r) == (1, 2)
    finally:
        assert r.stop() == 0
        w.close()


def test_token_counts_are_capped_per_request(one):
    """A hostile worker's counts (the accounting line's up to 18 digits, usage up to 2^63)
    count as at most 2^32 each, so that the totals cannot wrap."""
    r, w = one
    data = b'data: {"choices":[{"index":0,"text":"a"}]}\n\n'
    w.pieces = [data, b": tierserve-usage prompt_tokens=999999999999999999 completion_tokens=7 compute_ms=1\n",
                b"data: [DONE]\n\n"]
    stream(r)
    assert tokens(r) == (2 ** 32, 7)
    big = 2 ** 63 - 1
    w.pieces = [data, b'data: {"choices":[],"usage":{"prompt_tokens":%d,"completion_tokens":%d}}\n\n' % (big, big),
                b"data: [DONE]\n\n"]
    stream(r)
    assert tokens(r) == (2 ** 33, 2 ** 32 + 7)


@pytest.mark.parametrize("value,billed_ms", [("250.5", 250.5), ("1e3", 0), ("0x10", 0), ("+5", 0),
                                             ("1.2.3", 0), ("86400001", 0)])
def test_tierserve_compute_ms_is_read_by_the_accounting_lines_rule(tmp_path, value, billed_ms):
    """A non-stream reply's Tierserve-Compute-Ms: digits with at most one '.', 0 to a day,
    as in the stream's line; anything else (exponents, hex, signs) is no report."""
    billed_tokens, usd = bill_whole_reply(tmp_path, "a", b"Tierserve-Compute-Ms: " + value.encode() + b"\r\n")
    assert billed_tokens == (1, 1)
    assert usd == pytest.approx(billed_ms / 1e3 * USD_PER_HOUR / 3600)


def bill_whole_reply(tmp_path, text, head_lines):
    """One non-stream reply of `text` whose body's usage says 1 and 1, with head_lines in its
    head, through a new router: (tokens, cost) it was billed."""
    doc = json.dumps({"choices": [{"index": 0, "text": text}],
                      "usage": {"prompt_tokens": 1, "completion_tokens": 1}}).encode()
    w = WholeReply(lambda head: b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n" + echo_id(head) +
                   head_lines + b"Content-Length: %d\r\n\r\n" % len(doc) + doc)
    r = usage_router(tmp_path, w)
    try:
        head, body = request(r, stream=False)
        assert body == doc
        return tokens(r), cost(r)
    finally:
        assert r.stop() == 0
        w.close()


@pytest.mark.parametrize("usage,billed,ms", [("prompt_tokens=7 completion_tokens=5 compute_ms=250", (7, 5), 250),
                                             ("prompt_tokens=7 completion_tokens=x compute_ms=250", (0, 0), 40)])
def test_a_whole_reply_is_billed_from_its_tierserve_usage_head(tmp_path, usage, billed, ms):
    """The worker's report in the head is billed, whatever the body (2 MiB here, past the
    1 MiB the router would read for its usage) says; a malformed report is ignored, and then
    only an older worker's ways are left: Tierserve-Compute-Ms, and the body, too long."""
    billed_tokens, usd = bill_whole_reply(tmp_path, "a" * (2 << 20), b"Tierserve-Compute-Ms: 40\r\n"
                                          b"Tierserve-Usage: " + usage.encode() + b"\r\n")
    assert billed_tokens == billed
    assert usd == pytest.approx(ms / 1e3 * USD_PER_HOUR / 3600)


class Cancelled(FakeHTTP):
    """Streams one chunk of a /v1 request and then nothing (until the router closes the
    connection); answers GET /v1/accounting/{key} with `answers` in turn (the last one
    repeated), recording each key asked."""

    def __init__(self, answers):
        self.answers = answers
        self.asked = []
        self.heads = []
        super().__init__()

    def respond(self, c, head, body):
        m = re.match(rb"GET /v1/accounting/([^ ]+) ", head)
        if m:
            self.asked.append(m.group(1).decode())
            code, doc = self.answers[min(len(self.asked), len(self.answers)) - 1]
            c.sendall(b"HTTP/1.1 %d X\r\nContent-Type: application/json\r\n" % code + echo_id(head) +
                      b"Content-Length: %d\r\n\r\n" % len(doc) + doc)
            return True
        self.heads.append(head)
        c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n" + echo_id(head) +
                  b"Transfer-Encoding: chunked\r\n\r\n")
        ev = b'data: {"choices":[{"index":0,"text":"a"}]}\n\n'
        c.sendall(b"%x\r\n" % len(ev) + ev + b"\r\n")
        try:
            c.recv(1)  # the router's close
        except OSError:
            pass
        return False


def leave_after_first_chunk(r):
    body = json.dumps({"model": "chat", "prompt": "x", "stream": True}).encode()
    s = socket.create_connection(("127.0.0.1", r.port), timeout=20)
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n" % len(body) + body)
    got = b""
    while b'"text":"a"' not in got:
        got += s.recv(65536)
    s.close()


def wait_reports(r, source, n=1):
    return wait_for(lambda: metric(r, "tierrouter_v1_cancel_reports_total", source=source), n, 10)


def test_a_cancelled_stream_is_billed_what_its_worker_reports(tmp_path):
    """The client leaves after the first chunk: the router asks the worker for the try's
    usage by the try's key, asks again while it says 202 (winding down), and bills the
    report: prompt, completion and compute."""
    done = json.dumps({"key": "k", "state": "done", "prompt_tokens": 1500, "completion_tokens": 30,
                       "compute_ms": 2500.5}).encode()
    w = Cancelled([(202, b'{"state":"running"}'), (200, done)])
    r = usage_router(tmp_path, w)
    try:
        leave_after_first_chunk(r)
        assert wait_reports(r, "worker") == 1
        assert tokens(r) == (1500, 30)
        assert cost(r) == pytest.approx(2.5005 * USD_PER_HOUR / 3600)
        key = re.search(r"(?im)^tierserve-accounting-key: *([^\r\n]+)", w.heads[0].decode()).group(1)
        assert w.asked == [key, key]
        assert metric(r, "tierrouter_requests_total", pool="llm", priority="normal", outcome="cancelled") == 1
    finally:
        assert r.stop() == 0
        w.close()


@pytest.mark.parametrize("answer,asks", [
    ((404, b'{"error":{}}'), 2),  # an older worker, or no record: asked once more, then given up
    ((202, b'{"state":"running"}'), 7),  # winding down for ever: given up after about 3 s
    ((200, b'{"state":"done","prompt_tokens":-1,"completion_tokens":1,"compute_ms":1}'), 1),
    ((200, b'{"state":"done","prompt_tokens":1,"completion_tokens":1,"compute_ms":1e12}'), 1),
    ((200, b'{"state":"running","prompt_tokens":1,"completion_tokens":1,"compute_ms":1}'), 1),
    ((200, b"x" * 5000), 1),
])
def test_without_a_good_report_a_cancelled_stream_is_billed_what_passed(tmp_path, answer, asks):
    w = Cancelled([answer])
    r = usage_router(tmp_path, w)
    try:
        leave_after_first_chunk(r)
        assert wait_reports(r, "router") == 1
        assert tokens(r) == (0, 1)  # the one chunk with content, no prompt
        assert cost(r) == 0
        assert len(w.asked) == asks
    finally:
        assert r.stop() == 0
        w.close()


def test_every_try_has_a_key_of_its_own(one):
    r, w = one
    w.pieces = [b'data: {"choices":[{"index":0,"text":"a"}]}\n\n', b"data: [DONE]\n\n"]
    stream(r)
    stream(r)
    keys = [re.search(r"(?im)^tierserve-accounting-key: *([^\r\n]+)", h.decode()).group(1) for h in w.heads]
    assert len(keys) == 2 and keys[0] != keys[1], keys
    assert all(re.fullmatch(r"[0-9a-f]{16}-[0-9a-f]+", k) for k in keys), keys
    assert keys[0].split("-")[0] == keys[1].split("-")[0]  # one prefix per router process


def test_a_drain_waits_for_the_question_under_way(tmp_path):
    """SIGTERM right after a cancel: the router still asks (the worker keeps saying 202),
    bills what it saw when it gives up, and exits cleanly (every question freed)."""
    w = Cancelled([(202, b'{"state":"running"}')])
    r = usage_router(tmp_path, w)
    try:
        leave_after_first_chunk(r)
        time.sleep(0.1)
        t0 = time.time()
        assert r.stop() == 0
        assert len(w.asked) == 7 and time.time() - t0 < 10, (w.asked, time.time() - t0)
    finally:
        w.close()
