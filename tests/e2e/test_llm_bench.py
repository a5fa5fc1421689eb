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
    head = f"bench_llm: {REQUESTS} requests x {NEW} new tokens, prompt {PROMPT} tokens, tier cpu, intra-op threads "
    assert lines[0].startswith(head), out
    assert lines[1].startswith("host:  host: ") and lines[2].startswith("bound: host-bound: "), out
    assert "checked at load" in lines[2], out
    # the layout the session was opened with, measured at open as the worker does (issue 24),
    # then the table it was chosen from (one line per candidate, indented)
    assert re.match(r"layout: \d+ intra-op thread\(s\), spinning (on|off) \((measured|hardware): ", lines[3]), out
    table = [ln for ln in lines[4:] if ln.startswith("  ")]
    assert all(re.search(r"tokens/s", ln) for ln in table) and (not table or sum("<- chosen" in ln for ln in table) == 1), out
    rows = {}
    for line in lines[4 + len(table):]:
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


MT_ROW = re.compile(r"^(KV host|KV bound)\s+prefix cache (on|off)((?:\s+\| turn \d+ TTFT p50\s+" + NUM +
                    r" ms \(cached \d+ of \d+\))+)$")
MT_TURN = re.compile(r"turn (\d+) TTFT p50\s+" + NUM + r" ms \(cached (\d+) of (\d+)\)")


def test_bench_llm_multiturn_prints_turns_and_the_ratio(tmp_path):
    """--multiturn (issue 25's conversation): every turn's TTFT with the prefix cache off and
    on, on both KV paths; with it on, turns 2 and 3 reuse exactly the whole 16-token blocks
    of the conversation so far; the last lines give turn 3's ratio. Timing is not asserted."""
    model = write_tiny_llm(tmp_path / "tiny")
    hist, turns, new, user = 40, 3, 8, 8
    p = subprocess.run([str(BENCH), "--multiturn", str(model), str(hist), str(turns), str(new), str(user), "2"],
                       capture_output=True, timeout=300, env=dict(os.environ, EXECUTION_MODE="cpu", **sanitizer_env()))
    out, err = p.stdout.decode(), p.stderr.decode()
    assert p.returncode == 0, out + err
    lines = out.splitlines()
    assert lines[0].startswith("bench_llm --multiturn: 2 conversations, history 40 tokens, 3 turns"), out
    rows = [MT_ROW.match(x) for x in lines[1:5]]
    assert all(rows), out
    assert [(m.group(1), m.group(2)) for m in rows] == [("KV host", "off"), ("KV host", "on"),
                                                        ("KV bound", "off"), ("KV bound", "on")], out
    for m in rows:
        turns_seen = MT_TURN.findall(m.group(3))
        assert [int(t[0]) for t in turns_seen] == [1, 2, 3], m.group(0)
        for t, ms, cached, total in turns_seen:
            t, cached, total = int(t), int(cached), int(total)
            assert float(ms) > 0 and total == 1 + hist + (t - 1) * (new + user) + user, m.group(0)
            # turn t re-sends turn t-1's prompt and its answer, whose last token was never fed:
            # the blocks of all but that token are cached, the prompt's last token computed
            prev = 1 + hist + (t - 2) * (new + user) + user + new - 1 if t > 1 else 0
            want = min(prev // 16, (total - 1) // 16) * 16 if m.group(2) == "on" else 0
            assert cached == want, (m.group(0), t, cached, want)
    assert re.match(r"^KV host: turn 3 TTFT without / with the prefix cache = [\d.]+ / [\d.]+ ms = [\d.]+x$",
                    lines[5]), out
    assert lines[6].startswith("KV bound: turn 3 TTFT without / with the prefix cache = "), out
