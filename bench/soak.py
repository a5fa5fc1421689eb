#!/usr/bin/python3
"""Soak: a long mixed load against tierrouter + tierserve, and the RSS slope of both.

Not a test (it runs for minutes to hours). One worker serves the shipped demo model and the
tests' tiny LLM (generated, 2 layers); one router in front of it with two pools (gpu, cpu:
both the same worker), three tenants and the cost book on. The load runs in cycles of
--cycle seconds, each with fresh connections:
  - KServe: bench_loadgen at --concurrency through the router (binary demo body);
  - LLM: --llm-streams clients, each one /v1/chat/completions stream after another (and
    every tenth one a non-stream completion, every 25th cut off after its first chunk);
  - admin polls: /admin/status, /metrics, /dashboard on the router and /v2/status,
    /metrics on the worker, twice a second; the odd bad request (unknown model, bad JSON,
    a wrong tenant name) among them.
Both programs' VmRSS is sampled every --sample seconds. At the end it prints, for each, the
RSS at the end of warm-up and at the end, and the slope of a least-squares line through
the samples after --warmup seconds (KB per minute): the figure issue 24 holds under 1 KB/min
over 30 minutes. The same for RssAnon alone (heap, stacks, buffers: where a leak or an
unbounded table shows); the rest of RSS is the program's and its libraries' file pages,
read in as code paths first run (a rare error path, the dashboard), bounded by their size.
With bench_mallstat.so built (bench/mallstat.c, LD_PRELOAD), also each program's glibc heap:
arena and bytes in use after warm-up and at the end, and the slope of the bytes in use.
Each slope is printed twice: after --warmup (the issue's figure) and over the run's last
half. glibc's heap reaches its size by steps (the most memory requests held at once, the
fragmentation of each thread's arena), a fill that slows down and stops: a slope after
warm-up that the last half no longer shows is that fill; one the last half still shows is
growth. --heaptrack runs both programs under heaptrack's preload and prints, at the end,
the live heap by allocation site at the end of warm-up and near the end (bench/htdiff.py):
a leak or a table without a bound is a site that grows. Its raw traces take disk (here
about 0.1 GB a minute for the router, 0.8 GB a minute for the worker, until the end,
when each is read and compressed) and the worker's takes minutes to read.

The load starts after start-up (a minute with the LLM), so a limit on the whole command
needs that on top of --seconds. A signal (SIGTERM, SIGHUP, SIGINT) ends the load early: the
report follows over the samples taken until then, marked CUT SHORT, and both programs stop.

  bench/soak.sh [--seconds 1800] [--warmup 120] [--concurrency 8] [--bin build/bin] [--heaptrack]
"""
import argparse
import http.client
import json
import os
import pathlib
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from bench import request_bodies  # noqa: E402  (the same bodies bench.py sends)


def rss_kb(pid):
    """(VmRSS, RssAnon) in KB. RssFile, the rest, is the pages of the program and its
    libraries read in as code paths first run: bounded by their size, and no leak; RssAnon
    (heap, stacks, buffers) is where one would show."""
    out = {}
    for line in open(f"/proc/{pid}/status"):
        k = line.split(":")[0]
        if k in ("VmRSS", "RssAnon"):
            out[k] = int(line.split()[1])
    return out.get("VmRSS", 0), out.get("RssAnon", 0)


def wait_port(log, pred, proc, what):
    for _ in range(1200):
        for line in log.read_text().splitlines():
            try:
                msg = json.loads(line).get("msg", "")
            except ValueError:
                continue
            p = pred(msg)
            if p:
                return p
        if proc.poll() is not None:
            sys.exit(f"{what} exited:\n" + log.read_text()[-3000:])
        time.sleep(0.05)
    sys.exit(f"{what} did not start")


def slope_kb_min(samples, after):
    """Least-squares slope (KB/min) of (t, kb) samples taken at t >= after."""
    pts = [(t, kb) for t, kb in samples if t >= after]
    if len(pts) < 3:
        return float("nan")
    n = len(pts)
    mt = sum(t for t, _ in pts) / n
    mk = sum(k for _, k in pts) / n
    num = sum((t - mt) * (k - mk) for t, k in pts)
    den = sum((t - mt) ** 2 for t, _ in pts)
    return num / den * 60 if den else float("nan")


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.counts = {}

    def add(self, key, n=1):
        with self.lock:
            self.counts[key] = self.counts.get(key, 0) + n


def call(port, method, path, body=None, headers=None, timeout=30, stream_cut=False):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        c.request(method, path, body=body, headers=headers or {})
        r = c.getresponse()
        if stream_cut:
            r.read1(64)  # the first chunk, then the connection goes: a cancelled stream
            return r.status
        r.read()
        return r.status
    finally:
        c.close()


def llm_client(port, stop, stats, seed):
    rnd = random.Random(seed)
    i = 0
    while not stop.is_set():
        i += 1
        tenant = rnd.choice(["acme", "globex", "initech"])
        stream = i % 10 != 0
        body = json.dumps({"model": "chat", "max_tokens": rnd.randint(4, 24), "stream": stream,
                           "messages": [{"role": "user", "content": "tell me about the sea " * rnd.randint(1, 6)}]})
        try:
            st = call(port, "POST", "/v1/chat/completions", body,
                      {"Content-Type": "application/json", "X-Tenant": tenant}, stream_cut=(i % 25 == 0))
            stats.add(f"llm {st}")
        except Exception as e:  # noqa: BLE001  (counted, the soak goes on)
            stats.add(f"llm error {type(e).__name__}")


def poller(rport, wport, stop, stats):
    i = 0
    while not stop.is_set():
        i += 1
        for port, path in ((rport, "/admin/status"), (rport, "/metrics"), (wport, "/v2/status"),
                           (wport, "/metrics")):
            try:
                stats.add(f"poll {call(port, 'GET', path)}")
            except Exception as e:  # noqa: BLE001
                stats.add(f"poll error {type(e).__name__}")
        try:
            if i % 10 == 0:
                stats.add(f"poll {call(rport, 'GET', '/dashboard')}")
            if i % 3 == 0:  # bad requests: an unknown model, bad JSON, a tenant nobody configured
                stats.add(f"bad {call(rport, 'POST', '/v2/models/nosuch/infer', b'{}')}")
                stats.add(f"bad {call(rport, 'POST', '/v2/models/demo/infer', b'{not json')}")
                stats.add(f"bad {call(rport, 'POST', '/v2/models/demo/infer', b'{}', {'X-Tenant': f't{i}'})}")
        except Exception as e:  # noqa: BLE001
            stats.add(f"bad error {type(e).__name__}")
        stop.wait(0.5)


class Cut(Exception):
    """A signal (SIGTERM from a `timeout` or a tool's time limit, SIGHUP, SIGINT) stopped the
    load early: the report is printed over the samples taken so far."""


def on_signal(signum, frame):
    raise Cut(signal.Signals(signum).name)


def heaptrack_report(r, w, tmp, started, t0, warmup, end, interp):
    """Stops both programs (heaptrack writes its last records at exit), reads their traces
    and prints each one's live heap by allocation site at the end of warm-up and 10 s before
    the end of the load (bench/htdiff.py; seconds on the program's own clock)."""
    for pr in (r, w):
        pr.terminate()
        pr.wait(timeout=60)
    for name in ("router", "worker"):
        raw = tmp / f"heaptrack-{name}.raw"
        if not raw.exists():
            continue
        zst = tmp / f"heaptrack-{name}.zst"
        with open(raw, "rb") as src, open(zst, "wb") as dst:
            it = subprocess.Popen([str(interp)], stdin=src, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
            subprocess.run(["zstd", "-q", "-1"], stdin=it.stdout, stdout=dst, check=True)
            it.wait()
        raw.unlink()
        lead = t0 - started[name]  # the program started this long before the load's clock
        print(f"\n{name}: live heap by allocation site (heaptrack, {zst}):", flush=True)
        subprocess.run(["/usr/bin/python3", str(ROOT / "bench" / "htdiff.py"), str(zst), f"{warmup + lead:.0f}",
                        f"{end - 10 + lead:.0f}", "--top", "8"])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=1800)
    ap.add_argument("--warmup", type=float, default=120)
    ap.add_argument("--cycle", type=float, default=20)
    ap.add_argument("--sample", type=float, default=5)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--llm-streams", type=int, default=2)
    ap.add_argument("--no-llm", action="store_true", help="KServe and polls only (no tokenizer needed)")
    ap.add_argument("--bin", default=str(ROOT / "build" / "bin"))
    ap.add_argument("--keep", action="store_true", help="keep the run's folder (logs, samples)")
    ap.add_argument("--router-env", action="append", default=[], metavar="K=V",
                    help="an environment variable for tierrouter alone (e.g. LD_PRELOAD=... for a heap profile)")
    ap.add_argument("--worker-env", action="append", default=[], metavar="K=V", help="the same for tierserve")
    ap.add_argument("--no-heap", action="store_true", help="without bench_mallstat.so (no heap figures)")
    ap.add_argument("--heaptrack", action="store_true",
                    help="run both under heaptrack and print the live heap's growth by allocation site")
    a = ap.parse_args()
    bin_ = pathlib.Path(a.bin).resolve()
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="tierserve-soak-"))
    procs = []
    # Killed by a signal's default action, Python runs no finally: the report was lost and both
    # programs went on running. A 10-minute soak under a 600-s limit (start-up comes on top of
    # --seconds) printed nothing that way. Now a signal ends the load and the report follows.
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, on_signal)
    try:
        repo = tmp / "models"
        repo.mkdir()
        (repo / "demo").symlink_to(ROOT / "models" / "demo")
        llm = not a.no_llm
        if llm:
            out = subprocess.run(["/usr/bin/python3", str(ROOT / "tests/models/gen_llm_model.py"),
                                  str(repo / "chat" / "1")], capture_output=True, text=True)
            if out.returncode != 0:
                sys.exit("writing the tiny LLM failed (tests/llm/node_modules?); --no-llm runs without it\n"
                         + out.stderr[-2000:])
            cfgp = repo / "chat" / "1" / "tokenizer_config.json"
            cfg = json.loads(cfgp.read_text())
            cfg["chat_template"] = (ROOT / "tests/llm/chat_templates/llama2-chat.jinja").read_text()
            cfgp.write_text(json.dumps(cfg))
        (bpath, hl), _ = request_bodies("input", [1, 4], tmp)
        # glibc's heap of each program beside its RSS (bench/mallstat.c), when it is built
        shim = next((d / "bench_mallstat.so" for d in (bin_, ROOT / "build" / "bin")
                     if (d / "bench_mallstat.so").exists()), None)
        heap = {"router": tmp / "heap-router.txt", "worker": tmp / "heap-worker.txt"}

        htlib = pathlib.Path("/usr/lib/heaptrack/libheaptrack_preload.so")
        htinterp = htlib.parent / "libexec" / "heaptrack_interpret"
        if a.heaptrack and not (htlib.exists() and htinterp.exists()):
            sys.exit(f"--heaptrack: {htlib} or {htinterp} missing (the Debian package heaptrack)")
        started = {}

        def heap_env(name):
            env, pre = {}, []
            if a.heaptrack:
                pre.append(str(htlib))
                env["DUMP_HEAPTRACK_OUTPUT"] = str(tmp / f"heaptrack-{name}.raw")
            if not a.no_heap and shim:
                pre.append(str(shim))
                env.update(MALLSTAT_OUT=str(heap[name]), MALLSTAT_S=str(int(a.sample)))
            if pre:
                env["LD_PRELOAD"] = ":".join(pre)
            started[name] = time.monotonic()
            return env
        wlog = tmp / "worker.log"
        w = subprocess.Popen([str(bin_ / "tierserve"), f"--model-repository={repo}"], stderr=open(wlog, "wb"),
                             env={**os.environ, "EXECUTION_MODE": "cpu", "TIERSERVE_HTTP_ADDRESS": "127.0.0.1",
                                  "TIERSERVE_HTTP_PORT": "0", "TIERSERVE_LOG_LEVEL": "info", **heap_env("worker"),
                                  **dict(kv.split("=", 1) for kv in a.worker_env)})  # the last one given wins
        procs.append(w)
        wport = wait_port(wlog, lambda m: int(m.rsplit(":", 1)[1]) if m.startswith("listening on ") else None,
                          w, "tierserve")
        wait_port(wlog, lambda m: m.startswith("server ready"), w, "tierserve")
        models = "    models:\n      - {name: demo, serve: demo}\n" + \
                 ("      - {name: chat, serve: chat}\n" if llm else "")
        pools = "".join(f"  - name: {n}\n    kind: {n}\n    min_tier: cpu\n    max_in_flight: 64\n"
                        f"    backends: [\"127.0.0.1:{wport}\"]\n{models}"
                        f"    cost: {{model: usage, usd_per_hour: 2.0, usd_per_1k_tokens: 0.01}}\n"
                        for n in ("gpu", "cpu"))
        rcfg = tmp / "router.yaml"
        rcfg.write_text("address: 127.0.0.1\nport: 0\nprobe_interval_ms: 250\n"
                        "tenants:\n  - {name: acme, weight: 2}\n  - {name: globex}\n  - {name: initech}\n"
                        f"pools:\n{pools}")
        rlog = tmp / "router.log"
        r = subprocess.Popen([str(bin_ / "tierrouter"), "--config", str(rcfg)], stderr=open(rlog, "wb"),
                             env={**os.environ, "TIERROUTER_LOG_LEVEL": "info", **heap_env("router"),
                                  **dict(kv.split("=", 1) for kv in a.router_env)})
        procs.append(r)
        rport = wait_port(rlog, lambda m: int(m.split(":")[-1].split()[0]) if "listening on" in m else None,
                          r, "tierrouter")
        time.sleep(1.0)  # first probes
        stats, stop = Stats(), threading.Event()
        threads = [threading.Thread(target=poller, args=(rport, wport, stop, stats), daemon=True)]
        if llm:
            threads += [threading.Thread(target=llm_client, args=(rport, stop, stats, k), daemon=True)
                        for k in range(a.llm_streams)]
        for t in threads:
            t.start()
        samples = {"router": [], "worker": [], "router anon": [], "worker anon": []}
        t0 = time.monotonic()

        def sampler():
            while not stop.is_set():
                t = time.monotonic() - t0
                for name, pr in (("router", r), ("worker", w)):
                    if pr.poll() is not None:
                        continue
                    rss, anon = rss_kb(pr.pid)
                    samples[name].append((t, rss))
                    samples[name + " anon"].append((t, anon))
                stop.wait(a.sample)
        st = threading.Thread(target=sampler, daemon=True)
        st.start()
        print(f"soak: {a.seconds:.0f} s, warm-up {a.warmup:.0f} s, KServe c={a.concurrency} in {a.cycle:.0f}-s "
              f"cycles{f', {a.llm_streams} LLM clients' if llm else ''}, admin polls; router :{rport}, "
              f"worker :{wport}; the load ends at {time.strftime('%H:%M:%S', time.localtime(time.time() + a.seconds))} "
              "(a limit on the whole command must leave the start-up, a minute, on top)", flush=True)
        last_print = 0.0
        cut = None
        try:
            while time.monotonic() - t0 < a.seconds:
                secs = min(a.cycle, a.seconds - (time.monotonic() - t0))
                if secs < 1:
                    break
                try:  # a load generator that hangs (a connection the router never answers) ends the cycle
                    p = subprocess.run([str(bin_ / "bench_loadgen"), "127.0.0.1", str(rport),
                                        "/v2/models/demo/infer", str(bpath), str(hl), str(a.concurrency),
                                        f"{secs:.1f}"], capture_output=True, text=True, timeout=secs + 60)
                    res = json.loads(p.stdout)
                    stats.add("kserve requests", res["requests"])
                    stats.add("kserve errors", res.get("errors", 0))
                except subprocess.TimeoutExpired:
                    stats.add("kserve loadgen timeouts")
                except ValueError:
                    stats.add("kserve loadgen failures")
                now = time.monotonic() - t0
                if now - last_print >= 60 or now >= a.seconds - 1:
                    last_print = now
                    rr, ww = samples["router"][-1][1], samples["worker"][-1][1]
                    print(f"  {now / 60:5.1f} min  router {rr / 1024:7.2f} MB  worker {ww / 1024:7.2f} MB  "
                          f"kserve {stats.counts.get('kserve requests', 0)}", flush=True)
                for pr, name in ((r, "tierrouter"), (w, "tierserve")):
                    if pr.poll() is not None:
                        raise Cut(f"{name} exited (code {pr.returncode}; logs in {tmp})")
        except Cut as e:
            cut = str(e)
        for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):  # the report is short: let it finish
            signal.signal(sig, signal.SIG_IGN)
        stop.set()
        join_by = time.monotonic() + 40  # the clients' calls time out after 30 s
        for t in threads + [st]:
            t.join(timeout=max(0.1, join_by - time.monotonic()))
        if cut:
            print(f"\nCUT SHORT at {time.monotonic() - t0:.0f} s of {a.seconds:.0f}: {cut}; the figures below are "
                  "over the samples taken until then", flush=True)
        print("\nrequests:", ", ".join(f"{k}: {v}" for k, v in sorted(stats.counts.items())))
        end = samples["router"][-1][0]
        late = max(a.warmup, end / 2)
        print(f"\nRSS after warm-up ({a.warmup:.0f} s), least-squares over the samples every {a.sample:.0f} s, "
              f"and over the last half (from {late:.0f} s):")
        for name in ("router", "router anon", "worker", "worker anon"):
            s = samples[name]
            at_w = next((kb for t, kb in s if t >= a.warmup), s[-1][1])
            print(f"  {name:11} start {s[0][1] / 1024:7.2f} MB  after warm-up {at_w / 1024:7.2f} MB  "
                  f"end {s[-1][1] / 1024:7.2f} MB  max {max(kb for _, kb in s) / 1024:7.2f} MB  "
                  f"slope {slope_kb_min(s, a.warmup):+8.2f} KB/min (target < 1), last half "
                  f"{slope_kb_min(s, late):+8.2f} KB/min")
        for name, path in heap.items():
            if not path.exists():
                continue
            rows = [tuple(float(x) for x in line.split()) for line in path.read_text().splitlines()
                    if len(line.split()) == 5]  # a line cut by the program's end is left out
            if len(rows) < 3:
                continue
            at_w = next((r for r in rows if r[0] >= a.warmup), rows[-1])
            print(f"  {name} heap (glibc, all arenas): arena {at_w[1] / 1024:.0f} -> {rows[-1][1] / 1024:.0f} KB, "
                  f"in use {at_w[2] / 1024:.0f} -> {rows[-1][2] / 1024:.0f} KB (slope "
                  f"{slope_kb_min([(r[0], r[2] / 1024) for r in rows], a.warmup):+.2f} KB/min, last half "
                  f"{slope_kb_min([(r[0], r[2] / 1024) for r in rows], late):+.2f}), mmapped "
                  f"{rows[-1][4] / 1024:.0f} KB")
        (tmp / "samples.json").write_text(json.dumps(samples))
        if a.heaptrack:
            heaptrack_report(r, w, tmp, started, t0, a.warmup, end, htinterp)
    finally:
        for pr in reversed(procs):
            if pr.poll() is None:
                pr.terminate()
                try:
                    pr.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    pr.kill()
        if a.keep:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
