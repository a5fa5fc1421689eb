"""bench_llm (bench/llm.c, docs/llm.md "Speed") still runs (issue 11, W8): a smoke run on the
tiny generated decoder with a few requests of a few tokens (about a second), checking that it
prints its header, both KV notes, the one-at-a-time baseline and the host and bound rows at
c=1, 4 and 16, each with TTFT p50/p95, ITL p50/p95 and tokens/s positive, every request's
tokens made and a largest batch that fits the concurrency. No timing is asserted: the figures
only have to be there and make sense."""
import os
import pathlib
import re
import subprocess

from conftest import BIN, SANITIZER_MARKERS, sanitizer_env
from llm_fixture import write_tiny_llm

BENCH = pathlib.Path(BIN).with_name("bench_llm")
REQUESTS, NEW, PROMPT = 16, 8, 8

NUM = r"(\d+(?:\.\d+)?)"
ROW = re.compile(r"^(one at a time \(1 slot\) bound|batching, KV host|batching, KV bound)\s+c=(\d+)\s+"
                 rf"TTFT p50\s+{NUM} ms p95\s+{NUM} ms \| ITL p50\s+{NUM} ms p95\s+{NUM} ms \|\s+{NUM} tok/s"
                 rf" \| (\d+) tokens in {NUM} s, largest batch (\d+)$")


def test_bench_llm_prints_every_row_with_positive_figures(tmp_path):
    assert BENCH.is_file(), f"{BENCH} is not built"
    model = write_tiny_llm(tmp_path / "tiny")
    p = subprocess.run([str(BENCH), str(model), str(REQUESTS), str(NEW), str(PROMPT)], capture_output=True,
                       timeout=300, env=dict(os.environ, EXECUTION_MODE="cpu", **sanitizer_env()))
    out, err = p.stdout.decode(), p.stderr.decode()
    assert p.returncode == 0, out + err
    for m in SANITIZER_MARKERS:
        assert m not in err, err
    lines = out.splitlines()
    assert lines[0] == f"bench_llm: {REQUESTS} requests x {NEW} new tokens, prompt {PROMPT} tokens, tier cpu", out
    assert lines[1].startswith("host:  host: ") and lines[2].startswith("bound: host-bound: "), out
    assert "checked at load" in lines[2], out
    rows = {}
    for line in lines[3:]:
        m = ROW.match(line)
        assert m, f"unexpected line: {line!r}"
        label, conc = m.group(1), int(m.group(2))
        assert (label, conc) not in rows, line
        rows[(label, conc)] = m
    want = {("one at a time (1 slot) bound", 16)} | {
        (f"batching, KV {kv}", c) for kv in ("host", "bound") for c in (1, 4, 16)}
    assert set(rows) == want, out
    for (label, conc), m in rows.items():
        ttft50, ttft95, itl50, itl95, rate = (float(m.group(i)) for i in range(3, 8))
        tokens, wall, batch = int(m.group(8)), float(m.group(9)), int(m.group(10))
        assert 0 < ttft50 <= ttft95 and 0 < itl50 <= itl95 and rate > 0, m.group(0)
        assert tokens == REQUESTS * NEW and wall >= 0, m.group(0)  # ignore_eos: every token made
        slots = 1 if label.startswith("one at a time") else conc
        assert 1 <= batch <= slots, m.group(0)
