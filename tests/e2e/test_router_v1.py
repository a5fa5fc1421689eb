"""tierrouter's OpenAI-style /v1 traffic against fake SSE workers on real sockets.

The fakes speak the OpenAI wire format (JSON replies with "usage"; SSE streams of
`data: {...}` chunks ending in `data: [DONE]`) and answer the router's /v2/status probes as
healthy CPU workers. Every client here is http.client or a raw socket: one request, sent
once, decoded strictly (duplicate JSON keys and a stream without its end fail the test).
"""
import gzip
import http.client
import json
import re
import socket
import struct
import threading
import time

import pytest

from fakehttp import FakeHTTP, echo_id
from rawhttp import read_to_close
import helpers
from helpers import metric, rss_kb, sse_data
from test_router import Router, pools_config


def strict_json(data):
    def pairs(kv):
        keys = [k for k, _ in kv]
        assert len(keys) == len(set(keys)), f"duplicate keys in {data!r}"
        return dict(kv)
    return json.loads(data, object_pairs_hook=pairs)


def header(head, name):
    m = re.search(rb"(?im)^%s: *([^\r\n]*)\r?$" % name.encode(), head)
    return m.group(1).decode() if m else None


class FakeV1(FakeHTTP):
    """A worker's /v1. mode: ok | reset (closes with RST before any byte) | head_reset (sends
    a 200 SSE head, then RST) | mid (two chunks, then RST). Streams send `chunks` content
    chunks; after the first it waits for `release` (set by a test that checks the chunk got
    through first), or `gap` seconds."""

    def __init__(self, mode="ok", chunks=3, usage=(7, 3)):
        self.mode = mode
        self.chunks = chunks
        self.usage = usage
        self.requests = []  # (path, head, parsed body) of every /v1 request
        self.raw = []       # ... and its body's bytes
        self.release = None
        self.gap = 0.0
        super().__init__()

    def rst(self, c):
        c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        c.close()

    def respond(self, c, head, body):
        path = head.split(b" ")[1].decode()
        req = strict_json(body)
        self.requests.append((path, head, req))
        self.raw.append(body)
        if self.mode == "reset":
            self.rst(c)
            return False
        rid = echo_id(head)
        model = req["model"]
        # each chunk leaves at once (Nagle would hold a small write behind an unacked one)
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if not req.get("stream"):
            reply = json.dumps({"id": "cmpl-1", "object": "chat.completion", "model": model,
                                "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"},
                                             "finish_reason": "stop"}],
                                "usage": {"prompt_tokens": self.usage[0], "completion_tokens": self.usage[1],
                                          "total_tokens": sum(self.usage)}}).encode()
            c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n" + rid +
                      b"Content-Length: %d\r\n\r\n" % len(reply) + reply)
            return True
        c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n" + rid +
                  b"Transfer-Encoding: chunked\r\n\r\n")
        if self.mode == "head_reset":
            time.sleep(0.05)
            self.rst(c)
            return False

        def chunk(obj):
            data = b"data: " + (obj if isinstance(obj, bytes) else json.dumps(obj).encode()) + b"\n\n"
            c.sendall(b"%x\r\n" % len(data) + data + b"\r\n")

        chat = path.endswith("/chat/completions")
        role = {"id": "c", "object": "chat.completion.chunk", "model": model,
                "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}
        if chat:
            chunk(role)  # carries no token: TTFT is the first content
        for i in range(self.chunks):
            if chat:
                chunk({"id": "c", "object": "chat.completion.chunk", "model": model,
                       "choices": [{"index": 0, "delta": {"content": f"t{i}"}}]})
            else:
                chunk({"id": "c", "object": "text_completion", "model": model,
                       "choices": [{"index": 0, "text": f"t{i}"}]})
            if i == 0 and self.release is not None:
                assert self.release.wait(10), "the client never saw the first chunk"
            elif self.gap:
                time.sleep(self.gap)
            if self.mode == "mid" and i == 1:
                self.rst(c)
                return False
        if (req.get("stream_options") or {}).get("include_usage"):
            chunk({"id": "c", "object": "chat.completion.chunk", "model": model, "choices": [],
                   "usage": {"prompt_tokens": self.usage[0], "completion_tokens": self.usage[1],
                             "total_tokens": sum(self.usage)}})
        chunk(b"[DONE]")
        c.sendall(b"0\r\n\r\n")
        return True


def post(r, path, obj, headers=None, raw=None, timeout=20):
    """One POST of obj as JSON, or of the bytes raw instead: (status, headers, raw body)."""
    return helpers.post(r, path, raw if raw is not None else obj, headers, timeout)


MODELS_GPU = [("llama", "llama-fp16")]
MODELS_CPU = [("llama", "llama-int8")]


@pytest.fixture()
def two(tmp_path):
    """A GPU pool serving llama as llama-fp16, a CPU pool (sensitive) serving it as llama-int8."""
    g, c = FakeV1(), FakeV1()
    extra = ("slo_ttft_ms: {urgent: 0, normal: 250, batch: 0}\nslo_itl_ms: {urgent: 0, normal: 40, batch: 0}\n")
    cfg = pools_config([("gpu", "gpu", False, [g.port], MODELS_GPU), ("cpu", "cpu", True, [c.port], MODELS_CPU)],
                       extra)
    cfg = cfg.replace("    models:\n      - {name: llama, serve: llama-fp16}",
                      "    cost: {model: none, usd_per_1k_tokens: 2.0}\n    models:\n"
                      "      - {name: llama, serve: llama-fp16}")
    r = Router(cfg, tmp_path)
    r.wait_healthy(2)
    yield r, g, c
    assert r.stop() == 0
    g.close()
    c.close()


def test_routed_by_data_class_with_the_pool_model_map_and_priority(two):
    r, g, c = two
    for prio in ("urgent", "normal", "batch"):
        code, h, body = post(r, "/v1/chat/completions", {"model": "llama", "messages": [{"role": "user",
                                                                                        "content": "x"}]},
                             {"X-Priority": prio})
        assert code == 200 and h["x-tierrouter-pool"] == "gpu", body
        # the reply names the model that ran (the router does not rewrite replies)
        assert strict_json(body)["model"] == "llama-fp16"
        path, head, req = g.requests[-1]
        assert path == "/v1/chat/completions" and req["model"] == "llama-fp16"
        assert header(head, "X-Priority") == prio
        assert req["messages"] == [{"role": "user", "content": "x"}]
    code, h, body = post(r, "/v1/completions", {"model": "llama", "prompt": "x", "temperature": 0.7},
                         {"X-Data-Class": "sensitive"})
    assert code == 200 and h["x-tierrouter-pool"] == "cpu"
    path, head, req = c.requests[-1]
    assert path == "/v1/completions" and req == {"model": "llama-int8", "prompt": "x", "temperature": 0.7}
    assert header(head, "X-Priority") == "normal"
    assert len(g.requests) == 3 and len(c.requests) == 1  # (before the byte-exact check below)
    # the rewrite replaces the model's value and nothing else: the client's bytes (spacing,
    # number spelling, a key spelled with an escape) reach the worker as they were
    raw = b'{ "mod\\u0065l" :\t"llama" , "temperature": 1.10, "n": 1e0, "stop": ["\\n"]}'
    code, _, _ = post(r, "/v1/completions", None, raw=raw)
    assert code == 200
    assert g.raw[-1] == b'{ "mod\\u0065l" :\t"llama-fp16" , "temperature": 1.10, "n": 1e0, "stop": ["\\n"]}'


def test_a_body_is_forwarded_byte_for_byte_when_the_name_is_the_pools(tmp_path):
    w = FakeV1()
    r = Router(pools_config([("gpu", "gpu", False, [w.port], None)]), tmp_path)
    try:
        r.wait_healthy(1)
        raw = b'{ "model" : "m",\n "prompt": "\\u00e9", "max_tokens": 3 }'
        code, _, _ = post(r, "/v1/completions", None, raw=raw)
        assert code == 200
        assert w.requests[-1][2] == {"model": "m", "prompt": "\u00e9", "max_tokens": 3}
        # a gzip body is read (and forwarded) plain
        code, _, _ = post(r, "/v1/completions", None, {"Content-Encoding": "gzip"}, raw=gzip.compress(raw))
        assert code == 200 and w.requests[-1][2]["model"] == "m"
        assert header(w.requests[-1][1], "Content-Encoding") is None
    finally:
        assert r.stop() == 0
        w.close()


def test_a_stream_passes_through_chunk_by_chunk(two):
    """The fake sends its first content chunk and then waits until the client has read it:
    a router that buffered the stream would deadlock here (and the fake's wait fails)."""
    r, g, c = two
    g.release = threading.Event()
    s = socket.create_connection(("127.0.0.1", r.port), timeout=15)
    body = json.dumps({"model": "llama", "stream": True, "messages": [{"role": "user", "content": "x"}]}).encode()
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n" % len(body) + body)
    got = b""
    deadline = time.monotonic() + 10
    while b'"t0"' not in got and time.monotonic() < deadline:
        got += s.recv(65536)
    assert b'"t0"' in got and b'"t1"' not in got, got
    assert b"text/event-stream" in got.split(b"\r\n\r\n")[0]
    g.release.set()
    while not got.endswith(b"0\r\n\r\n") and time.monotonic() < deadline:
        d = s.recv(65536)
        if not d:
            break
        got += d
    s.close()
    assert b"data: [DONE]" in got and b'"t2"' in got


def test_reset_before_any_byte_is_retried_into_one_clean_stream(tmp_path):
    """A worker that resets before any byte, and one that sends its 200 head and then resets:
    both are retried on the good backend, and the client sees exactly one stream."""
    for mode in ("reset", "head_reset"):
        bad, good = FakeV1(mode), FakeV1()
        r = Router(pools_config([("gpu", "gpu", False, [bad.port, good.port], None)]), tmp_path)
        try:
            r.wait_healthy(2)
            for _ in range(4):
                code, h, body = post(r, "/v1/chat/completions", {"model": "m", "stream": True, "messages": []})
                assert code == 200, body
                ev = sse_data(body)
                assert ev[-1] == "[DONE]" and ev.count("[DONE]") == 1
                assert [strict_json(e)["choices"][0]["delta"].get("content") for e in ev[:-1]] == ["", "t0", "t1",
                                                                                                   "t2"]
            assert len(bad.requests) >= 1, mode
            assert len(good.requests) == 4
            assert metric(r, "tierrouter_retries_total") >= len(bad.requests)
            assert metric(r, "tierrouter_requests_total", pool="gpu", priority="normal", outcome="success") == 4
        finally:
            assert r.stop() == 0
            bad.close()
            good.close()


def test_a_worker_dying_mid_stream_cuts_the_client_and_is_not_retried(tmp_path):
    bad, good = FakeV1("mid"), FakeV1()
    r = Router(pools_config([("gpu", "gpu", False, [bad.port], None), ("cpu", "cpu", False, [good.port], None)]),
               tmp_path)
    try:
        r.wait_healthy(2)
        conn = http.client.HTTPConnection("127.0.0.1", r.port, timeout=15)
        conn.request("POST", "/v1/completions", body=json.dumps({"model": "m", "prompt": "x", "stream": True}),
                     headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        assert resp.status == 200 and resp.getheader("X-Tierrouter-Pool") == "gpu"
        with pytest.raises(http.client.IncompleteRead) as e:
            resp.read()
        partial = e.value.partial
        assert b'"t0"' in partial and b"[DONE]" not in partial
        conn.close()
        assert len(bad.requests) == 1 and good.requests == []
        assert metric(r, "tierrouter_requests_total", pool="gpu", priority="normal", outcome="backend_error") == 1
    finally:
        assert r.stop() == 0
        bad.close()
        good.close()


def openai_error(body, status_type, param=None, code=None):
    e = strict_json(body)
    assert set(e) == {"error"} and set(e["error"]) == {"message", "type", "param", "code"}, e
    assert isinstance(e["error"]["message"], str) and e["error"]["message"]
    assert e["error"]["type"] == status_type and e["error"]["param"] == param and e["error"]["code"] == code, e
    return e["error"]["message"]


def test_errors_the_router_answers_on_v1_have_openais_shape(two):
    r, g, c = two
    code, h, body = post(r, "/v1/chat/completions", None, raw=b'{"model": "llama",')
    assert code == 400 and "not valid JSON" in openai_error(body, "invalid_request_error")
    code, _, body = post(r, "/v1/chat/completions", {"messages": []})
    assert code == 400 and "model" in openai_error(body, "invalid_request_error", "model")
    code, _, body = post(r, "/v1/chat/completions", ["model", "llama"])
    assert code == 400 and "object" in openai_error(body, "invalid_request_error")
    code, _, body = post(r, "/v1/chat/completions", {"model": 5})
    assert code == 400 and openai_error(body, "invalid_request_error", "model")
    code, _, body = post(r, "/v1/completions", {"model": "llama", "stream": "yes"})
    assert code == 400 and openai_error(body, "invalid_request_error", "stream")
    code, _, body = post(r, "/v1/chat/completions", {"model": "gpt-9", "messages": []})
    assert code == 404 and "gpt-9" in openai_error(body, "not_found_error", "model", "model_not_found")
    code, _, body = post(r, "/v1/chat/completions", {"model": "llama"}, {"X-Priority": "asap"})
    assert code == 400 and "X-Priority" in openai_error(body, "invalid_request_error")
    code, _, body = post(r, "/v1/audio/speech", {"model": "llama"})
    assert code == 404 and openai_error(body, "not_found_error")
    conn = http.client.HTTPConnection("127.0.0.1", r.port, timeout=10)
    conn.request("GET", "/v1/chat/completions")
    resp = conn.getresponse()
    assert resp.status == 405 and resp.getheader("Allow") == "POST"
    openai_error(resp.read(), "invalid_request_error")
    conn.close()
    # the HTTP layer's own refusal (a body announced over max_body_bytes, refused unread) has
    # the same shape on /v1 and the plain one elsewhere
    for path, shape in (("/v1/chat/completions", "openai"), ("/v2/models/llama/infer", "plain")):
        with socket.create_connection(("127.0.0.1", r.port), timeout=10) as s:
            s.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      f"Content-Length: 99999999999\r\n\r\n".encode())
            raw = read_to_close(s)
        head, _, body = raw.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 413 "), raw[:200]
        if shape == "openai":
            assert "larger than the limit" in openai_error(body, "invalid_request_error")
        else:
            assert "larger than the limit" in json.loads(body)["error"]
    assert g.requests == [] and c.requests == []  # none of it cost a worker anything
    assert metric(r, "tierrouter_requests_total", pool="none", priority="normal", outcome="client_error") >= 5


def test_hostile_bodies_are_refused_before_a_worker(two):
    r, g, c = two
    cases = [
        {"model": "x" * 300, "messages": []},                       # too long a name
        {"model": "lla\u0001ma", "messages": []},                  # a control byte
        {"model": "llama\nX-Injected: 1", "messages": []},
    ]
    for obj in cases:
        code, _, body = post(r, "/v1/chat/completions", obj)
        assert code == 400, obj
        openai_error(body, "invalid_request_error", "model")
    deep = b'{"model": "llama", "messages": ' + b"[" * 100 + b"]" * 100 + b"}"
    code, _, body = post(r, "/v1/chat/completions", None, raw=deep)
    assert code == 400 and "deep" in openai_error(body, "invalid_request_error")
    # two "model" keys: the router and the worker might read different ones
    for raw in (b'{"model": "llama", "model": "other"}', b'{"model": "llama", "mod\\u0065l": "other"}'):
        code, _, body = post(r, "/v1/chat/completions", None, raw=raw)
        assert code == 400 and "duplicate" in openai_error(body, "invalid_request_error", "model")
    code, _, body = post(r, "/v1/chat/completions", None, raw=b'{"model": "llama", "stream": true, "stream": false}')
    assert code == 400 and "duplicate" in openai_error(body, "invalid_request_error", "stream")
    # a nested "model" is not the request's
    code, _, body = post(r, "/v1/chat/completions", None, raw=b'{"x": {"model": "llama"}}')
    assert code == 400 and openai_error(body, "invalid_request_error", "model")
    code, _, body = post(r, "/v1/chat/completions", None, raw=b'{"model": "x\\u0000y"}')
    assert code == 400 and openai_error(body, "invalid_request_error", "model")
    code, _, body = post(r, "/v1/chat/completions", None, raw=b'{"model": "ll\xffama"}')
    assert code == 400 and openai_error(body, "invalid_request_error")
    code, _, body = post(r, "/v1/chat/completions", None, raw=b"")
    assert code == 400 and openai_error(body, "invalid_request_error")
    assert g.requests == [] and c.requests == []
    # a large body is scanned, not built into a tree: 16 MiB of numbers (8 M values; a JSON
    # tree of them would take hundreds of MiB) moves the router's peak memory little
    def peak_kib():
        return rss_kb(r.proc.pid, peak=True)
    before = peak_kib()
    big = b'{"model": "nope", "prompt": [' + b"0," * (8 << 20) + b'0]}'
    code, _, body = post(r, "/v1/completions", None, raw=big, timeout=60)
    assert code == 404 and openai_error(body, "not_found_error", "model", "model_not_found")
    assert peak_kib() - before < 120 * 1024, (before, peak_kib())
    # and the router is fine afterwards
    code, _, _ = post(r, "/v1/chat/completions", {"model": "llama", "messages": []})
    assert code == 200


def test_tokens_cost_ttft_and_itl(two):
    r, g, c = two
    g.gap = 0.02
    # non-stream: the reply's usage (7 prompt, 3 completion) at 2 USD per 1k tokens
    code, _, _ = post(r, "/v1/chat/completions", {"model": "llama", "messages": []})
    assert code == 200
    assert metric(r, "tierrouter_tokens_total", pool="gpu", priority="normal", kind="prompt") == 7
    assert metric(r, "tierrouter_tokens_total", pool="gpu", priority="normal", kind="completion") == 3
    assert metric(r, "tierrouter_cost_usd_total", pool="gpu", tenant="unknown", priority="normal") == \
        pytest.approx(0.02)
    # no TTFT for a reply that is not a stream
    assert metric(r, "tierrouter_time_to_first_token_seconds_count", pool="gpu", priority="normal") is None
    # a stream without usage: one token per chunk with content (3), no prompt
    code, _, body = post(r, "/v1/chat/completions", {"model": "llama", "stream": True, "messages": []})
    assert code == 200 and sse_data(body)[-1] == "[DONE]"
    assert metric(r, "tierrouter_tokens_total", pool="gpu", priority="normal", kind="prompt") == 7
    assert metric(r, "tierrouter_tokens_total", pool="gpu", priority="normal", kind="completion") == 6
    # a stream with include_usage: the final chunk's usage counts, not the chunks
    code, _, body = post(r, "/v1/chat/completions", {"model": "llama", "stream": True, "messages": [],
                                                     "stream_options": {"include_usage": True}})
    assert code == 200 and strict_json(sse_data(body)[-2])["usage"]["prompt_tokens"] == 7
    assert metric(r, "tierrouter_tokens_total", pool="gpu", priority="normal", kind="prompt") == 14
    assert metric(r, "tierrouter_tokens_total", pool="gpu", priority="normal", kind="completion") == 9
    assert metric(r, "tierrouter_cost_usd_total", pool="gpu", tenant="unknown", priority="normal") == \
        pytest.approx(0.046)
    # two streams: one first token each, two gaps each (3 content chunks)
    assert metric(r, "tierrouter_time_to_first_token_seconds_count", pool="gpu", priority="normal") == 2
    assert metric(r, "tierrouter_inter_token_latency_seconds_count", pool="gpu", priority="normal") == 4
    itl_sum = metric(r, "tierrouter_inter_token_latency_seconds_sum", pool="gpu", priority="normal")
    # the fake's 20 ms gaps (80 ms in all), as the router saw them: not read in one piece
    assert itl_sum >= 0.02
    slo = r.status()["slo"]["normal"]
    assert slo["ttft"]["target_p95_ms"] == 250 and slo["ttft"]["samples_60s"] == 2
    assert slo["itl"]["target_p95_ms"] == 40 and slo["itl"]["samples_60s"] == 4
    assert 0 <= slo["itl"]["compliance"] <= 1 and slo["itl"]["p95_ms"] >= 5
    assert r.status()["slo"]["urgent"]["ttft"] == {"target_p95_ms": None, "samples_60s": 0, "p50_ms": None,
                                                   "p95_ms": None, "p99_ms": None, "compliance": None}
    # the requests are counted like inference
    assert metric(r, "tierrouter_requests_total", pool="gpu", priority="normal", outcome="success") == 3


def test_models_lists_what_the_pools_serve(tmp_path):
    g, c = FakeV1(), FakeV1()
    r = Router(pools_config([("gpu", "gpu", False, [g.port], [("llama", "llama-fp16"), ("org/qwen", "qwen")]),
                             ("cpu", "cpu", False, [c.port], [("llama", "llama-int8")])]), tmp_path)
    try:
        r.wait_healthy(2)
        conn = http.client.HTTPConnection("127.0.0.1", r.port, timeout=10)
        conn.request("GET", "/v1/models")
        resp = conn.getresponse()
        got = strict_json(resp.read())
        assert resp.status == 200
        assert got == {"object": "list", "data": [
            {"id": "llama", "object": "model", "created": 0, "owned_by": "tierserve"},
            {"id": "org/qwen", "object": "model", "created": 0, "owned_by": "tierserve"}]}
        conn.request("GET", "/v1/models/org/qwen")
        resp = conn.getresponse()
        assert resp.status == 200 and strict_json(resp.read())["id"] == "org/qwen"
        conn.request("GET", "/v1/models/nope")
        resp = conn.getresponse()
        assert resp.status == 404
        openai_error(resp.read(), "not_found_error", "model", "model_not_found")
        conn.close()
    finally:
        assert r.stop() == 0
        g.close()
        c.close()


def test_tenant_keys_work_as_openai_bearer_keys(tmp_path):
    w = FakeV1()
    r = Router(pools_config([("gpu", "gpu", False, [w.port], None)],
                            # admin_open: keys without an admin token refuse to start, and
                            # wait_healthy reads /admin/status without credentials
                            "admin_open: true\ntenants:\n  - {name: acme, api_key: acme-key-123}\n"), tmp_path)
    try:
        r.wait_healthy(1)
        code, _, body = post(r, "/v1/completions", {"model": "m", "prompt": "x"})
        assert code == 401 and openai_error(body, "authentication_error")
        code, _, body = post(r, "/v1/completions", {"model": "m", "prompt": "x"},
                             {"Authorization": "Bearer wrong-key-000"})
        assert code == 401
        code, _, _ = post(r, "/v1/completions", {"model": "m", "prompt": "x"}, {"Authorization": "Bearer acme-key-123"})
        assert code == 200
        # the client's key is never forwarded to the worker
        assert header(w.requests[-1][1], "Authorization") is None
        code, _, _ = post(r, "/v1/completions", {"model": "m", "prompt": "x"}, {"X-Api-Key": "acme-key-123"})
        assert code == 200
    finally:
        assert r.stop() == 0
        w.close()
