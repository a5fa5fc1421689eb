"""A decoder without a position_ids input (tests/models/gen_llm_model.py --no-position-ids:
the graph derives its positions from the past's length) served by the real worker, over
real sockets, no retries: the worker says at load, once, that it never batches it, and
/v2/status's llm object shows batch_limit 1 with the reason; the bound KV path passes its
load-time check on it (so auto keeps the bound path); concurrent requests run one sequence
per decode Run() and each gives the text of the same request alone. The numbers themselves
(alone and concurrent against numpy, both KV paths) are llm_generation's
(tests/llm/gen_check.py).
"""
import http.client
import json
import subprocess
import sys
import threading

import pytest

from conftest import start_worker
from helpers import llm_status, sse_next
from llm_fixture import MODELS

PROMPTS = ["Hello world", "Once upon a time, in a land far away, there lived a", "1 2 3"]
N = 400  # never reaches eos on these prompts: each stream runs long enough to overlap the next


@pytest.fixture(scope="module")
def worker(tmp_path_factory):
    repo = tmp_path_factory.mktemp("noposrepo")
    r = subprocess.run([sys.executable, str(MODELS / "gen_llm_model.py"), str(repo / "tiny" / "1"),
                        "--no-position-ids"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    w = start_worker(repo, tmp_path_factory.mktemp("nopos"),
                     env={"EXECUTION_MODE": "cpu", "TIERSERVE_LLM_MAX_SEQUENCES": "4"})
    yield w
    assert w.stop() == 0, w.log_text()[-4000:]


def request(w, prompt, stream):
    c = http.client.HTTPConnection(w.host, w.port, timeout=60)
    c.request("POST", "/v1/completions", headers={"Content-Type": "application/json"},
              body=json.dumps({"model": "tiny", "prompt": prompt, "max_tokens": N, "temperature": 0,
                               "stream": stream}).encode())
    r = c.getresponse()
    assert r.status == 200, r.read()
    return c, r


def complete(w, prompt):
    c, r = request(w, prompt, False)
    text = json.loads(r.read())["choices"][0]["text"]
    c.close()
    return text


def read_events(r, k=None):
    """Text of the next k events of a stream (None: to [DONE])."""
    text, n = "", 0
    while k is None or n < k:
        ev = sse_next(r)
        if ev is None:
            assert k is None, "the stream ended early"
            break
        text += ev["choices"][0]["text"]
        n += 1
    return text


def test_said_at_load_and_in_status(worker):
    s = llm_status(worker)
    assert s["batch_limit"] == 1, s
    assert "no position_ids" in s["batch_note"] and "never batched" in s["batch_note"], s
    said = [l for l in worker.log_lines() if "never batched" in l.get("msg", "")]
    assert len(said) == 1 and said[0]["level"] == "warn", said
    # the bound path's load-time check drives such a model one sequence per Run() too: it
    # passes, so auto keeps the bound path instead of falling back to the host path
    assert s["kv_cache"] == "host-bound" and "checked at load" in s["kv_cache_note"], s


def test_concurrent_streams_equal_alone_never_batched(worker):
    """Each stream joins after the one before has sent its first event (so they decode at
    the same time); each text equals the same request alone; no decode Run() carried two."""
    alone = [complete(worker, p) for p in PROMPTS]
    open_ = []
    for p in PROMPTS:
        c, r = request(worker, p, True)
        open_.append((c, r, read_events(r, 1)))
        if len(open_) == 2:
            assert llm_status(worker)["running"] >= 2
    got = []
    for c, r, first in open_:
        got.append(first + read_events(r))
        c.close()
    assert got == alone
    s = llm_status(worker)
    assert s["max_batch"] == 1, s
