"""Kubernetes manifests (deploy/k8s): every overlay rendered with `kubectl kustomize` and
its objects checked against what the binaries really do.

No cluster is needed or used. The checks read the rendered objects with Python, and take
their facts from the programs themselves: setting names and defaults from `tierserve
--help` and `tierrouter --help`, the router's effective values from `tierrouter
--check-config` on the overlay's own router.yaml, and the probe paths, the port and the
metric the autoscalers use from a worker started with the environment a pod would get.

Each check is a function returning the problems it found; the tests at the end break the
rendered objects on purpose (a toleration for everything, a missing preStop, a router token
that is not the workers' ...) and require the check to name the fault, so a check that can
no longer fail is noticed.
"""
import copy
import functools
import os
import pathlib
import re
import shutil
import signal
import socket
import subprocess
import threading
import time

import pytest

try:
    import yaml
except ImportError:  # pragma: no cover - a machine set up without scripts/setup.sh
    pytest.fail("PyYAML is missing for /usr/bin/python3: scripts/setup.sh installs python3-yaml",
                pytrace=False)

from conftest import BIN, ROOT, SANITIZER_MARKERS, sanitizer_env, track
from helpers import ROUTER_BIN, get

K8S = ROOT / "deploy" / "k8s"
ADAPTER_VALUES = K8S / "prometheus-adapter" / "values.yaml"
OVERLAYS = sorted(p.parent.name for p in (K8S / "overlays").glob("*/kustomization.yaml"))
# The overlays docs/operate/kubernetes.md describes; one that goes missing fails here.
DOCUMENTED_OVERLAYS = ["cpu-only", "hybrid", "hybrid-sensitive"]

# The endpoints DESIGN.md names for health; the live tests below check that both programs
# answer them without credentials (the kubelet sends none).
PROBE_PATHS = {"/v2/health/live", "/v2/health/ready"}
# Variables a pod may set that are not the programs' settings.
OTHER_ENV = {"HOME"}
GPU = "nvidia.com/gpu"
CAPACITY = "tierserve.io/capacity"  # spot or reserved: a pool `tierbench plan` split (docs/operate/capacity.md)
# CoreDNS's default TTL for cluster records: a router may see a pod's address this much
# after it left the headless Service's endpoints.
DNS_TTL_S = 5
# Tokens that stand in for the Secret's values when a pod's environment is replayed here.
TEST_TOKENS = {"worker-token": "k8s-test-worker-token", "admin-token": "k8s-test-admin-token",
               "metrics-token": "k8s-test-metrics-token"}


# ---- rendering and the programs' own facts ------------------------------------------------

def kubectl():
    k = shutil.which("kubectl")
    if not k:
        pytest.fail("kubectl is not on PATH: the Kubernetes manifests are rendered with "
                    "`kubectl kustomize` (scripts/setup.sh installs Debian's kubernetes-client)")
    return k


@functools.lru_cache(maxsize=None)
def _render(overlay):
    p = subprocess.run([kubectl(), "kustomize", str(K8S / "overlays" / overlay)],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, f"kubectl kustomize overlays/{overlay} failed:\n{p.stderr}"
    objs = [o for o in yaml.safe_load_all(p.stdout) if o]
    assert objs, f"overlays/{overlay} rendered nothing"
    return objs


def render(overlay):
    """The overlay's objects (a fresh copy each call: tests may break them)."""
    return copy.deepcopy(_render(overlay))


@functools.lru_cache(maxsize=None)
def worker_settings():
    """{variable: default} from `tierserve --help`."""
    out = subprocess.run([BIN, "--help"], capture_output=True, text=True, timeout=30,
                         env={**os.environ, **sanitizer_env()}).stdout
    found = dict(re.findall(r"^\s+--\S+\s+([A-Z][A-Z0-9_]*)\s+\[([^\]]*)\]", out, re.M))
    assert "EXECUTION_MODE" in found and "TIERSERVE_DRAIN_TIMEOUT_S" in found, out
    return found


@functools.lru_cache(maxsize=None)
def router_variables():
    """The TIERROUTER_* variables `tierrouter --help` lists, {variable: config key}."""
    out = subprocess.run([ROUTER_BIN, "--help"], capture_output=True, text=True, timeout=30,
                         env={**os.environ, **sanitizer_env()}).stdout
    found = {v: k for k, v in re.findall(r"^\s+(\S+)\s+(TIERROUTER_[A-Z0-9_]+)\s+\[", out, re.M)}
    assert "TIERROUTER_WORKER_TOKEN" in found and "TIERROUTER_DRAIN_TIMEOUT_S" in found, out
    return found


@functools.lru_cache(maxsize=None)
def _check_config(cfg_text, env_items):
    """`tierrouter --check-config` on a config text with an environment: (rc, values, log)."""
    d = pathlib.Path(os.environ.get("TMPDIR", "/tmp"))
    path = d / f"k8s-router-{os.getpid()}-{time.monotonic_ns()}.yaml"
    path.write_text(cfg_text)
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith("TIERROUTER_")}
        env.update(sanitizer_env())
        env.update(dict(env_items))
        p = subprocess.run([ROUTER_BIN, "--check-config", "--config", str(path)],
                           capture_output=True, text=True, timeout=30, env=env)
    finally:
        path.unlink()
    values = dict(re.findall(r"^(\S+): (.*)$", p.stdout, re.M))
    return p.returncode, values, p.stderr


# ---- reading the rendered objects ----------------------------------------------------------

def kind(objs, k):
    return [o for o in objs if o.get("kind") == k]


def name(o):
    return o["metadata"]["name"]


def pod_spec(d):
    return d["spec"]["template"]["spec"]


def pod_labels(d):
    return d["spec"]["template"]["metadata"].get("labels", {})


def container(d):
    return pod_spec(d)["containers"][0]


def program(d):
    """tierserve or tierrouter: what the pod runs (its command's first word)."""
    cmd = container(d).get("command") or [""]
    return os.path.basename(cmd[0])


def workers(objs):
    return [d for d in kind(objs, "Deployment") if program(d) == "tierserve"]


def routers(objs):
    return [d for d in kind(objs, "Deployment") if program(d) == "tierrouter"]


def env_of(c, tokens=TEST_TOKENS):
    """A container's environment as the process would see it (Secret keys -> test tokens;
    an optional key is left out, as the kubelet does when it is missing)."""
    out = {}
    for e in c.get("env", []):
        if "value" in e:
            out[e["name"]] = str(e["value"])
        elif "secretKeyRef" in e.get("valueFrom", {}):
            ref = e["valueFrom"]["secretKeyRef"]
            if ref["key"] in tokens and not ref.get("optional"):
                out[e["name"]] = tokens[ref["key"]]
    return out


def secret_ref(c, var):
    for e in c.get("env", []):
        if e["name"] == var:
            ref = e.get("valueFrom", {}).get("secretKeyRef")
            return (ref["name"], ref["key"]) if ref else None
    return None


def worker_setting(d, var):
    return env_of(container(d)).get(var, worker_settings()[var])


def matches(selector, labels):
    """A Kubernetes label selector (matchLabels / matchExpressions, or a plain map as in a
    Service) against a set of labels. An empty selector matches everything."""
    if selector is None:
        return False
    if "matchLabels" not in selector and "matchExpressions" not in selector:
        selector = {"matchLabels": selector}
    for k, v in (selector.get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    for e in selector.get("matchExpressions") or []:
        k, op, vals = e["key"], e["operator"], e.get("values", [])
        if op == "In" and labels.get(k) not in vals:
            return False
        if op == "NotIn" and labels.get(k) in vals:
            return False
        if op == "Exists" and k not in labels:
            return False
        if op == "DoesNotExist" and k in labels:
            return False
    return True


def cpu_cores(q):
    q = str(q)
    return int(q[:-1]) / 1000 if q.endswith("m") else float(q)


def prestop_seconds(c):
    pre = c.get("lifecycle", {}).get("preStop", {})
    if "sleep" in pre:
        return int(pre["sleep"]["seconds"])
    cmd = pre.get("exec", {}).get("command", [])
    if len(cmd) == 2 and os.path.basename(cmd[0]) == "sleep" and cmd[1].isdigit():
        return int(cmd[1])
    return None


def container_port(c, port):
    """The containerPort a probe's or Service's port (a number or a port name) lands on."""
    if isinstance(port, int):
        return port
    for p in c.get("ports", []):
        if p.get("name") == port:
            return p["containerPort"]
    return None


def listen_port(objs, d):
    """The port the program in d really listens on."""
    if program(d) == "tierserve":
        return int(worker_setting(d, "TIERSERVE_HTTP_PORT"))
    return int(router_config(objs, d)["values"]["port"])


def router_config(objs, d):
    """The router's config file (from its ConfigMap) and its effective values."""
    args = container(d).get("command", [])[1:] + container(d).get("args", [])
    path = args[args.index("--config") + 1] if "--config" in args else None
    assert path, f"Deployment {name(d)}: tierrouter is started without --config"
    mount = next((m for m in container(d).get("volumeMounts", [])
                  if path.startswith(m["mountPath"].rstrip("/") + "/")), None)
    assert mount, f"Deployment {name(d)}: nothing is mounted at {path}"
    vol = next(v for v in pod_spec(d).get("volumes", []) if v["name"] == mount["name"])
    assert "configMap" in vol, f"Deployment {name(d)}: {path} is not from a ConfigMap"
    cm_name = vol["configMap"]["name"]
    cms = [o for o in kind(objs, "ConfigMap") if name(o) == cm_name]
    assert cms, f"Deployment {name(d)}: ConfigMap {cm_name} is not in the overlay"
    key = path[len(mount["mountPath"].rstrip("/")) + 1:]
    text = cms[0].get("data", {}).get(key)
    assert text is not None, f"ConfigMap {cm_name} has no key {key}"
    rc, values, log = _check_config(text, tuple(sorted(env_of(container(d)).items())))
    assert rc == 0, f"tierrouter --check-config on {cm_name}/{key} with the pod's env: {log}"
    return {"text": text, "doc": yaml.safe_load(text), "values": values}


def pools(objs):
    """[(router Deployment, pool dict)] over every router's config."""
    return [(d, p) for d in routers(objs) for p in router_config(objs, d)["doc"]["pools"]]


def backend_deployments(objs, backend):
    """The worker Deployments behind one router backend 'svc.ns.svc.cluster.local:port',
    with the problem found on the way (None when it resolves)."""
    host, _, port = backend.rpartition(":")
    parts = host.split(".")
    if len(parts) < 3 or parts[2] != "svc":
        return [], f"backend {backend} is not a Service name <svc>.<namespace>.svc...: pods " \
                   "come and go, the router finds them through a headless Service"
    svc = [s for s in kind(objs, "Service")
           if name(s) == parts[0] and s["metadata"].get("namespace") == parts[1]]
    if not svc:
        return [], f"backend {backend}: no Service {parts[0]} in namespace {parts[1]}"
    s = svc[0]
    if s["spec"].get("clusterIP") != "None":
        return [], f"backend {backend}: Service {parts[0]} is not headless (clusterIP: None), " \
                   "so its name resolves to one virtual address, not to the pods"
    sp = [p for p in s["spec"].get("ports", []) if str(p["port"]) == port]
    if not sp:
        return [], f"backend {backend}: Service {parts[0]} has no port {port}"
    ds = [d for d in workers(objs) if d["metadata"].get("namespace") == parts[1]
          and matches(s["spec"].get("selector"), pod_labels(d))]
    if len(ds) != 1:
        return [], f"backend {backend}: Service {parts[0]} selects {len(ds)} worker Deployments"
    target = sp[0].get("targetPort", sp[0]["port"])
    if container_port(container(ds[0]), target) != listen_port(objs, ds[0]):
        return [], f"backend {backend}: targetPort {target} is not the port tierserve " \
                   f"listens on in {name(ds[0])} ({listen_port(objs, ds[0])})"
    return ds, None


def sensitive_deployments(objs):
    out = []
    for _, p in pools(objs):
        if p.get("sensitive"):
            for b in p.get("backends", []):
                out += backend_deployments(objs, b)[0]
    return out


def is_gpu(d):
    return GPU in container(d).get("resources", {}).get("limits", {})


def required_node_labels(d):
    """Node labels a pod can only be placed on: (key, value) pairs from nodeSelector and from
    required node affinity terms of the form key In [value] (one term)."""
    spec = pod_spec(d)
    out = set((spec.get("nodeSelector") or {}).items())
    req = (spec.get("affinity", {}).get("nodeAffinity", {})
           .get("requiredDuringSchedulingIgnoredDuringExecution", {}))
    terms = req.get("nodeSelectorTerms", [])
    if len(terms) == 1:
        for e in terms[0].get("matchExpressions", []):
            if e["operator"] == "In" and len(e.get("values", [])) == 1:
                out.add((e["key"], e["values"][0]))
    return out


# ---- the checks: each returns the problems it found ----------------------------------------

def check_programs(objs):
    out = []
    for d in kind(objs, "Deployment"):
        cs = pod_spec(d)["containers"]
        if len(cs) != 1:
            out.append(f"Deployment {name(d)}: {len(cs)} containers (one program per pod)")
        elif program(d) not in ("tierserve", "tierrouter"):
            out.append(f"Deployment {name(d)}: command {cs[0].get('command')} runs neither "
                       "tierserve nor tierrouter")
    if not workers(objs) or len(routers(objs)) != 1:
        out.append(f"{len(workers(objs))} worker and {len(routers(objs))} router Deployments")
    return out


def check_env_names(objs):
    out = []
    for d in kind(objs, "Deployment"):
        known = set(worker_settings()) if program(d) == "tierserve" else set(router_variables())
        for e in container(d).get("env", []):
            if e["name"] not in known | OTHER_ENV:
                out.append(f"Deployment {name(d)}: unknown variable {e['name']} "
                           f"(not in `{program(d)} --help`)")
    return out


def check_tokens(objs):
    """Tokens come from a Secret, and the router sends the very token the workers expect."""
    out = []
    for d in kind(objs, "Deployment"):
        for e in container(d).get("env", []):
            if "TOKEN" in e["name"] and "value" in e:
                out.append(f"Deployment {name(d)}: {e['name']} is written into the manifest; "
                           "take it from a Secret")
    want = {secret_ref(container(d), "TIERSERVE_AUTH_TOKEN") for d in workers(objs)}
    if None in want:
        out.append("a worker Deployment has no TIERSERVE_AUTH_TOKEN from a Secret: anything "
                   "that reaches its port could use it")
    for d in routers(objs):
        sent = secret_ref(container(d), "TIERROUTER_WORKER_TOKEN")
        if sent is None or want != {sent}:
            out.append(f"Deployment {name(d)}: TIERROUTER_WORKER_TOKEN is {sent}, the workers "
                       f"expect {sorted(map(str, want))}: every request would be refused 401")
        if secret_ref(container(d), "TIERROUTER_ADMIN_TOKEN") is None:
            out.append(f"Deployment {name(d)}: no TIERROUTER_ADMIN_TOKEN: /admin/* and "
                       "/metrics would be open")
    return out


def check_probes(objs):
    out = []
    for d in kind(objs, "Deployment"):
        c = container(d)
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            get = c.get(probe, {}).get("httpGet")
            if not get:
                out.append(f"Deployment {name(d)}: no {probe} with httpGet")
                continue
            if get.get("path") not in PROBE_PATHS:
                out.append(f"Deployment {name(d)}: {probe} path {get.get('path')} is not one "
                           f"of {sorted(PROBE_PATHS)}")
            if container_port(c, get.get("port")) != listen_port(objs, d):
                out.append(f"Deployment {name(d)}: {probe} port {get.get('port')} is not the "
                           f"port {program(d)} listens on ({listen_port(objs, d)})")
        if c.get("readinessProbe", {}).get("httpGet", {}).get("path") != "/v2/health/ready":
            out.append(f"Deployment {name(d)}: readinessProbe must be /v2/health/ready "
                       "(503 while loading, draining or, for the router, with no backend)")
        if c.get("livenessProbe", {}).get("httpGet", {}).get("path") != "/v2/health/live":
            out.append(f"Deployment {name(d)}: livenessProbe must be /v2/health/live (a "
                       "draining or loading process is alive and must not be killed)")
    for d in workers(objs):
        sp = container(d).get("startupProbe", {})
        budget = sp.get("periodSeconds", 10) * sp.get("failureThreshold", 3)
        # TensorRT builds an engine per model at load; large models take many minutes
        need = 900 if worker_setting(d, "EXECUTION_MODE") == "tensorrt" else 60
        if budget < need:
            out.append(f"Deployment {name(d)}: startupProbe allows {budget} s to get ready, "
                       f"less than {need} s")
    return out


def check_resources(objs):
    out = []
    for d in kind(objs, "Deployment"):
        r = container(d).get("resources", {})
        for part in ("requests", "limits"):
            for res in ("cpu", "memory"):
                if res not in r.get(part, {}):
                    out.append(f"Deployment {name(d)}: no {part}.{res}")
    for d in workers(objs):
        lim = container(d).get("resources", {}).get("limits", {}).get("cpu")
        threads = int(worker_setting(d, "TIERSERVE_INTRA_OP_THREADS"))
        inst = int(worker_setting(d, "TIERSERVE_INSTANCES"))
        if threads == 0:
            out.append(f"Deployment {name(d)}: TIERSERVE_INTRA_OP_THREADS=0 lets ONNX Runtime "
                       "start a thread per core of the node, whatever the CPU limit")
        elif lim is not None and inst * threads > cpu_cores(lim):
            out.append(f"Deployment {name(d)}: {inst} instances x {threads} threads exceed "
                       f"the CPU limit {lim}")
    return out


def check_shutdown(objs):
    """preStop, drain and grace period fit together (docs/router.md "Shutdown")."""
    out = []
    cfgs = [router_config(objs, d) for d in routers(objs)]
    refresh = max((int(c["values"]["dns_refresh_s"]) for c in cfgs), default=0)
    deadline_s = max((int(c["values"][f"deadline_ms.{p}"]) / 1000 for c in cfgs
                      for p in ("urgent", "normal", "batch")), default=0)
    for d in kind(objs, "Deployment"):
        c = container(d)
        pre = prestop_seconds(c)
        if pre is None:
            out.append(f"Deployment {name(d)}: no preStop sleep")
            continue
        if program(d) == "tierserve":
            drain = int(worker_setting(d, "TIERSERVE_DRAIN_TIMEOUT_S"))
            if pre < refresh + DNS_TTL_S:
                out.append(f"Deployment {name(d)}: preStop {pre} s is shorter than the routers' "
                           f"dns_refresh_s ({refresh}) + DNS TTL ({DNS_TTL_S}): they still send "
                           "new requests when the drain starts")
        else:
            drain = int(router_config(objs, d)["values"]["drain_timeout_s"])
        grace = pod_spec(d).get("terminationGracePeriodSeconds", 30)
        if grace <= pre + drain:
            out.append(f"Deployment {name(d)}: terminationGracePeriodSeconds {grace} is not above "
                       f"preStop {pre} + drain {drain}: SIGKILL comes before the drain ends")
        if drain < deadline_s:
            out.append(f"Deployment {name(d)}: drain {drain} s is shorter than the longest "
                       f"request deadline ({deadline_s:g} s): a drain would cut requests")
    return out


def check_security(objs):
    out = []
    for d in kind(objs, "Deployment"):
        spec, c = pod_spec(d), container(d)
        psc, csc = spec.get("securityContext", {}), c.get("securityContext", {})
        if not psc.get("runAsNonRoot") or psc.get("runAsUser", 0) == 0:
            out.append(f"Deployment {name(d)}: not runAsNonRoot with a non-zero runAsUser")
        if csc.get("allowPrivilegeEscalation") is not False:
            out.append(f"Deployment {name(d)}: allowPrivilegeEscalation is not false")
        if csc.get("readOnlyRootFilesystem") is not True:
            out.append(f"Deployment {name(d)}: readOnlyRootFilesystem is not true")
        if "ALL" not in csc.get("capabilities", {}).get("drop", []):
            out.append(f"Deployment {name(d)}: capabilities not dropped (drop: [ALL])")
        if spec.get("automountServiceAccountToken") is not False:
            out.append(f"Deployment {name(d)}: mounts a service account token it never uses")
        # Service links put <SERVICE>_PORT=tcp://ip:port into the environment: for the
        # Service tierrouter that is TIERROUTER_PORT, which the router refuses (exit 64).
        if spec.get("enableServiceLinks") is not False:
            out.append(f"Deployment {name(d)}: enableServiceLinks is not false: Services "
                       "would inject TIERROUTER_*/TIERSERVE_* variables the programs read")
        img = c.get("image", "")
        if ":" not in img.rsplit("/", 1)[-1] and "@" not in img or img.endswith(":latest"):
            out.append(f"Deployment {name(d)}: image {img} has no fixed tag")
    return out


def check_gpu(objs):
    out = []
    for d in routers(objs):
        if is_gpu(d):
            out.append(f"Deployment {name(d)}: the router holds a GPU")
    for d in workers(objs):
        c, spec = container(d), pod_spec(d)
        mode = worker_setting(d, "EXECUTION_MODE")
        gpu_tol = [t for t in spec.get("tolerations", []) if t.get("key") == GPU]
        req = c.get("resources", {}).get("requests", {})
        if is_gpu(d):
            if mode != "tensorrt" or worker_setting(d, "STRICT_EP") not in ("1", "true"):
                out.append(f"Deployment {name(d)}: holds a GPU but runs EXECUTION_MODE={mode} "
                           f"STRICT_EP={worker_setting(d, 'STRICT_EP')} (want tensorrt, 1)")
            if not any(k.startswith("nvidia.com/") for k, _ in required_node_labels(d)):
                out.append(f"Deployment {name(d)}: GPU pod without a nodeSelector for GPU nodes")
            if not gpu_tol:
                out.append(f"Deployment {name(d)}: GPU pod does not tolerate the {GPU} taint")
            if str(req.get(GPU, c["resources"]["limits"][GPU])) != str(c["resources"]["limits"][GPU]):
                out.append(f"Deployment {name(d)}: {GPU} request differs from its limit")
        else:
            if mode != "cpu":
                out.append(f"Deployment {name(d)}: no GPU but EXECUTION_MODE={mode} (want cpu: "
                           "a CPU pool is never degraded and raises no tier alerts)")
            if gpu_tol or GPU in req:
                out.append(f"Deployment {name(d)}: a CPU pod asks for or tolerates {GPU}")
    return out


def check_sensitive(objs):
    """Pods of pools marked sensitive run only on nodes set aside for them, and nothing else
    runs there."""
    out = []
    sens = sensitive_deployments(objs)
    others = [d for d in kind(objs, "Deployment") if d not in sens]
    own_keys, own_labels = set(), set()
    for d in sens:
        tols = pod_spec(d).get("tolerations", [])
        keys = {t.get("key") for t in tols}
        if not tols or None in keys or "" in keys or len(keys) != 1 or GPU in keys:
            out.append(f"Deployment {name(d)}: a sensitive pod tolerates {sorted(map(str, keys))}; "
                       "it must tolerate its own taint and nothing else")
        own_keys |= keys - {None, ""}
        labels = required_node_labels(d)
        if not labels:
            out.append(f"Deployment {name(d)}: a sensitive pod with no required node label: it "
                       "could be scheduled on any untainted, shared node")
        own_labels |= labels
    for d in others:
        for t in pod_spec(d).get("tolerations", []):
            if not t.get("key"):
                out.append(f"Deployment {name(d)}: a toleration without a key tolerates every "
                           "taint, the sensitive nodes' included")
            elif t["key"] in own_keys:
                out.append(f"Deployment {name(d)}: tolerates the sensitive nodes' taint "
                           f"{t['key']}")
        if own_labels & required_node_labels(d):
            out.append(f"Deployment {name(d)}: selects the sensitive nodes' label")
    return out


def check_router_pools(objs):
    out = []
    served = set()
    for _, p in pools(objs):
        for b in p.get("backends", []):
            ds, why = backend_deployments(objs, b)
            if why:
                out.append(f"pool {p['name']}: {why}")
                continue
            served.update(name(d) for d in ds)
            if (p.get("kind") == "gpu") != is_gpu(ds[0]):
                out.append(f"pool {p['name']} (kind {p.get('kind')}) is backed by "
                           f"{name(ds[0])}, which {'holds' if is_gpu(ds[0]) else 'has no'} GPU")
    for d in workers(objs):
        if name(d) not in served:
            out.append(f"Deployment {name(d)}: no router pool sends it traffic")
    return out


def check_pdbs(objs):
    out = []
    for d in kind(objs, "Deployment"):
        pdbs = [p for p in kind(objs, "PodDisruptionBudget")
                if matches(p["spec"].get("selector"), pod_labels(d))]
        if len(pdbs) != 1:
            out.append(f"Deployment {name(d)}: {len(pdbs)} PodDisruptionBudgets select it")
            continue
        s = pdbs[0]["spec"]
        if "maxUnavailable" in s and int(s["maxUnavailable"]) < 1:
            out.append(f"PodDisruptionBudget {name(pdbs[0])}: maxUnavailable 0 blocks every drain")
        if "minAvailable" in s:
            out.append(f"PodDisruptionBudget {name(pdbs[0])}: use maxUnavailable, which "
                       "follows the autoscaler's replica count")
    return out


def adapter_metrics():
    """{metric the HPA asks for: series the adapter reads} from the adapter's rules."""
    doc = yaml.safe_load(ADAPTER_VALUES.read_text())
    out = {}
    for r in doc["rules"]["custom"]:
        series = re.match(r"\s*([a-zA-Z_:][a-zA-Z0-9_:]*)", r["seriesQuery"]).group(1)
        out[r.get("name", {}).get("as") or series] = series
    return out


def check_autoscaling(objs):
    out = []
    hpas = kind(objs, "HorizontalPodAutoscaler")
    served = adapter_metrics()
    qhigh = min((float(router_config(objs, r)["values"]["policy.queue.high"])
                 for r in routers(objs)), default=None)
    for d in workers(objs):
        mine = [h for h in hpas if h["spec"]["scaleTargetRef"]["kind"] == "Deployment"
                and h["spec"]["scaleTargetRef"]["name"] == name(d)]
        if len(mine) != 1:
            out.append(f"Deployment {name(d)}: {len(mine)} HorizontalPodAutoscalers")
            continue
        h = mine[0]["spec"]
        if "replicas" in d["spec"]:
            out.append(f"Deployment {name(d)}: sets replicas although an HPA owns the count "
                       "(each apply would reset it)")
        labels = pod_labels(d)
        if labels.get(CAPACITY) == "spot":
            # a pool's spot part (`tierbench plan`): its reserved floor is what stays
            floor = [f for f in workers(objs) if pod_labels(f).get(CAPACITY) == "reserved"
                     and pod_labels(f).get("tierserve.io/pool") == labels.get("tierserve.io/pool")]
            if len(floor) != 1:
                out.append(f"Deployment {name(d)}: a spot part without one reserved floor of its pool")
            if h.get("minReplicas", 1) < 1:
                out.append(f"HPA {name(mine[0])}: minReplicas below 1")
        elif h.get("minReplicas", 1) < 2:
            out.append(f"HPA {name(mine[0])}: minReplicas below 2 leaves nothing during a drain")
        for m in h.get("metrics", []):
            spec = m.get(m["type"][0].lower() + m["type"][1:], {})
            metric = spec.get("metric", {}).get("name")
            if m["type"] not in ("Pods", "External") or metric not in served:
                out.append(f"HPA {name(mine[0])}: metric {m['type']}/{metric} is not served by "
                           f"the prometheus-adapter rules ({sorted(served)})")
                continue
            target = float(spec.get("target", {}).get("averageValue", 0))
            if is_gpu(d) and qhigh is not None and not 0 < target < qhigh:
                out.append(f"HPA {name(mine[0])}: target {target:g} per pod is not below the "
                           f"router's policy.queue.high ({qhigh:g}): traffic would move to CPU "
                           "before the GPU pool grows")
    return out


def network_peers(objs, d):
    """(policies selecting d's pods with Ingress, [(peer, ports)] they allow in)."""
    pols = [p for p in kind(objs, "NetworkPolicy")
            if "Ingress" in p["spec"].get("policyTypes", ["Ingress"])
            and matches(p["spec"].get("podSelector"), pod_labels(d))]
    peers = []
    for p in pols:
        for rule in p["spec"].get("ingress") or []:
            for peer in rule.get("from") or [None]:
                peers.append((p, peer, rule.get("ports")))
    return pols, peers


def check_network(objs):
    """Workers take connections from the routers only (and Prometheus in the monitoring
    namespace on the metrics port, except the sensitive pool); they open none."""
    out = []
    sens = sensitive_deployments(objs)
    router_labels = [pod_labels(r) for r in routers(objs)]
    pod_sets = [pod_labels(d) for d in kind(objs, "Deployment")]
    for d in workers(objs):
        pols, peers = network_peers(objs, d)
        if not pols:
            out.append(f"Deployment {name(d)}: no NetworkPolicy restricts who reaches it")
            continue
        port = listen_port(objs, d)
        for pol, peer, ports in peers:
            where = f"NetworkPolicy {name(pol)}"
            if peer is None:
                out.append(f"{where}: an ingress rule without `from` admits every source")
                continue
            if not ports or any(container_port(container(d), p.get("port")) != port for p in ports):
                out.append(f"{where}: ingress on ports {ports}, not only the worker's {port}")
            if "ipBlock" in peer:
                out.append(f"{where}: ingress from an ipBlock {peer['ipBlock']}")
            elif "namespaceSelector" not in peer:
                picked = [lb for lb in pod_sets if matches(peer.get("podSelector"), lb)]
                if not picked or any(lb not in router_labels for lb in picked):
                    out.append(f"{where}: ingress from pods {peer.get('podSelector')} that are "
                               "not only the routers")
            else:
                ns = peer["namespaceSelector"].get("matchLabels", {})
                pods = (peer.get("podSelector") or {}).get("matchLabels", {})
                if d in sens:
                    out.append(f"{where}: the sensitive pool admits another namespace {ns}")
                elif ns.get("kubernetes.io/metadata.name") != "monitoring" or \
                        pods.get("app.kubernetes.io/name") != "prometheus":
                    out.append(f"{where}: ingress from namespace {ns} pods {pods}: only "
                               "Prometheus in namespace monitoring may scrape workers")
        if not any("Egress" in p["spec"].get("policyTypes", []) and not p["spec"].get("egress")
                   for p in pols):
            out.append(f"Deployment {name(d)}: egress not denied (a worker dials nothing)")
    # the routers must still be let out to the workers they proxy to
    for r in routers(objs):
        pols = [p for p in kind(objs, "NetworkPolicy")
                if "Egress" in p["spec"].get("policyTypes", [])
                and matches(p["spec"].get("podSelector"), pod_labels(r))]
        if not pols:
            continue
        for d in workers(objs):
            port = listen_port(objs, d)
            ok = any((not rule.get("to") or any(matches(to.get("podSelector"), pod_labels(d))
                                                and "namespaceSelector" not in to
                                                for to in rule["to"]))
                     and any(pt.get("port") == port for pt in rule.get("ports") or [{"port": port}])
                     for pol in pols for rule in pol["spec"].get("egress") or [])
            if not ok:
                out.append(f"Deployment {name(r)}: its egress policy does not let it reach "
                           f"{name(d)} on port {port}")
    return out


CHECKS = [check_programs, check_env_names, check_tokens, check_probes, check_resources,
          check_shutdown, check_security, check_gpu, check_sensitive, check_router_pools,
          check_pdbs, check_autoscaling, check_network]


# ---- the overlays as shipped -----------------------------------------------------------------

def test_overlays_present():
    assert OVERLAYS == DOCUMENTED_OVERLAYS


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_renders_into_one_namespace(overlay):
    objs = render(overlay)
    assert {o["metadata"].get("namespace") for o in objs} == {"tierserve"}, overlay


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__[len("check_"):])
@pytest.mark.parametrize("overlay", OVERLAYS)
def test_overlay(overlay, check):
    problems = check(render(overlay))
    assert problems == [], "\n".join(problems)


def test_overlays_hold_the_pools_they_promise():
    def gpu_and_sensitive(overlay):
        objs = render(overlay)
        return (sorted(name(d) for d in workers(objs) if is_gpu(d)),
                sorted(name(d) for d in sensitive_deployments(objs)))
    assert gpu_and_sensitive("cpu-only") == ([], [])
    assert gpu_and_sensitive("hybrid") == (["tierserve-gpu"], [])
    assert gpu_and_sensitive("hybrid-sensitive") == (["tierserve-gpu"], ["tierserve-sensitive"])


# ---- the checks can fail: each fault below must be named -----------------------------------

def dep(objs, n):
    return next(d for d in kind(objs, "Deployment") if name(d) == n)


def obj(objs, k, n):
    return next(o for o in kind(objs, k) if name(o) == n)


def set_env(d, var, value):
    c = container(d)
    c["env"] = [e for e in c["env"] if e["name"] != var]
    if value is not None:
        c["env"].append({"name": var, "value": value})


def edit_router_yaml(objs, fn):
    cm = next(o for o in kind(objs, "ConfigMap") if name(o).startswith("tierrouter-config"))
    doc = yaml.safe_load(cm["data"]["router.yaml"])
    fn(doc)
    cm["data"]["router.yaml"] = yaml.safe_dump(doc)


def _wildcard_toleration(o):
    pod_spec(dep(o, "tierserve-cpu")).setdefault("tolerations", []).append({"operator": "Exists"})


def _gpu_on_cpu_pool(o):
    container(dep(o, "tierserve-cpu"))["resources"]["limits"][GPU] = 1


def _open_ingress(o):
    obj(o, "NetworkPolicy", "tierserve-cpu")["spec"]["ingress"].append({"ports": [{"port": 8000}]})


def _prometheus_into_sensitive(o):
    src = obj(o, "NetworkPolicy", "tierserve-gpu")["spec"]["ingress"][1]
    obj(o, "NetworkPolicy", "tierserve-sensitive")["spec"]["ingress"].append(copy.deepcopy(src))


def _other_pods_into_workers(o):
    rule = obj(o, "NetworkPolicy", "tierserve-gpu")["spec"]["ingress"][0]
    rule["from"][0]["podSelector"] = {"matchLabels": {"app.kubernetes.io/part-of": "tierserve"}}


def _router_token_mismatch(o):
    for e in container(dep(o, "tierrouter"))["env"]:
        if e["name"] == "TIERROUTER_WORKER_TOKEN":
            e["valueFrom"]["secretKeyRef"]["key"] = "admin-token"


def _literal_token(o):
    set_env(dep(o, "tierserve-cpu"), "TIERSERVE_AUTH_TOKEN", "hunter2hunter2")


def _backend_not_headless(o):
    obj(o, "Service", "tierserve-cpu")["spec"].pop("clusterIP")


def _backend_wrong_namespace(o):
    def fn(doc):
        doc["pools"][0]["backends"] = ["tierserve-gpu.default.svc.cluster.local:8000"]
    edit_router_yaml(o, fn)


def _sensitive_pool_on_shared_pods(o):
    def fn(doc):
        doc["pools"][1]["sensitive"] = True   # the general CPU pool
    edit_router_yaml(o, fn)


def _short_router_drain(o):
    def fn(doc):
        doc["drain_timeout_s"] = 10
    edit_router_yaml(o, fn)


def _long_router_drain(o):
    def fn(doc):
        doc["drain_timeout_s"] = 70   # 5 + 70 >= 75
    edit_router_yaml(o, fn)


def _hpa_target_above_policy(o):
    obj(o, "HorizontalPodAutoscaler", "tierserve-gpu")["spec"]["metrics"][0]["pods"]["target"][
        "averageValue"] = "10"


def _hpa_unknown_metric(o):
    obj(o, "HorizontalPodAutoscaler", "tierserve-cpu")["spec"]["metrics"][0]["pods"]["metric"][
        "name"] = "tierserve_queue_length"


def _drop(k, n):
    def fn(o):
        o.remove(obj(o, k, n))
    return fn


def _on_dep(n, fn):
    def go(o):
        fn(dep(o, n))
    return go


MUTATIONS = [
    ("wildcard toleration", _wildcard_toleration, check_sensitive, "tolerates every taint"),
    ("sensitive without nodeSelector",
     _on_dep("tierserve-sensitive", lambda d: pod_spec(d).pop("nodeSelector")),
     check_sensitive, "no required node label"),
    ("sensitive tolerates GPU taint",
     _on_dep("tierserve-sensitive", lambda d: pod_spec(d)["tolerations"].append(
         {"key": GPU, "operator": "Exists", "effect": "NoSchedule"})),
     check_sensitive, "its own taint and nothing else"),
    ("CPU pool tolerates sensitive taint",
     _on_dep("tierserve-cpu", lambda d: pod_spec(d).setdefault("tolerations", []).append(
         {"key": "tierserve.io/sensitive", "operator": "Exists"})),
     check_sensitive, "tolerates the sensitive nodes' taint"),
    ("sensitive pool on shared pods", _sensitive_pool_on_shared_pods, check_sensitive,
     "no required node label"),
    ("GPU limit on the CPU pool", _gpu_on_cpu_pool, check_gpu, "EXECUTION_MODE=cpu"),
    ("GPU pool without STRICT_EP", _on_dep("tierserve-gpu", lambda d: set_env(d, "STRICT_EP", None)),
     check_gpu, "STRICT_EP=0"),
    ("GPU pool on auto", _on_dep("tierserve-gpu", lambda d: set_env(d, "EXECUTION_MODE", "auto")),
     check_gpu, "EXECUTION_MODE=auto"),
    ("GPU pool anywhere", _on_dep("tierserve-gpu", lambda d: pod_spec(d).pop("nodeSelector")),
     check_gpu, "nodeSelector for GPU nodes"),
    ("CPU pool on cuda", _on_dep("tierserve-cpu", lambda d: set_env(d, "EXECUTION_MODE", "cuda")),
     check_gpu, "no GPU but EXECUTION_MODE=cuda"),
    ("no preStop", _on_dep("tierserve-gpu", lambda d: container(d).pop("lifecycle")),
     check_shutdown, "no preStop"),
    ("worker grace too short",
     _on_dep("tierserve-cpu", lambda d: pod_spec(d).update(terminationGracePeriodSeconds=75)),
     check_shutdown, "SIGKILL comes before the drain ends"),
    ("worker drain from the default", _on_dep("tierserve-cpu", lambda d: set_env(
        d, "TIERSERVE_DRAIN_TIMEOUT_S", None)), check_shutdown, "shorter than the longest"),
    ("worker preStop too short", _on_dep("tierserve-gpu", lambda d: container(d)["lifecycle"][
        "preStop"]["exec"].update(command=["sleep", "5"])), check_shutdown, "dns_refresh_s"),
    ("router drain shorter than deadlines", _short_router_drain, check_shutdown,
     "shorter than the longest"),
    ("router drain past its grace", _long_router_drain, check_shutdown, "SIGKILL comes before"),
    ("no startupProbe", _on_dep("tierserve-gpu", lambda d: container(d).pop("startupProbe")),
     check_probes, "no startupProbe"),
    ("startupProbe too short for TensorRT", _on_dep("tierserve-gpu", lambda d: container(d)[
        "startupProbe"].update(failureThreshold=30)), check_probes, "less than 900 s"),
    ("probe path typo", _on_dep("tierserve-cpu", lambda d: container(d)["readinessProbe"][
        "httpGet"].update(path="/v2/health/readyz")), check_probes, "/v2/health/readyz"),
    ("probe on the wrong port", _on_dep("tierrouter", lambda d: container(d)["livenessProbe"][
        "httpGet"].update(port=8000)), check_probes, "listens on (9000)"),
    ("liveness on ready", _on_dep("tierserve-cpu", lambda d: container(d)["livenessProbe"][
        "httpGet"].update(path="/v2/health/ready")), check_probes, "livenessProbe must be"),
    ("no memory limit", _on_dep("tierrouter", lambda d: container(d)["resources"]["limits"].pop(
        "memory")), check_resources, "no limits.memory"),
    ("ORT threads unbounded", _on_dep("tierserve-cpu", lambda d: set_env(
        d, "TIERSERVE_INTRA_OP_THREADS", None)), check_resources, "a thread per core"),
    ("threads past the CPU limit", _on_dep("tierserve-cpu", lambda d: set_env(
        d, "TIERSERVE_INSTANCES", "4")), check_resources, "exceed the CPU limit"),
    ("unknown variable", _on_dep("tierserve-cpu", lambda d: set_env(
        d, "TIERSERVE_DRAIN_TIMEOUT", "60")), check_env_names, "unknown variable TIERSERVE_DRAIN_TIMEOUT"),
    ("router variable on a worker", _on_dep("tierserve-cpu", lambda d: set_env(
        d, "TIERROUTER_LOG_LEVEL", "info")), check_env_names, "unknown variable TIERROUTER_LOG_LEVEL"),
    ("service links on", _on_dep("tierrouter", lambda d: pod_spec(d).update(
        enableServiceLinks=True)), check_security, "enableServiceLinks"),
    ("writable root", _on_dep("tierserve-sensitive", lambda d: container(d)["securityContext"].update(
        readOnlyRootFilesystem=False)), check_security, "readOnlyRootFilesystem"),
    ("root", _on_dep("tierserve-gpu", lambda d: pod_spec(d)["securityContext"].update(
        runAsUser=0)), check_security, "runAsNonRoot"),
    ("latest image", _on_dep("tierrouter", lambda d: container(d).update(
        image="registry.example.com/tierserve:latest")), check_security, "no fixed tag"),
    ("router token is not the workers'", _router_token_mismatch, check_tokens, "refused 401"),
    ("literal token", _literal_token, check_tokens, "written into the manifest"),
    ("backend Service not headless", _backend_not_headless, check_router_pools, "not headless"),
    ("backend in another namespace", _backend_wrong_namespace, check_router_pools,
     "no Service tierserve-gpu in namespace default"),
    ("no PDB", _drop("PodDisruptionBudget", "tierserve-gpu"), check_pdbs, "0 PodDisruptionBudgets"),
    ("no HPA", _drop("HorizontalPodAutoscaler", "tierserve-sensitive"), check_autoscaling,
     "0 HorizontalPodAutoscalers"),
    ("replicas beside an HPA", _on_dep("tierserve-gpu", lambda d: d["spec"].update(replicas=2)),
     check_autoscaling, "sets replicas"),
    ("HPA metric the adapter lacks", _hpa_unknown_metric, check_autoscaling,
     "tierserve_queue_length"),
    ("HPA target above the policy", _hpa_target_above_policy, check_autoscaling,
     "policy.queue.high"),
    ("no NetworkPolicy", _drop("NetworkPolicy", "tierserve-sensitive"), check_network,
     "no NetworkPolicy"),
    ("ingress from anywhere", _open_ingress, check_network, "without `from`"),
    ("Prometheus into the sensitive pool", _prometheus_into_sensitive, check_network,
     "sensitive pool admits another namespace"),
    ("every pod of the app into the GPU pool", _other_pods_into_workers, check_network,
     "not only the routers"),
    ("workers may dial out", lambda o: obj(o, "NetworkPolicy", "tierserve-cpu")["spec"][
        "egress"].append({}), check_network, "egress not denied"),
    ("router cannot reach the workers", lambda o: obj(o, "NetworkPolicy", "tierrouter")["spec"][
        "egress"].pop(0), check_network, "does not let it reach"),
]


@pytest.mark.parametrize("label,mutate,check,needle", MUTATIONS, ids=[m[0] for m in MUTATIONS])
def test_check_names_the_fault(label, mutate, check, needle):
    objs = render("hybrid-sensitive")
    assert check(objs) == [], "the overlay itself must pass before it is broken"
    mutate(objs)
    problems = check(objs)
    assert any(needle in p for p in problems), f"{label}: {check.__name__} said {problems}"


# ---- the pods' environments, replayed on the real programs ---------------------------------

class Proc:
    """A program started with a pod's environment on 127.0.0.1, port 0."""

    def __init__(self, cmd, env, log):
        self.log = log
        full = {k: v for k, v in os.environ.items()
                if not k.startswith(("TIERSERVE_", "TIERROUTER_"))
                and k not in ("EXECUTION_MODE", "STRICT_EP")}
        full.update(sanitizer_env())
        full.update(env)
        self.proc = track(subprocess.Popen(cmd, stdout=subprocess.DEVNULL,
                                           stderr=open(log, "wb"), env=full))
        self.port = None

    def text(self):
        return self.log.read_text(errors="replace")

    def wait_port(self, timeout=30):
        deadline = time.time() + timeout
        while time.time() < deadline and self.proc.poll() is None:
            m = re.search(r"listening on [^:\s]+:(\d+)", self.text())
            if m:
                self.port = int(m.group(1))
                return True
            time.sleep(0.05)
        return False

    def get(self, path, headers=None):
        """One GET on a fresh connection, no retry: (status, body)."""
        r = get(self.port, path, headers)
        return r.status, r.body

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout=90)
        text = self.text()
        assert not [m for m in SANITIZER_MARKERS if m in text], text[-4000:]
        return code


def worker_cases():
    return [(o, name(d)) for o in OVERLAYS for d in workers(_render(o))]


@pytest.mark.parametrize("overlay,deployment", worker_cases())
def test_worker_pod_environment_on_the_real_worker(overlay, deployment, tmp_path):
    """The worker, started with exactly the pod's environment (only the address, port,
    model folder, HOME and TensorRT cache moved to this machine), takes every value, answers
    the probe paths without a token, refuses everything else without one, and exports the
    metric its autoscaler scales on."""
    objs = render(overlay)
    d = dep(objs, deployment)
    env = env_of(container(d))
    repo = tmp_path / "repo"
    shutil.copytree(ROOT / "models" / "demo", repo / "demo")
    env.update({"TIERSERVE_HTTP_ADDRESS": "127.0.0.1", "TIERSERVE_HTTP_PORT": "0",
                "TIERSERVE_MODEL_REPOSITORY": str(repo), "HOME": str(tmp_path)})
    if "TIERSERVE_TRT_CACHE_DIR" in env:
        (tmp_path / "trt").mkdir()
        env["TIERSERVE_TRT_CACHE_DIR"] = str(tmp_path / "trt")
    w = Proc([BIN], env, tmp_path / "worker.log")
    if not w.wait_port():
        # Without TensorRT on this machine the GPU pod's STRICT_EP=1 must refuse (78), not
        # fall back; any other exit is a setting the worker did not take.
        code = w.proc.wait(timeout=30)
        assert not [m for m in SANITIZER_MARKERS if m in w.text()], w.text()[-4000:]
        assert is_gpu(d) and code == 78, f"exit {code}:\n{w.text()[-3000:]}"
        assert "STRICT_EP=1 refusing to start: requested tier tensorrt" in w.text()
        return
    deadline = time.time() + 60
    while time.time() < deadline and w.get("/v2/health/ready")[0] != 200:
        time.sleep(0.1)
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        path = container(d)[probe]["httpGet"]["path"]
        assert w.get(path)[0] == 200, f"{probe} {path}"
    assert w.get("/v2/status")[0] == 401, "the worker token is not in force"
    auth = {"Authorization": f"Bearer {TEST_TOKENS['worker-token']}"}
    code, body = w.get("/v2/status", auth)
    assert code == 200
    want_tier = "tensorrt" if is_gpu(d) else "cpu"
    assert f'"tier":"{want_tier}"' in body.decode().replace(" ", ""), body[:400]
    code, body = w.get("/metrics", auth)
    assert code == 200
    for series in adapter_metrics().values():
        assert re.search(rf"^{series}\{{", body.decode(), re.M), f"no {series} in /metrics"
    assert w.stop() == 0, w.text()[-3000:]


class NxDomainServer:
    """A DNS server on 127.0.0.1 that answers every question NXDOMAIN: the router asks it
    for the backends' Service names, and nothing leaves this machine."""

    def __init__(self):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.1)
        self.port = self.sock.getsockname()[1]
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while not self.stopping.is_set():
            try:
                q, peer = self.sock.recvfrom(4096)
            except socket.timeout:
                continue
            end = q.find(b"\0", 12)
            if len(q) < 12 or end < 0 or len(q) < end + 5:
                continue
            # same id; QR, RD, RA, RCODE 3; the question echoed; no answers
            self.sock.sendto(q[:2] + b"\x81\x83\x00\x01\x00\x00\x00\x00\x00\x00"
                             + q[12:end + 5], peer)

    def close(self):
        self.stopping.set()
        self.thread.join(timeout=5)
        self.sock.close()


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_router_pod_on_the_real_router(overlay, tmp_path):
    """The router, started with the overlay's router.yaml and the pod's environment
    (address and port moved to 127.0.0.1:0, DNS asked of a local server that knows no
    names), looks its backends up by name and answers its probe paths without a token:
    live 200, ready 503 while no backend is healthy. A Service link variable would stop it
    (why enableServiceLinks is off)."""
    objs = render(overlay)
    d = routers(objs)[0]
    cfg = router_config(objs, d)
    names = {b.rpartition(":")[0] for p in cfg["doc"]["pools"] for b in p["backends"]}
    dns = NxDomainServer()
    try:
        path = tmp_path / "router.yaml"
        path.write_text(cfg["text"] + f'\ndns_nameserver: "127.0.0.1:{dns.port}"\n')
        env = env_of(container(d))
        env.update({"TIERROUTER_ADDRESS": "127.0.0.1", "TIERROUTER_PORT": "0"})
        r = Proc([ROUTER_BIN, "--config", str(path)], env, tmp_path / "router.log")
        assert r.wait_port(), r.text()[-3000:]
        # every name asked and answered, so no lookup is pending when the router stops
        deadline = time.time() + 20
        while time.time() < deadline and not all(f"resolving {n} failed" in r.text() for n in names):
            time.sleep(0.05)
        assert all(f"resolving {n} failed" in r.text() for n in names), r.text()[-3000:]
        got = {}
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            p = container(d)[probe]["httpGet"]["path"]
            got[p] = r.get(p)[0]
        assert got == {"/v2/health/live": 200, "/v2/health/ready": 503}, got
        assert r.get("/admin/status")[0] == 401, "the admin token is not in force"
        assert r.stop() == 0, r.text()[-3000:]
    finally:
        dns.close()
    rc, _, log = _check_config(cfg["text"], tuple(sorted(
        {**env_of(container(d)), "TIERROUTER_PORT": "tcp://10.0.0.1:9000"}.items())))
    assert rc == 64 and "TIERROUTER_PORT" in log, log


KEDA = K8S / "keda"


def test_keda_scaledobjects_match_the_hpas_and_what_the_router_exports(tmp_path):
    """deploy/k8s/keda: each ScaledObject is the KEDA variant of its pool's HPA (issue 26):
    same Deployment, bounds and behavior; a Prometheus trigger on a router metric that a live
    tierrouter exports for a pool of that name in the overlay's router config; AverageValue 1
    (replicas = the gauge)."""
    from helpers import Router, metrics_text
    # the hybrid overlay has the gpu and cpu pools, hybrid-sensitive adds the sensitive one
    hpas, deployments, pool_names, exported = {}, set(), [], ""
    for overlay in ("hybrid", "hybrid-sensitive"):
        objs = render(overlay)
        hpas.update({h["spec"]["scaleTargetRef"]["name"]: h["spec"] for h in kind(objs, "HorizontalPodAutoscaler")})
        deployments |= {name(d) for d in workers(objs)}
        cfg = router_config(objs, routers(objs)[0])["doc"]
        pool_names += [p["name"] for p in cfg["pools"] if p["name"] not in pool_names]
        # what a router with these pools exports (backends that answer nothing: the series exist)
        r = Router("address: 127.0.0.1\npools:\n" + "".join(
            f"  - name: {p['name']}\n    kind: {p['kind']}\n    backends: [\"127.0.0.1:9\"]\n" for p in cfg["pools"]),
            tmp_path)
        try:
            exported += metrics_text(r)
        finally:
            assert r.stop() == 0
    sos = [yaml.safe_load(p.read_text()) for p in sorted(KEDA.glob("*.yaml"))]
    assert len(sos) >= 3
    for so in sos:
        assert so["apiVersion"] == "keda.sh/v1alpha1" and so["kind"] == "ScaledObject"
        spec = so["spec"]
        target = spec["scaleTargetRef"]["name"]
        assert target in deployments, (target, deployments)
        h = hpas[target]
        assert spec["minReplicaCount"] == h["minReplicas"] and spec["maxReplicaCount"] == h["maxReplicas"], target
        assert spec["advanced"]["horizontalPodAutoscalerConfig"]["behavior"] == h["behavior"], target
        assert spec["pollingInterval"] == 15  # the HPA controller's sync period
        (t,) = spec["triggers"]
        assert t["type"] == "prometheus" and t["metricType"] == "AverageValue" and t["metadata"]["threshold"] == "1"
        m = re.fullmatch(r'sum\((tierrouter_[a-z_]+)\{pool="([^"]+)"\}\)', t["metadata"]["query"])
        assert m, t["metadata"]["query"]
        series, pool = m.groups()
        assert pool in pool_names, (pool, pool_names)
        assert target == f"tierserve-{pool}"
        assert re.search(rf'^{series}\{{pool="{re.escape(pool)}"\}} \d+$', exported, re.M), \
            f"{series} for pool {pool} is not in the router's /metrics"
