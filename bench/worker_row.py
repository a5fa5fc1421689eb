"""Issue 10's worker row alone, and where its time goes: the 512-wide MLP over binary KServe
v2 at c=1 through tierserve (bench_loadgen) against bench_inproc (the in-process Run()
floor), interleaved ROUNDS times; then, with --profile, the worker's CPU and context
switches per request (perf stat) and its system calls per request (strace -c -f) at c=1.
Not a test.   /usr/bin/python3 bench/worker_row.py [--seconds 2] [--rounds 3] [--profile]
BIN (default build/bin) picks the build."""
import argparse
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import bench  # noqa: E402  (mlp_model, request_bodies, Worker, loadgen)

if os.environ.get("BIN"):
    bench.BIN = pathlib.Path(os.environ["BIN"]).resolve()


def per_request(counts, n):
    return {k: round(v / max(n, 1), 3) for k, v in sorted(counts.items(), key=lambda kv: -kv[1])}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--profile", action="store_true")
    a = ap.parse_args()
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="tierserve-wrow-"))
    try:
        d = tmp / "repo" / "mlp512" / "1"
        d.mkdir(parents=True)
        bench.onnx.save(bench.mlp_model(width=512), str(d / "model.onnx"))
        (bpath, hl), _ = bench.request_bodies("x", [1, 512], tmp)
        w = bench.Worker(tmp / "repo", tmp)
        path = "/v2/models/mlp512/infer"
        bench.loadgen(w.port, path, bpath, hl, 1, 0.5)  # warm-up
        for i in range(a.rounds):
            inproc = json.loads(subprocess.run([str(bench.BIN / "bench_inproc"), str(d / "model.onnx"), "1", "1",
                                                str(a.seconds)], capture_output=True, text=True, check=True).stdout)
            served = bench.loadgen(w.port, path, bpath, hl, 1, a.seconds)
            print(f"round {i + 1}: served {served['throughput']:.0f}/s p50 {served['p50_us']:.1f} us; in-process "
                  f"{inproc['throughput']:.0f}/s p50 {inproc['p50_us']:.1f} us; x{served['throughput'] / inproc['throughput']:.2f}, "
                  f"added p50 {served['p50_us'] - inproc['p50_us']:+.1f} us")
        if a.profile:
            pid = w.proc.pid
            st = subprocess.Popen(["perf", "stat", "-e", "task-clock,context-switches", "-p", str(pid), "-o",
                                   str(tmp / "perf.txt"), "--", "sleep", str(a.seconds)])
            served = bench.loadgen(w.port, path, bpath, hl, 1, a.seconds)
            st.wait()
            txt = (tmp / "perf.txt").read_text()
            ms = float(re.search(r"([\d.,]+)\s+msec task-clock", txt).group(1).replace(",", ""))
            cs = float(re.search(r"([\d,]+)\s+context-switches", txt).group(1).replace(",", ""))
            n = served["requests"]
            print(f"perf stat: {ms * 1000 / n:.1f} us CPU and {cs / n:.2f} context switches per request "
                  f"(all threads; {n} requests)")
            sp = subprocess.Popen(["strace", "-c", "-f", "-p", str(pid), "-o", str(tmp / "strace.txt")],
                                  stderr=subprocess.DEVNULL)
            import time
            time.sleep(0.5)
            served = bench.loadgen(w.port, path, bpath, hl, 1, a.seconds)
            sp.send_signal(2)
            sp.wait()
            counts = {}
            for line in (tmp / "strace.txt").read_text().splitlines():
                f = line.split()
                if len(f) >= 5 and re.match(r"^[\d.]+$", f[0]) and f[3].isdigit():
                    counts[f[-1]] = int(f[3])
            print(f"strace -c -f: syscalls per request ({served['requests']} requests): "
                  f"{per_request(counts, served['requests'])}")
        w.stop()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
