"""Tool calls in the answer (issue 23, the API side): the worker names the call syntax each
model's template shows in /v2/status (`tool_call_format`), and with `tools` and
`tool_choice` "auto" it passes the answer's text through the tool-call parser
(src/tok/toolcall.c), which must leave an answer that holds no call exactly as it was, whole
and streamed. The random-weight tiny decoder never writes a call by itself (forcing one needs
the constrained decoder: `tool_choice` "required", not done yet), so the parser's calls are
tested by tests/unit/test_toolcall.c, every family's syntax split at every byte."""
import json
import shutil
import subprocess

import pytest

from conftest import start_worker
from helpers import model_status, post, post_json, sse_events
from llm_fixture import LLM_DIR, write_tiny_llm

TEMPLATES = {"llama31": "library/llama3.1:8b", "qwen25": "library/qwen2.5:0.5b"}
TOOLS = [{"type": "function", "function": {"name": "lookup_order", "parameters": {
    "type": "object", "properties": {"order_id": {"type": "integer"}}, "required": ["order_id"]}}}]
Q = [{"role": "user", "content": "Where is my order 42?"}]


@pytest.fixture(scope="module")
def worker(tmp_path_factory):
    r = subprocess.run(["node", "render_request.mjs", "templates", *TEMPLATES.values()], cwd=LLM_DIR,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    sources = json.loads(r.stdout)
    repo, tdir = tmp_path_factory.mktemp("tc"), tmp_path_factory.mktemp("tc-templates")
    base = write_tiny_llm(repo / "tiny" / "1")
    pairs = []
    for name, hub in TEMPLATES.items():
        shutil.copytree(base, repo / name / "1")
        (tdir / f"{name}.jinja").write_text(sources[hub])
        pairs.append(f"{name}={tdir / name}.jinja")
    w = start_worker(repo, tmp_path_factory.mktemp("tc-w"), env={"EXECUTION_MODE": "cpu",
                                                                  "TIERSERVE_CHAT_TEMPLATE": ",".join(pairs)})
    yield w
    assert w.stop() == 0, w.log_text()[-4000:]


def test_status_names_the_call_syntax(worker):
    want = {"tiny": "none", "qwen25": "hermes", "llama31": "llama3_json"}
    assert {m: model_status(worker, m)["llm"]["tool_call_format"] for m in want} == want


def body(model, choice, **kw):
    b = {"model": model, "messages": Q, "tools": TOOLS, "tool_choice": choice, "max_tokens": 24,
         "temperature": 1.0}
    b.update(kw)
    return b


def whole(w, b):
    r = post_json(w, "/v1/chat/completions", b)
    assert r.status == 200, r
    return r.body["choices"][0]


def streamed(w, b):
    r = post(w, "/v1/chat/completions", dict(b, stream=True))
    assert r.status == 200, r
    ev = sse_events(r.body)
    deltas = [e["choices"][0]["delta"] for e in ev if e["choices"]]
    assert not any("tool_calls" in d for d in deltas), deltas
    return "".join(d.get("content") or "" for d in deltas), ev[-1]["choices"][0]["finish_reason"]


@pytest.mark.parametrize("model", ["qwen25", "llama31", "tiny"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_an_answer_without_calls_passes_unchanged(worker, model, seed):
    """The same prompt (the templates do not show tool_choice) with the parser on ("auto") and
    off ("none"): the same text and finish_reason, whole and streamed; no tool_calls."""
    off = whole(worker, body(model, "none", seed=seed))
    on = whole(worker, body(model, "auto", seed=seed))
    assert "tool_calls" not in on["message"] and on["message"]["content"], on
    assert (on["message"]["content"], on["finish_reason"]) == (off["message"]["content"], off["finish_reason"])
    assert streamed(worker, body(model, "auto", seed=seed)) == (off["message"]["content"], off["finish_reason"])


def test_stop_strings_still_apply_with_tools(worker):
    full = whole(worker, body("qwen25", "auto", seed=5))["message"]["content"]
    cut = full[3:6]
    got = whole(worker, body("qwen25", "auto", seed=5, stop=[cut]))
    assert (got["message"]["content"], got["finish_reason"]) == (full[:full.index(cut)], "stop")
