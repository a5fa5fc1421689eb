#!/usr/bin/env bash
# GPU check: run on a machine with an NVIDIA GPU, its driver and CUDA 13 libraries (cuBLAS,
# cuDNN 9). Not part of CI; nothing else depends on it.
#
# Starts the worker twice on a small repository (the demo model, and identity/simple test
# models for BYTES, FP16, BOOL and two outputs), every model with dynamic batching and
# `instance_group: [{count: 2, kind: KIND_GPU, gpus: [0]}]` (and a `gpus: [0, 1]` copy of
# the demo when two GPUs are visible): EXECUTION_MODE=auto (which must end at `CUDA EP
# enabled` when TensorRT's libraries are absent, or `TensorRT EP enabled` when they are
# present) and EXECUTION_MODE=cpu. On the GPU tier every model must run with io_binding true
# (TIERSERVE_IO_BINDING=auto: outputs bound to CudaPinned memory) and one session per
# instance on its listed device; on CPU the gpus list is ignored and said so. The same
# requests (single, concurrent mixed sizes that batch, output subsets) go to both workers
# and the outputs must match.
# Prints a short report; exit 0 only if the GPU tier was reached and every check passed.
#
# LLM section (needs tests/llm/node_modules for the tokenizer the tiny decoder carries, and
# build/bin/llm_gen_check): tests/llm/gen_check.py with EXECUTION_MODE=cuda STRICT_EP=1 (the
# engine's greedy tokens on CUDA equal numpy's, on both KV paths, batched and one at a time;
# the device path's load-time check passes and catches a broken write-back);
# then the worker with EXECUTION_MODE=cuda and with cpu on the tiny decoder: /v2/status must
# say kv_cache "device" on CUDA (its load-time check passed), the load log "KV cache device",
# and a few greedy /v1
# completions (concurrent, different lengths) must give the same text on both; a long prompt
# sent twice must hit the prefix cache (its blocks in device memory on CUDA) and answer the same.
#
#   tests/gpu/run.sh [path/to/tierserve]
#   (tests/gpu/bundle.sh packs all of it, binaries and libraries included, for a machine
#   without our build dependencies; rehearsed on a CPU-only machine, where it runs through
#   and fails only the GPU tier's checks)
#   LD_LIBRARY_PATH may need the CUDA/cuDNN library folders, and (when the binary was built
#   elsewhere) the folder holding libevent/jansson/yaml/hwloc shared objects.
set -uo pipefail
cd "$(dirname "$0")/../.."
BIN=${1:-build/bin/tierserve}
PY=${PYTHON:-python3}
OUT=${OUT:-$(mktemp -d)}
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
"$BIN" hwmap > "$OUT/hwmap.json" && echo "hwmap: $(cat "$OUT/hwmap.json")"
EXECUTION_MODE=auto "$BIN" doctor; echo "doctor exit $? (0: a GPU tier works)"
"$PY" - "$BIN" "$OUT" <<'PY'
import concurrent.futures as cf, json, os, shutil, subprocess, sys, time, urllib.request
sys.path.insert(0, "tests/e2e"); sys.path.insert(0, "tests/models"); sys.path.insert(0, "models")
import numpy as np
import tritonlike
import gen_test_models
from gen_demo import demo_reference

binary, out = sys.argv[1], sys.argv[2]
ok = True

def fail(msg):
    global ok
    print("FAIL:", msg); ok = False

# the repository: every model batching, two instances on GPU 0 (a session each)
hw = json.load(open(f"{out}/hwmap.json")) if os.path.exists(f"{out}/hwmap.json") else {}
n_gpus = len(hw.get("gpus") or [])
repo = f"{out}/repo"
shutil.rmtree(repo, ignore_errors=True)
def add(name, model_bytes, gpus):
    os.makedirs(f"{repo}/{name}/1")
    open(f"{repo}/{name}/1/model.onnx", "wb").write(model_bytes)
    open(f"{repo}/{name}/config.yaml", "w").write(
        "max_batch_size: 512\ndynamic_batching:\n  max_queue_delay_microseconds: 2000\n"
        f"instance_group:\n  - count: 2\n    kind: KIND_GPU\n    gpus: {gpus}\n")
demo_onnx = open("models/demo/1/model.onnx", "rb").read()
plans = {"demo": ["cuda:0"] * 2}
add("demo", demo_onnx, "[0]")
for name in ("identity_bytes", "identity_fp16", "identity_bool", "simple_fp32"):
    add(name, gen_test_models.build_model(name).SerializeToString(), "[0]")
    plans[name] = ["cuda:0"] * 2
if n_gpus >= 2:
    add("demo_multi", demo_onnx, "[0, 1]")
    plans["demo_multi"] = ["cuda:0", "cuda:0", "cuda:1", "cuda:1"]

def start(mode, port):
    log = open(f"{out}/worker-{mode}.log", "wb")
    env = dict(os.environ, EXECUTION_MODE=mode, TIERSERVE_HTTP_ADDRESS="127.0.0.1",
               TIERSERVE_HTTP_PORT=str(port), TIERSERVE_MODEL_REPOSITORY=repo)
    env.pop("TIERSERVE_IO_BINDING", None)  # auto: what a GPU box gets by default
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

def log_lines(mode):
    return [json.loads(l) for l in open(f"{out}/worker-{mode}.log") if l.startswith("{")]

def msgs(mode):
    return [l["msg"] for l in log_lines(mode)]

rng = np.random.default_rng(7)
x = rng.uniform(0, 8, (256, 4)).astype(np.float32)
sizes = [1, 3, 8, 2, 5, 1, 16, 4]
xs = [rng.uniform(0, 8, (n, 4)).astype(np.float32) for n in sizes]
strs = [np.array([[f"r{i}-{j}-\u00e9".encode() for j in range(3)] for i in range(n)], dtype=object)
        for n in sizes]
halves = [rng.standard_normal((n, 6)).astype(np.float16) for n in sizes]
bools = [rng.integers(0, 2, (n, 5)).astype(bool) for n in sizes]
pairs = [(rng.standard_normal((n, 16)).astype(np.float32), rng.standard_normal((n, 16)).astype(np.float32))
         for n in sizes]

def requests(url):
    """Every model: concurrent mixed sizes (they batch), and output subsets."""
    def one(job):
        c = tritonlike.TritonLikeClient(url)
        model, inputs, outputs = job
        r = c.infer(model, inputs, outputs=outputs)
        names = outputs or [o["name"] for o in r.get_response()["outputs"]]
        return {n: r.as_numpy(n) for n in names}
    jobs = []
    for i in range(len(sizes)):
        jobs.append(("demo", [("input", xs[i], "FP32")], None))
        jobs.append(("demo", [("input", xs[i], "FP32")], ["label"] if i % 2 else ["probabilities"]))
        jobs.append(("identity_bytes", [("INPUT0", strs[i], "BYTES")], None))
        jobs.append(("identity_fp16", [("INPUT0", halves[i], "FP16")], None))
        jobs.append(("identity_bool", [("INPUT0", bools[i], "BOOL")], None))
        jobs.append(("simple_fp32", [("INPUT0", pairs[i][0], "FP32"), ("INPUT1", pairs[i][1], "FP32")],
                     None if i % 2 else ["OUTPUT1"]))
        if "demo_multi" in plans:
            jobs.append(("demo_multi", [("input", xs[i], "FP32")], None))
    with cf.ThreadPoolExecutor(16) as ex:
        return jobs, list(ex.map(one, jobs))

res, got = {}, {}
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
    got[mode] = requests(f"127.0.0.1:{port}")
    p.terminate(); p.wait(timeout=60)
    models = {m["name"]: m for m in st["models"]}
    print(f"[{mode}] tier={st['tier']} degraded={st['degraded']} active={st['active_provider']} "
          f"ready_in={ready_s:.1f}s placement={models['demo']['node_placement']} "
          f"latency(256 rows)={dt*1e3:.2f}ms")
    for name, m in sorted(models.items()):
        print(f"    {name}: io_binding={m['io_binding']} ({m['io_binding_note']}) "
              f"devices={[i['device'] for i in m['instance_plan'] or []]} note={m['instance_note']}")
    for m in msgs(mode):
        if "unavailable:" in m or "EP enabled" in m or m.startswith("Active EP") or "resolved to CPU" in m:
            print(f"    log: {m}")
    ready = {l.get("model"): l.get("io_binding") for l in log_lines(mode) if l.get("msg") == "model ready"}
    if mode == "auto":
        enabled = [m for m in msgs(mode) if m in ("CUDA EP enabled", "TensorRT EP enabled")]
        if not enabled:
            fail("auto did not reach a GPU tier")
        trt_missing = any("TensorrtExecutionProvider unavailable" in m for m in msgs(mode))
        if trt_missing and enabled != ["CUDA EP enabled"]:
            fail("TensorRT absent but auto did not end at CUDA EP enabled")
        for name, want in plans.items():
            m = models[name]
            if m["io_binding"] is not True or not m["io_binding_note"].startswith("on: outputs bound to CudaPinned"):
                fail(f"{name}: io_binding is not on with CudaPinned outputs on the GPU tier: {m['io_binding_note']}")
            if ready.get(name) != "true":
                fail(f"{name}: the model ready log line does not say io_binding true")
            if [i["device"] for i in m["instance_plan"]] != want:
                fail(f"{name}: instance devices {[i['device'] for i in m['instance_plan']]}, want {want}")
        for dev in sorted({d for want in plans.values() for d in want}):
            if not any(m.startswith("instance ") and f" on {dev} (KIND_GPU)" in m for m in msgs(mode)):
                fail(f"no instance log line for {dev}")
    else:
        for name in plans:
            m = models[name]
            if m["io_binding"] is not False or not (m["instance_note"] or "").startswith("instance_group.gpus"):
                fail(f"{name} on CPU: io_binding {m['io_binding']}, instance_note {m['instance_note']}")
            if [i["device"] for i in m["instance_plan"]] != ["cpu"] * 2:
                fail(f"{name} on CPU: plan {m['instance_plan']}")
gp, gl = res["auto"]; cp, cl = res["cpu"]
ref = demo_reference(x); ref_p, ref_l = ref["probabilities"], ref["label"]
dp = float(np.max(np.abs(gp - cp)))
print(f"max |gpu - cpu| probabilities = {dp:.3g}; labels equal: {np.array_equal(gl, cl)}; "
      f"max |cpu - numpy| = {float(np.max(np.abs(cp - ref_p))):.3g}")
if dp > 1e-4 or not np.array_equal(gl, cl):
    fail("GPU and CPU outputs differ")
jobs, g_out = got["auto"]
_, c_out = got["cpu"]
worst = 0.0
for (model, _, outs), g, cpu in zip(jobs, g_out, c_out):
    if sorted(g) != sorted(cpu) or (outs and sorted(g) != sorted(outs)):
        fail(f"{model}: outputs {sorted(g)} vs {sorted(cpu)} (asked {outs})"); continue
    for name in g:
        a, b = g[name], cpu[name]
        if a.shape != b.shape or a.dtype != b.dtype:
            fail(f"{model}/{name}: {a.shape} {a.dtype} vs {b.shape} {b.dtype}"); continue
        if a.dtype.kind in "fc":
            d = float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64)))) if a.size else 0.0
            worst = max(worst, d)
            if d > 1e-4:
                fail(f"{model}/{name}: max |gpu - cpu| = {d:.3g}")
        elif not np.array_equal(a, b):
            fail(f"{model}/{name}: GPU and CPU outputs differ")
print(f"{len(jobs)} concurrent requests over {len(plans)} models (batched, output subsets): "
      f"max |gpu - cpu| = {worst:.3g}")
print("GPU CHECK:", "PASS" if ok else "FAIL")
sys.exit(0 if ok else 1)
PY
rc_infer=$?

echo "== LLM =="
GEN_CHECK_BIN=$(dirname "$BIN")/llm_gen_check
EXECUTION_MODE=cuda STRICT_EP=1 "$PY" tests/llm/gen_check.py "$GEN_CHECK_BIN" "$OUT/llm-gen" 2>&1 | tail -n 12
rc_gen=${PIPESTATUS[0]}
echo "gen_check.py on CUDA (numpy reference, host and bound KV paths): exit $rc_gen"
"$PY" - "$BIN" "$OUT" <<'PY'
import concurrent.futures as cf, json, os, shutil, subprocess, sys, time, urllib.request
binary, out = sys.argv[1], sys.argv[2]
ok = True
def fail(msg):
    global ok
    print("FAIL:", msg); ok = False
repo = f"{out}/llmrepo"
shutil.rmtree(repo, ignore_errors=True)
os.makedirs(f"{repo}/tiny/1")
r = subprocess.run([sys.executable, "tests/models/gen_llm_model.py", f"{repo}/tiny/1"], capture_output=True, text=True)
if r.returncode:
    raise SystemExit("gen_llm_model.py: " + r.stderr[-2000:])
prompts = [("Hello world", 16), ("Once upon a time, in a land far away, there lived a", 24), ("1 2 3", 7),
           ("The quick brown fox jumps over the lazy dog", 12)]
def start(mode, port):
    log = open(f"{out}/llm-{mode}.log", "wb")
    env = dict(os.environ, EXECUTION_MODE=mode, TIERSERVE_HTTP_ADDRESS="127.0.0.1", TIERSERVE_HTTP_PORT=str(port),
               TIERSERVE_MODEL_REPOSITORY=repo)
    env.pop("TIERSERVE_LLM_KV", None)  # auto: what a GPU box gets by default
    p = subprocess.Popen([binary], stdout=log, stderr=subprocess.STDOUT, env=env)
    t0 = time.time()
    while time.time() - t0 < 300 and p.poll() is None:
        try:
            if urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/health/ready", timeout=2).status == 200:
                return p
        except Exception:
            time.sleep(0.2)
    print(open(f"{out}/llm-{mode}.log").read()[-3000:])
    raise SystemExit(f"LLM {mode} worker did not become ready")
def complete(port, prompt, n):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", method="POST",
                                 data=json.dumps({"model": "tiny", "prompt": prompt, "max_tokens": n,
                                                  "temperature": 0}).encode(),
                                 headers={"Content-Type": "application/json"})
    return json.loads(urllib.request.urlopen(req, timeout=120).read())["choices"][0]["text"]
texts = {}
for mode, port in (("cuda", 18441), ("cpu", 18442)):
    p = start(mode, port)
    try:
        alone = [complete(port, q, n) for q, n in prompts]
        with cf.ThreadPoolExecutor(len(prompts)) as ex:  # they join and leave one batch
            together = list(ex.map(lambda a: complete(port, *a), prompts))
        # the prefix cache: the same long prompt twice, the second from cached blocks (device
        # memory on the GPU tier, copied by cudart), must answer as the first did
        long_q = "The quick brown fox jumps over the lazy dog near the river bank. " * 6
        cold, warm = complete(port, long_q, 8), complete(port, long_q, 8)
        st = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/status").read())
    finally:
        p.terminate(); p.wait(timeout=60)
    llm = [m for m in st["models"] if m["name"] == "tiny"][0]["llm"]
    logs = [json.loads(l).get("msg", "") for l in open(f"{out}/llm-{mode}.log") if l.startswith("{")]
    print(f"[{mode}] tier={st['tier']} kv_cache={llm.get('kv_cache')} note={llm.get('kv_cache_note')}")
    if alone != together:
        fail(f"{mode}: batched completions differ from one at a time")
    if cold != warm or llm.get("prefix_cache", {}).get("hits", 0) < 1:
        fail(f"{mode}: prefix cache: {cold!r} then {warm!r}, {llm.get('prefix_cache')}")
    texts[mode] = alone + [cold]
    if mode == "cuda":
        if st["tier"] != "cuda":
            fail(f"EXECUTION_MODE=cuda ended on tier {st['tier']}")
        if llm.get("kv_cache") != "device":
            fail(f"the KV cache is not on the device: {llm.get('kv_cache')} ({llm.get('kv_cache_note')})")
        if not any("KV cache device" in m for m in logs):
            fail("no load log line says 'KV cache device'")
        if "checked at load: 8 logits rows equal the host path's" not in llm.get("kv_cache_note", ""):
            fail("the device KV path's load-time check is not reported as passed")
if texts["cuda"] != texts["cpu"]:
    fail(f"CUDA and CPU greedy texts differ: {texts['cuda']} vs {texts['cpu']}")
print("LLM CHECK:", "PASS" if ok else "FAIL")
sys.exit(0 if ok else 1)
PY
rc_llm=$?
echo "GPU CHECK (inference $rc_infer, LLM gen_check $rc_gen, LLM worker $rc_llm):" \
    "$([ $rc_infer -eq 0 ] && [ $rc_gen -eq 0 ] && [ $rc_llm -eq 0 ] && echo PASS || echo FAIL)"
[ $rc_infer -eq 0 ] && [ $rc_gen -eq 0 ] && [ $rc_llm -eq 0 ]
