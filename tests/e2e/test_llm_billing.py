"""What the router bills a tenant for /v1 work, against a real worker (issue 19, billing gaps):

- a non-stream reply far over the 1 MiB the router would read for its `usage` (logprobs with
  20 alternatives per token) is billed the worker's exact prompt and completion tokens: the
  worker reports them in its head (Tierserve-Usage), the body is never parsed to bill it;
- a stream whose client leaves after its first chunk is billed what the worker spent on it:
  its whole prompt (as the worker tokenized it), every token made, and the compute, which
  the router asks of the worker (GET /v1/accounting/{key}, with the worker token) once the
  worker has let the sequence go, since nothing comes back on the connection it closed.

Two tenants with API keys: every number lands on the one whose key was used.
"""
import json
import socket

import pytest

from conftest import start_worker
import helpers
from helpers import metric, wait_for
from test_llm_api import llm_repo, read_until  # noqa: F401 (llm_repo: a fixture)
from test_router_v1_acct import USD_PER_HOUR, usage_router  # a dollar per compute second

WORKER_TOKEN = "worker-token-19"
KEYS = {"acme": "acme-key-123", "beta": "beta-key-456"}


@pytest.fixture(scope="module")
def fleet(llm_repo, tmp_path_factory):  # noqa: F811
    """One worker behind a token, one slot, serving `chat` as `tiny`, in a usage-priced pool;
    a long deadline, for the sanitizer build's slower generation."""
    tmp = tmp_path_factory.mktemp("billing")
    w = start_worker(llm_repo[0], tmp, env={"EXECUTION_MODE": "cpu", "TIERSERVE_LLM_MAX_SEQUENCES": "1",
                                            "TIERSERVE_AUTH_TOKEN": WORKER_TOKEN})
    tenants = "".join(f"  - {{name: {n}, api_key: {k}}}\n" for n, k in KEYS.items())
    # admin_open: the test reads /metrics without a token; the billing, not the admin guard, is under test
    r = usage_router(tmp, w, f"worker_token: {WORKER_TOKEN}\nadmin_open: true\ndeadline_ms: {{normal: 600000}}\n"
                             f"tenants:\n{tenants}")
    yield w, r
    assert r.stop() == 0
    assert w.stop() == 0, w.log_text()[-4000:]


def billed(r, tenant):
    """(prompt tokens, completion tokens, compute seconds, usd) billed to tenant in pool llm."""
    t = [metric(r, "tierrouter_tenant_tokens_total", pool="llm", tenant=tenant, priority="normal", kind=k) or 0
         for k in ("prompt", "completion")]
    s = metric(r, "tierrouter_compute_seconds_total", pool="llm", tenant=tenant, priority="normal") or 0.0
    usd = metric(r, "tierrouter_cost_usd_total", pool="llm", tenant=tenant, priority="normal") or 0.0
    return t[0], t[1], s, usd


def pool_tokens(r):
    return tuple(metric(r, "tierrouter_tokens_total", pool="llm", priority="normal", kind=k)
                 for k in ("prompt", "completion"))


def post(r, path, body, tenant):
    """One JSON POST with the tenant's API key: (status, headers, raw body)."""
    return helpers.post(r, path, body, {"Authorization": f"Bearer {KEYS[tenant]}"}, timeout=120)


def test_a_reply_over_a_mebibyte_is_billed_its_exact_tokens(fleet):
    w, r = fleet
    body = {"model": "chat", "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 1400,
            "temperature": 0, "logprobs": True, "top_logprobs": 20}
    before, beta0, pool0 = billed(r, "acme"), billed(r, "beta"), pool_tokens(r)
    code, h, data = post(r, "/v1/chat/completions", body, "acme")
    assert code == 200, data[:500]
    assert len(data) > 1 << 20, len(data)  # past what the router would read for its usage
    usage = json.loads(data)["usage"]
    assert usage["completion_tokens"] > 700, usage
    after = billed(r, "acme")
    assert pool_tokens(r) == (pool0[0] + usage["prompt_tokens"], pool0[1] + usage["completion_tokens"])
    assert (after[0] - before[0], after[1] - before[1]) == (usage["prompt_tokens"], usage["completion_tokens"])
    # the compute the worker reported, at the pool's price; nothing on the other tenant
    ms = float(h["tierserve-compute-ms"])
    assert after[2] - before[2] == pytest.approx(ms / 1e3, rel=1e-6) and ms > 0
    assert after[3] - before[3] == pytest.approx(ms / 1e3 * USD_PER_HOUR / 3600, rel=1e-6)
    assert billed(r, "beta") == beta0


def test_a_stream_left_after_its_first_chunk_is_billed_its_prompt_and_compute(fleet):
    w, r = fleet
    prompt = "hello " * 500
    # what the worker makes of the prompt: a non-stream run's usage
    code, _, data = post(r, "/v1/completions", {"model": "chat", "prompt": prompt, "max_tokens": 1}, "beta")
    assert code == 200, data[:500]
    n_prompt = json.loads(data)["usage"]["prompt_tokens"]
    assert n_prompt > 900
    before, beta0, pool0 = billed(r, "acme"), billed(r, "beta"), pool_tokens(r)
    reports0 = metric(r, "tierrouter_v1_cancel_reports_total", source="worker")
    body = json.dumps({"model": "chat", "prompt": prompt, "max_tokens": 1000, "temperature": 0,
                       "stream": True}).encode()
    s = socket.create_connection(("127.0.0.1", r.port), timeout=60)
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Authorization: Bearer " + KEYS["acme"].encode() + b"\r\n"
              b"Content-Length: %d\r\n\r\n" % len(body) + body)
    read_until(s, b'"text":')  # the prefill is done and the first token went out
    s.close()
    # the router asks the worker once the sequence has gone; then the numbers are in
    assert wait_for(lambda: pool_tokens(r)[0] - pool0[0], n_prompt) == n_prompt
    assert metric(r, "tierrouter_v1_cancel_reports_total", source="worker") == reports0 + 1
    assert metric(r, "tierrouter_requests_total", pool="llm", priority="normal", outcome="cancelled") == 1
    after = billed(r, "acme")
    prompt_billed, made, compute_s = after[0] - before[0], after[1] - before[1], after[2] - before[2]
    assert prompt_billed == n_prompt
    # the tokens its sequence made before the cancel (a handful; all 1000 only if the worker
    # finished before the router's close reached it, which is billed the same way)
    assert 1 <= made <= 1000, made
    assert compute_s > 0
    assert after[3] - before[3] == pytest.approx(compute_s * USD_PER_HOUR / 3600, rel=1e-6)
    assert billed(r, "beta") == beta0


def test_the_accounting_endpoint_takes_the_worker_token_and_answers_by_key(fleet):
    w, r = fleet
    code, _, body = w.http("GET", "/v1/accounting/0123456789abcdef-1")
    assert code == 401, body
    auth = {"Authorization": f"Bearer {WORKER_TOKEN}"}
    code, _, body = w.http("GET", "/v1/accounting/0123456789abcdef-1", headers=auth)
    assert code == 404 and json.loads(body)["error"]["code"] == "accounting_not_found", body
    for bad in ("bad!key", "k" * 65):  # not a key the router makes: nothing, whatever was sent
        code, _, body = w.http("GET", f"/v1/accounting/{bad}", headers=auth)
        assert code == 404, body
    code, _, body = w.http("POST", "/v1/accounting/0123456789abcdef-1", b"", headers=auth)
    assert code == 405, body
    # a request with a key (what the router sends) leaves its usage under it, as its head says
    req = json.dumps({"model": "tiny", "prompt": "Hello world", "max_tokens": 5, "temperature": 0}).encode()
    code, h, body = w.http("POST", "/v1/completions", req, headers={
        **auth, "Content-Type": "application/json", "Tierserve-Accounting": "1",
        "Tierserve-Accounting-Key": "direct-key_1.x"})
    assert code == 200, body
    usage = json.loads(body)["usage"]
    ms = h["Tierserve-Compute-Ms"]
    assert h["Tierserve-Usage"] == (f"prompt_tokens={usage['prompt_tokens']} "
                                    f"completion_tokens={usage['completion_tokens']} compute_ms={ms} "
                                    f"cached_tokens={usage['prompt_tokens_details']['cached_tokens']}")
    code, _, body = w.http("GET", "/v1/accounting/direct-key_1.x", headers=auth)
    assert code == 200, body
    assert json.loads(body) == {"key": "direct-key_1.x", "state": "done", "prompt_tokens": usage["prompt_tokens"],
                                "completion_tokens": usage["completion_tokens"], "compute_ms": float(ms)}
