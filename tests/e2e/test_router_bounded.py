"""tierrouter's memory does not grow with the number of distinct things clients send
(docs/router.md "Memory"): every table keyed by what a client controls has a fixed size.

A hostile or merely large population sends N distinct values of each key the router looks
at: client addresses with wrong API keys (the failed-authentication table,
policy/authlimit.h), model names no pool serves (the latency label set), tenant names nobody
configured, request ids. After a warm-up that sends as many requests with one value of each,
RSS may not grow by more than a bound far below what N entries of any table would cost
(N x 64 bytes at the least). Distinct client addresses come from 127.0.0.0/8 (all loopback
on Linux), one connection each. No backend listens: the router answers every request
itself (401, 404, 503). Under the sanitizers RSS means nothing (shadow memory, quarantine):
the load still runs there, for ASan's sake, and only the RSS check is skipped.
"""
import socket
import time

from conftest import SANITIZED
from helpers import Router, free_port, rss_kb

N = 20000
KEY = "acme-key-0001"
ADMIN = "bounded-admin-token"
GROWTH_BOUND_KB = 640  # N entries of 64 bytes: 1250 KB


BODY = b'{"inputs":[{"name":"input","datatype":"FP32","shape":[1,4],"data":[1,2,3,4]}]}'


def request(model, headers):
    h = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    return (f"POST /v2/models/{model}/infer HTTP/1.1\r\nHost: 127.0.0.1\r\n{h}"
            f"Content-Type: application/json\r\nContent-Length: {len(BODY)}\r\n\r\n").encode() + BODY


def read_reply(s, buf=b""):
    """One Content-Length-framed reply off s; returns (status, what followed it)."""
    while b"\r\n\r\n" not in buf:
        chunk = s.recv(65536)
        assert chunk, buf
        buf += chunk
    head, _, rest = buf.partition(b"\r\n\r\n")
    n = int(next(l.split(b":")[1] for l in head.split(b"\r\n") if l.lower().startswith(b"content-length:")))
    while len(rest) < n:
        chunk = s.recv(65536)
        assert chunk
        rest += chunk
    return int(head.split()[1]), rest[n:]


def keepalive_burst(port, reqs):
    """Sends the requests on one connection, pipelined in batches; returns their statuses."""
    out = []
    with socket.create_connection(("127.0.0.1", port), timeout=20) as s:
        for i in range(0, len(reqs), 50):
            s.sendall(b"".join(reqs[i:i + 50]))
            rest = b""
            for _ in reqs[i:i + 50]:
                code, rest = read_reply(s, rest)
                out.append(code)
    return out


def from_address(port, addr, req):
    """One request on a new connection from source address addr; returns its status."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(20)
    try:
        s.bind((addr, 0))
        s.connect(("127.0.0.1", port))
        s.sendall(req)
        return read_reply(s)[0]
    finally:
        s.close()


def load(port, distinct, n):
    """n requests of each kind: distinct values, or one value over and over."""
    v = (lambda i: i) if distinct else (lambda i: 0)
    codes = keepalive_burst(port, [request(f"nosuch-{v(i)}", {"X-Api-Key": KEY}) for i in range(n)])
    assert set(codes) == {404}, set(codes)
    codes = keepalive_burst(port, [request("demo", {"X-Api-Key": KEY, "X-Request-Id": f"rid-{v(i)}",
                                                    "X-Tenant": f"tenant-{v(i)}"}) for i in range(n)])
    assert set(codes) == {503}, set(codes)  # the model is served, no backend is up
    bad = request("demo", {"X-Api-Key": "wrong-key-0000"})
    # distinct: 127.2.0.1 on, one address each (the warm-up's one, 127.1.0.1, is blocked by now)
    addr = (lambda i: f"127.{2 + i // 64000}.{i // 250 % 256}.{1 + i % 250}") if distinct else (lambda i: "127.1.0.1")
    codes = {from_address(port, addr(i), bad) for i in range(n)}
    assert codes == ({401} if distinct else {401, 429}), codes  # one address failing over and over is blocked


def test_distinct_client_values_do_not_grow_the_router(tmp_path):
    cfg = (f"address: 127.0.0.1\nprobe_interval_ms: 100\nadmin_token: {ADMIN}\n"
           f"tenants:\n  - {{name: acme, api_key: {KEY}}}\n"
           f"pools:\n  - name: cpu\n    kind: cpu\n    min_tier: cpu\n    backends: [\"127.0.0.1:{free_port()}\"]\n"
           "    models:\n      - {name: demo, serve: demo}\n")
    r = Router(cfg, tmp_path, status_headers={"Authorization": f"Bearer {ADMIN}"})
    try:
        t0 = time.monotonic()
        load(r.port, False, N // 4)  # warm-up: the code paths, the buffers, the first allocations
        base = rss_kb(r.proc.pid)
        load(r.port, True, N)
        grown = rss_kb(r.proc.pid) - base
        print(f"router RSS {base} KB after the warm-up, {grown:+d} KB after {N} distinct values of each key "
              f"({time.monotonic() - t0:.1f} s)")
        if not SANITIZED:
            assert grown < GROWTH_BOUND_KB, (
                f"router RSS grew by {grown} KB over {N} distinct client addresses, model names, tenants and "
                f"request ids (bound {GROWTH_BOUND_KB} KB): a table grows with what clients send")
    finally:
        code = r.stop()
    assert code == 0
