"""OpenAI log probabilities on /v1 (issue 11), against the numpy reference: every chosen
token's logprob and the top-5 alternatives (ids by their bytes, values within 1e-4), whole
and streamed, chat and completions; the openai npm SDK reads them; the refusals; logprobs
off gives null; entries withheld and dropped with a stop string's text."""
import json
import subprocess
import sys

import pytest

from conftest import start_worker
from llm_fixture import LLM_DIR, MODELS, node_encode, write_tiny_llm
from helpers import post, post_json, sse_events
from test_llm_api import PROMPT, PROMPT_IDS, node_decode

N = 12
K = 5
TOL = 1e-4


def token_bytes(vocab_text):
    """A sentencepiece token's bytes: <0xNN> is the byte, U+2581 a space."""
    if len(vocab_text) == 6 and vocab_text.startswith("<0x") and vocab_text.endswith(">"):
        return bytes([int(vocab_text[3:5], 16)])
    return vocab_text.replace("\u2581", " ").encode("utf-8")


@pytest.fixture(scope="module")
def ref(tmp_path_factory):
    repo = tmp_path_factory.mktemp("lprepo")
    d = write_tiny_llm(repo / "tiny" / "1")
    chat_ids = node_encode("<s>[INST] Hello [/INST]", False)  # Llama-2-chat's template for one user turn
    pj = repo.parent / "lp_prompts.json"
    pj.write_text(json.dumps([PROMPT_IDS, chat_ids]))
    r = subprocess.run([sys.executable, str(MODELS / "llm_reference.py"), "--logprobs", str(K), str(d), str(pj),
                        str(N)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    tj = json.loads((d / "tokenizer.json").read_text())
    byid = {v: k for k, v in tj["model"]["vocab"].items()}
    for t in tj.get("added_tokens", []):
        byid[t["id"]] = t["content"]
    return {"repo": repo, "cmpl": out["logprobs"][0], "chat": out["logprobs"][1], "chat_ids": chat_ids,
            "bytes": lambda i: token_bytes(byid[i])}


@pytest.fixture(scope="module")
def w(ref, tmp_path_factory):
    wk = start_worker(ref["repo"], tmp_path_factory.mktemp("lp"), env={"EXECUTION_MODE": "cpu"})
    yield wk
    assert wk.stop() == 0, wk.log_text()[-4000:]


def cmpl(**kw):
    b = {"model": "tiny", "prompt": PROMPT, "max_tokens": N, "temperature": 0}
    b.update(kw)
    return b


def chat(**kw):
    b = {"model": "tiny", "messages": [{"role": "user", "content": "Hello"}], "max_tokens": N, "temperature": 0}
    b.update(kw)
    return b


def text_of(ref, i):
    return ref["bytes"](i).decode("utf-8", errors="replace")


def check_chat_entries(ref, content):
    want = ref["chat"]
    assert len(content) == len(want)
    for got, step in zip(content, want):
        assert bytes(got["bytes"]) == ref["bytes"](step["token"])
        assert got["token"] == text_of(ref, step["token"])
        assert abs(got["logprob"] - step["logprob"]) < TOL, (got, step)
        assert len(got["top_logprobs"]) == K
        for t, (tid, lp) in zip(got["top_logprobs"], step["top"]):
            assert bytes(t["bytes"]) == ref["bytes"](tid) and t["token"] == text_of(ref, tid), (t, tid)
            assert abs(t["logprob"] - lp) < TOL, (t, lp)
        lps = [t["logprob"] for t in got["top_logprobs"]]
        assert lps == sorted(lps, reverse=True)


def check_cmpl_lp(ref, lp, k=K):
    want = ref["cmpl"]
    assert len(lp["tokens"]) == len(want) == len(lp["token_logprobs"]) == len(lp["top_logprobs"])
    for tok, val, top, step in zip(lp["tokens"], lp["token_logprobs"], lp["top_logprobs"], want):
        assert tok == text_of(ref, step["token"])
        assert abs(val - step["logprob"]) < TOL, (val, step)
        exp = {text_of(ref, tid): v for tid, v in step["top"][:k]}
        assert set(top) == set(exp), (top, exp)
        assert all(abs(top[t] - exp[t]) < TOL for t in exp)
    offs = lp["text_offset"]
    assert offs[0] == 0 and offs == sorted(offs)


def test_chat_logprobs_whole_and_streamed_match_numpy(w, ref):
    assert ref["chat"][0]["top"][0][0] == ref["chat"][0]["token"]  # greedy: the best is the choice
    code, _, r = post_json(w, "/v1/chat/completions", chat(logprobs=True, top_logprobs=K))
    assert code == 200, r
    assert r["usage"]["prompt_tokens"] == len(ref["chat_ids"])
    lp = r["choices"][0]["logprobs"]
    assert lp["refusal"] is None
    check_chat_entries(ref, lp["content"])
    code, _, data = post(w, "/v1/chat/completions", chat(logprobs=True, top_logprobs=K, stream=True))
    assert code == 200
    ev = sse_events(data)
    streamed = []
    for e in ev:
        c = e["choices"][0]
        if c["delta"].get("content"):  # a chunk carrying text carries its tokens' entries
            assert c["logprobs"] and c["logprobs"]["content"], e
        if c["logprobs"]:
            streamed += c["logprobs"]["content"]
    assert streamed == lp["content"]
    assert "".join(e["choices"][0]["delta"].get("content") or "" for e in ev) == \
        r["choices"][0]["message"]["content"]


def test_completion_logprobs_whole_and_streamed_match_numpy(w, ref):
    code, _, r = post_json(w, "/v1/completions", cmpl(logprobs=K))
    assert code == 200, r
    lp = r["choices"][0]["logprobs"]
    check_cmpl_lp(ref, lp)
    assert lp["text_offset"][-1] <= len(r["choices"][0]["text"].encode())
    code, _, data = post(w, "/v1/completions", cmpl(logprobs=K, stream=True))
    ev = sse_events(data)
    joined = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
    for e in ev:
        c = e["choices"][0]
        if c["text"]:
            assert c["logprobs"] and c["logprobs"]["tokens"], e
        if c["logprobs"]:
            for k in joined:
                joined[k] += c["logprobs"][k]
    assert joined == lp
    # logprobs 0: the chosen tokens only
    _, _, z = post_json(w, "/v1/completions", cmpl(logprobs=0))
    check_cmpl_lp(ref, z["choices"][0]["logprobs"], k=0)


@pytest.mark.parametrize("path,extra,param", [
    ("/v1/chat/completions", {"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
    ("/v1/chat/completions", {"logprobs": True, "top_logprobs": -1}, "top_logprobs"),
    ("/v1/chat/completions", {"logprobs": True, "top_logprobs": 2.5}, "top_logprobs"),
    ("/v1/chat/completions", {"top_logprobs": 2}, "top_logprobs"),
    ("/v1/chat/completions", {"logprobs": False, "top_logprobs": 2}, "top_logprobs"),
    ("/v1/chat/completions", {"logprobs": 1}, "logprobs"),
    ("/v1/completions", {"logprobs": 6}, "logprobs"),
    ("/v1/completions", {"logprobs": -1}, "logprobs"),
    ("/v1/completions", {"logprobs": True}, "logprobs"),
    ("/v1/completions", {"logprobs": "2"}, "logprobs"),
    ("/v1/completions", {"top_logprobs": 2}, "top_logprobs"),
])
def test_bad_logprobs_refused_naming_the_field(w, path, extra, param):
    code, _, e = post_json(w, path, cmpl(**extra) if path == "/v1/completions" else chat(**extra))
    assert code == 400, e
    assert e["error"]["param"] == param and e["error"]["type"] == "invalid_request_error", e


@pytest.mark.parametrize("path,extra", [
    ("/v1/chat/completions", {}), ("/v1/chat/completions", {"logprobs": False}),
    ("/v1/chat/completions", {"logprobs": None}), ("/v1/completions", {"logprobs": None}),
    ("/v1/completions", {}),
])
def test_logprobs_off_gives_null(w, path, extra):
    body = cmpl(max_tokens=4, **extra) if path == "/v1/completions" else chat(max_tokens=4, **extra)
    code, _, r = post_json(w, path, body)
    assert code == 200 and r["choices"][0]["logprobs"] is None, r
    _, _, data = post(w, path, dict(body, stream=True))
    assert all(c["logprobs"] is None for e in sse_events(data) for c in e["choices"])


def test_stop_string_withholds_and_drops_entries(w, ref):
    toks = [s["token"] for s in ref["cmpl"]]
    pieces = [node_decode(toks[:i]).encode() for i in range(len(toks) + 1)]
    text = pieces[-1]
    # a stop string from the middle of one token's text into the next one's
    stop = None
    for i in range(2, len(toks) - 1):
        a, b = pieces[i], pieces[i + 1]
        if len(b) - len(a) >= 2 and len(a) >= 2 and text.find(a[-1:] + b[len(a):len(a) + 1]) == len(a) - 1:
            stop = (a[-1:] + b[len(a):len(a) + 1]).decode()
            break
    assert stop, pieces
    want = text[:text.find(stop.encode())]
    # the rule: a token's entry goes out iff some of its text precedes the stop string
    n_keep = sum(1 for i in range(len(toks)) if len(pieces[i]) < len(want))
    assert 0 < n_keep < len(toks)
    code, _, r = post_json(w, "/v1/completions", cmpl(logprobs=2, stop=stop))
    assert code == 200 and r["choices"][0]["text"].encode() == want and r["choices"][0]["finish_reason"] == "stop"
    lp = r["choices"][0]["logprobs"]
    assert lp["tokens"] == [text_of(ref, t) for t in toks[:n_keep]]
    _, _, data = post(w, "/v1/completions", cmpl(logprobs=2, stop=stop, stream=True))
    got = [t for e in sse_events(data) if e["choices"][0]["logprobs"] for t in e["choices"][0]["logprobs"]["tokens"]]
    assert got == lp["tokens"]
    _, _, rc = post_json(w, "/v1/chat/completions", chat(logprobs=True, stop=stop))
    content = rc["choices"][0]["message"]["content"]
    ents = rc["choices"][0]["logprobs"]["content"]
    assert b"".join(bytes(e["bytes"]) for e in ents).decode(errors="replace").lstrip().startswith(content)


def test_openai_sdk_reads_logprobs(w, ref):
    r = subprocess.run(["node", str(LLM_DIR / "openai_logprobs.mjs"), f"http://{w.host}:{w.port}/v1", "tiny"],
                       capture_output=True, text=True, timeout=120, cwd=LLM_DIR)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert len(out["chat"]) == 8
    for e, step in zip(out["chat"], ref["chat"]):
        assert bytes(e["bytes"]) == ref["bytes"](step["token"]) and abs(e["logprob"] - step["logprob"]) < TOL
        assert [bytes(t[2]) for t in e["top"]] == [ref["bytes"](tid) for tid, _ in step["top"]]
    assert [t for t, _ in out["chat_stream"]] == [e["token"] for e in out["chat"]]
    c = out["completion"]
    assert len(c["tokens"]) == 8 and all(len(t) == 3 for t in c["top_logprobs"])
    for v, step in zip(c["token_logprobs"], ref["cmpl"]):
        assert abs(v - step["logprob"]) < TOL
