#!/usr/bin/env bash
# tierrouter (this build, and a baseline build) and nginx as plain proxies in front of
# bench_fixedreply, measured with bench_loadgen at c=1 and c=16 in one run. Not a test.
#   BASE=/path/to/baseline/build/bin [NEW=build/bin] [SECS=2] [REPS=7] [CS="1 16"] bench/proxy_compare.sh
# nginx: Debian nginx-light, one worker, upstream keepalive; everything on loopback.
# A run is REPS short rounds, the proxies interleaved inside each (the order reversed every
# other round, so neither side always follows the other); each round prints its figures, and
# the run ends with the median of each ratio over its rounds per c (the run's statistic: one
# round hit by a neighbour's burst moves a mean, not a median).
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
NEW=${NEW:-$PWD/build/bin}; BASE=${BASE:?set BASE to a baseline build bin folder}; T=$(mktemp -d); SECS=${SECS:-2}
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
# REPS rounds, each one interleaved (direct, nginx, base, new at each c; reversed in even
# rounds), so drift on a shared box hits all four alike; each round prints the new router's
# ratios against nginx (throughput, and added p99 over direct's p99) and against the
# baseline build, and appends them to ratios.txt for the medians.
num() { echo "$1" | sed -n "s/.*\"$2\": *\([0-9.]*\).*/\1/p"; }
ORDER="direct:18801 nginx:18804 router-base:18803 router-new:18802"
for rep in $(seq 1 ${REPS:-7}); do
  order=$ORDER
  [ $((rep % 2)) -eq 0 ] && order=$(echo $ORDER | tr ' ' '\n' | tac | tr '\n' ' ')
  for c in ${CS:-1 16}; do
    for t in $order; do
      who=${t%%:*}; port=${t##*:}
      out=$($NEW/bench_loadgen 127.0.0.1 $port /v2/models/demo/infer body.json -1 $c $SECS)
      printf '%-12s c=%-2s %s\n' $who $c "$out"
      eval "tp_${who//-/_}=$(num "$out" throughput); p99_${who//-/_}=$(num "$out" p99_us)"
    done
    awk -v c=$c -v r=$rep -v td=$tp_direct -v tn=$tp_nginx -v tb=$tp_router_base -v tr=$tp_router_new \
        -v pd=$p99_direct -v pn=$p99_nginx -v pb=$p99_router_base -v pr=$p99_router_new -v f=ratios.txt 'BEGIN {
      ap = ((pn - pd) > 0 ? (pr - pd) / (pn - pd) : 0)
      printf "round %d c=%d: new/nginx throughput x%.3f, added p99 new %+.0f us vs nginx %+.0f us (x%.2f); new/base throughput x%.3f, added p99 base %+.0f us\n",
        r, c, tr / tn, pr - pd, pn - pd, ap, tr / tb, pb - pd
      # c, new/nginx throughput, new/nginx added p99 (ratio, and both in us), new/base throughput
      printf "%d %.6f %.6f %.1f %.1f %.6f\n", c, tr / tn, ap, pr - pd, pn - pd, tr / tb >> f }'
  done
done
# the run's statistic: per c, the median over the rounds of each ratio (and how many rounds
# the router was at or past nginx on each count)
for c in ${CS:-1 16}; do
  awk -v c=$c '$1 == c { n++; tp[n] = $2; ap[n] = $3; an[n] = $4; ag[n] = $5; tb[n] = $6
                         if ($2 >= 1) wtp++; if ($4 <= $5) wp++ }
    function med(a, n,   i, j, t) { for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j-1] > a[j]; j--) { t = a[j]; a[j] = a[j-1]; a[j-1] = t }
                                   return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
    END { if (!n) exit
      printf "median of %d rounds c=%d: new/nginx throughput x%.3f, added p99 new %+.0f us vs nginx %+.0f us (x%.2f); new/base throughput x%.3f; rounds at or past nginx: throughput %d/%d, added p99 %d/%d\n",
        n, c, med(tp, n), med(an, n), med(ag, n), med(ap, n), med(tb, n), wtp, n, wp, n }' ratios.txt
done
kill $RN $RB $NX $FR; wait 2>/dev/null
rm -rf $T
