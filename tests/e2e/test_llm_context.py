"""A prompt over the model's context gets one answer, whichever check finds it: 400,
`invalid_request_error`, code `context_length_exceeded`, param `prompt` (completions) or
`messages` (chat), as OpenAI and vLLM answer it, so clients that branch on the code work.
The tokenizer's early refusal (the prompt passes the context while it is encoded) names the
context; a prompt of exactly the context's tokens (encoded in full, no room left for an
answer) names its count too. Through the router the worker's error passes unchanged.
http.client, no retries."""

import pytest

from conftest import start_worker
from helpers import post_json
from llm_fixture import write_tiny_llm
from test_router import Router, pools_config

CONTEXT = 2048


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    repo = tmp_path_factory.mktemp("ctx")
    write_tiny_llm(repo / "tiny" / "1")
    tmp = tmp_path_factory.mktemp("ctx-w")
    w = start_worker(repo, tmp, env={"EXECUTION_MODE": "cpu"})
    router = Router(pools_config([("cpu", "cpu", True, [w.port], None)]), tmp)
    router.wait_healthy(1)
    yield w, router
    assert w.stop() == 0, w.log_text()[-4000:]


def post(host, port, path, body):
    """One JSON POST to host:port: (status, the reply's JSON)."""
    code, _, out = post_json((host, port), path, body)
    return code, out


def words(k):
    return " ".join(["the"] * k)


def test_hello_is_one_token(stack):
    """The prompts below count on "the the ..." being BOS plus one token per word."""
    w, _ = stack
    code, out = post(w.host, w.port, "/v1/completions", {"model": "tiny", "prompt": words(5), "max_tokens": 1})
    assert code == 200 and out["usage"]["prompt_tokens"] == 6, out


def test_the_encoder_refusal(stack):
    w, _ = stack
    code, out = post(w.host, w.port, "/v1/completions", {"model": "tiny", "prompt": words(2100)})
    assert (code, out) == (400, {"error": {
        "message": f"the prompt is longer than the model's context of {CONTEXT} tokens",
        "type": "invalid_request_error", "param": "prompt", "code": "context_length_exceeded"}})
    code, out = post(w.host, w.port, "/v1/chat/completions", {
        "model": "tiny", "messages": [{"role": "user", "content": words(2100)}]})
    assert code == 400 and out["error"]["param"] == "messages", out
    assert out["error"]["code"] == "context_length_exceeded" and out["error"]["type"] == "invalid_request_error"


def test_a_prompt_of_exactly_the_context(stack):
    """BOS + 2047 words: encoded in full (it fits the tokenizer's limit), then refused as it
    leaves no room for an answer; the message names the count."""
    w, _ = stack
    code, out = post(w.host, w.port, "/v1/completions", {"model": "tiny", "prompt": words(CONTEXT - 1)})
    assert (code, out) == (400, {"error": {
        "message": f"the prompt is {CONTEXT} tokens; the model's context is {CONTEXT} tokens, leaving no room "
                   "for an answer",
        "type": "invalid_request_error", "param": "prompt", "code": "context_length_exceeded"}})
    # one token less still generates (cut to the one token left)
    code, out = post(w.host, w.port, "/v1/completions", {"model": "tiny", "prompt": words(CONTEXT - 2)})
    # (cached_tokens: whatever earlier requests of this worker left in its prefix cache)
    details = out.get("usage", {}).pop("prompt_tokens_details", None)
    assert code == 200 and out["usage"] == {"prompt_tokens": CONTEXT - 1, "completion_tokens": 1,
                                            "total_tokens": CONTEXT}, out
    assert 0 <= details["cached_tokens"] < CONTEXT - 1, details


def test_through_the_router(stack):
    w, router = stack
    for path, body in [("/v1/completions", {"model": "tiny", "prompt": words(2100)}),
                       ("/v1/completions", {"model": "tiny", "prompt": words(CONTEXT - 1)}),
                       ("/v1/chat/completions", {"model": "tiny",
                                                 "messages": [{"role": "user", "content": words(2100)}]})]:
        direct = post(w.host, w.port, path, body)
        assert direct[0] == 400 and direct[1]["error"]["code"] == "context_length_exceeded", direct
        assert post("127.0.0.1", router.port, path, body) == direct
