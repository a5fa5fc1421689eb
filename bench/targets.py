"""Issue 10's target rows for bench/bench.py: each with its goal, what this run measured (the
peer it is held against printed beside it) and met/missed. Ratios come from one run on one
machine; they are benchmarks, not timed tests.

- router as a proxy: tierrouter and nginx (Debian's nginx-light, 1 worker, upstream
  keep-alive, started here with its own config on loopback) in front of the same
  bench_fixedreply; "added" = through the proxy minus straight to the backend, same run.
- worker rows: the 512-wide MLP over binary KServe v2 at c=1 against bench_inproc (the
  in-process Run() floor) and against onnxruntime-node 1.29's native binding behind Node's
  http module (bench/ortnode/server.js), unpacked from the pinned npm pack, never installed.
- the 1x3x224x224 identity, JSON vs binary p50 (bench.py's id_rows, same run).
- the router's VmRSS over a mixed run through it to the worker (5 min; --quick: 30 s).
"""
import json
import os
import pathlib
import shutil
import socket
import statistics
import subprocess
import tarfile
import threading
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
CACHE = pathlib.Path(os.environ.get("TIERSERVE_CACHE") or
                     pathlib.Path(os.environ.get("XDG_CACHE_HOME") or pathlib.Path.home() / ".cache") / "tierserve")
ORTNODE_PACK = CACHE / "packs" / "onnxruntime-node-1.29.0.tgz"
NGINX = "/usr/sbin/nginx"
STATUS = json.dumps({"live": True, "ready": True, "tier": "cpu", "queue_depth": 0,
                     "models": [{"name": "mlp512", "version": "1", "ready": True}]})


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, proc, what, timeout=10.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"{what} did not listen on {port}")


def start_router(bindir, tmp, backend, name):
    cfg = tmp / f"{name}.yaml"
    cfg.write_text("address: 127.0.0.1\nprobe_interval_ms: 250\npools:\n"
                   "  - name: p\n    kind: gpu\n    min_tier: cpu\n    max_in_flight: 256\n"
                   f"    backends: [\"{backend}\"]\n")
    log = tmp / f"{name}.log"
    proc = subprocess.Popen([str(bindir / "tierrouter"), "--config", str(cfg)], stderr=open(log, "wb"),
                            env=dict(os.environ, TIERROUTER_PORT="0"))
    for _ in range(200):
        for line in log.read_text().splitlines():
            msg = json.loads(line).get("msg", "")
            if "listening on" in msg:
                time.sleep(1.0)  # the first probes
                return proc, int(msg.split(":")[-1].split()[0])
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    proc.kill()
    raise RuntimeError("tierrouter did not start: " + log.read_text()[-2000:])


def start_nginx(tmp, backend_port):
    """nginx-light with its own config: 1 worker, upstream keep-alive, loopback only."""
    d = tmp / "nginx"
    (d / "logs").mkdir(parents=True, exist_ok=True)
    port = free_port()
    (d / "nginx.conf").write_text(f"""worker_processes 1;
daemon off;
pid {d}/nginx.pid;
error_log {d}/logs/error.log warn;
events {{ worker_connections 1024; }}
http {{
  access_log off;
  client_body_temp_path {d}/body;
  proxy_temp_path {d}/proxy;
  upstream backend {{ server 127.0.0.1:{backend_port}; keepalive 32; }}
  server {{
    listen 127.0.0.1:{port};
    location / {{
      proxy_pass http://backend;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
    }}
  }}
}}
""")
    proc = subprocess.Popen([NGINX, "-p", str(d), "-e", str(d / "logs" / "error.log"), "-c", str(d / "nginx.conf")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_port(port, proc, "nginx")
    return proc, port


def stop(proc):
    if proc and proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def med(rs, key):
    return statistics.median(r[key] for r in rs)


def proxy_rows(bindir, tmp, body, secs, reps, loadgen):
    fixed_port = free_port()
    fixed = subprocess.Popen([str(bindir / "bench_fixedreply"), str(fixed_port), STATUS])
    router = ngx = None
    try:
        wait_port(fixed_port, fixed, "bench_fixedreply")
        router, rport = start_router(bindir, tmp, f"127.0.0.1:{fixed_port}", "router-proxy")
        ngx, nport = start_nginx(tmp, fixed_port)
        (bpath, hl) = body
        path = "/v2/models/mlp512/infer"
        res = {}
        for c in (16, 1):
            runs = {"direct": [], "router": [], "nginx": []}
            for _ in range(reps):  # interleaved, so drift on a shared box hits all three alike
                for k, p in (("direct", fixed_port), ("router", rport), ("nginx", nport)):
                    runs[k].append(loadgen(p, path, bpath, hl, c, secs))
            res[c] = runs
    finally:
        stop(ngx)
        stop(router)
        stop(fixed)
    rows = []
    r16 = res[16]
    d_p99 = med(r16["direct"], "p99_us")
    tr, tn = med(r16["router"], "throughput"), med(r16["nginx"], "throughput")
    ar, an = med(r16["router"], "p99_us") - d_p99, med(r16["nginx"], "p99_us") - d_p99
    errs = {k: sum(r["errors"] for r in r16[k]) for k in r16}
    rows.append(("router as a proxy, c=16, fixed fast backend",
                 "throughput >= nginx (1 worker, upstream keep-alive); added p99 <= nginx's",
                 f"router {tr:.0f}/s vs nginx {tn:.0f}/s (direct {med(r16['direct'], 'throughput'):.0f}/s); "
                 f"added p99 router {ar:+.0f} us vs nginx {an:+.0f} us; errors (non-200) "
                 f"direct {errs['direct']}, router {errs['router']}, nginx {errs['nginx']}",
                 tr >= tn and ar <= an and errs["router"] == 0))
    r1 = res[1]
    d_p50 = med(r1["direct"], "p50_us")
    ar, an = med(r1["router"], "p50_us") - d_p50, med(r1["nginx"], "p50_us") - d_p50
    rows.append(("router as a proxy, c=1", "added p50 <= nginx's + 20 us",
                 f"added p50 router {ar:+.0f} us vs nginx {an:+.0f} us (direct p50 {d_p50:.0f} us)", ar <= an + 20))
    return rows


class OrtNodePeer:
    """onnxruntime-node 1.29 behind Node's http module (bench/ortnode/server.js), started once
    so that its rounds interleave with the worker's. .port, or .why when it could not start."""

    def __init__(self, tmp, model, body, loadgen):
        self.proc, self.port, self.why = None, None, None
        node = shutil.which("node")
        if not node:
            self.why = "no node on PATH"
            return
        if not ORTNODE_PACK.is_file():
            self.why = f"{ORTNODE_PACK} missing (scripts/setup.sh fetches it)"
            return
        d = tmp / "ortnode"
        want = ("package/bin/napi-v6/linux/x64/onnxruntime_binding.node",
                "package/bin/napi-v6/linux/x64/libonnxruntime.so.1")
        with tarfile.open(ORTNODE_PACK) as t:
            for m in want:
                t.extract(m, d, filter="data") if hasattr(tarfile, "data_filter") else t.extract(m, d)
        log = tmp / "ortnode.log"
        # the same ONNX Runtime 1.29 as the worker: its telemetry off as the worker turns it off
        # (its uploader's threads would also run beside the peer's requests)
        env = {**os.environ, "ORT_DISABLE_TELEMETRY": os.environ.get("ORT_DISABLE_TELEMETRY", "1")}
        self.proc = subprocess.Popen([node, str(ROOT / "bench" / "ortnode" / "server.js"), str(d / want[0]),
                                      str(model)], stdout=subprocess.PIPE, stderr=open(log, "wb"), text=True,
                                     env=env)
        line = self.proc.stdout.readline().strip()
        if not line.startswith("listening on "):
            self.why = "the Node server did not start: " + log.read_text()[-300:].strip().replace("\n", " ")
            return
        self.port = int(line.rsplit(":", 1)[1])
        loadgen(self.port, "/v2/models/mlp512/infer", body[0], body[1], 1, 0.5)  # JIT warm-up

    def close(self):
        stop(self.proc)


def rss_kb(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def rss_row(bindir, w, tmp, bodies, quick, loadgen):
    total = 30.0 if quick else 300.0
    router, port = start_router(bindir, tmp, f"127.0.0.1:{w.port}", "router-rss")
    samples, stop_ev = [], threading.Event()

    def sample():
        while not stop_ev.is_set():
            samples.append((time.monotonic(), rss_kb(router.pid)))
            time.sleep(0.25)
    (mb, mhl), _ = bodies["mlp512"]
    (db, dhl), _ = bodies["demo"]
    _, jid = bodies["identity224"]
    mix = [("/v2/models/mlp512/infer", mb, mhl, 16), ("/v2/models/identity224/infer", jid, -1, 1),
           ("/v2/models/demo/infer", db, dhl, 4), ("/v2/models/nosuch/infer", db, dhl, 2),
           ("/v2/health/ready", None, -1, 8)]
    t = threading.Thread(target=sample)
    t0 = time.monotonic()
    t.start()
    n = errors = 0
    cycle_end = []  # RSS after each whole cycle of the mix: same phase, so comparable
    try:
        while time.monotonic() - t0 < total or n % len(mix):
            path, b, hl, c = mix[n % len(mix)]
            r = loadgen(port, path, b, hl, c, 1.0 if quick else 2.0)
            errors += r["errors"] if "nosuch" not in path else 0
            n += 1
            if n % len(mix) == 0:
                cycle_end.append(rss_kb(router.pid))
    finally:
        stop_ev.set()
        t.join()
        stop(router)
    base = cycle_end[0]
    dev = max(abs(kb - base) for kb in cycle_end) / base * 100
    what = f"{total:.0f} s (--quick; the goal is 5 min)" if quick else "5 min"
    return ("memory", "RSS of the router flat (+/- 5 %) over a 5-minute mixed run",
            f"{what}, {len(cycle_end)} cycles of binary/JSON/404/health loads at c=1..16: RSS after each "
            f"cycle {', '.join(f'{kb / 1024:.1f}' for kb in cycle_end)} MB (first {base} KB, last {cycle_end[-1]} KB, "
            f"{(cycle_end[-1] - base) / base * 100:+.1f} %), max deviation from the first "
            f"{dev:.1f} % (all samples {min(kb for _, kb in samples) / 1024:.1f}-"
            f"{max(kb for _, kb in samples) / 1024:.1f} MB); errors {errors}", dev <= 5.0)


def start_floor(bindir, spin=False):
    """The worker row's physical ceiling: spike_floor (one thread, read() then one writev() of
    a reply of the same size) answering the same request bytes is what loopback, the kernel
    and the loader cost; Run() plus that is the best any server could do at c=1. Sleeping in
    read() it also pays the wake-up of an idle core (tens of microseconds on a VM); with spin
    it polls and never idles. Returns (process, port), or (process, None) if it did not start."""
    p = subprocess.Popen([str(bindir / "spike_floor"), "0"] + (["spin"] if spin else []),
                         stdout=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    return p, int(line.rsplit(":", 1)[1]) if line.startswith("listening on ") else None


def target_rows(w, tmp, paths, bodies, id_rows, secs, quick, bindir, loadgen):
    secs = max(secs, 1.0)
    rows = []
    try:
        rows += proxy_rows(bindir, tmp, bodies["mlp512"][0], secs, 1 if quick else 3, loadgen)
    except (RuntimeError, OSError, subprocess.CalledProcessError) as e:
        rows.append(("router as a proxy", "vs nginx", f"not measured: {e}", None))
    (bpath, hl), _ = bodies["mlp512"]
    path = "/v2/models/mlp512/infer"
    # The c=1 rows compare four things whose speed this shared host changes from second to
    # second: they run in interleaved rounds, and the rows report medians.
    rounds = 3 if quick else 5
    try:
        peer = OrtNodePeer(tmp, paths["mlp512"], (bpath, hl), loadgen)
    except (OSError, tarfile.TarError, subprocess.CalledProcessError, ValueError) as e:
        peer = OrtNodePeer.__new__(OrtNodePeer)
        peer.proc, peer.port, peer.why = None, None, str(e)
    floor, floor_port = start_floor(bindir)
    spin, spin_port = start_floor(bindir, spin=True)
    res = {"inproc": [], "served": [], "floor": [], "spin": [], "peer": []}
    try:
        for _ in range(rounds):
            res["inproc"].append(json.loads(subprocess.run(
                [str(bindir / "bench_inproc"), str(paths["mlp512"]), "1", "1", str(secs)],
                capture_output=True, text=True, check=True).stdout))
            res["served"].append(loadgen(w.port, path, bpath, hl, 1, secs))
            if floor_port:
                res["floor"].append(loadgen(floor_port, path, bpath, hl, 1, secs))
            if spin_port:
                res["spin"].append(loadgen(spin_port, path, bpath, hl, 1, secs))
            if peer.port:
                res["peer"].append(loadgen(peer.port, path, bpath, hl, 1, secs))
    finally:
        peer.close()
        for f in (floor, spin):
            f.kill()
            f.wait()
    inproc = {k: med(res["inproc"], k) for k in ("throughput", "p50_us")}
    served = {k: med(res["served"], k) for k in ("throughput", "p50_us")}
    ratio, added = served["throughput"] / inproc["throughput"], served["p50_us"] - inproc["p50_us"]
    if res["floor"] and res["spin"]:
        run, fl, sp = inproc["p50_us"], med(res["floor"], "p50_us"), med(res["spin"], "p50_us")
        ceiling = (f"loopback floor (spike_floor, same bytes) {fl:.0f} us sleeping between requests, {sp:.0f} us "
                   f"spinning -> best possible ratio with Run() {run:.0f} us: x{run / (run + fl):.2f} for a server "
                   f"that sleeps, x{run / (run + sp):.2f} for one that burns a core polling")
    else:
        ceiling = "loopback floor not measured: spike_floor did not start"
    rows.append(("worker, binary KServe v2, c=1, 512-wide MLP", ">= 0.85x the in-process Run() floor; added p50 <= 60 us",
                 f"{served['throughput']:.0f}/s vs in-process {inproc['throughput']:.0f}/s = x{ratio:.2f}; p50 "
                 f"{served['p50_us']:.0f} us vs {inproc['p50_us']:.0f} us, added {added:+.0f} us; {ceiling} "
                 f"(medians of {rounds} interleaved rounds)", ratio >= 0.85 and added <= 60))
    if res["peer"]:
        pt, pp = med(res["peer"], "throughput"), med(res["peer"], "p50_us")
        wins = sum(s_["throughput"] >= 2 * p_["throughput"] for s_, p_ in zip(res["served"], res["peer"]))
        x = served["throughput"] / pt
        rows.append(("worker, binary, c=1", ">= 2x the onnxruntime-node 1.29 KServe peer",
                     f"{served['throughput']:.0f}/s vs Node peer {pt:.0f}/s = x{x:.2f} (p50 {served['p50_us']:.0f} "
                     f"vs {pp:.0f} us; medians of {rounds} interleaved rounds, >= 2x in {wins} of them)", x >= 2.0))
    else:
        rows.append(("worker, binary, c=1", ">= 2x the onnxruntime-node 1.29 KServe peer",
                     f"not measured: {peer.why}", None))
    j, b = id_rows["json"]["p50_us"], id_rows["binary"]["p50_us"]
    rows.append(("worker, 1x3x224x224 FP32 identity, JSON", "p50 <= 5x binary",
                 f"JSON p50 {j:.0f} us vs binary {b:.0f} us = x{j / b:.2f}", j / b <= 5.0))
    try:
        rows.append(rss_row(bindir, w, tmp, bodies, quick, loadgen))
    except (RuntimeError, OSError, subprocess.CalledProcessError) as e:
        rows.append(("memory", "RSS of the router flat (+/- 5 %)", f"not measured: {e}", None))
    return rows


def print_rows(rows):
    print("\nissue 10 targets (one run, this machine; met/missed is not a test):")
    for name, goal, measured, met in rows:
        verdict = "not measured" if met is None else ("met" if met else "MISSED")
        print(f"  [{verdict}] {name}\n      goal:     {goal}\n      measured: {measured}")
