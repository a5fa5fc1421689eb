"""/metrics with two versions of one LLM (and a KServe model beside them) is a valid
Prometheus exposition: every series (name and label set) once, every family's lines together
and announced by at most one HELP and one TYPE. The LLM families carry {model,version} as the
KServe ones do. Parsed with the strict checker in promtext.py."""
import http.client
import json
import shutil

import pytest

from conftest import ROOT, start_worker
from llm_fixture import write_tiny_llm
from promtext import parse_strict


def test_strict_parser_rejects_duplicates():
    with pytest.raises(AssertionError, match="duplicate series"):
        parse_strict('# TYPE a_total counter\na_total{model="t"} 1\na_total{model="t"} 2\n')
    with pytest.raises(AssertionError, match="split"):
        parse_strict('# TYPE a gauge\na 1\n# TYPE b gauge\nb 1\na{x="1"} 2\n')


@pytest.fixture(scope="module")
def worker(tmp_path_factory):
    repo = tmp_path_factory.mktemp("llmversions")
    write_tiny_llm(repo / "tiny" / "1")
    shutil.copytree(repo / "tiny" / "1", repo / "tiny" / "2")
    (repo / "tiny" / "config.yaml").write_text("version_policy:\n  all: {}\n")
    shutil.copytree(ROOT / "models" / "demo", repo / "demo")
    w = start_worker(repo, tmp_path_factory.mktemp("llmversions-w"), env={"EXECUTION_MODE": "cpu"})
    yield w
    assert w.stop() == 0, w.log_text()[-4000:]


def test_two_versions_of_an_llm_scrape_cleanly(worker):
    c = http.client.HTTPConnection(worker.host, worker.port, timeout=60)
    c.request("POST", "/v1/completions", body=json.dumps({"model": "tiny", "prompt": "Hello", "max_tokens": 3,
                                                         "temperature": 0}).encode(),
              headers={"Content-Type": "application/json"})
    r = c.getresponse()
    assert r.status == 200, r.read()
    r.read()
    c.request("GET", "/metrics")
    r = c.getresponse()
    assert r.status == 200
    text = r.read().decode()
    c.close()
    series = parse_strict(text)
    for fam in ("tierserve_prompt_tokens_total", "tierserve_generation_tokens_total", "tierserve_kv_cache_bytes",
                "tierserve_time_to_first_token_seconds_count"):
        got = {dict(l).get("version") for (n, l) in series if n == fam and dict(l).get("model") == "tiny"}
        assert got == {"1", "2"}, (fam, got)
    # the latest version served the request
    gen = {dict(l)["version"]: v for (n, l), v in series.items()
           if n == "tierserve_generation_tokens_total" and dict(l)["model"] == "tiny"}
    assert gen == {"1": 0.0, "2": 3.0}
    states = {(dict(l)["version"], dict(l)["state"]) for (n, l) in series
              if n == "tierserve_sequences" and dict(l)["model"] == "tiny"}
    assert states == {(v, s) for v in "12" for s in ("running", "waiting")}
