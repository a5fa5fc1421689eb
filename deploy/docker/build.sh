#!/usr/bin/env bash
# Builds the images of one or more profiles with podman (or docker), from the repository
# root as the build context and the local ONNX Runtime SDK as the `ort` build context.
#
#   deploy/docker/build.sh cpu                 tierserve-worker:cpu, tierserve-router, tierserve-prometheus
#   deploy/docker/build.sh tensorrt            tierserve-worker:tensorrt (needs nvidia/cuda + TensorRT bases)
#   deploy/docker/build.sh jetson              tierserve-worker:jetson (arm64, JetPack base, an arm64 ORT)
#
# ORT_ROOT           the x86-64 SDK directory (include/, lib/); default: the path in .ort_root
# ORT_ROOT_JETSON    the aarch64 SDK built for JetPack (jetson only; Dockerfile.jetson says how)
# TIERSERVE_BASE_IMAGE  a Debian 12 image for the cpu profile; default with podman: the local
#                    debootstrap base (deploy/docker/base.sh makes it when it is missing),
#                    with docker: debian:bookworm-slim
# CONTAINER_ENGINE   podman (default) or docker
# Prints each image's build time and size.
set -euo pipefail
cd "$(dirname "$0")/../.."

ENGINE=${CONTAINER_ENGINE:-podman}
ORT=${ORT_ROOT:-$(cat .ort_root 2>/dev/null || true)}
log() { printf '[build] %s\n' "$*" >&2; }

[ $# -ge 1 ] || { echo "usage: $0 cpu|tensorrt|jetson..." >&2; exit 64; }

need_sdk() { # need_sdk DIR VARIABLE
  [ -n "$1" ] && [ -f "$1/include/onnxruntime_c_api.h" ] && [ -f "$1/lib/libonnxruntime.so.1" ] || {
    log "no ONNX Runtime SDK at '$1': set $2 (or run scripts/setup.sh)"; exit 64; }
}

build() { # build ORT_DIR TAG DOCKERFILE TARGET|"" [extra build args...]
  local ort=$1 tag=$2 file=$3 target=$4; shift 4
  local args=(build -f "$file" -t "$tag" --build-context "ort=$ort")
  # podman writes OCI images by default, which have no HEALTHCHECK or STOPSIGNAL
  [ "$ENGINE" = podman ] && args+=(--format docker --layers)
  [ -n "$target" ] && args+=(--target "$target")
  local t0=$SECONDS
  log "$tag <- $file${target:+ (target $target)}"
  "$ENGINE" "${args[@]}" "$@" . >>"${BUILD_LOG:-/dev/stderr}" 2>&1 || {
    [ -n "${BUILD_LOG:-}" ] && tail -40 "$BUILD_LOG" >&2; log "FAILED: $tag"; return 1; }
  log "$tag built in $((SECONDS - t0)) s, $("$ENGINE" image inspect -f '{{.Size}}' "$tag" | awk '{printf "%.1f MB", $1/1e6}')"
}

for profile in "$@"; do
  case $profile in
    cpu)
      need_sdk "$ORT" ORT_ROOT
      base=${TIERSERVE_BASE_IMAGE:-}
      # docker: the registry's Debian image; podman: the local debootstrap base, which needs
      # no registry
      [ -z "$base" ] && [ "$ENGINE" = docker ] && base=docker.io/library/debian:bookworm-slim
      if [ -z "$base" ]; then
        deploy/docker/base.sh
        base=localhost/tierserve-base:bookworm
      fi
      build "$ORT" tierserve-worker:cpu deploy/docker/Dockerfile worker --build-arg "BASE=$base"
      build "$ORT" tierserve-router:latest deploy/docker/Dockerfile router --build-arg "BASE=$base"
      build "$ORT" tierserve-prometheus:latest deploy/docker/Dockerfile.prometheus "" --build-arg "BASE=$base"
      ;;
    tensorrt)
      need_sdk "$ORT" ORT_ROOT
      [ -f "$ORT/lib/libonnxruntime_providers_tensorrt.so" ] || {
        log "$ORT has no GPU providers: the tensorrt image needs lib/libonnxruntime_providers_*.so"; exit 64; }
      build "$ORT" tierserve-worker:tensorrt deploy/docker/Dockerfile.tensorrt "" ;;
    jetson)
      need_sdk "${ORT_ROOT_JETSON:-}" ORT_ROOT_JETSON
      build "$ORT_ROOT_JETSON" tierserve-worker:jetson deploy/docker/Dockerfile.jetson "" --platform linux/arm64 ;;
    *) log "unknown profile '$profile' (cpu, tensorrt, jetson)"; exit 64 ;;
  esac
done
