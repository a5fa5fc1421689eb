#!/usr/bin/python3
"""Generate the shipped tierserve demo model: <OUTDIR>/demo/1/model.onnx.

Usage:  /usr/bin/python3 models/gen_demo.py [OUTDIR]
        (OUTDIR defaults to the models/ folder next to this script)

The model "demo" is a tiny iris-style classifier MLP:
    hidden        = Relu(input @ W1 + b1)        W1: 4x16,  b1: 16
    logits        = hidden @ W2 + b2             W2: 16x3,  b2: 3
    probabilities = Softmax(logits, axis=-1)     FP32  [batch, 3]
    label         = ArgMax(logits, axis=1, keepdims=0)   INT64 [batch]
Input: "input" FP32 [batch, 4].

Importable: build_demo_model() -> onnx.ModelProto, demo_reference(x) -> dict
of numpy outputs. Output bytes are deterministic (fixed seed, fixed
producer, no timestamps). Requires Debian's python3-onnx / python3-numpy.
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

SEED = 20261129
OPSET = 17
IR_VERSION = 8
PRODUCER = "tierserve-gen"


def _weights():
    """Return (W1, b1, W2, b2) as float32 arrays, deterministic."""
    rng = np.random.default_rng(SEED)
    w1 = (rng.standard_normal((4, 16)) / np.sqrt(4.0)).astype(np.float32)
    b1 = (rng.standard_normal(16) * 0.1).astype(np.float32)
    w2 = (rng.standard_normal((16, 3)) / np.sqrt(16.0)).astype(np.float32)
    b2 = (rng.standard_normal(3) * 0.1).astype(np.float32)
    return w1, b1, w2, b2


def build_demo_model():
    """Build and return the demo ModelProto (checked, opset 17, IR 8)."""
    w1, b1, w2, b2 = _weights()
    inits = [
        numpy_helper.from_array(w1, "W1"),
        numpy_helper.from_array(b1, "b1"),
        numpy_helper.from_array(w2, "W2"),
        numpy_helper.from_array(b2, "b2"),
    ]
    nodes = [
        helper.make_node("MatMul", ["input", "W1"], ["mm1"], name="mm1"),
        helper.make_node("Add", ["mm1", "b1"], ["pre1"], name="add1"),
        helper.make_node("Relu", ["pre1"], ["hidden"], name="relu1"),
        helper.make_node("MatMul", ["hidden", "W2"], ["mm2"], name="mm2"),
        helper.make_node("Add", ["mm2", "b2"], ["logits"], name="add2"),
        helper.make_node("Softmax", ["logits"], ["probabilities"],
                         name="softmax", axis=-1),
        helper.make_node("ArgMax", ["logits"], ["label"], name="argmax",
                         axis=1, keepdims=0),
    ]
    graph = helper.make_graph(
        nodes, "demo",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT,
                                       ["batch", 4])],
        [helper.make_tensor_value_info("probabilities", TensorProto.FLOAT,
                                       ["batch", 3]),
         helper.make_tensor_value_info("label", TensorProto.INT64,
                                       ["batch"])],
        initializer=inits)
    model = helper.make_model(
        graph, producer_name=PRODUCER, producer_version="1",
        opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = IR_VERSION
    model.doc_string = "tierserve demo: iris-style 4-16-3 MLP classifier"
    onnx.checker.check_model(model, full_check=True)
    return model


def demo_reference(x):
    """Numpy (float32) reference for the demo model.

    x: array-like [batch, 4]. Returns {"probabilities": float32 [batch,3],
    "label": int64 [batch]}.
    """
    x = np.asarray(x, dtype=np.float32).reshape(-1, 4)
    w1, b1, w2, b2 = _weights()
    hidden = np.maximum(x @ w1 + b1, np.float32(0))
    logits = (hidden @ w2 + b2).astype(np.float32)
    e = np.exp(logits - logits.max(axis=-1, keepdims=True))
    probs = (e / e.sum(axis=-1, keepdims=True)).astype(np.float32)
    label = np.argmax(logits, axis=1).astype(np.int64)
    return {"probabilities": probs, "label": label}


def write_demo(outdir):
    """Write <outdir>/demo/1/model.onnx; return its path."""
    path = os.path.join(outdir, "demo", "1", "model.onnx")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    data = build_demo_model().SerializeToString()
    with open(path, "wb") as f:
        f.write(data)
    return path


def main(argv):
    if len(argv) > 2 or (len(argv) == 2 and argv[1] in ("-h", "--help")):
        sys.stderr.write("usage: %s [OUTDIR]\n" % argv[0])
        return 2
    outdir = argv[1] if len(argv) == 2 else \
        os.path.dirname(os.path.abspath(__file__))
    print(write_demo(outdir))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
