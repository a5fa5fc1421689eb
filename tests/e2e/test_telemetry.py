"""ONNX Runtime's telemetry stays off unless the operator turns it on (docs/security.md, "Nothing leaves the machine").

ONNX Runtime 1.29 added telemetry on Linux, on by default in its release builds: a process
that creates an ORT environment writes a device id and an event store (model file and graph
names, producer, the executable's path, session events) under $HOME/.cache/Microsoft and
every ~30 s starts threads that resolve and try to reach Microsoft's collector. The worker
sets ORT_DISABLE_TELEMETRY=1 before its first environment unless the variable is already
set. What is checked is what a user would see: the files under a fresh home. The control
(the operator's explicit ORT_DISABLE_TELEMETRY=0) shows that this ORT build does write them,
so the first test is not vacuous: were a future ORT to drop telemetry or move its files, the
control fails and says so.

ORT also keeps its telemetry quiet when the environment looks like a CI job (CI, GITHUB_ACTIONS,
TF_BUILD and the others below: the names are in libonnxruntime's strings, CI found by trying),
which is why CI saw no files in the control while a shell did. Both tests run their worker
without those variables: in CI the first one would otherwise pass whatever the worker did.
"""
import json

import pytest

from conftest import ROOT, start_worker

# environment variables whose presence makes ORT 1.29 treat the process as a CI job
ORT_CI_MARKERS = ("CI", "TF_BUILD", "GITHUB_ACTIONS", "GITLAB_CI", "CIRCLECI", "TRAVIS", "JENKINS_URL",
                  "CODEBUILD_BUILD_ID", "BUILDKITE", "TEAMCITY_VERSION", "APPVEYOR", "BITBUCKET_BUILD_NUMBER")
DEMO_REPO = ROOT / "models"
DEMO_BODY = json.dumps({"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 4],
                                    "data": [5.1, 3.5, 1.4, 0.2]}]}).encode()


def serve_once(tmp_path, monkeypatch, extra):
    """A worker with a fresh home and cache folder serves one inference and stops; returns
    the files it left there, and the worker."""
    home, cache = tmp_path / "home", tmp_path / "xdg-cache"
    home.mkdir()
    cache.mkdir()
    for k in ("ORT_DISABLE_TELEMETRY", *ORT_CI_MARKERS):
        monkeypatch.delenv(k, raising=False)
    w = start_worker(DEMO_REPO, tmp_path, env={"HOME": str(home), "XDG_CACHE_HOME": str(cache), **extra})
    code, _, body = w.http("POST", "/v2/models/demo/infer", DEMO_BODY)
    assert code == 200, body
    assert w.stop() == 0, w.log_text()[-4000:]
    return sorted(str(p.relative_to(tmp_path)) for p in tmp_path.glob("*/**/*") if p.is_file()), w


def telemetry_warnings(w):
    return [line for line in w.log_lines() if "ORT_DISABLE_TELEMETRY" in line.get("msg", "")]


def test_a_worker_leaves_no_telemetry_files_and_says_nothing(tmp_path, monkeypatch):
    files, w = serve_once(tmp_path, monkeypatch, {})
    assert files == [], f"ONNX Runtime's telemetry wrote {files}: it must be off by default"
    assert telemetry_warnings(w) == []


def test_the_operators_explicit_choice_wins_and_is_logged(tmp_path, monkeypatch):
    files, w = serve_once(tmp_path, monkeypatch, {"ORT_DISABLE_TELEMETRY": "0"})
    if not any("Microsoft" in f for f in files):
        pytest.fail(f"with ORT_DISABLE_TELEMETRY=0 this ONNX Runtime wrote no telemetry files ({files}): "
                    "the other test checks nothing any more; update both to what this ORT does")
    (warn,) = telemetry_warnings(w)
    assert warn["level"] == "warn" and "ORT_DISABLE_TELEMETRY=0" in warn["msg"], warn
