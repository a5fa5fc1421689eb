#!/usr/bin/env bash
# The serving benchmark (not a test): builds what is missing, then bench/bench.py.
#   bench/run.sh [--seconds S] [--quick] [--layout] [--old BIN_DIR]   (bench/bench.py says what each does)
# nginx-light is the proxy the router's rows are held against; it is installed here, the way
# scripts/setup.sh installs Debian packages, when missing. scripts/setup.sh runs only when
# the build is missing (it installs, fetches ORT and builds); otherwise the build is brought
# up to date.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! dpkg-query -W -f='${Status}' nginx-light 2>/dev/null | grep -q 'install ok installed'; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "[bench] installing Debian package nginx-light" >&2
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends nginx-light
fi
if [ -f .ort_root ] && [ -x build/bin/tierserve ] && [ -x build/bin/tierrouter ]; then
  cmake --build build -j"$(nproc)" >/dev/null
else
  scripts/setup.sh
fi
exec /usr/bin/python3 bench/bench.py "$@"
