#!/usr/bin/python3
"""Two builds' workers side by side: KServe throughput and RSS, in interleaved rounds.

For a change to the worker's heap (src/common/heapres.h) that must not cost throughput: both
builds' tierserve run at once on the shipped demo model (CPU, no LLM); each round loads one,
then the other, with bench_loadgen at --concurrency for --seconds (the order alternates), so
the machine's load falls on both alike. Prints each round's requests/s, each build's total
and their ratio (B / A), and each worker's VmRSS after the last round.

  bench/soak_ab.py --a /tmp/before/bin --b build/bin [--rounds 6] [--seconds 15] [--concurrency 8]
"""
import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from bench import request_bodies  # noqa: E402


def start(binary, repo, log):
    p = subprocess.Popen([str(binary / "tierserve"), f"--model-repository={repo}"], stderr=open(log, "wb"),
                         env={**os.environ, "EXECUTION_MODE": "cpu", "TIERSERVE_HTTP_ADDRESS": "127.0.0.1",
                              "TIERSERVE_HTTP_PORT": "0", "TIERSERVE_LOG_LEVEL": "info"})
    port = None
    for _ in range(1200):
        for line in log.read_text().splitlines():
            msg = json.loads(line).get("msg", "")
            if msg.startswith("listening on "):
                port = int(msg.rsplit(":", 1)[1])
            if msg.startswith("server ready") and port:
                return p, port
        if p.poll() is not None:
            sys.exit(f"{binary}/tierserve exited: {log.read_text()[-2000:]}")
        time.sleep(0.1)
    sys.exit(f"{binary}/tierserve not ready")


def rss_kb(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--a", required=True, help="bin folder of build A (before)")
    ap.add_argument("--b", default=str(ROOT / "build" / "bin"), help="bin folder of build B (after)")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--seconds", type=float, default=15)
    ap.add_argument("--concurrency", type=int, default=8)
    a = ap.parse_args()
    bins = {"A": pathlib.Path(a.a).resolve(), "B": pathlib.Path(a.b).resolve()}
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="tierserve-ab-"))
    repo = tmp / "models"
    repo.mkdir()
    (repo / "demo").symlink_to(ROOT / "models" / "demo")
    (bpath, hl), _ = request_bodies("input", [1, 4], tmp)
    procs, total = {}, {"A": 0, "B": 0}
    try:
        for k in ("A", "B"):
            procs[k] = start(bins[k], repo, tmp / f"worker-{k}.log")
        for r in range(a.rounds):
            for k in (("A", "B") if r % 2 == 0 else ("B", "A")):
                out = subprocess.run([str(bins["B"] / "bench_loadgen"), "127.0.0.1", str(procs[k][1]),
                                      "/v2/models/demo/infer", str(bpath), str(hl), str(a.concurrency),
                                      str(a.seconds)], capture_output=True, text=True, check=True)
                res = json.loads(out.stdout)
                total[k] += res["requests"]
                print(f"round {r + 1} {k}: {res['requests'] / a.seconds:9.0f} req/s  errors {res.get('errors', 0)}",
                      flush=True)
        for k in ("A", "B"):
            print(f"{k} {bins[k]}: {total[k]} requests, {total[k] / (a.rounds * a.seconds):.0f} req/s; "
                  f"VmRSS {rss_kb(procs[k][0].pid) / 1024:.2f} MB")
        print(f"B / A throughput: {total['B'] / max(total['A'], 1):.3f}")
    finally:
        for p, _ in procs.values():
            p.terminate()
            p.wait()


if __name__ == "__main__":
    main()
