"""Every chat template that parses is rendered by the Jinja engine (src/jinja): a template of
no known family in tokenizer_config.json and a Llama-3.1-style one in chat_template.jinja
chat like the tiny model with Llama-2's template (the hand-written renderers refused the
first two until the engine replaced them). A model whose template does not parse still loads
and serves /v1/completions; only chat is refused, with an OpenAI-style 400 (code
`unsupported_chat_template`) that names the parser's complaint and points to
/v1/completions. The worker starts with its defaults (--exit-on-error on). /v2/status shows
`chat_template: null` and a `chat_template_note` with the reason for it, a warning names it,
and /v1/models lists it. urllib / http.client, no retries."""
import json

import pytest

from conftest import start_worker
from helpers import model_status, post_json
from llm_fixture import write_tiny_llm

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
