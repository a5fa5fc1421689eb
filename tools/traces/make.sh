#!/bin/sh
# Regenerates the shipped traces with `tierbench gen` (seeded: the same files every time).
# usage: tools/traces/make.sh [path/to/tierbench [out-dir]]
#        (defaults: build/bin/tierbench, this folder; tests/e2e/test_tierbench.py regenerates
#        them into a scratch folder and compares the bytes)
# The default sim pools (2 GPU backends, ~44 requests/s between them; 4 CPU backends, ~20/s)
# are what these rates are sized against; docs/operate/tuning.md shows runs of each.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
bench=${1:-$here/../../build/bin/tierbench}
out=${2:-$here}
mkdir -p "$out"
common="--tenants acme,globex,initech --sensitive 0.05 --mix urgent=0.1,normal=0.7,batch=0.2 --seed 7"
# 10 requests/s for 4 minutes: the GPU pool at about a quarter of its capacity
"$bench" gen $common --rate 10 --duration 240 --out "$out/steady.csv"
# the same, and 5x (50/s, above the GPU pool's capacity) for the minute from 30 s
"$bench" gen $common --rate 10 --duration 240 --surge 30:60:5 --out "$out/surge.csv"
# the same steady load; every GPU backend dies at 60.1 s (between two probes) and comes
# back at 120.1 s
"$bench" gen $common --rate 10 --duration 240 --kill 60.1:gpu --revive 120.1:gpu --out "$out/gpu-outage.csv"
# 6/s, and two surges of 40 s in which the load swings every 10 s between 9x (54/s, well above
# the GPU pool's capacity) and 3x (18/s, well below it): signals that cross the marks both ways
"$bench" gen $common --rate 6 --duration 400 --wave 30:40:20:9:3 --wave 210:40:20:9:3 --out "$out/flap-bait.csv"
