#!/usr/bin/python3
"""ctest llm_generation: the generation core (src/llm) against numpy on the tiny decoder.

Usage:  /usr/bin/python3 tests/llm/gen_check.py LLM_GEN_CHECK OUTDIR

Generates the test decoder (FP32, FP16, and FP32 without position_ids) under OUTDIR with
tests/models/gen_llm_model.py, runs LLM_GEN_CHECK (tests/llm/llm_gen_check.c: the real
engine, one sequence at a time and batched, plus its own checks of sampling, cancellation,
bounds and a failed step), and requires the greedy tokens of every prompt to equal
tests/models/llm_reference.py's exactly, both ways, with each KV cache path
(TIERSERVE_LLM_KV=host: gathered every step; bound: kept in ORT values). The model without
position_ids derives its positions from the past's length: batched with left padding it
would compute something else, so the engine must step it one sequence per Run() and still
give numpy's tokens for sequences that run concurrently.
"""
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = os.path.join(HERE, "..", "models")
N = 16
PROMPTS = [
    "Hello world",
    "The quick brown fox jumps over the lazy dog",
    "Once upon a time, in a land far away, there lived a",
    "1 2 3",
    "Überraschung: naïve café ☕",
]


KV_MODES = ("host", "bound")


def run(cmd, kv=None, **kw):
    env = dict(os.environ)
    if kv:
        env["TIERSERVE_LLM_KV"] = kv
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env, **kw)


def check_variant(tool, out, model, flags, label):
    """llm_gen_check on one model with both KV paths; its tokens (alone and batched) against
    numpy's on the same file. Returns the number of failures."""
    runs, bad = {}, 0
    for kv in KV_MODES:
        r = run([tool] + flags + [model, str(N)] + PROMPTS, kv)
        sys.stderr.write(r.stderr)
        if r.returncode != 0:
            print(f"{label} (TIERSERVE_LLM_KV={kv}): llm_gen_check exited {r.returncode}")
            bad += 1
        if r.stdout.strip():
            runs[kv] = json.loads(r.stdout)
    if not runs:
        return bad
    got = next(iter(runs.values()))
    prompts = os.path.join(out, f"prompts-{label}.json")
    with open(prompts, "w") as f:
        json.dump(got["prompts"], f)
    ref = run([sys.executable, os.path.join(MODELS, "llm_reference.py"), model, prompts, str(N)])
    assert ref.returncode == 0, ref.stderr
    want = json.loads(ref.stdout)
    if want["position_ids"] != ("--no-position-ids" not in flags):
        print(f"{label}: {model} is not the variant asked for (position_ids {want['position_ids']})")
        bad += 1
    print(f"reference ({label}): smallest gap between the best two logits {want['min_margin']:.4f}")
    for kv, got in runs.items():
        for i, text in enumerate(PROMPTS):
            for how in ("single", "batched"):
                if got[how][i] != want["tokens"][i]:
                    bad += 1
                    print(f"MISMATCH {label} kv={kv} {how} prompt {i} {text!r} ids {got['prompts'][i]}:\n"
                          f"  C:     {got[how][i]}\n  numpy: {want['tokens'][i]}")
    if len(set(t for seq in want["tokens"] for t in seq)) < N:
        print(f"{label}: the reference output is too repetitive to mean anything")
        bad += 1
    return bad


def main(argv):
    tool, out = argv[1], argv[2]
    m32, m16 = os.path.join(out, "tiny-llama"), os.path.join(out, "tiny-llama-fp16")
    mnp = os.path.join(out, "tiny-llama-no-position-ids")
    for d, extra in ((m32, []), (m16, ["--fp16"]), (mnp, ["--no-position-ids"])):
        r = run([sys.executable, os.path.join(MODELS, "gen_llm_model.py"), d] + extra)
        assert r.returncode == 0, r.stderr
    bad = check_variant(tool, out, m32, [], "fp32")
    bad += check_variant(tool, out, mnp, ["--no-position-ids"], "no-position-ids")
    for kv in KV_MODES:
        r = run([tool, "--fp16", m16, "8"] + PROMPTS[:3], kv)
        sys.stderr.write(r.stderr)
        if r.returncode != 0:
            print(f"FP16 (TIERSERVE_LLM_KV={kv}): llm_gen_check exited {r.returncode}")
            bad += 1
        else:
            f16 = json.loads(r.stdout)
            print(f"FP16 greedy (TIERSERVE_LLM_KV={kv}): {f16['single']}")
            if any(len(s) != 8 for s in f16["single"]):
                bad += 1
    print("OK" if bad == 0 else f"{bad} failure(s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
