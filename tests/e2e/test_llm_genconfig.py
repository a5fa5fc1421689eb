"""What a model's generation_config.json decides on /v1 (issue 11, W1): the end-of-sequence
ids and the sampling defaults a request leaves out.

The tiny generated decoder never produces its eos id (2) on the test prompts, so a copy of its
folder names the 5th greedy token of PROMPT (numpy's reference, tests/models/llm_reference.py)
as an eos id: generation must end there with finish_reason "stop", that token counted in
completion_tokens (docs/llm.md: "counting an end-of-sequence token", as vLLM counts it) and its
text not in the answer (vLLM drops an eos token's text; a special eos such as </s> decodes to
nothing anyway), whole and streamed. Other copies set do_sample, temperature, top_p, top_k and
max_new_tokens: a request that leaves those fields out gets them, one that sets them wins.
Real sockets, no retries."""
import json
import shutil
import subprocess
import sys

import pytest

from conftest import start_worker
from llm_fixture import MODELS, write_tiny_llm
from helpers import post, post_json, sse_events
from test_llm_api import PROMPT, PROMPT_IDS, node_decode, text_of

N = 16
EOS_AT = 5  # the eos token is the 5th generated one


def with_gen_config(src, dst, **fields):
    shutil.copytree(src, dst)
    p = dst / "generation_config.json"
    g = json.loads(p.read_text())
    g.update(fields)
    p.write_text(json.dumps(g))


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("genrepo")
    base = write_tiny_llm(tmp_path_factory.mktemp("genbase") / "tiny")
    pj = root.parent / "gen_prompts.json"
    pj.write_text(json.dumps([PROMPT_IDS]))
    r = subprocess.run([sys.executable, str(MODELS / "llm_reference.py"), str(base), str(pj), str(N)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    greedy = json.loads(r.stdout)["tokens"][0]
    assert len(greedy) == N and 2 not in greedy, greedy
    eos = greedy[EOS_AT - 1]
    assert eos not in greedy[:EOS_AT - 1], greedy  # it must end there, not earlier
    assert json.loads((base / "generation_config.json").read_text())["do_sample"] is False
    # a list of ids, the real one kept: either ends the sequence
    with_gen_config(base, root / "eos" / "1", eos_token_id=[2, eos])
    with_gen_config(base, root / "hot" / "1", do_sample=True, temperature=1.5)
    with_gen_config(base, root / "nucleus" / "1", do_sample=True, temperature=1.5, top_p=1e-9)
    with_gen_config(base, root / "topk" / "1", do_sample=True, temperature=1.5, top_k=1, max_new_tokens=7)
    return root, greedy


@pytest.fixture(scope="module")
def llm(setup, tmp_path_factory):
    w = start_worker(setup[0], tmp_path_factory.mktemp("gen"), env={"EXECUTION_MODE": "cpu"})
    yield w
    assert w.stop() == 0, w.log_text()[-4000:]


@pytest.fixture(scope="module")
def texts(setup):
    """The text of the first k greedy tokens, by tokenizers.js."""
    greedy = setup[1]
    return {k: node_decode(greedy[:k]) for k in (EOS_AT - 1, 7, N)}


def cmpl(model, **kw):
    b = {"model": model, "prompt": PROMPT, "max_tokens": N}
    b.update(kw)
    return b


# ---- the end-of-sequence token --------------------------------------------------------------

def test_eos_ends_with_stop_counting_the_eos_token(llm, texts):
    code, _, a = post_json(llm, "/v1/completions", cmpl("eos", temperature=0))
    assert code == 200, a
    ch = a["choices"][0]
    assert ch["finish_reason"] == "stop"
    assert ch["text"] == texts[EOS_AT - 1]  # the tokens before it; the eos token's own text is not sent
    assert a["usage"] == {"prompt_tokens": len(PROMPT_IDS), "completion_tokens": EOS_AT,
                          "total_tokens": len(PROMPT_IDS) + EOS_AT, "prompt_tokens_details": {"cached_tokens": 0}}


def test_eos_streamed(llm, texts):
    code, h, data = post(llm, "/v1/completions", cmpl("eos", temperature=0, stream=True,
                                                      stream_options={"include_usage": True}))
    assert code == 200 and h["content-type"] == "text/event-stream"
    ev = sse_events(data)  # ends with [DONE]
    assert ev[-1]["choices"] == [] and ev[-1]["usage"]["completion_tokens"] == EOS_AT
    chunks = ev[:-1]
    assert "".join(e["choices"][0]["text"] for e in chunks) == texts[EOS_AT - 1]
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    assert all(e["choices"][0]["finish_reason"] is None for e in chunks[:-1])


def test_eos_wins_over_max_tokens_at_the_same_token(llm, texts):
    # the eos token is also the last one max_tokens allows: it is an end-of-sequence stop
    _, _, a = post_json(llm, "/v1/completions", cmpl("eos", temperature=0, max_tokens=EOS_AT))
    assert a["choices"][0]["finish_reason"] == "stop" and a["usage"]["completion_tokens"] == EOS_AT
    assert a["choices"][0]["text"] == texts[EOS_AT - 1]
    # one token fewer: length, and those tokens' whole text
    _, _, b = post_json(llm, "/v1/completions", cmpl("eos", temperature=0, max_tokens=EOS_AT - 1))
    assert b["choices"][0]["finish_reason"] == "length" and b["usage"]["completion_tokens"] == EOS_AT - 1
    assert b["choices"][0]["text"] == texts[EOS_AT - 1]


def test_eos_has_a_logprobs_entry(llm, setup, texts):
    """docs/llm.md: an end-of-sequence token has an entry too; it adds no text, so its offset is
    the answer's end."""
    _, _, a = post_json(llm, "/v1/completions", cmpl("eos", temperature=0, logprobs=0))
    lp = a["choices"][0]["logprobs"]
    assert len(lp["tokens"]) == len(lp["token_logprobs"]) == len(lp["text_offset"]) == EOS_AT
    assert lp["text_offset"][-1] == len(texts[EOS_AT - 1].encode())


def test_ignored_eos_does_not_stop_other_models(llm, texts):
    # the same prompt on a copy whose eos is only 2 runs to max_tokens
    _, _, a = post_json(llm, "/v1/completions", cmpl("hot", temperature=0))
    assert a["choices"][0]["finish_reason"] == "length" and a["choices"][0]["text"] == texts[N]


# ---- sampling defaults ------------------------------------------------------------------------

def test_do_sample_false_is_greedy_when_temperature_is_left_out(llm, texts):
    # seeded, no temperature: generation_config's do_sample false means greedy (HF's default
    # temperature 1.0 would sample)
    assert text_of(llm, cmpl("eos", seed=7)) == texts[EOS_AT - 1]
    assert text_of(llm, cmpl("eos", seed=7, temperature=1.5)) != texts[EOS_AT - 1]


def test_temperature_default_applies(llm, texts):
    left_out = text_of(llm, cmpl("hot", seed=7))
    assert left_out != texts[N]  # do_sample true: it samples
    assert left_out == text_of(llm, cmpl("hot", seed=7, temperature=1.5))  # at the config's temperature
    assert left_out != text_of(llm, cmpl("hot", seed=7, temperature=1.0))  # not HF's default 1.0
    assert text_of(llm, cmpl("hot", seed=7, temperature=0)) == texts[N]  # the request wins


def test_top_p_default_applies(llm, texts):
    # top_p 1e-9 keeps only the most likely token: greedy, whatever the temperature
    assert text_of(llm, cmpl("nucleus", seed=7)) == texts[N]
    assert text_of(llm, cmpl("nucleus", seed=7, temperature=1.5)) == texts[N]
    # the request's top_p wins: at 1.0 the config's temperature 1.5 samples
    assert text_of(llm, cmpl("nucleus", seed=7, top_p=1.0)) == text_of(llm, cmpl("hot", seed=7))


def test_top_k_and_max_new_tokens_defaults_apply(llm, texts):
    code, _, a = post_json(llm, "/v1/completions", {"model": "topk", "prompt": PROMPT, "seed": 7})
    assert code == 200, a
    # top_k 1: greedy at temperature 1.5; max_new_tokens 7 when max_tokens is left out
    assert a["choices"][0]["finish_reason"] == "length" and a["usage"]["completion_tokens"] == 7
    assert a["choices"][0]["text"] == texts[7]
    assert text_of(llm, cmpl("topk", seed=7)) == texts[N]
    # the request's top_k wins, -1 and 0 meaning off: the config's temperature 1.5 samples
    hot = text_of(llm, cmpl("hot", seed=7))
    assert text_of(llm, cmpl("topk", seed=7, top_k=-1)) == hot
    assert text_of(llm, cmpl("topk", seed=7, top_k=0)) == hot
