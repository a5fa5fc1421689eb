"""The engine's scheduler (docs/llm.md "Prefill beside decoding", "Priority preemption"), on
the tiny decoder, with two slots:

- a prompt arriving while a stream decodes is prefilled in chunks of the step budget
  (TIERSERVE_LLM_STEP_TOKENS - the decoding ones), not in one Run(), and its greedy tokens
  and logprobs still equal numpy's one-shot prefill (tests/models/llm_reference.py); with the
  auto budget it is spread over several Run()s too; on the bound path the chunks copy no
  past (the prefill batch is kept across them: /v2/status kv_copy_bytes grows with the
  tokens, not with tokens x chunks);
- the same with the GroupQueryAttention variant of the decoder (gen_llm_model.py --gqa, as
  onnxruntime-genai writes it: same weights, so numpy's logprobs are the same): its chunks
  run in the sequence's own cache (past and present one buffer), its decode batches are
  right-padded, and both still equal numpy's;
- an urgent request arriving while batch-priority streams hold both slots preempts the later
  one (whose blocks, when whole, are reattached from the prefix cache): it gets its first
  token within a bound sized from its TTFT on the idle worker (measured here), the preempted
  stream resumes and completes with exactly the output it has alone (greedy, and seeded
  temperature sampling: its rng and penalty counts travel with it), and
  tierserve_llm_preemptions_total / status count it; slots free but the KV budget taken
  preempts too.
Both KV paths (host, bound; the bound one only under the sanitizers). http.client, no retries."""
import http.client
import json
import math
import statistics
import subprocess
import sys
import threading
import time

import pytest

from conftest import SANITIZED, start_worker
from helpers import llm_status, metric, post_json, sse_next
from llm_fixture import MODELS, node_encode, write_tiny_llm

LONG = ("The quick brown fox jumps over the lazy dog near the river bank, and then it rests. " * 7).strip()
K = 2
N = 8
TOL = 1e-4


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    r = tmp_path_factory.mktemp("sched")
    write_tiny_llm(r / "tiny" / "1")
    return r


# under the sanitizers (several times slower) the bound path only: it has the write-backs
@pytest.fixture(scope="module", params=["bound"] if SANITIZED else ["host", "bound"])
def w(request, repo, tmp_path_factory):
    wk = start_worker(repo, tmp_path_factory.mktemp("sched-w"),
                      env={"EXECUTION_MODE": "cpu", "TIERSERVE_LLM_KV": request.param,
                           "TIERSERVE_LLM_MAX_SEQUENCES": "2", "TIERSERVE_LLM_STEP_TOKENS": "5"})
    yield wk
    assert wk.stop() == 0, wk.log_text()[-4000:]


class Stream(threading.Thread):
    """One streamed /v1/completions request read as it comes: its text, the arrival time of
    each token event, and whether it ended with [DONE]."""

    def __init__(self, w, body, priority=None):
        super().__init__(daemon=True)
        self.w, self.body, self.priority = w, dict(body, stream=True), priority
        self.text, self.times, self.lp, self.done, self.error = "", [], [], False, None
        self.t0, self.conn, self.stopped, self.quiet = None, None, False, False

    def run(self):
        try:
            self.conn = c = http.client.HTTPConnection(self.w.host, self.w.port, timeout=60)
            headers = {"Content-Type": "application/json"}
            if self.priority:
                headers["X-Priority"] = self.priority
            self.t0 = time.monotonic()
            c.request("POST", "/v1/completions", body=json.dumps(self.body).encode(), headers=headers)
            r = c.getresponse()
            assert r.status == 200, r.read()[:300]
            while self.quiet is False and (ev := sse_next(r)) is not None:
                if ev["choices"]:
                    ch = ev["choices"][0]
                    self.text += ch["text"]
                    self.lp += (ch.get("logprobs") or {}).get("token_logprobs", [])
                    self.times.append(time.monotonic())
            while self.quiet and r.read(1 << 16):
                pass
            c.close()
            self.done = True
        except BaseException as e:  # noqa: BLE001 - reported by the test's join
            self.error = None if self.stopped else e

    def stop(self):
        """Hangs up (the worker cancels the sequence) and waits for the thread."""
        self.stopped = True
        if self.conn and self.conn.sock:
            self.conn.sock.shutdown(2)
        self.join(30)
        assert not self.is_alive()

    def ttft(self):
        return self.times[0] - self.t0

    def finish(self):
        self.join(60)
        assert not self.is_alive() and self.error is None and self.done, self.error


def wait_tokens(s, n, timeout=30):
    end = time.monotonic() + timeout
    while len(s.times) < n and s.is_alive() and time.monotonic() < end:
        time.sleep(0.002)
    assert len(s.times) >= n, (s.error, s.text)


def complete(w, body, priority=None):
    r = post_json(w, "/v1/completions", body, {"X-Priority": priority} if priority else None)
    assert r.status == 200, r.body
    return r.body


@pytest.fixture(scope="module")
def reference(repo):
    """LONG's ids and numpy's greedy logprobs for N tokens (prefilled in one go there)."""
    ids = node_encode(LONG, True)
    pj = repo / "sched_prompt.json"
    pj.write_text(json.dumps([ids]))
    r = subprocess.run([sys.executable, str(MODELS / "llm_reference.py"), "--logprobs", str(K),
                        str(repo / "tiny" / "1"), str(pj), str(N)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return ids, [e["logprob"] for e in json.loads(r.stdout)["logprobs"][0]]


# long enough to outlast whatever the test does beside it; cancelled by closing early
BACKGROUND = {"model": "tiny", "prompt": "Hello there", "max_tokens": 1500, "min_tokens": 1500,
              "temperature": 0}


def chunked_and_exact(w, reference, bound):
    """LONG prefilled beside a stream in 4-token chunks: logprobs equal numpy's; on the bound
    path the bytes copied between caches and batches stay linear in the tokens held."""
    ids, want = reference
    bg = Stream(w, BACKGROUND)
    bg.start()
    wait_tokens(bg, 3)
    before = llm_status(w)
    a = complete(w, {"model": "tiny", "prompt": LONG, "max_tokens": N, "temperature": 0, "logprobs": K})
    after = llm_status(w)
    assert bg.is_alive() and bg.error is None, "the stream beside it must still decode"
    bg_tokens = len(bg.times) + 8  # what its cache holds at most by now (its prompt is a few tokens)
    # one decoding stream: 5 - 1 = 4 prompt tokens between two decode steps
    assert a["usage"]["prompt_tokens"] == len(ids) > 100
    assert after["prefill_runs"] - before["prefill_runs"] == math.ceil(len(ids) / 4), (before, after)
    assert after["prefill_tokens"] - before["prefill_tokens"] == len(ids)
    got = a["choices"][0]["logprobs"]["token_logprobs"]
    assert len(got) == len(want)
    for i, (g, x) in enumerate(zip(got, want)):
        assert abs(g - x) <= TOL, f"token {i}: logprob {g} vs numpy {x} (one-shot prefill)"
    if bound:
        # the chunks' write-backs (the prompt once) and the decode batch rebuilt when the
        # prompt joins and leaves (both caches, twice): a few times the tokens held. Copying
        # each chunk's past again would be sum(4k) over the chunks: ~20x the prompt.
        copied = (after["kv_copy_bytes"] - before["kv_copy_bytes"]) / after["kv_bytes_per_token"]
        assert copied <= 3 * (len(ids) + N + bg_tokens), (copied, len(ids), bg_tokens)
    bg.stop()


def test_prefill_beside_a_stream_is_chunked_and_exact(w, reference, request):
    chunked_and_exact(w, reference, request.node.callspec.params["w"] == "bound")


@pytest.fixture(scope="module")
def gqa_repo(tmp_path_factory):
    r = tmp_path_factory.mktemp("sched-gqa")
    write_tiny_llm(r / "tiny" / "1", variant=["--gqa"])
    return r


@pytest.fixture(scope="module", params=["bound"] if SANITIZED else ["host", "bound"])
def wg(request, gqa_repo, tmp_path_factory):
    wk = start_worker(gqa_repo, tmp_path_factory.mktemp("sched-gqa-w"),
                      env={"EXECUTION_MODE": "cpu", "TIERSERVE_LLM_KV": request.param,
                           "TIERSERVE_LLM_MAX_SEQUENCES": "2", "TIERSERVE_LLM_STEP_TOKENS": "5"})
    yield wk
    assert wk.stop() == 0, wk.log_text()[-4000:]


def test_gqa_decoder_chunked_in_place_and_exact(wg, reference, request):
    """The same weights behind GroupQueryAttention: numpy's logprobs for the same prompt."""
    bound = request.node.callspec.params["wg"] == "bound"
    if bound:
        assert "checked at load" in llm_status(wg)["kv_cache_note"]
    chunked_and_exact(wg, reference, bound)


TOGETHER = ["The quick brown fox", "Once upon a time, in a land far away"]  # no EOS in 200 greedy tokens
TOGETHER_N = 200


def test_gqa_batch_decoded_in_place_past_its_room(wg, gqa_repo):
    """Two greedy streams decode side by side for 200 tokens. On the bound path a
    GroupQueryAttention decoder's batch is decoded in place (each past bound as its own
    present) with room for max(64, half its longest row) more slots, so with rows of 5 and 11
    prompt tokens it runs out of room and is built again twice while both rows live (at 76
    and 141 slots), the tokens decoded since first moved into the caches: every
    logprob of both still equals numpy's for its prompt alone. Idle again, the worker holds no
    KV memory (the batch's kept memory included)."""
    prompts = [node_encode(t, True) for t in TOGETHER]
    pj = gqa_repo / "together.json"
    pj.write_text(json.dumps(prompts))
    r = subprocess.run([sys.executable, str(MODELS / "llm_reference.py"), "--logprobs", "1",
                        str(gqa_repo / "tiny" / "1"), str(pj), str(TOGETHER_N)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    ref = json.loads(r.stdout)
    # the best and second-best logits never closer than the error allowed: no choice can flip
    assert ref["min_margin"] > 1e-4, ref["min_margin"]
    streams = [Stream(wg, {"model": "tiny", "prompt": t, "max_tokens": TOGETHER_N, "min_tokens": TOGETHER_N,
                           "temperature": 0, "logprobs": 1}) for t in TOGETHER]
    for s in streams:
        s.start()
    for s in streams:
        s.finish()
    for k, s in enumerate(streams):
        want = [e["logprob"] for e in ref["logprobs"][k]]
        assert len(s.lp) == len(want) == TOGETHER_N, (len(s.lp), len(want))
        for i, (g, x) in enumerate(zip(s.lp, want)):
            assert abs(g - x) <= TOL, f"stream {k} token {i}: logprob {g} vs numpy {x}"
    # the memory the batch kept between its builds goes when nothing decodes
    end = time.monotonic() + 10
    while (st := llm_status(wg))["kv_cache_bytes"] and time.monotonic() < end:
        time.sleep(0.05)
    assert st["running"] == 0 and st["kv_cache_bytes"] == 0, st


def test_auto_budget_spreads_a_prompt_beside_a_stream(repo, tmp_path_factory, reference):
    """The auto budget (measured decode step, chunks sized from it) splits the prompt, and
    the prompt's greedy logprobs still equal numpy's one-shot prefill."""
    ids, want = reference
    wk = start_worker(repo, tmp_path_factory.mktemp("sched-auto"),
                      env={"EXECUTION_MODE": "cpu", "TIERSERVE_LLM_MAX_SEQUENCES": "2"})
    try:
        bg = Stream(wk, BACKGROUND)
        bg.start()
        wait_tokens(bg, 20)  # the decode step is measured
        before = llm_status(wk)
        a = complete(wk, {"model": "tiny", "prompt": LONG, "max_tokens": N, "temperature": 0, "logprobs": K})
        after = llm_status(wk)
        assert bg.is_alive(), "the stream beside it must still decode"
        # alone it is one Run() (the chunk is 512)
        assert after["prefill_runs"] - before["prefill_runs"] > 1, (before, after)
        assert after["prefill_tokens"] - before["prefill_tokens"] == len(ids)
        got = a["choices"][0]["logprobs"]["token_logprobs"]
        assert len(got) == len(want)
        for i, (g, x) in enumerate(zip(got, want)):
            assert abs(g - x) <= TOL, f"token {i}: logprob {g} vs numpy {x} (one-shot prefill)"
        bg.stop()
    finally:
        assert wk.stop() == 0, wk.log_text()[-4000:]


@pytest.mark.parametrize("mode", ["greedy", "seeded", "cached"])
def test_urgent_preempts_and_the_batch_stream_resumes_unchanged(w, mode, reference):
    # the reading threads hand the GIL over often, so the urgent one's times are its own
    old = sys.getswitchinterval()
    sys.setswitchinterval(0.0005)
    try:
        preempt_once(w, mode, len(reference[0]))
    finally:
        sys.setswitchinterval(old)


def preempt_once(w, mode, long_tokens):
    n = 150 if SANITIZED else 400
    victim = {"model": "tiny", "prompt": "Once upon a time", "max_tokens": n, "min_tokens": n, "temperature": 0}
    if mode == "seeded":
        # top_k: a draw near a boundary of the cumulative probabilities could flip on the
        # last bits of the logits (the recomputed KV comes from a prefill Run(), not from
        # the decode steps, and a near-uniform random model has 32000 tiny probabilities)
        victim.update(temperature=0.9, top_k=8, seed=1234, frequency_penalty=0.5, presence_penalty=0.3)
    if mode == "cached":  # whole blocks: it resumes from the prefix cache, recomputing the rest
        victim.update(prompt=LONG)
    urgent = {"model": "tiny", "prompt": "Tell me quickly:", "max_tokens": 2, "temperature": 0}
    alone = Stream(w, victim, "batch")
    alone.start()
    alone.finish()
    idle = []
    for _ in range(3):
        u = Stream(w, urgent, "urgent")
        u.start()
        u.finish()
        idle.append(u.ttft())
    alone_s = alone.times[-1] - alone.times[0]  # its n - 1 decode steps
    n0 = llm_status(w)["preemptions"]
    m0 = metric(w, "tierserve_llm_preemptions_total", model="tiny", version="1", required=True)
    filler = Stream(w, BACKGROUND, "batch")
    filler.start()
    wait_tokens(filler, 2)
    filler.quiet = True  # this thread's reading must not hold the GIL from the ones timed
    v = Stream(w, victim, "batch")
    v.start()
    wait_tokens(v, 3)
    hits = llm_status(w)["prefix_cache"]["hits"]
    u = Stream(w, urgent, "urgent")
    u.start()
    u.finish()
    v.finish()
    filler.stop()
    # the urgent one waited for a step and a preemption, not for a stream to end (about
    # alone_s); 2x the idle TTFT is the target (bench_llm --urgent measures it), the
    # rest is this shared machine's noise (a time slice is milliseconds when it is loaded)
    bound = 2 * statistics.median(idle) + alone_s / 3
    assert u.ttft() <= bound, (u.ttft(), idle, alone_s)
    assert llm_status(w)["preemptions"] - n0 == 1
    assert metric(w, "tierserve_llm_preemptions_total", model="tiny", version="1") - m0 == 1
    assert v.text == alone.text, "the preempted stream must go on exactly as it would have"
    assert len(v.times) == len(alone.times)
    if mode == "cached":  # its prompt's blocks at least (the cache holds them from its prefill too)
        assert llm_status(w)["prefix_cache"]["hits"] - hits >= long_tokens // 16


def test_urgent_preempts_when_the_kv_budget_is_taken(w, repo, tmp_path_factory, request):
    """Slots free, KV budget not: the urgent request still preempts the batch one, which
    then completes with its own output (a worker of its own, on the default KV path)."""
    if request.node.callspec.params["w"] != "bound":
        pytest.skip("once is enough: its worker takes the default KV path")
    per_token = llm_status(w)["kv_bytes_per_token"]
    batch = {"model": "tiny", "prompt": "Once upon a time", "max_tokens": 200, "min_tokens": 200, "temperature": 0}
    urgent = {"model": "tiny", "prompt": "Tell me quickly:", "max_tokens": 8, "temperature": 0}
    alone = complete(w, batch)
    n_batch = alone["usage"]["prompt_tokens"] + 200
    # room for the batch sequence's cache and 4 tokens more: the urgent one needs 8 + its prompt
    wk = start_worker(repo, tmp_path_factory.mktemp("sched-kv"),
                      env={"EXECUTION_MODE": "cpu", "TIERSERVE_LLM_MAX_SEQUENCES": "4",
                           "TIERSERVE_LLM_KV_BUDGET_BYTES": str(per_token * (n_batch + 4))})
    try:
        v = Stream(wk, batch, "batch")
        v.start()
        wait_tokens(v, 3)
        u = complete(wk, urgent, "urgent")
        v.finish()
        assert llm_status(wk)["preemptions"] == 1
        assert u["usage"]["completion_tokens"] == 8
        assert v.text == alone["choices"][0]["text"]
    finally:
        assert wk.stop() == 0, wk.log_text()[-4000:]
