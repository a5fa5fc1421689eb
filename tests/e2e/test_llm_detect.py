"""Which version folders are LLMs is decided on a structured result of opening them
(llm_model_try_open: not a decoder / a decoder / a broken decoder), never on an error's text:
a plain KServe model with a tokenizer.json beside it is still served over KServe v2, and a
decoder whose signature does not hold fails its load naming the problem (it used to be
taken for "not a decoder" and served over KServe). Raw http.client, no retries."""
import json
import shutil

import numpy as np
import onnx
import pytest

from conftest import ROOT, start_worker
from helpers import send_json
from llm_fixture import write_tiny_llm


@pytest.fixture(scope="module")
def worker(tmp_path_factory):
    repo = tmp_path_factory.mktemp("llmdetect")
    # a classifier-like KServe model that ships a tokenizer.json (and nothing else of an LLM)
    tiny = write_tiny_llm(tmp_path_factory.mktemp("src") / "tiny" / "1")
    shutil.copytree(ROOT / "models" / "demo", repo / "demo")
    shutil.copy(tiny / "tokenizer.json", repo / "demo" / "1" / "tokenizer.json")
    # a decoder whose export lost an output: present.1.value
    broken = repo / "broken" / "1"
    shutil.copytree(tiny, broken)
    m = onnx.load(str(broken / "model.onnx"))
    keep = [o for o in m.graph.output if o.name != "present.1.value"]
    assert len(keep) == len(m.graph.output) - 1
    del m.graph.output[:]
    m.graph.output.extend(keep)
    onnx.save(m, str(broken / "model.onnx"))
    w = start_worker(repo, tmp_path_factory.mktemp("llmdetect-w"), env={"EXECUTION_MODE": "cpu"},
                     args=("--exit-on-error=false", "--strict-readiness=false"))
    yield w
    assert w.stop() == 0, w.log_text()[-4000:]


def call(w, method, path, body=None):
    """One request with a JSON body: (status, raw body)."""
    code, _, data = send_json(w, method, path, body)
    return code, data


def test_tokenizer_beside_a_kserve_model_still_serves_kserve(worker):
    code, data = call(worker, "GET", "/v2/models/demo")
    assert code == 200, data
    meta = json.loads(data)
    inp = meta["inputs"][0]
    shape = [d if d > 0 else 1 for d in inp["shape"]]
    n = int(np.prod(shape))
    code, data = call(worker, "POST", "/v2/models/demo/infer",
                      {"inputs": [{"name": inp["name"], "shape": shape, "datatype": inp["datatype"],
                                   "data": [0] * n}]})
    assert code == 200, data
    assert json.loads(data)["outputs"]
    code, data = call(worker, "GET", "/v1/models")
    assert code == 200 and json.loads(data)["data"] == []
    assert any("tokenizer.json present but not an LLM decoder" in l.get("msg", "") and l.get("model") == "demo"
               for l in worker.log_lines())


def test_broken_decoder_fails_naming_the_problem(worker):
    code, data = call(worker, "GET", "/v2/status")
    assert code == 200
    m = [m for m in json.loads(data)["models"] if m["name"] == "broken"]
    assert len(m) == 1 and m[0]["ready"] is False and m[0]["state"] != "READY", m
    reason = m[0]["reason"]
    assert "no output present.1.value" in reason, reason
    assert "not a usable Optimum text-generation-with-past decoder" in reason, reason
    code, data = call(worker, "POST", "/v1/completions", {"model": "broken", "prompt": "hi"})
    assert code == 404, data
