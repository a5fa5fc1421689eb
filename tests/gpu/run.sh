#!/usr/bin/env bash
# GPU check: run on a machine with an NVIDIA GPU, its driver and CUDA 13 libraries (cuBLAS,
# cuDNN 9). Not part of CI; nothing else depends on it.
#
# Starts the worker twice on the demo model: EXECUTION_MODE=auto (which must end at
# `CUDA EP enabled` when TensorRT's libraries are absent, or `TensorRT EP enabled` when they
# are present) and EXECUTION_MODE=cpu, sends the same batch to both and compares the outputs.
# Prints a short report; exit 0 only if the GPU tier was reached and the outputs match.
#
#   tests/gpu/run.sh [path/to/tierserve]
#   LD_LIBRARY_PATH may need the CUDA/cuDNN library folders, and (when the binary was built
#   elsewhere) the folder holding libevent/jansson/yaml/hwloc shared objects.
set -uo pipefail
cd "$(dirname "$0")/../.."
BIN=${1:-build/bin/tierserve}
PY=${PYTHON:-python3}
OUT=${OUT:-$(mktemp -d)}
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
"$BIN" hwmap > "$OUT/hwmap.json" && echo "hwmap: $(cat "$OUT/hwmap.json")"
exec "$PY" - "$BIN" "$OUT" <<'PY'
import json, os, subprocess, sys, time, urllib.request
sys.path.insert(0, "tests/e2e"); sys.path.insert(0, "models")
import numpy as np
import tritonlike
from gen_demo import demo_reference

binary, out = sys.argv[1], sys.argv[2]

def start(mode, port):
    log = open(f"{out}/worker-{mode}.log", "wb")
    env = dict(os.environ, EXECUTION_MODE=mode, TIERSERVE_HTTP_ADDRESS="127.0.0.1",
               TIERSERVE_HTTP_PORT=str(port), TIERSERVE_MODEL_REPOSITORY=os.path.abspath("models"))
    p = subprocess.Popen([binary], stdout=log, stderr=subprocess.STDOUT, env=env)
    t0 = time.time()
    while time.time() - t0 < 300:
        if p.poll() is not None:
            break
        try:
            if urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/health/ready", timeout=2).status == 200:
                return p, time.time() - t0
        except Exception:
            time.sleep(0.2)
    print(open(f"{out}/worker-{mode}.log").read()[-3000:])
    raise SystemExit(f"{mode} worker did not become ready")

def msgs(mode):
    return [json.loads(l)["msg"] for l in open(f"{out}/worker-{mode}.log") if l.startswith("{")]

x = np.random.default_rng(7).uniform(0, 8, (256, 4)).astype(np.float32)
res, ok = {}, True
for mode, port in (("auto", 18431), ("cpu", 18432)):
    p, ready_s = start(mode, port)
    c = tritonlike.TritonLikeClient(f"127.0.0.1:{port}")
    st = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/status").read())
    c.infer("demo", [("input", x, "FP32")])  # first request after warm-up
    t0 = time.perf_counter(); n = 50
    for _ in range(n):
        r = c.infer("demo", [("input", x, "FP32")])
    dt = (time.perf_counter() - t0) / n
    res[mode] = (r.as_numpy("probabilities"), r.as_numpy("label"))
    p.terminate(); p.wait(timeout=60)
    print(f"[{mode}] tier={st['tier']} degraded={st['degraded']} active={st['active_provider']} "
          f"ready_in={ready_s:.1f}s placement={st['models'][0]['node_placement']} "
          f"latency(256 rows)={dt*1e3:.2f}ms")
    for m in msgs(mode):
        if "unavailable:" in m or "EP enabled" in m or m.startswith("Active EP") or "resolved to CPU" in m:
            print(f"    log: {m}")
    if mode == "auto":
        enabled = [m for m in msgs(mode) if m in ("CUDA EP enabled", "TensorRT EP enabled")]
        if not enabled:
            print("FAIL: auto did not reach a GPU tier"); ok = False
        trt_missing = any("TensorrtExecutionProvider unavailable" in m for m in msgs(mode))
        if trt_missing and enabled != ["CUDA EP enabled"]:
            print("FAIL: TensorRT absent but auto did not end at CUDA EP enabled"); ok = False
gp, gl = res["auto"]; cp, cl = res["cpu"]
ref = demo_reference(x); ref_p, ref_l = ref["probabilities"], ref["label"]
dp = float(np.max(np.abs(gp - cp)))
print(f"max |gpu - cpu| probabilities = {dp:.3g}; labels equal: {np.array_equal(gl, cl)}; "
      f"max |cpu - numpy| = {float(np.max(np.abs(cp - ref_p))):.3g}")
if dp > 1e-4 or not np.array_equal(gl, cl):
    print("FAIL: GPU and CPU outputs differ"); ok = False
print("GPU CHECK:", "PASS" if ok else "FAIL")
sys.exit(0 if ok else 1)
PY
