"""The prefill chunk (TIERSERVE_LLM_PREFILL_CHUNK): ORT writes a prefill Run()'s whole
[1, chunk, vocab] logits though only the last row is kept, so the default (0, auto) is the
longest chunk up to 512 whose logits fit 64 MiB, at least 16: 512 for the tiny model's
32000 FP32 logits (125 kB a row), 110 for Qwen3's 151936, 63 or 64 for Gemma-3's 262k.

- /v2/status's llm object shows `prefill_chunk` (and `prefill_runs`), the load log names it;
- with TIERSERVE_LLM_PREFILL_CHUNK=7 a 41-token prompt is prefilled in ceil(41/7) = 6 Run()s
  (auto: 1) and greedy output still equals numpy's (tests/models/llm_reference.py), decoded
  by tokenizers.js;
- values outside 0..8192 are refused at start (exit 64, naming the setting).
http.client, no retries."""
import http.client
import json
import math
import subprocess
import sys

import pytest

from conftest import BIN, sanitizer_env, start_worker
from helpers import llm_status
from llm_fixture import node_encode, write_tiny_llm
from test_llm_api import MODELS, node_decode

TEXT = ("Once upon a time, in a land far away, there lived a king who had three daughters, and the "
        "youngest of them was so beautiful that the sun itself, which has seen so much, was")
N = 16


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    r = tmp_path_factory.mktemp("prefill")
    write_tiny_llm(r / "tiny" / "1")
    return r


@pytest.fixture(scope="module")
def reference(repo, tmp_path_factory):
    ids = node_encode(TEXT, True)
    pj = tmp_path_factory.mktemp("prefill-ref") / "p.json"
    pj.write_text(json.dumps([ids]))
    r = subprocess.run([sys.executable, str(MODELS / "llm_reference.py"), str(repo / "tiny" / "1"), str(pj),
                        str(N)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return ids, node_decode(json.loads(r.stdout)["tokens"][0])


@pytest.fixture(scope="module", params=["auto", "7"])
def worker(request, repo, tmp_path_factory):
    env = {"EXECUTION_MODE": "cpu"}
    if request.param != "auto":
        env["TIERSERVE_LLM_PREFILL_CHUNK"] = request.param
    w = start_worker(repo, tmp_path_factory.mktemp("prefill-w"), env=env)
    w.chunk = 512 if request.param == "auto" else int(request.param)
    yield w
    assert w.stop() == 0, w.log_text()[-4000:]


def test_status_and_log_show_the_chunk(worker):
    assert llm_status(worker)["prefill_chunk"] == worker.chunk
    assert any(l.get("model") == "tiny" and f"prefill chunk {worker.chunk}" in l.get("msg", "")
               for l in worker.log_lines())


def test_greedy_equals_numpy_in_chunks(worker, reference):
    ids, want = reference
    assert len(ids) == 41, ids  # 41 = 5 chunks of 7 and one of 6
    before = llm_status(worker)["prefill_runs"]
    c = http.client.HTTPConnection(worker.host, worker.port, timeout=60)
    c.request("POST", "/v1/completions", body=json.dumps({"model": "tiny", "prompt": TEXT, "max_tokens": N,
                                                          "temperature": 0}).encode(),
              headers={"Content-Type": "application/json"})
    r = c.getresponse()
    out = json.loads(r.read())
    c.close()
    assert r.status == 200, out
    assert out["usage"]["prompt_tokens"] == len(ids)
    assert out["choices"][0]["text"] == want
    assert llm_status(worker)["prefill_runs"] - before == math.ceil(len(ids) / worker.chunk)


@pytest.mark.parametrize("value", ["-1", "8193", "x"])
def test_bad_values_refused(value):
    p = subprocess.run([BIN, "--model-repository=/nonexistent"], capture_output=True, text=True, timeout=30,
                       env={**sanitizer_env(), "TIERSERVE_LLM_PREFILL_CHUNK": value, "PATH": "/usr/bin:/bin"})
    assert p.returncode == 64, p.stderr
    msg = json.loads(p.stderr.strip().splitlines()[-1])["msg"]
    assert msg == f'bad settings: environment TIERSERVE_LLM_PREFILL_CHUNK: "{value}" is not an integer in [0, 8192]'
