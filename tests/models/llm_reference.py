#!/usr/bin/python3
"""The tiny Llama-style decoder of gen_llm_model.py in numpy, with a KV cache: greedy decode.

Usage:  /usr/bin/python3 tests/models/llm_reference.py MODELDIR PROMPTS.json N [PRESENCE FREQUENCY]
        /usr/bin/python3 tests/models/llm_reference.py --logprobs K MODELDIR PROMPTS.json N
        /usr/bin/python3 tests/models/llm_reference.py --count-prompt MODELDIR PROMPTS.json N PRESENCE FREQUENCY

With --logprobs K the object also holds "logprobs": per prompt, per greedy step, {"token":
id, "logprob": the chosen id's log-softmax, "top": [[id, logprob], ...] the K best, logprob
descending, the lower id first on a tie}: the log-softmax of the model's own logits row,
computed in float64 from the float32 logits (max-subtracted), before any penalty. With
penalties each step also has "penalised": the chosen id's log-softmax after the penalties
(the wrong view for logprobs; tests use it to show their input tells the two apart).

PROMPTS.json is a list of prompts, each a list of token ids. PRESENCE and FREQUENCY are the
OpenAI penalties (default 0): before each greedy choice, every token t generated c(t) > 0
times so far (the prompt does not count) loses c(t) * FREQUENCY + PRESENCE from its logit,
computed in float64 and rounded once to float32 (the worker's rule). --count-prompt applies
the wrong rule instead (the prompt's tokens counted too): tests use it only to show that their
prompt tells the two rules apart. Prints one JSON object:
{"tokens": [[N ids or fewer: stops after EOS], ...], "min_margin": m, "position_ids": bool
(the graph's variant)}, where min_margin is
the smallest gap between the best and the second-best logit over every greedy choice (a
check that float rounding between two implementations cannot flip a choice).

The weights come from MODELDIR/model.onnx's initializers (FP32 or FP16: computed in FP32
either way), so this checks the graph, not the generator's random numbers. Nothing here is
shared with the C side but the file.

Both variants of gen_llm_model.py are handled: with position_ids (the worker passes each
sequence's own positions) and --no-position-ids (the graph takes past length + arange).
Each prompt runs alone here, where the two agree: positions past .. past + S - 1. That is
what the worker must reproduce, batched or not.
"""
import json
import os
import re
import sys

import numpy as np
import onnx
from onnx import numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_llm_model as spec  # noqa: E402  (sizes only)


def load(model_dir):
    """The weights, and whether the graph takes position_ids (else it derives them). A model
    that `tierserve quantize` rewrote is read back through its MatMulNBits nodes: each B
    dequantized here (dequantize_nbits), so the reference computes with exactly the weights
    the quantized file holds."""
    m = onnx.load(os.path.join(model_dir, "model.onnx"))
    inits = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
    w = {k: v.astype(np.float32) for k, v in inits.items() if k in _NAMES}
    w.update({k: v for k, v in dequantize_nbits(m, inits).items() if k in _NAMES})
    missing = _NAMES - set(w)
    if missing:
        raise SystemExit(f"{model_dir}/model.onnx is not gen_llm_model.py's model: no {sorted(missing)}")
    return w, any(i.name == "position_ids" for i in m.graph.input)


def dequantize_nbits(m, inits):
    """{the original B's name: B [K, N] float32} for every com.microsoft MatMulNBits node, read
    as ONNX Runtime's ContribOperators.md lays it out: codes uint8 [N, n_blocks, blob], low
    bits first along K; scales [N * n_blocks]; optional zero points packed per row the same
    way, else 2^(bits-1); a weight is (code - zero point) * scale. The name is the codes'
    initializer's without `tierserve quantize`'s "_Q4" / "_Q8" suffix. Written from the
    documented layout, not from the C code."""
    out = {}
    for n in m.graph.node:
        if n.op_type != "MatMulNBits":
            continue
        a = {x.name: x.i for x in n.attribute}
        K, N, bits, bs = a["K"], a["N"], a["bits"], a["block_size"]
        codes = inits[n.input[1]].astype(np.int32)
        nb = codes.shape[1]
        if bits == 4:
            q = np.empty((N, nb, bs), np.int32)
            q[..., 0::2], q[..., 1::2] = codes & 15, codes >> 4
        else:
            q = codes
        if len(n.input) > 3 and n.input[3]:
            zp = inits[n.input[3]].astype(np.int32).reshape(N, -1)
            if bits == 4:
                z = np.empty((N, zp.shape[1] * 2), np.int32)
                z[:, 0::2], z[:, 1::2] = zp & 15, zp >> 4
                zp = z
            zp = zp[:, :nb]
        else:
            zp = np.full((N, nb), 1 << (bits - 1), np.int32)
        scales = inits[n.input[2]].astype(np.float32).reshape(N, nb)
        wt = ((q - zp[..., None]).astype(np.float32) * scales[..., None]).reshape(N, nb * bs)[:, :K]
        out[re.sub(r"_Q[48](_[0-9]+)?$", "", n.input[1])] = np.ascontiguousarray(wt.T)
    return out


_NAMES = {"embed", "final_norm", "lm_head", "inv_freq"} | {
    f"l{i}.{n}" for i in range(spec.LAYERS)
    for n in ("in_norm", "wq", "wk", "wv", "wo", "post_norm", "w_gate", "w_up", "w_down")}


def rmsnorm(x, w):
    var = np.mean(x * x, axis=-1, keepdims=True) + np.float32(spec.RMS_EPS)
    return (x * (np.float32(1.0) / np.sqrt(var))) * w


def rope(x, pos, inv_freq):  # x [h, S, D], pos [S]
    freqs = pos.astype(np.float32)[:, None] * inv_freq[None, :]
    emb = np.concatenate([freqs, freqs], axis=-1)
    cos, sin = np.cos(emb), np.sin(emb)
    half = spec.HEAD_DIM // 2
    rot = np.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    return x * cos + rot * sin


class Model:
    def __init__(self, model_dir):
        self.w, self.position_ids = load(model_dir)

    def forward(self, ids, cache):
        """ids: the new token ids; cache: per layer [k, v], each [KV, past, D] (appended to).
        Returns the logits of every new position, [S, V]."""
        w, D = self.w, spec.HEAD_DIM
        past = cache[0][0].shape[1]
        S = len(ids)
        # one sequence, no padding: its own positions (given or derived from the past's
        # length, the same numbers)
        pos = np.arange(past, past + S)
        h = w["embed"][np.asarray(ids)]
        rep = spec.HEADS // spec.KV_HEADS
        for i in range(spec.LAYERS):
            p = f"l{i}."
            x = rmsnorm(h, w[p + "in_norm"])
            q = (x @ w[p + "wq"]).reshape(S, spec.HEADS, D).transpose(1, 0, 2)
            k = (x @ w[p + "wk"]).reshape(S, spec.KV_HEADS, D).transpose(1, 0, 2)
            v = (x @ w[p + "wv"]).reshape(S, spec.KV_HEADS, D).transpose(1, 0, 2)
            q, k = rope(q, pos, w["inv_freq"]), rope(k, pos, w["inv_freq"])
            cache[i][0] = np.concatenate([cache[i][0], k], axis=1)
            cache[i][1] = np.concatenate([cache[i][1], v], axis=1)
            kk = np.repeat(cache[i][0], rep, axis=0)  # [H, T, D]: query head j uses KV head j // rep
            vv = np.repeat(cache[i][1], rep, axis=0)
            scores = (q @ kk.transpose(0, 2, 1)) * np.float32(1.0 / np.sqrt(D))
            T = past + S
            causal = np.arange(T)[None, :] <= (np.arange(S) + past)[:, None]
            scores = np.where(causal[None], scores, np.float32(-np.inf))
            scores = scores - scores.max(axis=-1, keepdims=True)
            e = np.exp(scores)
            probs = e / e.sum(axis=-1, keepdims=True)
            ctx = (probs @ vv).transpose(1, 0, 2).reshape(S, spec.HEADS * D)
            h = h + ctx @ w[p + "wo"]
            x = rmsnorm(h, w[p + "post_norm"])
            gate = x @ w[p + "w_gate"]
            act = gate * (np.float32(1.0) / (np.float32(1.0) + np.exp(-gate)))
            h = h + (act * (x @ w[p + "w_up"])) @ w[p + "w_down"]
        return rmsnorm(h, w["final_norm"]) @ w["lm_head"]

    def greedy(self, prompt, n, eos=spec.EOS, presence=0.0, frequency=0.0, rows=None, count_prompt=False,
               penalised_rows=None):
        cache = [[np.zeros((spec.KV_HEADS, 0, spec.HEAD_DIM), np.float32) for _ in range(2)]
                 for _ in range(spec.LAYERS)]
        out, margin = [], np.inf
        logits = self.forward(prompt, cache)[-1]
        for _ in range(n):
            if rows is not None:
                rows.append(log_softmax(logits))
            logits = penalize(logits, (list(prompt) if count_prompt else []) + out, presence, frequency)
            if penalised_rows is not None:
                penalised_rows.append(log_softmax(logits))
            top2 = np.partition(logits, -2)[-2:]
            margin = min(margin, float(abs(top2[1] - top2[0])))
            tok = int(np.argmax(logits))
            out.append(tok)
            if tok == eos:
                break
            logits = self.forward([tok], cache)[-1]
        return out, margin


def log_softmax(logits):
    """The step's log-softmax in float64, max-subtracted (the worker's rule)."""
    x = logits.astype(np.float64)
    m = x.max()
    return x - (m + np.log(np.exp(x - m).sum()))


def top_k(row, k):
    """The k best ids of row, value descending, the lower id first on a tie."""
    order = np.lexsort((np.arange(len(row)), -row))
    return [[int(i), float(row[i])] for i in order[:k]]


def penalize(logits, generated, presence, frequency):
    """vLLM's presence/frequency penalties over the tokens generated so far (a copy)."""
    if presence == 0 and frequency == 0:
        return logits
    logits = logits.copy()
    ids, counts = np.unique(np.asarray(generated, dtype=np.int64), return_counts=True)
    for t, c in zip(ids, counts):
        logits[t] = np.float32(np.float64(logits[t]) - (float(c) * frequency + presence))
    return logits


def main(argv):
    k, count_prompt = None, False
    if len(argv) > 1 and argv[1] == "--count-prompt":
        count_prompt = True
        argv = argv[:1] + argv[2:]
    if len(argv) > 2 and argv[1] == "--logprobs":
        k = int(argv[2])
        argv = argv[:1] + argv[3:]
    if len(argv) not in (4, 6):
        print(__doc__, file=sys.stderr)
        return 64
    model = Model(argv[1])
    with open(argv[2]) as f:
        prompts = json.load(f)
    presence, frequency = (float(argv[4]), float(argv[5])) if len(argv) == 6 else (0.0, 0.0)
    tokens, margin, lps = [], np.inf, []
    for p in prompts:
        rows = [] if k is not None else None
        prows = [] if k is not None else None
        t, m = model.greedy(p, int(argv[3]), presence=presence, frequency=frequency, rows=rows, penalised_rows=prows,
                            count_prompt=count_prompt)
        tokens.append(t)
        margin = min(margin, m)
        if rows is not None:
            lps.append([{"token": tok, "logprob": float(row[tok]), "top": top_k(row, k)}
                        | ({"penalised": float(prow[tok])} if presence or frequency else {})
                        for tok, row, prow in zip(t, rows, prows)])
    res = {"tokens": tokens, "min_margin": margin, "position_ids": model.position_ids}
    if k is not None:
        res["logprobs"] = lps
    print(json.dumps(res))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
