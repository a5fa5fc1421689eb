#!/usr/bin/env bash
# The container images and the compose stack, run for real under podman:
#
#   1. lint every Dockerfile and the compose file (tests/images/lint.py), and take the
#      tensorrt and jetson Dockerfiles through `podman build` as far as this machine allows
#      (to their NVIDIA base image, which no registry here serves)
#   2. build the Debian base (debootstrap from the host's apt mirror; cached) and the cpu
#      images: worker, router, prometheus (deploy/docker/build.sh cpu)
#   3. check the images: no libonnxruntime_providers_* in the worker, no libonnxruntime at
#      all in the router, nothing unresolved for `ldd`, non-root, STOPSIGNAL, healthchecks;
#      `tierserve doctor` in the worker: requested=cpu passes, requested=auto gets the
#      "no GPU tier works" verdict and exit 78; with the GPU profiles' settings
#      (EXECUTION_MODE=tensorrt STRICT_EP=1) the worker refuses to start, exit 78
#   4. podman-compose up (inference, router, prometheus; ports on 127.0.0.1), wait until
#      healthy, run the guidance's log grep through `podman-compose ... logs inference`,
#      send an inference through the router, see Prometheus scrape both, stop the router
#      and the worker (SIGTERM: drain, exit 0), then down
#
# Exit 0 pass, 1 fail, 77 skipped (no podman: prints "SKIPPED: podman not available"; a
# skip is not a pass, and scripts/setup.sh installs podman so CI never skips). Needs root
# (debootstrap, rootful podman); re-runs itself through `sudo -n` otherwise. Caches live in
# ~/.cache/tierserve/podman (TIERSERVE_PODMAN_CACHE) and podman's own image store.
set -euo pipefail
cd "$(dirname "$0")/../.."
REPO=$PWD
# The stack's settings come from the environment: a developer's shell must not change what
# is tested.
unset EXECUTION_MODE STRICT_EP TIERSERVE_MODELS TIERSERVE_GPU_DEVICE COMPOSE_PROJECT_NAME
T0=$SECONDS
LIMIT_S=${TIERSERVE_IMAGES_TIMEOUT_S:-900}
PY=/usr/bin/python3

say() { printf '[images %3ds] %s\n' "$((SECONDS - T0))" "$*"; }
fail() { printf '[images %3ds] FAIL: %s\n' "$((SECONDS - T0))" "$*" >&2; exit 1; }
declare -a TIMINGS=()
timed() { TIMINGS+=("$(printf '%-44s %5d s' "$1" "$2")"); }

# --- 1. lint (needs no podman) ----------------------------------------------------------------
$PY tests/images/lint.py || fail "lint"

if ! command -v podman >/dev/null 2>&1 || ! command -v podman-compose >/dev/null 2>&1; then
  echo "################################################################################"
  echo "SKIPPED: podman not available (podman and podman-compose are needed; scripts/setup.sh"
  echo "installs them). The images and the compose stack were NOT tested."
  echo "################################################################################"
  exit 77
fi
if [ "$(id -u)" -ne 0 ]; then
  say "not root: re-running through sudo -n (debootstrap and rootful podman)"
  exec sudo -n -E "$0" "$@"
fi

# This VM's podman needs runc with cgroupfs (no systemd) and no default ulimits; a
# containers.conf of our own says so without touching the machine's configuration.
CACHE=${TIERSERVE_PODMAN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tierserve/podman}
mkdir -p "$CACHE"
export TIERSERVE_PODMAN_CACHE=$CACHE
export CONTAINERS_CONF=$CACHE/containers.conf
cat >"$CONTAINERS_CONF" <<'EOF'
[containers]
default_ulimits = []
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
EOF
WORK=$(mktemp -d "${TMPDIR:-/tmp}/tierserve-images.XXXXXX")
COMPOSE=(podman-compose -f docker-compose.release.yml)
SERVICES=(inference router prometheus)
UP=0
cleanup() {
  local rc=$?
  if [ "$UP" = 1 ]; then
    if [ "$rc" -ne 0 ]; then
      for s in "${SERVICES[@]}"; do
        echo "--- podman-compose logs $s (last 30 lines)"; "${COMPOSE[@]}" logs "$s" 2>&1 | tail -30 || true
      done
    fi
    local t=$SECONDS
    "${COMPOSE[@]}" down -v >"$WORK/down.log" 2>&1 || { echo "down failed:"; tail -20 "$WORK/down.log"; }
    echo "[images] podman-compose down: $((SECONDS - t)) s"
  fi
  rm -rf "$WORK"
  exit "$rc"
}
trap cleanup EXIT
deadline() { [ $((SECONDS - T0)) -lt "$LIMIT_S" ] || fail "over the ${LIMIT_S} s limit"; }

# --- 1b. tensorrt and jetson: as far as podman build goes without their base images -----------
# --pull=never: the build parses the whole Dockerfile and stops at the first FROM, which must
# name the NVIDIA base (not a syntax error). Nothing is downloaded.
for p in tensorrt jetson; do
  rc=0
  podman build --pull=never --format docker -f "deploy/docker/Dockerfile.$p" \
    --build-context "ort=$WORK" -t "tierserve-lint:$p" . >"$WORK/build-$p.log" 2>&1 || rc=$?
  case $p in tensorrt) want='ubuntu:24\.04|nvidia/cuda' ;; jetson) want='l4t-jetpack' ;; esac
  if [ "$rc" -eq 0 ]; then fail "Dockerfile.$p built without its base image?"; fi
  grep -Eq "$want" "$WORK/build-$p.log" || { cat "$WORK/build-$p.log"; fail "Dockerfile.$p did not stop at its base image"; }
  say "Dockerfile.$p: parsed, stops at its base image ($(grep -Eo "$want[^ \"']*" "$WORK/build-$p.log" | head -1)): not built here"
done

# --- 2. base and cpu images ---------------------------------------------------------------------
t=$SECONDS
cached=cold
podman image exists localhost/tierserve-base:bookworm && cached=warm
BUILD_LOG=$WORK/build.log deploy/docker/build.sh cpu 2>&1 | sed 's/^/  /' || fail "build (log above)"
timed "base + cpu images (base cache $cached)" $((SECONDS - t))
deadline

# --- 3. image checks ----------------------------------------------------------------------------
inspect() { podman image inspect -f "$2" "$1"; }
for img in tierserve-worker:cpu tierserve-router:latest; do
  [ "$(inspect "$img" '{{.Config.User}}')" = "10001:10001" ] || fail "$img does not run as 10001:10001"
  [ "$(inspect "$img" '{{.Config.StopSignal}}')" = "SIGTERM" ] || fail "$img has no STOPSIGNAL SIGTERM"
  grep -q '/v2/health/ready' <<<"$(inspect "$img" '{{json .Config.Healthcheck}}')" || fail "$img has no healthcheck on /v2/health/ready"
done
# find over the whole filesystem, not only /opt/onnxruntime: a provider anywhere is one too many
# as root inside, so that find sees every directory
RUN=(podman run --rm --network none --no-healthcheck)
in_image() { "${RUN[@]}" --user 0 --entrypoint /bin/sh "$1" -c "$2"; }
provs=$(in_image tierserve-worker:cpu 'find / -xdev -name "libonnxruntime_providers_*"')
[ -z "$provs" ] || fail "the cpu worker image has GPU provider libraries: $provs"
in_image tierserve-worker:cpu 'test -f /opt/onnxruntime/lib/libonnxruntime.so.1' || fail "the cpu worker image has no libonnxruntime.so.1"
ortlibs=$(in_image tierserve-router:latest 'find / -xdev -name "libonnxruntime*"')
[ -z "$ortlibs" ] || fail "the router image has ONNX Runtime: $ortlibs"
nf=$(in_image tierserve-worker:cpu 'ldd /usr/local/bin/tierserve /usr/local/bin/tierrouter /opt/onnxruntime/lib/libonnxruntime.so.1 | grep "not found" || true')
[ -z "$nf" ] || fail "unresolved libraries in the worker image: $nf"
nf=$(in_image tierserve-router:latest 'ldd /usr/local/bin/tierrouter | grep "not found" || true')
[ -z "$nf" ] || fail "unresolved libraries in the router image: $nf"
if grep -qi onnxruntime <<<"$(in_image tierserve-router:latest 'ldd /usr/local/bin/tierrouter')"; then fail "tierrouter links ONNX Runtime"; fi
say "images: non-root, STOPSIGNAL, healthchecks; worker has libonnxruntime.so.1 and no provider; router has no ONNX Runtime; ldd resolves everything"

# tierserve doctor, as CI runs it in the cpu image: what the worker asks for by default
# (cpu) works; `auto` finds no GPU tier, names the missing provider library and exits 78.
rc=0; "${RUN[@]}" tierserve-worker:cpu doctor >"$WORK/doctor-cpu.txt" 2>&1 || rc=$?
[ "$rc" -eq 0 ] || { cat "$WORK/doctor-cpu.txt"; fail "doctor (EXECUTION_MODE=cpu) exit $rc, want 0"; }
grep -q '^verdict: OK: requested=cpu' "$WORK/doctor-cpu.txt" || { cat "$WORK/doctor-cpu.txt"; fail "doctor (cpu): no OK verdict"; }
rc=0; "${RUN[@]}" -e EXECUTION_MODE=auto tierserve-worker:cpu doctor >"$WORK/doctor-auto.txt" 2>&1 || rc=$?
[ "$rc" -eq 78 ] || { cat "$WORK/doctor-auto.txt"; fail "doctor (EXECUTION_MODE=auto) exit $rc, want 78"; }
grep -q '^verdict: FAIL: no GPU tier works; the worker would run tier=cpu-fallback (requested=auto)' "$WORK/doctor-auto.txt" \
  || { cat "$WORK/doctor-auto.txt"; fail "doctor (auto): not the no-GPU verdict"; }
grep -q 'libonnxruntime_providers_tensorrt.so: MISSING' "$WORK/doctor-auto.txt" \
  || { cat "$WORK/doctor-auto.txt"; fail "doctor (auto) does not name the missing provider library"; }
say "doctor in the cpu image: cpu -> exit 0 OK; auto -> exit 78 '$(grep '^verdict:' "$WORK/doctor-auto.txt" | cut -c10-70)...'"
# The GPU profiles' settings on the cpu image (a GPU box given the wrong image): the worker
# refuses before opening its port, exit 78, rather than serve on the CPU in silence.
rc=0; timeout 60 "${RUN[@]}" -e EXECUTION_MODE=tensorrt -e STRICT_EP=1 tierserve-worker:cpu >"$WORK/strict.txt" 2>&1 || rc=$?
[ "$rc" -eq 78 ] || { cat "$WORK/strict.txt"; fail "EXECUTION_MODE=tensorrt STRICT_EP=1 on the cpu image: exit $rc, want 78"; }
grep -q 'STRICT_EP=1 refusing to start' "$WORK/strict.txt" || { cat "$WORK/strict.txt"; fail "no strict refusal line"; }
say "cpu image with EXECUTION_MODE=tensorrt STRICT_EP=1: refuses, exit 78"
deadline

# --- 4. the compose stack -----------------------------------------------------------------------
free_port() { $PY -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
export TIERSERVE_ROUTER_PORT=${TIERSERVE_ROUTER_PORT:-$(free_port)}
export TIERSERVE_PROMETHEUS_PORT=${TIERSERVE_PROMETHEUS_PORT:-$(free_port)}
# leftovers of an interrupted run of this checkout
"${COMPOSE[@]}" down -v >/dev/null 2>&1 || true
t=$SECONDS
UP=1
# podman-compose 1.0.3 has no --profile (it would start every service, grafana and the GPU
# workers included): the cpu profile's services are named. --no-build: built above.
"${COMPOSE[@]}" up -d --no-build "${SERVICES[@]}" >"$WORK/up.log" 2>&1 || { cat "$WORK/up.log"; fail "podman-compose up"; }
ctr() { podman ps -a --filter "label=com.docker.compose.project.working_dir=$REPO" \
          --filter "label=com.docker.compose.service=$1" --format '{{.Names}}' | head -n1; }
for s in "${SERVICES[@]}"; do [ -n "$(ctr "$s")" ] || { cat "$WORK/up.log"; fail "no container for $s"; }; done
# Published on loopback only: podman reports each port's host IP.
for s in router prometheus; do
  ports=$(podman port "$(ctr "$s")")
  [ -n "$ports" ] || fail "$s publishes no port"
  if grep -qv -- '-> 127\.0\.0\.1:' <<<"$ports"; then fail "$s publishes beyond 127.0.0.1: $ports"; fi
done
[ -z "$(podman port "$(ctr inference)")" ] || fail "the worker publishes a port"
# No systemd here to run the healthcheck timers: run each container's own healthcheck
# (the one in the compose file) until all pass, bounded.
healthy=()
until [ ${#healthy[@]} -eq ${#SERVICES[@]} ]; do
  [ $((SECONDS - t)) -lt 120 ] || fail "not healthy within 120 s: ${healthy[*]:-none} of ${SERVICES[*]}"
  healthy=()
  for s in "${SERVICES[@]}"; do
    c=$(ctr "$s")
    [ "$(podman inspect -f '{{.State.Status}}' "$c")" = running ] || fail "$s is not running: $(podman inspect -f '{{.State.Status}} exit={{.State.ExitCode}}' "$c")"
    podman healthcheck run "$c" >/dev/null 2>&1 && healthy+=("$s")
  done
  [ ${#healthy[@]} -eq ${#SERVICES[@]} ] || sleep 1
done
timed "compose up -> inference, router, prometheus healthy" $((SECONDS - t))
say "stack healthy: router on 127.0.0.1:$TIERSERVE_ROUTER_PORT, prometheus on 127.0.0.1:$TIERSERVE_PROMETHEUS_PORT"

# The guidance's exact check. On the cpu profile it must print nothing: the image has no
# GPU provider, so no GPU EP is ever enabled. podman-compose's `logs` runs `podman logs`,
# which passes the container's stderr (where the worker logs) to its own stderr, not into
# the pipe (docker compose's `logs` writes both to stdout): so the same grep runs again with
# 2>&1, which must print nothing either, and the stderr of the exact command must hold the
# worker's log, tier line included, to show what was searched.
rc=0
out=$( { set +o pipefail; podman-compose -f docker-compose.release.yml logs inference | grep "EP enabled"; } 2>"$WORK/guidance.err") || rc=$?
[ "$rc" -eq 1 ] && [ -z "$out" ] || fail "guidance grep: rc=$rc, printed: $out"
rc=0
out=$( { set +o pipefail; podman-compose -f docker-compose.release.yml logs inference 2>&1 | grep "EP enabled"; }) || rc=$?
[ "$rc" -eq 1 ] && [ -z "$out" ] || fail "guidance grep (2>&1): rc=$rc, printed: $out"
grep -q 'Active EP: CPUExecutionProvider (requested=cpu strict=0 tier=cpu)' "$WORK/guidance.err" \
  || { cat "$WORK/guidance.err"; fail "the worker's log has no 'Active EP: CPUExecutionProvider (requested=cpu strict=0 tier=cpu)'"; }
say "guidance grep ('logs inference | grep \"EP enabled\"'): nothing, as a cpu image must; the log says Active EP: CPUExecutionProvider tier=cpu"

# One inference through the router (http.client: no retry, strict JSON).
$PY - "$TIERSERVE_ROUTER_PORT" <<'EOF' || fail "inference through the router"
import http.client, json, math, sys
c = http.client.HTTPConnection("127.0.0.1", int(sys.argv[1]), timeout=10)
body = json.dumps({"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 4],
                               "data": [5.1, 3.5, 1.4, 0.2]}]})
c.request("POST", "/v2/models/demo/infer", body, {"Content-Type": "application/json"})
r = c.getresponse()
raw = r.read()
assert r.status == 200, (r.status, raw[:300])
assert r.getheader("X-Tierrouter-Pool") == "local", r.getheaders()
out = {o["name"]: o for o in json.loads(raw)["outputs"]}
p = out["probabilities"]["data"]
assert out["probabilities"]["shape"] == [1, 3] and abs(sum(p) - 1) < 1e-5, out
assert out["label"]["data"] == [max(range(3), key=lambda i: p[i])], out
print(f"[images] inference via the router: 200, pool local, probabilities {[round(x, 4) for x in p]}, label {out['label']['data'][0]}")
EOF

# Prometheus scrapes both over the compose network and loaded the alert rules.
$PY - "$TIERSERVE_PROMETHEUS_PORT" <<'EOF' || fail "prometheus"
import http.client, json, sys, time
def get(path):
    c = http.client.HTTPConnection("127.0.0.1", int(sys.argv[1]), timeout=5)
    c.request("GET", path)
    r = c.getresponse()
    assert r.status == 200, (path, r.status)
    return json.loads(r.read())["data"]
end = time.monotonic() + 45          # one 15 s scrape interval, with room
while True:
    ts = {t["labels"]["job"]: t["health"] for t in get("/api/v1/targets")["activeTargets"]}
    if ts.get("tierserve") == "up" and ts.get("tierrouter") == "up":
        break
    assert time.monotonic() < end, f"targets not up: {ts}"
    time.sleep(1)
groups = get("/api/v1/rules")["groups"]
assert groups and sum(len(g["rules"]) for g in groups) > 0, "no alert rules loaded"
print(f"[images] prometheus: jobs tierserve and tierrouter up; {sum(len(g['rules']) for g in groups)} rules loaded")
EOF
deadline

# The drain on stop: the images' STOPSIGNAL is SIGTERM, which makes both programs drain and
# exit 0. podman-compose 1.0.3 ignores stop_grace_period and its `down` stops with a 1 s
# timeout, so stop them first with the compose file's 40 s grace, router before worker.
t=$SECONDS
for s in router inference; do
  c=$(ctr "$s")
  podman stop -t 40 "$c" >/dev/null || fail "podman stop $s"
  code=$(podman inspect -f '{{.State.ExitCode}}' "$c")
  [ "$code" = 0 ] || fail "$s exited $code on SIGTERM, want 0"
  # (logs read whole first: grep -q closing a pipe early would fail the pipeline under pipefail)
  logs=$(podman logs "$c" 2>&1)
  grep -q 'SIGTERM received: not ready; draining' <<<"$logs" || fail "$s did not drain on the stop signal"
  grep -q 'drained: no request in flight; exiting' <<<"$logs" || fail "$s did not finish its drain"
done
timed "stop router + worker (SIGTERM, drain, exit 0)" $((SECONDS - t))
say "stop: router and worker got SIGTERM, drained and exited 0"

echo "== image sizes"
for img in localhost/tierserve-base:bookworm tierserve-worker:cpu tierserve-router:latest tierserve-prometheus:latest; do
  printf '  %-36s %8.1f MB\n' "$img" "$(inspect "$img" '{{.Size}}' | awk '{print $1/1e6}')"
done
echo "== timings"
printf '  %s\n' "${TIMINGS[@]}"
say "PASS (total $((SECONDS - T0)) s; down follows)"
