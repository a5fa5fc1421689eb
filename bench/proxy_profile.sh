#!/usr/bin/env bash
# Where a proxied request's time goes: the router (and nginx, for comparison) in front of
# bench_fixedreply under bench_loadgen, with `strace -c -f` (syscalls per request) and
# `perf stat` (CPU, context switches and, through the syscall tracepoints, system calls per
# request) attached to the proxy alone. Not a test.
#   [BIN=build/bin] [BASE=other/build/bin] [C=16] [SECS=4] [WHO="router nginx"] bench/proxy_profile.sh
# WHO may also name "base": the router of the BASE build. Per-request figures divide by the
# requests bench_loadgen counted in the same window. Attaching strace slows the proxy a lot
# (40x: every timing inside it, kept-alive connections' idle times included, stretches):
# read its counts for the calls made, and perf's for how many per request at full speed.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
BIN=${BIN:-$PWD/build/bin}; C=${C:-16}; SECS=${SECS:-4}; WHO=${WHO:-router nginx}
T=$(mktemp -d)
cd $T
echo '{"inputs":[{"name":"x","datatype":"FP32","shape":[1],"data":[1.0]}]}' > body.json
$BIN/bench_fixedreply 18811 '{"live":true,"ready":true,"tier":"cpu","queue_depth":0,"models":[]}' & FR=$!
printf 'address: 127.0.0.1\nport: 18812\nprobe_interval_ms: 250\npools:\n  - name: cpu\n    kind: cpu\n    min_tier: cpu\n    max_in_flight: 256\n    backends: ["127.0.0.1:18811"]\n' > router.yaml
$BIN/tierrouter --config router.yaml 2> router.log & RT=$!
RB=
if [ -n "${BASE:-}" ]; then
  sed 's/port: 18812/port: 18813/' router.yaml > router-base.yaml
  $BASE/tierrouter --config router-base.yaml 2> router-base.log & RB=$!
fi
. "$HERE/nginx_conf.sh"
nginx_conf $T 18811 18814
/usr/sbin/nginx -c $T/nginx/nginx.conf -p $T/nginx & NX=$!
sleep 1.5
# warm both (pooled connections open)
$BIN/bench_loadgen 127.0.0.1 18812 /v2/models/demo/infer body.json -1 $C 1 >/dev/null
$BIN/bench_loadgen 127.0.0.1 18814 /v2/models/demo/infer body.json -1 $C 1 >/dev/null
[ -n "$RB" ] && $BIN/bench_loadgen 127.0.0.1 18813 /v2/models/demo/infer body.json -1 $C 1 >/dev/null
SC=raw_syscalls:sys_enter
for s in recvfrom sendmsg sendto writev readv read write epoll_wait epoll_ctl getsockopt; do SC=$SC,syscalls:sys_enter_$s; done
for w in $WHO; do
  case $w in router) pid=$RT; port=18812;; base) pid=$RB; port=18813;; *) pid=$NX; port=18814;; esac
  echo "== $w (pid $pid), c=$C, ${SECS}s"
  # perf stat first (cheap), then strace (slow): two windows, each with its own count
  if command -v perf >/dev/null; then
    perf stat -e task-clock,context-switches,cpu-migrations,page-faults,$SC -p $pid -o perf-$w.txt -- sleep $SECS &
    PS=$!
    out=$($BIN/bench_loadgen 127.0.0.1 $port /v2/models/demo/infer body.json -1 $C $SECS); wait $PS
    n=$(echo "$out" | sed -n 's/.*"requests": *\([0-9]*\).*/\1/p'); echo "perf window: $out"
    awk -v n="$n" '/task-clock/ {gsub(",","",$1); printf "  %-18s %10.2f us per request\n", "cpu (task-clock)", $1*1000/n}
      /context-switches|cpu-migrations|page-faults/ {gsub(",","",$1); printf "  %-18s %10.3f per request\n", $2, $1/n}
      /syscalls:sys_enter/ {gsub(",","",$1); if ($1 > 0) { sub(".*sys_enter_?", "", $2); printf "  %-18s %10.3f per request\n", ($2 == "" ? "syscalls (all)" : $2), $1/n } }' perf-$w.txt
  fi
  strace -c -f -p $pid -o strace-$w.txt & ST=$!; sleep 0.5
  out=$($BIN/bench_loadgen 127.0.0.1 $port /v2/models/demo/infer body.json -1 $C $SECS)
  kill -INT $ST; wait $ST 2>/dev/null
  n=$(echo "$out" | sed -n 's/.*"requests": *\([0-9]*\).*/\1/p'); echo "strace window: $out"
  awk -v n="$n" '$1 ~ /^[0-9.]+$/ && NF>=5 {name=$NF; calls=$4; if (calls !~ /^[0-9]+$/) next; printf "  %-16s %7.3f per request\n", name, calls/n}' strace-$w.txt | sort -k2 -nr
done
kill $RT $NX $FR $RB; wait 2>/dev/null
rm -rf $T
