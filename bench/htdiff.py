#!/usr/bin/python3
"""The live heap of a program at two moments of a heaptrack trace, by allocation site.

  bench/htdiff.py TRACE.zst T1_S [T2_S] [--top N] [--every S]

TRACE is heaptrack's interpreted output (heaptrack -o, or heaptrack_interpret of the raw
file that bench/soak.py --heaptrack writes). T1_S and T2_S are seconds since the program
started (T2: the end of the trace). It prints the bytes live at each moment and, for the
allocation sites whose live bytes differ, the difference and the call stack, largest
growth first. A leak or a table without a bound shows as a site that grows in every such
window; the requests in flight at either moment show as a few blocks that come and go.
heaptrack's own viewers give the peak and the leaks at exit, not the growth between two
moments of a long run, which is what a soak asks.

With --every S it samples the live bytes of every site each S seconds between T1 and T2
and ranks the sites by the least-squares slope of those samples (KB/min): the requests in
flight at two single moments (a few KB either way) average out, and a growth of a byte a
thousand requests still shows.

With --modules it counts instead the allocations made between T1 and T2 (malloc traffic,
not live bytes) by the library that asked: the module of each call stack's first frame
outside the C and C++ runtimes (libc, libstdc++, libgcc, ld.so, heaptrack's preload). The
worker's question: how much of its malloc traffic is ONNX Runtime's own."""
import argparse
import collections
import subprocess
import sys


def slope(pts):
    n = len(pts)
    mt = sum(t for t, _ in pts) / n
    mv = sum(v for _, v in pts) / n
    den = sum((t - mt) ** 2 for t, _ in pts)
    return sum((t - mt) * (v - mv) for t, v in pts) / den if den else 0.0


def by_slope(samples, stack, top):
    """Sites ranked by the slope of their live bytes over the samples (KB/min)."""
    if len(samples) < 3:
        sys.exit("fewer than 3 samples between T1 and T2")
    width = len(samples[-1][1])
    tmin = [s[0] / 60000 for s in samples]
    total = [(t, sum(v) / 1024) for t, (_, v) in zip(tmin, samples)]
    print(f"live heap {total[0][1]:.1f} KB at {samples[0][0] / 1000:.0f} s, {total[-1][1]:.1f} KB at "
          f"{samples[-1][0] / 1000:.0f} s; {len(samples)} samples, slope {slope(total):+.2f} KB/min")
    rows = []
    for tr in range(1, width):
        vals = [(t, (v[tr] if tr < len(v) else 0) / 1024) for t, (_, v) in zip(tmin, samples)]
        if any(x != vals[0][1] for _, x in vals):
            rows.append((slope(vals), vals[-1][1] - vals[0][1], tr))
    for sl, d, tr in sorted(rows, reverse=True)[:top]:
        if sl <= 0:
            break
        print(f"  {sl:+8.2f} KB/min ({d:+.1f} KB)  " + "\n      <- ".join(stack(tr)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("t1", type=float)
    ap.add_argument("t2", type=float, nargs="?", default=float("inf"))
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument("--frames", type=int, default=8)
    ap.add_argument("--every", type=float, default=0, help="seconds between samples: rank sites by slope")
    ap.add_argument("--modules", action="store_true", help="allocations between T1 and T2 by the library asking")
    a = ap.parse_args()
    t1, t2 = a.t1 * 1000, a.t2 * 1000
    cat = "zstdcat" if a.trace.endswith(".zst") else "zcat" if a.trace.endswith(".gz") else "cat"
    p = subprocess.Popen([cat, a.trace], stdout=subprocess.PIPE, text=True, errors="replace", bufsize=1 << 20)
    # the format (heaptrack 1.x): 's LEN TEXT' strings, 'i IP MODULE [FUNC FILE LINE ...]' code
    # addresses, 't IP PARENT' stack nodes (all 1-based, hex), 'a SIZE TRACE' allocation kinds
    # (0-based), '+ KIND' / '- KIND' an allocation and its free, 'c MS' the clock
    strings, ips, traces, kinds, live = [None], [None], [None], [], []
    site = [0]  # live bytes by trace (for --every)
    samples = []  # (ms, copy of site)
    every = a.every * 1000
    snap1 = snap2 = None
    now = 0
    calls = collections.Counter()  # kind -> allocations between T1 and T2 (--modules)
    for line in p.stdout:
        c = line[:1]
        if c == "+":
            k = int(line[2:], 16)
            live[k] += 1
            if a.modules and t1 <= now <= t2:
                calls[k] += 1
            if every:
                site[kinds[k][1]] += kinds[k][0]
        elif c == "-":
            k = int(line[2:], 16)
            live[k] -= 1
            if every:
                site[kinds[k][1]] -= kinds[k][0]
        elif c == "a":
            _, size, trace = line.split()
            kinds.append((int(size, 16), int(trace, 16)))
            live.append(0)
        elif c == "c":
            now = int(line.split()[1], 16)
            if every and t1 <= now <= t2 and (not samples or now - samples[-1][0] >= every):
                samples.append((now, list(site)))
            if snap1 is None and now >= t1:
                snap1 = (now, list(live))
            if snap2 is None and now >= t2:
                snap2 = (now, list(live))
        elif c == "i":
            f = line.split()
            ips.append((int(f[1], 16), int(f[2], 16), int(f[3], 16) if len(f) > 3 else 0))
        elif c == "t":
            _, ip, parent = line.split()
            traces.append((int(ip, 16), int(parent, 16)))
            site.append(0)
        elif c == "s":
            rest = line[2:].rstrip("\n")
            strings.append(rest.split(" ", 1)[1] if " " in rest else "")
    p.wait()
    if snap1 is None:
        sys.exit(f"the trace ends at {now / 1000:.1f} s, before {a.t1} s")
    if snap2 is None:
        snap2 = (now, live)

    def stack(ti):
        out = []
        while ti and len(out) < a.frames:
            ip, parent = traces[ti]
            addr, mod, fn = ips[ip]
            out.append(f"{strings[fn] if fn else hex(addr)} [{strings[mod].rsplit('/', 1)[-1] if mod else '?'}]")
            ti = parent
        return out

    if every:
        by_slope(samples, stack, a.top)
        return
    if a.modules:
        runtime = ("libc.so", "libstdc++", "libgcc", "ld-linux", "libheaptrack", "libm.so")

        def asker(ti):
            while ti:
                ip, parent = traces[ti]
                mod = ips[ip][1]
                name = strings[mod].rsplit("/", 1)[-1] if mod else "?"
                if not name.startswith(runtime):
                    return name
                ti = parent
            return "?"
        by_mod = collections.defaultdict(lambda: [0, 0])
        for k, n in calls.items():
            m = by_mod[asker(kinds[k][1])]
            m[0] += n
            m[1] += n * kinds[k][0]
        total_n = sum(v[0] for v in by_mod.values()) or 1
        total_b = sum(v[1] for v in by_mod.values()) or 1
        print(f"allocations from {t1 / 1000:.0f} to {min(t2, now) / 1000:.0f} s: {total_n}, "
              f"{total_b / 1048576:.1f} MiB, by the library asking:")
        for name, (n, b) in sorted(by_mod.items(), key=lambda kv: -kv[1][0]):
            print(f"  {name:32} {n:10d} calls ({100 * n / total_n:5.1f} %)  {b / 1048576:9.1f} MiB "
                  f"({100 * b / total_b:5.1f} %)")
        return
    by = collections.defaultdict(lambda: [0, 0])
    tot1 = tot2 = 0
    for k, (size, trace) in enumerate(kinds):
        n1 = snap1[1][k] if k < len(snap1[1]) else 0
        n2 = snap2[1][k] if k < len(snap2[1]) else 0
        tot1 += n1 * size
        tot2 += n2 * size
        if n1 != n2:
            by[trace][0] += (n2 - n1) * size
            by[trace][1] += n2 - n1
    span_min = (snap2[0] - snap1[0]) / 60000
    print(f"live heap at {snap1[0] / 1000:.0f} s {tot1 / 1024:.1f} KB, at {snap2[0] / 1000:.0f} s {tot2 / 1024:.1f} KB: "
          f"{(tot2 - tot1) / 1024:+.1f} KB ({(tot2 - tot1) / 1024 / span_min if span_min else 0:+.2f} KB/min)")
    for trace, (db, dn) in sorted(by.items(), key=lambda kv: -kv[1][0])[:a.top]:
        if db <= 0:
            break
        print(f"  {db / 1024:+8.1f} KB {dn:+6d} blocks  " + "\n      <- ".join(stack(trace)))


if __name__ == "__main__":
    main()
