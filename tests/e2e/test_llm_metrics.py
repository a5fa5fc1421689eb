"""/metrics with two versions of one LLM (and a KServe model beside them) is a valid
Prometheus exposition: every series (name and label set) once, every family's lines together
and announced by at most one HELP and one TYPE. The LLM families carry {model,version} as the
KServe ones do. Parsed with the strict checker in promtext.py. One request moves each LLM
histogram's count and the token counters by exactly what it did."""
import http.client
import json
import shutil

import pytest

from conftest import ROOT, start_worker
from helpers import metrics_text
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


def scrape(w):
    return parse_strict(metrics_text(w))


def tiny(series, version):
    """The tiny LLM's series of one version: {(name, other labels): value}."""
    out = {}
    for (n, l), v in series.items():
        d = dict(l)
        if d.get("model") == "tiny" and d.get("version") == version:
            out[(n, tuple((k, x) for k, x in l if k not in ("model", "version")))] = v
    return out


HISTOGRAMS = ("tierserve_time_to_first_token_seconds", "tierserve_inter_token_latency_seconds",
              "tierserve_e2e_request_latency_seconds", "tierserve_request_queue_time_seconds")


def test_one_request_moves_each_llm_histogram_and_counter_exactly(worker):
    """One completion of G tokens after a P-token prompt: TTFT, e2e latency and queue time each
    count 1, inter-token latency G - 1 (one gap between each two tokens), the prompt and
    generation token counters P and G; each histogram's +Inf bucket moves with its count and
    its sum grows; the version that served nothing stays as it was."""
    G = 6
    before = scrape(worker)
    c = http.client.HTTPConnection(worker.host, worker.port, timeout=60)
    c.request("POST", "/v1/completions", body=json.dumps({"model": "tiny", "prompt": "Hello world", "max_tokens": G,
                                                         "temperature": 0}).encode(),
              headers={"Content-Type": "application/json"})
    r = c.getresponse()
    a = json.loads(r.read())
    c.close()
    assert r.status == 200, a
    assert a["usage"]["completion_tokens"] == G and a["choices"][0]["finish_reason"] == "length"
    P = a["usage"]["prompt_tokens"]
    assert P == 3  # <s> ▁Hello ▁world
    after = scrape(worker)
    b2, a2 = tiny(before, "2"), tiny(after, "2")

    def delta(name, labels=()):
        return a2[(name, labels)] - b2[(name, labels)]

    want = {"tierserve_time_to_first_token_seconds": 1, "tierserve_inter_token_latency_seconds": G - 1,
            "tierserve_e2e_request_latency_seconds": 1, "tierserve_request_queue_time_seconds": 1}
    for h in HISTOGRAMS:
        assert delta(h + "_count") == want[h], h
        assert delta(h + "_bucket", (("le", "+Inf"),)) == want[h], h
        assert delta(h + "_sum") > 0 or (h == "tierserve_request_queue_time_seconds" and delta(h + "_sum") >= 0), h
        buckets = sorted(((float(dict(l)["le"]), v) for (n, l), v in a2.items() if n == h + "_bucket"))
        assert len(buckets) > 2 and all(x[1] <= y[1] for x, y in zip(buckets, buckets[1:])), (h, buckets)
    assert delta("tierserve_prompt_tokens_total") == P
    assert delta("tierserve_generation_tokens_total") == G
    assert tiny(after, "1") == tiny(before, "1")
