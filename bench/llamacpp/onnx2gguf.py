#!/usr/bin/python3
"""Write the weights of one of our generated ONNX decoders as a llama-architecture GGUF file,
so llama.cpp runs the same model tierserve serves (bench/llamacpp/run.sh; not a test).

Usage:  /usr/bin/python3 bench/llamacpp/onnx2gguf.py MODEL_DIR OUT.gguf [--type f32|f16|q8_0|q4_0]

MODEL_DIR is a folder tests/models/gen_llm_model.py wrote (model.onnx with its initializer
names, config.json, tokenizer.json). Only that design is understood: the tensors are looked up
by the names gen_llm_model.py gives them (embed, l{i}.wq, ..., final_norm, lm_head), FP32 or
FP16 initializers, and the hyper-parameters come from config.json.

What a converter must get right, and how it is done here:
- Layout. ONNX computes x @ W with W [in, out]; GGUF stores a matrix with ne0 = in (the row
  length) and ne1 = out, i.e. numpy's (out, in) in C order: every matrix is transposed, the
  embedding ([vocab, hidden], gathered by row) is not.
- Rotary embedding. Our graph (like Hugging Face's Llama) rotates the two halves of each head
  (rotate_half: pairs i and i + D/2); llama.cpp's LLM_ARCH_LLAMA rotates adjacent pairs (2i,
  2i + 1). llama.cpp's convert_hf_to_gguf.py therefore permutes the rows of Q and K within
  each head, reshape(n_head, 2, D/2, in).swapaxes(1, 2): the same permutation is applied
  here, with the KV head count for K. Scores q.k are unchanged (both are permuted alike), V
  and the output projection are not touched.
- rope.freq_base and the RMSNorm epsilon come from config.json (rope_theta, rms_norm_eps).
- Tokenizer. tokenizer.json is Llama-2's (a sentencepiece BPE exported by Hugging Face):
  tokenizer.ggml.model "llama" (llama.cpp's sentencepiece tokenizer, which adds the "▁"
  prefix and falls back to <0xNN> byte tokens), the tokens in id order, token types
  (control for <s> </s>, unknown for <unk>, byte for <0xNN>, normal otherwise) and scores.
  llama.cpp's sentencepiece tokenizer merges the adjacent pair whose concatenation scores
  highest; Hugging Face's BPE merges the pair of lowest merge rank. Score = -(lowest rank of
  a merge producing the token) makes the two agree (run.sh checks the ids against
  @huggingface/tokenizers on its prompts).
- Types. 1-D tensors (norm weights) stay F32 in every file, as llama.cpp's converter keeps
  them. q8_0: blocks of 32 along the row, an fp16 scale d = max|x| / 127 and 32 int8
  round(x / d). q4_0: blocks of 32, d = (the value of largest magnitude) / -8 as fp16, and
  16 bytes of nibbles min(15, int(x / d + 8.5)), element j in the low nibble of byte j and
  element j + 16 in the high one (ggml's quantize_row_q4_0_ref). In q4_0 files every matrix
  is Q4_0, the embedding and the output head too (llama-quantize would pick Q6_K for the
  head; this writer has no K-quants).
"""
import json
import os
import struct
import sys

import numpy as np
import onnx
from onnx import numpy_helper

GGUF_MAGIC = 0x46554747  # "GGUF" little-endian
GGUF_VERSION = 3
ALIGN = 32
# gguf metadata value types
T_UINT32, T_INT32, T_FLOAT32, T_BOOL, T_STRING, T_ARRAY = 4, 5, 6, 7, 8, 9
# ggml tensor types and llama file types
GGML = {"f32": 0, "f16": 1, "q4_0": 2, "q8_0": 8}
FILE_TYPE = {"f32": 0, "f16": 1, "q4_0": 2, "q8_0": 7}
TOK_NORMAL, TOK_UNKNOWN, TOK_CONTROL, TOK_BYTE = 1, 2, 3, 6
QK = 32


def permute(w, n_head):
    """convert_hf_to_gguf.py's permute: rows of each head from rotate_half order to pairs."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def q8_0(w):
    rows, n = w.shape
    b = w.astype(np.float32).reshape(rows, n // QK, QK)
    d = np.abs(b).max(axis=-1) / 127.0
    inv = np.divide(1.0, d, out=np.zeros_like(d), where=d != 0)
    q = np.round(b * inv[..., None]).astype(np.int8)
    out = np.empty((rows, n // QK), dtype=[("d", "<f2"), ("q", "i1", QK)])
    out["d"], out["q"] = d.astype(np.float16), q
    return out.tobytes()


def q4_0(w):
    rows, n = w.shape
    b = w.astype(np.float32).reshape(rows, n // QK, QK)
    idx = np.abs(b).argmax(axis=-1)
    mx = np.take_along_axis(b, idx[..., None], axis=-1)[..., 0]
    d = mx / -8.0
    inv = np.divide(1.0, d, out=np.zeros_like(d), where=d != 0)
    xi = np.minimum(15, (b * inv[..., None] + 8.5).astype(np.int8)).astype(np.uint8)
    qs = xi[..., :QK // 2] | (xi[..., QK // 2:] << 4)
    out = np.empty((rows, n // QK), dtype=[("d", "<f2"), ("qs", "u1", QK // 2)])
    out["d"], out["qs"] = d.astype(np.float16), qs
    return out.tobytes()


def encode(w, kind):
    """(ggml type, bytes) of tensor w in file type kind; 1-D tensors stay F32."""
    if w.ndim == 1 or kind == "f32":
        return GGML["f32"], np.ascontiguousarray(w, dtype="<f4").tobytes()
    if kind == "f16":
        return GGML["f16"], np.ascontiguousarray(w, dtype="<f2").tobytes()
    if w.shape[1] % QK:
        raise SystemExit(f"a row of {w.shape[1]} values is not a multiple of {QK}: no {kind} for it")
    return GGML[kind], (q8_0(w) if kind == "q8_0" else q4_0(w))


class Writer:
    def __init__(self):
        self.kv, self.n_kv, self.tensors = bytearray(), 0, []

    @staticmethod
    def _str(s):
        b = s.encode("utf-8")
        return struct.pack("<Q", len(b)) + b

    def add(self, key, vtype, value):
        self.n_kv += 1
        self.kv += self._str(key) + struct.pack("<I", vtype)
        self.kv += self._value(vtype, value)

    def _value(self, vtype, v):
        if vtype == T_UINT32:
            return struct.pack("<I", v)
        if vtype == T_INT32:
            return struct.pack("<i", v)
        if vtype == T_FLOAT32:
            return struct.pack("<f", v)
        if vtype == T_BOOL:
            return struct.pack("<B", 1 if v else 0)
        if vtype == T_STRING:
            return self._str(v)
        raise ValueError(vtype)

    def add_array(self, key, etype, values):
        self.n_kv += 1
        self.kv += self._str(key) + struct.pack("<IIQ", T_ARRAY, etype, len(values))
        if etype == T_FLOAT32:
            self.kv += np.asarray(values, "<f4").tobytes()
        elif etype == T_INT32:
            self.kv += np.asarray(values, "<i4").tobytes()
        else:
            self.kv += b"".join(self._value(etype, v) for v in values)

    def tensor(self, name, w, kind):
        t, data = encode(w, kind)
        self.tensors.append((name, tuple(reversed(w.shape)), t, data))  # ne0 first

    def write(self, path):
        infos, offset = bytearray(), 0
        for name, ne, t, data in self.tensors:
            infos += self._str(name) + struct.pack("<I", len(ne)) + struct.pack(f"<{len(ne)}Q", *ne)
            infos += struct.pack("<IQ", t, offset)
            offset += (len(data) + ALIGN - 1) // ALIGN * ALIGN
        head = struct.pack("<IIQQ", GGUF_MAGIC, GGUF_VERSION, len(self.tensors), self.n_kv) + self.kv + infos
        tmp = path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(head)
            f.write(b"\0" * (-len(head) % ALIGN))
            for _, _, _, data in self.tensors:
                f.write(data)
                f.write(b"\0" * (-len(data) % ALIGN))
        os.replace(tmp, path)


def vocab(tok_json):
    m = tok_json["model"]
    if m.get("type") != "BPE" or not m.get("byte_fallback"):
        raise SystemExit("tokenizer.json: only a sentencepiece-style BPE with byte_fallback (Llama-2's) is understood")
    v = m["vocab"]
    tokens = [None] * len(v)
    for t, i in v.items():
        tokens[i] = t
    rank = {}
    for r, mg in enumerate(m["merges"]):
        a, b = mg.split(" ", 1) if isinstance(mg, str) else mg
        rank.setdefault(a + b, r)
    special = {a["id"] for a in tok_json.get("added_tokens", []) if a.get("special")}
    scores, types = [], []
    for i, t in enumerate(tokens):
        scores.append(-float(rank[t]) if t in rank else -float(len(m["merges"]) + i))
        if t == m.get("unk_token"):
            types.append(TOK_UNKNOWN)
        elif i in special:
            types.append(TOK_CONTROL)
        elif len(t) == 6 and t.startswith("<0x") and t.endswith(">"):
            types.append(TOK_BYTE)
        else:
            types.append(TOK_NORMAL)
    return tokens, scores, types


def convert(model_dir, out, kind):
    cfg = json.load(open(os.path.join(model_dir, "config.json")))
    tok = json.load(open(os.path.join(model_dir, "tokenizer.json")))
    tok_cfg_path = os.path.join(model_dir, "tokenizer_config.json")
    tok_cfg = json.load(open(tok_cfg_path)) if os.path.exists(tok_cfg_path) else {}
    m = onnx.load(os.path.join(model_dir, "model.onnx"))
    w = {i.name: numpy_helper.to_array(i).astype(np.float32) for i in m.graph.initializer}
    layers, hidden = cfg["num_hidden_layers"], cfg["hidden_size"]
    heads, kv_heads = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    head_dim = cfg.get("head_dim", hidden // heads)
    need = ["embed", "final_norm", "lm_head"] + [f"l{i}.{n}" for i in range(layers) for n in
                                                 ("in_norm", "wq", "wk", "wv", "wo", "post_norm", "w_gate", "w_up", "w_down")]
    missing = [n for n in need if n not in w]
    if missing:
        raise SystemExit(f"{model_dir}/model.onnx: not a gen_llm_model.py decoder (no initializer {missing[0]})")
    tokens, scores, types = vocab(tok)

    g = Writer()
    g.add("general.architecture", T_STRING, "llama")
    g.add("general.name", T_STRING, os.path.basename(os.path.abspath(model_dir)))
    g.add("general.file_type", T_UINT32, FILE_TYPE[kind])
    g.add("general.quantization_version", T_UINT32, 2)
    g.add("llama.context_length", T_UINT32, cfg["max_position_embeddings"])
    g.add("llama.embedding_length", T_UINT32, hidden)
    g.add("llama.block_count", T_UINT32, layers)
    g.add("llama.feed_forward_length", T_UINT32, cfg["intermediate_size"])
    g.add("llama.rope.dimension_count", T_UINT32, head_dim)
    g.add("llama.attention.head_count", T_UINT32, heads)
    g.add("llama.attention.head_count_kv", T_UINT32, kv_heads)
    g.add("llama.attention.key_length", T_UINT32, head_dim)
    g.add("llama.attention.value_length", T_UINT32, head_dim)
    g.add("llama.attention.layer_norm_rms_epsilon", T_FLOAT32, cfg["rms_norm_eps"])
    g.add("llama.rope.freq_base", T_FLOAT32, cfg["rope_theta"])
    g.add("llama.vocab_size", T_UINT32, len(tokens))
    g.add("tokenizer.ggml.model", T_STRING, "llama")
    g.add_array("tokenizer.ggml.tokens", T_STRING, tokens)
    g.add_array("tokenizer.ggml.scores", T_FLOAT32, scores)
    g.add_array("tokenizer.ggml.token_type", T_INT32, types)
    g.add("tokenizer.ggml.bos_token_id", T_UINT32, cfg.get("bos_token_id", 1))
    g.add("tokenizer.ggml.eos_token_id", T_UINT32, cfg.get("eos_token_id", 2))
    g.add("tokenizer.ggml.unknown_token_id", T_UINT32, tokens.index(tok["model"].get("unk_token", "<unk>")))
    g.add("tokenizer.ggml.add_bos_token", T_BOOL, tok_cfg.get("add_bos_token", True))
    g.add("tokenizer.ggml.add_eos_token", T_BOOL, tok_cfg.get("add_eos_token", False))

    g.tensor("token_embd.weight", w["embed"], kind)
    for i in range(layers):
        p, b = f"l{i}.", f"blk.{i}."
        g.tensor(b + "attn_norm.weight", w[p + "in_norm"], kind)
        g.tensor(b + "attn_q.weight", permute(w[p + "wq"].T, heads), kind)
        g.tensor(b + "attn_k.weight", permute(w[p + "wk"].T, kv_heads), kind)
        g.tensor(b + "attn_v.weight", w[p + "wv"].T, kind)
        g.tensor(b + "attn_output.weight", w[p + "wo"].T, kind)
        g.tensor(b + "ffn_norm.weight", w[p + "post_norm"], kind)
        g.tensor(b + "ffn_gate.weight", w[p + "w_gate"].T, kind)
        g.tensor(b + "ffn_up.weight", w[p + "w_up"].T, kind)
        g.tensor(b + "ffn_down.weight", w[p + "w_down"].T, kind)
    g.tensor("output_norm.weight", w["final_norm"], kind)
    g.tensor("output.weight", w["lm_head"].T, kind)
    g.write(out)


def main(argv):
    args = list(argv[1:])
    kind = "f32"
    if "--type" in args:
        i = args.index("--type")
        kind = args[i + 1] if i + 1 < len(args) else ""
        del args[i:i + 2]
    if args in (["-h"], ["--help"]):
        print(__doc__)
        return 0
    if len(args) != 2 or kind not in GGML:
        print(__doc__, file=sys.stderr)
        return 64
    convert(args[0], args[1], kind)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
