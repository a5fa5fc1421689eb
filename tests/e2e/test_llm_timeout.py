"""A /v1 generation has its own deadline, TIERSERVE_LLM_REQUEST_TIMEOUT_MS (default 10 min),
not the KServe one: TIERSERVE_REQUEST_TIMEOUT_MS (default 30 s) cut long answers mid-stream
(512 tokens at 10 tok/s on a CPU take 50 s).

- A worker with TIERSERVE_REQUEST_TIMEOUT_MS=200 completes a 2000-token generation that takes
  well over 200 ms (about 1.4 s here; the old worker cut it at 200 ms), streamed and not,
  while a KServe request of the `slow` model that takes longer (2048 rows) on the same worker
  is still answered 504 at its 200 ms.
- A worker with TIERSERVE_LLM_REQUEST_TIMEOUT_MS=600 cuts a long stream mid-way with the
  timeout error event (some text first, then the error, no [DONE]), also when the request
  asks for more with X-Request-Timeout-Ms (it lowers the deadline, never raises it).
http.client, no retries."""
import functools
import json
import re
import time

import numpy as np
import onnx
import pytest

import gen_test_models
from conftest import start_worker
import helpers
from llm_fixture import write_tiny_llm

ROWS = 2048  # the slow model's rows: about 1.3 s of compute here, far over 200 ms


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    r = tmp_path_factory.mktemp("llmtimeout")
    write_tiny_llm(r / "tiny" / "1")
    # a longer context for the cut: its 8000 tokens could not finish in 300 ms on any machine
    write_tiny_llm(r / "long" / "1", context=8192)
    (r / "slow" / "1").mkdir(parents=True)
    onnx.save(gen_test_models.build_model("slow"), str(r / "slow" / "1" / "model.onnx"))
    return r


# helpers.post with a longer wait: some of these run to the server's own cut
post = functools.partial(helpers.post, timeout=120)


def events(data):
    """The SSE events' payloads, in order (JSON objects, or "[DONE]")."""
    out = []
    for ev in data.decode().split("\n\n"):
        if not ev:
            continue
        assert ev.startswith("data: "), ev
        p = ev[len("data: "):]
        out.append(p if p == "[DONE]" else json.loads(p))
    return out


def test_kserve_deadline_does_not_cut_a_generation(repo, tmp_path_factory):
    w = start_worker(repo, tmp_path_factory.mktemp("llmtimeout-w"),
                     env={"EXECUTION_MODE": "cpu", "TIERSERVE_REQUEST_TIMEOUT_MS": "200"})
    try:
        body = {"model": "tiny", "prompt": "Hello world", "max_tokens": 2000, "temperature": 0}
        t0 = time.monotonic()
        code, _, data = post(w, "/v1/completions", body)
        took = time.monotonic() - t0
        assert code == 200, data[:300]
        out = json.loads(data)
        assert out["usage"]["completion_tokens"] == 2000 and out["choices"][0]["finish_reason"] == "length"
        print(f"2000 tokens in {took:.2f} s")
        assert took > 0.2, took  # else this would show nothing
        code, hdrs, data = post(w, "/v1/completions", dict(body, stream=True))
        assert code == 200 and hdrs["Content-Type"] == "text/event-stream"
        evs = events(data)
        assert evs[-1] == "[DONE]" and evs[-2]["choices"][0]["finish_reason"] == "length", evs[-3:]
        assert "".join(e["choices"][0]["text"] for e in evs[:-1]) == out["choices"][0]["text"]
        # a KServe request on the same worker keeps its 200 ms
        x = np.ones((ROWS, 512), np.float32)
        head = json.dumps({"inputs": [{"name": "x", "datatype": "FP32", "shape": [ROWS, 512],
                                       "parameters": {"binary_data_size": x.nbytes}}]}).encode()
        t0 = time.monotonic()
        code, _, data = post(w, "/v2/models/slow/infer", head + x.tobytes(),
                             {"Inference-Header-Content-Length": str(len(head)),
                              "Content-Type": "application/octet-stream"})
        took = time.monotonic() - t0
        assert code == 504, data[:300]
        assert re.fullmatch(r"request timed out after \d+ ms \(.*\)", json.loads(data)["error"]), data
        print(f"KServe 504 after {took:.2f} s")
    finally:
        assert w.stop() == 0, w.log_text()[-4000:]


def test_llm_deadline_cuts_mid_stream(repo, tmp_path_factory):
    w = start_worker(repo, tmp_path_factory.mktemp("llmtimeout-cut"),
                     env={"EXECUTION_MODE": "cpu", "TIERSERVE_LLM_REQUEST_TIMEOUT_MS": "600"})
    try:
        body = {"model": "long", "prompt": "Hello world", "max_tokens": 8000, "temperature": 0, "stream": True}
        for headers in ({}, {"X-Request-Timeout-Ms": "600000"}):
            code, hdrs, data = post(w, "/v1/completions", body, headers)
            assert code == 200 and hdrs["Content-Type"] == "text/event-stream", data[:300]
            evs = events(data)
            assert "[DONE]" not in evs, evs[-3:]
            text = "".join(e["choices"][0]["text"] for e in evs[:-1])
            assert text, evs[:3]  # mid-stream: some of the answer went out first
            err = evs[-1]["error"]
            assert (err["type"], err["code"]) == ("server_error", "timeout"), err
            m = re.fullmatch(r"request timed out after (\d+) ms \(while generating\)", err["message"])
            assert m and int(m.group(1)) >= 550, err  # the timer may fire a ms early by our clock
        # the header still lowers it
        code, _, data = post(w, "/v1/completions", dict(body, stream=False), {"X-Request-Timeout-Ms": "1"})
        assert code == 504 and json.loads(data)["error"]["code"] == "timeout", data[:300]
    finally:
        assert w.stop() == 0, w.log_text()[-4000:]
