#!/usr/bin/env bash
# User-space instructions per proxied request (valgrind's callgrind), tierrouter (this build and
# optionally a baseline) against nginx, all in front of bench_fixedreply under bench_loadgen at
# c=C, in one run. Instruction counts barely move with the machine's load, so this is the
# figure to compare on a shared box; throughput and p99 need bench/proxy_compare.sh on a
# quiet one. Each proxy is counted over a SECS window after a one-second warm-up (pooled
# connections open); the count includes the loop's own work, amortised over the window, and
# is divided by the requests the proxy itself began in it (its calls of rt_on_request or
# ngx_http_process_request). The loop's share per request still moves a little with load
# (fewer requests per epoll_wait on a busier box): compare figures from one run. Not a test.
#   [BASE=/path/to/baseline/build/bin] [NEW=build/bin] [C=16] [SECS=4] bench/proxy_instr.sh
# CGOPTS: more callgrind options (e.g. --dump-instr=yes); KEEP=DIR keeps each proxy's
# callgrind file there (DIR/cg-WHO.out) for callgrind_annotate.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
NEW=${NEW:-$PWD/build/bin}; SECS=${SECS:-4}; C=${C:-16}
command -v valgrind >/dev/null || { echo "proxy_instr: valgrind is needed" >&2; exit 2; }
T=$(mktemp -d); cd $T
echo '{"inputs":[{"name":"x","datatype":"FP32","shape":[1],"data":[1.0]}]}' > body.json
$NEW/bench_fixedreply 18871 '{"live":true,"ready":true,"tier":"cpu","queue_depth":0,"models":[]}' & FR=$!
. "$HERE/nginx_conf.sh"
nginx_conf $T 18871 18872
printf 'address: 127.0.0.1\nport: 18872\nprobe_interval_ms: 250\npools:\n  - name: cpu\n    kind: cpu\n    min_tier: cpu\n    max_in_flight: 256\n    backends: ["127.0.0.1:18871"]\n' > router.yaml
# calls FN FILE: how many times FN was called in callgrind's FILE (summed over its call sites)
calls() {
  awk -v fn="$1" '/^c?fn=\(/ { id = $1; sub(/^c?fn=/, "", id); if (NF > 1) name[id] = $2; nm = name[id]; if ($0 ~ /^cfn=/) cur = nm }
    /^calls=/ { split($0, a, /[= ]/); if (cur == fn) n += a[2] } END { print n + 0 }' "$2"
}
# count WHO FN CMD...: prints the instructions per request of the proxy CMD starts on port
# 18872, the requests being FN's calls in the window (the proxy's own count: bench_loadgen's
# leaves out the requests in flight at either end of its window)
count() {
  local who=$1 fn=$2; shift 2
  valgrind --tool=callgrind ${CGOPTS:-} --callgrind-out-file=$T/cg-$who.out "$@" 2> $who.log & local pid=$!
  for _ in $(seq 120); do
    $NEW/bench_loadgen 127.0.0.1 18872 /v2/models/demo/infer body.json -1 1 0.2 2>/dev/null | grep -q '"requests":[1-9]' && break
    sleep 0.5
  done
  $NEW/bench_loadgen 127.0.0.1 18872 /v2/models/demo/infer body.json -1 $C 1 > /dev/null
  callgrind_control -z $pid > /dev/null 2>&1
  local out; out=$($NEW/bench_loadgen 127.0.0.1 18872 /v2/models/demo/infer body.json -1 $C $SECS)
  callgrind_control -d $pid > /dev/null 2>&1; sleep 1
  local n f ir
  f=$(ls -S $T/cg-$who.out* | head -1)
  n=$(calls $fn "$f")
  ir=$(callgrind_annotate "$f" 2>/dev/null | grep -m1 "PROGRAM TOTALS" | tr -d , | awk '{print $1}')
  kill $pid; wait $pid 2>/dev/null
  [ -n "${KEEP:-}" ] && cp "$f" "$KEEP/cg-$who.out"
  rm -f $T/cg-$who.out*
  awk -v w=$who -v n="$n" -v ir="$ir" 'BEGIN { printf "%-12s %8d requests  %8.0f instructions per request\n", w, n, ir / n }' >&2
  awk -v n="$n" -v ir="$ir" 'BEGIN { printf "%.0f", ir / n }'
}
i_nginx=$(count nginx ngx_http_process_request /usr/sbin/nginx -c $T/nginx/nginx.conf -p $T/nginx)
i_new=$(count router-new rt_on_request $NEW/tierrouter --config router.yaml)
line="c=$C: router/nginx instructions per request x$(awk -v a=$i_new -v b=$i_nginx 'BEGIN { printf "%.2f", a / b }')"
if [ -n "${BASE:-}" ]; then
  i_base=$(count router-base rt_on_request $BASE/tierrouter --config router.yaml)
  line="$line; new/base x$(awk -v a=$i_new -v b=$i_base 'BEGIN { printf "%.2f", a / b }') (base/nginx x$(awk -v a=$i_base -v b=$i_nginx 'BEGIN { printf "%.2f", a / b }'))"
fi
echo "$line"
kill $FR; wait 2>/dev/null
rm -rf $T
