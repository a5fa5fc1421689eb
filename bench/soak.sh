#!/usr/bin/env bash
# The soak benchmark (not a test; minutes to hours): bench/soak.py says what it runs and prints.
#   bench/soak.sh [--seconds 1800] [--warmup 120] [--concurrency 8] [--no-llm] [--bin DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
exec nice -n 10 /usr/bin/python3 bench/soak.py "$@"
