"""Tool calls in the answer (issue 23, the API side): the worker names the call syntax each
model's template shows in /v2/status (`tool_call_format`), and with `tools` and
`tool_choice` "auto" it passes the answer's text through the tool-call parser
(src/tok/toolcall.c):
- an answer that holds no call is left exactly as it was, whole and streamed (the random-weight
  tiny decoder with Qwen2.5's and Llama-3.1's templates);
- an answer that holds calls comes back in OpenAI's shapes: message.tool_calls, content null
  when the answer is only calls, finish_reason "tool_calls"; streamed as OpenAI's deltas, which
  the openai SDK's stream helper assembles into the same calls. The random decoder never writes
  a call, so a "script" decoder (tests/models/gen_script_llm.py) writes a fixed one for the
  one prompt it is made for (Qwen2.5's Hermes syntax).
The parser itself: tests/unit/test_toolcall.c, every family's syntax split at every byte."""
import json
import shutil
import subprocess

import pytest

from conftest import start_worker
from helpers import model_status, post, post_json, sse_events
from llm_fixture import LLM_DIR, MODELS, node_encode, write_tiny_llm

TEMPLATES = {"llama31": "library/llama3.1:8b", "qwen25": "library/qwen2.5:0.5b"}
# compact JSON: with "auto" the call is constrained once `<tool_call>` starts it, and the
# grammar writes no white space outside strings (the parser's own handling of spaced JSON:
# tests/unit/test_toolcall.c)
CALL = '{"name":"lookup_order","arguments":{"order_id":42}}'
SCRIPTS = {
    "onecall": f"<tool_call>\n{CALL}\n</tool_call>",
    "twocalls": f"Checking <both>.\n<tool_call>\n{CALL}\n</tool_call>\n<tool_call>\n"
                '{"name":"lookup_order","arguments":{"order_id":7,"note":"Zürich"}}\n</tool_call>',
}
TOOLS = [{"type": "function", "function": {"name": "lookup_order", "parameters": {
    "type": "object", "properties": {"order_id": {"type": "integer"}, "note": {"type": "string"}},
    "required": ["order_id"]}}}]
Q = [{"role": "user", "content": "Where is my order 42?"}]
STRICT = [
    {"type": "function", "function": {"name": "lookup_order", "parameters": {
        "type": "object", "properties": {"order_id": {"type": "integer", "minimum": 1, "maximum": 999999}},
        "required": ["order_id"], "additionalProperties": False}}},
    {"type": "function", "function": {"name": "open_ticket", "parameters": {
        "type": "object", "properties": {"priority": {"enum": ["low", "normal", "urgent"]},
                                         "summary": {"type": "string", "maxLength": 30}},
        "required": ["priority", "summary"], "additionalProperties": False}}},
]
# tool_choice "auto" (the call constrained once the answer starts it): script answers whose calls
# break their tools, with each script's tools. Unconstrained, "badcall" is a call to lookup_order
# with invalid arguments and "othercall" a call to a function the request did not offer; once
# `<tool_call>` starts the call the grammar masks the script's tokens that break it and the
# script decoder, whose other logits are all equal, draws at random among the allowed ones.
# LOOSE's schema uses a keyword the grammar does not follow ('not'), so its "auto" answers stay
# unconstrained (and parsed): "stranger" calls a function not offered.
LOOSE = [{"type": "function", "function": {"name": "lookup_order", "parameters": {
    "type": "object", "properties": {"order_id": {"type": "integer"}}, "not": {"required": ["x"]}}}}]
AUTO_SCRIPTS = {
    "badcall": ('Let me check.\n<tool_call>\n{"name":"lookup_order","arguments":{"order_id":"42","x":true}}\n'
                "</tool_call>", STRICT),
    "othercall": ('<tool_call>\n{"name":"delete_everything","arguments":{}}\n</tool_call>', STRICT),
    "stranger": ('<tool_call>\n{"name": "delete_everything", "arguments": {}}\n</tool_call>', LOOSE),
}


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
    # the script decoders: Q with each script's tools under Qwen2.5's template, answered by its text
    scripts = {**{n: (t, TOOLS) for n, t in SCRIPTS.items()}, **AUTO_SCRIPTS}
    job = [{"template": sources[TEMPLATES["qwen25"]], "vars": {
        "messages": Q, "tools": tools, "add_generation_prompt": True, "bos_token": "<s>", "eos_token": "</s>"}}
        for _, tools in scripts.values()]
    r = subprocess.run(["node", "render_request.mjs", "render"], cwd=LLM_DIR, input=json.dumps(job),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    prompt_lens = [j["ids"] for j in json.loads(r.stdout)]  # counts
    for (name, (text, _)), prompt_len in zip(scripts.items(), prompt_lens):
        d = repo / name / "1"
        shutil.copytree(base, d)
        ids = node_encode(text, False)
        r = subprocess.run(["/usr/bin/python3", str(MODELS / "gen_script_llm.py"), str(d / "model.onnx"),
                            str(prompt_len), ",".join(map(str, ids))], capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        cfg = json.loads((d / "config.json").read_text())
        cfg["num_hidden_layers"] = 1
        (d / "config.json").write_text(json.dumps(cfg))
        pairs.append(f"{name}={tdir / 'qwen25'}.jinja")
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


def validate(args, schema):
    """The subset of JSON Schema TOOLS uses: an object, its required keys, integer types."""
    assert isinstance(args, dict)
    for k in schema.get("required", []):
        assert k in args, (k, args)
    for k, v in args.items():
        if schema["properties"].get(k, {}).get("type") == "integer":
            assert isinstance(v, int) and not isinstance(v, bool), (k, v)


def calls_of(msg):
    return [(c["type"], c["function"]["name"], c["function"]["arguments"]) for c in msg["tool_calls"]]


def test_script_prompt_is_the_one_the_script_is_made_for(worker):
    r = post_json(worker, "/v1/chat/completions", body("onecall", "none", max_tokens=1))
    assert r.status == 200, r
    ch = whole(worker, body("onecall", "none", max_tokens=200))
    assert ch["message"]["content"].strip() == SCRIPTS["onecall"] and ch["finish_reason"] == "stop", ch


def test_a_call_comes_back_as_tool_calls(worker):
    ch = whole(worker, body("onecall", "auto", max_tokens=200))
    msg = ch["message"]
    assert ch["finish_reason"] == "tool_calls" and msg["content"] is None, ch
    assert calls_of(msg) == [("function", "lookup_order", '{"order_id":42}')], msg
    assert msg["tool_calls"][0]["id"].startswith("call_") and len(msg["tool_calls"][0]["id"]) == 29, msg
    validate(json.loads(msg["tool_calls"][0]["function"]["arguments"]), TOOLS[0]["function"]["parameters"])
    # the same answer without the parser is its text, markers and all
    off = whole(worker, body("onecall", "none", max_tokens=200))
    assert "<tool_call>" in off["message"]["content"] and "tool_calls" not in off["message"], off


def test_text_and_two_calls(worker):
    ch = whole(worker, body("twocalls", "auto", max_tokens=200))
    msg = ch["message"]
    assert ch["finish_reason"] == "tool_calls" and msg["content"].strip() == "Checking <both>.", ch
    assert calls_of(msg) == [("function", "lookup_order", '{"order_id":42}'),
                             ("function", "lookup_order", '{"order_id":7,"note":"Zürich"}')], msg
    ids = [c["id"] for c in msg["tool_calls"]]
    assert len(set(ids)) == 2, ids
    # cut by max_tokens inside the second call: the first is a call, the cut body is text, finish "length"
    n = len(node_encode(SCRIPTS["twocalls"], False))
    cut = whole(worker, body("twocalls", "auto", max_tokens=n - 8))
    assert cut["finish_reason"] == "length" and calls_of(cut["message"]) == calls_of(msg)[:1], cut
    assert "<tool_call>" not in (cut["message"]["content"] or ""), cut


@pytest.mark.parametrize("model", list(SCRIPTS))
def test_streamed_calls_are_openai_deltas(worker, model):
    """By hand: the first delta of a call carries its index, id, type and name (arguments ""),
    the rest its arguments in pieces; joined they are the whole answer's calls. No marker in
    any content delta."""
    want = whole(worker, body(model, "auto", max_tokens=200))["message"]
    r = post(worker, "/v1/chat/completions", dict(body(model, "auto", max_tokens=200), stream=True))
    assert r.status == 200, r
    ev = sse_events(r.body)
    content, calls, pieces = "", {}, 0
    for e in ev:
        if not e["choices"]:
            continue
        d = e["choices"][0]["delta"]
        content += d.get("content") or ""
        for tc in d.get("tool_calls", []):
            if "id" in tc:
                assert tc["index"] == len(calls) and tc["type"] == "function" and tc["function"]["arguments"] == ""
                calls[tc["index"]] = [tc["function"]["name"], ""]
            else:
                calls[tc["index"]][1] += tc["function"]["arguments"]
                pieces += 1
    assert "<tool_call" not in content and "</tool_call" not in content, content
    assert content.strip() == (want["content"] or "").strip()
    assert [("function", n, a) for n, a in calls.values()] == calls_of(want)
    assert pieces >= len(calls)
    assert ev[-1]["choices"][0]["finish_reason"] == "tool_calls", ev[-1]


SDK = """
import OpenAI from "openai";
const [baseURL, model, body] = process.argv.slice(1);
const client = new OpenAI({ baseURL, apiKey: "unused", maxRetries: 0, timeout: 60_000 });
const req = JSON.parse(body);
const whole = await client.chat.completions.create(req);
const stream = client.chat.completions.stream(req);
const done = await stream.finalChatCompletion();
const strip = (m) => ({ content: m.content, calls: (m.tool_calls || []).map((c) => [c.type, c.function.name, c.function.arguments]) });
console.log(JSON.stringify({ whole: strip(whole.choices[0].message), whole_finish: whole.choices[0].finish_reason,
                             streamed: strip(done.choices[0].message), streamed_finish: done.choices[0].finish_reason }));
"""


@pytest.mark.parametrize("model", list(SCRIPTS))
def test_the_openai_sdk_assembles_the_same_calls(worker, model):
    b = body(model, "auto", max_tokens=200, seed=11)
    r = subprocess.run(["node", "--input-type=module", "-e", SDK, f"http://{worker.host}:{worker.port}/v1", model,
                        json.dumps(b)], cwd=LLM_DIR, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    assert got["whole"]["calls"] and got["whole_finish"] == "tool_calls", got
    assert (got["streamed"]["calls"], got["streamed_finish"]) == (got["whole"]["calls"], "tool_calls"), got
    assert (got["streamed"]["content"] or "").strip() == (got["whole"]["content"] or "").strip(), got


# ---- forced calls: tool_choice "required" or naming a function (the grammar of src/grammar's
# gram_compile_tools in the template's own syntax, wired through src/llm/llm_gram.c) ----


@pytest.mark.parametrize("model", ["qwen25", "llama31"])
def test_forced_calls_are_valid_calls(worker, model):
    """The random decoder at temperature 1.5 cannot help writing a call: "required" gives one
    call (parallel_tool_calls false) to one of the tools, its arguments valid for that tool's
    schema (ajv); a named function is that function's call; the SDK reads them as tool_calls."""
    from test_llm_structured import sdk
    base = {"model": model, "messages": Q, "tools": STRICT, "temperature": 1.5, "max_tokens": 200}
    cases = [{"req": dict(base, tool_choice="required", parallel_tool_calls=False, seed=s), "check": False}
             for s in (1, 2, 3)]
    cases += [{"req": dict(base, tool_choice={"type": "function", "function": {"name": "open_ticket"}}, seed=s,
                           parallel_tool_calls=False), "check": False} for s in (1, 2)]
    got = sdk(worker, cases)
    for i, c in enumerate(got):
        assert "choices" in c, c
        ch = c["choices"][0]
        assert ch["finish"] == "tool_calls" and len(ch["calls"]) == 1 and ch["calls"][0]["valid"], ch
        assert ch["calls"][0]["name"] in (("lookup_order", "open_ticket") if i < 3 else ("open_ticket",)), ch


@pytest.mark.parametrize("choice,model,needle", [
    ("required", "tiny", "has none"),
    ({"type": "function", "function": {"name": "nope"}}, "qwen25", "not one of 'tools'"),
    ({"type": "function"}, "qwen25", "must be"),
])
def test_forced_call_refusals(worker, choice, model, needle):
    r = post_json(worker, "/v1/chat/completions", {"model": model, "messages": Q, "tools": STRICT,
                                                    "tool_choice": choice})
    assert r.status == 400 and r.body["error"]["param"] == "tool_choice" and needle in r.body["error"]["message"], r


# ---- tool_choice "auto": a call the answer starts is constrained from its marker on ----

def auto_req(model, seed, **kw):
    return dict({"model": model, "messages": Q, "tools": AUTO_SCRIPTS[model][1], "tool_choice": "auto",
                 "parallel_tool_calls": False, "temperature": 1.5, "max_tokens": 200, "seed": seed}, **kw)


@pytest.mark.parametrize("model", ["badcall", "othercall"])
def test_auto_started_calls_are_valid_calls(worker, model):
    """The script starts a call its tools forbid; from `<tool_call>` on the grammar holds, so
    every seed gives one call (parallel_tool_calls false) to one of the request's tools with
    arguments ajv accepts. The text before the marker is the script's, unmasked."""
    from test_llm_structured import sdk
    got = sdk(worker, [{"req": auto_req(model, s), "check": False} for s in (1, 2, 3, 4)])
    names = {t["function"]["name"] for t in STRICT}
    for c in got:
        assert "choices" in c, c
        ch = c["choices"][0]
        assert ch["finish"] == "tool_calls" and len(ch["calls"]) == 1, ch
        assert ch["calls"][0]["valid"] and ch["calls"][0]["name"] in names, ch
        assert (ch["content"] or "").strip() == ("Let me check." if model == "badcall" else ""), ch
    # the same answers with the parser off (tool_choice "none"): the script's text, unconstrained
    off = whole(worker, dict(auto_req(model, 1), tool_choice="none"))
    assert off["message"]["content"].strip() == AUTO_SCRIPTS[model][0], off


def test_a_call_to_a_function_not_offered_is_text(worker):
    """LOOSE's schema is one the grammar does not follow: "auto" stays unconstrained and parsed.
    The script calls delete_everything, which the request does not offer: no tool_calls, the
    call's JSON is the content and the answer ends "stop", whole and streamed."""
    ch = whole(worker, auto_req("stranger", 1))
    assert "tool_calls" not in ch["message"] and ch["finish_reason"] == "stop", ch
    assert json.loads(ch["message"]["content"]) == {"name": "delete_everything", "arguments": {}}, ch
    assert streamed(worker, auto_req("stranger", 1)) == (ch["message"]["content"], "stop")


@pytest.mark.parametrize("req", [
    dict(body("qwen25", "required", max_tokens=200, seed=21, temperature=1.5), tools=STRICT,
         parallel_tool_calls=False),
    dict(body("llama31", {"type": "function", "function": {"name": "open_ticket"}}, max_tokens=200, seed=22,
              temperature=1.5), tools=STRICT, parallel_tool_calls=False),
    auto_req("badcall", 23),
    auto_req("othercall", 24),
], ids=["required", "named", "auto-badcall", "auto-othercall"])
def test_the_sdk_stream_helper_assembles_the_whole_answers_calls(worker, req):
    """Constrained calls with random draws (temperature 1.5): for one seed the openai SDK's
    stream helper (finalChatCompletion) assembles the calls and content of the whole answer."""
    r = subprocess.run(["node", "--input-type=module", "-e", SDK, f"http://{worker.host}:{worker.port}/v1",
                        req["model"], json.dumps(req)], cwd=LLM_DIR, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    assert got["whole"]["calls"] and got["whole_finish"] == "tool_calls", got
    assert (got["streamed"]["calls"], got["streamed_finish"]) == (got["whole"]["calls"], "tool_calls"), got
    assert (got["streamed"]["content"] or "").strip() == (got["whole"]["content"] or "").strip(), got


def test_calls_through_the_router(worker, tmp_path_factory):
    """Through the router (the body forwarded unchanged, the reply relayed): a forced call and
    a call the answer starts under "auto" are the worker's own, valid, for the same seed."""
    from test_llm_structured import sdk
    from test_router import Router, pools_config
    reqs = [{"req": dict(body("qwen25", "required", max_tokens=200, seed=31, temperature=1.5), tools=STRICT,
                         parallel_tool_calls=False), "check": False},
            {"req": auto_req("badcall", 32), "check": False}]
    router = Router(pools_config([("cpu", "cpu", True, [worker.port], None)]), tmp_path_factory.mktemp("tools-r"))
    try:
        router.wait_healthy(1)
        via, direct = sdk(router, reqs), sdk(worker, reqs)
        for v, d in zip(via, direct):
            ch = v["choices"][0]
            assert ch["finish"] == "tool_calls" and len(ch["calls"]) == 1 and ch["calls"][0]["valid"], ch
            assert v["choices"] == d["choices"], (v, d)
    finally:
        router.stop()
