#!/usr/bin/python3
"""The HTTP-layer spike's measurement (issue 10): bench_loadgen against each spike server,
POST /v2/models/mlp/infer with a binary KServe v2 body (JSON header + 512 FP32), at c=1
(p50, p99) and c=16 (throughput, p99); RUNS rounds, servers interleaved within each round,
the server pinned to CPU 0 and the load generator to CPU 1 (taskset). Then one pass per
server under `perf stat -p` (syscalls, CPU time and context switches per request, from the
rates in a steady window). Prints a markdown table: median [min-max] over the rounds.

  bench/spike/spike.py [--seconds 5] [--runs 3] [--build build]
"""
import argparse
import json
import os
import pathlib
import re
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
SERVERS = [("floor", "blocking read/writev, thread per connection (no HTTP library)"),
           ("evhttp", "libevent evhttp (today's layer)"),
           ("hparser", "libevent loop + http-parser, own connections"),
           ("h2o", "h2o 2.2.5 evloop")]


def body_file(tmp):
    import numpy as np
    x = (np.arange(512, dtype=np.float32) % 17) * 0.01
    hdr = json.dumps({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 512],
                                  "parameters": {"binary_data_size": x.nbytes}}],
                      "parameters": {"binary_data_output": True}}).encode()
    p = tmp / "mlp512.bin"
    p.write_bytes(hdr + x.tobytes())
    return p, len(hdr)


class Server:
    def __init__(self, binpath, cpu):
        self.proc = subprocess.Popen(["taskset", "-c", cpu, str(binpath), "0"], stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        m = re.search(r":(\d+)$", line.strip())
        if not m:
            sys.exit(f"{binpath} did not start: {line!r}")
        self.port = int(m.group(1))

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=10)


def loadgen(bindir, cpu, port, body, hl, conc, secs):
    p = subprocess.run(["taskset", "-c", cpu, str(bindir / "bench_loadgen"), "127.0.0.1", str(port),
                        "/v2/models/mlp/infer", str(body), str(hl), str(conc), str(secs)],
                       capture_output=True, text=True, check=True)
    return json.loads(p.stdout)


def perf_rates(bindir, cpu, srv, body, hl, conc):
    """Per-request syscalls, CPU us and context switches of the server, from a 2 s perf window
    inside a 3.5 s load run (rates divided by the run's throughput)."""
    lg = subprocess.Popen(["taskset", "-c", cpu, str(bindir / "bench_loadgen"), "127.0.0.1", str(srv.port),
                           "/v2/models/mlp/infer", str(body), str(hl), str(conc), "3.5"],
                          stdout=subprocess.PIPE, text=True)
    time.sleep(1.0)
    pf = subprocess.run(["perf", "stat", "-x,", "-e", "raw_syscalls:sys_enter,task-clock,context-switches",
                         "-p", str(srv.proc.pid), "--", "sleep", "2"], capture_output=True, text=True)
    res = json.loads(lg.communicate()[0])
    vals = {}
    for line in pf.stderr.splitlines():
        f = line.split(",")
        if len(f) > 3 and f[0] and f[0][0].isdigit():
            vals[f[2]] = float(f[0])
    if "raw_syscalls:sys_enter" not in vals:
        return None
    n = res["throughput"] * 2.0
    return {"syscalls": vals["raw_syscalls:sys_enter"] / n, "cpu_us": vals.get("task-clock", 0) * 1e3 / n,
            "cs": vals.get("context-switches", 0) / n}


def spread(xs, fmt):
    return f"{fmt.format(statistics.median(xs))} [{fmt.format(min(xs))}-{fmt.format(max(xs))}]"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--build", default=str(ROOT / "build"))
    ap.add_argument("--server-cpu", default="0")
    ap.add_argument("--client-cpu", default="1")
    a = ap.parse_args()
    bindir = pathlib.Path(a.build) / "bin"
    servers = [(s, d) for s, d in SERVERS if (bindir / f"spike_{s}").exists()]
    for s, _ in SERVERS:
        if (s, _) not in servers:
            print(f"spike_{s} not built: skipped")
    with tempfile.TemporaryDirectory(prefix="tierserve-spike-") as t:
        body, hl = body_file(pathlib.Path(t))
        res = {s: {"c1": [], "c16": []} for s, _ in servers}
        for rnd in range(a.runs):
            for s, _ in servers:
                srv = Server(bindir / f"spike_{s}", a.server_cpu)
                try:
                    for c in (1, 16):
                        r = loadgen(bindir, a.client_cpu, srv.port, body, hl, c, a.seconds)
                        res[s][f"c{c}"].append(r)
                        print(f"round {rnd + 1} {s:8} c={c:<2} {json.dumps(r)}", flush=True)
                finally:
                    srv.stop()
        perf = {}
        for s, _ in servers:
            srv = Server(bindir / f"spike_{s}", a.server_cpu)
            try:
                perf[s] = {c: perf_rates(bindir, a.client_cpu, srv, body, hl, c) for c in (1, 16)}
            finally:
                srv.stop()
    print(f"\n{a.runs} rounds x {a.seconds:g} s per cell, server on CPU {a.server_cpu}, load generator on CPU "
          f"{a.client_cpu}; median [min-max] over the rounds; per-request figures from perf stat")
    print("| server | c=1 p50 us | c=1 p99 us | c=16 req/s | c=16 p99 us | syscalls/req c=1 / c=16 "
          "| server CPU us/req c=16 | errors |")
    print("|---|---|---|---|---|---|---|---|")
    for s, d in servers:
        c1, c16 = res[s]["c1"], res[s]["c16"]
        p = perf[s]
        sc = " / ".join(f"{p[c]['syscalls']:.2f}" if p[c] else "n/a" for c in (1, 16))
        cpu = f"{p[16]['cpu_us']:.1f}" if p[16] else "n/a"
        errs = sum(r["errors"] for r in c1 + c16)
        print(f"| {d} | {spread([r['p50_us'] for r in c1], '{:.1f}')} | {spread([r['p99_us'] for r in c1], '{:.0f}')} "
              f"| {spread([r['throughput'] for r in c16], '{:.0f}')} | {spread([r['p99_us'] for r in c16], '{:.0f}')} "
              f"| {sc} | {cpu} | {errs} |")


if __name__ == "__main__":
    main()
