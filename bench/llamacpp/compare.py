#!/usr/bin/python3
"""tierserve against llama.cpp on the same decoder, in one run (bench/llamacpp/run.sh; not a test).

Usage:  /usr/bin/python3 bench/llamacpp/compare.py --onnx DIR --gguf-dir DIR [--model DIR]
            [--types f32,f16,q8_0] [--threads 1,2] [--quick] [--bin BUILD_BIN]

--onnx DIR      the FP32 (or FP16) decoder gen_llm_model.py wrote; onnx2gguf.py made the GGUF
                files in --gguf-dir (model-<type>.gguf) from it.
--model DIR     what tierserve serves instead of --onnx (the hook for `tierserve quantize`'s
                INT8/INT4 folders): the correctness check then reports agreement instead of
                requiring identity (another weight format answers differently), and the ratios
                name the llama.cpp type the weights compare with (Q8_0 for INT8, Q4_0 for INT4).
--types         the GGUF types llama.cpp runs (the rows of the table).
--threads       llama.cpp thread counts tried at c=1 per type; the best one serves c=8 and c=16.
--perf          perf record (Debian's linux-perf) tierserve during each throughput row and print
                where its CPU time went (by library, then by symbol); the figures then carry
                perf's overhead.

Steps, each printed as it goes:
1. Tokenization: llama.cpp's ids of every text used below against @huggingface/tokenizers' (the
   tokenizer tierserve's is golden-tested against); a difference stops the run.
2. Correctness: the first 16 greedy tokens of llama.cpp F32 (flash attention off: its CPU kernel
   rounds Q to F16, which flips near-ties) against tierserve's /v1/completions at temperature 0
   on 3 prompts, and with llama.cpp's default flash attention for information; a mismatch on
   the FP32 model stops the run before any speed figure.
3. Throughput: 128-token prompts (distinct: no prefix is shared), 64 new tokens (ignore_eos),
   at c = 1, 8, 16: tierserve over HTTP with its defaults (c client threads), llama.cpp with c
   parallel sequences in one context (its batched decoding). tokens/s = generated / wall.
4. Conversation: 3 conversations, each a ~400-token history and 3 turns (scripted answers, so
   both sides see the same text); each turn re-sends everything. TTFT of turns 1 and 3:
   tierserve streaming (its prefix cache on, as by default; cached_tokens from the final usage
   chunk), llama.cpp with one sequence keeping the KV of the common prefix.
5. The table, and the issue's targets as ratios measured here.
"""
import argparse
import http.client
import json
import os
import pathlib
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]
PEER = HERE / "peer.mjs"
NEW_TOKENS = 64
PROMPT_TOKENS = 128
HISTORY_TOKENS = 400
CHECK_PROMPTS = ["Once upon a time", "The capital of France is", "def fibonacci(n):"]
CHECK_N = 16


def log(*a):
    print(*a, flush=True)


# ---------------------------------------------------------------- llama.cpp (peer.mjs)

def peer(job, timeout=900):
    env = dict(os.environ, NODE_LLAMA_CPP_SKIP_DOWNLOAD="true")
    r = subprocess.run(["node", str(PEER)], input=json.dumps(job), capture_output=True, text=True,
                       timeout=timeout, env=env)
    if r.returncode != 0:
        sys.exit(f"llama.cpp peer failed ({job['cmd']}):\n{r.stderr[-3000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------- tierserve over HTTP

class Worker:
    def __init__(self, binary, model_dir, tmp):
        self.repo = tmp / "repo"
        v = self.repo / "llm" / "1"
        v.mkdir(parents=True)
        for f in pathlib.Path(model_dir).iterdir():
            (v / f.name).symlink_to(f.resolve())
        self.log = tmp / "tierserve.log"
        env = dict(os.environ, EXECUTION_MODE="cpu", TIERSERVE_HTTP_ADDRESS="127.0.0.1", TIERSERVE_HTTP_PORT="0")
        with open(self.log, "wb") as lf:
            self.proc = subprocess.Popen([str(binary), f"--model-repository={self.repo}"], stdout=lf,
                                         stderr=subprocess.STDOUT, env=env)
        self.port = None
        deadline = time.time() + 600
        while time.time() < deadline:
            text = self.log.read_text(errors="replace")
            m = re.search(r'"msg":"listening on [^"]*:(\d+)"', text)
            if m:
                self.port = int(m.group(1))
            if self.port and "server ready" in text:
                return
            if self.proc.poll() is not None:
                sys.exit(f"tierserve exited with {self.proc.returncode}:\n{text[-3000:]}")
            time.sleep(0.1)
        self.stop()
        sys.exit("tierserve did not become ready in 600 s")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()

    def complete(self, body, timeout=600):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        c.request("POST", "/v1/completions", json.dumps(dict(body, model="llm")),
                  {"Content-Type": "application/json"})
        r = c.getresponse()
        data = r.read()
        c.close()
        if r.status != 200:
            sys.exit(f"tierserve answered {r.status}: {data[:500]!r}")
        return json.loads(data)

    def stream_ttft(self, body, timeout=600):
        """(ms to the first token's chunk, cached_tokens, prompt_tokens) of one streamed request."""
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        t0 = time.perf_counter()
        c.request("POST", "/v1/completions",
                  json.dumps(dict(body, model="llm", stream=True, stream_options={"include_usage": True})),
                  {"Content-Type": "application/json"})
        r = c.getresponse()
        if r.status != 200:
            sys.exit(f"tierserve answered {r.status}: {r.read()[:500]!r}")
        ttft, usage = None, None
        for raw in r:
            line = raw.decode().strip()
            if not line.startswith("data:") or line == "data: [DONE]":
                continue
            ev = json.loads(line[5:])
            if ttft is None and ev.get("choices"):
                ttft = (time.perf_counter() - t0) * 1000
            if ev.get("usage"):
                usage = ev["usage"]
        c.close()
        cached = ((usage or {}).get("prompt_tokens_details") or {}).get("cached_tokens")
        return ttft, cached, (usage or {}).get("prompt_tokens")


def tierserve_bench(w, texts, c):
    """c client threads sending texts (each once); generated tokens / wall seconds."""
    todo = list(texts)
    lock = threading.Lock()
    gen = [0]

    def run():
        while True:
            with lock:
                if not todo:
                    return
                t = todo.pop(0)
            r = w.complete({"prompt": t, "max_tokens": NEW_TOKENS, "temperature": 0, "ignore_eos": True})
            with lock:
                gen[0] += r["usage"]["completion_tokens"]

    th = [threading.Thread(target=run) for _ in range(c)]
    t0 = time.perf_counter()
    for t in th:
        t.start()
    for t in th:
        t.join()
    s = time.perf_counter() - t0
    return {"generated": gen[0], "seconds": s, "tokens_per_s": gen[0] / s}


def perf_start(pid, out):
    p = subprocess.Popen(["perf", "record", "-q", "-F", "499", "-g", "-p", str(pid), "-o", str(out)],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.5)  # perf attaches before the load starts
    return p


def perf_report(p, data, what):
    """Where tierserve's CPU time went: by library, then the top symbols (self time)."""
    p.send_signal(signal.SIGINT)
    p.wait(60)
    for sort, n in (("dso", 8), ("dso,sym", 25)):
        r = subprocess.run(["perf", "report", "-i", str(data), "--no-children", "--sort", sort, "--stdio",
                            "--percent-limit", "0.5"], capture_output=True, text=True, timeout=300)
        lines = [ln for ln in r.stdout.splitlines() if ln.strip() and not ln.startswith("#") and "%" in ln
                 and not ln.lstrip().startswith(("|", "-", "--"))]
        log(f"[llamacpp] perf, {what}, by {sort}:")
        for ln in lines[:n]:
            log("    " + ln.strip())


# ---------------------------------------------------------------- texts

def one_token_words(onnx_dir, gguf):
    """Lower-case words that are one "▁word" piece of the vocabulary and that llama.cpp
    tokenizes alone as one token: texts of n such words are n tokens (+ BOS)."""
    vocab = json.load(open(pathlib.Path(onnx_dir) / "tokenizer.json"))["model"]["vocab"]
    cands = sorted(t[1:] for t in vocab if re.fullmatch("▁[a-z]{3,8}", t))
    random.Random(7).shuffle(cands)
    cands = cands[:1500]
    ids = peer({"cmd": "tokens", "gguf": gguf, "threads": 1, "texts": [" ".join(cands)]})["result"]["llama"][0]
    if len(ids) != len(cands) + 1:
        sys.exit(f"the word list does not tokenize one token per word ({len(ids) - 1} for {len(cands)})")
    return cands


def words(rng, pool, n):
    return " ".join(rng.choice(pool) for _ in range(n))


def make_texts(pool, quick):
    rng = random.Random(25)
    n_bench = {1: 2 if quick else 4, 8: 8 if quick else 16, 16: 16 if quick else 32}
    bench = {c: [words(rng, pool, PROMPT_TOKENS - 1) for _ in range(n)] for c, n in n_bench.items()}
    convs = []
    for _ in range(2 if quick else 3):
        hist = "Support chat log. " + words(rng, pool, HISTORY_TOKENS - 8)
        turns, text = [], hist
        for k in range(3):
            text += f"\nUser: {words(rng, pool, 12)}\nAssistant:"
            turns.append(text)
            text += " " + words(rng, pool, 24)  # the answer the client re-sends next turn
        convs.append(turns)
    return bench, convs


# ---------------------------------------------------------------- main

def med(xs):
    return statistics.median(xs) if xs else float("nan")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--onnx", required=True)
    ap.add_argument("--gguf-dir", required=True)
    ap.add_argument("--model", help="the folder tierserve serves instead of --onnx (INT8/INT4 from tierserve quantize)")
    ap.add_argument("--types", default="f32,f16,q8_0")
    ap.add_argument("--threads", default=",".join(str(t) for t in sorted({1, os.cpu_count() or 1})))
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--perf", action="store_true", help="perf record tierserve during its throughput rows")
    ap.add_argument("--bin", default=str(ROOT / "build" / "bin"))
    a = ap.parse_args()
    types = a.types.split(",")
    threads = [int(t) for t in a.threads.split(",")]
    gguf = {t: str(pathlib.Path(a.gguf_dir) / f"model-{t}.gguf") for t in types}
    if "f32" not in gguf:
        gguf["f32"] = str(pathlib.Path(a.gguf_dir) / "model-f32.gguf")
    served = a.model or a.onnx
    exact = a.model is None
    log(f"[llamacpp] host: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f} at start")
    log(f"[llamacpp] tierserve serves {served}; llama.cpp runs {', '.join(types)} of {a.onnx}")

    pool = one_token_words(a.onnx, gguf["f32"])
    bench_texts, convs = make_texts(pool, a.quick)

    # 1. tokenization
    all_texts = CHECK_PROMPTS + [t for ts in bench_texts.values() for t in ts] + [t for c in convs for t in c]
    tk = peer({"cmd": "tokens", "gguf": gguf["f32"], "threads": 1, "tokenizer_dir": a.onnx, "texts": all_texts})["result"]
    if tk["hf"] is None:
        log("[llamacpp] tokenization: @huggingface/tokenizers not found in tests/llm/node_modules: not compared")
    else:
        same = sum(x == y for x, y in zip(tk["llama"], tk["hf"]))
        log(f"[llamacpp] tokenization: llama.cpp's ids equal @huggingface/tokenizers' on {same}/{len(all_texts)} texts")
        if same != len(all_texts):
            sys.exit("tokenization differs: fix the GGUF vocabulary before comparing anything")
    lens = {len(ids) for ids in tk["llama"][len(CHECK_PROMPTS):len(CHECK_PROMPTS) + sum(map(len, bench_texts.values()))]}
    log(f"[llamacpp] bench prompts: {sorted(lens)} tokens; conversation turns: "
        f"{[len(tk['llama'][all_texts.index(t)]) for t in convs[0]]} tokens")

    tmp = pathlib.Path(tempfile.mkdtemp(prefix="llamacpp-bench-"))
    w = Worker(pathlib.Path(a.bin) / "tierserve", served, tmp)
    rows = {}
    try:
        # 2. correctness
        ts_out = [w.complete({"prompt": p, "max_tokens": CHECK_N, "temperature": 0, "ignore_eos": True})
                  for p in CHECK_PROMPTS]
        ts_text = [r["choices"][0]["text"] for r in ts_out]
        for fa in (False, None):
            job = {"cmd": "greedy", "gguf": gguf["f32"], "threads": 1, "n": CHECK_N, "texts": CHECK_PROMPTS}
            if fa is not None:
                job["flash_attention"] = fa
            lc = peer(job)["result"]
            same = [x["text"].lstrip(" ") == y.lstrip(" ") for x, y in zip(lc, ts_text)]
            what = "flash attention off" if fa is False else "llama.cpp's default flash attention"
            log(f"[llamacpp] greedy {CHECK_N} tokens, llama.cpp F32 ({what}) vs tierserve: "
                f"{sum(same)}/{len(same)} prompts identical")
            for p, x, y, s in zip(CHECK_PROMPTS, lc, ts_text, same):
                if not s:
                    log(f"    {p!r}: llama.cpp {x['text']!r}\n    {' ' * len(repr(p))}  tierserve {y!r}")
            if fa is False and not all(same):
                if exact:
                    sys.exit("llama.cpp F32 and tierserve disagree on the same weights: find why before any speed figure")
                log("[llamacpp] (tierserve serves other weights: agreement is informative only)")

        # 3. throughput
        w.complete({"prompt": bench_texts[1][0], "max_tokens": 4, "temperature": 0})  # warm
        rows["tierserve"] = {}
        for c in (1, 8, 16):
            prof = perf_start(w.proc.pid, tmp / f"perf-c{c}.data") if a.perf else None
            rows["tierserve"][c] = tierserve_bench(w, bench_texts[c], c)
            if prof:
                perf_report(prof, tmp / f"perf-c{c}.data", f"tierserve c={c}")
        log("[llamacpp] tierserve tokens/s: " + ", ".join(f"c={c} {r['tokens_per_s']:.0f}" for c, r in rows["tierserve"].items()))
        best_threads = {}
        for t in types:
            per = {}
            for n in threads:
                per[n] = peer({"cmd": "bench", "gguf": gguf[t], "threads": n, "concurrency": 1,
                               "new_tokens": NEW_TOKENS, "texts": bench_texts[1]})["result"]
            n = max(per, key=lambda k: per[k]["tokens_per_s"])
            best_threads[t] = n
            row = {1: per[n]}
            for c in (8, 16):
                row[c] = peer({"cmd": "bench", "gguf": gguf[t], "threads": n, "concurrency": c,
                               "new_tokens": NEW_TOKENS, "texts": bench_texts[c]})["result"]
            rows[f"llama.cpp {t.upper()}"] = row
            log(f"[llamacpp] llama.cpp {t.upper()} c=1 by threads: "
                + ", ".join(f"{k}: {v['tokens_per_s']:.0f}" for k, v in per.items())
                + f"; at {n}: c=8 {row[8]['tokens_per_s']:.0f}, c=16 {row[16]['tokens_per_s']:.0f}")

        # 4. conversation
        ts_conv = []
        for turns in convs:
            ts_conv.append([w.stream_ttft({"prompt": t, "max_tokens": 16, "temperature": 0, "ignore_eos": True})
                            for t in turns])
        lc_conv = {}
        for t in types:
            lc_conv[t] = peer({"cmd": "chat", "gguf": gguf[t], "threads": best_threads[t], "new_tokens": 16,
                               "conversations": convs})["result"]
    finally:
        w.stop()
        shutil.rmtree(tmp, ignore_errors=True)

    # 5. tables and ratios
    label = "tierserve over HTTP, defaults" + ("" if exact else f" ({pathlib.Path(served).name})")
    log("")
    log("| | c=1 tokens/s | c=8 | c=16 |")
    log("|---|---|---|---|")
    for name, row in rows.items():
        shown = label if name == "tierserve" else f"{name}, {best_threads[name.split()[-1].lower()]} threads"
        log(f"| {shown} | " + " | ".join(f"{row[c]['tokens_per_s']:.0f}" for c in (1, 8, 16)) + " |")
    log("")
    log(f"Conversation ({HISTORY_TOKENS}-token history, 3 turns, {len(convs)} conversations; median TTFT):")
    log("| | TTFT turn 1 ms | TTFT turn 3 ms | reused on turn 3 |")
    log("|---|---|---|---|")
    ts1 = med([c[0][0] for c in ts_conv])
    ts3 = med([c[2][0] for c in ts_conv])
    cached3 = med([c[2][1] or 0 for c in ts_conv])
    p3 = med([c[2][2] or 0 for c in ts_conv])
    log(f"| {label} (prefix cache) | {ts1:.1f} | {ts3:.1f} | {cached3:.0f} of {p3:.0f} tokens (cached_tokens) |")
    lc3 = {}
    for t, res in lc_conv.items():
        l1, l3 = med([c[0]["ttft_ms"] for c in res]), med([c[2]["ttft_ms"] for c in res])
        lc3[t] = l3
        kept = med([c[2]["kept_tokens"] for c in res])
        pt = med([c[2]["prompt_tokens"] for c in res])
        log(f"| llama.cpp {t.upper()} keeping the prefix's KV, {best_threads[t]} threads | {l1:.1f} | {l3:.1f} | "
            f"{kept:.0f} of {pt:.0f} tokens |")

    log("")
    log("Targets (issue 25), ratios measured in this run:")
    lc_names = [n for n in rows if n != "tierserve"]
    best1 = max(lc_names, key=lambda n: rows[n][1]["tokens_per_s"])
    best16 = max(lc_names, key=lambda n: rows[n][16]["tokens_per_s"])
    r1 = rows["tierserve"][1]["tokens_per_s"] / rows[best1][1]["tokens_per_s"]
    r16 = rows["tierserve"][16]["tokens_per_s"] / rows[best16][16]["tokens_per_s"]
    best_t3 = min(lc3, key=lc3.get)
    verdict = lambda ok: "met" if ok else "NOT met"  # noqa: E731
    log(f"- c=1 tokens/s vs llama.cpp's best ({best1}): {r1:.2f}x (target >= 1): {verdict(r1 >= 1)}")
    log(f"- c=16 tokens/s vs llama.cpp's best ({best16}): {r16:.2f}x (target >= 3): {verdict(r16 >= 3)}")
    log(f"- turn-3 TTFT vs llama.cpp {best_t3.upper()} with its prefix kept: tierserve/llama.cpp = "
        f"{ts3 / lc3[best_t3]:.2f} (target <= 1): {verdict(ts3 <= lc3[best_t3])}")
    log(f"- turn-3 TTFT vs tierserve's turn 1: {ts1 / ts3:.2f}x better (target >= 4): {verdict(ts1 / ts3 >= 4)}")
    log(f"[llamacpp] load average {os.getloadavg()[0]:.2f} at the end (2-core host shared with other work: "
        "figures are noisy when it is above the core count)")


if __name__ == "__main__":
    main()
