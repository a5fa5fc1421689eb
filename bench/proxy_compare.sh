#!/usr/bin/env bash
# tierrouter (this build, and a baseline build) and nginx as plain proxies in front of
# bench_fixedreply, measured with bench_loadgen at c=1 and c=16 in one run. Not a test.
#   BASE=/path/to/baseline/build/bin [NEW=build/bin] [SECS=5] [REPS=1] bench/proxy_compare.sh
# nginx: Debian nginx-light, one worker, upstream keepalive; everything on loopback.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
NEW=${NEW:-$PWD/build/bin}; BASE=${BASE:?set BASE to a baseline build bin folder}; T=$(mktemp -d); SECS=${SECS:-5}
cd $T
echo '{"inputs":[{"name":"x","datatype":"FP32","shape":[1],"data":[1.0]}]}' > body.json
# the status makes the router's probe find a ready worker (and the replies echo X-Request-Id)
$NEW/bench_fixedreply 18801 '{"live":true,"ready":true,"tier":"cpu","queue_depth":0,"models":[]}' & FR=$!
for v in new base; do
  port=$([ $v = new ] && echo 18802 || echo 18803)
  printf 'address: 127.0.0.1\nport: %s\nprobe_interval_ms: 250\npools:\n  - name: cpu\n    kind: cpu\n    min_tier: cpu\n    max_in_flight: 256\n    backends: ["127.0.0.1:18801"]\n' $port > router-$v.yaml
done
$NEW/tierrouter --config router-new.yaml 2> router-new.log & RN=$!
$BASE/tierrouter --config router-base.yaml 2> router-base.log & RB=$!
. "$HERE/nginx_conf.sh"
nginx_conf $T 18801 18804
/usr/sbin/nginx -c $T/nginx/nginx.conf -p $T/nginx & NX=$!
sleep 1.5
# REPS rounds, each one interleaved (direct, nginx, base, new at c=1 then c=16), so drift on a
# shared box hits all four alike; each round prints the new router's ratios against nginx
# (throughput, and added p99 over direct's p99) and against the baseline build.
num() { echo "$1" | sed -n "s/.*\"$2\": *\([0-9.]*\).*/\1/p"; }
for rep in $(seq 1 ${REPS:-1}); do
  for c in 1 16; do
    for t in "direct 18801" "nginx 18804" "router-base 18803" "router-new 18802"; do
      set -- $t
      out=$($NEW/bench_loadgen 127.0.0.1 $2 /v2/models/demo/infer body.json -1 $c $SECS)
      printf '%-12s c=%-2s %s\n' $1 $c "$out"
      eval "tp_${1//-/_}=$(num "$out" throughput); p99_${1//-/_}=$(num "$out" p99_us)"
    done
    awk -v c=$c -v r=$rep -v td=$tp_direct -v tn=$tp_nginx -v tb=$tp_router_base -v tr=$tp_router_new \
        -v pd=$p99_direct -v pn=$p99_nginx -v pb=$p99_router_base -v pr=$p99_router_new 'BEGIN {
      printf "round %d c=%d: new/nginx throughput x%.3f, added p99 new %+.0f us vs nginx %+.0f us (x%.2f); new/base throughput x%.3f, added p99 base %+.0f us\n",
        r, c, tr / tn, pr - pd, pn - pd, ((pn - pd) > 0 ? (pr - pd) / (pn - pd) : 0), tr / tb, pb - pd }'
  done
done
kill $RN $RB $NX $FR; wait 2>/dev/null
