"""POST /v1/embeddings on generated tiny BERT-style encoders (tests/models/gen_encoder_model.py),
against their numpy reference (tests/models/encoder_reference.py), to 1e-5.

What is held:
- single, batched, mixed-length and token-array inputs equal the reference; a short input's
  vector is the same alone and beside a long one (padding under the attention mask), also
  when many requests are batched together by the scheduler; base64 decodes to the floats;
- mean, CLS and last-token pooling, Normalize on and off, a graph with a pooled output;
- usage counts the tokens; /v1/models says each model's capabilities and context length;
  chat on an embedding model and embeddings on a chat model are 400s naming capabilities;
- hostile and wrong inputs get 400s naming the problem (param input / dimensions / ...);
- a sentence-transformers folder the worker cannot serve fails its load naming what is missing;
- npm's openai SDK, unchanged, gets the reference's vectors from the worker and through the
  router; the router pins sensitive requests to its CPU pool and bills the prompt tokens.
"""
import base64
import json
import re
import shutil
import socket
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from conftest import start_worker
from helpers import get_json, metric, model_status, post_json
from llm_fixture import LLM_DIR, MODELS, write_tiny_llm
from test_router import Router, pools_config

sys.path.insert(0, str(MODELS))
from encoder_reference import EncoderReference  # noqa: E402

TEXTS = ["Reset my password, please!", "hello",
         "how do I cancel my order? the refund was not shipped and the invoice is wrong"]
VARIANTS = {  # model name -> generator flags
    "emb": [],
    "emb_cls": ["--pooling", "cls", "--no-normalize", "--no-token-type-ids"],
    "emb_last": ["--pooling", "lasttoken"],
    "emb_pooled": ["--pooled-output", "--no-normalize"],
}
TOL = 1e-5


def gen(d, flags=()):
    d.mkdir(parents=True)
    r = subprocess.run([sys.executable, str(MODELS / "gen_encoder_model.py"), str(d), *flags],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return d


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    repo = tmp_path_factory.mktemp("embrepo")
    refs = {name: EncoderReference(str(gen(repo / name / "1", flags))) for name, flags in VARIANTS.items()}
    write_tiny_llm(repo / "tiny" / "1")
    return repo, refs


@pytest.fixture(scope="module")
def worker(repo, tmp_path_factory):
    w = start_worker(repo[0], tmp_path_factory.mktemp("emb"), env={"EXECUTION_MODE": "cpu"})
    yield w
    assert w.stop() == 0, w.log_text()[-4000:]


def embed(w, body, headers=None):
    code, h, out = post_json((w.host, w.port), "/v1/embeddings", body, headers)
    return code, h, out


def vectors(out):
    assert [d["index"] for d in out["data"]] == list(range(len(out["data"])))
    assert all(d["object"] == "embedding" for d in out["data"])
    return [np.array(d["embedding"], np.float32) for d in out["data"]]


def close(got, want):
    assert len(got) == len(want)
    for g, x in zip(got, want):
        assert g.shape == x.shape and np.abs(g - x).max() < TOL, np.abs(g - x).max()


# ---- vectors equal the reference ------------------------------------------------------------

@pytest.mark.parametrize("name", list(VARIANTS))
def test_texts_single_and_batched_equal_the_reference(worker, repo, name):
    ref = repo[1][name]
    want = ref.embed([ref.tokenize(t) for t in TEXTS])
    for i, t in enumerate(TEXTS):
        code, _, out = embed(worker, {"model": name, "input": t})
        assert code == 200, out
        close(vectors(out), [want[i]])
    before = metric(worker, "tierserve_prompt_tokens_total", model=name, version="1", required=True)
    code, _, out = embed(worker, {"model": name, "input": TEXTS})
    assert code == 200, out
    assert out["object"] == "list" and out["model"] == name
    close(vectors(out), want)
    n = sum(len(ref.tokenize(t)) for t in TEXTS)
    assert out["usage"] == {"prompt_tokens": n, "total_tokens": n}
    assert metric(worker, "tierserve_prompt_tokens_total", model=name, version="1") - before == n


def test_normalize_and_pooling_are_the_models_own(worker, repo):
    """The variants differ from each other: a worker that ignored 1_Pooling or Normalize fails here."""
    got = {}
    for name in VARIANTS:
        code, _, out = embed(worker, {"model": name, "input": TEXTS[2]})
        assert code == 200, out
        got[name] = vectors(out)[0]
    assert abs(np.linalg.norm(got["emb"]) - 1) < 1e-5 and abs(np.linalg.norm(got["emb_last"]) - 1) < 1e-5
    assert abs(np.linalg.norm(got["emb_cls"]) - 1) > 0.01 and abs(np.linalg.norm(got["emb_pooled"]) - 1) > 0.01


def test_token_arrays_and_one_token_array(worker, repo):
    ref = repo[1]["emb"]
    ids = [ref.tokenize(t) for t in TEXTS]
    code, _, out = embed(worker, {"model": "emb", "input": ids})
    assert code == 200, out
    close(vectors(out), ref.embed(ids))
    code, _, out = embed(worker, {"model": "emb", "input": ids[1]})  # one list of ids: one input
    assert code == 200, out
    close(vectors(out), ref.embed([ids[1]]))
    # ids are taken as given: no [CLS]/[SEP] added
    bare = ids[2][1:-1]
    code, _, out = embed(worker, {"model": "emb", "input": [bare]})
    assert code == 200 and out["usage"]["prompt_tokens"] == len(bare), out
    close(vectors(out), ref.embed([bare]))


def test_a_short_input_is_the_same_beside_a_long_one(worker, repo):
    """Padded to the longest under the mask: the short vector must not move."""
    ref = repo[1]["emb"]
    short, long_ = ref.tokenize("hello"), ref.tokenize(" ".join(["refund order"] * 14))
    assert len(long_) > 4 * len(short)
    code, _, alone = embed(worker, {"model": "emb", "input": [short]})
    assert code == 200, alone
    code, _, both = embed(worker, {"model": "emb", "input": [long_, short, long_[:9]]})
    assert code == 200, both
    a, b = vectors(alone)[0], vectors(both)[1]
    assert np.abs(a - b).max() < TOL
    close(vectors(both), ref.embed([long_, short, long_[:9]]))


def test_concurrent_requests_batched_together_equal_the_reference(worker, repo):
    """Many clients at once: the scheduler gathers their rows into shared Run()s of mixed
    lengths (runs counted below), and every vector is still its own reference."""
    ref = repo[1]["emb"]
    inputs = [TEXTS[i % 3] if i % 2 else TEXTS[i % 3][:40] + " and the refund" * (i % 3) for i in range(24)]
    want = ref.embed([ref.tokenize(t) for t in inputs])
    runs0 = model_status(worker, "emb")["embedding"]["runs"]
    results = [None] * len(inputs)

    def one(i):
        results[i] = embed(worker, {"model": "emb", "input": inputs[i]})

    ts = [threading.Thread(target=one, args=(i,)) for i in range(len(inputs))]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    for i, (code, _, out) in enumerate(results):
        assert code == 200, out
        close(vectors(out), [want[i]])
    # fewer Run()s than requests: some were gathered into one (the decode threads hand
    # requests over while the runner is busy, so a batch forms whatever the machine's speed)
    assert model_status(worker, "emb")["embedding"]["runs"] - runs0 < len(inputs)


def test_base64_decodes_to_the_floats(worker, repo):
    code, _, f = embed(worker, {"model": "emb", "input": TEXTS, "encoding_format": "float"})
    assert code == 200, f
    code, _, b = embed(worker, {"model": "emb", "input": TEXTS, "encoding_format": "base64"})
    assert code == 200, b
    for fd, bd in zip(f["data"], b["data"]):
        got = np.frombuffer(base64.b64decode(bd["embedding"]), "<f4")
        assert np.array_equal(got, np.array(fd["embedding"], np.float32))


def test_dimensions_only_the_models_own(worker):
    code, _, out = embed(worker, {"model": "emb", "input": "hello", "dimensions": 32})
    assert code == 200 and len(out["data"][0]["embedding"]) == 32, out
    code, _, out = embed(worker, {"model": "emb", "input": "hello", "dimensions": 16})
    assert code == 400 and out["error"]["param"] == "dimensions", out
    assert "dimensions" in out["error"]["message"]


# ---- /v1/models and capabilities --------------------------------------------------------------

def test_models_say_capabilities_and_context(worker):
    code, body = worker.get_json("/v1/models")
    assert code == 200
    by = {m["id"]: m for m in body["data"]}
    assert set(by) == set(VARIANTS) | {"tiny"}
    assert by["emb"]["capabilities"] == ["embeddings"] and by["emb"]["context_length"] == 32
    assert by["emb"]["max_model_len"] == 32
    assert by["tiny"]["capabilities"] == ["chat", "completions"] and by["tiny"]["context_length"] == 2048
    code, one = worker.get_json("/v1/models/emb_cls")
    assert code == 200 and one["capabilities"] == ["embeddings"], one
    # /v2/status says the same per model: the router's probe reads it there (docs/router.md)
    st = model_status(worker, "emb")
    assert st["capabilities"] == ["embeddings"] and st["context_length"] == 32, st
    st = model_status(worker, "tiny")
    assert st["capabilities"] == ["chat", "completions"] and st["context_length"] == 2048, st
    # the load's log line names what the model is
    ready = {ln["model"]: ln["msg"] for ln in worker.log_lines() if ln.get("msg", "").startswith("model ready")}
    assert ready["emb"] == "model ready (embeddings, /v1)" and ready["tiny"] == "model ready (LLM, /v1)", ready


def test_chat_on_an_embedding_model_and_embeddings_on_a_chat_model(worker):
    code, _, out = post_json((worker.host, worker.port), "/v1/chat/completions",
                             {"model": "emb", "messages": [{"role": "user", "content": "hi"}]})
    assert code == 400, out
    assert out["error"]["param"] == "model" and "embeddings" in out["error"]["message"], out
    code, _, out = embed(worker, {"model": "tiny", "input": "hello"})
    assert code == 400, out
    assert out["error"]["param"] == "model" and '["chat","completions"]' in out["error"]["message"], out
    code, _, out = embed(worker, {"model": "nope", "input": "hello"})
    assert code == 404 and out["error"]["code"] == "model_not_found", out


# ---- hostile and wrong inputs -----------------------------------------------------------------

@pytest.mark.parametrize("body,param,words", [
    ({"input": ""}, "input", "empty string"),
    ({"input": ["hello", ""]}, "input", "input[1] is an empty string"),
    ({"input": []}, "input", "empty list"),
    ({"input": [[]]}, "input", "empty list of tokens"),
    ({"input": 5}, "input", "must be a string"),
    ({"input": {"a": 1}}, "input", "must be a string"),
    ({"input": None}, "input", "required"),
    ({}, "input", "required"),
    ({"input": ["hello", 5]}, "input", "input[1] is not a string"),
    ({"input": [[1, 2], "hello"]}, "input", "input[1] is not a list"),
    ({"input": [[1, 2, 10 ** 6]]}, "input", "input[0][2] is not a token id"),
    ({"input": [[1, -1]]}, "input", "input[0][1] is not a token id"),
    ({"input": [[1, 2.5]]}, "input", "input[0][1] is not a token id"),
    ({"input": [[1, "2"]]}, "input", "input[0][1] is not a token id"),
    ({"input": ["x"] * 2049}, "input", "at most 2048"),
    ({"input": "refund " * 40}, "input", "maximum per input"),
    ({"input": [list(range(5, 45))]}, "input", "maximum is 32 tokens"),
    ({"input": "hello", "encoding_format": "int8"}, "encoding_format", "float"),
    ({"input": "hello", "dimensions": "32"}, "dimensions", "dimensions"),
    ({"input": "hello", "user": 7}, "user", "string"),
    ({"input": "hello", "temperature": 0}, "temperature", "Unrecognized request argument"),
])
def test_bad_requests_are_400s_naming_the_problem(worker, body, param, words):
    code, _, out = embed(worker, {"model": "emb", **body})
    assert code == 400, out
    assert out["error"]["type"] == "invalid_request_error" and out["error"]["param"] == param, out
    assert words in out["error"]["message"], out


def test_over_the_input_limit_says_context_length_exceeded(worker):
    code, _, out = embed(worker, {"model": "emb", "input": ["hello", "refund " * 40]})
    assert code == 400 and out["error"]["code"] == "context_length_exceeded", out
    assert "input[1]" in out["error"]["message"]


def test_total_tokens_bounded(worker):
    # 2048 inputs of 32 tokens is 65,536: under the 300k bound, served; a body past 8 MiB is 413
    ids = [[7] * 32] * 2048
    code, _, out = embed(worker, {"model": "emb", "input": ids})
    assert code == 200 and out["usage"]["prompt_tokens"] == 65536, str(out)[:300]
    code, _, out = embed(worker, {"model": "emb", "input": ["hello " * 1000] * 2048})  # 12 MB
    assert code == 413 and "limit" in out["error"]["message"], str(out)[:300]


def test_clients_that_leave_cost_nothing_lasting(worker, repo):
    """Requests whose clients hang up (while parsed, queued or run) are dropped; the next is
    served, and the sanitizer build finds nothing at exit."""
    body = json.dumps({"model": "emb", "input": [[7] * 32] * 2048}).encode()
    for _ in range(6):
        s = socket.create_connection((worker.host, worker.port), timeout=30)
        s.sendall(b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\n\r\n" % len(body) + body)
        s.close()
    ref = repo[1]["emb"]
    code, _, out = embed(worker, {"model": "emb", "input": TEXTS})
    assert code == 200, out
    close(vectors(out), ref.embed([ref.tokenize(t) for t in TEXTS]))


def timeouts(w):
    return metric(w, "tierserve_requests_total", model="emb", version="1", outcome="timeout") or 0


def test_a_deadline_passed_in_the_queue_is_the_chat_paths_504(worker):
    """X-Request-Timeout-Ms on /v1/embeddings as on chat: a request whose deadline passes while
    it waits behind others gets the chat path's 504 at its deadline, not after the queue; the
    requests ahead of it are served. The deadline is a third of one big request's run, measured
    here (Tierserve-Compute-Ms), and the small request waits behind at least one whole such run
    (the model has one runner: one is running and one queued when it is sent)."""
    big = {"model": "emb", "input": [[7] * 32] * 2048}
    code, h, out = embed(worker, big)
    assert code == 200, str(out)[:300]
    run_ms = float(h["tierserve-compute-ms"])
    deadline_ms = max(1, int(run_ms / 3))
    results = []
    ahead = [threading.Thread(target=lambda: results.append(embed(worker, big)[0])) for _ in range(3)]
    for t in ahead:
        t.start()
    stop = time.monotonic() + 60
    while time.monotonic() < stop:
        e = model_status(worker, "emb")["embedding"]
        if e["running"] >= 1 and e["queued"] >= 1:
            break
    else:
        pytest.fail("the big requests never queued")
    t0 = timeouts(worker)
    sent = time.monotonic()
    code, _, out = embed(worker, {"model": "emb", "input": "hello"}, {"X-Request-Timeout-Ms": str(deadline_ms)})
    took = time.monotonic() - sent
    assert code == 504, out
    err = out["error"]
    assert (err["type"], err["param"], err["code"]) == ("server_error", None, "timeout"), err
    assert re.fullmatch(r"request timed out after \d+ ms \(before its embeddings were computed\)", err["message"]), err
    for t in ahead:
        t.join()
    assert results == [200, 200, 200]
    assert took * 1e3 < run_ms, (took, run_ms)  # answered at its deadline, not behind the queue
    assert timeouts(worker) == t0 + 1
    print(f"one big request runs {run_ms:.0f} ms; a {deadline_ms} ms deadline: 504 after {took * 1e3:.0f} ms")
    # a deadline that holds is served; a header that is no number is the chat path's 400
    code, _, out = embed(worker, {"model": "emb", "input": "hello"}, {"X-Request-Timeout-Ms": "60000"})
    assert code == 200, out
    code, _, out = embed(worker, {"model": "emb", "input": "hello"}, {"X-Request-Timeout-Ms": "soon"})
    assert code == 400 and out["error"]["message"] == "X-Request-Timeout-Ms must be a positive integer", out


def test_priority_header(worker):
    code, _, out = embed(worker, {"model": "emb", "input": "hello"}, {"X-Priority": "batch"})
    assert code == 200, out
    code, _, out = embed(worker, {"model": "emb", "input": "hello"}, {"X-Priority": "soon"})
    assert code == 400 and "X-Priority" in out["error"]["message"], out


def test_not_json_and_no_model(worker):
    code, _, out = post_json((worker.host, worker.port), "/v1/embeddings", {"input": "x"})
    assert code == 400 and out["error"]["param"] == "model", out


# ---- a folder that cannot load -----------------------------------------------------------------

def test_an_encoder_folder_that_cannot_load_names_what_is_missing(tmp_path):
    repo = tmp_path / "bad"
    d = gen(repo / "dense" / "1")
    mods = json.loads((d / "modules.json").read_text())
    mods.append({"idx": 3, "name": "3", "path": "3_Dense", "type": "sentence_transformers.models.Dense"})
    (d / "modules.json").write_text(json.dumps(mods))
    d2 = gen(repo / "maxpool" / "1")
    cfg = json.loads((d2 / "1_Pooling" / "config.json").read_text())
    cfg.update(pooling_mode_mean_tokens=False, pooling_mode_max_tokens=True)
    (d2 / "1_Pooling" / "config.json").write_text(json.dumps(cfg))
    d3 = repo / "notenc" / "1"
    d3.mkdir(parents=True)
    shutil.copyfile(MODELS.parent.parent / "models" / "demo" / "1" / "model.onnx", d3 / "model.onnx")
    shutil.copyfile(d / "tokenizer.json", d3 / "tokenizer.json")
    shutil.copyfile(d / "modules.json", d3 / "modules.json")
    w = start_worker(repo, tmp_path, env={"EXECUTION_MODE": "cpu"},
                     args=["--exit-on-error=false", "--strict-readiness=false"])
    try:
        st = {n: w.get_json(f"/v2/models/{n}")[1] for n in ("dense", "maxpool", "notenc")}
        log = w.log_text()
        assert "module 'sentence_transformers.models.Dense' is not supported" in log, log[-3000:]
        assert "pooling_mode_max_tokens is not supported" in log, log[-3000:]
        assert "not an Optimum feature-extraction export: no input_ids input" in log or \
               "not an Optimum feature-extraction export: input '" in log, log[-3000:]
        assert st
    finally:
        w.stop()


# ---- the openai SDK, and the router -----------------------------------------------------------

def sdk(base, model, key=None):
    args = ["node", str(LLM_DIR / "openai_embed.mjs"), base, model, json.dumps(TEXTS)] + ([key] if key else [])
    r = subprocess.run(args, capture_output=True, text=True, timeout=120, cwd=LLM_DIR)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def check_sdk(out, ref, name):
    want = ref.embed([ref.tokenize(t) for t in TEXTS])
    assert out["one"]["object"] == "list" and out["one"]["model"] == name
    close([np.array(d["embedding"], np.float32) for d in out["one"]["data"]], want[:1])
    close([np.array(d["embedding"], np.float32) for d in out["many"]["data"]], want)  # base64, decoded by the SDK
    close([np.array(d["embedding"], np.float32) for d in out["floats"]["data"]], want)
    n = sum(len(ref.tokenize(t)) for t in TEXTS)
    assert out["many"]["usage"] == {"prompt_tokens": n, "total_tokens": n}
    assert out["empty"] == {"status": 400, "param": "input", "type": "invalid_request_error"}


def test_openai_sdk_against_the_worker(worker, repo):
    check_sdk(sdk(f"http://{worker.host}:{worker.port}/v1", "emb"), repo[1]["emb"], "emb")


KEY = "emb-tenant-key-1"
PRICE = 0.5  # USD per 1k tokens


@pytest.fixture(scope="module")
def fleet(repo, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("embrouter")
    gpu = start_worker(repo[0], tmp, env={"EXECUTION_MODE": "cpu"})
    cpu = start_worker(repo[0], tmp, env={"EXECUTION_MODE": "cpu"})
    # "mixed" is the tiny LLM on one pool and an encoder on the other: /v1/models says what
    # the pools together can do (docs/router.md)
    cfg = pools_config([("gpu", "gpu", False, [gpu.port], [("search", "emb"), ("mixed", "tiny")], "cpu"),
                        ("cpu", "cpu", True, [cpu.port], [("search", "emb"), ("mixed", "emb_cls"),
                                                          ("chat", "tiny")])],
                       f"admin_open: true\ntenants:\n  - {{name: acme, api_key: {KEY}}}\n")
    cfg = cfg.replace("    models:\n", f"    cost: {{model: usage, usd_per_hour: 0, usd_per_1k_tokens: {PRICE}}}\n"
                                        "    models:\n")
    router = Router(cfg, tmp)
    router.wait_healthy(2)
    yield gpu, cpu, router
    assert router.stop() == 0
    for w in (gpu, cpu):
        assert w.stop() == 0, w.log_text()[-4000:]


def test_openai_sdk_through_the_router(fleet, repo):
    _, _, router = fleet
    out = sdk(f"http://{router.url}/v1", "search", KEY)
    ref = repo[1]["emb"]
    want = ref.embed([ref.tokenize(t) for t in TEXTS])
    close([np.array(d["embedding"], np.float32) for d in out["many"]["data"]], want)
    close([np.array(d["embedding"], np.float32) for d in out["floats"]["data"]], want)
    assert out["empty"]["status"] == 400 and out["empty"]["param"] == "input"


def test_sensitive_lands_on_the_cpu_pool_and_is_billed_its_tokens(fleet, repo):
    gpu, cpu, router = fleet
    host, port = router.url.split(":")
    auth = {"Authorization": f"Bearer {KEY}"}
    code, h, out = post_json((host, int(port)), "/v1/embeddings", {"model": "search", "input": TEXTS}, auth)
    assert code == 200 and h["x-tierrouter-pool"] == "gpu", (h, out)
    usd0 = metric(router, "tierrouter_cost_usd_total", pool="cpu", tenant="acme", priority="normal") or 0.0
    tok0 = metric(router, "tierrouter_tenant_tokens_total", pool="cpu", tenant="acme", priority="normal",
                  kind="prompt") or 0
    code, h, out = post_json((host, int(port)), "/v1/embeddings", {"model": "search", "input": TEXTS},
                             {**auth, "X-Data-Class": "sensitive"})
    assert code == 200 and h["x-tierrouter-pool"] == "cpu", (h, out)
    ref = repo[1]["emb"]
    close(vectors(out), ref.embed([ref.tokenize(t) for t in TEXTS]))
    n = out["usage"]["prompt_tokens"]
    tok = metric(router, "tierrouter_tenant_tokens_total", pool="cpu", tenant="acme", priority="normal", kind="prompt")
    usd = metric(router, "tierrouter_cost_usd_total", pool="cpu", tenant="acme", priority="normal")
    assert tok - tok0 == n
    assert usd - usd0 == pytest.approx(n * PRICE / 1000, rel=1e-6)


def test_router_models_say_what_the_pools_can_do(fleet):
    """The router's /v1/models carries each model's capabilities and context length as the
    workers' probes report them; where pools serve different models under one name, the union
    of the capabilities and the smallest context."""
    _, _, router = fleet
    auth = {"Authorization": f"Bearer {KEY}"}
    body = get_json(router, "/v1/models", auth)
    by = {m["id"]: m for m in body["data"]}
    assert set(by) == {"search", "mixed", "chat"}, by
    emb = {"object": "model", "created": 0, "owned_by": "tierserve"}
    assert by["search"] == {"id": "search", **emb, "capabilities": ["embeddings"], "context_length": 32,
                            "max_model_len": 32}, by["search"]
    assert by["chat"] == {"id": "chat", **emb, "capabilities": ["chat", "completions"], "context_length": 2048,
                          "max_model_len": 2048}, by["chat"]
    assert by["mixed"] == {"id": "mixed", **emb, "capabilities": ["chat", "completions", "embeddings"],
                           "context_length": 32, "max_model_len": 32}, by["mixed"]
    assert get_json(router, "/v1/models/mixed", auth) == by["mixed"]


def test_the_router_is_told_the_usage_in_the_head(worker):
    """A reply too big for the router to read is billed from Tierserve-Usage (router/v1.h)."""
    code, h, out = embed(worker, {"model": "emb", "input": TEXTS}, {"Tierserve-Accounting": "1"})
    assert code == 200, out
    n = out["usage"]["prompt_tokens"]
    assert h["tierserve-usage"].startswith(f"prompt_tokens={n} completion_tokens=0 compute_ms="), h
    assert float(h["tierserve-compute-ms"]) > 0
    code, h, out = embed(worker, {"model": "emb", "input": TEXTS})
    assert code == 200 and "tierserve-usage" not in h
