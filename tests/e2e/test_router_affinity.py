"""Prefix-aware routing (docs/router.md "Prefix affinity"): a conversation's turns, sent through
the real router to real workers serving the tiny random-weight decoder, land where their
history is in the worker's prefix cache.

The fleet: a "GPU" pool of three workers (CPU tier behind min_tier cpu: no GPU here) and a
CPU pool of one that may take sensitive data. Two routers in front of the same workers, one
with affinity on (the default), one with `affinity.enabled: false`, each given conversations
of its own (each opens with its own words, so no conversation reuses another's blocks).

What is held:
- with affinity, every later turn reuses the whole previous turn's prompt (the worker's
  `usage.prompt_tokens_details.cached_tokens` covers its whole blocks), every turn of a conversation goes to
  one backend, the conversations spread over more than one, and the router counts each try
  an affinity `hit` (status and metrics);
- the router counts the workers' real reuse: per pool, the prompt tokens and the
  `cached_tokens` the workers reported (a non-stream reply's Tierserve-Usage head, a stream's
  accounting line: half the conversations stream), equal to the sums of what the clients got;
- without it, the same kind of traffic reuses its previous turn far less often (the pool's
  least-loaded choice spreads the turns), and nothing is counted as placed by key (the real
  cached tokens are still counted: fewer);
- a sensitive conversation still goes to the CPU pool, turn after turn: the policy's pin comes
  before affinity.
"""
import random
import threading
import time

import pytest

from conftest import start_worker
from helpers import Router, metric, post, post_json, sse_events, wait_until
from llm_fixture import write_tiny_llm
from test_router import pools_config

CONVS = 8    # conversations per router
TURNS = 5
B = 16       # the worker's prefix-cache block (LLM_PREFIX_BLOCK)
WORDS = ("order parcel refund invoice courier address delay warranty screen battery charger "
         "keyboard account password upgrade plan").split()


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    repo = tmp_path_factory.mktemp("affrepo")
    write_tiny_llm(repo / "tiny" / "1")
    tmp = tmp_path_factory.mktemp("aff")
    env = {"EXECUTION_MODE": "cpu", "TIERSERVE_LLM_PREFIX_CACHE_SCOPE": "tenant"}
    ws = [start_worker(repo, tmp, env=env, wait_ready=False) for _ in range(4)]
    for w in ws:
        assert wait_until(lambda: w.port and w.http("GET", "/v2/health/ready")[0] == 200, timeout=60,
                          what="worker ready"), w.log_text()[-3000:]
    gpu, cpu = ws[:3], ws[3]
    pools = [("gpu", "gpu", False, [w.port for w in gpu], None, "cpu"), ("cpu", "cpu", True, [cpu.port], None)]
    on = Router(pools_config(pools), tmp)
    off = Router(pools_config(pools, "affinity:\n  enabled: false"), tmp)
    for r in (on, off):
        r.wait_healthy(4)
    yield gpu, cpu, on, off
    for r in (on, off):
        assert r.stop() == 0
    for w in ws:
        assert w.stop() == 0, w.log_text()[-4000:]


def opening(rng, tag):
    """A first message of ~70 tokens that starts with words of its own."""
    return f"{tag}: " + " ".join(rng.choice(WORDS) for _ in range(60))


def run_conversations(router, tag, seed, headers=None):
    """CONVS conversations of TURNS turns, interleaved one request at a time in a shuffled
    order of conversations per round; the odd ones stream (with the usage chunk asked for).
    Returns per conversation its turns as (prompt_tokens, cached_tokens, pool, backend)."""
    rng = random.Random(seed)
    convs = [[{"role": "user", "content": opening(rng, f"{tag} {c}")}] for c in range(CONVS)]
    seen = [[] for _ in range(CONVS)]
    for turn in range(TURNS):
        order = list(range(CONVS))
        rng.shuffle(order)
        for c in order:
            body = {"model": "tiny", "messages": convs[c], "max_tokens": 6, "temperature": 0}
            if c % 2:
                body.update(stream=True, stream_options={"include_usage": True})
                code, h, raw = post(router, "/v1/chat/completions", body, headers)
                assert code == 200, raw
                evs = sse_events(raw)
                text = "".join(ch["delta"].get("content") or "" for e in evs for ch in e["choices"])
                a = {"usage": evs[-1]["usage"], "choices": [{"message": {"content": text}}]}
            else:
                code, h, a = post_json(router, "/v1/chat/completions", body, headers)
                assert code == 200, a
            u = a["usage"]
            seen[c].append((u["prompt_tokens"], u["prompt_tokens_details"]["cached_tokens"],
                            h["X-Tierrouter-Pool"], h["X-Tierrouter-Backend"]))
            # a follow-up longer than a block: a backend that holds only an earlier turn cannot
            # cover the previous turn's prompt
            follow = "And what about " + " ".join(rng.choice(WORDS) for _ in range(20)) + "?"
            convs[c] = convs[c] + [{"role": "assistant", "content": a["choices"][0]["message"]["content"]},
                                   {"role": "user", "content": follow}]
    return seen


def reused_previous(turns):
    """Later turns whose cached tokens cover the previous turn's prompt (its whole blocks: the
    worker keeps them, and the answer's, when a turn ends)."""
    return sum(cached >= (prev - 1) // B * B for (prev, _, _, _), (_, cached, _, _) in zip(turns, turns[1:]))


def test_turns_land_where_their_history_is_cached(fleet):
    gpu, cpu, on, off = fleet
    later = CONVS * (TURNS - 1)
    with_aff = run_conversations(on, "alpha", 1)
    without = run_conversations(off, "omega", 2)
    hits_on = sum(reused_previous(t) for t in with_aff)
    hits_off = sum(reused_previous(t) for t in without)
    print(f"later turns reusing the previous turn's prompt: with affinity {hits_on}/{later}, "
          f"without {hits_off}/{later}")
    for turns in with_aff + without:
        assert turns[0][0] >= 4 * B and all(p == "gpu" for _, _, p, _ in turns), turns
    # with affinity: one backend per conversation, and the history is there every time
    for turns in with_aff:
        assert len({b for _, _, _, b in turns}) == 1, turns
    assert hits_on == later, with_aff
    assert len({t[0][3] for t in with_aff}) >= 2, "every conversation on one backend: the key ignores the prefix?"
    # without: the turns wander (about 1 in 3 lands where the previous one did)
    assert hits_off <= 0.6 * later, (hits_on, hits_off, without)
    # the router's counts: every try of the affinity router went home
    st = {p["name"]: p["affinity"] for p in on.status()["pools"]}
    assert st["gpu"] == {"hit": CONVS * TURNS, "miss": 0, "overflow": 0}, st
    assert on.status()["affinity"]["enabled"] is True
    assert metric(on, "tierrouter_affinity_requests_total", pool="gpu", result="hit") == CONVS * TURNS
    assert {p["name"]: p["affinity"]["hit"] for p in off.status()["pools"]} == {"gpu": 0, "cpu": 0}
    assert off.status()["affinity"]["enabled"] is False
    # the real reuse, as the workers reported it to each router: the sums the clients saw
    cached = {}
    for r, seen in ((on, with_aff), (off, without)):
        want_p = sum(p for turns in seen for p, _, _, _ in turns)
        want_c = sum(c for turns in seen for _, c, _, _ in turns)
        got = {p["name"]: p["prefix"] for p in r.status()["pools"]}
        assert got["gpu"]["prompt_tokens"] == want_p and got["gpu"]["cached_tokens"] == want_c, (got, want_p, want_c)
        assert got["gpu"]["hit_rate"] == pytest.approx(want_c / want_p, abs=1e-6)
        assert got["cpu"] == {"prompt_tokens": 0, "cached_tokens": 0, "hit_rate": 0}, got
        assert metric(r, "tierrouter_prefix_cached_tokens_total", pool="gpu") == want_c
        assert metric(r, "tierrouter_prefix_prompt_tokens_total", pool="gpu") == want_p
        cached[r] = want_c
    print(f"cached prompt tokens: with affinity {cached[on]}, without {cached[off]}")
    assert cached[on] > 0 and cached[off] < 0.8 * cached[on], cached


def test_a_sensitive_conversation_stays_on_the_cpu_pool(fleet):
    gpu, cpu, on, off = fleet
    before = on.status()
    hits = {p["name"]: p["affinity"]["hit"] for p in before["pools"]}
    seen = run_conversations(on, "secret", 3, headers={"X-Data-Class": "sensitive"})
    for turns in seen:
        assert all(p == "cpu" and b.endswith(f":{cpu.port}") for _, _, p, b in turns), turns
        assert reused_previous(turns) == TURNS - 1, turns
    after = {p["name"]: p["affinity"]["hit"] for p in on.status()["pools"]}
    assert after["cpu"] - hits["cpu"] == CONVS * TURNS and after["gpu"] == hits["gpu"], (hits, after)


def test_concurrent_requests_of_one_prefix_overflow_within_the_bound(fleet):
    """Many requests of one prefix at once: the home takes what the load bound allows, the
    rest walks on to the next backends (counted `overflow`). Each request is made long enough,
    from one measured here, that the burst is in flight together."""
    gpu, cpu, on, off = fleet
    msgs = [{"role": "user", "content": opening(random.Random(9), "burst")}]
    t0 = time.monotonic()
    code, _, _ = post_json(on, "/v1/chat/completions", {"model": "tiny", "messages": msgs, "max_tokens": 16,
                                                        "temperature": 0, "ignore_eos": True})
    assert code == 200
    per_token = (time.monotonic() - t0) / 16
    body = {"model": "tiny", "messages": msgs, "temperature": 0, "ignore_eos": True,
            "max_tokens": max(16, min(1500, int(0.5 / per_token)))}
    before = {p["name"]: p["affinity"] for p in on.status()["pools"]}["gpu"]
    start = threading.Barrier(12)
    replies = []

    def one():
        start.wait()
        code, h, _ = post_json(on, "/v1/chat/completions", body)
        replies.append((code, h["X-Tierrouter-Backend"]))
    threads = [threading.Thread(target=one) for _ in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [c for c, _ in replies] == [200] * 12
    after = {p["name"]: p["affinity"] for p in on.status()["pools"]}["gpu"]
    placed = {k: after[k] - before[k] for k in after}
    print("burst of 12:", placed, "backends used:", len({b for _, b in replies}))
    assert placed["hit"] + placed["overflow"] == 12 and placed["miss"] == 0, placed
    assert placed["hit"] >= 1 and placed["overflow"] >= 1, placed
    assert len({b for _, b in replies}) >= 2, replies
