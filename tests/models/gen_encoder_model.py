#!/usr/bin/python3
"""Write a tiny BERT-style encoder as Optimum's `feature-extraction` export and
sentence-transformers' folder have it, for the /v1/embeddings tests.

Usage:  /usr/bin/python3 tests/models/gen_encoder_model.py OUTDIR [--pooling mean|cls|lasttoken]
                  [--no-normalize] [--no-token-type-ids] [--pooled-output] [--max-seq N]

OUTDIR receives:
  model.onnx                 input_ids, attention_mask[, token_type_ids] int64 [batch, sequence]
                             -> last_hidden_state FP32 [batch, sequence, 32]
                             (--pooled-output: -> sentence_embedding FP32 [batch, 32], the mean
                             over the mask computed inside the graph)
  tokenizer.json             WordPiece with BERT's pipeline (BertNormalizer lowercasing,
                             BertPreTokenizer, BertProcessing [CLS] ... [SEP]), the same shape
                             as the generated `wp_bert` file of the tokenizer golden test
                             (tests/llm/golden.mjs), on a small fixed vocabulary
  modules.json               Transformer, Pooling (1_Pooling), and Normalize unless --no-normalize
  1_Pooling/config.json      the pooling mode (default mean)
  sentence_bert_config.json  max_seq_length (default 32)
  config.json                BERT's fields (max_position_embeddings 64)

The model: 2 layers, hidden 32, 4 heads, FFN 64, learned positions, post-LayerNorm, GELU (erf),
padding keys masked with a -1e9 bias, fixed random weights (seed SEED). encoder_reference.py
runs the same model, pooling and normalisation in numpy from the initializers of the file.
Nothing of it is committed: the tests generate it.
"""
import json
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
IR_VERSION = 8
SEED = 2211
LAYERS = 2
HIDDEN = 32
HEADS = 4
HEAD_DIM = 8
FFN = 64
MAX_POSITIONS = 64
TYPES = 2
LN_EPS = 1e-12

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
WORDS = ("the a an of to and in is it that for on with as was at by be this are or from not but "
         "what all we when your can said there use each which she do how their if will up other about "
         "out many then them these so some her would make like him into time has look two more write "
         "go see number no way could people my than first water been call who oil its now find long "
         "down day did get come made may part refund order ticket password reset account shipping "
         "delivery invoice help support question answer search faq login email cancel").split()
PIECES = ["##s", "##ed", "##ing", "##er", "##ly", "##es", "##y", "##tion"]
LETTERS = "abcdefghijklmnopqrstuvwxyz0123456789"
PUNCT = ".,!?;:'\"()-/"


def vocab():
    v = list(SPECIALS)
    for w in WORDS:
        if w not in v:
            v.append(w)
    v += PIECES
    for c in LETTERS + PUNCT:
        v.append(c)
    for c in LETTERS:
        v.append("##" + c)
    return {t: i for i, t in enumerate(v)}


def tokenizer_json():
    v = vocab()
    added = [{"id": v[t], "content": t, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for t in SPECIALS]
    return {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": {"type": "BertNormalizer", "clean_text": True, "handle_chinese_chars": True,
                       "strip_accents": None, "lowercase": True},
        "pre_tokenizer": {"type": "BertPreTokenizer"},
        "post_processor": {"type": "BertProcessing", "sep": ["[SEP]", v["[SEP]"]], "cls": ["[CLS]", v["[CLS]"]]},
        "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": True},
        "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
                  "max_input_chars_per_word": 100, "vocab": v},
    }


def make_weights(seed=SEED):
    rng = np.random.default_rng(seed)
    nv = len(vocab())

    def lin(fan_in, fan_out):
        return (rng.standard_normal((fan_in, fan_out)) / np.sqrt(fan_in)).astype(np.float32)

    def vec(n, scale=0.1, base=0.0):
        return (base + scale * rng.standard_normal(n)).astype(np.float32)

    w = {"word": (0.5 * rng.standard_normal((nv, HIDDEN))).astype(np.float32),
         "pos": (0.5 * rng.standard_normal((MAX_POSITIONS, HIDDEN))).astype(np.float32),
         "type": (0.5 * rng.standard_normal((TYPES, HIDDEN))).astype(np.float32),
         "emb_ln_g": vec(HIDDEN, base=1.0), "emb_ln_b": vec(HIDDEN)}
    for i in range(LAYERS):
        p = f"l{i}."
        for n in ("q", "k", "v", "o"):
            w[p + "w" + n] = lin(HIDDEN, HIDDEN)
            w[p + "b" + n] = vec(HIDDEN)
        w[p + "ln1_g"], w[p + "ln1_b"] = vec(HIDDEN, base=1.0), vec(HIDDEN)
        w[p + "w1"], w[p + "b1"] = lin(HIDDEN, FFN), vec(FFN)
        w[p + "w2"], w[p + "b2"] = lin(FFN, HIDDEN), vec(HIDDEN)
        w[p + "ln2_g"], w[p + "ln2_b"] = vec(HIDDEN, base=1.0), vec(HIDDEN)
    return w


class G:
    def __init__(self):
        self.nodes, self.inits, self.n = [], [], 0

    def op(self, op_type, inputs, out=None, **attrs):
        self.n += 1
        out = out or f"{op_type.lower()}_{self.n}"
        self.nodes.append(helper.make_node(op_type, inputs, [out], **attrs))
        return out

    def const(self, arr):
        self.n += 1
        name = f"c_{self.n}"
        self.inits.append(numpy_helper.from_array(np.asarray(arr), name))
        return name

    def weight(self, name, arr):
        self.inits.append(numpy_helper.from_array(arr.astype(np.float32), name))
        return name


def build(token_type_ids=True, pooled_output=False):
    g = G()
    w = make_weights()
    for k, v in w.items():
        g.weight(k, v)
    ids, mask = "input_ids", "attention_mask"
    x = g.op("Gather", ["word", ids])                                   # [B, S, H]
    seq = g.op("Gather", [g.op("Shape", [ids]), g.const(np.array(1, np.int64))])
    pos = g.op("Range", [g.const(np.array(0, np.int64)), seq, g.const(np.array(1, np.int64))])
    x = g.op("Add", [x, g.op("Gather", ["pos", pos])])
    if token_type_ids:
        x = g.op("Add", [x, g.op("Gather", ["type", "token_type_ids"])])
    x = g.op("LayerNormalization", [x, "emb_ln_g", "emb_ln_b"], axis=-1, epsilon=LN_EPS)
    # key bias [B, 1, 1, S]: 0 where the mask is 1, -1e9 where it is 0
    mf = g.op("Cast", [mask], to=TensorProto.FLOAT)
    bias = g.op("Mul", [g.op("Sub", [g.const(np.array(1.0, np.float32)), mf]),
                        g.const(np.array(-1e9, np.float32))])
    bias = g.op("Unsqueeze", [bias, g.const(np.array([1, 2], np.int64))])
    shape4 = g.const(np.array([0, 0, HEADS, HEAD_DIM], np.int64))
    shape3 = g.const(np.array([0, 0, HIDDEN], np.int64))
    for i in range(LAYERS):
        p = f"l{i}."

        def proj(n, src):
            return g.op("Add", [g.op("MatMul", [src, p + "w" + n]), p + "b" + n])

        def heads(t):  # [B, S, H] -> [B, h, S, d]
            return g.op("Transpose", [g.op("Reshape", [t, shape4])], perm=[0, 2, 1, 3])

        q, k, v = heads(proj("q", x)), heads(proj("k", x)), heads(proj("v", x))
        s = g.op("MatMul", [q, g.op("Transpose", [k], perm=[0, 1, 3, 2])])
        s = g.op("Add", [g.op("Mul", [s, g.const(np.array(1.0 / np.sqrt(HEAD_DIM), np.float32))]), bias])
        a = g.op("MatMul", [g.op("Softmax", [s], axis=-1), v])
        a = g.op("Reshape", [g.op("Transpose", [a], perm=[0, 2, 1, 3]), shape3])
        x = g.op("LayerNormalization", [g.op("Add", [x, proj("o", a)]), p + "ln1_g", p + "ln1_b"], axis=-1,
                 epsilon=LN_EPS)
        h = g.op("Add", [g.op("MatMul", [x, p + "w1"]), p + "b1"])
        gelu = g.op("Mul", [g.op("Mul", [h, g.const(np.array(0.5, np.float32))]),
                            g.op("Add", [g.const(np.array(1.0, np.float32)),
                                         g.op("Erf", [g.op("Div", [h, g.const(np.array(np.sqrt(2.0), np.float32))])])])])
        f = g.op("Add", [g.op("MatMul", [gelu, p + "w2"]), p + "b2"])
        x = g.op("LayerNormalization", [g.op("Add", [x, f]), p + "ln2_g", p + "ln2_b"], axis=-1, epsilon=LN_EPS)
    dyn = ["batch_size", "sequence_length"]
    inputs = [helper.make_tensor_value_info(ids, TensorProto.INT64, dyn),
              helper.make_tensor_value_info(mask, TensorProto.INT64, dyn)]
    if token_type_ids:
        inputs.append(helper.make_tensor_value_info("token_type_ids", TensorProto.INT64, dyn))
    if pooled_output:  # the mean over the mask, inside the graph
        m3 = g.op("Unsqueeze", [mf, g.const(np.array([2], np.int64))])
        num = g.op("ReduceSum", [g.op("Mul", [x, m3]), g.const(np.array([1], np.int64))], keepdims=0)
        den = g.op("ReduceSum", [m3, g.const(np.array([1], np.int64))], keepdims=0)
        g.op("Div", [num, g.op("Max", [den, g.const(np.array(1e-9, np.float32))])], out="sentence_embedding")
        outputs = [helper.make_tensor_value_info("sentence_embedding", TensorProto.FLOAT, ["batch_size", HIDDEN])]
    else:
        g.op("Identity", [x], out="last_hidden_state")
        outputs = [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, dyn + [HIDDEN])]
    graph = helper.make_graph(g.nodes, "tiny_bert", inputs, outputs, g.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="tierserve-tests")
    model.ir_version = IR_VERSION
    onnx.checker.check_model(model)
    return model


def write(outdir, pooling="mean", normalize=True, token_type_ids=True, pooled_output=False, max_seq=32):
    os.makedirs(os.path.join(outdir, "1_Pooling"), exist_ok=True)
    onnx.save(build(token_type_ids, pooled_output), os.path.join(outdir, "model.onnx"))

    def dump(name, obj):
        with open(os.path.join(outdir, name), "w") as f:
            json.dump(obj, f, indent=2)

    dump("tokenizer.json", tokenizer_json())
    dump("tokenizer_config.json", {"do_lower_case": True, "model_max_length": 512, "cls_token": "[CLS]",
                                   "sep_token": "[SEP]", "pad_token": "[PAD]", "unk_token": "[UNK]"})
    modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
               {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]
    if normalize:
        modules.append({"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"})
    dump("modules.json", modules)
    dump("1_Pooling/config.json", {"word_embedding_dimension": HIDDEN,
                                   "pooling_mode_cls_token": pooling == "cls",
                                   "pooling_mode_mean_tokens": pooling == "mean",
                                   "pooling_mode_max_tokens": False, "pooling_mode_mean_sqrt_len_tokens": False,
                                   "pooling_mode_weightedmean_tokens": False,
                                   "pooling_mode_lasttoken": pooling == "lasttoken", "include_prompt": True})
    dump("sentence_bert_config.json", {"max_seq_length": max_seq, "do_lower_case": False})
    dump("config.json", {"model_type": "bert", "architectures": ["BertModel"], "hidden_size": HIDDEN,
                         "num_hidden_layers": LAYERS, "num_attention_heads": HEADS, "intermediate_size": FFN,
                         "max_position_embeddings": MAX_POSITIONS, "type_vocab_size": TYPES,
                         "vocab_size": len(vocab()), "layer_norm_eps": LN_EPS, "hidden_act": "gelu"})


def main(argv):
    args = list(argv[1:])
    if args in (["-h"], ["--help"]) or not args:
        print(__doc__, file=sys.stderr if not args else sys.stdout)
        return 0 if args else 64
    kw = {"pooling": "mean", "normalize": True, "token_type_ids": True, "pooled_output": False, "max_seq": 32}
    out = None
    while args:
        a = args.pop(0)
        if a == "--pooling":
            kw["pooling"] = args.pop(0)
        elif a == "--max-seq":
            kw["max_seq"] = int(args.pop(0))
        elif a == "--no-normalize":
            kw["normalize"] = False
        elif a == "--no-token-type-ids":
            kw["token_type_ids"] = False
        elif a == "--pooled-output":
            kw["pooled_output"] = True
        elif a.startswith("-") or out:
            print(__doc__, file=sys.stderr)
            return 64
        else:
            out = a
    write(out, **kw)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
