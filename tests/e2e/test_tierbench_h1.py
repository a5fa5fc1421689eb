"""tierbench speaks HTTP through src/net/h1cli (http-parser), never a hand-written parser:
a valid reply framing the old hand parsing refused is read as any HTTP/1.1 client reads it.

Held: the model metadata (lb_http) sent chunked with a trailer field is read, and the run
goes ahead; the old hand-written chunked walker counted any trailer as malformed.
"""
import json

from conftest import run_tierbench as tierbench
from fakehttp import FakeHTTP, echo_id

META = {"name": "demo", "versions": ["1"], "platform": "onnxruntime_onnx",
        "inputs": [{"name": "input", "datatype": "FP32", "shape": [-1, 4]}],
        "outputs": [{"name": "label", "datatype": "INT64", "shape": [-1]}]}
REPLY = json.dumps({"model_name": "demo", "outputs": []}).encode()


class ChunkedMeta(FakeHTTP):
    """The metadata in two chunks, then a trailer field; every inference a plain 200."""

    def respond(self, c, head, body):
        if head.startswith(b"GET /v2/models/"):
            m = json.dumps(META).encode()
            a, b = m[:10], m[10:]
            c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n"
                      b"Trailer: X-Checksum\r\n" + echo_id(head) + b"\r\n"
                      + b"%x\r\n%s\r\n%x;ext=1\r\n%s\r\n0\r\nX-Checksum: 1\r\n\r\n" % (len(a), a, len(b), b))
            return True
        c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n" % len(REPLY)
                  + echo_id(head) + b"\r\n" + REPLY)
        return True


def test_chunked_metadata_with_a_trailer_is_read(tmp_path):
    f = ChunkedMeta()
    try:
        rc, out, err = tierbench("load", "--url", f"http://127.0.0.1:{f.port}", "--model", "demo", "--rate", "20",
                                 "--duration", "0.5", "--fixed", "--timeout", "5", "--json", "-", "--quiet")
    finally:
        f.close()
    assert rc == 0, err
    s = json.loads(out)["all"]
    assert s["scheduled"] == 10 and s["ok"] == 10 and s["failed"] == 0, s
