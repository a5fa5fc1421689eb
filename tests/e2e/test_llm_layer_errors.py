"""Errors the HTTP layer answers itself (413 body too large, 431 header block too large, 400
framing) carry OpenAI's error object on /v1 paths, as every other /v1 error does (the openai
SDK shows no message otherwise), and stay {"error": "..."} on KServe paths. Raw sockets: the
exact bytes of the JSON body are checked."""
import json
import shutil
import socket
import time

import pytest

from conftest import ROOT, start_worker


@pytest.fixture(scope="module")
def worker(tmp_path_factory):
    repo = tmp_path_factory.mktemp("layererr")
    shutil.copytree(ROOT / "models" / "demo", repo / "demo")
    w = start_worker(repo, tmp_path_factory.mktemp("layererr-w"),
                     env={"EXECUTION_MODE": "cpu", "TIERSERVE_MAX_BODY_BYTES": "65536"})
    yield w
    assert w.stop() == 0, w.log_text()[-4000:]


def raw(w, data):
    """Sends data, reads to EOF (the layer closes after its own errors); status and JSON body."""
    s = socket.create_connection((w.host, w.port), timeout=30)
    try:
        s.sendall(data)
    except (BrokenPipeError, ConnectionResetError):
        pass
    out = b""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            chunk = s.recv(65536)
        except ConnectionResetError:
            break
        if not chunk:
            break
        out += chunk
    s.close()
    head, _, body = out.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    return status, json.loads(body)


def post_head(path, length):
    return (b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
            % (path, length))


def openai_shape(obj, msg_part):
    assert set(obj) == {"error"}, obj
    e = obj["error"]
    assert set(e) == {"message", "type", "param", "code"}, obj
    assert e["type"] == "invalid_request_error" and e["param"] is None and e["code"] is None, obj
    assert msg_part in e["message"], obj


def test_413_on_v1_is_an_openai_error(worker):
    code, obj = raw(worker, post_head(b"/v1/chat/completions", 1 << 20))
    assert code == 413
    openai_shape(obj, "65536")


def test_431_and_400_on_v1_are_openai_errors(worker):
    big = b"X-Filler: " + b"a" * (70 * 1024) + b"\r\n"
    code, obj = raw(worker, b"GET /v1/models HTTP/1.1\r\nHost: x\r\n" + big + b"\r\n")
    assert code == 431
    openai_shape(obj, "")
    code, obj = raw(worker, post_head(b"/v1/completions", 5).replace(b"Content-Length: 5", b"Content-Length: 5x"))
    assert code == 400
    openai_shape(obj, "")


def test_kserve_paths_keep_the_plain_error(worker):
    code, obj = raw(worker, post_head(b"/v2/models/demo/infer", 1 << 20))
    assert code == 413
    assert set(obj) == {"error"} and isinstance(obj["error"], str) and "65536" in obj["error"], obj
    # a path that only starts with the letters of /v1 is not /v1
    code, obj = raw(worker, post_head(b"/v1x/chat", 1 << 20))
    assert code == 413 and isinstance(obj["error"], str), obj
