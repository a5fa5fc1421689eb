"""Shared fixtures: real tierserve processes on real sockets.

A worker is started with --http-port=0; the port comes from its "listening on" log line.
Every worker's stderr is kept; when a test ends the log is scanned for sanitizer reports
(the ASan build runs this same suite), and any report fails the test.
"""
import json
import os
import pathlib
import signal
import subprocess
import sys
import time
import urllib.request

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "models"))
sys.path.insert(0, str(ROOT / "models"))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

BIN = os.environ.get("TIERSERVE_BIN", str(ROOT / "build" / "bin" / "tierserve"))
SANITIZED = os.environ.get("TIERSERVE_SANITIZED") == "1"
SANITIZER_MARKERS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:",
                     "UndefinedBehaviorSanitizer")


def sanitizer_env():
    env = {}
    if SANITIZED:
        env["ASAN_OPTIONS"] = "detect_leaks=1:abort_on_error=0:halt_on_error=1"
        env["LSAN_OPTIONS"] = f"suppressions={ROOT / 'tests' / 'lsan.supp'}:print_suppressions=0"
        env["UBSAN_OPTIONS"] = "print_stacktrace=1:halt_on_error=1"
    return env


def json_lines(text):
    """The lines of a log that parse as JSON, parsed; the others (a sanitizer report) skipped."""
    out = []
    for line in text.splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            pass
    return out


class Worker:
    """One tierserve process. Use start_worker() to make one."""

    def __init__(self, proc, log_path):
        self.proc = proc
        self.log_path = log_path
        self.port = None
        self.host = "127.0.0.1"

    @property
    def url(self):
        return f"{self.host}:{self.port}"

    def log_text(self):
        return pathlib.Path(self.log_path).read_text(errors="replace")

    def log_lines(self):
        """The JSON log lines (anything else, e.g. a sanitizer report, is skipped)."""
        return json_lines(self.log_text())

    def wait_log(self, needle, timeout=30.0):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if needle in self.log_text():
                return True
            if self.proc.poll() is not None:
                return needle in self.log_text()
            time.sleep(0.05)
        return False

    def http(self, method, path, body=None, headers=None, timeout=30):
        req = urllib.request.Request(f"http://{self.url}{path}", data=body, method=method,
                                     headers=headers or {})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.status, dict(r.headers), r.read()
        except urllib.error.HTTPError as e:
            return e.code, dict(e.headers), e.read()

    def get_json(self, path):
        code, _, body = self.http("GET", path)
        return code, (json.loads(body) if body else None)

    def stop(self, sig=signal.SIGTERM, timeout=30):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def sanitizer_reports(self):
        text = self.log_text()
        return [m for m in SANITIZER_MARKERS if m in text]


TIERBENCH = str(pathlib.Path(BIN).with_name("tierbench"))


def run_tierbench(*args, timeout=120, cwd=None):
    """Runs tierbench with the arguments; returns (exit code, stdout, stderr) as text, decoded
    strictly. A sanitizer report on stderr fails the test."""
    p = subprocess.run([TIERBENCH, *map(str, args)], capture_output=True, timeout=timeout,
                       env=dict(os.environ, **sanitizer_env()), cwd=cwd)
    out, err = p.stdout.decode(), p.stderr.decode()
    for m in SANITIZER_MARKERS:
        assert m not in err, err
    return p.returncode, out, err


def start_worker(repo, tmp_path, env=None, args=(), wait_ready=True, timeout=60):
    """Starts tierserve on repo; returns a Worker (port known) or raises with the log."""
    log_path = tmp_path / f"worker-{time.monotonic_ns()}.log"
    e = dict(os.environ)
    # no layout measurement at load unless a test asks for it (test_tune.py): it costs up to
    # a couple of seconds per non-tiny model, and the suite starts hundreds of workers
    e.update({"TIERSERVE_HTTP_ADDRESS": "127.0.0.1", "TIERSERVE_HTTP_PORT": "0", "TIERSERVE_TUNE": "0"})
    e.update(sanitizer_env())
    e.update(env or {})
    cmd = [BIN, f"--model-repository={repo}", *args]
    logf = open(log_path, "wb")
    proc = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT, env=e)
    logf.close()
    w = Worker(track(proc), log_path)
    w.host = e["TIERSERVE_HTTP_ADDRESS"]
    _WORKERS.append(w)
    deadline = time.time() + timeout
    while time.time() < deadline:
        for line in w.log_lines():
            msg = line.get("msg", "")
            if msg.startswith("listening on "):
                w.port = int(msg.rsplit(":", 1)[1])
        if w.port and (not wait_ready or "server ready" in w.log_text()):
            if not wait_ready:
                return w
            code, _, _ = w.http("GET", "/v2/health/ready")
            if code == 200:
                return w
        if proc.poll() is not None:
            if not wait_ready:
                return w
            raise RuntimeError(f"tierserve exited with {proc.returncode}:\n{w.log_text()[-4000:]}")
        time.sleep(0.05)
    w.stop(signal.SIGKILL)
    raise RuntimeError(f"tierserve did not become ready:\n{w.log_text()[-4000:]}")


_WORKERS = []
_CHILDREN = []  # every process a test started (workers, routers)


def track(proc):
    """Registers a child process: whatever a failing test or fixture leaves running is
    killed when the session ends, so no run leaves servers behind."""
    _CHILDREN.append(proc)
    return proc


@pytest.fixture(scope="session", autouse=True)
def _reap_children():
    yield
    for p in _CHILDREN:
        if p.poll() is None:
            p.kill()
            p.wait(timeout=10)


@pytest.fixture(autouse=True)
def _no_sanitizer_reports():
    """Fails any test whose workers printed a sanitizer report."""
    start = len(_WORKERS)
    yield
    for w in _WORKERS[start:]:
        if w.proc.poll() is None:
            continue
        reports = w.sanitizer_reports()
        assert not reports, f"sanitizer report in worker log {w.log_path}: {reports}"


@pytest.fixture(scope="session")
def test_repo(tmp_path_factory):
    """The generated test model repository (tests/models/gen_test_models.py)."""
    import gen_test_models
    d = tmp_path_factory.mktemp("repo")
    gen_test_models.write_repo(str(d))
    return d


@pytest.fixture(scope="session")
def server(test_repo, tmp_path_factory):
    """One shared worker on the test repository (EXECUTION_MODE=cpu)."""
    w = start_worker(test_repo, tmp_path_factory.mktemp("server"),
                     env={"EXECUTION_MODE": "cpu", "TIERSERVE_INSTANCES": "2"})
    yield w
    code = w.stop()
    assert code == 0, w.log_text()[-4000:]
    assert not w.sanitizer_reports(), w.log_text()[-8000:]


@pytest.fixture(scope="session")
def client(server):
    import tritonlike
    return tritonlike.TritonLikeClient(server.url)
