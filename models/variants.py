#!/usr/bin/python3
"""Write precision variants of the demo model, for `tierbench parity` and a per-pool model map.

Usage:  /usr/bin/python3 models/variants.py OUTDIR
writes  OUTDIR/demo/1/model.onnx         the FP32 original (models/gen_demo.py)
        OUTDIR/demo_fp16/1/model.onnx    FP16 weights and arithmetic
        OUTDIR/demo_int8/1/model.onnx    INT8 dynamic quantization (MatMulInteger)
        OUTDIR/demo_broken/1/model.onnx  FP32 with perturbed weights: a parity gate must fail it

Every variant keeps the original's interface: input FP32 [batch, 4], outputs probabilities
FP32 [batch, 3] and label INT64 [batch]. So the same request goes to any of them, and the
router can serve `demo` as demo_fp16 on the GPU pool and as demo_int8 on the CPU pool
(`models: [{name: demo, serve: demo_int8}]`).

FP16: Cast(input -> FP16), the MLP with FP16 initializers, Cast(logits -> FP32) before
Softmax/ArgMax so the outputs keep their datatypes (what converters call keep_io_types).

INT8 (dynamic quantization, written by hand: only python3-onnx is at hand, not onnxruntime's
quantizer). Per MatMul x @ W:
    W is stored once as int8 Wq = round(W / sw), sw = max|W| / 127 (per tensor, zero point 0)
    DynamicQuantizeLinear(x) -> xq uint8, xs (scale), xz (zero point)   (per request)
    MatMulInteger(xq, Wq, xz, 0) -> int32 acc = (xq - xz) @ Wq
    Cast(acc -> FP32) * (xs * sw) ~= x @ W
Bias, Relu, Softmax and ArgMax stay FP32.

Requires Debian's python3-onnx / python3-numpy. Deterministic bytes.
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_demo  # noqa: E402

BROKEN_SCALE = 0.3  # relative noise on every weight of demo_broken


def _finish(nodes, inits, name, doc):
    graph = helper.make_graph(
        nodes, name,
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, ["batch", 3]),
         helper.make_tensor_value_info("label", TensorProto.INT64, ["batch"])],
        initializer=inits)
    model = helper.make_model(graph, producer_name=gen_demo.PRODUCER, producer_version="1",
                              opset_imports=[helper.make_opsetid("", gen_demo.OPSET)])
    model.ir_version = gen_demo.IR_VERSION
    model.doc_string = doc
    onnx.checker.check_model(model, full_check=True)
    return model


def _heads(logits):
    """Softmax and ArgMax over FP32 logits: the outputs every variant shares."""
    return [helper.make_node("Softmax", [logits], ["probabilities"], name="softmax", axis=-1),
            helper.make_node("ArgMax", [logits], ["label"], name="argmax", axis=1, keepdims=0)]


def build_fp16():
    w1, b1, w2, b2 = gen_demo._weights()
    inits = [numpy_helper.from_array(a.astype(np.float16), n)
             for a, n in ((w1, "W1"), (b1, "b1"), (w2, "W2"), (b2, "b2"))]
    nodes = [
        helper.make_node("Cast", ["input"], ["x16"], name="cast_in", to=TensorProto.FLOAT16),
        helper.make_node("MatMul", ["x16", "W1"], ["mm1"], name="mm1"),
        helper.make_node("Add", ["mm1", "b1"], ["pre1"], name="add1"),
        helper.make_node("Relu", ["pre1"], ["hidden"], name="relu1"),
        helper.make_node("MatMul", ["hidden", "W2"], ["mm2"], name="mm2"),
        helper.make_node("Add", ["mm2", "b2"], ["logits16"], name="add2"),
        helper.make_node("Cast", ["logits16"], ["logits"], name="cast_out", to=TensorProto.FLOAT),
    ] + _heads("logits")
    return _finish(nodes, inits, "demo_fp16", "tierserve demo, FP16 weights and arithmetic")


def _quantized_matmul(x, w, tag, nodes, inits):
    """Appends x @ w as DynamicQuantizeLinear + MatMulInteger + rescale; returns its output."""
    sw = np.float32(np.abs(w).max() / 127.0)
    wq = np.clip(np.round(w / sw), -127, 127).astype(np.int8)
    inits += [numpy_helper.from_array(wq, f"{tag}_wq"),
              numpy_helper.from_array(np.array(sw, np.float32), f"{tag}_ws"),
              numpy_helper.from_array(np.array(0, np.int8), f"{tag}_wz")]
    nodes += [
        helper.make_node("DynamicQuantizeLinear", [x], [f"{tag}_xq", f"{tag}_xs", f"{tag}_xz"], name=f"{tag}_dql"),
        helper.make_node("MatMulInteger", [f"{tag}_xq", f"{tag}_wq", f"{tag}_xz", f"{tag}_wz"], [f"{tag}_acc"],
                         name=f"{tag}_mmi"),
        helper.make_node("Cast", [f"{tag}_acc"], [f"{tag}_accf"], name=f"{tag}_cast", to=TensorProto.FLOAT),
        helper.make_node("Mul", [f"{tag}_xs", f"{tag}_ws"], [f"{tag}_scale"], name=f"{tag}_scale"),
        helper.make_node("Mul", [f"{tag}_accf", f"{tag}_scale"], [f"{tag}_out"], name=f"{tag}_rescale"),
    ]
    return f"{tag}_out"


def build_int8():
    w1, b1, w2, b2 = gen_demo._weights()
    nodes, inits = [], [numpy_helper.from_array(b1, "b1"), numpy_helper.from_array(b2, "b2")]
    mm1 = _quantized_matmul("input", w1, "l1", nodes, inits)
    nodes += [helper.make_node("Add", [mm1, "b1"], ["pre1"], name="add1"),
              helper.make_node("Relu", ["pre1"], ["hidden"], name="relu1")]
    mm2 = _quantized_matmul("hidden", w2, "l2", nodes, inits)
    nodes.append(helper.make_node("Add", [mm2, "b2"], ["logits"], name="add2"))
    nodes += _heads("logits")
    return _finish(nodes, inits, "demo_int8", "tierserve demo, INT8 dynamic quantization (MatMulInteger)")


def build_broken():
    """The FP32 demo with every weight perturbed: what a bad export looks like to a gate."""
    rng = np.random.default_rng(7)
    ws = [a * (1 + BROKEN_SCALE * rng.standard_normal(a.shape)).astype(np.float32) for a in gen_demo._weights()]
    inits = [numpy_helper.from_array(a.astype(np.float32), n) for a, n in zip(ws, ("W1", "b1", "W2", "b2"))]
    nodes = [
        helper.make_node("MatMul", ["input", "W1"], ["mm1"], name="mm1"),
        helper.make_node("Add", ["mm1", "b1"], ["pre1"], name="add1"),
        helper.make_node("Relu", ["pre1"], ["hidden"], name="relu1"),
        helper.make_node("MatMul", ["hidden", "W2"], ["mm2"], name="mm2"),
        helper.make_node("Add", ["mm2", "b2"], ["logits"], name="add2"),
    ] + _heads("logits")
    return _finish(nodes, inits, "demo_broken", "tierserve demo with perturbed weights (a parity test)")


VARIANTS = {"demo": gen_demo.build_demo_model, "demo_fp16": build_fp16, "demo_int8": build_int8,
            "demo_broken": build_broken}


def write_variants(outdir, names=None):
    """Writes OUTDIR/<name>/1/model.onnx for each variant; returns the paths."""
    paths = []
    for name in names or VARIANTS:
        path = os.path.join(outdir, name, "1", "model.onnx")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(VARIANTS[name]().SerializeToString())
        paths.append(path)
    return paths


def main(argv):
    if len(argv) != 2 or argv[1] in ("-h", "--help"):
        sys.stderr.write("usage: %s OUTDIR\n" % argv[0])
        return 2
    for p in write_variants(argv[1]):
        print(p)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
