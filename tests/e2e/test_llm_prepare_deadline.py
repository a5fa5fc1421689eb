"""A /v1 request's deadline and work are bounded while it is prepared (parsed, rendered and
tokenized on a decode thread): the deadline runs from arrival, so a prompt that takes seconds
to tokenize gets its 504 when the deadline passes, not when the tokenizer is done, and the
decode thread stops early; a prompt certain to be over the model's context is refused before
it is tokenized in full.

Two versions of the tiny decoder with the same weights and tokenizer (Llama-2's: the whole
prompt is one BPE piece): "tiny" with a context of 2048 and "big" with 131072, where a prompt
of a few MB of letters is not certain to be over the context until it is tokenized. Each test
measures a full tokenization on "big" and compares against it (ratios with a wide margin, not
absolute times, except the brief's 1.5 s for a 300 ms deadline). Raw sockets, no retries."""
import json
import random
import re
import socket
import time

import pytest

from conftest import SANITIZED, start_worker
from llm_fixture import write_tiny_llm
from rawhttp import read_to_close

# Llama-2's longest token is 48 bytes: a prompt under 48 * 131072 bytes is not refused by its
# length on "big", so it is tokenized in full there (about 0.5 s per MB here, more under ASan).
PROMPT_BYTES = (1 if SANITIZED else 5) << 20
DROPPED = "/v1 request timed out while it was prepared; dropped"


@pytest.fixture(scope="module")
def worker(tmp_path_factory):
    repo = tmp_path_factory.mktemp("prepdl")
    write_tiny_llm(repo / "tiny" / "1")
    write_tiny_llm(repo / "big" / "1", context=131072)
    w = start_worker(repo, tmp_path_factory.mktemp("prepdl-w"),
                     env={"EXECUTION_MODE": "cpu", "TIERSERVE_LOG_LEVEL": "debug"})
    yield w
    assert w.stop() == 0, w.log_text()[-4000:]


@pytest.fixture(scope="module")
def letters():
    rng = random.Random(11)
    return "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(PROMPT_BYTES))


def exchange(w, path, body, headers=None):
    """One request on a fresh socket (Connection: close); (status, headers, body bytes, seconds
    from the last byte sent to the reply's end)."""
    data = json.dumps(body).encode()
    head = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
    s = socket.create_connection((w.host, w.port), timeout=120)
    s.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nConnection: close\r\n"
              f"{head}Content-Length: {len(data)}\r\n\r\n".encode() + data)
    sent = time.monotonic()
    raw = read_to_close(s)
    took = time.monotonic() - sent
    head, _, payload = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ")[1])
    hdrs = {k.lower(): v.strip() for k, _, v in (l.partition(":") for l in lines[1:])}
    assert hdrs.get("content-length") == str(len(payload)), (hdrs, payload[:200])
    return status, hdrs, payload, took


def outcome(w, model, name):
    _, _, body = w.http("GET", "/metrics")
    want = f'tierserve_requests_total{{model="{model}",version="1",outcome="{name}"}} '
    for line in body.decode().splitlines():
        if line.startswith(want):
            return int(float(line.rsplit(" ", 1)[1]))
    return 0


def full_tokenization(w, letters):
    """Seconds "big" takes to parse and tokenize the prompt in full (then refuse it: it is
    over even 131072 tokens, so nothing is generated)."""
    code, _, body, took = exchange(w, "/v1/completions", {"model": "big", "prompt": letters, "max_tokens": 1})
    assert code == 400, body[:300]
    assert json.loads(body)["error"]["message"] == "the prompt is longer than the model's context of 131072 tokens"
    return took


def greedy(w, model):
    code, _, body, _ = exchange(w, "/v1/completions", {"model": model, "prompt": "Hello", "max_tokens": 4,
                                                       "temperature": 0})
    assert code == 200, body[:300]
    out = json.loads(body)
    assert out["usage"] == {"prompt_tokens": 2, "completion_tokens": 4, "total_tokens": 6,
                            "prompt_tokens_details": {"cached_tokens": 0}}, out
    return out["choices"][0]["text"]


def test_deadline_passes_while_the_prompt_is_tokenized(worker, letters):
    """X-Request-Timeout-Ms: 300 (or an eighth of the measured full tokenization, when that is
    shorter: on a machine fast enough to tokenize the prompt in under 2.4 s a 300 ms deadline
    is no longer "well inside" it) on a prompt whose tokenization takes seconds: the 504 comes
    within 1.5 s and well inside the full tokenization's time (the old worker armed the timer
    only after the preparation, so its 504 came after all of it), counts as a timeout, and the
    decode thread gives up early (its drop line comes well before a full tokenization could
    end). A chat request that asked for a stream gets the same plain 504 (no stream has
    started). Then the worker serves both models as before."""
    full = full_tokenization(worker, letters)
    deadline_ms = max(10, min(300, int(full * 1000 / 8)))
    cases = [("/v1/completions", {"model": "big", "prompt": letters, "max_tokens": 1}),
             ("/v1/chat/completions", {"model": "big", "stream": True,
                                       "messages": [{"role": "user", "content": letters}]})]
    for path, body in cases:
        timeouts = outcome(worker, "big", "timeout")
        dropped = worker.log_text().count(DROPPED)
        t0 = time.monotonic()
        code, hdrs, payload, took = exchange(worker, path, body, {"X-Request-Timeout-Ms": str(deadline_ms)})
        assert code == 504, payload[:300]
        assert hdrs["content-type"] == "application/json"
        err = json.loads(payload)["error"]
        assert re.fullmatch(r"request timed out after \d+ ms \(before its first token\)", err["message"]), err
        assert (err["type"], err["param"], err["code"]) == ("server_error", None, "timeout")
        assert took < 1.5 and took < full / 2, (path, took, full)
        # the decode thread stops within a few thousand BPE steps and hands the request back
        deadline = time.monotonic() + 60
        while worker.log_text().count(DROPPED) == dropped and time.monotonic() < deadline:
            time.sleep(0.01)
        back = time.monotonic() - t0
        assert worker.log_text().count(DROPPED) == dropped + 1
        print(f"{path}: full tokenization {full:.2f} s, deadline {deadline_ms} ms, 504 after {took:.2f} s, "
              f"decode thread back after {back:.2f} s")
        assert back < full / 2, (path, back, full)
        assert outcome(worker, "big", "timeout") == timeouts + 1
    assert greedy(worker, "big") == greedy(worker, "tiny")


def test_prompt_over_the_context_is_refused_before_it_is_tokenized(worker, letters):
    """The same multi-MB prompt on "tiny" (context 2048): the same refusal as any prompt over
    the context (400 context_length_exceeded), naming the context, in a small part of the time "big" takes to tokenize it in full (the old worker
    tokenized it in full here too: a ratio near 1). Its fewest possible tokens (bytes over the
    longest token's 48) are already far over 2048."""
    full = full_tokenization(worker, letters)
    code, _, body, took = exchange(worker, "/v1/completions", {"model": "tiny", "prompt": letters})
    assert code == 400, body[:300]
    assert json.loads(body) == {"error": {
        "message": "the prompt is longer than the model's context of 2048 tokens",
        "type": "invalid_request_error", "param": "prompt", "code": "context_length_exceeded"}}
    print(f"full tokenization {full:.2f} s, the 400 on tiny after {took:.3f} s")
    assert took < full / 5, (took, full)
    code, _, body, took = exchange(worker, "/v1/chat/completions", {
        "model": "tiny", "messages": [{"role": "user", "content": letters}]})
    assert code == 400, body[:300]
    assert json.loads(body)["error"]["param"] == "messages"
    assert took < full / 5, (took, full)
    # a prompt just over the context, too short for the shortcut, is refused as before
    code, _, body, _ = exchange(worker, "/v1/completions", {"model": "tiny", "prompt": letters[:12000]})
    assert code == 400, body[:300]
    assert json.loads(body)["error"]["message"] == "the prompt is longer than the model's context of 2048 tokens"
    assert greedy(worker, "tiny")
