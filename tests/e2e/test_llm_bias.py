"""logit_bias (OpenAI's), vLLM's min_tokens / ignore_eos / stop_token_ids on /v1, on the tiny
generated decoder greedy, over real sockets. The numpy reference (tests/models/llm_reference.py)
names the token the model picks first for PROMPT (T0), so a bias against it can be seen; the
end-of-sequence id is the Llama-2 tokenizer's 2. stop_token_ids makes the chosen ids visible:
a sequence that picks a stop id ends there with finish_reason "stop"."""
import json
import subprocess
import sys

import pytest

from conftest import start_worker
from helpers import post_json, sse_events, post
from llm_fixture import MODELS, write_tiny_llm
from test_llm_api import node_decode

PROMPT = "one earth apple"
PROMPT_IDS = [1, 624, 6340, 19767]  # <s> ▁one ▁earth ▁apple (test_llm_penalties's)
EOS = 2
X = 1000  # a token the model does not pick first here (checked below)
N = 8


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    root = tmp_path_factory.mktemp("biasrepo")
    d = write_tiny_llm(root / "tiny" / "1")
    pj = root.parent / "bias_prompts.json"
    pj.write_text(json.dumps([PROMPT_IDS]))
    r = subprocess.run([sys.executable, str(MODELS / "llm_reference.py"), str(d), str(pj), str(N)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["min_margin"] > 1e-3, out
    return root, out["tokens"][0]


@pytest.fixture(scope="module")
def llm(repo, tmp_path_factory):
    w = start_worker(repo[0], tmp_path_factory.mktemp("bias"), env={"EXECUTION_MODE": "cpu"})
    yield w
    assert w.stop() == 0, w.log_text()[-4000:]


def gen(w, path="/v1/completions", **kw):
    b = {"model": "tiny", "max_tokens": N, "temperature": 0}
    if path == "/v1/completions":
        b["prompt"] = PROMPT
    else:
        b["messages"] = [{"role": "user", "content": "Hello"}]
    b.update(kw)
    r = post_json(w, path, b)
    assert r.status == 200, r
    ch = r.body["choices"][0]
    return ch.get("text", ch.get("message", {}).get("content")), ch["finish_reason"], r.body["usage"]["completion_tokens"]


def test_reference_first_token(repo):
    t0 = repo[1][0]
    assert t0 not in (EOS, X), repo[1]


def test_stop_token_ids_end_at_the_chosen_id(llm, repo):
    """The greedy first token as a stop id ends the sequence at once; its text is dropped as an
    end-of-sequence token's is."""
    t0 = repo[1][0]
    assert gen(llm, stop_token_ids=[t0]) == ("", "stop", 1)
    # an id the model does not pick changes nothing
    full = gen(llm)
    assert full[1:] == ("length", N)
    assert gen(llm, stop_token_ids=[X]) == full


def test_minus_100_forbids_the_greedy_token(llm, repo):
    """-100 on the token greedy decoding picks first: with it as a stop id the sequence now
    runs to its length (the id never comes), and the text differs from the unbiased one."""
    t0 = repo[1][0]
    text, fin, n = gen(llm, stop_token_ids=[t0], logit_bias={str(t0): -100})
    assert (fin, n) == ("length", N)
    assert text != gen(llm)[0]


def test_plus_100_forces_a_token(llm):
    text, fin, n = gen(llm, logit_bias={str(X): 100})
    assert (text, fin, n) == (node_decode([X] * N), "length", N)
    assert gen(llm, logit_bias={str(X): 100}, stop_token_ids=[X]) == ("", "stop", 1)
    # chat and a stream: the same rule
    text, fin, n = gen(llm, "/v1/chat/completions", logit_bias={str(X): 100})
    assert (text, fin, n) == (node_decode([X] * N), "length", N)
    r = post(llm, "/v1/chat/completions", {"model": "tiny", "messages": [{"role": "user", "content": "Hello"}],
                                           "max_tokens": N, "temperature": 0.9, "seed": 3, "stream": True,
                                           "logit_bias": {str(X): 100}})
    assert r.status == 200, r
    ev = sse_events(r.body)
    assert "".join(e["choices"][0]["delta"].get("content", "") for e in ev) == node_decode([X] * N)


def test_min_tokens_holds_eos_off(llm, repo):
    """EOS forced by +100 ends the answer at once; min_tokens 5 masks it for five tokens, so
    the sixth is EOS; ignore_eos runs on to the length."""
    assert gen(llm, logit_bias={str(EOS): 100}) == ("", "stop", 1)
    text, fin, n = gen(llm, logit_bias={str(EOS): 100}, min_tokens=5)
    assert (fin, n) == ("stop", 6) and text, text
    text, fin, n = gen(llm, logit_bias={str(EOS): 100}, ignore_eos=True, max_tokens=4)
    assert (fin, n) == ("length", 4)
    # min_tokens masks the stop ids too, over their bias: the model's own three greedy tokens,
    # then the forced stop id
    assert gen(llm, logit_bias={str(X): 100}, stop_token_ids=[X], min_tokens=3) == (
        node_decode(repo[1][:3]), "stop", 4)


@pytest.mark.parametrize("extra,param", [
    ({"logit_bias": {"5000000": 1}}, "logit_bias"),
    ({"logit_bias": {"7": 101}}, "logit_bias"),
    ({"min_tokens": N + 1}, "min_tokens"),
    ({"stop_token_ids": [32000]}, "stop_token_ids"),
    ({"ignore_eos": "yes"}, "ignore_eos"),
])
def test_refusals_name_the_param(llm, extra, param):
    b = {"model": "tiny", "prompt": PROMPT, "max_tokens": N}
    b.update(extra)
    r = post_json(llm, "/v1/completions", b)
    assert r.status == 400, r
    assert r.body["error"]["param"] == param and param in r.body["error"]["message"], r.body
