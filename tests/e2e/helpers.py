"""Helpers the e2e suites share: one HTTP exchange, a Prometheus value, polling, a free port,
an SSE body, a process's memory, a real tierrouter. One version of each, so that a fix (a
timeout, a stricter framing check) reaches every suite at once.

A `target` is what a request goes to: a Worker or Router (anything with .port, and .host
when it is not 127.0.0.1), a port number, or a (host, port) pair.
"""
import http.client
import json
import os
import pathlib
import re
import signal
import socket
import subprocess
import time
from collections import namedtuple

from conftest import BIN, SANITIZER_MARKERS, json_lines, sanitizer_env, track
from promtext import LABEL, SAMPLE

ROUTER_BIN = str(pathlib.Path(BIN).with_name("tierrouter"))


def address(target):
    """(host, port) of a target: a server object, a port number or a (host, port) pair."""
    if isinstance(target, int):
        return "127.0.0.1", target
    if isinstance(target, tuple):
        return target[0], int(target[1])
    return getattr(target, "host", "127.0.0.1"), int(target.port)


class Headers(dict):
    """Reply headers with lower-case keys; lookups ignore case, so h["Content-Type"] and
    h["content-type"] are the same entry."""

    def __init__(self, pairs=()):
        super().__init__((k.lower(), v) for k, v in pairs)

    def __getitem__(self, key):
        return super().__getitem__(key.lower())

    def __contains__(self, key):
        return super().__contains__(key.lower())

    def get(self, key, default=None):
        return super().get(key.lower(), default)


class Reply(namedtuple("Reply", "status headers body")):
    """(status, headers, body bytes); unpacks as a 3-tuple."""

    def json(self):
        return json.loads(self.body)


def request(target, method, path, body=None, headers=None, timeout=30):
    """One request on a fresh connection, sent once (no retry, no keep-alive): a Reply."""
    host, port = address(target)
    c = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        c.request(method, path, body=body, headers=headers or {})
        r = c.getresponse()
        return Reply(r.status, Headers(r.getheaders()), r.read())
    finally:
        c.close()


def get(target, path, headers=None, timeout=10):
    """One GET on a fresh connection, no retry: a Reply."""
    return request(target, "GET", path, headers=headers, timeout=timeout)


def get_json(target, path, headers=None, timeout=10):
    """One GET that must answer 200: the body, decoded as JSON."""
    r = get(target, path, headers, timeout)
    assert r.status == 200, (path, r.status, r.body)
    return r.json()


def model_status(target, name, headers=None):
    """The entry for model `name` in a worker's GET /v2/status (which must answer 200 and
    list it)."""
    models = [m for m in get_json(target, "/v2/status", headers)["models"] if m["name"] == name]
    assert models, f"no model {name} in /v2/status"
    return models[0]


def llm_status(target, name="tiny", headers=None):
    """The "llm" part of an LLM model's /v2/status entry (running, waiting, kv, ...)."""
    return model_status(target, name, headers)["llm"]


def send_json(target, method, path, body=None, headers=None, timeout=60):
    """One request with a JSON body (an object is encoded, bytes are sent as they are, None
    sends none) and Content-Type: application/json unless headers name another: a Reply."""
    data = body if body is None or isinstance(body, bytes) else json.dumps(body).encode()
    return request(target, method, path, data, {"Content-Type": "application/json", **(headers or {})}, timeout)


def post(target, path, body, headers=None, timeout=60):
    """send_json() as a POST: a Reply with the raw body."""
    return send_json(target, "POST", path, body, headers, timeout)


def post_json(target, path, body, headers=None, timeout=60):
    """post(), with the reply's body decoded as JSON (it must be JSON)."""
    r = post(target, path, body, headers, timeout)
    return r._replace(body=json.loads(r.body))


def metrics_text(target, headers=None):
    """GET /metrics (must answer 200): the exposition text."""
    r = get(target, "/metrics", headers, timeout=30)
    assert r.status == 200, r
    return r.body.decode()


def metric(source, name, labels=(), /, headers=None, required=False, **label_values):
    """The value of one series in a Prometheus exposition, or None when there is none
    (required=True: an AssertionError naming it).

    source is the exposition text or a target to scrape (headers: e.g. the scrape token).
    The series is `name` with every label given: `labels` as 'k="v"' strings (a sequence, or
    one comma-separated string) and/or label_values as k=v (source=, name= are labels too:
    the first three parameters are positional only). Without labels it is the series
    with no labels at all. More than one series matching is an error, not a first pick."""
    text = source if isinstance(source, str) else metrics_text(source, headers)
    if isinstance(labels, str):
        labels = [labels] if labels else []
    want = dict(_labels(",".join(labels)))
    want.update({k: str(v) for k, v in label_values.items()})
    found = []
    for line in text.splitlines():
        m = SAMPLE.match(line)
        if not m or m.group(1) != name:
            continue
        have = dict(_labels(m.group(2) or ""))
        if (want and want.items() <= have.items()) or (not want and not have):
            found.append(line)
            value = float(m.group(3))
    assert len(found) <= 1, f"{name} {want} matches several series: {found}"
    assert found or not required, f"no {name} {want} in /metrics"
    return value if found else None


def _labels(text):
    """[(name, value)] of a label list as the exposition writes it (k="v",k2="v2")."""
    out = []
    while text:
        m = LABEL.match(text)
        assert m, f"bad labels: {text!r}"
        out.append((m.group(1), m.group(2)))
        text = text[m.end():]
    return out


def wait_until(pred, timeout=20, what=None, interval=0.05):
    """Calls pred until it returns something true, or timeout seconds pass; returns that value.
    On timeout: with `what` (a text, or a function that gives one, to show the state then),
    raises AssertionError naming it; without, returns pred()'s value from one last call, for
    the caller to assert on."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(interval)
    if what is not None:
        raise AssertionError(f"timed out after {timeout} s waiting for {what() if callable(what) else what}")
    return pred()


def wait_for(fn, want, timeout=20, interval=0.05):
    """Calls fn until it returns want, or timeout seconds pass; returns its last value, so that
    `assert wait_for(f, 0) == 0` shows what it was instead."""
    deadline = time.monotonic() + timeout
    v = fn()
    while v != want and time.monotonic() < deadline:
        time.sleep(interval)
        v = fn()
    return v


def free_port():
    """A TCP port on 127.0.0.1 that nothing listens on (bound once by the kernel, then freed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def sse_data(data):
    """The data payloads (strings) of a whole SSE body, [DONE] included. The framing must be
    exactly `data: ...\\n\\n` repeated: one data line an event, nothing else."""
    text = data.decode("utf-8")
    assert re.fullmatch(r"(data: [^\n]*\n\n)+", text), text[:500]
    return [e[len("data: "):] for e in text.split("\n\n")[:-1]]


def sse_events(data):
    """The JSON events of a whole OpenAI SSE body (sse_data's framing), which must end with one
    `data: [DONE]` and have it nowhere else."""
    events = sse_data(data)
    assert events[-1] == "[DONE]" and "[DONE]" not in events[:-1]
    return [json.loads(e) for e in events[:-1]]


def sse_next(resp):
    """The next event of a streaming OpenAI reply read as it comes (an http.client response:
    it undoes the chunking), as JSON; None at `data: [DONE]`. Blank lines between events are
    skipped; the stream ending first, a line that is not `data: ` or an error event fails."""
    while True:
        line = resp.readline()
        assert line, "the stream ended without [DONE]"
        line = line.decode().rstrip("\n")
        if not line:
            continue
        assert line.startswith("data: "), line
        if line == "data: [DONE]":
            return None
        ev = json.loads(line[len("data: "):])
        assert "error" not in ev, ev
        return ev


def vm_bytes(pid):
    """A live process's memory figures from /proc/PID/status in bytes, by name: VmRSS
    (resident now), VmHWM (resident peak), VmPeak (address space peak), every Vm* line."""
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k.startswith("Vm"):
                out[k] = int(v.split()[0]) * 1024
    return out


def rss_kb(pid, peak=False):
    """A live process's resident memory in KiB from /proc/PID/status: now (VmRSS), or its
    peak so far (VmHWM) with peak=True."""
    field = "VmHWM" if peak else "VmRSS"
    with open(f"/proc/{pid}/status") as f:
        return int(re.search(rf"^{field}:\s+(\d+) kB", f.read(), re.M).group(1))


class Router:
    """One tierrouter process on cfg_text (a YAML config written under tmp), listening on the
    port it picked (TIERROUTER_PORT=0, read from its log). status_headers go with every
    /admin/status read (the admin token, when the config sets one)."""

    def __init__(self, cfg_text, tmp, env=None, status_headers=None):
        self.cfg = tmp / f"router-{time.monotonic_ns()}.yaml"
        self.cfg.write_text(cfg_text)
        self.log = tmp / f"router-{time.monotonic_ns()}.log"
        self.status_headers = status_headers
        env = {**os.environ, "TIERROUTER_PORT": "0", **sanitizer_env(), **(env or {})}
        with open(self.log, "wb") as logf:
            self.proc = track(subprocess.Popen([ROUTER_BIN, "--config", str(self.cfg)], stderr=logf, env=env))
        self.port = None
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and self.proc.poll() is None:
            m = re.search(r"listening on [^:]+:(\d+)", self.log.read_text())
            if m:
                self.port = int(m.group(1))
                break
            time.sleep(0.05)
        assert self.port, self.log.read_text()

    @property
    def url(self):
        return f"127.0.0.1:{self.port}"

    def text(self):
        """The router's log so far."""
        return self.log.read_text(errors="replace")

    def log_lines(self, strict=False):
        """The log's JSON lines, parsed. strict: the log must be UTF-8 and every line JSON;
        otherwise what does not parse (a sanitizer report) is skipped."""
        if strict:
            return [json.loads(l) for l in self.log.read_text(encoding="utf-8").splitlines() if l]
        return json_lines(self.text())

    def wait_log(self, needle, timeout=10, after=0):
        """Whether needle shows up in the log (past offset `after`) within timeout seconds."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if needle in self.text()[after:]:
                return True
            time.sleep(0.05)
        return False

    def status(self):
        """GET /admin/status (must answer 200), decoded."""
        code, _, body = get(self, "/admin/status", self.status_headers)
        assert code == 200, body
        return json.loads(body)

    def backend(self, port):
        """The status entry of the backend at that port."""
        for p in self.status()["pools"]:
            for b in p["backends"]:
                if b["address"].endswith(f":{port}"):
                    return b
        raise KeyError(port)

    def wait_healthy(self, n, timeout=15):
        """Waits until the pools count n healthy backends between them; returns that status."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            st = self.status()
            if sum(p["healthy"] for p in st["pools"]) >= n:
                return st
            time.sleep(0.05)
        raise AssertionError(f"router never saw {n} healthy backends: {self.status()}")

    def stop(self):
        """SIGTERM, wait; a sanitizer report in the log fails the test. Returns the exit code."""
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout=20)
        text = self.text()
        assert not [m for m in SANITIZER_MARKERS if m in text], text[-4000:]
        return code
