"""IoBinding (TIERSERVE_IO_BINDING) and the per-instance device plan (instance_group.gpus).

On the GPU tiers the worker runs through ORT's IoBinding by default, outputs bound to pinned
host memory; TIERSERVE_IO_BINDING=on forces the same code path on the CPU tier (outputs bound
to CPU memory), which is how these tests exercise it without a GPU. The CUDA-only part (the
CudaPinned memory info and the device_id provider option) is checked by tests/gpu/run.sh.

1. test_infer's per-datatype, output-subset and error tests, re-run against a worker with
   binding forced on (the `server` fixture is overridden in this module);
2. replies byte-identical to a worker running plain Run() (TIERSERVE_IO_BINDING=auto on CPU);
3. dynamic batching under concurrency, mixed output subsets in one Run(), a run terminated on
   its deadline, every instance with its own binding;
4. what /v2/status and the log say; the instance plan for `gpus` on the CPU tier.
"""
import concurrent.futures as cf
import shutil

import numpy as np
import pytest

import gen_test_models
import tritonlike
from conftest import start_worker
from test_batching import BATCH_CFG, DTYPES, assert_own_rows, fire, values
from test_infer import (  # noqa: F401  (re-collected here, against the binding worker)
    DEMO_X, infer, tensor, test_binary_data_output_overridden_per_output, test_demo,
    test_error_unknown_output, test_error_wrong_datatype, test_fixed_shape,
    test_identity_bool_binary_layout, test_identity_bytes_binary_nul_non_utf8,
    test_identity_bytes_json_with_nul, test_identity_float_specials_binary,
    test_identity_roundtrip, test_identity_uint64_full_range_binary_in_json_out,
    test_identity_zero_elements, test_json_output_keeps_negative_zero, test_simple,
    test_simple_mixed_binary_and_json_inputs, test_simple_mixed_output_flags,
    test_simple_one_output, test_tritonlike_infer, test_two_versions)

BIND_ON = {"EXECUTION_MODE": "cpu", "TIERSERVE_IO_BINDING": "on"}


@pytest.fixture(scope="module")
def server(test_repo, tmp_path_factory):
    """The generated repository with binding forced on: two runners sharing one session
    (placement off), so two IoBindings on one session run concurrently."""
    w = start_worker(test_repo, tmp_path_factory.mktemp("iob"),
                     env=dict(BIND_ON, TIERSERVE_INSTANCES="2", TIERSERVE_CPU_PLACEMENT="0"))
    yield w
    assert w.stop() == 0, w.log_text()[-4000:]
    assert not w.sanitizer_reports(), w.log_text()[-8000:]


@pytest.fixture(scope="module")
def client(server):
    return tritonlike.TritonLikeClient(server.url)


@pytest.fixture(scope="module")
def plain(test_repo, tmp_path_factory):
    """The same repository on plain Run(): auto resolves to off on the CPU tier."""
    w = start_worker(test_repo, tmp_path_factory.mktemp("plain"),
                     env={"EXECUTION_MODE": "cpu", "TIERSERVE_IO_BINDING": "auto",
                          "TIERSERVE_INSTANCES": "2", "TIERSERVE_CPU_PLACEMENT": "0"})
    yield w
    assert w.stop() == 0, w.log_text()[-4000:]


def status_by_name(w):
    code, st = w.get_json("/v2/status")
    assert code == 200
    return {(m["name"], m["version"]): m for m in st["models"]}


# ---------------------------------------------------------------------------------------
# status and log
# ---------------------------------------------------------------------------------------
def test_status_and_log_say_binding_is_on(server):
    models = status_by_name(server)
    assert len(models) == sum(len(m["versions"]) for m in gen_test_models.MODELS.values())
    for key, m in models.items():
        assert m["ready"] and m["io_binding"] is True, (key, m)
        assert m["io_binding_note"].startswith("on: outputs bound to CPU memory"), m
        assert "TIERSERVE_IO_BINDING=on on the cpu tier" in m["io_binding_note"]
        assert m["instances"] == 2 and m["instance_note"] is None
        assert [(i["device"], i["cpus"]) for i in m["instance_plan"]] == [("cpu", None)] * 2
    ready = [l for l in server.log_lines() if l.get("msg") == "model ready"]
    assert len(ready) == len(models) and all(l["io_binding"] == "true" for l in ready)
    assert any(l.get("msg", "").startswith("io binding on: ") and l.get("model") == "demo"
               for l in server.log_lines())


def test_status_auto_is_off_on_cpu(plain):
    for key, m in status_by_name(plain).items():
        assert m["io_binding"] is False, (key, m)
        assert m["io_binding_note"] == \
            "off: plain Run() (TIERSERVE_IO_BINDING=auto on the cpu tier)", m
    ready = [l for l in plain.log_lines() if l.get("msg") == "model ready"]
    assert ready and all(l["io_binding"] == "false" for l in ready)


# ---------------------------------------------------------------------------------------
# the same bytes as plain Run()
# ---------------------------------------------------------------------------------------
def both(server, plain, model, inputs, **kw):
    a = infer(server, model, inputs, **kw)
    b = infer(plain, model, inputs, **kw)
    assert a.status == b.status == 200, (a.body[:300], b.body[:300])
    assert a.body == b.body, f"{model}: replies differ"
    return a


@pytest.mark.parametrize("binary", [True, False], ids=["binary", "json"])
@pytest.mark.parametrize("dt", gen_test_models.IDENTITY_DTYPES)
def test_identity_same_as_plain_run(server, plain, dt, binary):
    x = values(dt, 3, 7, seed=11)
    if dt == "BF16":  # exactly representable: the JSON path would round otherwise
        x = (x.view(np.uint32) & np.uint32(0xFFFF0000)).view(np.float32)
    if dt == "UINT64" and not binary:  # JSON integers stop at INT64_MAX
        x = x // 2
    if dt == "BYTES" and not binary:
        x = np.array([[f"t{i}-{j}" for j in range(7)] for i in range(3)], dtype=object)
    params = {"binary_data_output": True} if binary else None
    both(server, plain, f"identity_{dt.lower()}", [tensor("INPUT0", dt, x, binary)],
         parameters=params)


@pytest.mark.parametrize("dt", gen_test_models.SIMPLE_DTYPES)
def test_simple_subsets_same_as_plain_run(server, plain, dt):
    a, b = values(dt, 4, 16, seed=21), values(dt, 4, 16, seed=22)
    if dt.startswith("INT"):  # keep a + b, a - b inside the type
        a, b = a // 4, b // 4
    ins = [tensor("INPUT0", dt, a, True), tensor("INPUT1", dt, b, True)]
    for outs in (None, [{"name": "OUTPUT1"}], [{"name": "OUTPUT1"}, {"name": "OUTPUT0"}],
                 [{"name": "OUTPUT0", "parameters": {"binary_data": True}}]):
        both(server, plain, f"simple_{dt.lower()}", ins, outputs=outs)


def test_demo_and_slow_same_as_plain_run(server, plain):
    for outs in (None, [{"name": "label"}], [{"name": "probabilities"}]):
        both(server, plain, "demo", [tensor("input", "FP32", DEMO_X, True)], outputs=outs,
             parameters={"binary_data_output": True})
    x = values("FP32", 8, gen_test_models.SLOW_DIM, seed=5)
    r = both(server, plain, "slow", [tensor("x", "FP32", x, True)],
             parameters={"binary_data_output": True})
    np.testing.assert_allclose(r.array("y"), gen_test_models.slow_reference(x), atol=1e-3)


# ---------------------------------------------------------------------------------------
# batching, concurrency, deadlines
# ---------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def batch_worker(test_repo, tmp_path_factory):
    """Every test model batching, binding on, two placed instances: a session and a
    binding each."""
    repo = tmp_path_factory.mktemp("iobbatch")
    names = [f"identity_{dt.lower()}" for dt in DTYPES] + ["simple_fp32", "demo", "slow"]
    for name in names:
        shutil.copytree(test_repo / name, repo / name)
        (repo / name / "config.yaml").write_text(BATCH_CFG.replace("16", "64"))
    w = start_worker(repo, tmp_path_factory.mktemp("iobb"),
                     env=dict(BIND_ON, TIERSERVE_INSTANCES="2"))
    yield w
    assert w.stop() == 0, w.log_text()[-4000:]


def batch_runs(w, model):
    from helpers import metric
    text = w.http("GET", "/metrics")[2].decode()
    lbl = f'model="{model}",version="1"'
    return (metric(text, "tierserve_batch_size_count", lbl) or 0,
            metric(text, "tierserve_batch_size_sum", lbl) or 0)


@pytest.mark.parametrize("dt", DTYPES)
def test_batched_requests_get_their_own_rows(batch_worker, dt):
    model = f"identity_{dt.lower()}"
    runs0, rows0 = batch_runs(batch_worker, model)
    datas = [values(dt, 1 + i % 3, 5, seed=50 + i) for i in range(12)]
    results = fire(batch_worker.url, model, [[("INPUT0", d, dt)] for d in datas])
    assert_own_rows(dt, datas, results)
    runs1, rows1 = batch_runs(batch_worker, model)
    assert rows1 - rows0 == 12
    assert runs1 - runs0 < 12, "no batch was formed"


def test_batched_output_subsets_share_a_run(batch_worker):
    """Requests asking for different outputs merge into one Run() (all outputs bound),
    each gets exactly what it asked for."""
    pairs = [(values("FP32", 1 + i % 3, 16, seed=70 + i), values("FP32", 1 + i % 3, 16, seed=90 + i))
             for i in range(12)]
    wanted = [["OUTPUT0", "OUTPUT1"], ["OUTPUT1"], [("OUTPUT0", False)], None]

    def one(i):
        a, b = pairs[i]
        c = tritonlike.TritonLikeClient(batch_worker.url)
        return c.infer("simple_fp32", [("INPUT0", a, "FP32"), ("INPUT1", b, "FP32")],
                       outputs=wanted[i % 4])
    runs0, _ = batch_runs(batch_worker, "simple_fp32")
    with cf.ThreadPoolExecutor(12) as ex:
        results = list(ex.map(one, range(12)))
    for i, r in enumerate(results):
        a, b = pairs[i]
        w = wanted[i % 4]
        names = {n if isinstance(n, str) else n[0] for n in w} if w else {"OUTPUT0", "OUTPUT1"}
        for name, ref in (("OUTPUT0", a + b), ("OUTPUT1", a - b)):
            if name in names:
                np.testing.assert_allclose(r.as_numpy(name), ref, rtol=1e-6)
            else:
                assert r.as_numpy(name) is None
    assert batch_runs(batch_worker, "simple_fp32")[0] - runs0 < 12


def test_demo_concurrent_mixed_shapes(batch_worker):
    from gen_demo import demo_reference
    xs = [values("FP32", 1 + i % 5, 4, seed=300 + i) for i in range(16)]
    results = fire(batch_worker.url, "demo", [[("input", x, "FP32")] for x in xs], binary=False)
    for x, r in zip(xs, results):
        ref = demo_reference(x)
        np.testing.assert_allclose(r.as_numpy("probabilities"), ref["probabilities"],
                                   rtol=1e-5, atol=1e-6)
        assert np.array_equal(r.as_numpy("label"), ref["label"])


def test_deadline_terminates_a_bound_run_and_the_binding_is_reused(batch_worker):
    """A lone request whose deadline passes while it runs is terminated (RunOptions); the
    runner's binding is cleared on that failure and serves the next requests correctly."""
    x = values("FP32", 64, gen_test_models.SLOW_DIM, seed=8)
    c = tritonlike.TritonLikeClient(batch_worker.url)
    with pytest.raises(tritonlike.InferenceServerException) as e:
        c.infer("slow", [("x", x, "FP32")], timeout=5000)  # 5 ms; a run takes tens of ms
    assert e.value.status() == "504" and "(while running)" in str(e.value), str(e.value)
    ref = gen_test_models.slow_reference(x)
    for r in fire(batch_worker.url, "slow", [[("x", x, "FP32")]] * 4):
        np.testing.assert_allclose(r.as_numpy("y"), ref, atol=1e-3)
    # the terminated run shows up as a timeout, nothing else failed
    text = batch_worker.http("GET", "/metrics")[2].decode()
    assert 'tierserve_requests_total{model="slow",version="1",outcome="error"} 0' in text


def test_batch_worker_status(batch_worker):
    m = status_by_name(batch_worker)[("identity_fp32", "1")]
    assert m["batching"] is True and m["io_binding"] is True
    plan = m["instance_plan"]
    assert [i["device"] for i in plan] == ["cpu", "cpu"]
    assert all(i["cpus"] for i in plan) and plan[0]["cpus"] != plan[1]["cpus"]
    assert plan == [{"instance": k, "kind": "KIND_AUTO", "device": "cpu", "cpus": cpus}
                    for k, cpus in enumerate(m["instance_cpus"])]


# ---------------------------------------------------------------------------------------
# instance_group.gpus on the CPU tier
# ---------------------------------------------------------------------------------------
def test_gpus_on_the_cpu_tier_are_ignored_and_said_so(test_repo, tmp_path):
    repo = tmp_path / "repo"
    shutil.copytree(test_repo / "demo", repo / "demo")
    (repo / "demo" / "config.yaml").write_text(
        "instance_group:\n  - count: 2\n    kind: KIND_GPU\n    gpus: [0, 1]\n")
    shutil.copytree(test_repo / "identity_fp32", repo / "identity_fp32")
    (repo / "identity_fp32" / "config.yaml").write_text(
        "instance_group:\n  - count: 1\n    kind: KIND_CPU\n  - count: 1\n    gpus: [1]\n")
    w = start_worker(repo, tmp_path, env=BIND_ON)
    try:
        models = status_by_name(w)
        demo = models[("demo", "1")]
        # gpus ignored: `count` instances (not count x gpus), all on CPU, each on its cores
        assert demo["instances"] == 2
        assert demo["instance_note"] == \
            "instance_group.gpus [0,1] ignored on the cpu tier: 2 instance(s) on CPU"
        assert [(i["instance"], i["kind"], i["device"]) for i in demo["instance_plan"]] == \
            [(0, "KIND_GPU", "cpu"), (1, "KIND_GPU", "cpu")]
        assert [i["cpus"] for i in demo["instance_plan"]] == demo["instance_cpus"]
        assert demo["io_binding"] is True
        ident = models[("identity_fp32", "1")]
        assert ident["instances"] == 2
        assert [(i["kind"], i["device"]) for i in ident["instance_plan"]] == \
            [("KIND_CPU", "cpu"), ("KIND_AUTO", "cpu")]
        assert "gpus [1] ignored" in ident["instance_note"]
        assert any(l.get("msg") == demo["instance_note"] for l in w.log_lines())
        cfg = w.get_json("/v2/models/demo/config")[1]
        assert cfg["instance_group"] == [{"count": 2, "kind": "KIND_CPU"}]
        from gen_demo import demo_reference
        for r in fire(w.url, "demo", [[("input", DEMO_X, "FP32")]] * 6):
            np.testing.assert_allclose(r.as_numpy("probabilities"),
                                       demo_reference(DEMO_X)["probabilities"], rtol=1e-5, atol=1e-6)
    finally:
        assert w.stop() == 0


def test_bad_gpus_fail_the_model_with_the_position(test_repo, tmp_path):
    repo = tmp_path / "repo"
    for name in ("demo", "identity_fp32"):
        shutil.copytree(test_repo / name, repo / name)
    (repo / "demo" / "config.yaml").write_text(
        "instance_group:\n  - count: 1\n    kind: KIND_CPU\n    gpus: [0]\n")
    w = start_worker(repo, tmp_path, env={"EXECUTION_MODE": "cpu", "TIERSERVE_EXIT_ON_ERROR": "0",
                                          "TIERSERVE_STRICT_READINESS": "0"})
    try:
        models = status_by_name(w)
        demo = models[("demo", "1")]
        assert demo["ready"] is False and demo["io_binding"] is False
        assert demo["instance_plan"] is None
        assert f"{repo}/demo/config.yaml:4:11: instance_group.gpus is set on a KIND_CPU group" \
            in demo["reason"], demo["reason"]
        assert models[("identity_fp32", "1")]["ready"] is True
    finally:
        assert w.stop() == 0
