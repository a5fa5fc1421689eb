#!/usr/bin/python3
"""Write the tierserve end-to-end test model repository (Triton layout).

Usage:  /usr/bin/python3 tests/models/gen_test_models.py OUTDIR

Writes OUTDIR/<name>/<version>/model.onnx for every model in MODELS, and
OUTDIR/<name>/config.yaml for the models in CONFIGS (Triton field names).
All models: ONNX opset 17, IR version 8, producer "tierserve-gen"; output is
byte-identical on every run. Importable: MODELS (metadata) and write_repo().
Requires Debian's python3-onnx / python3-numpy (use /usr/bin/python3).
"""
import importlib.util
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
IR_VERSION = 8
PRODUCER = "tierserve-gen"
SEED = 20261129

HERE = os.path.dirname(os.path.abspath(__file__))
GEN_DEMO = os.path.join(HERE, "..", "..", "models", "gen_demo.py")

# KServe v2 datatype -> ONNX element type.
KSERVE_TO_ONNX = {
    "BOOL": TensorProto.BOOL,
    "UINT8": TensorProto.UINT8,
    "UINT16": TensorProto.UINT16,
    "UINT32": TensorProto.UINT32,
    "UINT64": TensorProto.UINT64,
    "INT8": TensorProto.INT8,
    "INT16": TensorProto.INT16,
    "INT32": TensorProto.INT32,
    "INT64": TensorProto.INT64,
    "FP16": TensorProto.FLOAT16,
    "FP32": TensorProto.FLOAT,
    "FP64": TensorProto.DOUBLE,
    "BYTES": TensorProto.STRING,
    "BF16": TensorProto.BFLOAT16,
}

IDENTITY_DTYPES = list(KSERVE_TO_ONNX)
SIMPLE_DTYPES = ["FP32", "FP64", "INT32", "INT64", "FP16"]
SLOW_DIM = 512
SLOW_STEPS = 160  # ~40 ms for batch 64 on 2 CPU cores with ORT 1.29
TWO_VERSIONS = (1, 3)

# name -> config.yaml text (Triton's field names, read by tierserve).
# two_versions serves every version on disk (Triton's default policy is
# latest: 1, which would serve only version 3).
CONFIGS = {
    "two_versions": "version_policy:\n  all: {}\n",
}


def _t(name, dt, shape):
    """Metadata tuple for MODELS: dict(name, datatype (KServe), shape)."""
    return {"name": name, "datatype": dt, "shape": list(shape)}


def _build_models_meta():
    m = {}
    for dt in IDENTITY_DTYPES:
        m["identity_" + dt.lower()] = {
            "versions": [1],
            "inputs": [_t("INPUT0", dt, [-1, -1])],
            "outputs": [_t("OUTPUT0", dt, [-1, -1])],
            "doc": "OUTPUT0 = Identity(INPUT0)",
        }
    for dt in SIMPLE_DTYPES:
        m["simple_" + dt.lower()] = {
            "versions": [1],
            "inputs": [_t("INPUT0", dt, [-1, 16]), _t("INPUT1", dt, [-1, 16])],
            "outputs": [_t("OUTPUT0", dt, [-1, 16]),
                        _t("OUTPUT1", dt, [-1, 16])],
            "doc": "OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1",
        }
    m["fixed_shape"] = {
        "versions": [1],
        "inputs": [_t("x", "FP32", [2, 3])],
        "outputs": [_t("y", "FP32", [2, 3])],
        "doc": "y = x * 2.0",
    }
    m["two_versions"] = {
        "versions": list(TWO_VERSIONS),
        "inputs": [_t("x", "FP32", [-1, 4])],
        "outputs": [_t("y", "FP32", [-1, 4])],
        "doc": "y = x + <version> (1.0 for v1, 3.0 for v3)",
    }
    m["slow"] = {
        "versions": [1],
        "inputs": [_t("x", "FP32", [-1, SLOW_DIM])],
        "outputs": [_t("y", "FP32", [-1, SLOW_DIM])],
        "doc": "y = %d x (h = Tanh(h @ W)), W one shared %dx%d FP32"
               % (SLOW_STEPS, SLOW_DIM, SLOW_DIM),
    }
    m["demo"] = {
        "versions": [1],
        "inputs": [_t("input", "FP32", [-1, 4])],
        "outputs": [_t("probabilities", "FP32", [-1, 3]),
                    _t("label", "INT64", [-1])],
        "doc": "shipped demo MLP (models/gen_demo.py)",
    }
    return m


# name -> {"versions": [int], "inputs"/"outputs": [{"name", "datatype"
# (KServe v2 string), "shape" (-1 = dynamic)}], "doc": str}
MODELS = _build_models_meta()


def _vi(name, dt, dims):
    return helper.make_tensor_value_info(name, KSERVE_TO_ONNX[dt], dims)


def _finish(graph):
    model = helper.make_model(
        graph, producer_name=PRODUCER, producer_version="1",
        opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = IR_VERSION
    onnx.checker.check_model(model, full_check=True)
    return model


def _identity(dt):
    g = helper.make_graph(
        [helper.make_node("Identity", ["INPUT0"], ["OUTPUT0"], name="id")],
        "identity_" + dt.lower(),
        [_vi("INPUT0", dt, ["batch", "n"])],
        [_vi("OUTPUT0", dt, ["batch", "n"])])
    return _finish(g)


def _simple(dt):
    g = helper.make_graph(
        [helper.make_node("Add", ["INPUT0", "INPUT1"], ["OUTPUT0"], name="add"),
         helper.make_node("Sub", ["INPUT0", "INPUT1"], ["OUTPUT1"], name="sub")],
        "simple_" + dt.lower(),
        [_vi("INPUT0", dt, ["batch", 16]), _vi("INPUT1", dt, ["batch", 16])],
        [_vi("OUTPUT0", dt, ["batch", 16]), _vi("OUTPUT1", dt, ["batch", 16])])
    return _finish(g)


def _fixed_shape():
    two = numpy_helper.from_array(np.array(2.0, dtype=np.float32), "two")
    g = helper.make_graph(
        [helper.make_node("Mul", ["x", "two"], ["y"], name="mul")],
        "fixed_shape",
        [_vi("x", "FP32", [2, 3])], [_vi("y", "FP32", [2, 3])],
        initializer=[two])
    return _finish(g)


def _two_versions(version):
    c = numpy_helper.from_array(np.array(float(version), dtype=np.float32),
                                "version")
    g = helper.make_graph(
        [helper.make_node("Add", ["x", "version"], ["y"], name="add")],
        "two_versions_v%d" % version,
        [_vi("x", "FP32", ["batch", 4])], [_vi("y", "FP32", ["batch", 4])],
        initializer=[c])
    return _finish(g)


def slow_weight():
    """The single shared 512x512 FP32 matrix used by every MatMul in slow."""
    rng = np.random.default_rng(SEED + 1)
    return (rng.standard_normal((SLOW_DIM, SLOW_DIM))
            / np.sqrt(SLOW_DIM)).astype(np.float32)


def slow_reference(x):
    """Numpy reference for `slow` (float32; expect ~1e-4 differences)."""
    h = np.asarray(x, dtype=np.float32)
    w = slow_weight()
    for _ in range(SLOW_STEPS):
        h = np.tanh(h @ w).astype(np.float32)
    return h


def _slow():
    w = numpy_helper.from_array(slow_weight(), "W")
    nodes = []
    prev = "x"
    for i in range(SLOW_STEPS):
        mm = "mm%d" % i
        out = "y" if i == SLOW_STEPS - 1 else "h%d" % i
        nodes.append(helper.make_node("MatMul", [prev, "W"], [mm],
                                      name="matmul%d" % i))
        nodes.append(helper.make_node("Tanh", [mm], [out], name="tanh%d" % i))
        prev = out
    g = helper.make_graph(
        nodes, "slow",
        [_vi("x", "FP32", ["batch", SLOW_DIM])],
        [_vi("y", "FP32", ["batch", SLOW_DIM])],
        initializer=[w])
    return _finish(g)


def _load_gen_demo():
    spec = importlib.util.spec_from_file_location("tierserve_gen_demo",
                                                  GEN_DEMO)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def build_model(name, version=1):
    """Return the ModelProto for MODELS[name] at the given version."""
    if name not in MODELS or version not in MODELS[name]["versions"]:
        raise KeyError("%s version %d" % (name, version))
    if name.startswith("identity_"):
        return _identity(name[len("identity_"):].upper())
    if name.startswith("simple_"):
        return _simple(name[len("simple_"):].upper())
    if name == "fixed_shape":
        return _fixed_shape()
    if name == "two_versions":
        return _two_versions(version)
    if name == "slow":
        return _slow()
    if name == "demo":
        return _load_gen_demo().build_demo_model()
    raise KeyError(name)


def write_repo(outdir):
    """Write every model to outdir/<name>/<version>/model.onnx, and each
    CONFIGS entry to outdir/<name>/config.yaml.

    Returns the list of written paths (sorted)."""
    paths = []
    for name in sorted(MODELS):
        if name in CONFIGS:
            path = os.path.join(outdir, name, "config.yaml")
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as f:
                f.write(CONFIGS[name])
            paths.append(path)
        for version in MODELS[name]["versions"]:
            path = os.path.join(outdir, name, str(version), "model.onnx")
            os.makedirs(os.path.dirname(path), exist_ok=True)
            data = build_model(name, version).SerializeToString()
            with open(path, "wb") as f:
                f.write(data)
            paths.append(path)
    return sorted(paths)


def main(argv):
    args = [a for a in argv[1:] if a != "--config"]  # --config: accepted, no-op
    if len(args) != 1 or args[0] in ("-h", "--help"):
        sys.stderr.write("usage: %s OUTDIR\n" % argv[0])
        return 2
    for p in write_repo(args[0]):
        print(p)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
