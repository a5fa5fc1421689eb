"""The tokenizer's memory on one huge pre-tokenized piece: BPE on a prompt of random letters
(Llama-2's tokenizer: the whole prompt is one piece) holds a node and candidate merges per
byte of it, on a decode thread. Packed (12-byte nodes, 8-byte candidates, at most 2 per
byte) the worker's peak grows about 21 bytes per prompt byte for the whole request (body,
JSON, prompt and BPE); with 20-byte nodes and 24-byte candidates it grew about 42 (83 MB for
2 MB). The bound here is 30. The peak is reset (/proc/PID/clear_refs 5) before the request
and read after it. The model has a context of 131072, so the 2 MB prompt is tokenized in full
before it is refused. Under ASan (its own allocator) only the answer is checked."""
import http.client
import json
import random

import pytest

from conftest import SANITIZED, start_worker
from helpers import rss_kb
from llm_fixture import write_tiny_llm

MB = 2
BOUND = 30  # bytes of peak growth per prompt byte


@pytest.fixture(scope="module")
def worker(tmp_path_factory):
    repo = tmp_path_factory.mktemp("tokmem")
    write_tiny_llm(repo / "big" / "1", context=131072)
    w = start_worker(repo, tmp_path_factory.mktemp("tokmem-w"), env={"EXECUTION_MODE": "cpu"})
    yield w
    assert w.stop() == 0, w.log_text()[-4000:]


def test_bpe_peak_memory_per_byte(worker):
    rng = random.Random(11)
    n = (1 if SANITIZED else MB) << 20
    text = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(n))
    body = json.dumps({"model": "big", "prompt": text, "max_tokens": 1}).encode()
    pid = worker.proc.pid
    with open(f"/proc/{pid}/clear_refs", "w") as f:
        f.write("5")  # the peak RSS starts again from the current RSS
    before = rss_kb(pid, peak=True)
    c = http.client.HTTPConnection(worker.host, worker.port, timeout=120)
    c.request("POST", "/v1/completions", body=body, headers={"Content-Type": "application/json"})
    r = c.getresponse()
    out = json.loads(r.read())
    c.close()
    assert r.status == 400 and out["error"]["code"] == "context_length_exceeded", out
    grew = (rss_kb(pid, peak=True) - before) * 1024
    print(f"peak grew {grew / 2**20:.0f} MB for a {n >> 20} MB prompt: {grew / n:.1f} bytes a byte")
    if not SANITIZED:
        assert grew < BOUND * n, (grew / n)
