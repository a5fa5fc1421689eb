"""A model whose chat template is not one we render still loads and serves /v1/completions;
only chat is refused, with an OpenAI-style 400 (code `unsupported_chat_template`) that names
the template problem and points to /v1/completions. The worker starts with its defaults
(--exit-on-error on: the old worker failed the model and exited). /v2/status shows
`chat_template: null` and a `chat_template_note` with the reason, a warning names it, and
/v1/models lists the model. Two such models: a template of no known family in
tokenizer_config.json, and a Llama-3.1-style one (Llama-3's markers, another structure) in
chat_template.jinja; beside them the tiny model with Llama-2's template chats as before.
urllib / http.client, no retries."""
import http.client
import json

import pytest

from conftest import start_worker
from llm_fixture import write_tiny_llm

UNKNOWN = "{% for message in messages %}{{ message['role'] }}: {{ message['content'] }}\n{% endfor %}"
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
    w = start_worker(repo, tmp_path_factory.mktemp("chattmpl-w"), env={"EXECUTION_MODE": "cpu"})
    yield w
    assert w.stop() == 0, w.log_text()[-4000:]


def post(w, path, body):
    c = http.client.HTTPConnection(w.host, w.port, timeout=60)
    c.request("POST", path, body=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, json.loads(data)


def llm_status(w, name):
    code, st = w.get_json("/v2/status")
    assert code == 200
    return next(m for m in st["models"] if m["name"] == name)


# what the reason starts with (the file and the template's first characters) and says
WHY = {"odd": ("tokenizer_config.json: unknown chat template '{% for message in messages %}",
               "(supported: Llama-3"),
       "llama31": ("chat_template.jinja: chat template '{{- bos_token }}",
                   "has Llama-3's marker <|start_header_id|> but not the structure of a template this server renders"
                   " (supported: Llama-3")}


def says_why(text, name):
    start, middle = WHY[name]
    return text.startswith(start) and middle in text


@pytest.mark.parametrize("name", ["odd", "llama31"])
def test_loaded_and_listed_with_the_reason(worker, name):
    m = llm_status(worker, name)
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
@pytest.mark.parametrize("name", ["odd", "llama31"])
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


def test_a_supported_template_still_chats(worker):
    assert llm_status(worker, "tiny")["llm"]["chat_template"] == "llama2-chat"
    assert llm_status(worker, "tiny")["llm"]["chat_template_note"] is None
    code, out = post(worker, "/v1/chat/completions", {"model": "tiny", "max_tokens": 2,
                                                      "messages": [{"role": "user", "content": "Hello"}]})
    assert code == 200 and out["usage"]["completion_tokens"] == 2, out
