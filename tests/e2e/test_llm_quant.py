"""The quantized CPU tier (issue 25): `tierserve quantize` rewrites the tiny FP32 decoder's
weight MatMuls into ONNX Runtime's MatMulNBits at 8 and 4 bits; the worker serves the results
like any decoder, and what ONNX Runtime computes from them over /v1/completions equals the
numpy reference computed with the weights dequantized from the file (llm_reference.py reads
MatMulNBits as ContribOperators.md lays it out, not as the C code writes it): greedy tokens
exactly, logprobs within TOL. One variant covers the other inputs: lm_head reached through a
Transpose, a weight stored as float_data, the whole model in external data, zero points,
written with external data. `tierbench parity --llm` gates INT8 and INT4 (at ONNX Runtime's
fast int8-activation accuracy level) against FP32 on the shipped corpus, and fails a model
whose scales were each taken from the next block."""
import json
import shutil
import subprocess

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from conftest import BIN, ROOT, run_tierbench, start_worker
from llm_fixture import MODELS, node_encode_all, write_tiny_llm
from helpers import post_json
from test_llm_logprobs import token_bytes
import llm_reference

N = 12
K = 5
TOL = 2e-4
PROMPTS = ["Hello world", "The capital of France is", "def fibonacci(n):"]
CORPUS = ROOT / "tools" / "tierbench" / "configs" / "llm-parity-corpus.txt"
# docs/llm.md, "Quantized CPU tier": the gate's thresholds for this model (min-top1, max-abs,
# mean-abs); INT4's is this random-weights decoder's only, which INT4 serves poorly
GATE = {"q8d": ("0.95", "0.5", "0.08"), "q4d": ("0.30", "4.0", "0.7")}


def quantize(src, dst, *args):
    dst.mkdir(parents=True)
    for f in src.iterdir():
        if f.name not in ("model.onnx", "model.onnx.data"):
            shutil.copy(f, dst / f.name)
    r = subprocess.run([BIN, "quantize", str(src / "model.onnx"), str(dst / "model.onnx"), *args],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout


def write_variant(src, dst):
    """The same model with lm_head stored [vocab, hidden] and read through Transpose(perm
    [1, 0]), l0.wq as float_data, every raw tensor in external data (model.onnx.data)."""
    m = onnx.load(str(src / "model.onnx"))
    g = m.graph
    inits = {t.name: t for t in g.initializer}
    lm = numpy_helper.to_array(inits["lm_head"])
    inits["lm_head"].CopyFrom(numpy_helper.from_array(np.ascontiguousarray(lm.T), "lm_head"))
    for n in g.node:
        if n.op_type == "MatMul" and n.input[1] == "lm_head":
            n.input[1] = "lm_head_T"
    nodes = [helper.make_node("Transpose", ["lm_head"], ["lm_head_T"], perm=[1, 0])] + list(g.node)
    del g.node[:]
    g.node.extend(nodes)
    wq = numpy_helper.to_array(inits["l0.wq"])
    inits["l0.wq"].CopyFrom(helper.make_tensor("l0.wq", TensorProto.FLOAT, wq.shape, wq.flatten().tolist()))
    dst.mkdir(parents=True)
    for f in src.iterdir():
        if f.name != "model.onnx":
            shutil.copy(f, dst / f.name)
    onnx.save_model(m, str(dst / "model.onnx"), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="model.onnx.data", size_threshold=1024)
    back = onnx.load(str(dst / "model.onnx"), load_external_data=False)
    kinds = {t.name: (t.data_location, len(t.float_data)) for t in back.graph.initializer}
    assert kinds["lm_head"][0] == TensorProto.EXTERNAL and kinds["l0.wq"] == (TensorProto.DEFAULT, wq.size)


def break_scales(src, dst):
    """q8 with every block's scale taken from the next block of its row (a scale off by one)."""
    m = onnx.load(str(src / "model.onnx"))
    for n in m.graph.node:
        if n.op_type != "MatMulNBits":
            continue
        t = next(t for t in m.graph.initializer if t.name == n.input[2])
        nrows = next(a.i for a in n.attribute if a.name == "N")
        s = numpy_helper.to_array(t).reshape(nrows, -1)
        t.CopyFrom(numpy_helper.from_array(np.roll(s, -1, axis=1).reshape(numpy_helper.to_array(t).shape), t.name))
    dst.mkdir(parents=True)
    for f in src.iterdir():
        if f.name != "model.onnx":
            shutil.copy(f, dst / f.name)
    onnx.save(m, str(dst / "model.onnx"))


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    repo = tmp_path_factory.mktemp("qrepo")
    fp32 = write_tiny_llm(repo / "tiny" / "1")
    out = {"dir": repo, "fp32": fp32, "stdout": {}}
    # exact to the dequantized weights: accuracy level 0 (FP32 compute)
    out["stdout"]["q8"] = quantize(fp32, repo / "q8" / "1", "--bits", "8", "--accuracy-level", "0")
    out["stdout"]["q4"] = quantize(fp32, repo / "q4" / "1", "--bits", "4", "--block", "32", "--accuracy-level", "0")
    write_variant(fp32, repo.parent / "variant")
    out["stdout"]["q4x"] = quantize(repo.parent / "variant", repo / "q4x" / "1", "--bits", "4", "--block", "16",
                                    "--zero-points", "--accuracy-level", "0", "--external-data")
    # the defaults (accuracy level 4: int8 activations, ONNX Runtime's fast CPU path)
    out["stdout"]["q8d"] = quantize(fp32, repo / "q8d" / "1")
    out["stdout"]["q4d"] = quantize(fp32, repo / "q4d" / "1", "--bits", "4")
    break_scales(repo / "q8" / "1", repo / "bad" / "1")
    return out


@pytest.fixture(scope="module")
def w(repo, tmp_path_factory):
    wk = start_worker(repo["dir"], tmp_path_factory.mktemp("qw"), env={"EXECUTION_MODE": "cpu"}, timeout=120)
    yield wk
    assert wk.stop() == 0, wk.log_text()[-4000:]


def test_quantize_rewrites_every_weight_matmul(repo):
    # 2 layers x 7 weight MatMuls + lm_head; the 4 attention products have a computed B
    for name in ("q8", "q4", "q8d", "q4d"):
        assert "quantized 15 of 19 MatMul nodes" in repo["stdout"][name], repo["stdout"][name]
        assert "4 left: 4 with a computed B, 0 other" in repo["stdout"][name]
    assert "(1 through a Transpose)" in repo["stdout"]["q4x"]
    sizes = {n: (repo["dir"] / n / "1" / "model.onnx").stat().st_size for n in ("tiny", "q8", "q4")}
    assert sizes["q4"] < sizes["q8"] < sizes["tiny"]
    m = onnx.load(str(repo["dir"] / "q8" / "1" / "model.onnx"))
    ops = [n.op_type for n in m.graph.node]
    assert ops.count("MatMulNBits") == 15 and ops.count("MatMul") == 4
    assert any(o.domain == "com.microsoft" and o.version == 1 for o in m.opset_import)
    names = {t.name for t in m.graph.initializer}
    assert "lm_head" not in names and "l0.wq" not in names and "embed" in names  # Gather's table kept
    nb = next(n for n in m.graph.node if n.op_type == "MatMulNBits" and n.input[1] == "lm_head_Q8")
    assert {a.name: a.i for a in nb.attribute} == {"K": 64, "N": 32000, "bits": 8, "block_size": 32}
    # the variant: written with external data, the Transpose and the FP32 lm_head gone
    x = repo["dir"] / "q4x" / "1"
    assert (x / "model.onnx.data").stat().st_size > (x / "model.onnx").stat().st_size
    mx = onnx.load(str(x / "model.onnx"), load_external_data=False)
    assert "Transpose" not in [n.op_type for n in mx.graph.node if n.input and n.input[0] == "lm_head"]
    assert "lm_head" not in {t.name for t in mx.graph.initializer}
    assert any(n.op_type == "MatMulNBits" and len(n.input) == 4 for n in mx.graph.node)  # zero points


def test_dequantized_weights_are_within_a_step(repo):
    """Each weight read back from the file (as ContribOperators.md lays it out) is within one
    quantization step of its FP32 block's: a wrong nibble order or a scale from another block
    breaks this, where the served output still equals numpy (both read the same file)."""
    fp32 = onnx.load(str(repo["fp32"] / "model.onnx"))
    w32 = {t.name: numpy_helper.to_array(t) for t in fp32.graph.initializer}
    for name, bits, block in (("q8", 8, 32), ("q4", 4, 32), ("q4x", 4, 16), ("bad", 8, 32)):
        m = onnx.load(str(repo["dir"] / name / "1" / "model.onnx"))
        deq = llm_reference.dequantize_nbits(m, {t.name: numpy_helper.to_array(t) for t in m.graph.initializer})
        assert len(deq) == 15, name
        worst = 0.0
        for k, d in deq.items():
            w = w32[k]  # B [K, N]
            nb = -(-w.shape[0] // block)
            pad = np.zeros((nb * block, w.shape[1]), np.float32)
            pad[:w.shape[0]] = w
            step = np.abs(pad.reshape(nb, block, -1)).max(axis=1) / (1 << (bits - 1))  # per block and column
            limit = np.repeat(step, block, axis=0)[:w.shape[0]]
            worst = max(worst, float((np.abs(d - w) / np.maximum(limit, 1e-30)).max()))
        assert (worst <= 1.0001) == (name != "bad"), (name, worst)


def test_quantize_refusals(tmp_path):
    bad = tmp_path / "x.onnx"
    bad.write_bytes(b"\xff\xff not a model")
    for args, code, text in ((["--bits", "3"], 64, "not 4 or 8"), (["--block", "48"], 64, "power of two"),
                             (["--block", "8"], 64, "16..256"), (["--frobnicate"], 64, "unknown option"),
                             ([], 1, "not an ONNX model")):
        r = subprocess.run([BIN, "quantize", str(bad), str(tmp_path / "y.onnx"), *args], capture_output=True,
                           text=True, timeout=30)
        assert r.returncode == code and text in r.stderr, (args, r.returncode, r.stderr)
    assert not (tmp_path / "y.onnx").exists()


@pytest.fixture(scope="module")
def byid(repo):
    tj = json.loads((repo["fp32"] / "tokenizer.json").read_text())
    m = {v: k for k, v in tj["model"]["vocab"].items()}
    for t in tj.get("added_tokens", []):
        m[t["id"]] = t["content"]
    return lambda i: token_bytes(m[i]).decode("utf-8", errors="replace")


@pytest.mark.parametrize("name", ["q8", "q4", "q4x"])
def test_served_output_equals_numpy_on_dequantized_weights(repo, w, byid, name):
    ids = node_encode_all(PROMPTS, True)
    pj = repo["dir"].parent / f"{name}_prompts.json"
    pj.write_text(json.dumps(ids))
    r = subprocess.run(["/usr/bin/python3", str(MODELS / "llm_reference.py"), "--logprobs", str(K),
                        str(repo["dir"] / name / "1"), str(pj), str(N)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    ref = json.loads(r.stdout)
    assert ref["min_margin"] > 20 * TOL  # rounding cannot flip a greedy choice
    for prompt, steps in zip(PROMPTS, ref["logprobs"]):
        code, _, body = post_json(w, "/v1/completions", {"model": name, "prompt": prompt, "max_tokens": N,
                                                          "temperature": 0, "logprobs": K, "ignore_eos": True})
        assert code == 200, body
        lp = body["choices"][0]["logprobs"]
        assert lp["tokens"] == [byid(s["token"]) for s in steps], (name, prompt)
        for val, top, s in zip(lp["token_logprobs"], lp["top_logprobs"], steps):
            assert abs(val - s["logprob"]) < TOL, (name, prompt, val, s)
            want = {byid(t): v for t, v in s["top"]}
            assert set(top) == set(want) and all(abs(top[t] - want[t]) < TOL for t in want), (top, want)


def parity(w, model, limits=None, prompts=12, tokens=16, resumes=16):
    args = ["parity", "--llm", "--target", f"http://{w.url}", "--model", model, "--baseline-model", "tiny",
            "--corpus", CORPUS, "--max-tokens", tokens, "--prompts", prompts, "--resumes", resumes, "--json", "-"]
    if limits:
        args += ["--min-top1", limits[0], "--max-abs", limits[1], "--mean-abs", limits[2]]
    code, out, err = run_tierbench(*args, timeout=300)
    assert code in (0, 2), err
    rep = json.loads(out[out.index("{"):out.rindex("}") + 1])
    return code, rep, out


def test_parity_gate(w):
    # the same model on both sides: nothing differs (up to a prefill's chunking)
    code, rep, _ = parity(w, "tiny", ("1", "1e-3", "1e-4"))
    assert code == 0 and rep["top1"] == 1 and rep["disagreements"] == 0 and rep["positions"] == 12 * 16
    code, q8, out = parity(w, "q8d", GATE["q8d"])
    assert code == 0 and q8["pass"], out
    assert q8["positions"] == 12 * 16  # teacher forcing keeps every position comparable
    # INT4 disagrees every other token here: fewer prompts, shorter, to keep the requests few
    code, q4, out = parity(w, "q4d", GATE["q4d"], prompts=6, tokens=8)
    assert code == 0 and q4["pass"] and q4["positions"] == 6 * 8, out
    assert q8["mean_abs"] < q4["mean_abs"] and q8["top1"] > q4["top1"]  # 8 bits are closer than 4
    # INT4 of this decoder does not pass INT8's gate: reported as failing, naming the threshold
    code, rep, out = parity(w, "q4d", GATE["q8d"], prompts=6, tokens=8, resumes=0)
    assert code == 2 and not rep["pass"] and "FAIL: top-1 agreement" in out, out
    # every scale from the next block: the gate fails the model
    code, rep, out = parity(w, "bad", GATE["q8d"], prompts=6, tokens=8, resumes=0)
    assert code == 2 and not rep["pass"] and "FAIL" in out, out
    print(json.dumps({"q8d": q8, "q4d": q4, "bad": rep}))
