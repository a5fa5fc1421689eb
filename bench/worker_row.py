"""Issue 10's worker row alone, and where its time goes: the 512-wide MLP over binary KServe
v2 at c=1 through tierserve (bench_loadgen) against bench_inproc (the in-process Run()
floor) and spike_floor (a blocking C server answering the same request bytes with a reply of
the same size: what loopback and the kernel cost alone), interleaved ROUNDS times. From those
two floors: the best ratio any server could reach, Run() p50 / (Run() p50 + loopback p50).
--old DIR also serves the row from DIR/tierserve (another build) in the same rounds.
With --profile, the worker's CPU and context switches per request (perf stat) and its system
calls per request (strace -c -f) at c=1.
Not a test.   /usr/bin/python3 bench/worker_row.py [--seconds 2] [--rounds 3] [--old DIR] [--profile]
BIN (default build/bin) picks the build."""
import argparse
import json
import os
import pathlib
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import bench  # noqa: E402  (mlp_model, request_bodies, Worker, loadgen)

if os.environ.get("BIN"):
    bench.BIN = pathlib.Path(os.environ["BIN"]).resolve()


def per_request(counts, n):
    return {k: round(v / max(n, 1), 3) for k, v in sorted(counts.items(), key=lambda kv: -kv[1])}


def inline_runs(w):
    with urllib.request.urlopen(f"http://127.0.0.1:{w.port}/v2/status", timeout=5) as r:
        return json.loads(r.read()).get("inline_runs", 0)


def start_floor(bindir):
    """spike_floor on a free port; returns (process, port)."""
    p = subprocess.Popen([str(bindir / "spike_floor"), "0"], stdout=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    if not line.startswith("listening on "):
        p.kill()
        raise RuntimeError(f"spike_floor did not start: {line!r}")
    return p, int(line.rsplit(":", 1)[1])


def json_row(a, tmp):
    """The identity row: bench.py's request bodies (the loader only sends prebuilt bytes and
    reads the reply by Content-Length: no JSON work of its own in the timed loop)."""
    d = tmp / "repo" / "identity224" / "1"
    d.mkdir(parents=True)
    bench.onnx.save(bench.identity_model(), str(d / "model.onnx"))
    (bpath, hl), jpath = bench.request_bodies("x", [1, 3, 224, 224], tmp)
    servers = [("new", bench.Worker(tmp / "repo", tmp))]
    if a.old:
        new_bin, bench.BIN = bench.BIN, pathlib.Path(a.old).resolve()
        (tmp / "old").mkdir()
        servers.append(("old", bench.Worker(tmp / "repo", tmp / "old")))
        bench.BIN = new_bin
    path = "/v2/models/identity224/infer"
    print(f"JSON body {jpath.stat().st_size} bytes; load average before: {os.getloadavg()[0]:.2f}")
    got = {name: {"json": [], "binary": []} for name, _ in servers}
    for i in range(a.rounds):
        for name, s in servers:
            j = bench.loadgen(s.port, path, jpath, -1, 1, a.seconds)
            b = bench.loadgen(s.port, path, bpath, hl, 1, a.seconds)
            got[name]["json"].append(j["p50_us"])
            got[name]["binary"].append(b["p50_us"])
            print(f"round {i + 1} {name}: JSON p50 {j['p50_us']:.0f} us ({j['requests']} requests), binary p50 "
                  f"{b['p50_us']:.0f} us: x{j['p50_us'] / b['p50_us']:.2f}")
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    for name, _ in servers:
        j, b = statistics.median(got[name]["json"]), statistics.median(got[name]["binary"])
        print(f"median {name}: JSON p50 {j:.0f} us vs binary {b:.0f} us = x{j / b:.2f}")
    for _, s in servers:
        s.stop()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--old", help="a build's bin folder whose tierserve also serves the row")
    ap.add_argument("--json", action="store_true",
                    help="the other row instead: the 1x3x224x224 FP32 identity, JSON vs binary p50 at c=1")
    a = ap.parse_args()
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="tierserve-wrow-"))
    try:
        d = tmp / "repo" / "mlp512" / "1"
        d.mkdir(parents=True)
        bench.onnx.save(bench.mlp_model(width=512), str(d / "model.onnx"))
        (bpath, hl), _ = bench.request_bodies("x", [1, 512], tmp)
        if a.json:
            json_row(a, tmp)
            return
        w = bench.Worker(tmp / "repo", tmp)
        servers = [("new", w)]
        if a.old:
            new_bin, bench.BIN = bench.BIN, pathlib.Path(a.old).resolve()
            (tmp / "old").mkdir()
            servers.append(("old", bench.Worker(tmp / "repo", tmp / "old")))
            bench.BIN = new_bin
        floor, floor_port = start_floor(bench.BIN)
        path = "/v2/models/mlp512/infer"
        for _, s in servers:
            bench.loadgen(s.port, path, bpath, hl, 1, 0.5)  # warm-up
        print(f"load average before: {os.getloadavg()[0]:.2f}")
        got = {"inproc": [], "floor": []} | {name: [] for name, _ in servers}
        for i in range(a.rounds):
            inproc = json.loads(subprocess.run([str(bench.BIN / "bench_inproc"), str(d / "model.onnx"), "1", "1",
                                                str(a.seconds)], capture_output=True, text=True, check=True).stdout)
            fl = bench.loadgen(floor_port, path, bpath, hl, 1, a.seconds)
            best = inproc["p50_us"] / (inproc["p50_us"] + fl["p50_us"])
            got["inproc"].append(inproc)
            got["floor"].append(fl)
            print(f"round {i + 1}: in-process Run() {inproc['throughput']:.0f}/s p50 {inproc['p50_us']:.1f} us; "
                  f"loopback floor (spike_floor) {fl['throughput']:.0f}/s p50 {fl['p50_us']:.1f} us -> best "
                  f"possible ratio x{best:.2f}")
            for name, s in servers:
                n0 = inline_runs(s)
                served = bench.loadgen(s.port, path, bpath, hl, 1, a.seconds)
                share = (inline_runs(s) - n0) / max(served["requests"], 1)  # loadgen's warm-up counts too
                got[name].append(served)
                print(f"  {name}: served {served['throughput']:.0f}/s p50 {served['p50_us']:.1f} us; "
                      f"x{served['throughput'] / inproc['throughput']:.2f}, added p50 "
                      f"{served['p50_us'] - inproc['p50_us']:+.1f} us; inline {share:.2f}")
        print(f"load average after: {os.getloadavg()[0]:.2f}")

        def med(rows, key):
            return statistics.median(r[key] for r in rows)
        ip, fp = med(got["inproc"], "p50_us"), med(got["floor"], "p50_us")
        print(f"medians over {a.rounds} rounds: Run() {med(got['inproc'], 'throughput'):.0f}/s p50 {ip:.1f} us + "
              f"loopback floor p50 {fp:.1f} us -> best possible ratio x{ip / (ip + fp):.2f}")
        for name, _ in servers:
            print(f"  {name}: {med(got[name], 'throughput'):.0f}/s = x{med(got[name], 'throughput') / med(got['inproc'], 'throughput'):.2f}"
                  f", p50 {med(got[name], 'p50_us'):.1f} us (added {med(got[name], 'p50_us') - ip:+.1f} us)")
        floor.kill()
        floor.wait()
        for _, s in servers[1:]:
            s.stop()
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
