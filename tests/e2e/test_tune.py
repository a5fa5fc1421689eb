"""The worker picks its own execution layout (issue 24): with default settings a CPU model
whose Run() is not tiny is measured at load and /v2/status shows the chosen layout and the
table behind it; an explicit setting skips the search for that knob; `tierserve tune` prints
the table without serving."""
import os
import pathlib
import re
import subprocess
import sys

import onnx
import pytest

from conftest import BIN, start_worker

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "bench"))
from bench import mlp_model  # noqa: E402  (the benchmark's MLP: its MatMuls use the intra-op pool)


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    # 4 layers of 1024x1024 (16 MB): a Run() of a few hundred microseconds on 2 cores, past the 100-us
    # "tiny" bound under which the worker takes one thread without measuring
    r = tmp_path_factory.mktemp("tune")
    d = r / "mlp" / "1"
    d.mkdir(parents=True)
    onnx.save(mlp_model(width=1024, layers=4), str(d / "model.onnx"))
    return r


def layout_of(w):
    _, st = w.get_json("/v2/status")
    return next(m for m in st["models"] if m["name"] == "mlp")["layout"]


def test_defaults_measure_and_report(repo, tmp_path):
    w = start_worker(repo, tmp_path, env={"EXECUTION_MODE": "cpu", "TIERSERVE_TUNE": "1"})
    lay = layout_of(w)
    assert lay["source"] == "measured", lay
    assert lay["set"] == {"threads": False, "instances": False, "spinning": False}
    table = lay["measured"]
    assert sum(c["chosen"] for c in table) == 1, table
    # the cores this worker may use (its affinity mask and CPU quota, as the note says): one
    # core (a pinned run: taskset) leaves one layout to measure, more must give a real search
    usable = int(re.search(r"(\d+) usable core", lay["note"]).group(1))
    assert usable == min(len(os.sched_getaffinity(w.proc.pid)), usable), lay["note"]
    if usable >= 2:
        assert len({c["threads"] for c in table} | {c["instances"] for c in table}) >= 2, table  # a real search
    else:
        assert all(c["threads"] == 1 and c["instances"] == 1 for c in table), table
    pick = next(c for c in table if c["chosen"])
    assert (pick["threads"], pick["instances"], pick["spinning"]) == \
        (lay["threads"], lay["instances"], lay["spinning"]), lay
    assert all(c["run_us"] > 0 and c["runs_per_s"] > 0 for c in table), table
    logs = [ln for ln in w.log_lines() if ln.get("msg", "").startswith("layout:") and ln.get("model") == "mlp"]
    assert len(logs) == 1 and "(chosen)" in logs[0]["msg"], logs
    # the layout serves
    code, _, _ = w.http("GET", "/v2/models/mlp/ready")
    assert code == 200


def test_explicit_threads_override(repo, tmp_path):
    w = start_worker(repo, tmp_path, env={"EXECUTION_MODE": "cpu", "TIERSERVE_TUNE": "1",
                                          "TIERSERVE_INTRA_OP_THREADS": "1", "TIERSERVE_INSTANCES": "1"})
    lay = layout_of(w)
    assert lay["threads"] == 1 and lay["instances"] == 1, lay
    assert lay["set"] == {"threads": True, "instances": True, "spinning": False}, lay
    # only the free knob (spinning) was searched, at the fixed thread count
    assert all(c["threads"] == 1 and c["instances"] == 1 for c in lay["measured"]), lay
    assert "set: intra-op threads instances" in lay["note"], lay


def test_tune_off_uses_the_hardware(repo, tmp_path):
    w = start_worker(repo, tmp_path, env={"EXECUTION_MODE": "cpu", "TIERSERVE_TUNE": "0"})
    lay = layout_of(w)
    assert lay["source"] == "hardware" and lay["measured"] == [], lay
    assert "TIERSERVE_TUNE=off" in lay["note"] and lay["threads"] >= 1, lay


def test_tune_command_prints_the_table(repo):
    # threads fixed: a two-row table (one or two instances), the cheapest real search
    p = subprocess.run([BIN, "tune", str(repo / "mlp"), "--execution-mode=cpu", "--intra-op-threads=1"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "Run() p50 us" in p.stdout and "<- chosen" in p.stdout, p.stdout
    assert "layout:" in p.stdout and "(measured:" in p.stdout, p.stdout
    p = subprocess.run([BIN, "tune", str(repo / "nosuch")], capture_output=True, text=True, timeout=60)
    assert p.returncode != 0
