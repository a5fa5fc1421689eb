"""A GPU fault in an LLM step latches the worker's fault as a KServe Run() does: the step's
sequence ends with an error, /v2/health/live turns 503 and later /v1 requests get 503.
TIERSERVE_FAULT_INJECT_GPU_RUN=N (test-only) fails the Nth Run(), KServe or LLM, with a
CUDA-looking error on the CPU tier. Raw http.client, no retries."""
import json

import pytest

from conftest import start_worker
from helpers import send_json as call
from llm_fixture import write_tiny_llm


@pytest.fixture(scope="module")
def worker(tmp_path_factory):
    repo = tmp_path_factory.mktemp("llmfault")
    write_tiny_llm(repo / "tiny" / "1")
    # Run 1 is the prompt's prefill, run 2 the first decode step, run 3 fails
    w = start_worker(repo, tmp_path_factory.mktemp("llmfault-w"),
                     env={"EXECUTION_MODE": "cpu", "TIERSERVE_FAULT_INJECT_GPU_RUN": "3"})
    yield w
    w.stop()


def test_llm_step_fault_marks_the_worker_not_live(worker):
    code, _, _ = call(worker, "GET", "/v2/health/live")
    assert code == 200
    code, _, data = call(worker, "POST", "/v1/completions",
                         {"model": "tiny", "prompt": "Hello", "max_tokens": 16, "temperature": 0})
    assert code == 500, data
    err = json.loads(data)["error"]
    assert "CUDA failure 700" in err["message"] and "TIERSERVE_FAULT_INJECT_GPU_RUN=3" in err["message"]
    assert err["type"] == "server_error"
    # latched before the sequence ended, so already visible here
    code, _, _ = call(worker, "GET", "/v2/health/live")
    assert code == 503
    code, _, data = call(worker, "GET", "/v2/status")
    st = json.loads(data)
    assert st["live"] is False and "CUDA failure 700" in st["gpu_fault"]
    assert any(l.get("msg", "").startswith("GPU fault: LLM step failed: CUDA failure 700")
               and l["msg"].endswith("; marking not live") and l.get("model") == "tiny"
               for l in worker.log_lines())
    code, h, data = call(worker, "POST", "/v1/chat/completions",
                         {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})
    assert code == 503 and h.get("retry-after") == "1", data
    assert json.loads(data)["error"]["message"] == "worker is not live after a GPU fault"
