"""What a backend's probe said of its LLMs (running, waiting, ...) is shown on /admin/status
only while the probes answer: a backend whose probe fails shows none, not the last figures
of a worker that may be dead. A fake worker on a real socket; no retries."""
import time

from fakehttp import FakeHTTP
from test_router import Router, pools_config


class LLMWorker(FakeHTTP):
    status = {**FakeHTTP.status,
              "models": [{"name": "chat", "version": "1", "state": "READY",
                          "llm": {"running": 3, "waiting": 1, "batch_limit": 8, "kv_cache_bytes": 1024}}]}


def test_a_failed_probe_clears_the_backends_llm_figures(tmp_path):
    w = LLMWorker()
    r = Router(pools_config([("llm", "cpu", False, [w.port], None)]), tmp_path)
    try:
        r.wait_healthy(1)
        llm = r.backend(w.port)["llm"]
        assert [(x["model"], x["running"], x["waiting"]) for x in llm] == [("chat", 3, 1)], llm
        w.close()  # the probes now find nobody listening
        deadline = time.time() + 10
        while r.backend(w.port)["healthy"] and time.time() < deadline:
            time.sleep(0.05)
        b = r.backend(w.port)
        assert not b["healthy"], b
        assert b["llm"] == [], b
    finally:
        assert r.stop() == 0
        w.close()
