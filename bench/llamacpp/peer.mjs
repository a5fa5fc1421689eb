// llama.cpp's side of bench/llamacpp/run.sh, through npm's node-llama-cpp and only its prebuilt
// CPU libraries (@node-llama-cpp/linux-x64): never a build, never a download.
//
//   node bench/llamacpp/peer.mjs < JOB.json > RESULT.json
//
// JOB: {"cmd": "tokens"|"greedy"|"bench"|"chat", "gguf": FILE, "threads": N, ...}; the result is
// one JSON object on stdout (llama.cpp's own log goes to stderr, warnings and errors only).
//   tokens {texts}                      llama.cpp's ids of each text (BOS first, as a prompt gets),
//                                       and, when tests/llm has npm's @huggingface/tokenizers,
//                                       its ids for the same text with the same tokenizer.json
//   greedy {texts, n}                   the first n greedy (temperature 0) ids and text of each
//   bench {texts, new_tokens, concurrency}
//                                       `concurrency` parallel sequences in one context (llama.cpp's
//                                       way of serving c streams: one batch per step holding every
//                                       sequence), each text a request of new_tokens tokens (never
//                                       stopping at EOS); requests start as sequences free up.
//                                       Returns generated tokens, seconds, tokens/s
//   chat {conversations: [[turn texts]], new_tokens}
//                                       one sequence per conversation; each turn's whole text is
//                                       re-sent and the sequence keeps the KV of its longest common
//                                       prefix with what it holds (adaptStateToTokens, what
//                                       LlamaChatSession does), so only the new part is evaluated.
//                                       TTFT of each turn: from the turn's text to its first token
import { existsSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const HERE = dirname(fileURLToPath(import.meta.url));
const ROOT = join(HERE, "..", "..");
const PREBUILT = join(HERE, "node_modules", "@node-llama-cpp", "linux-x64", "bins", "linux-x64");

function fail(msg) {
    process.stderr.write(`peer.mjs: ${msg}\n`);
    process.exit(1);
}

// Never let node-llama-cpp fetch llama.cpp's source or compile it: only the prebuilt binary.
process.env.NODE_LLAMA_CPP_SKIP_DOWNLOAD = "true";
if (!existsSync(join(HERE, "node_modules", "node-llama-cpp")))
    fail("node-llama-cpp is not installed: cd bench/llamacpp && npm ci --ignore-scripts --omit=optional");
if (!existsSync(PREBUILT) || !existsSync(join(PREBUILT, "libllama-common.so")))
    fail(`the prebuilt llama.cpp CPU libraries are absent (${PREBUILT}); this benchmark never builds ` +
         "or downloads them: install @node-llama-cpp/linux-x64 from the lock (npm ci --ignore-scripts --omit=optional)");

const { getLlama, LlamaLogLevel } = await import("node-llama-cpp");

const job = JSON.parse(readFileSync(0, "utf8"));
const llama = await getLlama({
    gpu: false, build: "never", usePrebuiltBinaries: true, skipDownload: true, progressLogs: false,
    logLevel: LlamaLogLevel.warn, maxThreads: job.threads ?? 0,
});
if (llama.buildType !== "prebuilt") fail(`node-llama-cpp loaded a ${llama.buildType} binary, not the prebuilt one`);
const model = await llama.loadModel({ modelPath: job.gguf, gpuLayers: 0 });
const bos = model.tokens.bos;

function promptIds(text) {
    const ids = model.tokenize(text);
    return bos != null && ids[0] !== bos ? [bos, ...ids] : ids;
}

async function context(sequences, perSequence) {
    const kv = job.kv_type ? { experimentalKvCacheKeyType: job.kv_type, experimentalKvCacheValueType: job.kv_type } : {};
    return model.createContext({ sequences, contextSize: perSequence, threads: job.threads ?? 0, ...kv,
                                ...(job.flash_attention != null ? { flashAttention: job.flash_attention } : {}) });
}

// The first n greedy tokens after ids on seq, timing the first (TTFT from t0).
async function generate(seq, ids, n, t0) {
    const out = [];
    let ttft = null;
    for await (const t of seq.evaluate(ids, { temperature: 0 })) {
        if (ttft === null) ttft = performance.now() - t0;
        out.push(t);
        if (out.length >= n) break;
    }
    return { out, ttft };
}

async function tokens() {
    let hf = null;
    const hfPath = join(ROOT, "tests", "llm", "node_modules", "@huggingface", "tokenizers", "dist", "tokenizers.mjs");
    const tokDir = job.tokenizer_dir;
    if (existsSync(hfPath) && tokDir) {
        const { Tokenizer } = await import(pathToFileURL(hfPath).href);
        hf = new Tokenizer(JSON.parse(readFileSync(join(tokDir, "tokenizer.json"), "utf8")),
                           JSON.parse(readFileSync(join(tokDir, "tokenizer_config.json"), "utf8")));
    }
    return {
        llama: job.texts.map(promptIds),
        hf: hf ? job.texts.map((t) => hf.encode(t, { add_special_tokens: true }).ids) : null,
    };
}

async function greedy() {
    const ctx = await context(1, 1024);
    const seq = ctx.getSequence();
    const res = [];
    for (const text of job.texts) {
        await seq.clearHistory();
        const { out } = await generate(seq, promptIds(text), job.n, performance.now());
        res.push({ ids: out, text: model.detokenize(out) });
    }
    await ctx.dispose();
    return res;
}

async function bench() {
    const c = job.concurrency;
    const prompts = job.texts.map(promptIds);
    const longest = Math.max(...prompts.map((p) => p.length));
    const ctx = await context(c, longest + job.new_tokens + 16);
    const seqs = Array.from({ length: c }, () => ctx.getSequence());
    await generate(seqs[0], prompts[0].slice(0, 8), 2, performance.now());  // warm: first-call costs out of the timing
    await seqs[0].clearHistory();
    let next = 0, generated = 0;
    const t0 = performance.now();
    await Promise.all(seqs.map(async (seq) => {
        while (next < prompts.length) {
            const ids = prompts[next++];
            await seq.clearHistory();
            const { out } = await generate(seq, ids, job.new_tokens, performance.now());
            generated += out.length;
        }
    }));
    const seconds = (performance.now() - t0) / 1000;
    await ctx.dispose();
    return { requests: prompts.length, concurrency: c, generated, seconds, tokens_per_s: generated / seconds,
             batch_size: ctx.batchSize ?? null };
}

async function chat() {
    const longest = Math.max(...job.conversations.flat().map((t) => promptIds(t).length));
    const ctx = await context(1, longest + job.new_tokens + 64);
    const seq = ctx.getSequence();
    const res = [];
    for (const turns of job.conversations) {
        await seq.clearHistory();
        const conv = [];
        for (const text of turns) {
            const t0 = performance.now();
            const ids = promptIds(text);
            await seq.adaptStateToTokens(ids, false);
            if (seq.nextTokenIndex >= ids.length)  // the whole text is held: evaluate its last token again
                await seq.eraseContextTokenRanges([{ start: ids.length - 1, end: seq.nextTokenIndex }]);
            const kept = seq.nextTokenIndex;
            const { out, ttft } = await generate(seq, ids.slice(kept), job.new_tokens, t0);
            conv.push({ prompt_tokens: ids.length, kept_tokens: kept, ttft_ms: ttft, text: model.detokenize(out) });
        }
        res.push(conv);
    }
    await ctx.dispose();
    return res;
}

const cmds = { tokens, greedy, bench, chat };
if (!cmds[job.cmd]) fail(`unknown cmd ${JSON.stringify(job.cmd)}`);
const result = await cmds[job.cmd]();
process.stdout.write(JSON.stringify({ cmd: job.cmd, gguf: job.gguf, threads: job.threads ?? null,
                                      llama_cpp: llama.llamaCppRelease ?? null, result }) + "\n");
await model.dispose();
await llama.dispose();
