"""TLS on the router's listener and from the router to the workers (docs/security.md "TLS").

A CA, server certificates for 127.0.0.1/localhost, a client certificate and a rogue CA are
made with the openssl CLI at test time. Clients are Python's ssl module and raw sockets; none
retries: a connection that breaks fails the test.
"""
import hashlib
import http.client
import json
import os
import pathlib
import re
import shutil
import signal
import socket
import ssl
import subprocess
import time
import warnings

import numpy as np
import pytest

from conftest import BIN, ROOT, sanitizer_env, start_worker
from helpers import ROUTER_BIN, Router

DEMO = ROOT / "models"
X = np.random.default_rng(7).uniform(0, 8, (2, 4)).astype(np.float32)
BODY = json.dumps({"inputs": [{"name": "input", "datatype": "FP32", "shape": [2, 4],
                               "data": X.ravel().tolist()}]}).encode()


def openssl(cwd, *args):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=30)


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    """ca.pem; server/server2 (SAN localhost + 127.0.0.1) signed by it; client (clientAuth);
    rogue: a server certificate for 127.0.0.1 from another CA; rsa: like server, with an RSA
    key (static-RSA suites need one)."""
    d = tmp_path_factory.mktemp("pki")
    serial = iter(range(0x1001, 0x2000))

    def ca(name, cn):
        openssl(d, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                "-keyout", f"{name}.key", "-out", f"{name}.pem", "-days", "2", "-subj", f"/CN={cn}")

    def leaf(name, cn, san, usage="serverAuth", issuer="ca", key=("ec", "-pkeyopt", "ec_paramgen_curve:P-256")):
        (d / f"{name}.ext").write_text(f"subjectAltName={san}\nextendedKeyUsage={usage}\nbasicConstraints=CA:FALSE\n")
        openssl(d, "req", "-newkey", *key, "-nodes", "-keyout",
                f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={cn}")
        openssl(d, "x509", "-req", "-in", f"{name}.csr", "-CA", f"{issuer}.pem", "-CAkey", f"{issuer}.key",
                "-set_serial", str(next(serial)), "-days", "2", "-out", f"{name}.pem", "-extfile", f"{name}.ext")

    ca("ca", "tierserve test CA")
    ca("rogue_ca", "someone else's CA")
    leaf("server", "localhost", "DNS:localhost,IP:127.0.0.1")
    leaf("server2", "localhost", "DNS:localhost,IP:127.0.0.1")
    leaf("client", "tierrouter", "DNS:tierrouter", usage="clientAuth")
    leaf("rogue", "localhost", "DNS:localhost,IP:127.0.0.1", issuer="rogue_ca")
    leaf("rsa", "localhost", "DNS:localhost,IP:127.0.0.1", key=("rsa:2048",))
    return d


def der_sha256(pem_path):
    return hashlib.sha256(ssl.PEM_cert_to_DER_cert(pathlib.Path(pem_path).read_text())).hexdigest()


def client_ctx(pki):
    ctx = ssl.create_default_context(cafile=str(pki / "ca.pem"))
    ctx.check_hostname = True
    return ctx


def router_config(pki, backends, listener_tls=True, pool_tls=False, extra="", cert="server"):
    out = ["address: 127.0.0.1", "probe_interval_ms: 100", extra]
    if listener_tls:
        out.append(f"tls:\n  cert_file: {pki / (cert + '.pem')}\n  key_file: {pki / (cert + '.key')}")
    out.append("pools:\n  - name: cpu\n    kind: cpu\n    sensitive: true\n"
               f"    tls: {str(pool_tls).lower()}\n"
               f"    backends: [{', '.join(repr('127.0.0.1:%d' % p) for p in backends)}]")
    return "\n".join(out) + "\n"


def https(port, ctx, method, path, body=None, headers=None, conn=None):
    """One request (on conn if given, else a fresh one); returns (status, headers, body, conn)."""
    c = conn or http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=30)
    c.request(method, path, body=body, headers=headers or {})
    r = c.getresponse()
    return r.status, dict(r.getheaders()), r.read(), c


def wait_https_healthy(port, ctx, timeout=20):
    deadline = time.time() + timeout
    while time.time() < deadline:
        code, _, body, c = https(port, ctx, "GET", "/admin/status")
        c.close()
        if code == 200 and sum(p["healthy"] for p in json.loads(body)["pools"]) >= 1:
            return
        time.sleep(0.05)
    raise AssertionError("the router never saw a healthy backend")


def raw_exchange(port, data, timeout=10):
    """Sends data on a raw socket and reads to EOF. Returns the bytes received."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        s.sendall(data)
        got = b""
        while True:
            b = s.recv(65536)
            if not b:
                return got
            got += b
    finally:
        s.close()


@pytest.fixture()
def tls_router(pki, tmp_path):
    """A plain worker behind a router whose listener speaks TLS. The cert files are copies,
    so a test may rotate them."""
    live = tmp_path / "live"
    live.mkdir()
    shutil.copy(pki / "server.pem", live / "server.pem")
    shutil.copy(pki / "server.key", live / "server.key")
    w = start_worker(DEMO, tmp_path, env={"EXECUTION_MODE": "cpu"})
    r = Router(router_config(live, [w.port]), tmp_path)
    wait_https_healthy(r.port, client_ctx(pki))
    yield r, w, live
    assert r.stop() == 0
    w.stop()


def test_tls_listener_serves_inference_and_verifies(pki, tls_router):
    r, w, _ = tls_router
    from gen_demo import demo_reference
    ctx = client_ctx(pki)
    code, _, body, c = https(r.port, ctx, "POST", "/v2/models/demo/infer", BODY)
    assert code == 200, body
    assert c.sock.version() in ("TLSv1.2", "TLSv1.3")
    assert c.sock.selected_alpn_protocol() in (None, "http/1.1")
    out = {o["name"]: o for o in json.loads(body)["outputs"]}
    np.testing.assert_allclose(np.array(out["probabilities"]["data"]).reshape(2, -1),
                               demo_reference(X)["probabilities"], rtol=1e-5, atol=1e-6)
    c.close()
    # a client without the CA refuses the certificate
    with pytest.raises(ssl.SSLCertVerificationError):
        https(r.port, ssl.create_default_context(), "GET", "/v2/health/ready")
    # a client that would settle for TLS 1.1 is refused by the server
    old = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    old.check_hostname = False
    old.verify_mode = ssl.CERT_NONE
    old.set_ciphers("DEFAULT:@SECLEVEL=0")
    with warnings.catch_warnings():  # TLS 1.1 is deprecated: that is the point
        warnings.simplefilter("ignore", DeprecationWarning)
        old.minimum_version = ssl.TLSVersion.TLSv1_1
        old.maximum_version = ssl.TLSVersion.TLSv1_1
    with pytest.raises(ssl.SSLError) as e:
        https(r.port, old, "GET", "/v2/health/ready")
    assert "PROTOCOL_VERSION" in str(e.value) or "UNSUPPORTED_PROTOCOL" in str(e.value), e.value
    # the listener is TLS only: the worker never saw a TLS byte, and the router still serves
    assert https(r.port, ctx, "GET", "/v2/health/ready")[0] == 200


def test_plain_http_on_the_tls_port_gets_a_clean_refusal(pki, tls_router):
    r, _, _ = tls_router
    got = raw_exchange(r.port, b"GET /v2/health/ready HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    head, _, body = got.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400 Bad Request\r\n"), got
    assert b"\r\nConnection: close" in head and b"\r\nContent-Type: application/json" in head
    m = re.search(rb"\r\nContent-Length: (\d+)", head)
    assert m and int(m.group(1)) == len(body), got  # the whole body, then the close
    assert json.loads(body) == {"error": "this port speaks TLS: use https://"}
    # bytes that are neither TLS nor HTTP: closed without a word
    try:
        assert raw_exchange(r.port, b"\x00\x01\x02\x03garbage\r\n\r\n") == b""
    except ConnectionResetError:
        pass  # closed with the garbage unread: a reset is a close too
    # the router goes on serving TLS clients
    assert https(r.port, client_ctx(pki), "GET", "/v2/health/ready")[0] == 200


def test_sighup_reloads_the_certificate_without_dropping_connections(pki, tls_router):
    r, _, live = tls_router
    ctx = client_ctx(pki)
    code, _, _, kept = https(r.port, ctx, "GET", "/v2/health/ready")
    assert code == 200
    sock = kept.sock
    assert hashlib.sha256(sock.getpeercert(binary_form=True)).hexdigest() == der_sha256(pki / "server.pem")
    # rotate: server2 into the configured paths, then SIGHUP
    shutil.copy(pki / "server2.pem", live / "server.pem")
    shutil.copy(pki / "server2.key", live / "server.key")
    mark = len(r.text())
    r.proc.send_signal(signal.SIGHUP)
    assert r.wait_log("TLS reloaded", after=mark), r.text()[-2000:]
    # the connection opened before goes on, on the same socket
    code, _, _, same = https(r.port, ctx, "POST", "/v2/models/demo/infer", BODY, conn=kept)
    assert code == 200 and same.sock is sock
    kept.close()
    # a new connection sees the new certificate
    _, _, _, fresh = https(r.port, ctx, "GET", "/v2/health/ready")
    assert hashlib.sha256(fresh.sock.getpeercert(binary_form=True)).hexdigest() == der_sha256(pki / "server2.pem")
    fresh.close()
    # a broken file: the error names it, and the certificate loaded before stays
    (live / "server.pem").write_text("-----BEGIN CERTIFICATE-----\nbroken\n-----END CERTIFICATE-----\n")
    mark = len(r.text())
    r.proc.send_signal(signal.SIGHUP)
    assert r.wait_log("TLS reload failed", after=mark), r.text()[-2000:]
    line = [ln for ln in r.text()[mark:].splitlines() if "TLS reload failed" in ln][0]
    assert str(live / "server.pem") in line and "keeping" in line, line
    _, _, _, after = https(r.port, ctx, "GET", "/v2/health/ready")
    assert hashlib.sha256(after.sock.getpeercert(binary_form=True)).hexdigest() == der_sha256(pki / "server2.pem")
    after.close()


def tls_worker(pki, tmp_path, cert="server", extra=None):
    env = {"EXECUTION_MODE": "cpu", "TIERSERVE_TLS_CERT_FILE": str(pki / f"{cert}.pem"),
           "TIERSERVE_TLS_KEY_FILE": str(pki / f"{cert}.key"), **(extra or {})}
    w = start_worker(DEMO, tmp_path, env=env, wait_ready=False)
    assert w.wait_log("server ready"), w.log_text()[-3000:]
    return w


def test_router_to_worker_over_tls(pki, tmp_path):
    w = tls_worker(pki, tmp_path)
    # the worker speaks TLS only: plain HTTP gets the clear-text 400
    got = raw_exchange(w.port, b"GET /v2/health/ready HTTP/1.1\r\nHost: x\r\n\r\n")
    assert got.startswith(b"HTTP/1.1 400 ") and b"this port speaks TLS" in got, got
    # and HTTPS with the CA is served, health included (a kubelet probe with scheme HTTPS)
    assert https(w.port, client_ctx(pki), "GET", "/v2/health/ready")[0] == 200
    r = Router(router_config(pki, [w.port], listener_tls=False, pool_tls=True,
                             extra=f"backend_tls:\n  ca_file: {pki / 'ca.pem'}"), tmp_path)
    try:
        deadline = time.time() + 20
        while time.time() < deadline:
            c = http.client.HTTPConnection("127.0.0.1", r.port, timeout=10)
            c.request("GET", "/admin/status")
            st = json.loads(c.getresponse().read())
            c.close()
            if st["pools"][0]["healthy"] == 1:
                break
            time.sleep(0.05)
        assert st["pools"][0]["healthy"] == 1, st
        c = http.client.HTTPConnection("127.0.0.1", r.port, timeout=30)
        c.request("POST", "/v2/models/demo/infer", body=BODY)
        resp = c.getresponse()
        assert resp.status == 200, resp.read()
        assert len(json.loads(resp.read())["outputs"]) >= 1
        c.close()
    finally:
        assert r.stop() == 0
        w.stop()


def test_worker_cert_from_another_ca_is_refused_naming_the_verification(pki, tmp_path):
    w = tls_worker(pki, tmp_path, cert="rogue")
    r = Router(router_config(pki, [w.port], listener_tls=False, pool_tls=True,
                             extra=f"backend_tls:\n  ca_file: {pki / 'ca.pem'}"), tmp_path)
    try:
        assert r.wait_log("certificate verify failed"), r.text()[-3000:]
        c = http.client.HTTPConnection("127.0.0.1", r.port, timeout=10)
        c.request("GET", "/admin/status")
        st = json.loads(c.getresponse().read())
        c.close()
        assert st["pools"][0]["healthy"] == 0, st
        # the backend never counts healthy: the router answers without it; a request that is
        # sent to it anyway (by plan) fails naming the verification
        c = http.client.HTTPConnection("127.0.0.1", r.port, timeout=30)
        c.request("POST", "/v2/models/demo/infer", body=BODY)
        resp = c.getresponse()
        body = resp.read()
        c.close()
        assert resp.status in (502, 503), body
        line = [ln for ln in r.text().splitlines() if "certificate verify failed" in ln][0]
        assert "unable to get local issuer certificate" in line or "self-signed" in line, line
    finally:
        assert r.stop() == 0
        w.stop()


def test_mutual_tls_to_the_worker(pki, tmp_path):
    w = tls_worker(pki, tmp_path, extra={"TIERSERVE_TLS_CLIENT_CA_FILE": str(pki / "ca.pem")})
    # without a client certificate the worker refuses the handshake
    with pytest.raises((ssl.SSLError, ConnectionError)):
        code, _, _, c = https(w.port, client_ctx(pki), "GET", "/v2/health/ready")
    ctx = client_ctx(pki)
    ctx.load_cert_chain(str(pki / "client.pem"), str(pki / "client.key"))
    assert https(w.port, ctx, "GET", "/v2/health/ready")[0] == 200
    r = Router(router_config(pki, [w.port], listener_tls=False, pool_tls=True,
                             extra=f"backend_tls:\n  ca_file: {pki / 'ca.pem'}\n"
                                   f"  cert_file: {pki / 'client.pem'}\n  key_file: {pki / 'client.key'}"),
               tmp_path)
    try:
        deadline = time.time() + 20
        code = 0
        while time.time() < deadline and code != 200:
            c = http.client.HTTPConnection("127.0.0.1", r.port, timeout=30)
            c.request("POST", "/v2/models/demo/infer", body=BODY, headers={"Connection": "close"})
            resp = c.getresponse()
            code = resp.status
            resp.read()
            c.close()
            time.sleep(0.05)
        assert code == 200, r.text()[-3000:]
    finally:
        assert r.stop() == 0
        w.stop()


def test_stalled_and_garbled_handshakes(pki, tmp_path):
    """On a worker with a 1 s HTTP timeout: a handshake that stalls is cut at the timeout,
    random bytes after a real ClientHello only close that connection."""
    w = tls_worker(pki, tmp_path, extra={"TIERSERVE_HTTP_TIMEOUT_S": "1"})
    # a real ClientHello, made by Python's ssl on memory BIOs
    inc, out = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = client_ctx(pki).wrap_bio(inc, out, server_hostname="127.0.0.1")
    with pytest.raises(ssl.SSLWantReadError):
        obj.do_handshake()
    hello = out.read()
    assert hello[0] == 0x16
    # stall: half the ClientHello, then nothing; the server must close within a few seconds
    s = socket.create_connection(("127.0.0.1", w.port), timeout=10)
    s.sendall(hello[: len(hello) // 2])
    t0 = time.monotonic()
    assert s.recv(100) == b""  # closed, not answered
    assert time.monotonic() - t0 < 8
    s.close()
    # random bytes after a whole ClientHello
    rng = np.random.default_rng(3)
    for _ in range(5):
        s = socket.create_connection(("127.0.0.1", w.port), timeout=10)
        s.sendall(hello + rng.bytes(3000))
        try:
            while s.recv(65536):
                pass
        except ConnectionResetError:
            pass
        s.close()
    assert https(w.port, client_ctx(pki), "GET", "/v2/health/ready")[0] == 200
    assert w.proc.poll() is None
    assert w.stop() == 0


def test_bad_tls_settings_are_refused_naming_the_file(pki, tmp_path):
    cfg = tmp_path / "r.yaml"
    cfg.write_text(router_config(pki, [1], cert="nope"))
    p = subprocess.run([ROUTER_BIN, "--config", str(cfg)], capture_output=True, timeout=20,
                       env={**os.environ, **sanitizer_env()})
    assert p.returncode == 64 and str(pki / "nope.pem") in p.stderr.decode(), p.stderr.decode()
    cfg.write_text(router_config(pki, [1], listener_tls=False, extra=f"tls:\n  cert_file: {pki / 'server.pem'}"))
    p = subprocess.run([ROUTER_BIN, "--config", str(cfg)], capture_output=True, timeout=20,
                       env={**os.environ, **sanitizer_env()})
    assert p.returncode == 64 and "tls.key_file" in p.stderr.decode(), p.stderr.decode()


def test_worker_bad_tls_files_are_a_settings_error_naming_the_file(pki, tmp_path):
    """Like every other bad setting: exit 64 (EX_USAGE), before any port opens."""
    env = {**os.environ, **sanitizer_env(), "TIERSERVE_MODEL_REPOSITORY": str(DEMO), "TIERSERVE_HTTP_PORT": "0",
           "TIERSERVE_TLS_CERT_FILE": str(pki / "nope.pem"), "TIERSERVE_TLS_KEY_FILE": str(pki / "server.key")}
    p = subprocess.run([BIN], capture_output=True, timeout=30, env=env)
    assert p.returncode == 64 and str(pki / "nope.pem") in p.stderr.decode(), p.stderr.decode()[-2000:]


def test_sensitive_pool_without_tls_behind_a_tls_listener_is_warned(pki, tmp_path):
    r = Router(router_config(pki, [1]), tmp_path)
    try:
        assert r.wait_log("pool cpu takes sensitive data but talks plain HTTP"), r.text()
    finally:
        assert r.stop() == 0


def test_worker_sighup_to_an_untrusted_cert_fails_requests_with_502_naming_it(pki, tmp_path):
    """The worker reloads its files on SIGHUP; once its keep-alive connections have timed out
    (1 s), the router's next connection meets a certificate from another CA: 502 naming the
    verification (probes every 60 s, so the backend still counts healthy)."""
    live = tmp_path / "wlive"
    live.mkdir()
    for ext in ("pem", "key"):
        shutil.copy(pki / f"server.{ext}", live / f"server.{ext}")
    w = tls_worker(live, tmp_path, extra={"TIERSERVE_HTTP_TIMEOUT_S": "1"})
    r = Router(router_config(pki, [w.port], listener_tls=False, pool_tls=True,
                             extra=f"backend_tls:\n  ca_file: {pki / 'ca.pem'}").replace(
                                 "probe_interval_ms: 100", "probe_interval_ms: 60000"), tmp_path)
    try:
        def infer():
            c = http.client.HTTPConnection("127.0.0.1", r.port, timeout=30)
            c.request("POST", "/v2/models/demo/infer", body=BODY)
            resp = c.getresponse()
            out = resp.status, resp.read()
            c.close()
            return out
        deadline = time.time() + 20
        while time.time() < deadline and infer()[0] != 200:
            time.sleep(0.05)
        assert infer()[0] == 200
        for ext in ("pem", "key"):
            shutil.copy(pki / f"rogue.{ext}", live / f"server.{ext}")
        w.proc.send_signal(signal.SIGHUP)
        deadline = time.time() + 10
        while time.time() < deadline and w.log_text().count("TLS: the port presents") < 2:
            time.sleep(0.05)
        assert w.log_text().count("TLS: the port presents") == 2, w.log_text()[-2000:]
        time.sleep(2.5)  # the worker closes the router's idle connections after 1 s
        code, body = infer()
        assert code == 502, body
        err = json.loads(body)["error"]
        assert "certificate verify failed" in err, err
    finally:
        assert r.stop() == 0
        w.stop()


# ---- session resumption ------------------------------------------------------------------

def resumes(port, ctx):
    """Two connections with ctx, one request each (read to the close, which also takes in a
    TLS 1.3 ticket); the second offers the first's session. Returns (the second's status
    line, whether its session was resumed). A refused resumption raises."""
    session = None
    out = []
    for _ in range(2):
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            with ctx.wrap_socket(s, server_hostname="127.0.0.1", session=session) as t:
                t.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                got = b""
                while chunk := t.recv(65536):
                    got += chunk
                session = t.session
                out.append((got.split(b"\r\n", 1)[0], t.session_reused))
    assert out[0] == (b"HTTP/1.1 200 OK", False), out
    return out[1]


def versions(ctx, version):
    ctx.minimum_version = ctx.maximum_version = getattr(ssl.TLSVersion, version)
    return ctx


@pytest.mark.parametrize("version", ["TLSv1_2", "TLSv1_3"])
def test_sessions_resume_with_and_without_client_certificates(pki, tmp_path, version):
    """Under mutual TLS every resumption used to fail with alert 80 (internal error: no
    session id context), costing every reconnect a full handshake or, for a client that does
    not retry, the request."""
    plain = tls_worker(pki, tmp_path)
    mutual = tls_worker(pki, tmp_path, extra={"TIERSERVE_TLS_CLIENT_CA_FILE": str(pki / "ca.pem")})
    r = Router(router_config(pki, [plain.port]), tmp_path)
    try:
        assert resumes(plain.port, versions(client_ctx(pki), version)) == (b"HTTP/1.1 200 OK", True)
        assert resumes(r.port, versions(client_ctx(pki), version)) == (b"HTTP/1.1 200 OK", True)
        ctx = versions(client_ctx(pki), version)
        ctx.load_cert_chain(str(pki / "client.pem"), str(pki / "client.key"))
        assert resumes(mutual.port, ctx) == (b"HTTP/1.1 200 OK", True)
    finally:
        assert r.stop() == 0
        for w in (plain, mutual):
            assert w.stop() == 0


# ---- cipher suites -----------------------------------------------------------------------

def tls12(pki, ciphers):
    """A TLS 1.2-only client that offers exactly these suites."""
    ctx = versions(client_ctx(pki), "TLSv1_2")
    ctx.set_ciphers(ciphers)
    return ctx


def suite(port, ctx):
    """The suite a handshake with ctx settles on; raises ssl.SSLError when refused."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        with ctx.wrap_socket(s, server_hostname="127.0.0.1") as t:
            return t.cipher()[0]


def test_tls12_takes_only_ecdhe_aead_suites_unless_configured(pki, tmp_path):
    """An RSA certificate, so static-RSA suites could be chosen: by default they are not
    (no forward secrecy, CBC + SHA-1); the setting of each program changes that."""
    w = tls_worker(pki, tmp_path, cert="rsa")
    legacy = tls12(pki, "AES128-SHA")
    modern = tls12(pki, "ECDHE-RSA-AES128-GCM-SHA256")
    rcfg = router_config(pki, [w.port], cert="rsa")
    r = Router(rcfg, tmp_path)
    try:
        for port in (w.port, r.port):
            with pytest.raises(ssl.SSLError) as e:
                suite(port, legacy)
            assert "HANDSHAKE_FAILURE" in str(e.value) or "NO_SHARED_CIPHER" in str(e.value), e.value
            assert suite(port, modern) == "ECDHE-RSA-AES128-GCM-SHA256"
            assert suite(port, tls12(pki, "ECDHE-RSA-CHACHA20-POLY1305")) == "ECDHE-RSA-CHACHA20-POLY1305"
            assert suite(port, versions(client_ctx(pki), "TLSv1_3")).startswith("TLS_")  # OpenSSL's defaults
    finally:
        assert r.stop() == 0
        assert w.stop() == 0
    # configured: the operator's list, and only it
    w = tls_worker(pki, tmp_path, cert="rsa", extra={"TIERSERVE_TLS_CIPHERS": "AES128-SHA"})
    r = Router(rcfg.replace("tls:\n", "tls:\n  ciphers: AES128-SHA\n", 1), tmp_path)
    try:
        for port in (w.port, r.port):
            assert suite(port, legacy) == "AES128-SHA"
            with pytest.raises(ssl.SSLError):
                suite(port, modern)
    finally:
        assert r.stop() == 0
        assert w.stop() == 0


def test_a_cipher_list_that_leaves_nothing_is_refused_naming_the_setting(pki, tmp_path):
    env = {**os.environ, **sanitizer_env(), "TIERSERVE_MODEL_REPOSITORY": str(DEMO), "TIERSERVE_HTTP_PORT": "0",
           "TIERSERVE_TLS_CERT_FILE": str(pki / "server.pem"), "TIERSERVE_TLS_KEY_FILE": str(pki / "server.key"),
           "TIERSERVE_TLS_CIPHERS": "NO-SUCH-SUITE"}
    p = subprocess.run([BIN], capture_output=True, timeout=30, env=env)
    err = p.stderr.decode()
    assert p.returncode == 64 and "TIERSERVE_TLS_CIPHERS" in err and "no cipher match" in err, err[-2000:]
    cfg = tmp_path / "r.yaml"
    cfg.write_text(router_config(pki, [1]).replace("tls:\n", "tls:\n  ciphers: NO-SUCH-SUITE\n", 1))
    p = subprocess.run([ROUTER_BIN, "--config", str(cfg)], capture_output=True, timeout=20,
                       env={**os.environ, **sanitizer_env(), "TIERROUTER_PORT": "0"})
    err = p.stderr.decode()
    assert p.returncode == 64 and "tls.ciphers" in err and "no cipher match" in err, err
