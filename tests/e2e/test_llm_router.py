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
  logprobs too, entry for entry.
"""
import http.client
import json
import subprocess
import sys

import pytest

from conftest import start_worker
from test_llm_api import LLM_DIR, MODELS, chat_body, llm_repo  # noqa: F401 (llm_repo: a fixture)
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
    c = http.client.HTTPConnection(host, port, timeout=60)
    c.request("POST", path, body=json.dumps(body).encode(), headers={"Content-Type": "application/json",
                                                                     **(headers or {})})
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, {k.lower(): v for k, v in r.getheaders()}, json.loads(data)


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
                            "type": "invalid_request_error"}
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
