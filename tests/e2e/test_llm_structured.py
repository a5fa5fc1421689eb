"""Structured output by constrained decoding (issue 23): `response_format` on /v1/chat/completions.

The random-weight tiny decoder is the right fixture: whatever its logits say, the grammar's
mask (src/grammar, wired in src/llm/llm_gram.c) must keep every answer inside the schema, so
an answer at temperature 1.5 that ajv accepts is a strong test. The official openai npm SDK,
unchanged, sends the requests and ajv (JSON Schema 2020-12 with ajv-formats) validates
(tests/llm/openai_structured.mjs):
- json_schema: a nested support-bot schema (enums, a nullable integer with bounds, an object
  with an array of bounded strings, a date, a pattern) at temperature 1.5, several seeds, each
  answer a complete document ajv accepts, finish_reason "stop"; streamed == whole for a seed;
  the same seed repeats; max_tokens cut short is finish_reason "length";
- json_object: an object (any JSON object);
- refusals: a keyword the engine does not follow, a count over the server's cap, a missing
  name: 400 with param "response_format" naming the problem;
- through the router (the body forwarded unchanged) the same request validates;
- the SDK's zod helper (tests/llm/openai_zod.mjs): a zod type sent by zodResponseFormat, every
  answer read back by the SDK's own parse() through zod, whole and streamed."""
import json
import subprocess

import pytest

from conftest import start_worker
from helpers import address, post_json
from llm_fixture import LLM_DIR, write_tiny_llm
from test_router import Router, pools_config

SCHEMA = {
    "type": "object",
    "properties": {
        "intent": {"enum": ["order_status", "refund", "handoff", "other"]},
        "order_id": {"type": ["integer", "null"], "minimum": 1, "maximum": 99999999},
        "reply": {"type": "string", "maxLength": 40},
        "ticket": {
            "type": "object",
            "properties": {
                "priority": {"enum": ["low", "normal", "urgent"]},
                "tags": {"type": "array", "items": {"type": "string", "maxLength": 12}, "maxItems": 3},
                "due": {"type": "string", "format": "date"},
                "code": {"type": "string", "pattern": "^[A-Z]{2}-[0-9]{4}$"},
            },
            "required": ["priority", "tags", "due", "code"],
            "additionalProperties": False,
        },
        "escalate": {"type": "boolean"},
    },
    "required": ["intent", "order_id", "reply", "ticket", "escalate"],
    "additionalProperties": False,
}
Q = [{"role": "user", "content": "Where is my order 42? It is late."}]


def schema_req(seed, model="tiny", **kw):
    b = {"model": model, "messages": Q, "temperature": 1.5, "seed": seed, "max_tokens": 400,
         "response_format": {"type": "json_schema",
                             "json_schema": {"name": "support_reply", "schema": SCHEMA, "strict": True}}}
    b.update(kw)
    return b


def sdk(target, cases):
    host, port = address(target)
    r = subprocess.run(["node", "openai_structured.mjs", f"http://{host}:{port}/v1"], cwd=LLM_DIR,
                       input=json.dumps(cases), capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.fixture(scope="module")
def worker(tmp_path_factory):
    repo = tmp_path_factory.mktemp("so")
    write_tiny_llm(repo / "tiny" / "1")
    w = start_worker(repo, tmp_path_factory.mktemp("so-w"), env={"EXECUTION_MODE": "cpu"})
    yield w
    assert w.stop() == 0, w.log_text()[-4000:]


def test_json_schema_answers_validate(worker):
    cases = [{"req": schema_req(s), "schema": SCHEMA, "stream": s == 1} for s in (1, 2, 3, 4)]
    cases.append({"req": schema_req(1), "schema": SCHEMA})  # the same seed again
    got = sdk(worker, cases)
    for c in got:
        assert "choices" in c, c
        ch = c["choices"][0]
        assert ch["valid"] and ch["finish"] == "stop", ch
    # streamed == whole for one seed; one seed repeats; different seeds differ
    assert got[0]["streamed"] == [got[0]["choices"][0]["content"]]
    assert got[4]["choices"][0]["content"] == got[0]["choices"][0]["content"]
    assert len({c["choices"][0]["content"] for c in got[:4]}) > 1, got


def test_cut_short_is_length(worker):
    """max_tokens reached mid-document: finish_reason "length", the document incomplete (as OpenAI)."""
    ch = sdk(worker, [{"req": schema_req(2, max_tokens=6), "schema": SCHEMA}])[0]["choices"][0]
    assert ch["finish"] == "length" and not ch["valid"], ch


def test_json_object_is_an_object(worker):
    # a random decoder writes strings of hundreds of tokens before it happens on a closing
    # quote; a bias on '"', '}', ']' and '"}' (the tiny model's 28739, 28752, 28793, 17395) keeps
    # the answers short.
    # The bias applies after the mask: it cannot make a token the grammar forbids possible.
    bias = {"28739": 8, "28752": 8, "28793": 8, "17395": 8}
    cases = [{"req": {"model": "tiny", "messages": Q, "temperature": 1.0, "seed": s, "max_tokens": 300,
                      "logit_bias": bias, "response_format": {"type": "json_object"}}, "schema": None,
              "stream": s == 1} for s in (1, 2, 3)]
    for c in sdk(worker, cases):
        assert "choices" in c, c
        ch = c["choices"][0]
        assert ch["valid"] and ch["finish"] == "stop", ch
    # "text" is the default: no constraint
    r = post_json(worker, "/v1/chat/completions", {"model": "tiny", "messages": Q, "max_tokens": 4,
                                                    "response_format": {"type": "text"}})
    assert r.status == 200, r


REFUSALS = [
    ({"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object", "not": {}}}}, "'not'"),
    ({"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "string", "maxLength": 5000}}},
     "maxLength"),
    ({"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "string", "pattern": "^a{500}$"}}},
     "pattern"),
    ({"type": "json_schema", "json_schema": {"schema": {"type": "object"}}}, "name"),
    ({"type": "json_schema", "json_schema": {"name": "a b", "schema": {"type": "object"}}}, "name"),
    ({"type": "yaml"}, "type"),
    ({"type": "json_object", "schema": {}}, "schema"),
]


def test_refusals_name_the_problem(worker):
    """One SDK run for all of them (node's start-up is most of each)."""
    got = sdk(worker, [{"req": {"model": "tiny", "messages": Q, "response_format": rf}} for rf, _ in REFUSALS])
    for (rf, needle), g in zip(REFUSALS, got):
        assert g.get("status") == 400 and g["param"] == "response_format" and needle in g["message"], (rf, g)


def test_through_the_router(worker, tmp_path_factory):
    """The router forwards the body unchanged: the same constrained answer, valid."""
    router = Router(pools_config([("cpu", "cpu", True, [worker.port], None)]), tmp_path_factory.mktemp("so-r"))
    try:
        router.wait_healthy(1)
        via, direct = sdk(router, [{"req": schema_req(3), "schema": SCHEMA}]), sdk(worker, [{"req": schema_req(3)}])
        ch = via[0]["choices"][0]
        assert ch["valid"] and ch["finish"] == "stop", ch
        assert ch["content"] == direct[0]["choices"][0]["content"]
    finally:
        router.stop()


def test_the_sdk_zod_helper_parses_the_answers(worker):
    """The SDK's zod helper (zodResponseFormat + chat.completions.parse): the SDK turns a zod
    type into the schema, and its own parse() reads every answer back through zod (it throws on
    one that does not fit); the stream helper's final completion parses to the same object."""
    host, port = address(worker)
    r = subprocess.run(["node", "openai_zod.mjs", f"http://{host}:{port}/v1", "tiny", "5", "6", "7"], cwd=LLM_DIR,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    for g in got:
        assert "error" not in g and g["finish"] == "stop", g
        assert set(g["parsed"]) == {"intent", "order_id", "reply", "tags", "escalate"}, g
    assert got[0]["streamed"] == got[0]["parsed"], got[0]
