"""The runbooks in docs/operate (deploy-gpu, cost-review, upgrading-drivers): every shell
command in them is run here or marked as needing a GPU or a cluster.

Same convention as tests/e2e/test_prometheus.py for monitoring.md: each ```sh block starts
with a marker line, `# run by tests/e2e/test_runbooks.py` or `# not run by the tests (...)`.
A marked block runs as one `bash -e -o pipefail` script, in order per page, in one folder,
against a real worker and a real router (with an admin token, priced pools and a little
traffic), with the variables the pages name: MODEL_REPO, WORKER, ROUTER, ADMIN_TOKEN, HISTORY,
and the built tierserve, tierrouter and tierbench first on PATH. Each must exit 0.
"""
import json
import os
import pathlib
import re
import subprocess

import pytest

from conftest import BIN, ROOT, SANITIZER_MARKERS, sanitizer_env, start_worker
from test_router import DEMO, Router, post_once

PAGES = ["deploy-gpu.md", "cost-review.md", "upgrading-drivers.md"]
DOC_RUN = "# run by tests/e2e/test_runbooks.py"
DOC_NOT_RUN = "# not run by the tests ("
TOKEN = "runbook-admin-token"
BODY = json.dumps({"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 4],
                               "data": [5.1, 3.5, 1.4, 0.2]}]}).encode()


def blocks(page):
    """(marker line, script) of every sh block of a page, in order."""
    text = (ROOT / "docs" / "operate" / page).read_text()
    return [(b.splitlines()[0], b) for b in re.findall(r"^```sh\n(.*?)^```", text, re.M | re.S)]


@pytest.mark.parametrize("page", PAGES)
def test_every_command_is_run_or_marked(page):
    bl = blocks(page)
    assert bl, page
    for marker, script in bl:
        assert marker == DOC_RUN or marker.startswith(DOC_NOT_RUN), (page, marker)
        assert [ln for ln in script.splitlines() if ln.strip() and not ln.lstrip().startswith("#")], (page, marker)
    assert any(m == DOC_RUN for m, _ in bl), f"{page}: no block is run by the tests"
    # no shell command outside a marked block (```bash, ```shell or an unlabelled fence with a $ prompt)
    text = (ROOT / "docs" / "operate" / page).read_text()
    assert not re.search(r"^```(bash|shell|console)\s*$", text, re.M), page


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("runbooks")
    gpu = start_worker(DEMO, tmp, env={"EXECUTION_MODE": "cpu"})
    cpu = start_worker(DEMO, tmp, env={"EXECUTION_MODE": "cpu"})
    router = Router(f"""
address: 127.0.0.1
probe_interval_ms: 100
admin_token: {TOKEN}
pools:
  - name: gpu
    kind: gpu
    min_tier: cpu
    backends: ["127.0.0.1:{gpu.port}"]
    cost: {{model: usage, usd_per_hour: 3.5}}
  - name: cpu
    kind: cpu
    sensitive: true
    backends: ["127.0.0.1:{cpu.port}"]
    cost: {{model: fixed, usd_per_hour: 0.4}}
""", tmp, status_headers={"Authorization": f"Bearer {TOKEN}"})
    router.wait_healthy(2)
    for prio in ("urgent", "normal", "batch") * 4:
        code, _, body = post_once(router, "demo", {"Content-Type": "application/json", "X-Priority": prio}, BODY)
        assert code == 200, (code, body)
    e = dict(os.environ, **sanitizer_env())
    e.update({"PATH": f"{pathlib.Path(BIN).parent}:{os.environ.get('PATH', '')}", "MODEL_REPO": str(DEMO),
              "WORKER": f"http://{gpu.url}", "ROUTER": f"http://{router.url}", "ADMIN_TOKEN": TOKEN,
              "HISTORY": str(tmp / "cost-history.csv")})
    yield {"env": e, "tmp": tmp}
    assert router.stop() == 0
    for w in (gpu, cpu):
        assert w.stop() == 0, w.log_text()[-4000:]


def run_page(env, page):
    """Runs the page's marked blocks in order; returns their outputs."""
    cwd = env["tmp"] / page.replace(".md", "")
    cwd.mkdir(exist_ok=True)
    outs = []
    for marker, script in blocks(page):
        if marker != DOC_RUN:
            continue
        p = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", script], cwd=cwd, env=env["env"],
                           capture_output=True, timeout=120)
        out = (p.stdout + p.stderr).decode(errors="replace")
        assert p.returncode == 0, (page, script, out)
        assert not [m for m in SANITIZER_MARKERS if m in out], out
        outs.append(out)
    return cwd, outs


def test_deploy_gpu_commands(env):
    cwd, outs = run_page(env, "deploy-gpu.md")
    text = "\n".join(outs)
    doctor = re.search(r"doctor exit=(\d+)", text).group(1)
    strict = re.search(r"strict worker exit=(\d+)", text).group(1)
    # the runbook's claim: the doctor's verdict is the strict worker's (78 both, or 0 and serving)
    assert (doctor, strict) in (("78", "78"), ("0", "124")), text
    log = (cwd / "worker.log").read_text()
    assert "Active EP:" in log
    if strict == "78":
        assert "refusing to start" in log and "requested=tensorrt strict=1" in log
    # the HTTP view: the worker's tier and the router's pools
    assert '"tier":"cpu"' in text and '"name":"gpu"' in text


def test_cost_review_commands(env):
    cwd, outs = run_page(env, "cost-review.md")
    hist = pathlib.Path(env["env"]["HISTORY"]).read_text().splitlines()
    assert hist[0].startswith("ts,window_s,section,name,") and any(",pool,gpu," in ln for ln in hist)
    assert "# Weekly cost report" in (cwd / "weekly.md").read_text()
    assert (cwd / "weekly.csv").read_text().startswith("day,")
    assert '"name":"gpu"' in outs[-1]


def test_upgrading_drivers_commands(env):
    cwd, outs = run_page(env, "upgrading-drivers.md")
    before = json.loads((cwd / "doctor-before.json").read_text())
    assert {"driver", "versions", "exit_code"} <= set(before)
    assert before["versions"]["cuda_required"] == 13
    assert "same verdict as before" in outs[-1]
