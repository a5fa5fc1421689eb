"""The automatic prefix cache and KV memory as the admission unit (docs/llm.md "Prefix
caching", "KV memory"), on the tiny decoder, both KV paths, against the numpy reference
(tests/models/llm_reference.py) at temperature 0 with logprobs: a cached-prefix generation
gives the cold one's tokens and logprobs; a conversation's second turn reports exactly the
cached tokens its shared whole blocks give; another tenant gets none; a token changed
mid-prefix reuses only the blocks before it; a small cache evicts and stays correct; the
final streamed usage chunk carries cached_tokens; the KV budget queues, refuses and is
reported (kv_cache_usage, the model server protocol's vllm:* names)."""
import json
import subprocess
import sys
import threading
import time

import pytest

from conftest import start_worker
from helpers import Router, llm_status, metric, metrics_text, post_json, post, sse_events, wait_until
from llm_fixture import MODELS, node_encode, node_encode_all, write_tiny_llm

B = 16   # LLM_PREFIX_BLOCK
N = 8    # tokens generated per request
K = 3    # top logprobs
TOL = 1e-4
HIST = ("The quick brown fox jumps over the lazy dog near the river bank, and then it rests. " * 6).strip()


def reference(repo, prompts):
    """numpy's greedy tokens and logprobs (cold: no cache) for each id list."""
    pj = repo.parent / f"pc_prompts_{abs(hash(json.dumps(prompts)))}.json"
    pj.write_text(json.dumps(prompts))
    r = subprocess.run([sys.executable, str(MODELS / "llm_reference.py"), "--logprobs", str(K),
                        str(repo / "tiny" / "1"), str(pj), str(N)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    repo = tmp_path_factory.mktemp("pcrepo")
    write_tiny_llm(repo / "tiny" / "1")
    return repo


@pytest.fixture(scope="module", params=["host", "bound"])
def w(request, repo, tmp_path_factory):
    wk = start_worker(repo, tmp_path_factory.mktemp("pc"),
                      env={"EXECUTION_MODE": "cpu", "TIERSERVE_LLM_KV": request.param,
                           "TIERSERVE_LLM_PREFIX_CACHE_SCOPE": "tenant"})
    yield wk
    assert wk.stop() == 0, wk.log_text()[-4000:]


def complete(w, prompt, tenant=None, sensitive=False, stream=False):
    headers = {}
    if tenant:
        headers["Tierserve-Tenant"] = tenant
    if sensitive:
        headers["Tierserve-Data-Class"] = "sensitive"
    body = {"model": "tiny", "prompt": prompt, "max_tokens": N, "temperature": 0, "logprobs": K}
    if stream:
        body.update(stream=True, stream_options={"include_usage": True})
        r = post(w, "/v1/completions", body, headers)
        assert r.status == 200, r.body[:500]
        evs = sse_events(r.body)
        assert evs[-1]["choices"] == [], evs[-1]
        return {"usage": evs[-1]["usage"], "lp": sum(((e["choices"][0].get("logprobs") or {}).get("token_logprobs", [])
                                                     for e in evs if e["choices"]), [])}
    code, _, a = post_json(w, "/v1/completions", body, headers)
    assert code == 200, a
    return a


def same_as_reference(a, ref_lp, what):
    """The answer's logprobs (one per generated token, the chosen token's) against numpy's."""
    got = a["choices"][0]["logprobs"]["token_logprobs"]
    want = [e["logprob"] for e in ref_lp]
    assert len(got) == len(want) > 0, (what, got, want)
    for i, (g, x) in enumerate(zip(got, want)):
        assert abs(g - x) <= TOL, f"{what}: token {i}: logprob {g} vs numpy {x}"
    tops = a["choices"][0]["logprobs"]["top_logprobs"]
    for i, (t, e) in enumerate(zip(tops, ref_lp)):
        assert sorted(t.values(), reverse=True)[0] == pytest.approx(e["top"][0][1], abs=TOL), (what, i)


def cached(a):
    return a["usage"]["prompt_tokens_details"]["cached_tokens"]


def expected_cached(prev_ids, prev_gen, ids):
    """Whole blocks ids shares with what the previous turn left: its prompt's and, at its end,
    its tokens whose KV was computed (all but the last generated one)."""
    left = (prev_ids + prev_gen)[:len(prev_ids) + len(prev_gen) - 1]
    common = 0
    while common < min(len(left), len(ids)) and left[common] == ids[common]:
        common += 1
    return min(common // B, (len(ids) - 1) // B) * B


def test_conversation_reuses_its_history_exactly(w, repo):
    t1 = HIST + " Question one:"
    ids1 = node_encode(t1, True)
    assert len(ids1) > 4 * B
    a1 = complete(w, t1, tenant="acme")
    assert cached(a1) == 0
    gen1 = a1["choices"][0]["text"]
    t2 = t1 + gen1 + " Question two: what happened next?"
    ids2 = node_encode(t2, True)
    ref = reference(repo, [ids1, ids2])
    same_as_reference(a1, ref["logprobs"][0], "turn 1")
    a2 = complete(w, t2, tenant="acme")
    want = expected_cached(ids1, ref["tokens"][0], ids2)
    assert want >= 4 * B, want
    assert cached(a2) == want, (cached(a2), want)
    assert a2["usage"]["prompt_tokens"] == len(ids2)
    same_as_reference(a2, ref["logprobs"][1], "turn 2, cached prefix")
    # the same turn cold (another tenant: nothing of acme's is reused) answers the same
    cold = complete(w, t2, tenant="globex")
    assert cached(cold) == 0
    same_as_reference(cold, ref["logprobs"][1], "turn 2, cold")
    assert cold["choices"][0]["text"] == a2["choices"][0]["text"]
    # and again for acme: the whole prompt but its last block's remainder
    again = complete(w, t2, tenant="acme")
    assert cached(again) == (len(ids2) - 1) // B * B
    same_as_reference(again, ref["logprobs"][1], "turn 2 again")


def test_a_changed_token_reuses_only_the_blocks_before_it(w, repo):
    ids = node_encode(HIST + " Variant:", True)
    base = complete(w, HIST + " Variant:", tenant="initech")
    assert cached(base) == 0
    # change one word in the third block: tokens before it are the same ids
    words = HIST.split(" ")
    prefixes = node_encode_all([" ".join(words[:i]) for i in range(len(words))], True)
    at = next(i for i, p in enumerate(prefixes) if len(p) > 2 * B + 4)
    words[at] = "zebra"
    text = " ".join(words) + " Variant:"
    ids2 = node_encode(text, True)
    first_diff = next(i for i, (x, y) in enumerate(zip(ids, ids2)) if x != y)
    assert 2 * B <= first_diff < 4 * B, first_diff
    a = complete(w, text, tenant="initech")
    assert cached(a) == first_diff // B * B
    ref = reference(repo, [ids2])
    same_as_reference(a, ref["logprobs"][0], "changed mid-prefix")


def test_sensitive_without_tenant_is_never_cached_and_stream_reports_it(w):
    text = HIST + " Sensitive:"
    for _ in range(2):
        assert cached(complete(w, text, sensitive=True)) == 0
    # a request that names no tenant is in the shared scope; the stream's usage chunk says so
    s1 = complete(w, text, stream=True)
    s2 = complete(w, text, stream=True)
    n = len(node_encode(text, True))
    assert s1["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    assert s2["usage"]["prompt_tokens_details"]["cached_tokens"] == (n - 1) // B * B
    assert s1["lp"] == pytest.approx(s2["lp"], abs=TOL)


def test_status_and_metrics(w):
    st = llm_status(w)
    pc = st["prefix_cache"]
    assert pc["scope"] == "tenant" and pc["block_tokens"] == B
    assert pc["hits"] > 0 and pc["lookups"] >= pc["hits"] and pc["cached_tokens"] == pc["hits"] * B
    assert 0 < pc["bytes"] <= pc["budget_bytes"] and pc["blocks"] * B * st["kv_bytes_per_token"] == pc["bytes"]
    assert pc["hit_rate"] == pytest.approx(pc["hits"] / pc["lookups"], abs=1e-6)
    assert st["kv_budget_bytes"] > 0 and st["kv_reserved_bytes"] == 0 and st["kv_cache_usage"] == 0
    text = metrics_text(w)
    lbl = dict(model="tiny", version="1")
    assert metric(text, "tierserve_prefix_cache_hits_total", required=True, **lbl) == pc["hits"]
    assert metric(text, "tierserve_prefix_cache_lookups_total", required=True, **lbl) == pc["lookups"]
    assert metric(text, "tierserve_prefix_cache_cached_tokens_total", required=True, **lbl) == pc["cached_tokens"]
    assert metric(text, "tierserve_prefix_cache_bytes", required=True, **lbl) == pc["bytes"]
    assert metric(text, "tierserve_kv_cache_budget_bytes", required=True, **lbl) == st["kv_budget_bytes"]
    assert metric(text, "tierserve_kv_cache_usage", required=True, **lbl) == 0
    for name in ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
                 "vllm:gpu_cache_usage_perc"):
        assert metric(text, name, required=True, model_name="tiny") == 0, name


@pytest.fixture(scope="module")
def per_tok(repo, tmp_path_factory):
    """What the worker says one token's KV takes (a worker started for the question, once)."""
    probe = start_worker(repo, tmp_path_factory.mktemp("probe"), env={"EXECUTION_MODE": "cpu"})
    try:
        return llm_status(probe)["kv_bytes_per_token"]
    finally:
        assert probe.stop() == 0


def test_small_cache_evicts_and_stays_correct(repo, tmp_path_factory, per_tok):
    """Room for 6 blocks: prompts of 6+ blocks each push the others out; every answer still
    equals numpy's cold one."""
    wk = start_worker(repo, tmp_path_factory.mktemp("pcs"),
                      env={"EXECUTION_MODE": "cpu", "TIERSERVE_LLM_PREFIX_CACHE_BYTES": str(6 * B * per_tok)})
    try:
        texts = [f"Story {k}: " + HIST for k in range(3)]
        ids = node_encode_all(texts, True)
        ref = reference(repo, ids)
        for rnd in range(2):
            for k, t in enumerate(texts):
                a = complete(wk, t)
                same_as_reference(a, ref["logprobs"][k], f"round {rnd} story {k} cached {cached(a)}")
        pc = llm_status(wk)["prefix_cache"]
        assert pc["evictions"] > 0 and pc["bytes"] <= 6 * B * per_tok, pc
    finally:
        assert wk.stop() == 0, wk.log_text()[-4000:]


def test_kv_budget_queues_refuses_and_reports(repo, tmp_path_factory, per_tok):
    """A budget of one sequence's cache: a second sequence waits for the first (usage 1.0
    meanwhile), one that could never fit is refused with 400, and with no queue room the 503
    names the KV budget (code kv_cache_full, Retry-After)."""
    n_prompt, maxt = 2, 2000   # "Hello": BOS + one token; 2000 of the 2048 context
    need = (n_prompt + maxt) * per_tok
    wk = start_worker(repo, tmp_path_factory.mktemp("kvb"),
                      env={"EXECUTION_MODE": "cpu", "TIERSERVE_LLM_KV_BUDGET_BYTES": str(need),
                           "TIERSERVE_LLM_QUEUE_SIZE": "1"})
    try:
        body = {"model": "tiny", "prompt": "Hello", "max_tokens": maxt, "temperature": 0}
        code, _, a = post_json(wk, "/v1/completions", dict(body, max_tokens=maxt + 1))
        assert code == 400 and "KV budget" in a["error"]["message"], a
        t0 = time.monotonic()
        code, _, solo = post_json(wk, "/v1/completions", body)
        solo_s = time.monotonic() - t0
        assert code == 200 and solo["usage"]["completion_tokens"] == maxt, solo["usage"]
        print(f"one sequence of {maxt} tokens: {solo_s:.2f} s")
        results = []
        ths = [threading.Thread(target=lambda: results.append(post_json(wk, "/v1/completions", body)))
               for _ in range(2)]
        # one at a time: with a queue of one, a second request that arrives before the engine
        # has taken the first from the queue would find it full (503 queue_full)
        ths[0].start()
        wait_until(lambda: llm_status(wk)["running"] == 1, timeout=60, what="the first sequence running")
        ths[1].start()
        st = wait_until(lambda: (lambda s: s if s["running"] == 1 and s["waiting"] == 1 else None)(llm_status(wk)),
                        timeout=60, what="one running, one waiting for KV memory")
        assert st["kv_cache_usage"] == 1.0 and st["kv_reserved_bytes"] == need
        r = post(wk, "/v1/completions", body)
        assert r.status == 503, r
        err = json.loads(r.body)["error"]
        assert err["code"] == "kv_cache_full" and "KV cache budget is full" in err["message"], err
        assert r.headers.get("Retry-After"), r.headers
        assert metric(wk, "vllm:num_requests_waiting", required=True, model_name="tiny") == 1
        for t in ths:
            t.join(120)
        assert [x.status for x in results] == [200, 200]
        assert results[0].body["choices"][0]["text"] == results[1].body["choices"][0]["text"]
    finally:
        assert wk.stop() == 0, wk.log_text()[-4000:]


def test_the_router_names_the_tenant(repo, tmp_path_factory):
    """Through the router (tenants named by X-Tenant, no keys), the worker scopes the cache by
    the tenant the router classified: acme's second request reuses acme's blocks, globex's
    reuses none of them; a sensitive acme request keeps to acme under scope shared too."""
    from test_router import pools_config
    tmp = tmp_path_factory.mktemp("pcrouter")
    wk = start_worker(repo, tmp, env={"EXECUTION_MODE": "cpu", "TIERSERVE_LLM_PREFIX_CACHE_SCOPE": "shared"})
    router = Router(pools_config([("cpu", "cpu", True, [wk.port], None)],
                                 "tenants:\n  - {name: acme}\n  - {name: globex}"), tmp)
    try:
        host, port = router.url.rsplit(":", 1)
        target = (host, int(port))
        text = HIST + " Routed:"
        n = len(node_encode(text, True))

        def ask(tenant, data_class="public"):
            body = {"model": "tiny", "prompt": text, "max_tokens": 2, "temperature": 0}
            code, _, a = post_json(target, "/v1/completions", body, {"X-Tenant": tenant, "X-Data-Class": data_class})
            assert code == 200, a
            return cached(a)

        # sensitive: kept to acme even under scope shared
        assert ask("acme", "sensitive") == 0
        assert ask("globex", "sensitive") == 0
        assert ask("acme", "sensitive") == (n - 1) // B * B
        # public under scope shared: one cache for both (the public blocks are new here)
        assert ask("acme") == 0
        assert ask("globex") == (n - 1) // B * B
    finally:
        assert router.stop() == 0
        assert wk.stop() == 0, wk.log_text()[-4000:]
