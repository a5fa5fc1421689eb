"""The /v1 request's host-side work (JSON body, chat template, tokenizer) runs on the worker's
decode threads, not on its event loop: other connections are answered while a big prompt is
tokenized, every refusal comes back exactly as it did when the loop did that work, and a
client that leaves while its prompt is tokenized leaves no sequence behind.
Raw http.client, no retries."""
import http.client
import json
import socket
import threading
import time

import pytest

from conftest import start_worker
from helpers import metric, post
from llm_fixture import write_tiny_llm
from rawhttp import read_to_close

BIG = "hello world " * (700 * 1024 // 12)

# (name, path, body (bytes or an object to dump), extra headers) -> (status, exact JSON), as the
# worker answered them when all of this ran on the loop (captured from that build).
CASES = [
    ("bad_json", "/v1/completions", b"{", {}),
    ("not_object", "/v1/completions", b"[1]", {}),
    ("dup_key", "/v1/completions", b'{"model":"tiny","model":"tiny"}', {}),
    ("no_model", "/v1/completions", {"prompt": "hi"}, {}),
    ("unknown_model", "/v1/chat/completions", {"model": "nope", "messages": []}, {}),
    ("unrecognized", "/v1/completions", {"model": "tiny", "prompt": "hi", "bogus": 1}, {}),
    ("stream_options", "/v1/completions", {"model": "tiny", "prompt": "hi", "stream_options": {}}, {}),
    ("temperature", "/v1/completions", {"model": "tiny", "prompt": "hi", "temperature": 3}, {}),
    ("n2", "/v1/chat/completions", {"model": "tiny", "messages": [{"role": "user", "content": "x"}], "n": 9}, {}),
    ("max_tokens0", "/v1/completions", {"model": "tiny", "prompt": "hi", "max_tokens": 0}, {}),
    ("priority", "/v1/completions", {"model": "tiny", "prompt": "hi"}, {"X-Priority": "high"}),
    ("timeout_hdr", "/v1/completions", {"model": "tiny", "prompt": "hi"}, {"X-Request-Timeout-Ms": "soon"}),
    ("body_before_header", "/v1/completions", {"model": "tiny", "prompt": "hi", "n": 9}, {"X-Priority": "high"}),
    ("header_before_prompt", "/v1/completions", {"model": "tiny", "prompt": 5}, {"X-Priority": "high"}),
    ("messages_empty", "/v1/chat/completions", {"model": "tiny", "messages": []}, {}),
    ("message_not_object", "/v1/chat/completions", {"model": "tiny", "messages": ["hi"]}, {}),
    ("role", "/v1/chat/completions", {"model": "tiny", "messages": [{"role": "robot", "content": "x"}]}, {}),
    ("message_key", "/v1/chat/completions",
     {"model": "tiny", "messages": [{"role": "user", "content": "x", "tool_calls": []}]}, {}),
    ("parts", "/v1/chat/completions", {"model": "tiny", "messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, {}),
    ("special", "/v1/chat/completions", {"model": "tiny", "messages": [{"role": "user", "content": "a</s>b"}]}, {}),
    ("prompt_type", "/v1/completions", {"model": "tiny", "prompt": ["a", "b"]}, {}),
    ("stop_long", "/v1/completions", {"model": "tiny", "prompt": "hi", "stop": "x" * 300}, {}),
    ("stop_many", "/v1/completions", {"model": "tiny", "prompt": "hi", "stop": ["a", "b", "c", "d", "e"]}, {}),
    ("stop_empty", "/v1/completions", {"model": "tiny", "prompt": "hi", "stop": [""]}, {}),
    ("too_long", "/v1/completions", {"model": "tiny", "prompt": BIG}, {}),
    ("chat_too_long", "/v1/chat/completions", {"model": "tiny", "messages": [{"role": "user", "content": BIG}]}, {}),
    ("body_over_limit", "/v1/completions", b'{"model":"tiny","prompt":"' + b"a" * (9 << 20) + b'"}', {}),
]

EXPECTED = {
    'bad_json': (400, {"error": {"message": "We could not parse the JSON body of your request: string or '}' expected near end of file", "type": "invalid_request_error", "param": None, "code": None}}),
    'not_object': (400, {"error": {"message": "We could not parse the JSON body of your request: not an object", "type": "invalid_request_error", "param": None, "code": None}}),
    'dup_key': (400, {"error": {"message": "We could not parse the JSON body of your request: duplicate object key near '\"model\"'", "type": "invalid_request_error", "param": None, "code": None}}),
    'no_model': (400, {"error": {"message": "'model' is required (a string)", "type": "invalid_request_error", "param": "model", "code": None}}),
    'unknown_model': (404, {"error": {"message": "The model 'nope' does not exist", "type": "not_found_error", "param": "model", "code": "model_not_found"}}),
    'unrecognized': (400, {"error": {"message": "Unrecognized request argument supplied: bogus", "type": "invalid_request_error", "param": "bogus", "code": None}}),
    'stream_options': (400, {"error": {"message": "'stream_options' is only allowed when 'stream' is true", "type": "invalid_request_error", "param": "stream_options", "code": None}}),
    'temperature': (400, {"error": {"message": "'temperature' is 3; it must be in [0, 2]", "type": "invalid_request_error", "param": "temperature", "code": None}}),
    'n2': (400, {"error": {"message": "'n' must be an integer in [1, 8]: each choice holds a sequence slot of the engine", "type": "invalid_request_error", "param": "n", "code": None}}),
    'max_tokens0': (400, {"error": {"message": "'max_tokens' must be an integer of at least 1", "type": "invalid_request_error", "param": "max_tokens", "code": None}}),
    'priority': (400, {"error": {"message": "X-Priority must be urgent, normal or batch", "type": "invalid_request_error", "param": None, "code": None}}),
    'timeout_hdr': (400, {"error": {"message": "X-Request-Timeout-Ms must be a positive integer", "type": "invalid_request_error", "param": None, "code": None}}),
    'body_before_header': (400, {"error": {"message": "'n' must be an integer in [1, 8]: each choice holds a sequence slot of the engine", "type": "invalid_request_error", "param": "n", "code": None}}),
    'header_before_prompt': (400, {"error": {"message": "X-Priority must be urgent, normal or batch", "type": "invalid_request_error", "param": None, "code": None}}),
    'messages_empty': (400, {"error": {"message": "'messages' must be a non-empty list", "type": "invalid_request_error", "param": "messages", "code": None}}),
    'message_not_object': (400, {"error": {"message": "'messages[0]' must be an object", "type": "invalid_request_error", "param": "messages[0]", "code": None}}),
    'role': (400, {"error": {"message": "'messages[0].role' must be system, developer, user, assistant or tool", "type": "invalid_request_error", "param": "messages[0].role", "code": None}}),
    'message_key': (400, {"error": {"message": "'messages[0].tool_calls' is not supported (only an assistant message carries tool_calls)", "type": "invalid_request_error", "param": "messages[0].tool_calls", "code": None}}),
    'parts': (400, {"error": {"message": "'messages[0].content' parts must be {\"type\": \"text\", \"text\": ...} (no images or audio)", "type": "invalid_request_error", "param": "messages[0].content", "code": None}}),
    'special': (400, {"error": {"message": "message content contains the special token '</s>', which this server refuses (the tokenizer would read it as a control token)", "type": "invalid_request_error", "param": "messages[0].content", "code": None}}),
    'prompt_type': (400, {"error": {"message": "'prompt' must be a string (or a list of one string)", "type": "invalid_request_error", "param": "prompt", "code": None}}),
    'stop_long': (400, {"error": {"message": "each stop string must be 1 to 256 bytes", "type": "invalid_request_error", "param": "stop", "code": None}}),
    'stop_many': (400, {"error": {"message": "'stop' must be a string or a list of at most 4 strings", "type": "invalid_request_error", "param": "stop", "code": None}}),
    'stop_empty': (400, {"error": {"message": "each stop string must be 1 to 256 bytes", "type": "invalid_request_error", "param": "stop", "code": None}}),
    'too_long': (400, {"error": {"message": "the prompt is longer than the model's context of 2048 tokens", "type": "invalid_request_error", "param": "prompt", "code": "context_length_exceeded"}}),
    'chat_too_long': (400, {"error": {"message": "the prompt is longer than the model's context of 2048 tokens", "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}}),
    'body_over_limit': (413, {"error": {"message": "request body of 9437212 bytes is over the /v1 limit of 8388608", "type": "invalid_request_error", "param": None, "code": None}}),
}


@pytest.fixture(scope="module")
def worker(tmp_path_factory):
    repo = tmp_path_factory.mktemp("offloop")
    write_tiny_llm(repo / "tiny" / "1")
    # the same model with a context of 131072: a 3 MB prompt (about 90k of Llama-2's longest
    # tokens) is not certain to be over it until tokenized, so the tokenizer runs in full there
    # (on "tiny" such a prompt is refused before it is tokenized)
    write_tiny_llm(repo / "big" / "1", context=131072)
    w = start_worker(repo, tmp_path_factory.mktemp("offloop-w"), env={"EXECUTION_MODE": "cpu", "TIERSERVE_LOG_LEVEL": "debug"})
    yield w
    assert w.stop() == 0, w.log_text()[-4000:]


def send(w, path, body, headers=None, timeout=60):
    """One JSON POST on a fresh connection: (status, raw body)."""
    code, _, data = post(w, path, body, headers, timeout)
    return code, data


def test_every_refusal_unchanged(worker):
    for name, path, body, headers in CASES:
        code, data = send(worker, path, body, headers)
        assert (code, json.loads(data)) == EXPECTED[name], name
    # and a good request still generates
    code, data = send(worker, "/v1/completions", {"model": "tiny", "prompt": "Hello", "max_tokens": 4,
                                                    "temperature": 0})
    assert code == 200, data
    assert json.loads(data)["usage"]["completion_tokens"] == 4


def raw_post(w, path, body):
    """One request on a fresh socket with Connection: close; the reply's bytes, read to EOF."""
    s = socket.create_connection((w.host, w.port), timeout=120)
    s.sendall(b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nConnection: close\r\n"
              b"Content-Length: %d\r\n\r\n" % (path.encode(), len(body)) + body)
    sent = time.monotonic()
    data = read_to_close(s)
    return sent, time.monotonic(), data


def big_prompt(mb):
    text = "hello world, how are you " * (mb * 1024 * 1024 // 25)
    return json.dumps({"model": "big", "prompt": text, "max_tokens": 1}).encode()


def test_health_answers_while_a_big_prompt_is_tokenized(worker):
    """A ~3 MB prompt takes the tokenizer a good fraction of a second or more; health probes on
    another connection, one after another for as long as the big request runs, must each come
    back in a small part of that time. On the loop, one probe waited for the whole encoding."""
    body = big_prompt(3)
    result = {}
    done = threading.Event()

    def big():
        result["sent"], result["done"], result["reply"] = raw_post(worker, "/v1/completions", body)
        done.set()

    probe = http.client.HTTPConnection(worker.host, worker.port, timeout=120)
    t = threading.Thread(target=big)
    t.start()
    spans = []
    deadline = time.monotonic() + 120
    while not done.is_set() and time.monotonic() < deadline:
        t0 = time.monotonic()
        probe.request("GET", "/v2/health/live")
        r = probe.getresponse()
        r.read()
        assert r.status == 200
        spans.append((t0, time.monotonic()))
        time.sleep(0.002)
    t.join(120)
    probe.close()
    # every probe that was out while the big request was handled
    rtts = [b - a for a, b in spans if b > result["sent"] and a < result["done"]]
    reply = result["reply"]
    assert reply.startswith(b"HTTP/1.1 400 "), reply[:300]
    assert b"the prompt is longer than the model's context of 131072 tokens" in reply
    busy = result["done"] - result["sent"]
    assert rtts, "no probe went out while the big request was handled"
    # relative, not absolute: on a loaded machine both grow together
    assert max(rtts) < busy / 4, (max(rtts), busy, len(rtts))


def test_client_gone_while_waiting_for_the_tokenizer_leaves_no_sequence(worker):
    """Two big prompts keep both decode threads busy; a small request that asks for 1000 tokens
    waits behind them and its client hangs up. It is dropped (a debug line) and nothing of it
    runs: the gauges stay 0 and no generation token is added. (On the loop, the small request
    was not even read until the big ones were tokenized.)"""
    gen = metric(worker, "tierserve_generation_tokens_total", ['model="tiny"']) or 0
    dropped = worker.log_text().count("client went away while its /v1 request was prepared")
    body = big_prompt(3)
    sent = []

    def big():
        s = socket.create_connection((worker.host, worker.port), timeout=120)
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Connection: close\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
        sent.append(1)
        while s.recv(65536):
            pass
        s.close()

    bigs = [threading.Thread(target=big) for _ in range(2)]
    for t in bigs:
        t.start()
    deadline = time.monotonic() + 60
    while len(sent) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.2)
    small = json.dumps({"model": "tiny", "prompt": "Hello", "max_tokens": 1000, "temperature": 0}).encode()
    s = socket.create_connection((worker.host, worker.port), timeout=60)
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n" % len(small) + small)
    time.sleep(0.2)  # handed to the handler (a request whose client is gone before is dropped unseen)
    s.close()
    for t in bigs:
        t.join(120)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and worker.log_text().count(
            "client went away while its /v1 request was prepared") == dropped:
        time.sleep(0.05)
    assert worker.log_text().count("client went away while its /v1 request was prepared") == dropped + 1
    time.sleep(0.5)
    assert metric(worker, "tierserve_sequences", ['model="tiny"', 'state="running"']) == 0
    assert metric(worker, "tierserve_sequences", ['model="tiny"', 'state="waiting"']) == 0
    assert (metric(worker, "tierserve_generation_tokens_total", ['model="tiny"']) or 0) == gen
