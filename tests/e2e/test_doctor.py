"""`tierserve doctor`: the real binary against the real provider libraries of this machine.

This machine has no GPU: every GPU tier must fail, the doctor must name the missing
libraries (which ones differs between machines, so nothing here names one) and exit 78;
`cpu` always passes. Its verdict must be the one a real worker with the same EXECUTION_MODE
reports in /v2/status.
"""
import json
import os
import re
import subprocess

import pytest

from conftest import BIN, ROOT, SANITIZER_MARKERS, sanitizer_env, start_worker

DEMO_REPO = ROOT / "models"
LOADER_MISSING = re.compile(r"(lib\S+): cannot open shared object file")
SONAME = re.compile(r"^lib\S+\.so(\.\d+)*$")


def doctor(mode=None, args=(), extra_env=None):
    env = dict(os.environ)
    for k in ("EXECUTION_MODE", "STRICT_EP"):
        env.pop(k, None)
    if mode is not None:
        env["EXECUTION_MODE"] = mode
    env.update(sanitizer_env())
    env.update(extra_env or {})
    p = subprocess.run([BIN, "doctor", *args], env=env, capture_output=True, text=True, timeout=60)
    for marker in SANITIZER_MARKERS:
        assert marker not in p.stderr, p.stderr[-4000:]
    return p


def doctor_json(mode=None, args=(), extra_env=None):
    p = doctor(mode, ("--json", *args), extra_env)
    lines = p.stdout.splitlines()
    assert len(lines) == 1, p.stdout[-2000:] + p.stderr[-2000:]
    return p.returncode, json.loads(lines[0])


def test_auto_reports_no_gpu_tier_and_names_missing_libraries():
    rc, j = doctor_json("auto")
    assert rc == 78 and j["exit_code"] == 78 and j["ok"] is False
    assert j["requested"] == "auto" and j["tier"] == "cpu-fallback" and j["degraded"] is True
    assert j["active_provider"] == "CPUExecutionProvider"
    assert j["verdict"].startswith("FAIL: no GPU tier works")
    # ORT's own reason for each provider it tried, as the worker logs it
    assert [a["provider"] for a in j["attempts"]] == ["TensorrtExecutionProvider",
                                                      "CUDAExecutionProvider"]
    assert all(not a["ok"] and LOADER_MISSING.search(a["reason"]) for a in j["attempts"]), j["attempts"]
    # every library ORT names is among the ones the doctor names, and each has a fix
    assert j["missing"] and all(SONAME.match(m) for m in j["missing"]), j["missing"]
    for a in j["attempts"]:
        assert LOADER_MISSING.search(a["reason"]).group(1) in j["missing"], (a, j["missing"])
    missing_problems = [p for p in j["problems"] if p["kind"] == "missing_library"]
    assert missing_problems
    for p in missing_problems:
        assert p["blocking"] is True and p["library"] in j["missing"]
        assert p["needed_by"].startswith("libonnxruntime_providers_")
        assert p["fix"] and (p["library"] in p["detail"])
    # the walk itself: each provider library of the plan, next to libonnxruntime.so.1
    files = [l["file"] for l in j["libraries"]]
    assert files == ["libonnxruntime_providers_shared.so", "libonnxruntime_providers_tensorrt.so",
                     "libonnxruntime_providers_cuda.so"]
    assert all(l["present"] and l["path"].startswith(j["ort_dir"] + "/") for l in j["libraries"])
    walked_missing = {d["name"] for l in j["libraries"] for d in l["needed"] if not d["found"]}
    assert walked_missing and all(LOADER_MISSING.search(d["error"]) for l in j["libraries"]
                                  for d in l["needed"] if not d["found"])
    assert set(j["versions"]) >= {"cuda_runtime", "cudnn", "tensorrt", "cuda_required"}
    assert set(j["driver"]) >= {"nvml", "version", "cuda_version", "gpus"}


def test_auto_text_output():
    p = doctor("auto")
    assert p.returncode == 78, p.stdout + p.stderr
    assert "verdict: FAIL: no GPU tier works" in p.stdout
    assert re.search(r"^problem: missing: lib\S+", p.stdout, re.M), p.stdout
    assert re.search(r"^  fix: \S", p.stdout, re.M)
    assert LOADER_MISSING.search(p.stdout)


@pytest.mark.parametrize("how", ["env", "flag"])
def test_cpu_always_passes(how):
    if how == "env":
        rc, j = doctor_json("cpu")
    else:  # the flag beats the environment, as in the worker
        rc, j = doctor_json("auto", ("--execution-mode=cpu",))
    assert rc == 0 and j["ok"] is True and j["exit_code"] == 0, j
    assert j["requested"] == "cpu" and j["tier"] == "cpu" and j["degraded"] is False
    assert j["attempts"] == [] and j["libraries"] == []
    p = doctor("cpu")
    assert p.returncode == 0 and "verdict: OK" in p.stdout, p.stdout


def test_strict_says_it_would_refuse():
    rc, j = doctor_json("cuda", extra_env={"STRICT_EP": "1"})
    assert rc == 78 and j["strict"] is True and j["refuse"] is True
    assert j["tier"] == "cpu-fallback"
    # cuda asks for one provider only; TensorRT's libraries are not its business
    assert [l["file"] for l in j["libraries"]] == ["libonnxruntime_providers_shared.so",
                                                   "libonnxruntime_providers_cuda.so"]


def test_bad_argument_is_a_usage_error():
    p = doctor("auto", ("--no-such-flag",))
    assert p.returncode == 64 and "unknown flag" in p.stderr and p.stdout == ""


@pytest.mark.parametrize("mode", ["auto", "cuda", "cpu"])
def test_verdict_matches_a_real_worker(tmp_path, mode):
    rc, j = doctor_json(mode)
    w = start_worker(DEMO_REPO, tmp_path, env={"EXECUTION_MODE": mode, "STRICT_EP": "0"})
    try:
        code, st = w.get_json("/v2/status")
        assert code == 200
    finally:
        assert w.stop() == 0
    for k in ("requested", "tier", "active_provider", "degraded"):
        assert j[k] == st[k], (k, j[k], st[k])
    assert j["attempts"] == st["attempts"]
    assert (rc == 0) == (not st["degraded"])
