"""LLM traffic through the real router to real workers: the official openai npm SDK, unchanged,
with the router as its base URL, streaming and not.

The fleet: a "GPU" pool (a CPU-tier worker behind min_tier cpu: this machine has no GPU) that
serves the public name `chat` with the FP16 twin of the tiny test decoder, and a CPU pool that
may take sensitive data and serves `chat` with the FP32 model, as the hybrid-deployment
guidance runs an FP16 model on GPUs and its FP32/INT8 twin on CPUs under one name.

What is held:
- the SDK's chat and completions calls, whole and streamed, work through the router; a
  stream's text equals the whole reply's; an unknown model is the SDK's APIError 404
  `model_not_found` (answered by the router), `n: 2` the worker's 400 naming `n`; the model
  list is the router's public name;
- the router picks the pool and maps the name: public traffic is served by the GPU pool's
  FP16 model, sensitive traffic by the CPU pool's FP32 model, and the FP32 answer through the
  router equals the worker's own answer byte for byte in its text; with penalties and
  logprobs too, entry for entry;
- a one-slot worker behind a usage-priced pool (the `acct` fleet): a client that leaves
  mid-stream cancels its generation on the worker (slot and KV cache freed at once, counted
  `cancelled` by the router); the router bills each /v1 request the worker's exact usage and
  compute time (a non-stream reply's Tierserve-Compute-Ms, a stream's `: tierserve-usage`
  line, which the client never sees); a client's deadline is not forwarded to the worker.
"""
import json
import re
import socket
import subprocess
import sys

import pytest

from conftest import start_worker
from helpers import metric, post_json, sse_events, wait_for
from rawhttp import dechunk, read_to_close
from test_llm_api import (LLM_DIR, MODELS, chat_body, cmpl, expected_greedy, llm_repo,  # noqa: F401 (llm_repo: a fixture)
                          node_decode, raw_request, read_until)
from test_router import Router, pools_config


@pytest.fixture(scope="module")
def fleet(llm_repo, tmp_path_factory):  # noqa: F811
    repo = llm_repo[0]
    d16 = repo / "tiny16" / "1"
    if not d16.exists():
        d16.mkdir(parents=True)
        r = subprocess.run([sys.executable, str(MODELS / "gen_llm_model.py"), str(d16), "--fp16"],
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        (d16 / "tokenizer_config.json").write_text((repo / "tiny" / "1" / "tokenizer_config.json").read_text())
    tmp = tmp_path_factory.mktemp("llmrouter")
    gpu = start_worker(repo, tmp, env={"EXECUTION_MODE": "cpu"})
    cpu = start_worker(repo, tmp, env={"EXECUTION_MODE": "cpu"})
    cfg = pools_config([("gpu", "gpu", False, [gpu.port], [("chat", "tiny16")], "cpu"),
                        ("cpu", "cpu", True, [cpu.port], [("chat", "tiny")])])
    router = Router(cfg, tmp)
    yield gpu, cpu, router
    for w in (gpu, cpu):
        assert w.stop() == 0, w.log_text()[-4000:]


def post(host, port, path, body, headers=None):
    """One JSON POST to host:port: (status, headers, the reply's JSON)."""
    return post_json((host, port), path, body, headers)


def test_openai_sdk_through_the_router(fleet):
    gpu, cpu, router = fleet
    r = subprocess.run(["node", str(LLM_DIR / "openai_sdk.mjs"), f"http://{router.url}/v1", "chat"],
                       capture_output=True, text=True, timeout=120, cwd=LLM_DIR)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["chat"]["object"] == "chat.completion" and out["chat"]["role"] == "assistant"
    assert out["chat"]["finish_reason"] in ("stop", "length") and out["chat"]["content"]
    assert out["chat_stream"]["content"] == out["chat"]["content"]
    assert out["chat_stream"]["usage"]["completion_tokens"] == out["chat"]["usage"]["completion_tokens"]
    assert out["completion"]["text"] == out["completion_stream"]["text"]
    assert out["error"] == {"is_api_error": True, "status": 404, "code": "model_not_found",
                            "type": "not_found_error"}
    assert out["error_n"] == {"is_api_error": True, "status": 400, "param": "n"}
    assert out["models"] == ["chat"]


def test_pool_and_model_twin_by_data_class(fleet):
    gpu, cpu, router = fleet
    host, port = router.url.split(":")
    code, h, public = post(host, int(port), "/v1/chat/completions", chat_body(model="chat"))
    assert code == 200, public
    assert h["x-tierrouter-pool"] == "gpu" and public["model"] == "tiny16", (h, public)
    code, h, sens = post(host, int(port), "/v1/chat/completions", chat_body(model="chat"),
                         {"X-Data-Class": "sensitive"})
    assert code == 200, sens
    assert h["x-tierrouter-pool"] == "cpu" and sens["model"] == "tiny", (h, sens)
    code, _, direct = post(cpu.host, cpu.port, "/v1/chat/completions", chat_body(model="tiny"))
    assert code == 200, direct
    assert sens["choices"][0]["message"]["content"] == direct["choices"][0]["message"]["content"]


def test_logprobs_and_penalties_pass_through_unchanged(fleet):
    """The router forwards the body with only the model renamed: the CPU pool's answer with
    logprobs and penalties is the worker's own, entry for entry."""
    gpu, cpu, router = fleet
    host, port = router.url.split(":")
    extra = {"logprobs": True, "top_logprobs": 3, "frequency_penalty": 1.5, "presence_penalty": 0.5}
    code, h, via = post(host, int(port), "/v1/chat/completions", {**chat_body(model="chat"), **extra},
                        {"X-Data-Class": "sensitive"})
    assert code == 200 and h["x-tierrouter-pool"] == "cpu", (h, via)
    code, _, direct = post(cpu.host, cpu.port, "/v1/chat/completions", {**chat_body(model="tiny"), **extra})
    assert code == 200, direct
    got, want = via["choices"][0], direct["choices"][0]
    assert got["message"]["content"] == want["message"]["content"]
    assert got["logprobs"] == want["logprobs"] and len(got["logprobs"]["content"]) > 0
    assert all(len(e["top_logprobs"]) == 3 for e in got["logprobs"]["content"])
    code, _, bad = post(host, int(port), "/v1/chat/completions", {**chat_body(model="chat"), "top_logprobs": 3})
    assert code == 400 and bad["error"]["param"] == "top_logprobs", bad


# ---- one slot, a usage-priced pool: cancellation and accounting -----------------------------

USD_PER_HOUR = 3600.0  # one dollar per compute second: the cost is the compute time in seconds


@pytest.fixture(scope="module")
def acct(llm_repo, tmp_path_factory):  # noqa: F811
    """A worker with one slot behind a pool billed by usage (no price per token: every dollar
    is compute time), serving `chat` as `tiny`."""
    tmp = tmp_path_factory.mktemp("llmacct")
    w = start_worker(llm_repo[0], tmp, env={"EXECUTION_MODE": "cpu", "TIERSERVE_LLM_MAX_SEQUENCES": "1"})
    cfg = pools_config([("llm", "cpu", False, [w.port], [("chat", "tiny")])])
    cfg = cfg.replace("    models:\n", f"    cost: {{model: usage, usd_per_hour: {USD_PER_HOUR}}}\n    models:\n")
    router = Router(cfg, tmp)
    router.wait_healthy(1)
    yield w, router
    assert router.stop() == 0
    assert w.stop() == 0, w.log_text()[-4000:]


def worker_metric(w, name, labels=('model="tiny"',)):
    """A series of the worker's /metrics, by default the tiny model's."""
    return metric(w, name, labels)


def router_raw(router, path, body, extra=b""):
    s = socket.create_connection(("127.0.0.1", router.port), timeout=30)
    data = json.dumps(body).encode()
    s.sendall(b"POST " + path.encode() + b" HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" +
              extra + b"Content-Length: " + str(len(data)).encode() + b"\r\n\r\n" + data)
    return s


def test_disconnect_through_the_router_frees_the_slot(acct):
    """test_llm_api's test_disconnect_mid_stream_frees_the_slot, through the router: the client
    closes after the first chunk; the router closes its backend connection instead of reading
    the stream to its end, so the worker cancels the sequence before its next step."""
    w, router = acct
    running = ('model="tiny"', 'state="running"')
    assert wait_for(lambda: worker_metric(w, "tierserve_sequences", running), 0) == 0
    before = worker_metric(w, "tierserve_generation_tokens_total")
    s = router_raw(router, "/v1/completions", cmpl(model="chat", max_tokens=2000, stream=True))
    read_until(s, b'"text":')  # generating, and its first chunk went through the router
    assert worker_metric(w, "tierserve_sequences", running) == 1
    s.close()
    assert wait_for(lambda: worker_metric(w, "tierserve_sequences", running), 0) == 0
    assert worker_metric(w, "tierserve_kv_cache_bytes") == 0
    made = worker_metric(w, "tierserve_generation_tokens_total") - before
    # direct to the worker a handful more are made; read to its end by the router, all 2000
    assert made < 1000, made
    assert wait_for(lambda: metric(router, "tierrouter_requests_total", pool="llm", priority="normal",
                                          outcome="cancelled"), 1) == 1
    # the worker counted its client (the router's connection) gone, not a success
    assert wait_for(lambda: worker_metric(w, "tierserve_requests_total", ('model="tiny"', 'outcome="cancelled"')),
                    1) == 1


def held_back_stop(text_pieces, text):
    """A stop string made of the last two characters of one token's text and the first of the
    next one's: the worker holds the two back (they may start the stop string), and the token
    that completes it sends no text at all."""
    for i in range(2, len(text_pieces) - 1):
        a, b = text_pieces[i - 1], text_pieces[i]  # text after i and i+1 tokens
        if len(b) > len(a) and len(a) >= 3 and a[-1] != " " and a[-2] != " ":
            cand = a[-2:] + b[len(a)]
            if text.find(cand) == len(a) - 2:
                return cand
    return None


def stream_usage_direct(w, body):
    """The worker's own usage for body streamed (include_usage), and its content chunks."""
    s = raw_request(w, "/v1/completions", {**body, "model": "tiny", "stream": True,
                                            "stream_options": {"include_usage": True}}, b"Connection: close\r\n")
    head, _, rest = read_to_close(s).partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), head
    ev = sse_events(dechunk(rest))
    chunks = sum(1 for e in ev if e["choices"] and e["choices"][0]["text"])
    return ev[-1]["usage"], chunks


def router_tokens(router):
    return tuple(metric(router, "tierrouter_tokens_total", pool="llm", priority="normal", kind=k)
                 for k in ("prompt", "completion"))


def router_cost(router):
    return metric(router, "tierrouter_cost_usd_total", pool="llm", tenant="unknown", priority="normal") or 0.0


def test_exact_tokens_and_compute_cost_through_the_router(acct, llm_repo):  # noqa: F811
    """Streams without include_usage: the router bills the worker's exact usage (not one token
    per chunk, no prompt) and its compute time (the per-second price of a usage pool); the
    client never sees the worker's accounting line."""
    w, router = acct
    toks, text = expected_greedy(llm_repo[1])
    pieces = [node_decode(toks[:i]) for i in range(1, len(toks) + 1)]
    stop = held_back_stop(pieces, text)
    assert stop, pieces
    for body in (cmpl(stop=stop), cmpl(max_tokens=5)):
        usage, chunks = stream_usage_direct(w, body)
        if "stop" in body:  # text held back and the stop's last token without a chunk
            assert chunks < usage["completion_tokens"], (chunks, usage)
        tok0, cost0 = router_tokens(router), router_cost(router)
        s = router_raw(router, "/v1/completions", {**body, "model": "chat", "stream": True}, b"Connection: close\r\n")
        head, _, rest = read_to_close(s).partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200") and b"x-tierrouter-pool: llm" in head.lower(), head
        payload = dechunk(rest)
        # exactly the worker's framing: data lines and blank lines, no comment line
        assert b"tierserve-usage" not in payload and not re.search(rb"(?m)^:", payload), payload[-300:]
        ev = sse_events(payload)
        if "stop" in body:  # the answer itself is the worker's (no byte of the stop string)
            assert "".join(e["choices"][0]["text"] for e in ev) == text[:text.find(stop)]
        assert ev[-1]["choices"][0]["finish_reason"] == ("stop" if "stop" in body else "length")
        tok1 = wait_for(lambda: router_tokens(router), (tok0[0] + usage["prompt_tokens"],
                                                         tok0[1] + usage["completion_tokens"]), 5)
        assert tok1 == (tok0[0] + usage["prompt_tokens"], tok0[1] + usage["completion_tokens"]), (tok0, tok1, usage)
        assert router_cost(router) > cost0  # compute time at the pool's price per second


def test_nonstream_compute_cost_is_the_workers_report(acct):
    """A non-stream /v1 reply carries the worker's Tierserve-Compute-Ms (the router asked for
    it); the usage pool bills exactly that, and the reply's usage in tokens."""
    w, router = acct
    tok0, cost0 = router_tokens(router), router_cost(router)
    code, h, body = post("127.0.0.1", router.port, "/v1/completions", cmpl(model="chat", max_tokens=6))
    assert code == 200, body
    ms = float(h["tierserve-compute-ms"])
    assert ms > 0
    assert router_cost(router) - cost0 == pytest.approx(ms / 1e3 * USD_PER_HOUR / 3600, rel=1e-6, abs=1e-9)
    assert router_tokens(router) == (tok0[0] + body["usage"]["prompt_tokens"],
                                     tok0[1] + body["usage"]["completion_tokens"])


def test_worker_accounting_line_only_when_asked(acct):
    """Direct to the worker: the accounting line comes only with Tierserve-Accounting: 1, once,
    just before data: [DONE], with the usage's counts."""
    w, _ = acct
    body = cmpl(max_tokens=4, stream=True, stream_options={"include_usage": True})
    plain = dechunk(read_to_close(raw_request(w, "/v1/completions", body, b"Connection: close\r\n")).partition(
        b"\r\n\r\n")[2])
    assert b"tierserve-usage" not in plain
    s = raw_request(w, "/v1/completions", body, b"Connection: close\r\nTierserve-Accounting: 1\r\n")
    payload = dechunk(read_to_close(s).partition(b"\r\n\r\n")[2])
    m = re.search(rb"\n\n: tierserve-usage prompt_tokens=(\d+) completion_tokens=(\d+) compute_ms=(\d+\.\d{3}) "
                  rb"cached_tokens=(\d+)\n"
                  rb"data: \[DONE\]\n\n$", payload)
    assert m, payload[-300:]
    usage = sse_events(payload.replace(m.group(0)[2:], b"data: [DONE]\n\n"))[-1]["usage"]
    assert (int(m.group(1)), int(m.group(2))) == (usage["prompt_tokens"], usage["completion_tokens"])
    assert int(m.group(4)) == usage["prompt_tokens_details"]["cached_tokens"]
    assert float(m.group(3)) > 0
