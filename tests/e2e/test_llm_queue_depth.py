"""An LLM's sequences count in the worker's queue depth: /v2/status `queue_depth` (which the
router reads as its queue signal for failover) and `tierserve_queue_depth` carry an LLM's
running plus waiting sequences, as they carry a KServe model's queued and running requests.
Before, both said 0 for an LLM however many chats waited, so the router's composite trigger
never saw an LLM backlog. Raw sockets, no retries."""
import json
import time

import pytest

from conftest import start_worker
from llm_fixture import write_tiny_llm
from promtext import parse_strict
from test_llm_api import raw_request, read_until


@pytest.fixture(scope="module")
def worker(tmp_path_factory):
    repo = tmp_path_factory.mktemp("qdrepo")
    write_tiny_llm(repo / "tiny" / "1")
    w = start_worker(repo, tmp_path_factory.mktemp("qd"),
                     env={"EXECUTION_MODE": "cpu", "TIERSERVE_LLM_MAX_SEQUENCES": "1",
                          "TIERSERVE_LLM_QUEUE_SIZE": "4"})
    yield w
    assert w.stop() == 0, w.log_text()[-4000:]


def status(w):
    code, _, body = w.http("GET", "/v2/status")
    assert code == 200
    st = json.loads(body)
    m = [m for m in st["models"] if m["name"] == "tiny"][0]
    return st, m


def queue_metric(w, name="tierserve_queue_depth"):
    code, _, body = w.http("GET", "/metrics")
    assert code == 200
    series = parse_strict(body.decode())
    return series[(name, (("model", "tiny"), ("version", "1")))]


def wait_depth(w, running, waiting, timeout=20):
    deadline = time.time() + timeout
    while True:
        st, m = status(w)
        if m["llm"]["running"] == running and m["llm"]["waiting"] == waiting:
            return st, m
        assert time.time() < deadline, m["llm"]
        time.sleep(0.02)


def test_running_and_waiting_sequences_count_in_queue_depth(worker):
    body = {"model": "tiny", "prompt": "Hello world", "max_tokens": 2000, "temperature": 0, "stream": True}
    socks = [raw_request(worker, "/v1/completions", body)]
    read_until(socks[0], b'"text":')  # the one slot is generating
    socks += [raw_request(worker, "/v1/completions", body) for _ in range(2)]
    st, m = wait_depth(worker, 1, 2)
    assert m["queue_depth"] == 3, m
    assert st["queue_depth"] == 3, st["queue_depth"]
    assert queue_metric(worker) == 3
    assert queue_metric(worker, "tierserve_sequence_slots") == 1  # TIERSERVE_LLM_MAX_SEQUENCES
    for s in socks:
        s.close()
    st, m = wait_depth(worker, 0, 0)
    assert m["queue_depth"] == 0 and st["queue_depth"] == 0
    assert queue_metric(worker) == 0
