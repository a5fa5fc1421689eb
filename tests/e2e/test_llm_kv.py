"""The LLM KV cache's two paths (TIERSERVE_LLM_KV=host|bound, docs/llm.md "The KV cache") on
the tiny generated decoder, over real sockets, no retries: greedy streams that join and
leave mid-batch (and one cut off mid-stream) give the same text as one at a time, on both
paths; the bound path frees a leaving sequence's memory at once; the status and the load
log say where the cache lives; a bad value is refused at start. The bound path checks itself
against the host path at load (src/llm/llm_check.c): a broken write-back
(TIERSERVE_FAULT_INJECT_KV_WRITEBACK) makes auto serve from the host path, loudly, and an
explicit bound refuse to load.
"""
import http.client
import json
import os
import socket
import subprocess
import sys
import time

import pytest

from conftest import BIN, sanitizer_env, start_worker
from helpers import llm_status, model_status, post, sse_next
from llm_fixture import write_tiny_llm
from test_llm_api import MODELS, N, PROMPT, node_decode, PROMPT_IDS

PROMPTS = ["Hello world", "Once upon a time, in a land far away, there lived a", "1 2 3",
           "The quick brown fox jumps over the lazy dog"]
LENS = [24, 5, 12, 9]


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    repo = tmp_path_factory.mktemp("kvrepo")
    write_tiny_llm(repo / "tiny" / "1")
    return repo


@pytest.fixture(scope="module", params=["host", "bound"])
def worker(request, repo, tmp_path_factory):
    w = start_worker(repo, tmp_path_factory.mktemp("kv"),
                     env={"EXECUTION_MODE": "cpu", "TIERSERVE_LLM_KV": request.param,
                          "TIERSERVE_LLM_MAX_SEQUENCES": "8"})
    w.kv = request.param
    yield w
    assert w.stop() == 0, w.log_text()[-4000:]


def body(prompt, n, stream=False):
    return json.dumps({"model": "tiny", "prompt": prompt, "max_tokens": n, "temperature": 0,
                       "stream": stream}).encode()


def complete(w, prompt, n):
    code, _, data = post(w, "/v1/completions", body(prompt, n))
    assert code == 200, data
    return json.loads(data)["choices"][0]["text"]


class Stream:
    """A streamed completion read event by event (http.client undoes the chunking)."""

    def __init__(self, w, prompt, n):
        self.c = http.client.HTTPConnection(w.host, w.port, timeout=60)
        self.c.request("POST", "/v1/completions", body=body(prompt, n, True),
                       headers={"Content-Type": "application/json"})
        self.r = self.c.getresponse()
        assert self.r.status == 200
        self.text, self.events, self.done = "", 0, False

    def read(self, events=None):
        """Reads `events` more text events (None: to the end)."""
        want = None if events is None else self.events + events
        while not self.done and (want is None or self.events < want):
            ev = sse_next(self.r)
            if ev is None:
                self.done = True
                break
            self.text += ev["choices"][0]["text"]
            self.events += 1
        return self

    def cut(self):
        self.c.sock.shutdown(socket.SHUT_RDWR)
        self.c.close()


def wait_idle(w, timeout=20):
    deadline = time.time() + timeout
    s = llm_status(w)
    while time.time() < deadline and s["running"]:
        time.sleep(0.05)
        s = llm_status(w)
    return s


def test_where_the_cache_lives(worker):
    s = llm_status(worker)
    want = "host" if worker.kv == "host" else "host-bound"  # the CPU tier: no device
    assert s["kv_cache"] == want and f"TIERSERVE_LLM_KV={worker.kv}" in s["kv_cache_note"]
    assert any("KV cache " + want in l.get("msg", "") for l in worker.log_lines())
    checked = "checked at load: 8 logits rows equal the host path's" in s["kv_cache_note"]
    assert checked == (worker.kv == "bound"), s["kv_cache_note"]
    # the check's runs are the LLM's warm-up; the host path runs none at load
    m = model_status(worker, "tiny")
    assert m["warmed_up"] == (worker.kv == "bound") and (m["warmup_ms"] > 0) == (worker.kv == "bound"), m


def greedy_reference(repo, tmp_path):
    pj = tmp_path / "p.json"
    pj.write_text(json.dumps([PROMPT_IDS]))
    r = subprocess.run([sys.executable, str(MODELS / "llm_reference.py"), str(repo / "tiny" / "1"), str(pj),
                        str(N)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return node_decode(json.loads(r.stdout)["tokens"][0])


def test_greedy_equals_numpy(worker, repo, tmp_path):
    assert complete(worker, PROMPT, N) == greedy_reference(repo, tmp_path)


def test_join_and_leave_mid_batch(worker):
    """Four streams join one after another while the earlier ones decode (different prompt
    lengths and max_tokens: the short ones leave while the others run), a fifth is cut off
    mid-stream; each text equals the same request run alone."""
    alone = [complete(worker, p, n) for p, n in zip(PROMPTS, LENS)]
    cut = Stream(worker, PROMPTS[1], 400).read(3)
    # a second long stream decodes until every short one has joined, so at least three run
    # together however fast the machine finishes the short ones
    hold = Stream(worker, PROMPTS[3], 400).read(3)
    streams = []
    for i, (p, n) in enumerate(zip(PROMPTS, LENS)):
        streams.append(Stream(worker, p, n).read(1 + i % 2))
        if i == 1:
            cut.cut()  # a disconnect cancels it between two steps of the others
    hold.cut()
    for s, want in zip(streams, alone):
        assert s.read().text == want
    s = wait_idle(worker)
    assert s["running"] == 0 and s["kv_cache_bytes"] == 0, s
    assert s["max_batch"] >= 3, s


def test_bad_setting_refused(repo, tmp_path):
    r = subprocess.run([BIN, f"--model-repository={repo}", "--llm-kv=device"], capture_output=True, text=True,
                       timeout=30)
    msg = [json.loads(l)["msg"] for l in r.stderr.splitlines() if l.startswith("{")]
    assert r.returncode == 64 and 'TIERSERVE_LLM_KV: "device" is not one of auto|host|bound' in " ".join(msg)


CHECK_FAILED = "path failed its check against the host path at load"


def test_broken_bound_path_falls_back_to_host(repo, tmp_path):
    """auto with a write-back that copies nothing: the load-time check catches it, the model
    serves from the host path (the right tokens), and the status and a warning say why."""
    w = start_worker(repo, tmp_path, env={"EXECUTION_MODE": "cpu", "TIERSERVE_LLM_KV": "auto",
                                          "TIERSERVE_FAULT_INJECT_KV_WRITEBACK": "1"})
    try:
        s = llm_status(w)
        assert s["kv_cache"] == "host", s
        assert s["kv_cache_note"].startswith("host (fallback): the host-bound " + CHECK_FAILED), s
        assert "of their scale (tolerance 0.001)" in s["kv_cache_note"], s
        assert any(l.get("level") == "warn" and CHECK_FAILED in l.get("msg", "") for l in w.log_lines())
        assert complete(w, PROMPT, N) == greedy_reference(repo, tmp_path)
    finally:
        assert w.stop() == 0, w.log_text()[-4000:]


def test_broken_bound_path_refused_when_bound(repo, tmp_path):
    r = subprocess.run([BIN, f"--model-repository={repo}"], capture_output=True, text=True, timeout=60,
                       env={**os.environ, **sanitizer_env(), "TIERSERVE_HTTP_ADDRESS": "127.0.0.1",
                            "TIERSERVE_HTTP_PORT": "0", "EXECUTION_MODE": "cpu", "TIERSERVE_LLM_KV": "bound",
                            "TIERSERVE_FAULT_INJECT_KV_WRITEBACK": "1"})
    msg = " ".join(json.loads(l)["msg"] for l in r.stderr.splitlines() + r.stdout.splitlines()
                   if l.startswith("{"))
    assert r.returncode != 0, msg
    assert "TIERSERVE_LLM_KV=bound: the KV cache path of the cpu tier failed its check against the host " \
           "path at load" in msg, msg


@pytest.mark.parametrize("kv", ["auto", "bound"])
def test_short_context_models_load_unchecked(tmp_path, kv):
    """The load-time check needs 8 tokens of context (its longest sequence). A model with
    less (5 and 7 here) must still load: auto serves it from the host path and says why,
    bound serves it bound and says it is unchecked; neither writes past the check's
    sequences (the ASan build runs this too). A short prompt then generates."""
    repo = tmp_path / "repo"
    for ctx in (5, 7):
        write_tiny_llm(repo / f"ctx{ctx}" / "1", context=ctx)
    w = start_worker(repo, tmp_path, env={"EXECUTION_MODE": "cpu", "TIERSERVE_LLM_KV": kv})
    try:
        code, _, body = w.http("GET", "/v2/status")
        assert code == 200
        models = {m["name"]: m for m in json.loads(body)["models"]}
        for ctx in (5, 7):
            m = models[f"ctx{ctx}"]
            assert m["ready"] and m["llm"]["context"] == ctx, m
            note = m["llm"]["kv_cache_note"]
            short = f"the context of {ctx} tokens is shorter than the check's 8"
            if kv == "auto":
                assert m["llm"]["kv_cache"] == "host" and note.startswith("host (fallback)") and short in note, note
            else:
                assert m["llm"]["kv_cache"] == "host-bound" and "not checked at load: " + short in note, note
            assert m["warmed_up"] is False, m
            c = http.client.HTTPConnection(w.host, w.port, timeout=30)
            c.request("POST", "/v1/completions", body=json.dumps(
                {"model": f"ctx{ctx}", "prompt": "Hi", "max_tokens": 2, "temperature": 0}).encode(),
                headers={"Content-Type": "application/json"})
            r = c.getresponse()
            data = r.read()
            c.close()
            assert r.status == 200, data
            assert json.loads(data)["usage"]["completion_tokens"] >= 1, data
    finally:
        assert w.stop() == 0, w.log_text()[-4000:]
