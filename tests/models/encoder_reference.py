"""The tiny encoder of gen_encoder_model.py in numpy, read from the initializers of a written
model.onnx: what /v1/embeddings must answer, to 1e-5.

  ref = EncoderReference(model_dir)
  ref.tokenize("Reset my password")      # BERT's WordPiece on ASCII text: [CLS] ... [SEP]
  ref.embed([ids, ...])                  # one vector per id list, each run alone (no padding)

tokenize() covers what the tests send (ASCII, lowercased, split at whitespace and punctuation,
greedy longest-match WordPiece); the worker's tokenizer is golden-tested against Hugging Face's
on the same pipeline."""
import json
import os

import numpy as np
import onnx
from onnx import numpy_helper

PUNCT = set("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")


class EncoderReference:
    def __init__(self, d):
        m = onnx.load(os.path.join(d, "model.onnx"))
        self.w = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}
        self.inputs = [i.name for i in m.graph.input]
        self.layers = sum(1 for k in self.w if k.endswith(".wq"))
        self.hidden = self.w["word"].shape[1]
        self.heads = 4
        tok = json.load(open(os.path.join(d, "tokenizer.json")))
        self.vocab = tok["model"]["vocab"]
        pool = json.load(open(os.path.join(d, "1_Pooling", "config.json")))
        self.pooling = ("cls" if pool["pooling_mode_cls_token"] else
                        "lasttoken" if pool.get("pooling_mode_lasttoken") else "mean")
        mods = json.load(open(os.path.join(d, "modules.json")))
        self.normalize = any(x["type"].endswith("Normalize") for x in mods)
        self.pooled_output = m.graph.output[0].name == "sentence_embedding"

    def tokenize(self, text):
        words, cur = [], ""
        for c in text.lower():
            if c.isspace() or c in PUNCT:
                if cur:
                    words.append(cur)
                cur = ""
                if c in PUNCT:
                    words.append(c)
            else:
                cur += c
        if cur:
            words.append(cur)
        ids = [self.vocab["[CLS]"]]
        for w in words:
            start, pieces = 0, []
            while start < len(w):
                end = len(w)
                while end > start:
                    sub = w[start:end] if start == 0 else "##" + w[start:end]
                    if sub in self.vocab:
                        pieces.append(self.vocab[sub])
                        break
                    end -= 1
                if end == start:
                    pieces = [self.vocab["[UNK]"]]
                    break
                start = end
            ids += pieces
        return ids + [self.vocab["[SEP]"]]

    @staticmethod
    def _ln(x, g, b, eps=1e-12):
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return (x - mu) / np.sqrt(var + eps) * g + b

    def hidden_states(self, ids):
        w = self.w
        ids = np.asarray(ids, np.int64)
        x = w["word"][ids] + w["pos"][np.arange(len(ids))]
        if "token_type_ids" in self.inputs:
            x = x + w["type"][np.zeros(len(ids), np.int64)]
        x = self._ln(x.astype(np.float64), w["emb_ln_g"], w["emb_ln_b"])
        S, H, h = len(ids), self.hidden, self.heads
        d = H // h
        for i in range(self.layers):
            p = f"l{i}."
            q, k, v = ((x @ w[p + "w" + n] + w[p + "b" + n]).reshape(S, h, d).transpose(1, 0, 2) for n in "qkv")
            s = q @ k.transpose(0, 2, 1) / np.sqrt(d)
            s = np.exp(s - s.max(-1, keepdims=True))
            a = (s / s.sum(-1, keepdims=True)) @ v
            a = a.transpose(1, 0, 2).reshape(S, H)
            x = self._ln(x + a @ w[p + "wo"] + w[p + "bo"], w[p + "ln1_g"], w[p + "ln1_b"])
            f = x @ w[p + "w1"] + w[p + "b1"]
            from math import erf
            f = 0.5 * f * (1.0 + np.vectorize(erf)(f / np.sqrt(2.0)))
            x = self._ln(x + f @ w[p + "w2"] + w[p + "b2"], w[p + "ln2_g"], w[p + "ln2_b"])
        return x

    def embed_one(self, ids):
        x = self.hidden_states(ids)
        if self.pooled_output or self.pooling == "mean":
            v = x.mean(0)
        elif self.pooling == "cls":
            v = x[0]
        else:
            v = x[-1]
        if self.normalize:
            v = v / max(np.linalg.norm(v), 1e-12)
        return v.astype(np.float32)

    def embed(self, id_lists):
        return [self.embed_one(ids) for ids in id_lists]
