#!/usr/bin/env bash
# Brings up the local stack on the shipped demo model (models/demo) and a tiny LLM, after
# installing and building whatever is missing: tierrouter on :9000 in front of a "GPU" pool of
# two tierserve workers (:8001, :8002) and a CPU pool of one (:8003). Ctrl-C stops it all.
#
# The LLM, served as "chat" on /v1, is the tests' tiny decoder (tests/models/gen_llm_model.py:
# 2 layers, Llama-2's tokenizer and chat template, fixed RANDOM weights), written into the
# run's folder at start: it shows the /v1 API, streaming, batching and the dashboard's LLM
# cards, and what it writes is gibberish. docs/llm.md says how to serve a real model.
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
  rm -rf "$RUN/models" # the generated LLM (18 MB); the logs stay
  echo "[demo] stopped; logs were in $RUN" >&2
}
trap cleanup EXIT INT TERM

# the workers' repository: the shipped demo model beside the tiny LLM (numpy, onnx and the
# tokenizer in tests/llm/node_modules come from setup.sh)
mkdir -p "$RUN/models"
ln -s "$PWD/models/demo" "$RUN/models/demo"
/usr/bin/python3 tests/models/gen_llm_model.py "$RUN/models/chat/1" >"$RUN/gen-llm.log" 2>&1 ||
  { cat "$RUN/gen-llm.log" >&2; echo "[demo] writing the tiny LLM failed" >&2; exit 1; }
# its tokenizer_config.json has no chat template: give it Llama-2-chat's, as the tests do
/usr/bin/python3 - "$RUN/models/chat/1/tokenizer_config.json" tests/llm/chat_templates/llama2-chat.jinja <<'PY'
import json, sys
cfg = json.load(open(sys.argv[1]))
cfg["chat_template"] = open(sys.argv[2]).read()
json.dump(cfg, open(sys.argv[1], "w"))
PY

worker() { # name port mode
  EXECUTION_MODE=$3 TIERSERVE_MODEL_REPOSITORY=$RUN/models TIERSERVE_HTTP_ADDRESS=127.0.0.1 \
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
    -e "s/^address: 0.0.0.0 /address: 127.0.0.1 /" \
    -e "s/^\( *\)- {name: demo, serve: demo}/&\n\1- {name: chat, serve: chat}/" \
    -e "/^slo_ttft_ms:/,/^ *batch:/{s/^  urgent: 0 /  urgent: 500 /;s/^  normal: 0 /  normal: 2000 /}" \
    -e "/^slo_itl_ms:/,/^ *batch:/{s/^  urgent: 0 /  urgent: 100 /;s/^  normal: 0 /  normal: 250 /}" \
    config/router.sample.yaml > "$RUN/router.yaml"
build/bin/tierrouter --config "$RUN/router.yaml" 2>"$RUN/router.log" &
PIDS+=($!)

for port in 9000 8001 8002 8003; do
  for _ in $(seq 1 300); do
    curl -sf "localhost:$port/v2/health/ready" >/dev/null 2>&1 && break
    sleep 0.1
  done
done
echo "[demo] stack up: router http://127.0.0.1:9000, workers :8001 :8002 (GPU pool, $MODE) :8003 (CPU pool)" >&2
for port in 8001 8002 8003; do
  /usr/bin/python3 - "$port" <<'PY' >&2
import json, sys, urllib.request
st = json.load(urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/v2/status"))
llm = " ".join(f"llm {m['name']}: kv_cache={m['llm']['kv_cache']}" for m in st["models"] if m.get("llm"))
print(f"[demo]   :{sys.argv[1]} tier={st['tier']} degraded={st['degraded']} active={st['active_provider']} {llm}")
PY
done
cat >&2 <<TXT
[demo] the dashboard (every pool and worker, live): http://127.0.0.1:9000/dashboard
[demo] the router's view (pools, backends, stage):  curl -s localhost:9000/admin/status
[demo] an inference through the router:
[demo]   curl -s -XPOST localhost:9000/v2/models/demo/infer -H 'X-Priority: urgent' \\
[demo]     -d '{"inputs":[{"name":"input","datatype":"FP32","shape":[1,4],"data":[5.1,3.5,1.4,0.2]}]}'
[demo] an LLM chat, streamed, through the router (model "chat": the tests' tiny decoder with
[demo] random weights, so the words are gibberish; the API, streaming and the dashboard's LLM
[demo] cards are real):
[demo]   curl -sN localhost:9000/v1/chat/completions -H 'Content-Type: application/json' \\
[demo]     -d '{"model":"chat","messages":[{"role":"user","content":"Hello!"}],"max_tokens":32,"stream":true}'
[demo] the models /v1 serves: curl -s localhost:9000/v1/models
TXT
if [ "$MODE" != cpu ]; then
  echo "[demo] GPU pool workers in auto on a box without a GPU report tier cpu-fallback (degraded):" >&2
  echo "[demo] the router does not count them as GPU capacity (min_tier cuda) and sends all" >&2
  echo "[demo] traffic to the CPU pool. GPU_POOL_MODE=cpu scripts/run-demo.sh to watch the policy." >&2
fi
wait
