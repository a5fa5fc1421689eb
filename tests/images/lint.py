#!/usr/bin/python3
"""Static checks of deploy/docker/Dockerfile* and docker-compose.release.yml.

The cpu images are built and run for real by tests/images/run.sh; the tensorrt and jetson
images cannot be (no NVIDIA base image, GPU or arm64 ONNX Runtime on the test machine), so
this is what checks them: the rules every image must keep (bases as build arguments,
multi-stage, a non-root user, a healthcheck on a real endpoint, STOPSIGNAL, no downloads
but apt), the provider libraries each profile carries and the compose file's promises
(profiles, the settings, loopback-only ports, GPU reservations, grace periods that cover
the drain). Prints one line per problem and exits 1 if there is any.

    /usr/bin/python3 tests/images/lint.py [repository root]
"""
import fnmatch
import os
import re
import sys

import yaml

ROOT = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                       os.path.join(os.path.dirname(__file__), "..", ".."))
PROBLEMS = []


def problem(where, msg):
    PROBLEMS.append(f"{where}: {msg}")


# --- Dockerfiles -------------------------------------------------------------------------

def instructions(path):
    """(line number, KEYWORD, argument text) per instruction; continuations joined,
    comment lines dropped (as the Dockerfile parser does)."""
    out, buf, start = [], "", 0
    with open(path) as f:
        for n, raw in enumerate(f, 1):
            line = raw.rstrip("\n")
            if not buf and (not line.strip() or line.lstrip().startswith("#")):
                continue
            if buf and line.lstrip().startswith("#"):
                continue
            if not buf:
                start = n
            if line.endswith("\\"):
                buf += line[:-1] + " "
                continue
            buf += line
            kw, _, rest = buf.strip().partition(" ")
            out.append((start, kw.upper(), rest.strip()))
            buf = ""
    return out


def stages(instrs):
    """Global ARGs (name -> default) and the stages: [{name, base, instrs}]."""
    args, st = {}, []
    for n, kw, rest in instrs:
        if kw == "FROM":
            m = re.match(r"(?:--platform=\S+\s+)?(\S+)(?:\s+AS\s+(\S+))?$", rest, re.I)
            st.append({"line": n, "base": m.group(1), "name": (m.group(2) or str(len(st))).lower(),
                       "instrs": []})
        elif not st and kw == "ARG":
            name, _, default = rest.partition("=")
            args[name] = default
        elif st:
            st[-1]["instrs"].append((n, kw, rest))
    return args, st


def chain(st_by_name, stage):
    """The stage and the stages it is built FROM, nearest first."""
    out = [stage]
    while stage["base"].lower() in st_by_name:
        stage = st_by_name[stage["base"].lower()]
        out.append(stage)
    return out


def dockerignore_patterns():
    pats = []
    with open(os.path.join(ROOT, ".dockerignore")) as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith("#"):
                neg = line.startswith("!")
                pats.append((neg, line.lstrip("!").strip("/")))
    return pats


def ignored(relpath, pats):
    """Docker's rule: the last pattern matching the path or one of its parents wins."""
    parts = relpath.strip("/").split("/")
    result = False
    for neg, pat in pats:
        for i in range(1, len(parts) + 1):
            sub = "/".join(parts[:i])
            p = pat.replace("**/", "*")
            if fnmatch.fnmatchcase(sub, p) or (pat.startswith("**/") and fnmatch.fnmatchcase(parts[i - 1], pat[3:])):
                result = not neg
                break
    return result


def build_dev_packages():
    """The library -dev packages scripts/setup.sh installs for the build (the fuzzers'
    clang runtime aside)."""
    text = open(os.path.join(ROOT, "scripts", "setup.sh")).read()
    m = re.search(r"DEB_PACKAGES=\((.*?)\)", text, re.S)
    return [p for p in m.group(1).split() if p.endswith("-dev") and p != "libclang-rt-14-dev"]


def check_dockerfile(rel, want):
    path = os.path.join(ROOT, rel)
    if not os.path.exists(path):
        problem(rel, "missing")
        return
    instrs = instructions(path)
    args, st = stages(instrs)
    by_name = {s["name"]: s for s in st}
    pats = dockerignore_patterns()

    if want.get("multistage"):
        # the builder compiles the same CMake project: every library the build finds must be
        # installed there (a dependency added to setup.sh but not here broke the image build)
        apt = " ".join(rest for s_ in st for _, kw, rest in s_["instrs"] if kw == "RUN" and "apt-get install" in rest)
        for pkg in build_dev_packages():
            if not re.search(r"(^|\s)" + re.escape(pkg) + r"(\s|$|\\)", apt):
                problem(rel, f"the builder does not install {pkg}, which scripts/setup.sh installs for the build")

    for s in st:
        base = s["base"]
        if base.lower() not in by_name and not re.fullmatch(r"\$\{?\w+\}?", base):
            problem(f"{rel}:{s['line']}", f"FROM {base}: a base image is a build argument (ARG), not hard-coded")
        m = re.fullmatch(r"\$\{?(\w+)\}?", base)
        if m and not args.get(m.group(1)):
            problem(f"{rel}:{s['line']}", f"FROM {base}: ARG {m.group(1)} needs a default before the first FROM")
        for n, kw, rest in s["instrs"]:
            if kw == "ADD":
                problem(f"{rel}:{n}", "ADD: use COPY (ADD fetches URLs and unpacks archives)")
            if kw == "RUN":
                if re.search(r"\b(curl|wget|git\s+clone|pip3?\s+install|npm\s+install)\b", rest):
                    problem(f"{rel}:{n}", "RUN downloads outside apt: images install from the Debian/Ubuntu/NVIDIA archives only")
                if "apt-get install" in rest:
                    if "--no-install-recommends" not in rest:
                        problem(f"{rel}:{n}", "apt-get install without --no-install-recommends")
                    if "rm -rf /var/lib/apt/lists/*" not in rest:
                        problem(f"{rel}:{n}", "apt-get install leaves /var/lib/apt/lists in the layer")
            if kw == "COPY":
                words = rest.split()
                if any(w.startswith("--from=") for w in words):
                    continue
                for src in [w for w in words if not w.startswith("--")][:-1]:
                    if not os.path.exists(os.path.join(ROOT, src)):
                        problem(f"{rel}:{n}", f"COPY {src}: no such path in the repository")
                    elif ignored(src, pats):
                        problem(f"{rel}:{n}", f"COPY {src}: excluded from the build context by .dockerignore")

    if want.get("multistage") and len(st) < 2:
        problem(rel, "not multi-stage: build tools must stay out of the runtime image")

    for target, t in want["targets"].items():
        if target not in by_name:
            problem(rel, f"no stage {target}")
            continue
        ch = chain(by_name, by_name[target])
        flat = [i for s in reversed(ch) for i in s["instrs"]]

        def last(kw):
            vals = [rest for _, k, rest in flat if k == kw]
            return vals[-1] if vals else None

        user = last("USER")
        if not user or user.split(":")[0] in ("root", "0"):
            problem(f"{rel} [{target}]", f"runs as {user or 'root'}: needs a non-root USER")
        elif t.get("user") and user != t["user"]:
            problem(f"{rel} [{target}]", f"USER {user}, want {t['user']}")
        if (last("STOPSIGNAL") or "") != "SIGTERM":
            problem(f"{rel} [{target}]", "STOPSIGNAL SIGTERM missing: SIGTERM is what starts the drain")
        hc = last("HEALTHCHECK") or ""
        if t.get("health") and t["health"] not in hc:
            problem(f"{rel} [{target}]", f"HEALTHCHECK does not probe {t['health']}: {hc or 'none'}")
        if t.get("entrypoint") and t["entrypoint"] not in (last("ENTRYPOINT") or ""):
            problem(f"{rel} [{target}]", f"ENTRYPOINT is not {t['entrypoint']}")
        base_arg = re.fullmatch(r"\$\{?(\w+)\}?", ch[-1]["base"])
        if t.get("base_default"):
            default = args.get(base_arg.group(1), "") if base_arg else ""
            if not re.search(t["base_default"], default):
                problem(f"{rel} [{target}]", f"base image default {default!r} does not match {t['base_default']}")
        ort_copies = " ".join(rest for _, k, rest in flat if k == "COPY" and "--from=ort" in rest)
        # the build stage's SDK copy is not part of the image; only this chain's copies are
        libs = set(re.findall(r"libonnxruntime[\w.]*\.so[\w.]*", ort_copies))
        if libs != set(t["ort_libs"]):
            problem(f"{rel} [{target}]", f"ONNX Runtime libraries {sorted(libs) or 'none'}, want {sorted(t['ort_libs']) or 'none'}")
        env = " ".join(rest for _, k, rest in flat if k == "ENV")
        for k, v in t.get("env", {}).items():
            if not re.search(rf"\b{k}={re.escape(v)}\b", env):
                problem(f"{rel} [{target}]", f"ENV {k}={v} missing")
        for pkg in t.get("apt", []):
            if not any(k == "RUN" and pkg in rest for _, k, rest in flat):
                problem(f"{rel} [{target}]", f"does not install {pkg}")


CORE = ["libonnxruntime.so.1"]
GPU = CORE + ["libonnxruntime_providers_shared.so", "libonnxruntime_providers_cuda.so",
              "libonnxruntime_providers_tensorrt.so"]
WORKER = {"user": "10001:10001", "health": "/v2/health/ready", "entrypoint": "tierserve"}

check_dockerfile("deploy/docker/Dockerfile", {"multistage": True, "targets": {
    "worker": dict(WORKER, ort_libs=CORE, base_default=r"debian:bookworm",
                   env={"EXECUTION_MODE": "cpu", "STRICT_EP": "0", "TIERSERVE_MODEL_REPOSITORY": "/models"}),
    "router": {"user": "10001:10001", "health": "/v2/health/ready", "entrypoint": "tierrouter",
               "ort_libs": [], "base_default": r"debian:bookworm"},
}})
check_dockerfile("deploy/docker/Dockerfile.tensorrt", {"multistage": True, "targets": {
    "worker": dict(WORKER, ort_libs=GPU, base_default=r"nvidia/cuda:13\.\d+(\.\d+)?-cudnn-runtime-",
                   env={"EXECUTION_MODE": "tensorrt", "STRICT_EP": "1"},
                   apt=["libnvinfer10", "libnvonnxparsers10"]),
}})
check_dockerfile("deploy/docker/Dockerfile.jetson", {"multistage": True, "targets": {
    "worker": dict(WORKER, ort_libs=GPU, base_default=r"l4t-jetpack:",
                   env={"EXECUTION_MODE": "tensorrt", "STRICT_EP": "1"}),
}})
check_dockerfile("deploy/docker/Dockerfile.prometheus", {"multistage": False, "targets": {
    "0": {"user": "prometheus", "health": "/-/ready", "entrypoint": "prometheus", "ort_libs": [],
          "base_default": r"debian:bookworm", "apt": ["prometheus"]},
}})


# --- docker-compose.release.yml -----------------------------------------------------------

def seconds(v):
    m = re.fullmatch(r"(\d+)(ms|s|m)?", str(v))
    if not m:
        return None
    n = int(m.group(1))
    return {"ms": n / 1000, "s": n, "m": n * 60, None: n}[m.group(2)]


def check_compose():
    rel = "docker-compose.release.yml"
    with open(os.path.join(ROOT, rel)) as f:
        doc = yaml.safe_load(f)
    svcs = doc.get("services", {})
    profiles = {"cpu": "inference", "tensorrt": "inference-tensorrt", "jetson": "inference-jetson"}
    for name in ["inference", "router", "prometheus", "grafana"]:
        if name not in svcs:
            problem(rel, f"no service {name}")
    for prof, name in profiles.items():
        s = svcs.get(name)
        if s is None:
            problem(rel, f"no worker service for profile {prof}")
            continue
        where = f"{rel} [{name}]"
        if s.get("profiles") != [prof]:
            problem(where, f"profiles {s.get('profiles')}, want [{prof}]")
        if name != "inference":
            aliases = (((s.get("networks") or {}).get("default") or {}).get("aliases") or [])
            if "inference" not in aliases:
                problem(where, "not reachable as `inference` (network alias): the router config and the log grep use that name")
        env = s.get("environment") or {}
        for k in ("EXECUTION_MODE", "STRICT_EP"):
            if not re.fullmatch(rf"\$\{{{k}:-\w+\}}", str(env.get(k, ""))):
                problem(where, f"{k} is not a documented setting (${{{k}:-default}}): {env.get(k)!r}")
        if env.get("TIERSERVE_MODEL_REPOSITORY") != "/models":
            problem(where, "TIERSERVE_MODEL_REPOSITORY is not /models")
        if not any(re.fullmatch(r"\$\{TIERSERVE_MODELS:-[^}]+\}:/models(:ro)?", str(v)) for v in s.get("volumes", [])):
            problem(where, "no ${TIERSERVE_MODELS}:/models volume")
        if s.get("ports"):
            problem(where, "publishes the worker's port: clients go through the router")
        devs = (((s.get("deploy") or {}).get("resources") or {}).get("reservations") or {}).get("devices")
        gpu = bool(devs) and all("gpu" in (d.get("capabilities") or []) for d in devs)
        if prof == "cpu" and devs:
            problem(where, "the cpu profile reserves a device")
        if prof != "cpu" and not gpu:
            problem(where, "no GPU reservation (deploy.resources.reservations.devices, capabilities [gpu])")
        drain = seconds(env.get("TIERSERVE_DRAIN_TIMEOUT_S", 30))
        grace = seconds(s.get("stop_grace_period", "10s"))
        if grace is None or grace <= drain:
            problem(where, f"stop_grace_period {s.get('stop_grace_period')} does not cover the {drain} s drain")
        if s.get("stop_signal") != "SIGTERM":
            problem(where, "stop_signal is not SIGTERM")
        if "/v2/health/ready" not in " ".join((s.get("healthcheck") or {}).get("test") or []):
            problem(where, "healthcheck does not probe /v2/health/ready")
        build = s.get("build") or {}
        if not os.path.exists(os.path.join(ROOT, build.get("dockerfile", "-"))):
            problem(where, f"build.dockerfile {build.get('dockerfile')} does not exist")
        if "ort" not in (build.get("additional_contexts") or {}):
            problem(where, "build has no `ort` context (the ONNX Runtime SDK)")
    for name in ["router", "prometheus", "grafana"]:
        s = svcs.get(name) or {}
        if sorted(s.get("profiles") or []) != sorted(profiles):
            problem(f"{rel} [{name}]", f"profiles {s.get('profiles')}, want every profile")
    for name, s in svcs.items():
        for p in s.get("ports") or []:
            if not str(p).startswith("127.0.0.1:"):
                problem(f"{rel} [{name}]", f"port {p} is not published on 127.0.0.1 only")
        if not s.get("healthcheck"):
            problem(f"{rel} [{name}]", "no healthcheck")
    with open(os.path.join(ROOT, "deploy/docker/router.yaml")) as f:
        rcfg = yaml.safe_load(f)
    backends = [b for p in rcfg.get("pools", []) for b in p.get("backends", [])]
    if backends != ["inference:8000"]:
        problem("deploy/docker/router.yaml", f"backends {backends}, want [inference:8000]")
    r = svcs.get("router") or {}
    if (seconds(r.get("stop_grace_period", "10s")) or 0) <= rcfg.get("drain_timeout_s", 30):
        problem(f"{rel} [router]", "stop_grace_period does not cover drain_timeout_s")

    # the compose stack's Prometheus: the same globals, rules and job names as
    # deploy/prometheus/prometheus.yml, so the alert rules and the dashboard select it alike
    with open(os.path.join(ROOT, "deploy/prometheus/prometheus.yml")) as f:
        ref = yaml.safe_load(f)
    with open(os.path.join(ROOT, "deploy/docker/prometheus.yml")) as f:
        mine = yaml.safe_load(f)
    if mine.get("global") != ref.get("global") or mine.get("rule_files") != ref.get("rule_files"):
        problem("deploy/docker/prometheus.yml", "global or rule_files differ from deploy/prometheus/prometheus.yml")
    jobs = lambda c: sorted(j["job_name"] for j in c.get("scrape_configs", []))
    if jobs(mine) != jobs(ref):
        problem("deploy/docker/prometheus.yml", f"jobs {jobs(mine)}, want {jobs(ref)}")


check_compose()

for p in PROBLEMS:
    print(p)
print(f"lint: {len(PROBLEMS)} problem(s) in deploy/docker/Dockerfile* and docker-compose.release.yml")
sys.exit(1 if PROBLEMS else 0)
