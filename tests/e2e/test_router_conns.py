"""The router's connection cap (docs/router.md "Connections"): max_connections client
connections at once; the next one gets the layer's canned JSON 503 naming the key (on a TLS
listener: the close, no handshake), counted in tierrouter_connections_refused_total. And at
start, both programs hold the cap against RLIMIT_NOFILE: the soft limit is raised as far as
the hard one allows, and a cap that still cannot be reached is a warning naming both numbers.

Raw sockets (and Python's ssl over them), never retried; every socket has a timeout.
"""
import json
import os
import re
import resource
import socket
import subprocess
import time

import pytest

from conftest import BIN, sanitizer_env, track
from helpers import free_port
from test_router import ROUTER_BIN, Router, pools_config
from test_tls import Router as TlsRouter, client_ctx, pki, router_config  # noqa: F401 (pki: a fixture)

CAP = 8


def read_reply(s):
    """One Content-Length framed reply: (status, head, body); the socket may then close."""
    data = b""
    deadline = time.monotonic() + 10
    while b"\r\n\r\n" not in data and time.monotonic() < deadline:
        chunk = s.recv(65536)
        assert chunk, f"connection closed before a reply: {data[:200]!r}"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    n = int(re.search(rb"(?im)^content-length: *(\d+)", head).group(1))
    while len(body) < n and time.monotonic() < deadline:
        chunk = s.recv(65536)
        assert chunk, "connection closed inside a reply"
        body += chunk
    assert len(body) == n, (len(body), n)
    return int(head.split(b" ", 2)[1]), head, body


def get(s, path):
    s.sendall(b"GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" % path.encode())
    return read_reply(s)


def refused_metric(s):
    status, _, body = get(s, "/metrics")
    assert status == 200
    m = re.search(r"(?m)^tierrouter_connections_refused_total (\d+)$", body.decode())
    assert m, "no tierrouter_connections_refused_total in /metrics"
    return int(m.group(1))


def test_the_connection_past_max_connections_gets_a_503_naming_the_key(tmp_path):
    r = Router(pools_config([("p", "cpu", False, [free_port()], None)], extra=f"max_connections: {CAP}"),
               tmp_path)
    conns = []
    try:
        for _ in range(CAP):  # each holds its place with a request answered, then idles
            s = socket.create_connection(("127.0.0.1", r.port), timeout=10)
            conns.append(s)
            assert get(s, "/v2/health/live")[0] in (200, 503)
        before = refused_metric(conns[0])
        with socket.create_connection(("127.0.0.1", r.port), timeout=10) as extra:
            extra.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            status, head, body = read_reply(extra)
        assert status == 503, head
        assert re.search(rb"(?im)^connection: *close", head), head
        assert re.search(rb"(?im)^content-type: *application/json", head), head
        assert re.search(rb"(?im)^retry-after: *\d+", head), head
        msg = json.loads(body)["error"]
        assert "max_connections" in msg and str(CAP) in msg, msg
        assert refused_metric(conns[0]) == before + 1
        for s in conns:  # the first CAP still work
            assert get(s, "/v2/health/live")[0] in (200, 503)
        conns.pop().close()  # a place frees: a new connection is served again
        deadline = time.monotonic() + 5
        while True:
            with socket.create_connection(("127.0.0.1", r.port), timeout=10) as s:
                status = get(s, "/v2/health/live")[0]
            if status != 503 or time.monotonic() > deadline:
                break
            time.sleep(0.05)  # the close reaches the router's loop a moment later
        assert status != 503, "a freed place is not taken again"
    finally:
        for s in conns:
            s.close()
        code = r.stop()
    assert code == 0


def test_tls_connection_past_max_connections_is_closed_without_a_reply(pki, tmp_path):  # noqa: F811
    cap = 2
    r = TlsRouter(router_config(pki, [free_port()], extra=f"max_connections: {cap}"), tmp_path)
    ctx = client_ctx(pki)
    conns = []
    try:
        for _ in range(cap):
            s = ctx.wrap_socket(socket.create_connection(("127.0.0.1", r.port), timeout=10),
                                server_hostname="127.0.0.1")
            conns.append(s)
            assert get(s, "/v2/health/live")[0] in (200, 503)
        before = refused_metric(conns[0])
        with socket.create_connection(("127.0.0.1", r.port), timeout=10) as raw:
            got = b""
            try:
                raw.sendall(b"\x16\x03\x01\x00\x05hello")  # a TLS record's first bytes
                deadline = time.monotonic() + 5
                while time.monotonic() < deadline:
                    chunk = raw.recv(4096)
                    if not chunk:
                        break
                    got += chunk
            except (ConnectionResetError, BrokenPipeError):
                pass
        assert got == b"", f"a refused TLS connection got bytes: {got[:200]!r}"
        assert refused_metric(conns[0]) == before + 1
        for s in conns:
            assert get(s, "/v2/health/live")[0] in (200, 503)
    finally:
        for s in conns:
            s.close()
        code = r.stop()
    assert code == 0


# ---- the cap against RLIMIT_NOFILE ------------------------------------------------------------

def start_limited(cmd, env, log, nofile):
    """Starts cmd with RLIMIT_NOFILE (soft, hard) = nofile; returns the process once it
    listens (its log then holds every start-up line)."""
    def limit():
        resource.setrlimit(resource.RLIMIT_NOFILE, nofile)
    p = track(subprocess.Popen(cmd, stdout=open(log, "wb"), stderr=subprocess.STDOUT, env=env, preexec_fn=limit))
    deadline = time.time() + 30
    while time.time() < deadline and p.poll() is None and "listening on" not in log.read_text(errors="replace"):
        time.sleep(0.05)
    assert "listening on" in log.read_text(errors="replace"), log.read_text(errors="replace")[-4000:]
    return p


def soft_nofile(pid):
    with open(f"/proc/{pid}/limits") as f:
        return int(re.search(r"^Max open files\s+(\d+)", f.read(), re.M).group(1))


def stop(p):
    p.terminate()
    return p.wait(timeout=20)


def router_cmd(tmp_path, cap):
    cfg = tmp_path / f"router-{time.monotonic_ns()}.yaml"
    cfg.write_text(pools_config([("p", "cpu", False, [free_port()], None)], extra=f"max_connections: {cap}"))
    return [ROUTER_BIN, "--config", str(cfg)], {**os.environ, "TIERROUTER_PORT": "0", **sanitizer_env()}


@pytest.fixture(scope="module")
def demo_repo(tmp_path_factory):
    import gen_test_models
    d = tmp_path_factory.mktemp("conns-repo")
    model = d / "demo" / "1" / "model.onnx"
    model.parent.mkdir(parents=True)
    model.write_bytes(gen_test_models.build_model("demo", 1).SerializeToString())
    return d


def worker_cmd(repo, cap):
    env = {**os.environ, "TIERSERVE_HTTP_ADDRESS": "127.0.0.1", "TIERSERVE_HTTP_PORT": "0",
           "EXECUTION_MODE": "cpu", "TIERSERVE_MAX_CONNECTIONS": str(cap), **sanitizer_env()}
    return [BIN, f"--model-repository={repo}"], env


@pytest.mark.parametrize("program", ["router", "worker"])
def test_a_cap_above_the_open_file_limit_is_a_warning_naming_both(program, tmp_path, demo_repo):
    cmd, env = router_cmd(tmp_path, 4096) if program == "router" else worker_cmd(demo_repo, 1024)
    cap, setting = (4096, "max_connections") if program == "router" else (1024, "TIERSERVE_MAX_CONNECTIONS")
    log = tmp_path / "log"
    p = start_limited(cmd, env, log, (200, 200))
    code = stop(p)
    text = log.read_text(errors="replace")
    lines = [l for l in text.splitlines() if "RLIMIT_NOFILE" in l]
    assert lines, f"no RLIMIT_NOFILE warning:\n{text[-3000:]}"
    assert '"level":"warn"' in lines[0] and f"{setting}={cap}" in lines[0] and "is 200" in lines[0], lines[0]
    assert code == 0, text[-3000:]


@pytest.mark.parametrize("program", ["router", "worker"])
def test_the_soft_open_file_limit_is_raised_to_what_the_cap_needs(program, tmp_path, demo_repo):
    cmd, env = router_cmd(tmp_path, 4096) if program == "router" else worker_cmd(demo_repo, 1024)
    cap = 4096 if program == "router" else 1024
    log = tmp_path / "log"
    hard = min(resource.getrlimit(resource.RLIMIT_NOFILE)[1], 20000)
    assert hard > cap + 1000, f"this machine's hard limit {hard} leaves no room for the test"
    p = start_limited(cmd, env, log, (256, hard))
    try:
        soft = soft_nofile(p.pid)
    finally:
        code = stop(p)
    text = log.read_text(errors="replace")
    assert cap < soft <= hard, (soft, hard)
    assert "RLIMIT_NOFILE" not in text, text[-3000:]
    assert code == 0, text[-3000:]
