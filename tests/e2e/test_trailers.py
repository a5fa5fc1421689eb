"""Trailer fields of chunked request bodies, on both programs: never headers.

http-parser reports a chunked body's trailer section through the same callbacks as the
header section. RFC 9110 6.5.1: a recipient must not merge trailer fields into the header
section. Before the fix both programs did, and the last trailer's value was never
terminated, so a reply echoed heap bytes left by earlier requests: another tenant's API key,
the router's worker token. What is held here:
- a credential, a data class or a request id sent only in a trailer is not seen: the router
  answers 401 for a key there, classifies by the head alone, makes up its own request id;
  the worker answers 401 for a token there and echoes no id;
- many trailer-ended requests, interleaved with other clients' requests that carry secrets in
  their heads, never get back a byte of those secrets;
- trailers are bounded like the header block (431), and a request with trailers is served.
The same runs in the ASan+UBSan build, where an over-read is a report of its own.
"""
import json
import socket

import pytest

from conftest import start_worker
from rawhttp import read_to_close
from test_router_hostile import BODY, Recorder, Reply, raw, wait_healthy
from test_router import Router, pools_config

ADMIN = "adm1n-t0ken-for-trailers"
ACME = "acme-key-0001-aaaaaaaaaaaaaaaa"
OTHER = "0ther-tenant-key-SECRET-9999"
WORKER_TOKEN = "w0rker-t0ken-SECRET-8888"


def chunked(port, path, head=(), trailers=(), body=BODY, pieces=2):
    """One POST with a chunked body ending in the given trailer fields, on a fresh
    connection; the reply read to the end."""
    out = f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n"
    out = out.encode() + b"".join(k.encode() + b": " + v.encode() + b"\r\n" for k, v in head) + b"\r\n"
    step = max(1, len(body) // pieces)
    for i in range(0, len(body), step):
        part = body[i:i + step]
        out += b"%x\r\n" % len(part) + part + b"\r\n"
    out += b"0\r\n" + b"".join(k.encode() + b": " + v.encode() + b"\r\n" for k, v in trailers) + b"\r\n"
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(out)
    data = read_to_close(s)
    return Reply(data), data


@pytest.fixture()
def routed(tmp_path):
    fakes = Recorder(), Recorder()
    extra = (f"admin_token: {ADMIN}\nworker_token: {WORKER_TOKEN}\n"
             f"tenants:\n  - {{name: acme, api_key: {ACME}}}\n  - {{name: other, api_key: {OTHER}}}\n")
    cfg = pools_config([("gpu", "gpu", False, [fakes[0].port], None),
                        ("cpu", "cpu", True, [fakes[1].port], None)], extra)
    r = Router(cfg, tmp_path)
    wait_healthy(r, 2, [("Authorization", f"Bearer {ADMIN}")])
    yield r, fakes
    assert r.stop() == 0
    for f in fakes:
        f.close()


PATH = "/v2/models/demo/infer"


def test_router_key_in_a_trailer_is_not_a_key(routed):
    r, fakes = routed
    rep, _ = chunked(r.port, PATH, trailers=[("X-Api-Key", ACME)])
    assert rep.status == 401, (rep.status, rep.body)
    rep, _ = chunked(r.port, PATH, trailers=[("Authorization", f"Bearer {ACME}")])
    assert rep.status == 401, (rep.status, rep.body)
    assert fakes[0].recorded(probes=False) == fakes[1].recorded(probes=False) == []
    # the same key in the head is served: the trailer was the only difference
    rep, _ = chunked(r.port, PATH, head=[("X-Api-Key", ACME)], trailers=[("X-Trailer", "x")])
    assert rep.status == 200, (rep.status, rep.body)


def test_router_data_class_and_request_id_in_a_trailer_are_ignored(routed):
    r, fakes = routed
    rep, _ = chunked(r.port, PATH, head=[("X-Api-Key", ACME)],
                     trailers=[("X-Data-Class", "sensitive"), ("X-Request-Id", "trailer-chosen-id")])
    assert rep.status == 200, rep.body
    assert rep.header("X-Tierrouter-Pool") == "gpu"  # classified by the head alone
    assert rep.header("X-Request-Id") != "trailer-chosen-id"
    # and the duplicate rule does not see a trailer either: a head value plus a trailer value
    rep, _ = chunked(r.port, PATH, head=[("X-Api-Key", ACME), ("X-Data-Class", "sensitive")],
                     trailers=[("X-Data-Class", "public"), ("X-Api-Key", OTHER)])
    assert rep.status == 200 and rep.header("X-Tierrouter-Pool") == "cpu", rep.body
    for f in fakes:
        for head in f.recorded(probes=False):
            assert b"trailer-chosen-id" not in head and OTHER.encode() not in head


def test_router_trailer_ended_requests_never_get_bytes_they_did_not_send(routed):
    """The shape of the leak: a tenant's request with its key in the head, then trailer-ended
    requests from another client whose last trailer is short; before the fix their replies
    echoed the earlier request's bytes (its key) in X-Request-Id or the 401's message."""
    r, _ = routed
    # The victim's head is padded so that its key lies where the attacker's trailer value
    # starts in a request buffer of the same size (the layer keeps "name\0value\0" pieces):
    # a freed buffer reused for the attacker's request then holds the key right there.
    attacker = f"{PATH}\0Host\0127.0.0.1\0Connection\0close\0Transfer-Encoding\0chunked\0X-Api-Key\0{ACME}\0\0"
    value_at = len(attacker) + len("\0X-Request-Id\0")
    victim = f"{PATH}\0Host\0127.0.0.1\0Connection\0close\0X-Pad\0"
    pad = value_at - len(victim) - len("\0X-Api-Key\0")
    assert pad > 0
    leaked = OTHER[1:].encode()  # the attacker's one-byte value covers the key's first byte
    for i in range(40):
        rep = raw(r.port, "POST", PATH, [("X-Pad", "p" * pad), ("X-Api-Key", OTHER)], BODY)
        assert rep.status == 200, rep.body
        for trailers in ([("X-Request-Id", "z")], [("X-T", "")], [("X-Request-Id", "")]):
            rep, data = chunked(r.port, PATH, head=[("X-Api-Key", ACME)], trailers=trailers)
            assert rep.status == 200, (rep.status, rep.body)
            assert rep.header("X-Request-Id").startswith("tr-"), data  # the router's own id
            for s in (leaked, WORKER_TOKEN.encode(), ADMIN.encode()):
                assert s not in data, (i, trailers, data)


def test_router_trailers_are_bounded(routed):
    r, _ = routed
    rep, _ = chunked(r.port, PATH, head=[("X-Api-Key", ACME)], trailers=[("X-Big", "v" * 70000)])
    assert rep.status == 431, (rep.status, rep.body)
    assert "trailer" in rep.json()["error"]
    rep, _ = chunked(r.port, PATH, head=[("X-Api-Key", ACME)],
                     trailers=[(f"X-T{i}", "v") for i in range(150)])
    assert rep.status == 431 and "trailer" in rep.json()["error"], rep.body


@pytest.fixture(scope="module")
def guarded(test_repo, tmp_path_factory):
    w = start_worker(test_repo, tmp_path_factory.mktemp("trailers"), env={"TIERSERVE_AUTH_TOKEN": WORKER_TOKEN})
    yield w
    w.stop()


def test_worker_token_in_a_trailer_is_not_a_token(guarded):
    rep, _ = chunked(guarded.port, PATH, trailers=[("Authorization", f"Bearer {WORKER_TOKEN}")])
    assert rep.status == 401, (rep.status, rep.body)
    rep, _ = chunked(guarded.port, PATH, head=[("Authorization", f"Bearer {WORKER_TOKEN}")],
                     trailers=[("X-Request-Id", "trailer-chosen-id")])
    assert rep.status == 200, (rep.status, rep.body)
    assert rep.header("X-Request-Id") != "trailer-chosen-id"
    assert json.loads(rep.body)["outputs"]


def test_worker_trailer_ended_requests_never_echo_the_token(guarded):
    """Before the fix an unauthenticated client got the previous request's Authorization
    bytes back in its reply's X-Request-Id, before the token was even checked."""
    for i in range(40):
        rep = raw(guarded.port, "POST", PATH, [("Authorization", f"Bearer {WORKER_TOKEN}"),
                                               ("X-Request-Id", f"router-{i}")], BODY)
        assert rep.status == 200, rep.body
        for trailers in ([("X-Request-Id", "z")], [("X-T", "")], [("Authorization", "B")]):
            rep, data = chunked(guarded.port, PATH, trailers=trailers)
            assert rep.status == 401, (rep.status, rep.body)
            assert WORKER_TOKEN.encode() not in data, (i, data)
            assert rep.header("X-Request-Id") in (None, ""), data


# (with a good key: credentials are checked on the head, before any body byte is read)
@pytest.mark.parametrize("data", [
    b"POST %s HTTP/1.1\nHost: x\nX-Api-Key: " + ACME.encode() + b"\nContent-Length: 2\n\n{}",
    b"POST %s HTTP/1.1\r\nHost: x\r\nX-Api-Key: " + ACME.encode() + b"\r\nTransfer-Encoding: chunked\r\n\r\n"
    b"2;a\nb\r\n{}\r\n0\r\n\r\n",
    b"POST %s HTTP/1.1\r\nHost: x\r\nX-Api-Key: " + ACME.encode() + b"\r\nTransfer-Encoding: chunked\r\n\r\n"
    b"2\r\n{}XX0\r\n\r\n",
    b"POST %s HTTP/1.1\r\nHost: x\r\nX-Api-Key: " + ACME.encode() + b"\r\nTransfer-Encoding: chunked\r\n\r\n"
    b"2\r\n{}\r\n0\r\nX-T: v\n\r\n",
])
def test_router_refuses_lenient_framing_before_any_backend(routed, data):
    """Framing a front proxy could read differently (bare LF, junk where CRLF belongs):
    400 at the router's door, as nginx answers, and no backend sees a byte of it."""
    r, fakes = routed
    s = socket.create_connection(("127.0.0.1", r.port), timeout=10)
    s.sendall(data.replace(b"%s", PATH.encode(), 1))
    rep = read_to_close(s)
    assert Reply(rep).status == 400, rep
    assert fakes[0].recorded(probes=False) == fakes[1].recorded(probes=False) == []
