#!/usr/bin/python3
"""The live heap of a program at two moments of a heaptrack trace, by allocation site.

  bench/htdiff.py TRACE.zst T1_S [T2_S] [--top N]

TRACE is heaptrack's interpreted output (heaptrack -o, or heaptrack_interpret of the raw
file that bench/soak.py --heaptrack writes). T1_S and T2_S are seconds since the program
started (T2: the end of the trace). It prints the bytes live at each moment and, for the
allocation sites whose live bytes differ, the difference and the call stack, largest
growth first. A leak or a table without a bound shows as a site that grows in every such
window; the requests in flight at either moment show as a few blocks that come and go.
heaptrack's own viewers give the peak and the leaks at exit, not the growth between two
moments of a long run, which is what a soak asks."""
import argparse
import collections
import subprocess
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("t1", type=float)
    ap.add_argument("t2", type=float, nargs="?", default=float("inf"))
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument("--frames", type=int, default=8)
    a = ap.parse_args()
    t1, t2 = a.t1 * 1000, a.t2 * 1000
    cat = "zstdcat" if a.trace.endswith(".zst") else "zcat" if a.trace.endswith(".gz") else "cat"
    p = subprocess.Popen([cat, a.trace], stdout=subprocess.PIPE, text=True, errors="replace", bufsize=1 << 20)
    # the format (heaptrack 1.x): 's LEN TEXT' strings, 'i IP MODULE [FUNC FILE LINE ...]' code
    # addresses, 't IP PARENT' stack nodes (all 1-based, hex), 'a SIZE TRACE' allocation kinds
    # (0-based), '+ KIND' / '- KIND' an allocation and its free, 'c MS' the clock
    strings, ips, traces, kinds, live = [None], [None], [None], [], []
    snap1 = snap2 = None
    now = 0
    for line in p.stdout:
        c = line[:1]
        if c == "+":
            live[int(line[2:], 16)] += 1
        elif c == "-":
            live[int(line[2:], 16)] -= 1
        elif c == "a":
            _, size, trace = line.split()
            kinds.append((int(size, 16), int(trace, 16)))
            live.append(0)
        elif c == "c":
            now = int(line.split()[1], 16)
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
