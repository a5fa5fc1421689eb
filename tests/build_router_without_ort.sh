#!/usr/bin/env bash
# The router must build on a machine with no ONNX Runtime: configure a copy of the sources
# (no .ort_root, no ORT_ROOT in the environment), build tierrouter and tierbench, and check that the
# configure step said the worker was skipped and that the binary needs no libonnxruntime.
#   tests/build_router_without_ort.sh <source dir> <scratch dir>
set -euo pipefail
src=$1 out=$2
rm -rf "$out"
mkdir -p "$out/src"
# node_modules (the npm test packages, 400+ MB) play no part in building
tar -C "$src" --exclude=node_modules -cf - CMakeLists.txt src tests bench tools web | tar -C "$out/src" -xf -
log=$out/configure.log
env -u ORT_ROOT cmake -S "$out/src" -B "$out/build" >"$log" 2>&1 || { cat "$log"; exit 1; }
grep -q "the worker (tierserve) is skipped" "$log" || { echo "configure did not say the worker was skipped:"; cat "$log"; exit 1; }
env -u ORT_ROOT cmake --build "$out/build" -j"$(nproc)" --target tierrouter tierbench >"$out/build.log" 2>&1 \
  || { tail -50 "$out/build.log"; exit 1; }
bin=$out/build/bin/tierrouter
[ -x "$bin" ] || { echo "no tierrouter was built"; exit 1; }
if readelf -d "$bin" | grep -i onnxruntime; then echo "tierrouter links ONNX Runtime"; exit 1; fi
# tierbench too (docs/architecture.md): the simulator links the policy, never the engine
if readelf -d "$out/build/bin/tierbench" | grep -i onnxruntime; then echo "tierbench links ONNX Runtime"; exit 1; fi
if [ -e "$out/build/bin/tierserve" ]; then echo "tierserve was built without ONNX Runtime?"; exit 1; fi
"$bin" --help >/dev/null 2>&1 || true
echo "tierrouter built without ONNX Runtime: $(stat -c %s "$bin") bytes, needs: $(readelf -d "$bin" | grep -o 'Shared library: \[[^]]*\]' | sed 's/Shared library: //' | tr '\n' ' ')"
