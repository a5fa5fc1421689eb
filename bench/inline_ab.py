"""Issue 24's c=1 question: does the worker's loop running a request itself (TIERSERVE_INLINE_MAX_US)
pay? One build's worker with its defaults against the same build with other inline bounds, on
bench.py's `mlp_pool` (or `mlp_1ms` with --width 1536), in interleaved rounds with in-process
Run() at 2 threads. Per row, medians over the rounds: throughput and p50 against in-process,
the share of requests run on the loop, and two figures that do not depend on the machine's load:
the worker's voluntary context switches (sleeping threads woken) and CPU time per request.

  /usr/bin/python3 bench/inline_ab.py BIN_DIR C [--width 1024] [--seconds 1.5] [--rounds 6]
                                       [--bounds default,100,0]

The workers take the caller's environment: each measures its own layout at load, and on a loaded
machine two workers can pick different ones (seen: 1t x2 and 1t x1 at c=4, a 2x gap that had
nothing to do with the inline bound), so pin it for an A/B of the bound alone:
  TIERSERVE_INTRA_OP_THREADS=2 TIERSERVE_INSTANCES=1 /usr/bin/python3 bench/inline_ab.py build/bin 1
"""
import argparse
import glob
import pathlib
import statistics
import sys
import tempfile

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import bench  # noqa: E402
import layout_rows  # noqa: E402


def ctx_switches(pid):
    v = 0
    for f in glob.glob(f"/proc/{pid}/task/*/status"):
        try:
            for line in open(f):
                if line.startswith("voluntary_ctxt_switches"):
                    v += int(line.split()[1])
        except OSError:
            pass  # a thread that ended meanwhile
    return v


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("bindir")
    ap.add_argument("c", type=int)
    ap.add_argument("--width", type=int, default=1024)
    ap.add_argument("--seconds", type=float, default=1.5)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--bounds", default="default,100,0")
    a = ap.parse_args()
    bindir = pathlib.Path(a.bindir).resolve()
    bench.BIN = bindir
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="tierserve-inline-ab-"))
    d = tmp / "repo" / "mlp" / "1"
    d.mkdir(parents=True)
    bench.onnx.save(bench.mlp_model(width=a.width, layers=4), str(d / "model.onnx"))
    (bpath, hl), _ = bench.request_bodies("x", [1, a.width], tmp)
    url = "/v2/models/mlp/infer"
    bounds = a.bounds.split(",")
    if len(set(bounds)) != len(bounds):
        sys.exit("--bounds: each bound once")
    ws = {b: bench.Worker(tmp / "repo", tmp, binary=bindir / "tierserve",
                          env={} if b == "default" else {"TIERSERVE_INLINE_MAX_US": b}) for b in bounds}
    res, ips = {b: [] for b in bounds}, []
    try:
        for _ in range(a.rounds):
            ip = layout_rows.inproc(bindir, d / "model.onnx", a.c, 2, a.seconds)
            ips.append(ip)
            for b, w in ws.items():
                n0, v0, cpu0 = layout_rows.inline_runs(w), ctx_switches(w.proc.pid), w.cpu_s()
                r = bench.loadgen(w.port, url, bpath, hl, a.c, a.seconds)
                n = max(r["requests"], 1)
                inl = layout_rows.inline_runs(w) - n0
                r.update(inl_n=inl, inline=inl / n, vcs=(ctx_switches(w.proc.pid) - v0) / n,
                         cpu_us=(w.cpu_s() - cpu0) / n * 1e6, ratio=r["throughput"] / ip["throughput"],
                         added=r["p50_us"] - ip["p50_us"])
                res[b].append(r)
        print(f"mlp width {a.width} c={a.c}: in-process 2t p50 {statistics.median(r['p50_us'] for r in ips):.0f} us "
              f"{statistics.median(r['throughput'] for r in ips):.0f}/s; {a.rounds} interleaved rounds of {a.seconds} s")
        for b in bounds:
            def m(k):
                return statistics.median(r[k] for r in res[b])
            lay = layout_rows.status_layout(ws[b], "mlp") or {}
            print(f"  inline bound {b:8} x{m('ratio'):.2f} in-process, added p50 {m('added'):+.0f} us "
                  f"(rounds {[round(r['added']) for r in res[b]]}), on the loop {sum(r['inl_n'] for r in res[b])} "
                  f"of {sum(r['requests'] for r in res[b])}, woken {m('vcs'):.2f}/req, CPU {m('cpu_us'):.0f} us/req; "
                  f"layout {lay.get('threads')}t x{lay.get('instances')}{'' if lay.get('spinning') else ' nospin'}")
    finally:
        for w in ws.values():
            w.stop()


if __name__ == "__main__":
    main()
