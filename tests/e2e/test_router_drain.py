"""tierrouter on SIGTERM: it drains instead of cutting what is in flight.

Every client here is http.client or a raw socket on one connection, never a client that
re-sends behind the test's back: a request that was cut shows as an error, not as a retry.
"""
import http.client
import signal
import socket
import subprocess
import threading
import time

from conftest import SANITIZER_MARKERS, json_lines, sanitizer_env
from helpers import wait_until
from test_router import ROUTER_BIN, Router, slow_request, slow_workers

ROWS = 2048  # one `slow` request: about half a second on this machine, longer when it is loaded


def _router(tmp_path, ports, env=None):
    """A router on a pool of ports, one request at a time per backend: the rest wait in the
    admission queue. Deadlines are long: a loaded machine must not turn a test of the
    drain into one of timeouts."""
    backends = ", ".join(f'"127.0.0.1:{p}"' for p in ports)
    return Router(f"""
address: 127.0.0.1
probe_interval_ms: 100
admission: {{queue_size: 8, queue_timeout_ms: 120000}}
deadline_ms: {{normal: 120000}}
pools:
  - name: cpu
    kind: cpu
    max_in_flight: 1
    backends: [{backends}]
""", tmp_path, env=env)


def _conn(r):
    return http.client.HTTPConnection("127.0.0.1", r.port, timeout=60)


def _active(r):
    return r.status()["active"]


def _wait_active(r, n, timeout=30):
    wait_until(lambda: _active(r) >= n, timeout, lambda: f"{n} requests in flight at the router: {r.status()}",
               interval=0.02)


def _closed_by_peer(sock, timeout=10):
    """True once the peer has closed sock (EOF or reset), False if it is still open."""
    sock.settimeout(timeout)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


def _wait_exit(r, timeout):
    code = r.proc.wait(timeout=timeout)
    text = r.log.read_text(errors="replace")
    assert not [m for m in SANITIZER_MARKERS if m in text], text[-4000:]
    return code, text


def _log_msgs(text):
    return [line["msg"] for line in json_lines(text) if "msg" in line]


def test_sigterm_drains_in_flight_requests_and_exits_0(tmp_path, test_repo):
    """Four keep-alive clients have slow requests in flight (two at the workers, two in the
    admission queue) when SIGTERM comes: all four get their 200, each reply closes its
    connection, an idle keep-alive connection is closed, a new connection is refused,
    ready answers 503 (live 200) on a connection whose request was under way, and the
    router exits 0 once the last reply is out, logging both drain lines."""
    workers = slow_workers(tmp_path, test_repo, 2)
    r = _router(tmp_path, [w.port for w in workers])
    hdr, body = slow_request(ROWS)
    try:
        r.wait_healthy(2)
        clients = [_conn(r) for _ in range(4)]
        idle = _conn(r)
        for c in clients + [idle]:  # each a keep-alive connection that has served a request
            c.request("GET", "/v2/health/live")
            resp = c.getresponse()
            resp.read()
            assert resp.status == 200 and not resp.will_close
        results = [None] * len(clients)

        def run(i):
            try:
                clients[i].request("POST", "/v2/models/slow/infer", body=body, headers=hdr)
                resp = clients[i].getresponse()
                results[i] = (resp.status, resp.getheader("Connection"), len(resp.read()))
            except Exception as e:  # a cut request: the test fails on it below
                results[i] = e

        # requests under way when the signal comes: their first bytes sent, the rest after
        probe = socket.create_connection(("127.0.0.1", r.port), timeout=10)
        probe.sendall(b"GET /v2/health/ready HTTP/1.1\r\nHost: t\r\n")
        live = socket.create_connection(("127.0.0.1", r.port), timeout=10)
        live.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: t\r\n")
        threads = [threading.Thread(target=run, args=(i,)) for i in range(len(clients))]
        for t in threads:
            t.start()
        _wait_active(r, len(clients))
        r.proc.send_signal(signal.SIGTERM)
        deadline = time.time() + 10
        while "SIGTERM received" not in r.log.read_text() and time.time() < deadline:
            time.sleep(0.01)
        probe.sendall(b"\r\n")
        live.sendall(b"\r\n")
        ready_reply = probe.makefile("rb").read()  # to EOF: the reply closes the connection
        live_reply = live.makefile("rb").read()
        assert ready_reply.startswith(b"HTTP/1.1 503"), ready_reply
        assert b"draining" in ready_reply and b"Connection: close" in ready_reply, ready_reply
        assert live_reply.startswith(b"HTTP/1.1 200") and b"Connection: close" in live_reply, live_reply
        # the idle keep-alive connection is closed by the router, with nothing sent on it,
        # at the signal: well before its 10 s idle timeout, and during the drain, not when
        # the process ends (which logs "drained" first)
        assert _closed_by_peer(idle.sock, 3)
        assert "drained:" not in r.log.read_text()
        # no new connection: refused (or, at worst, closed without a byte)
        try:
            late = socket.create_connection(("127.0.0.1", r.port), timeout=5)
            late.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: t\r\n\r\n")
            assert _closed_by_peer(late, 5), "a connection made after SIGTERM was served"
        except (ConnectionRefusedError, ConnectionResetError, BrokenPipeError):
            pass
        for t in threads:
            t.join(timeout=60)
        assert all(isinstance(x, tuple) for x in results), results
        # every request sent before the signal: answered in full, and its connection's last
        assert [x[0] for x in results] == [200] * len(clients), results
        assert [x[1] for x in results] == ["close"] * len(clients), results
        assert all(x[2] > 0 for x in results), results  # read in full: http.client checks the framing
        code, text = _wait_exit(r, 30)
        assert code == 0, text[-4000:]
        msgs = _log_msgs(text)
        assert "SIGTERM received: not ready; draining 4 request(s) in flight" in msgs, msgs
        assert "drained: no request in flight; exiting" in msgs, msgs
        assert not [m for m in msgs if "drain timeout" in m], msgs
    finally:
        if r.proc.poll() is None:
            r.proc.kill()
            r.proc.wait()
        for w in workers:
            w.stop()


def test_drain_timeout_cuts_what_is_left_and_exits_0(tmp_path, test_repo):
    """Requests that outlive TIERROUTER_DRAIN_TIMEOUT_S (one at the worker, the others in the
    admission queue behind it) are cut: their connections close with no answer that looks
    whole, the warning counts them, and the router exits 0 within the bound instead of
    waiting for them."""
    (w,) = slow_workers(tmp_path, test_repo, 1)
    r = _router(tmp_path, [w.port], env={"TIERROUTER_DRAIN_TIMEOUT_S": "1"})
    hdr, body = slow_request(2 * ROWS)  # each over a second; three in a row take several
    try:
        r.wait_healthy(1)
        clients = [_conn(r) for _ in range(3)]
        outcome = [None] * len(clients)

        def run(i):
            try:
                clients[i].request("POST", "/v2/models/slow/infer", body=body, headers=hdr)
                resp = clients[i].getresponse()
                resp.read()
                outcome[i] = resp.status
            except (http.client.HTTPException, OSError) as e:
                outcome[i] = e

        threads = [threading.Thread(target=run, args=(i,)) for i in range(len(clients))]
        for t in threads:
            t.start()
        _wait_active(r, len(clients))
        t0 = time.monotonic()
        r.proc.send_signal(signal.SIGTERM)
        code, text = _wait_exit(r, 30)
        took = time.monotonic() - t0
        for t in threads:
            t.join(timeout=30)
        assert code == 0, text[-4000:]
        assert took < 15, took  # the bound is 1 s; generous for a loaded machine
        cut = [x for x in outcome if not isinstance(x, int)]
        assert cut and all(isinstance(x, (http.client.HTTPException, OSError)) for x in cut), outcome
        assert all(x == 200 for x in outcome if isinstance(x, int)), outcome
        msgs = _log_msgs(text)
        assert [m for m in msgs if m.startswith(f"drain timeout: exiting with {len(cut)} request(s) still in flight")], msgs
        assert "drained: no request in flight; exiting" not in msgs, msgs
    finally:
        if r.proc.poll() is None:
            r.proc.kill()
            r.proc.wait()
        w.stop()


def test_sigterm_with_nothing_in_flight_exits_at_once(tmp_path, test_repo):
    (w,) = slow_workers(tmp_path, test_repo, 1)
    r = _router(tmp_path, [w.port])
    try:
        r.wait_healthy(1)
        r.proc.send_signal(signal.SIGINT)
        code, text = _wait_exit(r, 10)
        assert code == 0, text[-4000:]
        msgs = _log_msgs(text)
        assert "SIGINT received: not ready; draining 0 request(s) in flight" in msgs, msgs
        assert "drained: no request in flight; exiting" in msgs, msgs
    finally:
        if r.proc.poll() is None:
            r.proc.kill()
            r.proc.wait()
        w.stop()


def test_bad_drain_timeout_is_refused_naming_the_variable(tmp_path):
    cfg = tmp_path / "router.yaml"
    cfg.write_text('address: 127.0.0.1\npools:\n  - name: cpu\n    kind: cpu\n    backends: ["127.0.0.1:1"]\n')
    import os
    for bad in ("abc", "-1", "3601", "5s", " 5", ""):
        env = {**os.environ, **sanitizer_env(), "TIERROUTER_PORT": "0", "TIERROUTER_DRAIN_TIMEOUT_S": bad}
        p = subprocess.run([ROUTER_BIN, "--config", str(cfg)], env=env, capture_output=True, timeout=20)
        assert p.returncode == 64, (bad, p.stderr[-2000:])
        assert b"TIERROUTER_DRAIN_TIMEOUT_S" in p.stderr, p.stderr[-2000:]
