#!/usr/bin/env bash
# The serving benchmark (not a test): builds what is missing, then bench/bench.py.
#   bench/run.sh [--seconds S] [--quick]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec /usr/bin/python3 bench/bench.py "$@"
