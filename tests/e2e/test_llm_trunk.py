"""Prefill chunks before a prompt's last run without the LM head (docs/llm.md "Prefill without
the LM head", TIERSERVE_LLM_PREFILL_TRUNK): the worker keeps a second session of the model
without its 'logits' output (ORT then computes neither the LM head nor the last layer's
attention output and MLP), and only the last chunk, whose logits give the first token, runs
the whole model. On the tiny decoder, eager and GroupQueryAttention exports, both KV paths:

- /v2/status's llm object says `prefill_trunk` (true, or false with TIERSERVE_LLM_PREFILL_TRUNK=off)
  with a note, and the load log line says "prefill trunk on: ..." / "off ...";
- a prompt prefilled in chunks of 19 takes ceil(n/19) prefill chunks (`prefill_runs`), all but
  the last on the trunk (`prefill_trunk_runs`; none when off), and a last chunk of at least
  SPLIT_MIN (llm_engine.c LLM_HEAD_SPLIT_MIN) tokens too: its tokens but its last on the trunk,
  its last token alone on the whole model (the LM head computes one row, not 16); a prompt
  shorter than a chunk the same (MID: one trunk Run(); SHORT, under SPLIT_MIN: none); and the
  greedy tokens and logprobs still equal numpy's one-shot prefill (tests/models/llm_reference.py),
  for n = 2 too (each choice from the one row the leader's whole-model Run() gave);
- unset, the setting is auto, which on the CPU tier is on;
- the trunk shares the main session's weights: its note says how many MiB (not 0); the resident
  memory it saves is measured in docs/llm.md, not here (on this 16 MB model the sessions' fixed
  costs swamp it: +13-15 MB with or without sharing);
- a value other than auto|on|off is refused at start (exit 64, naming the setting).
http.client, no retries."""
import json
import math
import re
import subprocess
import sys

import pytest

from conftest import BIN, SANITIZED, sanitizer_env, start_worker
from helpers import llm_status, post_json
from llm_fixture import MODELS, node_encode, write_tiny_llm

LONG = ("The quick brown fox jumps over the lazy dog near the river bank, and then it rests. " * 5).strip()
MID = "The quick brown fox jumps over the lazy dog near the river bank."  # one chunk, >= SPLIT_MIN tokens
SHORT = "The quick brown fox"  # one chunk, under SPLIT_MIN: the whole model on all its rows
K = 2
N = 8
TOL = 1e-4
CHUNK = 19  # LONG's last chunk is then SPLIT_MIN tokens: the edge
SPLIT_MIN = 16  # llm_engine.c LLM_HEAD_SPLIT_MIN

CASES = [("eager", "host", "on"), ("eager", "bound", "on"), ("gqa", "host", "on"), ("gqa", "bound", "on"),
         ("eager", "bound", "off"), ("gqa", "bound", None)]  # None: unset, the default (auto: on on the CPU tier)
if SANITIZED:
    CASES = [("eager", "bound", "on"), ("gqa", "bound", None)]


@pytest.fixture(scope="module")
def repos(tmp_path_factory):
    r = {}
    for v in ("eager", "gqa"):
        d = tmp_path_factory.mktemp("trunk-" + v)
        write_tiny_llm(d / "tiny" / "1", variant=["--gqa"] if v == "gqa" else [])
        r[v] = d
    return r


@pytest.fixture(scope="module")
def reference(repos):
    """{prompt: (ids, numpy's greedy tokens, their logprobs)} for LONG, MID and SHORT (one-shot prefill; same
    weights in both exports)."""
    ids = [node_encode(LONG, True), node_encode(MID, True), node_encode(SHORT, True)]
    pj = repos["eager"] / "trunk_prompt.json"
    pj.write_text(json.dumps(ids))
    r = subprocess.run([sys.executable, str(MODELS / "llm_reference.py"), "--logprobs", str(K),
                        str(repos["eager"] / "tiny" / "1"), str(pj), str(N)], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    return {p: (ids[i], out["tokens"][i], [e["logprob"] for e in out["logprobs"][i]])
            for i, p in enumerate((LONG, MID, SHORT))}


@pytest.fixture(scope="module", params=CASES, ids=["-".join(x or "default" for x in c) for c in CASES])
def w(request, repos, tmp_path_factory):
    variant, kv, trunk = request.param
    # no prefix cache: every request prefills its whole prompt (LONG is sent twice)
    env = {"EXECUTION_MODE": "cpu", "TIERSERVE_LLM_KV": kv, "TIERSERVE_LLM_PREFILL_CHUNK": str(CHUNK),
           "TIERSERVE_LLM_PREFIX_CACHE_SCOPE": "off"}
    if trunk:
        env["TIERSERVE_LLM_PREFILL_TRUNK"] = trunk
    wk = start_worker(repos[variant], tmp_path_factory.mktemp("trunk-w"), env=env)
    wk.trunk = trunk != "off"
    yield wk
    assert wk.stop() == 0, wk.log_text()[-4000:]


def test_status_and_log_say_it(w):
    st = llm_status(w)
    assert st["prefill_trunk"] is w.trunk, st
    assert st["prefill_trunk_note"].startswith("on: " if w.trunk else "off"), st["prefill_trunk_note"]
    if w.trunk:  # the LM head and what only it reads are gone from the trunk
        m = re.match(r"on: (\d+) of (\d+) nodes and (\d+) MiB of weights dropped, (\d+) MiB shared with the main "
                     r"session", st["prefill_trunk_note"])
        assert m and int(m.group(1)) > 0 and int(m.group(3)) > 0 and int(m.group(4)) > 0, st["prefill_trunk_note"]
    want = "prefill trunk on: " if w.trunk else "prefill trunk off"
    assert any(want in l.get("msg", "") for l in w.log_lines()), [l.get("msg") for l in w.log_lines()][:20]


@pytest.mark.parametrize("prompt,n", [(LONG, 1), (MID, 1), (SHORT, 1), (LONG, 2)],
                         ids=["long", "mid", "short", "long-n2"])
def test_only_the_last_token_runs_the_lm_head_and_stays_exact(w, reference, prompt, n):
    ids, tokens, want = reference[prompt]
    before = llm_status(w)
    r = post_json(w, "/v1/completions", {"model": "tiny", "prompt": prompt, "max_tokens": N, "temperature": 0,
                                         "logprobs": K, "n": n})
    assert r.status == 200, r.body
    after = llm_status(w)
    a = r.body
    assert a["usage"]["prompt_tokens"] == len(ids)
    assert len(ids) > 4 * CHUNK if prompt == LONG else len(ids) < CHUNK
    runs = math.ceil(len(ids) / CHUNK)
    last = len(ids) - (runs - 1) * CHUNK
    split = last >= SPLIT_MIN  # the last chunk's tokens but its last ran on the trunk
    assert split == (prompt != SHORT), (prompt, len(ids), last)
    assert len(a["choices"]) == n
    for c in a["choices"]:
        got = c["logprobs"]["token_logprobs"]
        assert len(got) == len(want) == N
        for i, (g, x) in enumerate(zip(got, want)):
            assert abs(g - x) <= TOL, f"choice {c['index']} token {i}: logprob {g} vs numpy {x} (one-shot prefill)"
        assert len(c["logprobs"]["top_logprobs"]) == N
    assert after["prefill_runs"] - before["prefill_runs"] == runs, (before, after)
    assert after["prefill_trunk_runs"] - before["prefill_trunk_runs"] == (runs - 1 + split if w.trunk else 0), (before, after)


def test_bad_value_refused():
    p = subprocess.run([BIN, "--model-repository=/nonexistent"], capture_output=True, text=True, timeout=30,
                       env={**sanitizer_env(), "TIERSERVE_LLM_PREFILL_TRUNK": "x", "PATH": "/usr/bin:/bin"})
    assert p.returncode == 64, p.stderr
    msg = json.loads(p.stderr.strip().splitlines()[-1])["msg"]
    assert msg == 'bad settings: TIERSERVE_LLM_PREFILL_TRUNK: "x" is not one of auto|on|off'
