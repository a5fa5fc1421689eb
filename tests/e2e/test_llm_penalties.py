"""presence_penalty and frequency_penalty on /v1 (OpenAI's definition, vLLM's rule): before
each token, every token t generated c(t) > 0 times so far (not the prompt) loses
c(t) * frequency_penalty + presence_penalty from its logit. Checked on the tiny generated
decoder against the numpy reference (tests/models/llm_reference.py) greedy, over real
sockets with no retries.

PROMPT is one where the tiny model repeats itself within N tokens (the reference shows
token 7740 generated at steps 12 and 14), so a penalty must change the output there.

PROMPT holds no token the model picks, so it cannot tell "generated tokens only" from "prompt
and generated tokens". REPEAT_PROMPT can: it is PROMPT followed by the text of its first 13
greedy tokens, ending in 7740 24901, after which the model picks 7740 again. Counting the
prompt would penalise that first choice away; the rule leaves it alone (the reference run
with --count-prompt, the wrong rule, is there to show the two give different outputs)."""
import http.client
import json
import subprocess
import sys

import pytest

from conftest import start_worker
from llm_fixture import MODELS, node_encode, write_tiny_llm
from test_llm_api import node_decode

PROMPT = "one earth apple"
PROMPT_IDS = [1, 624, 6340, 19767]  # <s> ▁one ▁earth ▁apple: tokenizers.js encode(PROMPT)
REPEAT_PROMPT = "one earth appleinos artikel Fine consist ####\u0144ski dayskn\uff08 loan queryCell Tall"
REPEAT_IDS = PROMPT_IDS + [7905, 8483, 24105, 4817, 2476, 20939, 2202, 13223, 29186, 9976, 5709, 7740, 24901]
N = 16
PENALTIES = ((0, 1.5), (2.0, 0))
LP_K, LP_TOL = 5, 1e-4  # test_llm_logprobs's top-K and tolerance


def reference(d, tmp, presence, frequency, ids=PROMPT_IDS, count_prompt=False, logprobs=None):
    """The reference's greedy tokens for ids (with logprobs=K: its per-step logprobs entries
    instead, each with the penalised view beside the rule's)."""
    pj = tmp / "prompts.json"
    pj.write_text(json.dumps([ids]))
    r = subprocess.run([sys.executable, str(MODELS / "llm_reference.py")] + (["--count-prompt"] if count_prompt else [])
                       + (["--logprobs", str(logprobs)] if logprobs else [])
                       + [str(d), str(pj), str(N), str(presence), str(frequency)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    # a greedy choice this close could flip between ORT's and numpy's float rounding
    assert out["min_margin"] > 1e-3, out
    return out["logprobs"][0] if logprobs else out["tokens"][0]


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    root = tmp_path_factory.mktemp("penrepo")
    d = write_tiny_llm(root / "tiny" / "1")
    tmp = tmp_path_factory.mktemp("penref")
    refs = {k: reference(d, tmp, *k) for k in ((0, 0),) + PENALTIES}
    # the repeat prompt under the rule and under the wrong rule (the prompt counted too)
    for k in PENALTIES:
        refs["repeat", k] = reference(d, tmp, *k, ids=REPEAT_IDS)
        refs["repeat-wrong", k] = reference(d, tmp, *k, ids=REPEAT_IDS, count_prompt=True)
    refs["logprobs"] = reference(d, tmp, 0, 1.5, logprobs=LP_K)
    return root, refs


@pytest.fixture(scope="module")
def llm(repo, tmp_path_factory):
    w = start_worker(repo[0], tmp_path_factory.mktemp("pen"), env={"EXECUTION_MODE": "cpu"})
    yield w
    assert w.stop() == 0, w.log_text()[-4000:]


def body(**kw):
    """A greedy /v1/completions body for PROMPT, N tokens; kw overrides or adds fields."""
    b = {"model": "tiny", "prompt": PROMPT, "max_tokens": N, "temperature": 0}
    b.update(kw)
    return b


def send(w, b):
    """Sends one request on a fresh connection; returns the connection to read it from."""
    c = http.client.HTTPConnection(w.host, w.port, timeout=60)
    c.request("POST", "/v1/completions", body=json.dumps(b).encode(),
              headers={"Content-Type": "application/json"})
    return c


def answer(c):
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, json.loads(data)


def answer_raw(c):
    r = c.getresponse()
    data = r.read()
    c.close()
    assert r.status == 200, data
    return data


def post(w, b):
    return answer(send(w, b))


def check_equals_reference(a, toks):
    """The reply is the reference's greedy tokens: the same text and the same count."""
    toks = toks[:toks.index(2) + 1] if 2 in toks else toks
    ch = a["choices"][0]
    assert ch["text"] == node_decode([t for t in toks if t != 2]), (a, toks)
    assert a["usage"]["completion_tokens"] == len(toks)


def test_reference_prompt_repeats_and_penalties_change_it(repo):
    refs = repo[1]
    plain = refs[(0, 0)]
    assert len(set(plain)) < len(plain), plain  # the tiny model repeats itself here
    assert refs[(0, 1.5)] != plain and refs[(2.0, 0)] != plain


def test_repeat_prompt_tells_the_rule_from_counting_the_prompt(repo):
    """The wrong rule changes the output on REPEAT_PROMPT from its very first token (7740, a
    prompt token the model picks), and tokenizers.js makes REPEAT_IDS of its text."""
    assert node_encode(REPEAT_PROMPT, True) == REPEAT_IDS
    refs = repo[1]
    for k in PENALTIES:
        assert refs["repeat", k][0] == 7740, refs["repeat", k]
        assert refs["repeat-wrong", k][0] != 7740, refs["repeat-wrong", k]


@pytest.mark.parametrize("presence,frequency", PENALTIES)
def test_prompt_tokens_are_not_counted(llm, repo, presence, frequency):
    """REPEAT_PROMPT penalised: the output is the rule's (generated tokens only), not the one
    counting the prompt's tokens would give."""
    refs = repo[1]
    code, a = post(llm, body(prompt=REPEAT_PROMPT, presence_penalty=presence, frequency_penalty=frequency))
    assert code == 200, a
    assert a["usage"]["prompt_tokens"] == len(REPEAT_IDS), a
    check_equals_reference(a, refs["repeat", (presence, frequency)])
    wrong = refs["repeat-wrong", (presence, frequency)]
    assert a["choices"][0]["text"] != node_decode([t for t in wrong if t != 2]), (a, wrong)


def test_logprobs_are_the_models_own_row_not_the_penalised_one(llm, repo):
    """logprobs report the model's own distribution, before the penalties: with
    frequency_penalty 1.5 each step's logprob is the reference's unpenalised one. On this
    prompt the penalised view is more than 10x the tolerance away at some step, so reading the
    penalised row would show."""
    want = repo[1]["logprobs"]
    assert max(abs(s["logprob"] - s["penalised"]) for s in want) > 10 * LP_TOL, want
    code, a = post(llm, body(frequency_penalty=1.5, logprobs=LP_K))
    assert code == 200, a
    check_equals_reference(a, [s["token"] for s in want])
    got = a["choices"][0]["logprobs"]["token_logprobs"]
    assert len(got) == len(want), (got, want)
    for step, (v, s) in enumerate(zip(got, want)):
        assert abs(v - s["logprob"]) < LP_TOL, (step, v, s)


@pytest.mark.parametrize("presence,frequency", PENALTIES)
def test_greedy_penalized_equals_reference(llm, repo, presence, frequency):
    refs = repo[1]
    code, plain = post(llm, body())
    assert code == 200, plain
    check_equals_reference(plain, refs[(0, 0)])
    code, a = post(llm, body(presence_penalty=presence, frequency_penalty=frequency))
    assert code == 200, a
    check_equals_reference(a, refs[(presence, frequency)])
    assert a["choices"][0]["text"] != plain["choices"][0]["text"]


def test_chat_accepts_penalties(llm):
    c = http.client.HTTPConnection(llm.host, llm.port, timeout=60)
    c.request("POST", "/v1/chat/completions", body=json.dumps(
        {"model": "tiny", "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 4,
         "temperature": 0, "presence_penalty": 0.5, "frequency_penalty": -0.5}).encode(),
        headers={"Content-Type": "application/json"})
    code, a = answer(c)
    assert code == 200, a
    assert a["usage"]["completion_tokens"] >= 1


def sse_text(data):
    text = data.decode("utf-8")
    events = [e[len("data: "):] for e in text.split("\n\n")[:-1]]
    assert events[-1] == "[DONE]", text[-300:]
    return "".join(json.loads(e)["choices"][0]["text"] for e in events[:-1])


@pytest.mark.parametrize("long_penalised", [False, True])
def test_concurrent_penalized_and_plain_each_equal_solo(llm, long_penalised):
    """A long streamed request is decoding (its first token read) when a short one arrives:
    the short one then runs every step in a batch with the long one, in a later row. One of
    the two is penalised, the other not; each must equal its solo output."""
    long_b = body(max_tokens=400, stream=True)
    short_b = body(max_tokens=48)
    (long_b if long_penalised else short_b)["frequency_penalty"] = 1.5
    solo_long = sse_text(answer_raw(send(llm, long_b)))
    code, solo_short = post(llm, short_b)
    assert code == 200, solo_short
    cl = send(llm, long_b)
    rl = cl.getresponse()
    assert rl.status == 200
    first = rl.readline()
    assert first.startswith(b"data: "), first
    code, both_short = post(llm, short_b)
    rest = rl.read()
    cl.close()
    assert code == 200, both_short
    assert both_short["choices"][0]["text"] == solo_short["choices"][0]["text"]
    assert sse_text(first + rest) == solo_long
    # the short one did share decode steps with the long one
    _, st = llm.get_json("/v2/status")
    tiny = [m for m in st["models"] if m["name"] == "tiny"][0]
    assert tiny["llm"]["max_batch"] >= 2, tiny["llm"]
    # and the penalty matters at this length
    plain = dict(short_b)
    plain.pop("frequency_penalty", None)
    pen = dict(plain, frequency_penalty=1.5)
    assert post(llm, plain)[1]["choices"][0]["text"] != post(llm, pen)[1]["choices"][0]["text"]


@pytest.mark.parametrize("param", ["presence_penalty", "frequency_penalty"])
@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions"])
@pytest.mark.parametrize("value", [2.5, -3, "x", True, [1]])
def test_out_of_range_or_not_a_number_refused_naming_field(llm, param, path, value):
    b = {"model": "tiny", "max_tokens": 2, param: value}
    if path == "/v1/completions":
        b["prompt"] = PROMPT
    else:
        b["messages"] = [{"role": "user", "content": "Hello"}]
    c = http.client.HTTPConnection(llm.host, llm.port, timeout=60)
    c.request("POST", path, body=json.dumps(b).encode(), headers={"Content-Type": "application/json"})
    code, e = answer(c)
    assert code == 400, e
    assert e["error"]["param"] == param and e["error"]["type"] == "invalid_request_error", e
    msg = e["error"]["message"]
    assert param in msg and ("[-2, 2]" in msg or "must be a number" in msg), msg


@pytest.mark.parametrize("value", [0, 0.0, None, 2, -2, 1.5, -0.5])
def test_in_range_and_null_accepted(llm, value):
    code, a = post(llm, body(max_tokens=2, presence_penalty=value, frequency_penalty=value))
    assert code == 200, a
    assert a["usage"]["completion_tokens"] == 2
