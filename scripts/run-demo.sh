#!/usr/bin/env bash
# Brings up the local stack on the shipped demo model (models/demo), after installing and
# building whatever is missing: tierrouter on :9000 in front of a "GPU" pool of two
# tierserve workers (:8001, :8002) and a CPU pool of one (:8003). Ctrl-C stops it all.
#
#   scripts/run-demo.sh                    GPU pool workers in EXECUTION_MODE=auto
#   GPU_POOL_MODE=cpu scripts/run-demo.sh  GPU pool workers on the CPU tier, counted as GPU
#                                          capacity, so the hybrid policy has a pool to shift
#                                          traffic away from (what to use on a box without GPU)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
MODE=${GPU_POOL_MODE:-auto}
RUN=$(mktemp -d /tmp/tierserve-demo.XXXXXX)
PIDS=()
cleanup() {
  trap - EXIT INT TERM
  for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  echo "[demo] stopped; logs were in $RUN" >&2
}
trap cleanup EXIT INT TERM

worker() { # name port mode
  EXECUTION_MODE=$3 TIERSERVE_MODEL_REPOSITORY=$PWD/models TIERSERVE_HTTP_ADDRESS=127.0.0.1 \
    TIERSERVE_HTTP_PORT=$2 build/bin/tierserve 2>"$RUN/$1.log" &
  PIDS+=($!)
}
worker gpu-1 8001 "$MODE"
worker gpu-2 8002 "$MODE"
worker cpu-1 8003 cpu

# on a box without a GPU, auto workers honestly run tier cpu-fallback; the GPU pool then
# only counts them as GPU capacity when they were started on the CPU tier on purpose
MIN_TIER=cuda
[ "$MODE" = cpu ] && MIN_TIER=cpu
sed -e "s/backends: \[\"127.0.0.1:8001\"\]/backends: [\"127.0.0.1:8001\", \"127.0.0.1:8002\"]/" \
    -e "s/backends: \[\"127.0.0.1:8002\"\]/backends: [\"127.0.0.1:8003\"]/" \
    -e "s/min_tier: cuda /min_tier: $MIN_TIER /" \
    -e "s/^address: 0.0.0.0 /address: 127.0.0.1 /" config/router.sample.yaml > "$RUN/router.yaml"
build/bin/tierrouter --config "$RUN/router.yaml" 2>"$RUN/router.log" &
PIDS+=($!)

for _ in $(seq 1 100); do
  curl -sf localhost:9000/v2/health/ready >/dev/null 2>&1 && break
  sleep 0.1
done
echo "[demo] stack up: router http://127.0.0.1:9000, workers :8001 :8002 (GPU pool, $MODE) :8003 (CPU pool)" >&2
for port in 8001 8002 8003; do
  /usr/bin/python3 - "$port" <<'PY' >&2
import json, sys, urllib.request
st = json.load(urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/v2/status"))
print(f"[demo]   :{sys.argv[1]} tier={st['tier']} degraded={st['degraded']} active={st['active_provider']}")
PY
done
cat >&2 <<TXT
[demo] the dashboard (every pool and worker, live): http://127.0.0.1:9000/dashboard
[demo] the router's view (pools, backends, stage):  curl -s localhost:9000/admin/status
[demo] an inference through the router:
[demo]   curl -s -XPOST localhost:9000/v2/models/demo/infer -H 'X-Priority: urgent' \\
[demo]     -d '{"inputs":[{"name":"input","datatype":"FP32","shape":[1,4],"data":[5.1,3.5,1.4,0.2]}]}'
TXT
if [ "$MODE" != cpu ]; then
  echo "[demo] GPU pool workers in auto on a box without a GPU report tier cpu-fallback (degraded):" >&2
  echo "[demo] the router does not count them as GPU capacity (min_tier cuda) and sends all" >&2
  echo "[demo] traffic to the CPU pool. GPU_POOL_MODE=cpu scripts/run-demo.sh to watch the policy." >&2
fi
wait
