#!/usr/bin/env bash
# Brings up a tierserve worker on the shipped demo model (models/demo), after installing
# and building whatever is missing. Ctrl-C (SIGTERM/SIGINT) drains and stops it.
#
#   scripts/run-demo.sh                   EXECUTION_MODE=auto on port 8000
#   EXECUTION_MODE=cpu scripts/run-demo.sh
#   TIERSERVE_HTTP_PORT=9000 scripts/run-demo.sh
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
export TIERSERVE_MODEL_REPOSITORY=${TIERSERVE_MODEL_REPOSITORY:-$PWD/models}
export TIERSERVE_HTTP_PORT=${TIERSERVE_HTTP_PORT:-8000}
cat >&2 <<TXT
[demo] tierserve on http://127.0.0.1:$TIERSERVE_HTTP_PORT  (EXECUTION_MODE=${EXECUTION_MODE:-auto})
[demo] try:  curl -s localhost:$TIERSERVE_HTTP_PORT/v2/status
[demo]       curl -s -XPOST localhost:$TIERSERVE_HTTP_PORT/v2/models/demo/infer \\
[demo]         -d '{"inputs":[{"name":"input","datatype":"FP32","shape":[1,4],"data":[5.1,3.5,1.4,0.2]}]}'
[demo] On a box without a GPU, auto mode honestly resolves to tier cpu-fallback (degraded);
[demo] EXECUTION_MODE=cpu runs the CPU tier on purpose.
TXT
exec build/bin/tierserve "$@"
