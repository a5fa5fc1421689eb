"""End-to-end: every HTTP endpoint, every datatype, and inference checked against numpy.

One shared worker (conftest `server`, EXECUTION_MODE=cpu) on the generated test repository
(tests/models/gen_test_models.py). Requests are built and replies decoded here by hand
(independent of tritonlike), except in the tritonlike section, which checks what a
tritonclient.http-style client sees.
"""
import json
import re
import struct

import numpy as np
import pytest

import gen_demo
import gen_test_models
import tritonlike
from exactjson import decode_data, exact_json, nearest_float  # noqa: F401  (others import them from here)
from promtext import parse_strict
from conftest import SANITIZED
from helpers import request

MODELS = gen_test_models.MODELS
ALL_DTYPES = list(gen_test_models.IDENTITY_DTYPES)
SIMPLE_DTYPES = list(gen_test_models.SIMPLE_DTYPES)
HDR = "inference-header-content-length"

NP = {"BOOL": np.bool_, "UINT8": np.uint8, "UINT16": np.uint16, "UINT32": np.uint32,
      "UINT64": np.uint64, "INT8": np.int8, "INT16": np.int16, "INT32": np.int32,
      "INT64": np.int64, "FP16": np.float16, "FP32": np.float32, "FP64": np.float64,
      "BF16": np.float32,  # numpy has no bfloat16: values are float32 exactly representable in BF16
      "BYTES": np.object_}
FLOATS = ("FP16", "FP32", "FP64", "BF16")


# ---------------------------------------------------------------------------------------
# wire helpers (written from DESIGN.md's binary-extension description)
# ---------------------------------------------------------------------------------------
def bf16_bits(arr):
    bits = np.ascontiguousarray(arr, dtype="<f4").reshape(-1).view("<u4")
    assert np.all(bits & 0xFFFF == 0), "test bug: value not exactly representable in BF16"
    return (bits >> 16).astype("<u2")


def encode_binary(dt, arr):
    if dt == "BYTES":
        out = b""
        for item in np.asarray(arr, dtype=object).reshape(-1):
            item = item.encode("utf-8") if isinstance(item, str) else bytes(item)
            out += struct.pack("<I", len(item)) + item
        return out
    if dt == "BF16":
        return bf16_bits(arr).tobytes()
    return np.ascontiguousarray(arr, dtype=np.dtype(NP[dt]).newbyteorder("<")).tobytes()


def decode_binary(dt, raw, shape):
    count = int(np.prod(shape)) if shape else 1
    if dt == "BYTES":
        items, off = [], 0
        while off < len(raw):
            (n,) = struct.unpack_from("<I", raw, off)
            items.append(raw[off + 4:off + 4 + n])
            off += 4 + n
        assert off == len(raw), "BYTES element overruns the blob"
        arr = np.empty(len(items), dtype=object)
        arr[:] = items
    elif dt == "BF16":
        arr = (np.frombuffer(raw, "<u2").astype("<u4") << 16).view("<f4").astype(np.float32)
    else:
        arr = np.frombuffer(raw, dtype=np.dtype(NP[dt]).newbyteorder("<")).astype(NP[dt])
    assert arr.size == count, (arr.size, shape)
    return arr.reshape(shape)


def json_data(dt, arr):
    flat = np.asarray(arr, dtype=object if dt == "BYTES" else NP[dt]).reshape(-1)
    if dt == "BYTES":
        return [x if isinstance(x, str) else x.decode("utf-8") for x in flat]
    if dt == "BOOL":
        return [bool(x) for x in flat]
    if dt in FLOATS:
        return [float(x) for x in flat]
    return [int(x) for x in flat]


def from_json_data(dt, data, shape):
    """A reply's JSON "data" (parsed by exact_json) as an array, checked element by element
    and without rounding or wrapping (exactjson.decode_data)."""
    return decode_data(dt, data, shape)


class Reply:
    def __init__(self, status, headers, body):
        self.status = status
        self.headers = headers  # lower-case names
        self.body = body
        self.json = None
        self.exact = None  # the same JSON, numbers exact (exact_json)
        self.blobs = {}
        if status != 200:
            self.json = json.loads(body) if body else None
            return
        if HDR in headers:
            hl = int(headers[HDR])
            assert 0 <= hl <= len(body)
            self.json = json.loads(body[:hl])
            self.exact = exact_json(body[:hl])
            rest = body[hl:]
            off = 0
            for out in self.json["outputs"]:
                size = (out.get("parameters") or {}).get("binary_data_size")
                if size is not None:
                    self.blobs[out["name"]] = rest[off:off + size]
                    off += size
            assert off == len(rest), f"binary outputs declare {off} bytes, body carries {len(rest)}"
        else:
            self.json = json.loads(body)
            self.exact = exact_json(body)

    @property
    def error(self):
        return self.json["error"]

    def out(self, name):
        for o in self.json["outputs"]:
            if o["name"] == name:
                return o
        return None

    def array(self, name):
        o = self.out(name)
        assert o is not None, f"output {name} missing from {self.json}"
        if name in self.blobs:
            return decode_binary(o["datatype"], self.blobs[name], o["shape"])
        assert "data" in o, o
        exact = next(e for e in self.exact["outputs"] if e["name"] == name)
        return from_json_data(o["datatype"], exact["data"], o["shape"])


def get_json(server, path):
    status, headers, body = request(server, "GET", path)
    return status, headers, (json.loads(body) if body else None)


def tensor(name, dt, arr, binary, shape=None):
    """An input spec for build_request: binary -> binary_data_size, else JSON data."""
    arr = np.asarray(arr, dtype=object if dt == "BYTES" else NP[dt])
    return {"name": name, "datatype": dt, "shape": list(arr.shape if shape is None else shape),
            "array": arr, "binary": binary}


def build_request(inputs, outputs=None, parameters=None, request_id=None):
    req = {}
    if request_id is not None:
        req["id"] = request_id
    blobs = []
    req["inputs"] = []
    for t in inputs:
        j = {"name": t["name"], "shape": t["shape"], "datatype": t["datatype"]}
        if t["binary"]:
            raw = encode_binary(t["datatype"], t["array"])
            j["parameters"] = {"binary_data_size": len(raw)}
            blobs.append(raw)
        else:
            j["data"] = t.get("data", json_data(t["datatype"], t["array"]))
        req["inputs"].append(j)
    if outputs is not None:
        req["outputs"] = outputs
    if parameters:
        req["parameters"] = parameters
    header = json.dumps(req, separators=(",", ":")).encode()
    if not blobs:
        return header, None
    return header + b"".join(blobs), len(header)


def infer(server, model, inputs, outputs=None, parameters=None, request_id=None, version=None):
    body, hl = build_request(inputs, outputs, parameters, request_id)
    headers = {} if hl is None else {"Inference-Header-Content-Length": str(hl)}
    path = f"/v2/models/{model}" + (f"/versions/{version}" if version else "") + "/infer"
    return Reply(*request(server, "POST", path, body, headers))


def infer_raw(server, model, req_json, headers=None, tail=b""):
    body = json.dumps(req_json).encode() if not isinstance(req_json, bytes) else req_json
    return Reply(*request(server, "POST", f"/v2/models/{model}/infer", body + tail, headers))


def assert_equal_exact(dt, got, want, check_sign=True):
    assert got.shape == want.shape, (got.shape, want.shape)
    if dt == "BYTES":
        assert list(got.reshape(-1)) == [w if isinstance(w, bytes) else w.encode()
                                         for w in want.reshape(-1)]
    elif dt in FLOATS:
        g = np.asarray(got, dtype=np.float64)
        w = np.asarray(want, dtype=np.float64)
        assert np.array_equal(g, w, equal_nan=True), (g, w)
        if check_sign:
            assert np.array_equal(np.signbit(g), np.signbit(w)), f"sign (e.g. -0.0) lost: {g} vs {w}"
    else:
        assert got.dtype == np.dtype(NP[dt]), got.dtype
        assert np.array_equal(got, want), (got, want)


def assert_serves(server):
    """The server still answers a valid inference correctly."""
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    r = infer(server, "two_versions", [tensor("x", "FP32", x, False)], version="1")
    assert r.status == 200, r.json
    np.testing.assert_allclose(r.array("y"), x + 1.0)


# ---------------------------------------------------------------------------------------
# per-datatype sample values
# ---------------------------------------------------------------------------------------
BYTES_TEXT = ["", "h\u00e9llo", "\u65e5\u672c\u8a9e \u2713 \U0001F600", 'quote " back \\ slash',
              "tab\tnew\nline", "x" * 300]
BYTES_RAW = [b"", b"a\x00b", "h\u00e9llo \u2713".encode(), b"\xff\xfe\x00\x80", b"\x00",
             b"y" * 70000]


def samples(dt, json_in):
    """A [2,3] array of extremes for dt. json_in limits UINT64 to < 2**63 (the JSON parser
    rejects integers above INT64_MAX) and BYTES to JSON-representable text."""
    if dt == "BOOL":
        return np.array([[True, False, True], [False, False, True]])
    if dt == "BYTES":
        vals = BYTES_TEXT if json_in else BYTES_RAW
        arr = np.empty(6, dtype=object)
        arr[:] = vals
        return arr.reshape(2, 3)
    if dt == "UINT64":
        top = 2**63 - 1 if json_in else 2**64 - 1  # JSON integers above 2**63-1 are not parsed
        return np.array([[0, top, 1], [top - 1, 2**32, 42]], dtype=np.uint64)
    if dt.startswith("UINT") or dt.startswith("INT"):
        info = np.iinfo(NP[dt])
        lo = info.min if info.min < 0 else 1
        return np.array([[info.min, info.max, 0], [lo, info.max - 1, 42]], dtype=NP[dt])
    if dt == "FP16":
        return np.array([[65504.0, -65504.0, 2.0**-24], [2.0**-14, -0.0, 1 / 3]]).astype(np.float16)
    if dt == "FP32":
        fi = np.finfo(np.float32)
        return np.array([[fi.max, -fi.max, fi.tiny], [1e-45, -0.0, np.pi]], dtype=np.float32)
    if dt == "FP64":
        fi = np.finfo(np.float64)
        return np.array([[fi.max, -fi.max, fi.tiny], [5e-324, -0.0, np.pi]], dtype=np.float64)
    if dt == "BF16":
        bf16_max = np.array([0x7F7F0000], dtype="<u4").view("<f4")[0]
        return np.array([[bf16_max, -2.5, 2.0**-126], [2.0**-133, -0.0, 3.140625]], dtype=np.float32)
    raise AssertionError(dt)


MODES = [("json", "json"), ("binary", "binary"), ("json", "binary"), ("binary", "json")]


# ---------------------------------------------------------------------------------------
# 1. endpoints
# ---------------------------------------------------------------------------------------
def test_server_metadata(server):
    status, headers, js = get_json(server, "/v2")
    assert status == 200
    assert headers["content-type"].startswith("application/json")
    assert isinstance(js["name"], str) and js["name"]
    assert isinstance(js["version"], str) and js["version"]
    assert isinstance(js["extensions"], list) and "binary_tensor_data" in js["extensions"]


@pytest.mark.parametrize("path", ["/v2/health/live", "/v2/health/ready"])
def test_health(server, path):
    status, headers, body = request(server, "GET", path)
    assert status == 200
    assert body == b"" and headers.get("content-length") == "0"


@pytest.mark.parametrize("name", sorted(MODELS))
def test_model_metadata(server, name):
    meta = MODELS[name]
    status, _, js = get_json(server, f"/v2/models/{name}")
    assert status == 200, js
    assert js["name"] == name
    assert js["versions"] == [str(v) for v in meta["versions"]]
    assert js["platform"] == "onnxruntime_onnx"
    for key in ("inputs", "outputs"):
        got = [{"name": t["name"], "datatype": t["datatype"], "shape": t["shape"]} for t in js[key]]
        assert got == meta[key], (key, got)
    for v in meta["versions"]:
        status, _, jv = get_json(server, f"/v2/models/{name}/versions/{v}")
        assert status == 200, jv
        assert jv["name"] == name and str(v) in jv["versions"]
        assert jv["inputs"] == js["inputs"] and jv["outputs"] == js["outputs"]


def test_model_ready(server):
    for path in ("/v2/models/demo/ready", "/v2/models/demo/versions/1/ready",
                 "/v2/models/two_versions/versions/1/ready",
                 "/v2/models/two_versions/versions/3/ready"):
        status, _, body = request(server, "GET", path)
        assert status == 200 and body == b"", path
    status, _, body = request(server, "GET", "/v2/models/no_such_model/ready")
    assert status == 404 and "error" in json.loads(body)
    status, _, body = request(server, "GET", "/v2/models/two_versions/versions/2/ready")
    assert status == 404 and "error" in json.loads(body)


@pytest.mark.parametrize("path", ["/v2/models/demo/config", "/v2/models/demo/versions/1/config"])
def test_model_config(server, path):
    status, headers, js = get_json(server, path)
    assert status == 200 and headers["content-type"].startswith("application/json")
    assert js["name"] == "demo"
    assert js["platform"] == "onnxruntime_onnx"
    assert isinstance(js["max_batch_size"], int)
    assert js["input"] == [{"name": "input", "data_type": "TYPE_FP32", "dims": [-1, 4]}]
    assert js["output"] == [{"name": "probabilities", "data_type": "TYPE_FP32", "dims": [-1, 3]},
                            {"name": "label", "data_type": "TYPE_INT64", "dims": [-1]}]


def test_model_config_instance_count_is_effective(server):
    """The `server` fixture runs with TIERSERVE_INSTANCES=2 (two runner threads per model, no
    config.yaml instance_group): the served config should say so, as Triton's does."""
    _, _, js = get_json(server, "/v2/models/demo/config")
    assert sum(g["count"] for g in js["instance_group"]) == 2, js["instance_group"]


def test_model_config_per_dtype(server):
    for dt in ALL_DTYPES:
        _, _, js = get_json(server, f"/v2/models/identity_{dt.lower()}/config")
        want = "TYPE_STRING" if dt == "BYTES" else "TYPE_" + dt
        assert js["input"][0]["data_type"] == want and js["output"][0]["data_type"] == want


def test_repository_index(server):
    status, headers, body = request(server, "POST", "/v2/repository/index", b"")
    assert status == 200 and headers["content-type"].startswith("application/json")
    index = json.loads(body)
    got = {(e["name"], e["version"]) for e in index}
    want = {(n, str(v)) for n, m in MODELS.items() for v in m["versions"]}
    assert got == want
    assert all(e["state"] == "READY" for e in index), index


def test_status(server):
    status, headers, js = get_json(server, "/v2/status")
    assert status == 200 and headers["content-type"].startswith("application/json")
    types = {"live": bool, "ready": bool, "requested": str, "strict": bool,
             "active_provider": str, "tier": str, "degraded": bool, "attempts": list,
             "queue_depth": int, "in_flight": int, "models": list}
    for key, ty in types.items():
        assert isinstance(js[key], ty), (key, js.get(key))
    assert js["live"] is True and js["ready"] is True
    assert js["requested"] == "cpu" and js["strict"] is False
    assert js["active_provider"] == "CPUExecutionProvider"
    assert js["tier"] == "cpu" and js["degraded"] is False
    assert "gpu_fault" in js and js["gpu_fault"] is None
    assert "gpu_memory_used_fraction" in js
    assert js["gpu_memory_used_fraction"] is None or isinstance(js["gpu_memory_used_fraction"], float)
    assert "hardware" in js
    for a in js["attempts"]:
        assert isinstance(a["provider"], str) and isinstance(a["ok"], bool) and "reason" in a
    got = {(m["name"], m["version"]) for m in js["models"]}
    assert got == {(n, str(v)) for n, m in MODELS.items() for v in m["versions"]}
    for m in js["models"]:
        assert isinstance(m["name"], str) and isinstance(m["version"], str)
        assert m["ready"] is True
        assert isinstance(m["warmup_ms"], (int, float)) and m["warmup_ms"] >= 0
        placement = m["node_placement"]
        assert isinstance(placement, dict) and set(placement) == {"CPUExecutionProvider"}, m
        assert isinstance(placement["CPUExecutionProvider"], int)
        assert placement["CPUExecutionProvider"] >= 1


METRIC_NAMES = [
    "tierserve_execution_provider_info", "tierserve_ep_degraded", "tierserve_gpu_fault",
    "tierserve_node_placement", "tierserve_requests_total", "tierserve_request_duration_seconds",
    "tierserve_queue_duration_seconds", "tierserve_compute_duration_seconds",
    "tierserve_batch_size", "tierserve_queue_depth", "tierserve_in_flight",
    "tierserve_cpu_utilization_ratio", "tierserve_cpu_iowait_ratio",
    "tierserve_process_resident_memory_bytes", "tierserve_heap_thread_reserves",
]
HISTOGRAMS = {"tierserve_request_duration_seconds", "tierserve_queue_duration_seconds",
              "tierserve_compute_duration_seconds", "tierserve_batch_size"}
SAMPLE_RE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$")


def scrape(server):
    status, headers, body = request(server, "GET", "/metrics")
    assert status == 200 and headers["content-type"].startswith("text/plain")
    parse_strict(body.decode())  # every series once (two_versions has two versions)
    samples_, types = [], {}
    for line in body.decode().splitlines():
        if line.startswith("# TYPE "):
            _, _, name, ty = line.split(" ", 3)
            types[name] = ty
            continue
        if not line or line.startswith("#"):
            continue
        m = SAMPLE_RE.match(line)
        assert m, f"bad exposition line: {line!r}"
        labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(2) or ""))
        samples_.append((m.group(1), labels, float(m.group(3))))
    return samples_, types


def metric_sum(samples_, name, **labels):
    return sum(v for n, ls, v in samples_
               if n == name and all(ls.get(k) == want for k, want in labels.items()))


def test_metrics_names_and_values(server):
    assert infer(server, "demo", [tensor("input", "FP32", DEMO_X, True)]).status == 200
    samples_, types = scrape(server)
    # the runner that ran it (and any other thread that has worked) reserved its arena at its
    # first item (heapres.h); the ASan build's allocator has no arenas: nothing reserved
    reserves = metric_sum(samples_, "tierserve_heap_thread_reserves")
    assert reserves == 0 if SANITIZED else reserves >= 1
    names = {n for n, _, _ in samples_}
    for name in METRIC_NAMES:
        if name in HISTOGRAMS:
            assert types.get(name) == "histogram", name
            for suffix in ("_bucket", "_sum", "_count"):
                assert name + suffix in names, name + suffix
        else:
            assert name in names, name
    assert types["tierserve_requests_total"] == "counter"
    info = [ls for n, ls, v in samples_ if n == "tierserve_execution_provider_info" and v == 1]
    assert info == [{"requested": "cpu", "active": "CPUExecutionProvider", "tier": "cpu"}]
    assert metric_sum(samples_, "tierserve_ep_degraded") == 0
    assert metric_sum(samples_, "tierserve_gpu_fault") == 0
    assert metric_sum(samples_, "tierserve_node_placement", model="demo",
                      provider="CPUExecutionProvider") >= 1
    assert metric_sum(samples_, "tierserve_process_resident_memory_bytes") > 0


def test_metrics_requests_total_counts_exactly(server):
    model = "identity_int16"
    before, _ = scrape(server)
    x = np.array([[1, 2, 3]], dtype=np.int16)
    n_ok, n_bad = 3, 2
    for _ in range(n_ok):
        assert infer(server, model, [tensor("INPUT0", "INT16", x, True)]).status == 200
    for _ in range(n_bad):  # wrong datatype: a client error for this model
        assert infer(server, model, [tensor("INPUT0", "INT32", x, False)]).status == 400
    after, _ = scrape(server)

    def delta(**labels):
        return (metric_sum(after, "tierserve_requests_total", model=model, **labels)
                - metric_sum(before, "tierserve_requests_total", model=model, **labels))

    assert delta() == n_ok + n_bad
    assert delta(outcome="success") == n_ok
    assert delta(outcome="client_error") == n_bad


# ---------------------------------------------------------------------------------------
# 2. every datatype through identity_<dt>
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", MODES, ids=["-".join(m) for m in MODES])
@pytest.mark.parametrize("dt", ALL_DTYPES)
def test_identity_roundtrip(server, dt, mode):
    in_mode, out_mode = mode
    x = samples(dt, json_in=in_mode == "json")
    if out_mode == "json" and dt == "BYTES":
        x = samples(dt, json_in=True)  # JSON out carries text only (non-UTF-8 is not JSON)
    params = {"binary_data_output": True} if out_mode == "binary" else None
    r = infer(server, f"identity_{dt.lower()}", [tensor("INPUT0", dt, x, in_mode == "binary")],
              parameters=params)
    assert r.status == 200, r.json
    assert r.json["model_name"] == f"identity_{dt.lower()}" and r.json["model_version"] == "1"
    out = r.out("OUTPUT0")
    assert out["datatype"] == dt and out["shape"] == [2, 3]
    if out_mode == "binary":
        assert HDR in r.headers and r.headers["content-type"] == "application/octet-stream"
        assert "data" not in out
        if in_mode == "binary":  # identity: the very same bytes (bit patterns included)
            assert r.blobs["OUTPUT0"] == encode_binary(dt, x)
    else:
        assert HDR not in r.headers and r.headers["content-type"].startswith("application/json")
        assert "data" in out and "parameters" not in out
    # exact either way: r.array reads JSON numbers without rounding or wrapping (exact_json)
    assert_equal_exact(dt, r.array("OUTPUT0"), x)


@pytest.mark.parametrize("dt", FLOATS)
def test_json_output_keeps_negative_zero(server, dt):
    """-0.0 must come back as a JSON number that a JSON reader (Python's json, hence
    tritonclient's np.array(data)) reads as negative zero, e.g. "-0.0" as Triton writes it.
    A bare "-0" is read as the integer 0 and the sign is lost."""
    x = np.array([[-0.0, 0.0, -1.0]], dtype=NP[dt])
    r = infer(server, f"identity_{dt.lower()}", [tensor("INPUT0", dt, x, True)])
    assert r.status == 200, r.json
    got = np.array(r.out("OUTPUT0")["data"], dtype=NP[dt])
    assert list(np.signbit(got).reshape(-1)) == [True, False, True], r.body


def test_identity_uint64_full_range_binary_in_json_out(server):
    # Binary in carries the full UINT64 range; the JSON reply writes it as an exact integer.
    x = np.array([[2**64 - 1, 2**63, 2**63 - 1]], dtype=np.uint64)
    r = infer(server, "identity_uint64", [tensor("INPUT0", "UINT64", x, True)])
    assert r.status == 200, r.json
    assert r.out("OUTPUT0")["data"] == [2**64 - 1, 2**63, 2**63 - 1]


SPECIALS = {
    "FP16": np.array([[0x7E00, 0x7C00, 0xFC00, 0x8000, 0x7E01, 0x0001]], dtype="<u2"),
    "BF16": np.array([[0x7FC0, 0x7F80, 0xFF80, 0x8000, 0xFFC1, 0x0001]], dtype="<u2"),
    "FP32": np.array([[0x7FC00000, 0x7F800000, 0xFF800000, 0x80000000, 0x7FC00123, 1]], dtype="<u4"),
    "FP64": np.array([[0x7FF8000000000000, 0x7FF0000000000000, 0xFFF0000000000000,
                       0x8000000000000000, 0xFFF8000000000042, 1]], dtype="<u8"),
}


@pytest.mark.parametrize("dt", sorted(SPECIALS))
def test_identity_float_specials_binary(server, dt):
    """NaN (with payloads), +-inf, -0.0 and the smallest subnormal survive bit for bit."""
    raw = SPECIALS[dt].tobytes()
    req = {"inputs": [{"name": "INPUT0", "datatype": dt, "shape": [1, 6],
                       "parameters": {"binary_data_size": len(raw)}}],
           "parameters": {"binary_data_output": True}}
    header = json.dumps(req).encode()
    r = infer_raw(server, f"identity_{dt.lower()}", header,
                  {"Inference-Header-Content-Length": str(len(header))}, tail=raw)
    assert r.status == 200, r.json
    assert r.blobs["OUTPUT0"] == raw
    assert r.out("OUTPUT0")["shape"] == [1, 6]
    vals = decode_binary(dt, r.blobs["OUTPUT0"], [6]).astype(np.float64)
    assert np.isnan(vals[0]) and vals[1] == np.inf and vals[2] == -np.inf
    assert vals[3] == 0 and np.signbit(vals[3]) and np.isnan(vals[4]) and 0 < vals[5] < 1e-7


@pytest.mark.parametrize("binary", [False, True], ids=["json", "binary"])
@pytest.mark.parametrize("dt", ALL_DTYPES)
def test_identity_zero_elements(server, dt, binary):
    x = np.empty((1, 0), dtype=object if dt == "BYTES" else NP[dt])
    params = {"binary_data_output": True} if binary else None
    r = infer(server, f"identity_{dt.lower()}", [tensor("INPUT0", dt, x, binary)],
              parameters=params)
    assert r.status == 200, r.json
    out = r.out("OUTPUT0")
    assert out["datatype"] == dt and out["shape"] == [1, 0]
    if binary:
        assert out["parameters"]["binary_data_size"] == 0 and r.blobs["OUTPUT0"] == b""
    else:
        assert out["data"] == []
    assert r.array("OUTPUT0").shape == (1, 0)


def test_identity_bytes_json_with_nul(server):
    """A JSON string may hold U+0000 (valid JSON); the server writes NULs as \\u0000 itself,
    so it must read them back too."""
    x = np.array([["a\x00b", "\x00", "end\x00"]], dtype=object)
    r = infer(server, "identity_bytes", [tensor("INPUT0", "BYTES", x, False)])
    assert r.status == 200, r.json
    assert r.out("OUTPUT0")["data"] == ["a\x00b", "\x00", "end\x00"]


def test_identity_bytes_binary_nul_non_utf8(server):
    x = np.empty((2, 3), dtype=object)
    x[:] = [[b"", b"a\x00b", b"\xff\xfe"], [b"\x00\x00\x00", "\u00fc\u20ac".encode(), b"z" * 5]]
    r = infer(server, "identity_bytes", [tensor("INPUT0", "BYTES", x, True)],
              outputs=[{"name": "OUTPUT0", "parameters": {"binary_data": True}}])
    assert r.status == 200, r.json
    assert r.out("OUTPUT0")["parameters"]["binary_data_size"] == len(encode_binary("BYTES", x))
    assert_equal_exact("BYTES", r.array("OUTPUT0"), x)


def test_identity_bool_binary_layout(server):
    x = np.array([[True, False], [False, True], [True, True]])
    r = infer(server, "identity_bool", [tensor("INPUT0", "BOOL", x, True)],
              parameters={"binary_data_output": True})
    assert r.status == 200, r.json
    assert r.blobs["OUTPUT0"] == bytes([1, 0, 0, 1, 1, 1])  # one byte per element


@pytest.mark.parametrize("dt,values", [
    # 1 + 2**-11 + 2**-40 lies just above the FP16 halfway point 1 + 2**-11: rounds up to
    # 1 + 2**-10. Rounding the double to float32 first lands exactly on the tie (-> 1.0).
    ("FP16", [1 + 2**-11 + 2**-40, -(1 + 2**-11 + 2**-40), 0.1, 65519.0, 2**-25 + 2**-40]),
    ("BF16", [1 + 2**-8 + 2**-40, -(1 + 2**-8 + 2**-40), 0.1, 3.0e38, 1e-40]),
])
def test_half_json_input_rounding(server, dt, values):
    """JSON numbers for FP16/BF16 inputs are rounded once, to nearest-even, like numpy."""
    if dt == "FP16":
        want = np.array(values, dtype=np.float64).astype(np.float16)
    else:
        want = np.array([_bf16_round(v) for v in values], dtype=np.float32)
    req = {"inputs": [{"name": "INPUT0", "datatype": dt, "shape": [1, len(values)],
                       "data": values}]}
    r = infer_raw(server, f"identity_{dt.lower()}", req)
    assert r.status == 200, r.json
    # the reply's decimal text rounds exactly to the datatype's value (not to the binary value)
    assert_equal_exact(dt, r.array("OUTPUT0"), want.reshape(1, -1))


def _bf16_round(v):
    """Correct round-to-nearest-even of a double to bfloat16 (exact, via fractions)."""
    from fractions import Fraction
    import math
    if v == 0:
        return v
    f = Fraction(v)
    e = math.floor(math.log2(abs(v)))
    while Fraction(2) ** e > abs(f):
        e -= 1
    while Fraction(2) ** (e + 1) <= abs(f):
        e += 1
    e = max(e, -126)
    ulp = Fraction(2) ** (e - 7)
    q = f / ulp
    n = math.floor(q)
    rem = q - n
    if rem > Fraction(1, 2) or (rem == Fraction(1, 2) and n % 2 == 1):
        n += 1
    return float(n * ulp)


# ---------------------------------------------------------------------------------------
# 3. simple_<dt>: two inputs, two outputs
# ---------------------------------------------------------------------------------------
def simple_inputs(dt, batch=2):
    rng = np.random.default_rng(7)
    if dt.startswith("INT"):
        a = rng.integers(-(2**20), 2**20, size=(batch, 16)).astype(NP[dt])
        b = rng.integers(-(2**20), 2**20, size=(batch, 16)).astype(NP[dt])
    else:
        a = (rng.standard_normal((batch, 16)) * 10).astype(NP[dt])
        b = (rng.standard_normal((batch, 16)) * 10).astype(NP[dt])
    return a, b


def check_simple(dt, got_sum, got_diff, a, b):
    want_sum = (a.astype(np.float64) + b.astype(np.float64)) if dt in FLOATS else a + b
    want_diff = (a.astype(np.float64) - b.astype(np.float64)) if dt in FLOATS else a - b
    if dt == "FP16":
        # one FP16 rounding of the exact result: within half an FP16 ulp (2**-11 relative)
        for got, want in ((got_sum, want_sum), (got_diff, want_diff)):
            assert got.dtype == np.float16
            np.testing.assert_allclose(got.astype(np.float64), want, rtol=2**-11, atol=2**-24)
    elif dt == "FP32":
        np.testing.assert_allclose(got_sum, want_sum, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(got_diff, want_diff, rtol=1e-6, atol=1e-6)
    elif dt == "FP64":
        np.testing.assert_allclose(got_sum, want_sum, rtol=1e-15, atol=0)
        np.testing.assert_allclose(got_diff, want_diff, rtol=1e-15, atol=0)
    else:
        assert got_sum.dtype == np.dtype(NP[dt]) and np.array_equal(got_sum, want_sum)
        assert np.array_equal(got_diff, want_diff)


@pytest.mark.parametrize("mode", MODES, ids=["-".join(m) for m in MODES])
@pytest.mark.parametrize("dt", SIMPLE_DTYPES)
def test_simple(server, dt, mode):
    a, b = simple_inputs(dt, batch=3)
    binary_in = mode[0] == "binary"
    params = {"binary_data_output": True} if mode[1] == "binary" else None
    r = infer(server, f"simple_{dt.lower()}", [tensor("INPUT0", dt, a, binary_in),
                                               tensor("INPUT1", dt, b, binary_in)],
              parameters=params)
    assert r.status == 200, r.json
    assert [o["name"] for o in r.json["outputs"]] == ["OUTPUT0", "OUTPUT1"]
    for o in r.json["outputs"]:
        assert o["datatype"] == dt and o["shape"] == [3, 16]
    check_simple(dt, r.array("OUTPUT0"), r.array("OUTPUT1"), a, b)


@pytest.mark.parametrize("dt", SIMPLE_DTYPES)
def test_simple_mixed_binary_and_json_inputs(server, dt):
    a, b = simple_inputs(dt)
    r = infer(server, f"simple_{dt.lower()}", [tensor("INPUT0", dt, a, False),
                                               tensor("INPUT1", dt, b, True)])
    assert r.status == 200, r.json
    check_simple(dt, r.array("OUTPUT0"), r.array("OUTPUT1"), a, b)


@pytest.mark.parametrize("name,binary", [("OUTPUT0", False), ("OUTPUT1", True)])
def test_simple_one_output(server, name, binary):
    a, b = simple_inputs("INT32")
    r = infer(server, "simple_int32", [tensor("INPUT0", "INT32", a, True),
                                       tensor("INPUT1", "INT32", b, True)],
              outputs=[{"name": name, "parameters": {"binary_data": binary}}])
    assert r.status == 200, r.json
    assert [o["name"] for o in r.json["outputs"]] == [name]
    assert (HDR in r.headers) == binary
    want = a + b if name == "OUTPUT0" else a - b
    assert np.array_equal(r.array(name), want)


@pytest.mark.parametrize("order", [("OUTPUT0", "OUTPUT1"), ("OUTPUT1", "OUTPUT0")])
def test_simple_mixed_output_flags(server, order):
    """One output binary, one JSON: the header length splits JSON from exactly the binary
    output's bytes, which follow in the order the outputs appear in the JSON."""
    a, b = simple_inputs("FP32")
    want = {"OUTPUT0": a + b, "OUTPUT1": a - b}
    bin_name, json_name = order
    r = infer(server, "simple_fp32", [tensor("INPUT0", "FP32", a, True),
                                      tensor("INPUT1", "FP32", b, False)],
              outputs=[{"name": bin_name, "parameters": {"binary_data": True}},
                       {"name": json_name, "parameters": {"binary_data": False}}],
              request_id="mixed-42")
    assert r.status == 200, r.json
    assert r.headers["content-type"] == "application/octet-stream"
    hl = int(r.headers[HDR])
    header = json.loads(r.body[:hl])  # the JSON part is exactly hl bytes
    assert header["id"] == "mixed-42"
    assert len(r.body) - hl == a.size * 4
    ob, oj = r.out(bin_name), r.out(json_name)
    assert ob["parameters"] == {"binary_data_size": a.size * 4} and "data" not in ob
    assert "data" in oj and "parameters" not in oj
    np.testing.assert_array_equal(
        np.frombuffer(r.body[hl:], dtype="<f4").reshape(2, 16), want[bin_name])
    np.testing.assert_allclose(r.array(json_name), want[json_name], rtol=1e-6)


def test_binary_data_output_overridden_per_output(server):
    a, b = simple_inputs("INT64")
    r = infer(server, "simple_int64", [tensor("INPUT0", "INT64", a, True),
                                       tensor("INPUT1", "INT64", b, True)],
              outputs=[{"name": "OUTPUT0"},
                       {"name": "OUTPUT1", "parameters": {"binary_data": False}}],
              parameters={"binary_data_output": True})
    assert r.status == 200, r.json
    assert "binary_data_size" in r.out("OUTPUT0")["parameters"]
    assert "data" in r.out("OUTPUT1")
    assert np.array_equal(r.array("OUTPUT0"), a + b) and np.array_equal(r.array("OUTPUT1"), a - b)


def test_request_id_echoed_only_when_given(server):
    a, b = simple_inputs("FP64")
    ins = [tensor("INPUT0", "FP64", a, False), tensor("INPUT1", "FP64", b, False)]
    r = infer(server, "simple_fp64", ins, request_id="req-\u00e9-\"1\"")
    assert r.status == 200 and r.json["id"] == "req-\u00e9-\"1\""
    r = infer(server, "simple_fp64", ins)
    assert r.status == 200 and "id" not in r.json


# ---------------------------------------------------------------------------------------
# 4. demo model vs demo_reference
# ---------------------------------------------------------------------------------------
DEMO_X = np.array([[5.1, 3.5, 1.4, 0.2], [6.7, 3.0, 5.2, 2.3], [5.9, 3.0, 4.2, 1.5],
                   [-1.0, 0.0, 2.5, -3.0], [0.0, 0.0, 0.0, 0.0]], dtype=np.float32)


def check_demo(r, x):
    ref = gen_demo.demo_reference(x)
    assert r.status == 200, r.json
    assert r.out("probabilities")["shape"] == [len(x), 3] and r.out("label")["shape"] == [len(x)]
    probs = r.array("probabilities")
    np.testing.assert_allclose(probs, ref["probabilities"], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, rtol=1e-5)
    assert r.out("label")["datatype"] == "INT64"
    assert np.array_equal(r.array("label"), ref["label"])


@pytest.mark.parametrize("binary", [False, True], ids=["json", "binary"])
def test_demo(server, binary):
    params = {"binary_data_output": True} if binary else None
    r = infer(server, "demo", [tensor("input", "FP32", DEMO_X, binary)], parameters=params)
    check_demo(r, DEMO_X)
    r = infer(server, "demo", [tensor("input", "FP32", DEMO_X, binary)], version="1",
              parameters=params)
    check_demo(r, DEMO_X)


def test_demo_nested_json_data(server):
    flat = {"name": "input", "shape": [5, 4], "datatype": "FP32",
            "data": [float(v) for v in DEMO_X.reshape(-1)]}
    nested = dict(flat, data=[[float(v) for v in row] for row in DEMO_X])
    r_flat = infer_raw(server, "demo", {"inputs": [flat]})
    r_nested = infer_raw(server, "demo", {"inputs": [nested]})
    check_demo(r_flat, DEMO_X)
    check_demo(r_nested, DEMO_X)
    assert r_flat.json["outputs"] == r_nested.json["outputs"]


# ---------------------------------------------------------------------------------------
# 5. two_versions (config.yaml: version_policy all)
# ---------------------------------------------------------------------------------------
def test_two_versions(server):
    _, _, meta = get_json(server, "/v2/models/two_versions")
    assert meta["versions"] == ["1", "3"]
    x = np.array([[0.5, -1.0, 2.0, 100.0]], dtype=np.float32)
    for version, add in ((None, 3.0), ("3", 3.0), ("1", 1.0)):
        r = infer(server, "two_versions", [tensor("x", "FP32", x, False)], version=version)
        assert r.status == 200, r.json
        assert r.json["model_version"] == (version or "3")
        np.testing.assert_allclose(r.array("y"), x + add, rtol=1e-6)
    r = infer(server, "two_versions", [tensor("x", "FP32", x, False)], version="2")
    assert r.status == 404 and "2" in r.error and "two_versions" in r.error
    status, _, js = get_json(server, "/v2/models/two_versions/versions/2")
    assert status == 404 and "2" in js["error"]
    assert_serves(server)


# ---------------------------------------------------------------------------------------
# 6. fixed_shape
# ---------------------------------------------------------------------------------------
def test_fixed_shape(server):
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    r = infer(server, "fixed_shape", [tensor("x", "FP32", x, True)])
    assert r.status == 200, r.json
    np.testing.assert_allclose(r.array("y"), 2 * x)
    for bad in (np.zeros((3, 2), np.float32), np.zeros((1, 2, 3), np.float32),
                np.zeros((2, 4), np.float32)):
        r = infer(server, "fixed_shape", [tensor("x", "FP32", bad, False)])
        assert r.status == 400, r.json
        assert "'x'" in r.error and "[2,3]" in r.error.replace(" ", ""), r.error
    assert_serves(server)


# ---------------------------------------------------------------------------------------
# 7. errors
# ---------------------------------------------------------------------------------------
def check_error(r, status, *needles):
    assert r.status == status, (r.status, r.body[:300])
    assert r.headers["content-type"].startswith("application/json")
    assert isinstance(r.json, dict) and isinstance(r.json.get("error"), str), r.body
    for n in needles:
        assert n in r.error, (n, r.error)


def test_error_unknown_model(server):
    x = np.zeros((1, 4), np.float32)
    r = infer(server, "no_such_model", [tensor("x", "FP32", x, False)])
    check_error(r, 404, "no_such_model")
    status, headers, js = get_json(server, "/v2/models/no_such_model")
    assert status == 404 and "no_such_model" in js["error"]
    status, headers, js = get_json(server, "/v2/models/no_such_model/config")
    assert status == 404 and "error" in js
    assert_serves(server)


def test_error_wrong_datatype(server):
    x = np.zeros((1, 3), np.int32)
    r = infer(server, "identity_fp32", [tensor("INPUT0", "INT32", x, True)])
    check_error(r, 400, "INT32", "INPUT0")
    r = infer_raw(server, "identity_fp32", {"inputs": [
        {"name": "INPUT0", "datatype": "FLOAT128", "shape": [1], "data": [1.0]}]})
    check_error(r, 400, "FLOAT128")
    assert_serves(server)


def test_error_missing_input(server):
    a, _ = simple_inputs("FP32")
    r = infer(server, "simple_fp32", [tensor("INPUT0", "FP32", a, False)])
    check_error(r, 400, "INPUT1")
    assert_serves(server)


def test_error_unknown_output(server):
    a, b = simple_inputs("FP32")
    r = infer(server, "simple_fp32", [tensor("INPUT0", "FP32", a, False),
                                      tensor("INPUT1", "FP32", b, False)],
              outputs=[{"name": "OUTPUT7"}])
    check_error(r, 400, "OUTPUT7")
    assert_serves(server)


def test_error_unknown_input(server):
    x = np.zeros((1, 4), np.float32)
    r = infer(server, "two_versions", [tensor("x", "FP32", x, False),
                                       tensor("bogus", "FP32", x, False)])
    check_error(r, 400, "bogus")
    assert_serves(server)


@pytest.mark.parametrize("case", ["malformed_json", "header_too_long", "size_mismatch",
                                  "trailing_bytes", "data_count", "bytes_overrun"])
def test_error_malformed_requests(server, case):
    x = np.zeros((1, 4), np.float32)
    good = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 4],
                        "parameters": {"binary_data_size": 16}}]}
    hdr = json.dumps(good).encode()
    model = "two_versions"
    if case == "malformed_json":
        r = infer_raw(server, model, b'{"inputs": [')
    elif case == "header_too_long":
        r = infer_raw(server, model, hdr, {"Inference-Header-Content-Length": str(len(hdr) + 99)},
                      tail=x.tobytes())
    elif case == "size_mismatch":
        r = infer_raw(server, model, hdr, {"Inference-Header-Content-Length": str(len(hdr))},
                      tail=x.tobytes()[:12])
    elif case == "trailing_bytes":
        r = infer_raw(server, model, hdr, {"Inference-Header-Content-Length": str(len(hdr))},
                      tail=x.tobytes() + b"\0\0\0\0")
    elif case == "data_count":
        r = infer_raw(server, model, {"inputs": [{"name": "x", "datatype": "FP32",
                                                  "shape": [1, 4], "data": [1.0, 2.0, 3.0]}]})
    else:
        h = json.dumps({"inputs": [{"name": "INPUT0", "datatype": "BYTES", "shape": [1, 2],
                                    "parameters": {"binary_data_size": 9}}]}).encode()
        r = infer_raw(server, "identity_bytes", h,
                      {"Inference-Header-Content-Length": str(len(h))},
                      tail=struct.pack("<I", 1) + b"a" + struct.pack("<I", 7)[:4])
        model = "identity_bytes"
    check_error(r, 400)
    assert_serves(server)


@pytest.mark.parametrize("dt,value", [("INT8", 128), ("INT8", -129), ("UINT8", -1),
                                      ("UINT8", 256), ("INT16", 32768), ("UINT16", 65536),
                                      ("INT32", -2**31 - 1), ("UINT32", 2**32),
                                      ("UINT64", -1), ("BOOL", 1), ("FP32", "1.0"),
                                      ("INT32", 1.5), ("BYTES", 7)])
def test_error_json_value_not_in_datatype(server, dt, value):
    first = {"BOOL": True, "BYTES": "ok"}.get(dt, 0)  # a valid element, then the bad one
    r = infer_raw(server, f"identity_{dt.lower()}", {"inputs": [
        {"name": "INPUT0", "datatype": dt, "shape": [1, 2], "data": [first, value]}]})
    check_error(r, 400, "INPUT0", dt)
    assert_serves(server)


def test_error_unknown_endpoint_and_method(server):
    status, _, body = request(server, "GET", "/v2/no/such/thing/here")
    assert status == 404 and "error" in json.loads(body)
    status, _, body = request(server, "GET", "/v2/models/demo/infer")
    assert status == 405 and "error" in json.loads(body)
    assert_serves(server)


# ---------------------------------------------------------------------------------------
# 8. tritonlike (tritonclient.http's wire behaviour)
# ---------------------------------------------------------------------------------------
def test_tritonlike_health_and_metadata(client):
    assert client.is_server_live() is True
    assert client.is_server_ready() is True
    assert client.is_model_ready("demo") is True
    assert client.is_model_ready("two_versions", "1") is True
    assert client.is_model_ready("two_versions", "2") is False
    assert client.is_model_ready("no_such_model") is False
    assert "binary_tensor_data" in client.get_server_metadata()["extensions"]
    meta = client.get_model_metadata("demo")
    assert meta["name"] == "demo" and meta["versions"] == ["1"]
    assert meta["inputs"] == [{"name": "input", "datatype": "FP32", "shape": [-1, 4]}]
    assert [o["name"] for o in meta["outputs"]] == ["probabilities", "label"]
    assert client.get_model_metadata("two_versions", "1")["name"] == "two_versions"
    cfg = client.get_model_config("demo")
    assert cfg["name"] == "demo" and [i["name"] for i in cfg["input"]] == ["input"]
    index = client.get_model_repository_index()
    assert {"name": "demo", "version": "1", "state": "READY"} in index
    with pytest.raises(tritonlike.InferenceServerException) as ei:
        client.get_model_metadata("no_such_model")
    assert ei.value.status() == "404" and "no_such_model" in ei.value.message()


@pytest.mark.parametrize("binary_outputs", [True, False], ids=["bout", "jout"])
@pytest.mark.parametrize("binary_inputs", [True, False], ids=["bin", "jin"])
def test_tritonlike_infer(client, binary_inputs, binary_outputs):
    a, b = simple_inputs("FP32", batch=4)
    res = client.infer("simple_fp32", [("INPUT0", a, "FP32"), ("INPUT1", b, "FP32")],
                       binary_inputs=binary_inputs, binary_outputs=binary_outputs,
                       request_id="tl-1")
    assert res.get_response()["id"] == "tl-1"
    assert res.get_response()["model_version"] == "1"
    check_simple("FP32", res.as_numpy("OUTPUT0"), res.as_numpy("OUTPUT1"), a, b)
    res = client.infer("demo", [("input", DEMO_X, "FP32")], outputs=["label"],
                       binary_inputs=binary_inputs, binary_outputs=binary_outputs)
    assert res.as_numpy("probabilities") is None
    assert np.array_equal(res.as_numpy("label"), gen_demo.demo_reference(DEMO_X)["label"])
    # BYTES: binary carries any bytes; JSON carries text (decoded as str by the client)
    s = np.array([["h\u00e9llo", "", "x y"]], dtype=object)
    res = client.infer("identity_bytes", [("INPUT0", s, "BYTES")],
                       binary_inputs=binary_inputs, binary_outputs=binary_outputs)
    got = [x.decode() if isinstance(x, bytes) else x for x in res.as_numpy("OUTPUT0").reshape(-1)]
    assert got == ["h\u00e9llo", "", "x y"]
    # INT64 extremes through the client's own encoders
    i = np.array([[np.iinfo(np.int64).min, -1, np.iinfo(np.int64).max]], dtype=np.int64)
    res = client.infer("identity_int64", [("INPUT0", i, "INT64")],
                       binary_inputs=binary_inputs, binary_outputs=binary_outputs)
    assert np.array_equal(res.as_numpy("OUTPUT0"), i)


def test_tritonlike_bf16_binary(client):
    f = np.array([[1.0, -2.5, 3.140625], [65280.0, -0.0078125, 0.0]], dtype=np.float32)
    res = client.infer("identity_bf16", [("INPUT0", f, "BF16")], binary_inputs=True,
                       binary_outputs=True)
    assert np.array_equal(res.as_numpy("OUTPUT0"), f)


def test_tritonlike_infer_errors(client):
    x = np.zeros((1, 3), np.int32)
    with pytest.raises(tritonlike.InferenceServerException) as ei:
        client.infer("identity_fp32", [("INPUT0", x, "INT32")])
    assert ei.value.status() == "400" and "INT32" in ei.value.message()
    with pytest.raises(tritonlike.InferenceServerException) as ei:
        client.infer("two_versions", [("x", np.zeros((1, 4), np.float32), "FP32")],
                     model_version="2")
    assert ei.value.status() == "404"
    # the same persistent connection keeps working after errors
    res = client.infer("two_versions", [("x", np.ones((1, 4), np.float32), "FP32")],
                       model_version="1")
    np.testing.assert_allclose(res.as_numpy("y"), 2.0)
