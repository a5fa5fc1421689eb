#!/usr/bin/python3
"""An LLM's default layout against explicit thread settings (issue 24's target: the defaults
within 10 % of the best explicit setting at c=1 and at c=16).

    /usr/bin/python3 bench/llm_layout.py BUILD_DIR MODELDIR [--runs N] [--requests R] [--tokens T]

Runs `bench_llm --layout` (bound KV path, tokens/s at c=1 and c=16) with the defaults (the
layout measured at open, as the worker does) and with TIERSERVE_INTRA_OP_THREADS = 1, 2 and the
usable cores, one process each, in a rotated order every run so that drift on a shared machine
hits all alike. Prints each run, the medians, which layout the defaults chose each time, and
the ratio defaults / best explicit at both concurrencies (the best explicit is the setting
with the highest median at that concurrency, measured in the same run).

MODELDIR is the folder holding model.onnx (a version folder). The model:
tests/models/gen_llm_model.py OUTDIR --size 8,512,8,4,1024,2048 writes the issue's
8-layer, 512-wide decoder.
"""
import argparse
import os
import re
import statistics
import subprocess
import sys

ROW = re.compile(r"c=(\d+)\s.*\|\s+([0-9.]+) tok/s")
LAYOUT = re.compile(r"^layout: (\d+) intra-op thread\(s\), spinning (on|off) \((\w+):")


def run_one(bench, model, env_extra, requests, tokens):
    env = dict(os.environ)
    env.pop("TIERSERVE_INTRA_OP_THREADS", None)
    env.update({"EXECUTION_MODE": "cpu", **env_extra})
    p = subprocess.run([bench, "--layout", model, str(requests), str(tokens)], capture_output=True, text=True,
                       env=env, timeout=900)
    if p.returncode != 0:
        sys.exit(f"bench_llm failed ({env_extra}): {p.stderr[-2000:]}")
    tps = {int(m.group(1)): float(m.group(2)) for m in map(ROW.search, p.stdout.splitlines()) if m}
    lay = next((m.groups() for m in map(LAYOUT.match, p.stdout.splitlines()) if m), None)
    return tps, lay, p.stdout


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("model")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--requests", type=int, default=32)
    ap.add_argument("--tokens", type=int, default=32)
    a = ap.parse_args()
    bench = os.path.join(a.build, "bin", "bench_llm")
    usable = len(os.sched_getaffinity(0))
    configs = [("defaults", {})] + [(f"threads={t}", {"TIERSERVE_INTRA_OP_THREADS": str(t)})
                                    for t in sorted({1, 2, usable})]
    got = {name: {1: [], 16: []} for name, _ in configs}
    chosen = []
    print(f"llm_layout: {a.runs} runs x {len(configs)} configurations, {a.requests} requests x {a.tokens} tokens, "
          f"{usable} CPU(s) in the affinity mask, load average {os.getloadavg()[0]:.1f}")
    for r in range(a.runs):
        order = configs[r % len(configs):] + configs[:r % len(configs)]
        for name, env in order:
            tps, lay, _ = run_one(bench, a.model, env, a.requests, a.tokens)
            for c in (1, 16):
                got[name][c].append(tps.get(c, 0.0))
            if name == "defaults":
                chosen.append(lay)
            print(f"run {r + 1} {name:<10} c=1 {tps.get(1, 0):8.1f} tok/s  c=16 {tps.get(16, 0):8.1f} tok/s"
                  + (f"  (chose {lay[0]} thread(s), spinning {lay[1]}, {lay[2]})" if name == "defaults" and lay else ""),
                  flush=True)
    print("medians:")
    med = {name: {c: statistics.median(v) for c, v in per.items()} for name, per in got.items()}
    for name, _ in configs:
        print(f"  {name:<10} c=1 {med[name][1]:8.1f} tok/s  c=16 {med[name][16]:8.1f} tok/s")
    ok = True
    for c in (1, 16):
        best = max((n for n, _ in configs if n != "defaults"), key=lambda n: med[n][c])
        ratio = med["defaults"][c] / med[best][c] if med[best][c] else 0
        ok &= ratio >= 0.9
        print(f"c={c}: defaults / best explicit ({best}) = {ratio:.2f}x (target >= 0.90)")
    print(f"defaults chose: {chosen}")
    print("target met" if ok else "target NOT met")


if __name__ == "__main__":
    main()
