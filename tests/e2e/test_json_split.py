"""One big JSON tensor's numbers split across the worker's threads: a flat "data" array of
65536 elements or more is cut at commas into ranges that several threads parse into their
own slices of the tensor, and a big output is formatted in ranges into pieces of the reply
written in order. Nothing of that may show: the values are the one-thread path's, bit for
bit, and a bad element gets the same 400 naming its index."""
import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from conftest import start_worker
from helpers import request
from exactjson import decode_data, exact_json, same_bits

SHAPE = [1, 3, 224, 224]  # 150528 elements: well past the split threshold (65536)


@pytest.fixture(scope="module")
def worker(tmp_path_factory):
    root = tmp_path_factory.mktemp("split-repo")
    d = root / "identity" / "1"
    d.mkdir(parents=True)
    g = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "id",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, 224, 224])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3, 224, 224])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, str(d / "model.onnx"))
    w = start_worker(root, tmp_path_factory.mktemp("split-logs"), env={"EXECUTION_MODE": "cpu"})
    yield w
    w.stop()


def post(w, body, headers=None):
    """One inference on the identity model, on a fresh connection, no retry: (status, headers, body)."""
    return request(w, "POST", "/v2/models/identity/infer", body, headers, timeout=60)


def values():
    """Every kind of float a client sends: long decimals (float64 text of float32 values),
    short ones, integers, negative zero, tiny and huge magnitudes."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal(int(np.prod(SHAPE))).astype(np.float32)
    x[::5] = rng.integers(-1000, 1000, x[::5].size)
    x[1::97] = np.float32(-0.0)
    x[2::89] *= np.float32(1e-30)
    x[3::83] *= np.float32(1e30)
    return x


def json_body(data_text, binary_output):
    head = '{"inputs":[{"name":"x","datatype":"FP32","shape":%s,"data":[' % json.dumps(SHAPE)
    tail = ']}]%s}' % (',"parameters":{"binary_data_output":true}' if binary_output else "")
    return (head + data_text + tail).encode()


def texts(x):
    # float64 text of each float32 (what json.dumps of a list of Python floats gives), some
    # of them integers, with assorted spacing
    out = []
    for i, v in enumerate(x.tolist()):
        small_int = i % 5 == 0 and abs(v) < 1e6 and v == int(v) and not (v == 0 and np.signbit(v))
        t = str(int(v)) if small_int else repr(v)
        out.append(t)
    return out


def join(parts):
    return "".join(p + ("" if i == len(parts) - 1 else (", " if i % 3 else ",\n ")) for i, p in enumerate(parts))


def test_big_json_tensor_decodes_exactly_as_binary(worker):
    x = values()
    # binary request of the tensor: the reference bytes
    hdr = json.dumps({"inputs": [{"name": "x", "datatype": "FP32", "shape": SHAPE,
                                  "parameters": {"binary_data_size": x.nbytes}}],
                      "parameters": {"binary_data_output": True}}).encode()
    code, h, ref = post(worker, hdr + x.tobytes(), {"Inference-Header-Content-Length": str(len(hdr))})
    assert code == 200, ref[:300]
    ref_out = ref[int(h["Inference-Header-Content-Length"]):]
    assert ref_out == x.tobytes()
    # the same tensor as JSON text, the reply's output in binary: what the split parse read
    code, h, got = post(worker, json_body(join(texts(x)), True))
    assert code == 200, got[:300]
    out = np.frombuffer(got[int(h["Inference-Header-Content-Length"]):], dtype="<f4")
    bad = np.flatnonzero(out.view("<u4") != x.view("<u4"))
    assert bad.size == 0, f"{bad.size} elements differ, the first at {bad[:5]}"


def test_big_json_output_round_trips_exactly(worker):
    x = values()
    code, _, got = post(worker, json_body(join(texts(x)), False))
    assert code == 200, got[:300]
    reply = exact_json(got)
    (o,) = reply["outputs"]
    assert o["shape"] == SHAPE and o["datatype"] == "FP32"
    y = decode_data("FP32", o["data"], SHAPE)
    assert same_bits("FP32", y, x.reshape(SHAPE))


@pytest.mark.parametrize("where", [75000, 100001, 150527])
@pytest.mark.parametrize("token,message", [
    ("1e39", "input 'x': element {i}: 1e+39 is out of range for FP32"),
    ("true", "input 'x': element {i}: expected a number for datatype FP32"),
])
def test_a_bad_element_in_the_second_half_is_named_by_its_index(worker, where, token, message):
    parts = texts(values())
    parts[where] = token
    code, _, body = post(worker, json_body(join(parts), False))
    assert code == 400, body[:300]
    assert json.loads(body) == {"error": message.format(i=where)}
