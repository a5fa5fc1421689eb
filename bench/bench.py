#!/usr/bin/python3
"""tierserve serving benchmark: in-process Run() vs tierserve over HTTP, in one run.

Models (generated into a temp repository, fixed seeds): the shipped demo model; `mlp`, a
4-layer MLP of width 2048 (FP32, batchable); `identity224`, an Identity on [-1,3,224,224]
for the JSON-vs-binary comparison. Each is served twice: `<m>` (one request per Run()) and
`<m>_batched` (dynamic batching); `mlp512`, the same MLP 512 wide (issue 10's worker rows). Measured for binary and JSON at concurrency 1/4/16/64:
throughput, p50/p95/p99, worker CPU seconds per 1000 inferences and peak RSS; the
in-process baseline (bench_inproc: same session options, one request per Run()) at the
same concurrency; and the HTTP floor (GET /v2/health/live). Prints a table and the ratios
the issue asks for, writes bench/out/results.csv and bench/out/throughput.svg. Then issue 10's
target rows (goal, measured, met/missed): tierrouter against nginx as a proxy in front of
bench_fixedreply, the worker against the in-process floor and the onnxruntime-node peer,
JSON vs binary, and the router's RSS over a mixed run.

  bench/run.sh [--seconds S] [--quick] [--layout] [--old BIN_DIR]
--layout runs issue 24's rows alone (bench/layout_rows.py); --old serves them from another
build's tierserve too.
"""
import argparse
import csv
import json
import os
import pathlib
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import targets  # noqa: E402  (bench/targets.py: issue 10's target rows)
import layout_rows  # noqa: E402  (bench/layout_rows.py: issue 24's worker layout rows)

ROOT = pathlib.Path(__file__).resolve().parents[1]
BIN = ROOT / "build" / "bin"
OUT = ROOT / "bench" / "out"
BATCH_CFG = ("max_batch_size: 64\n"
             "dynamic_batching:\n  max_queue_delay_microseconds: {delay}\n"
             "  default_queue_policy:\n    max_queue_size: 1024\n")


def mlp_model(width=2048, layers=4):
    rng = np.random.default_rng(4242)
    nodes, inits, prev = [], [], "x"
    for i in range(layers):
        w = (rng.standard_normal((width, width)) / np.sqrt(width)).astype(np.float32)
        b = np.zeros(width, np.float32)
        inits += [numpy_helper.from_array(w, f"w{i}"), numpy_helper.from_array(b, f"b{i}")]
        out = "y" if i == layers - 1 else f"h{i}"
        nodes += [helper.make_node("MatMul", [prev, f"w{i}"], [f"m{i}"]),
                  helper.make_node("Add", [f"m{i}", f"b{i}"], [f"a{i}"] if i < layers - 1 else [out])]
        if i < layers - 1:
            nodes.append(helper.make_node("Relu", [f"a{i}"], [out]))
        prev = out
    g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", width])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", width])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], producer_name="tierserve-bench")
    m.ir_version = 8
    return m


def identity_model():
    g = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "id224",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, 224, 224])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3, 224, 224])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], producer_name="tierserve-bench")
    m.ir_version = 8
    return m


def build_repo(root):
    paths = {}
    for name, make in (("mlp", mlp_model), ("mlp512", lambda: mlp_model(width=512)), ("identity224", identity_model)):
        d = root / name / "1"
        d.mkdir(parents=True)
        onnx.save(make(), str(d / "model.onnx"))
        paths[name] = d / "model.onnx"
    shutil.copytree(ROOT / "models" / "demo", root / "demo", ignore=shutil.ignore_patterns("*.md"))
    paths["demo"] = root / "demo" / "1" / "model.onnx"
    for name, delay in (("demo", 200), ("mlp", 2000)):
        b = root / f"{name}_batched" / "1"
        b.mkdir(parents=True)
        os.symlink(paths[name], b / "model.onnx")
        (root / f"{name}_batched" / "config.yaml").write_text(BATCH_CFG.format(delay=delay))
    return paths


def request_bodies(model_input, shape, tmp):
    """(binary body path, header length), (json body path) for one request."""
    x = (np.arange(int(np.prod(shape)), dtype=np.float32) % 17) * 0.01
    x = x.reshape(shape)
    hdr = json.dumps({"inputs": [{"name": model_input, "datatype": "FP32", "shape": list(shape),
                                  "parameters": {"binary_data_size": x.nbytes}}],
                      "parameters": {"binary_data_output": True}}).encode()
    bpath, jpath = tmp / f"{model_input}-{'x'.join(map(str, shape))}.bin", tmp / f"{model_input}-{'x'.join(map(str, shape))}.json"
    bpath.write_bytes(hdr + x.tobytes())
    jpath.write_bytes(json.dumps({"inputs": [{"name": model_input, "datatype": "FP32", "shape": list(shape),
                                              "data": x.ravel().tolist()}]}).encode())
    return (bpath, len(hdr)), jpath


class Worker:
    def __init__(self, repo, tmp, env=None, binary=None):
        """env: settings over the defaults below; binary: another build's tierserve."""
        self.log = tmp / f"worker-{time.monotonic_ns()}.log"
        env = dict(os.environ, EXECUTION_MODE="cpu", TIERSERVE_HTTP_ADDRESS="127.0.0.1",
                   TIERSERVE_HTTP_PORT="0", TIERSERVE_QUEUE_SIZE="1024", TIERSERVE_LOG_LEVEL="warn", **(env or {}))
        self.proc = subprocess.Popen([str(binary or BIN / "tierserve"), f"--model-repository={repo}",
                                      "--log-level=info"], stderr=open(self.log, "wb"), env=env)
        self.port = None
        for _ in range(600):
            for line in self.log.read_text().splitlines():
                msg = json.loads(line).get("msg", "")
                if msg.startswith("listening on "):
                    self.port = int(msg.rsplit(":", 1)[1])
                if msg.startswith("server ready") and self.port:
                    return
            if self.proc.poll() is not None:
                sys.exit("tierserve exited:\n" + self.log.read_text()[-3000:])
            time.sleep(0.05)
        sys.exit("tierserve did not start")

    def cpu_s(self):
        return proc_cpu_s(self.proc.pid)

    def rss_kb(self):
        for line in open(f"/proc/{self.proc.pid}/status"):
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        return 0

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=60)


def proc_cpu_s(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def loadgen(port, path, body, header_len, conc, secs):
    """bench_loadgen's JSON, plus client_cpu_s: the CPU the load generator itself spent (on a
    machine this small it takes its share of the cores the server under test would have)."""
    arg = str(body) if body else "-"
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    p = subprocess.run([str(BIN / "bench_loadgen"), "127.0.0.1", str(port), path, arg, str(header_len),
                        str(conc), str(secs)], capture_output=True, text=True, check=True)
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    r = json.loads(p.stdout)
    r["client_cpu_s"] = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    return r


def measured(worker, fn):
    """Runs fn() while sampling the worker's RSS; adds CPU seconds and peak RSS."""
    peak, stop = [worker.rss_kb()], threading.Event()

    def sample():
        while not stop.is_set():
            peak.append(worker.rss_kb())
            time.sleep(0.02)
    t = threading.Thread(target=sample)
    c0 = worker.cpu_s()
    t.start()
    r = fn()
    stop.set()
    t.join()
    r["worker_cpu_s"] = worker.cpu_s() - c0
    r["peak_rss_kb"] = max(peak)
    return r


def router_overhead(w, tmp, demo_binary, json224, concs, secs):
    """The same binary demo request straight to the worker and through tierrouter, with the
    CPU each process spent per 1000 requests (on a 2-core box the router's share is what
    throughput loses); and a 1.5 MB JSON request at c=1, which the router scans (jcheck)."""
    cfg = tmp / "router.yaml"
    cfg.write_text("address: 127.0.0.1\nprobe_interval_ms: 250\npools:\n"
                   "  - name: gpu\n    kind: gpu\n    min_tier: cpu\n    max_in_flight: 256\n"
                   f"    backends: [\"127.0.0.1:{w.port}\"]\n")
    log = tmp / "router.log"
    proc = subprocess.Popen([str(BIN / "tierrouter"), "--config", str(cfg)], stderr=open(log, "wb"),
                            env=dict(os.environ, TIERROUTER_PORT="0"))
    port = None
    for _ in range(200):
        for line in log.read_text().splitlines():
            msg = json.loads(line).get("msg", "")
            if "listening on" in msg:
                port = int(msg.split(":")[-1].split()[0])
        if port:
            break
        time.sleep(0.05)
    time.sleep(1.0)  # first probes
    (bpath, hl) = demo_binary
    out = []

    def run(p, path, body, hlen, c):
        w0, r0 = w.cpu_s(), proc_cpu_s(proc.pid)
        res = loadgen(p, path, body, hlen, c, secs)
        n = max(res["requests"], 1)
        res["worker_cpu_ms_per_req"] = (w.cpu_s() - w0) / n * 1e3
        res["router_cpu_ms_per_req"] = (proc_cpu_s(proc.pid) - r0) / n * 1e3
        return res
    for c in concs:
        d = run(w.port, "/v2/models/demo/infer", bpath, hl, c)
        r = run(port, "/v2/models/demo/infer", bpath, hl, c)
        out.append((f"demo binary c={c}", d, r))
    d = run(w.port, "/v2/models/identity224/infer", json224, -1, 1)
    r = run(port, "/v2/models/identity224/infer", json224, -1, 1)
    out.append(("identity224 JSON c=1", d, r))
    proc.terminate()
    proc.wait(timeout=30)
    return out


def svg_chart(rows, path):
    """Grouped bars: throughput per configuration at each concurrency (log scale)."""
    series = sorted({(r["model"], r["mode"]) for r in rows})
    concs = sorted({r["concurrency"] for r in rows})
    colors = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7",
              "#9c755f", "#bab0ac"]
    W, H, left, bottom, top = 980, 420, 70, 60, 30
    vals = [r["throughput"] for r in rows if r["throughput"] > 0]
    lo, hi = np.floor(np.log10(max(min(vals), 1))), np.log10(max(vals)) + 0.1
    gw = (W - left - 20) / len(concs)
    bw = gw * 0.8 / len(series)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H + 24 * ((len(series) + 3) // 4)}" '
           f'font-family="sans-serif" font-size="11">',
           f'<text x="{left}" y="18" font-size="13">throughput (inferences/s, log scale) by concurrency</text>']
    for k in range(int(np.floor(lo)), int(np.ceil(hi)) + 1):
        y = H - bottom - (k - lo) / (hi - lo) * (H - bottom - top)
        if top <= y <= H - bottom:
            out.append(f'<line x1="{left}" x2="{W - 20}" y1="{y:.1f}" y2="{y:.1f}" stroke="#ddd"/>'
                       f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">1e{k}</text>')
    for ci, c in enumerate(concs):
        x0 = left + ci * gw + gw * 0.1
        out.append(f'<text x="{x0 + gw * 0.4:.1f}" y="{H - bottom + 16}" text-anchor="middle">c={c}</text>')
        for si, s in enumerate(series):
            r = [r for r in rows if (r["model"], r["mode"]) == s and r["concurrency"] == c]
            if not r or r[0]["throughput"] <= 0:
                continue
            h = (np.log10(r[0]["throughput"]) - lo) / (hi - lo) * (H - bottom - top)
            out.append(f'<rect x="{x0 + si * bw:.1f}" y="{H - bottom - h:.1f}" width="{bw * 0.9:.1f}" '
                       f'height="{h:.1f}" fill="{colors[si % len(colors)]}"><title>{s[0]} {s[1]} c={c}: '
                       f'{r[0]["throughput"]:.0f}/s</title></rect>')
    for si, s in enumerate(series):
        x, y = left + (si % 4) * 220, H + 24 * (si // 4)
        out.append(f'<rect x="{x}" y="{y - 10}" width="12" height="12" fill="{colors[si % len(colors)]}"/>'
                   f'<text x="{x + 18}" y="{y}">{s[0]} / {s[1]}</text>')
    out.append("</svg>")
    path.write_text("\n".join(out))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--quick", action="store_true", help="concurrency 1 and 16 only, 1 s each")
    ap.add_argument("--layout", action="store_true", help="issue 24's worker layout rows alone")
    ap.add_argument("--old", help="a build's bin folder whose tierserve also serves the layout rows")
    a = ap.parse_args()
    if a.layout:
        tmp = pathlib.Path(tempfile.mkdtemp(prefix="tierserve-layout-"))
        try:
            print("\n".join(layout_rows.layout_rows(sys.modules[__name__], targets, tmp, a.seconds, a.quick,
                                                    pathlib.Path(a.old).resolve() if a.old else None)))
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return
    concs = [1, 16] if a.quick else [1, 4, 16, 64]
    secs = 1.0 if a.quick else a.seconds
    OUT.mkdir(parents=True, exist_ok=True)
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="tierserve-bench-"))
    try:
        repo = tmp / "repo"
        paths = build_repo(repo)
        bodies = {"demo": request_bodies("input", [1, 4], tmp), "mlp": request_bodies("x", [1, 2048], tmp),
                  "mlp512": request_bodies("x", [1, 512], tmp),
                  "identity224": request_bodies("x", [1, 3, 224, 224], tmp)}
        w = Worker(repo, tmp)
        rows = []
        idle_rss = w.rss_kb()
        floor = loadgen(w.port, "/v2/health/live", None, -1, 1, secs)
        print(f"HTTP floor (GET /v2/health/live, c=1): p50 {floor['p50_us']:.0f} us, "
              f"{floor['throughput']:.0f} req/s")
        for model in ("demo", "mlp"):
            for c in concs:
                r = json.loads(subprocess.run([str(BIN / "bench_inproc"), str(paths[model]), "1", str(c),
                                               str(secs)], capture_output=True, text=True, check=True).stdout)
                rows.append(dict(model=model, mode="in-process", concurrency=c, **r))
                for proto in ("binary", "json"):
                    for batched in (False, True):
                        name = f"{model}_batched" if batched else model
                        (bpath, hl), jpath = bodies[model]
                        body, hlen = (bpath, hl) if proto == "binary" else (jpath, -1)
                        r = measured(w, lambda: loadgen(w.port, f"/v2/models/{name}/infer", body, hlen, c, secs))
                        r["cpu_s_per_1000"] = r["worker_cpu_s"] / max(r["requests"], 1) * 1000
                        rows.append(dict(model=model, mode=f"{proto}{' batched' if batched else ''}",
                                         concurrency=c, **r))
        id_rows = {}
        for proto in ("binary", "json"):
            (bpath, hl), jpath = bodies["identity224"]
            body, hlen = (bpath, hl) if proto == "binary" else (jpath, -1)
            id_rows[proto] = loadgen(w.port, "/v2/models/identity224/infer", body, hlen, 1, secs)
        rate = json.loads(subprocess.run([str(BIN / "bench_jsonrate"), "1", "3", "224", "224"],
                                         capture_output=True, text=True, check=True).stdout)
        router_rows = router_overhead(w, tmp, bodies["demo"][0], bodies["identity224"][1], concs, secs)
        target_rows = targets.target_rows(w, tmp, paths, bodies, id_rows, secs, a.quick, BIN, loadgen)
        lay_rows = layout_rows.layout_rows(sys.modules[__name__], targets, tmp, secs, a.quick,
                                           pathlib.Path(a.old).resolve() if a.old else None)
        final_rss = w.rss_kb()
        w.stop()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    keys = ["model", "mode", "concurrency", "throughput", "p50_us", "p95_us", "p99_us", "cpu_s_per_1000",
            "peak_rss_kb", "rss_peak_kb", "errors"]
    with open(OUT / "results.csv", "w", newline="") as f:
        wr = csv.DictWriter(f, fieldnames=keys, extrasaction="ignore")
        wr.writeheader()
        wr.writerows(rows)
    svg_chart(rows, OUT / "throughput.svg")

    print(f"\n{'model':6} {'mode':16} {'conc':>4} {'inf/s':>10} {'p50 us':>9} {'p95 us':>9} {'p99 us':>9} "
          f"{'cpu s/1k':>9} {'errors':>6}")
    for r in rows:
        print(f"{r['model']:6} {r['mode']:16} {r['concurrency']:>4} {r['throughput']:>10.0f} {r['p50_us']:>9.0f} "
              f"{r['p95_us']:>9.0f} {r['p99_us']:>9.0f} {r['cpu_s_per_1000']:>9.3f} {r.get('errors', 0):>6}")

    def get(model, mode, c):
        return next(r for r in rows if r["model"] == model and r["mode"] == mode and r["concurrency"] == c)
    print("\nratios (served vs in-process, same run):")
    for model in ("demo", "mlp"):
        for c in concs:
            base = get(model, "in-process", c)
            for mode in ("binary", "binary batched", "json"):
                r = get(model, mode, c)
                print(f"  {model:5} c={c:<3} {mode:15} throughput x{r['throughput'] / base['throughput']:.3f}  "
                      f"added p50 {r['p50_us'] - base['p50_us']:+.0f} us  added p99 {r['p99_us'] - base['p99_us']:+.0f} us")
    b1, i1 = get("demo", "binary", 1), get("demo", "in-process", 1)
    added = b1["p50_us"] - i1["p50_us"]
    print("\ntargets:")
    print(f"  binary c=1 added p50 over in-process Run(): {added:.0f} us (target <= 60 us); of which the "
          f"HTTP floor on this host (GET /v2/health/live) is {floor['p50_us']:.0f} us -> server-side "
          f"addition beyond the floor {added - floor['p50_us']:.0f} us")
    c16 = 16 if 16 in concs else concs[-1]
    mb, mi = get("mlp", "binary batched", c16), get("mlp", "in-process", c16)
    print(f"  mlp c={c16} batched throughput / in-process one-per-Run(): x{mb['throughput'] / mi['throughput']:.2f} "
          f"(target >= 1.5)")
    ratio = id_rows["json"]["p50_us"] / id_rows["binary"]["p50_us"]
    print(f"  identity224 c=1 JSON p50 {id_rows['json']['p50_us']:.0f} us / binary p50 "
          f"{id_rows['binary']['p50_us']:.0f} us = x{ratio:.2f} (target <= 5); JSON decode "
          f"{rate['decode_mb_s']:.0f} MB/s, encode {rate['encode_mb_s']:.0f} MB/s "
          f"({rate['json_bytes'] / 1e6:.1f} MB of JSON per tensor)")
    peak64 = max(r["peak_rss_kb"] for r in rows if "peak_rss_kb" in r)
    print(f"  worker RSS: {idle_rss / 1024:.1f} MB after loading the sessions, peak {peak64 / 1024:.1f} MB "
          f"under load (max concurrency {concs[-1]}), {final_rss / 1024:.1f} MB after -> beyond the "
          f"sessions: {(peak64 - idle_rss) / 1024:.1f} MB at peak (target < 20 MB)")
    print("\ntierrouter in front of the same worker, same run (CPU: ms per request, worker + router):")
    for name, d, r in router_rows:
        print(f"  {name:<21} direct {d['throughput']:7.0f}/s p50 {d['p50_us']:6.0f} us p99 {d['p99_us']:6.0f} us | "
              f"router {r['throughput']:7.0f}/s p50 {r['p50_us']:6.0f} us p99 {r['p99_us']:6.0f} us | "
              f"added p50 {r['p50_us'] - d['p50_us']:+.0f} us, p99 {r['p99_us'] - d['p99_us']:+.0f} us, "
              f"throughput x{r['throughput'] / d['throughput']:.2f}, errors {r['errors']} | CPU "
              f"{d['worker_cpu_ms_per_req']:.3f} -> {r['worker_cpu_ms_per_req']:.3f} + "
              f"{r['router_cpu_ms_per_req']:.3f}")
    targets.print_rows(target_rows)
    print("\n" + "\n".join(lay_rows))
    print(f"\nwrote {OUT / 'results.csv'} and {OUT / 'throughput.svg'}")


if __name__ == "__main__":
    main()
