"""gzip/deflate bodies both ways, as tritonclient.http's compression options send them."""
import gzip
import json
import zlib

import numpy as np
import pytest

from conftest import ROOT, start_worker
import tritonlike


@pytest.fixture(scope="module")
def worker(tmp_path_factory):
    w = start_worker(ROOT / "models", tmp_path_factory.mktemp("z"),
                     env={"EXECUTION_MODE": "cpu", "TIERSERVE_MAX_BODY_BYTES": "65536"})
    yield w
    assert w.stop() == 0


@pytest.mark.parametrize("req_alg", [None, "gzip", "deflate"])
@pytest.mark.parametrize("resp_alg", [None, "gzip", "deflate"])
@pytest.mark.parametrize("binary", [True, False])
def test_client_compression_round_trip(worker, req_alg, resp_alg, binary):
    from gen_demo import demo_reference
    x = np.random.default_rng(3).uniform(0, 8, (32, 4)).astype(np.float32)
    c = tritonlike.TritonLikeClient(worker.url)
    r = c.infer("demo", [("input", x, "FP32")], binary_inputs=binary, binary_outputs=binary,
                request_compression_algorithm=req_alg, response_compression_algorithm=resp_alg)
    ref = demo_reference(x)
    probs, labels = ref["probabilities"], ref["label"]
    np.testing.assert_allclose(r.as_numpy("probabilities"), probs, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(r.as_numpy("label"), labels)
    # the reply really came compressed as asked (a client decompresses only what the header
    # names, so an uncompressed reply would decode just as well): header, then the bytes
    encodings = [v for k, v in r.headers if k.lower() == "content-encoding"]
    raw = r.raw_body
    if resp_alg is None:
        assert encodings == [], encodings
        return
    assert encodings == [resp_alg], encodings
    if resp_alg == "gzip":
        assert raw[:3] == b"\x1f\x8b\x08", raw[:16]  # gzip magic, deflate method (RFC 1952)
        plain = gzip.decompress(raw)
    else:  # HTTP "deflate" is the zlib format (RFC 9110 8.4.1.2, RFC 1950)
        assert raw[0] & 0x0F == 8 and (raw[0] << 8 | raw[1]) % 31 == 0, raw[:16]
        plain = zlib.decompress(raw)
    assert plain == r.decoded_body and len(raw) < len(plain)
    hl = dict((k.lower(), v) for k, v in r.headers).get("inference-header-content-length")
    head = json.loads(plain[:int(hl)] if hl is not None else plain)
    assert head["model_name"] == "demo" and [o["name"] for o in head["outputs"]] == ["probabilities", "label"]


def test_reply_headers_when_gzip_accepted(worker):
    body = json.dumps({"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 4],
                                   "data": [1, 2, 3, 4]}]}).encode()
    code, headers, raw = worker.http("POST", "/v2/models/demo/infer", body,
                                     {"Accept-Encoding": "br;q=1, gzip;q=0.5"})
    assert code == 200 and headers.get("Content-Encoding") == "gzip"
    assert raw[:3] == b"\x1f\x8b\x08", raw[:16]
    assert json.loads(gzip.decompress(raw))["model_name"] == "demo"
    code, headers, raw = worker.http("POST", "/v2/models/demo/infer", body,
                                     {"Accept-Encoding": "gzip;q=0"})
    assert code == 200 and "Content-Encoding" not in headers
    assert json.loads(raw)["model_name"] == "demo"  # plain JSON, as sent


def test_bad_compressed_bodies(worker):
    body = json.dumps({"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 4],
                                   "data": [1, 2, 3, 4]}]}).encode()
    cases = [
        (b"not gzip at all", "gzip", 400, "corrupt"),
        (gzip.compress(body)[:-6], "gzip", 400, "corrupt"),           # truncated stream
        (zlib.compress(body) + b"junk", "deflate", 400, "corrupt"),    # trailing garbage
        (gzip.compress(b" " * 1_000_000), "gzip", 413, "limit"),      # a zip bomb, 1 MB > 64 KiB
        (body, "br", 415, "br"),
    ]
    for data, enc, status, needle in cases:
        code, _, raw = worker.http("POST", "/v2/models/demo/infer", data, {"Content-Encoding": enc})
        assert code == status, (enc, raw)
        assert needle in json.loads(raw)["error"]
    assert worker.http("POST", "/v2/models/demo/infer", body)[0] == 200
