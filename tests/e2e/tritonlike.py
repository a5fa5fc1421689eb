"""tritonlike: a small stand-in for ``tritonclient.http`` used by tierserve's e2e tests.

tritonclient cannot be installed here, so this module reproduces, with the
standard library and numpy only, what ``tritonclient.http`` puts on the wire and
how it interprets what comes back.  It is written from a reading of these files
of github.com/triton-inference-server/client (Python client library, the
2.3x/2.4x-era sources; commits named where behaviour differs between versions):

  src/python/library/tritonclient/http/_client.py        (InferenceServerClient)
  src/python/library/tritonclient/http/_utils.py         (_get_error, _get_inference_request)
  src/python/library/tritonclient/http/_infer_input.py   (InferInput.set_data_from_numpy)
  src/python/library/tritonclient/http/_requested_output.py
  src/python/library/tritonclient/http/_infer_result.py  (@9c9a336: BF16 branch in as_numpy)
  src/python/library/tritonclient/utils/__init__.py      (dtype maps, (de)serialisers,
                                                          InferenceServerException)

and geventhttpclient's src/geventhttpclient/client.py (the transport tritonclient
uses: HTTP/1.1, keep-alive, Host + User-Agent + Content-Length, no Content-Type,
no Accept-Encoding unless compression is asked for).

Deliberate differences from the real client (documented so tests are not misled):
  * transport is ``http.client`` (one persistent connection, keep-alive) instead of
    geventhttpclient; a request is sent exactly once, never re-sent: before reusing the
    connection the client checks that the server has not closed it while idle (the
    socket is readable: EOF) and connects afresh if so (``stale_reconnects`` counts it);
    a request that then fails on the wire raises, so a test sees every dropped request;
  * ``infer`` takes ``inputs`` as ``(name, ndarray, datatype[, binary])`` tuples and
    ``outputs`` as names or ``(name, binary_data[, class_count])`` tuples instead of
    InferInput / InferRequestedOutput objects;
  * ``outputs=None`` with ``binary_outputs=False`` omits ``binary_data_output``
    (the server's JSON default); the real client always sends
    ``binary_data_output: true`` when no outputs are listed;
  * a zero-byte binary output decodes to ``np.empty(0, dtype)`` (newer client) -
    the @9c9a336 client used ``np.empty(0)`` (float64);
  * ``url`` may carry an ``http://`` prefix (the real client rejects it).

See docs/compat/tritonclient-http.md for the protocol notes.
"""

from __future__ import annotations

import gzip
import http.client
import json
import select
import struct
import zlib
from urllib.parse import quote, quote_plus

import numpy as np

__all__ = [
    "InferenceServerException",
    "TritonLikeClient",
    "InferResult",
    "np_to_triton_dtype",
    "triton_to_np_dtype",
    "serialize_byte_tensor",
    "deserialize_bytes_tensor",
    "serialize_bf16_tensor",
    "deserialize_bf16_tensor",
]

USER_AGENT = "python/gevent-http-client-tritonlike"
INFER_HEADER = "Inference-Header-Content-Length"


# --------------------------------------------------------------------------
# tritonclient.utils equivalents
# --------------------------------------------------------------------------
class InferenceServerException(Exception):
    """Same shape as tritonclient.utils.InferenceServerException.

    ``status()`` is the HTTP status as a *string* (e.g. "400") or None for
    client-side errors; ``str(e)`` is "[<status>] <msg>".  ``http_status`` (int
    or None) and ``headers`` are extras for tests.
    """

    def __init__(self, msg, status=None, debug_details=None, http_status=None, headers=None):
        super().__init__(msg)
        self._msg = msg
        self._status = status
        self._debug_details = debug_details
        self.http_status = http_status
        self.headers = headers or []

    def __str__(self):
        msg = super().__str__() if self._msg is None else self._msg
        if self._status is not None:
            msg = "[" + self._status + "] " + msg
        return msg

    def message(self):
        return self._msg

    def status(self):
        return self._status

    def debug_details(self):
        return self._debug_details


def raise_error(msg):
    raise InferenceServerException(msg=msg) from None


def np_to_triton_dtype(np_dtype):
    """numpy dtype -> Triton datatype string (None if unmapped); as tritonclient."""
    np_dtype = np.dtype(np_dtype)
    table = [
        (bool, "BOOL"), (np.int8, "INT8"), (np.int16, "INT16"), (np.int32, "INT32"),
        (np.int64, "INT64"), (np.uint8, "UINT8"), (np.uint16, "UINT16"),
        (np.uint32, "UINT32"), (np.uint64, "UINT64"), (np.float16, "FP16"),
        (np.float32, "FP32"), (np.float64, "FP64"),
    ]
    for ty, name in table:
        if np_dtype == ty:
            return name
    if np_dtype == np.object_ or np_dtype.type == np.bytes_:
        return "BYTES"
    return None  # note: unicode ('<U') arrays are NOT mapped, as in tritonclient


def triton_to_np_dtype(dtype):
    """Triton datatype -> numpy type; BF16 maps to np.float32 (numpy has no bf16)."""
    return {
        "BOOL": bool, "INT8": np.int8, "INT16": np.int16, "INT32": np.int32,
        "INT64": np.int64, "UINT8": np.uint8, "UINT16": np.uint16,
        "UINT32": np.uint32, "UINT64": np.uint64, "FP16": np.float16,
        "FP32": np.float32, "BF16": np.float32, "FP64": np.float64,
        "BYTES": np.object_,
    }.get(dtype)


def serialize_byte_tensor(input_tensor):
    """Each element, row-major: uint32 little-endian length, then the bytes.

    Returns a 0-d np.object_ array holding one ``bytes`` (use ``.item()``), or an
    empty 1-d object array for an empty tensor - the same return types as
    tritonclient.  bytes elements are used as-is; any other object element is
    ``str(x).encode('utf-8')``; np.bytes_ arrays use the raw (NUL-stripped) value.
    """
    if input_tensor.size == 0:
        return np.empty([0], dtype=np.object_)
    if input_tensor.dtype != np.object_ and input_tensor.dtype.type != np.bytes_:
        raise_error("cannot serialize bytes tensor: invalid datatype")
    parts = []
    is_obj = input_tensor.dtype == np.object_
    for obj in np.nditer(input_tensor, flags=["refs_ok"], order="C"):
        item = obj.item()
        if is_obj and not isinstance(item, bytes):
            item = str(item).encode("utf-8")
        parts.append(struct.pack("<I", len(item)))
        parts.append(item)
    return np.asarray(b"".join(parts), dtype=np.object_)


def deserialize_bytes_tensor(encoded_tensor):
    """Inverse of serialize_byte_tensor: 1-d np.object_ array of ``bytes``."""
    out = []
    offset = 0
    buf = encoded_tensor
    while offset < len(buf):
        (length,) = struct.unpack_from("<I", buf, offset)
        offset += 4
        (elem,) = struct.unpack_from("<{}s".format(length), buf, offset)
        offset += length
        out.append(elem)
    return np.array(out, dtype=np.object_)


def serialize_bf16_tensor(input_tensor):
    """float32 tensor -> 2 bytes per element (the high half of each float32, i.e.
    truncation, not rounding), row-major.  Same return types as
    serialize_byte_tensor."""
    if input_tensor.size == 0:
        return np.empty([0], dtype=np.object_)
    if input_tensor.dtype != np.float32:
        raise_error("cannot serialize bf16 tensor: invalid datatype")
    bits = np.ascontiguousarray(input_tensor, dtype="<f4").reshape(-1).view("<u4")
    hi = (bits >> 16).astype("<u2")
    return np.asarray(hi.tobytes(), dtype=np.object_)


def deserialize_bf16_tensor(encoded_tensor):
    """2 bytes per element -> float32.  Like tritonclient this yields shape (N, 1)
    (it builds the array from 1-tuples); callers reshape it."""
    buf = bytes(encoded_tensor)
    n = len(buf) // 2
    if n == 0:
        return np.array([], dtype=np.float32)
    hi = np.frombuffer(buf[: 2 * n], dtype="<u2").astype("<u4") << 16
    return hi.view("<f4").astype(np.float32).reshape(n, 1)


# --------------------------------------------------------------------------
# response objects
# --------------------------------------------------------------------------
class _RawResponse:
    def __init__(self, status, reason, headers, body):
        self.status = status
        self.reason = reason
        self.headers = headers  # list of (name, value) in wire order
        self.body = body

    def get(self, name, default=None):
        lname = name.lower()
        for k, v in self.headers:
            if k.lower() == lname:
                return v
        return default


def _get_error(resp):
    """Mirror of tritonclient.http._utils._get_error."""
    if resp.status == 200:
        return None
    body = None
    try:
        body = resp.body.decode("utf-8")
        err = json.loads(body) if len(body) else {
            "error": "client received an empty response from the server."}
        return InferenceServerException(
            msg=err["error"], status=str(resp.status),
            http_status=resp.status, headers=resp.headers)
    except Exception as e:  # noqa: BLE001 - the client catches everything here
        return InferenceServerException(
            msg="an exception occurred in the client while decoding the response: "
                f"{e}\nresponse: {body}",
            status=str(resp.status), debug_details=body,
            http_status=resp.status, headers=resp.headers)


def _raise_if_error(resp):
    err = _get_error(resp)
    if err is not None:
        raise err


class InferResult:
    """Mirror of tritonclient.http.InferResult (decoding rules and all)."""

    def __init__(self, resp):
        self.status = resp.status
        self.headers = resp.headers
        self.raw_body = resp.body
        header_length = resp.get(INFER_HEADER)
        body = resp.body
        enc = resp.get("Content-Encoding")
        if enc == "gzip":
            body = gzip.decompress(body)
        elif enc == "deflate":
            body = zlib.decompress(body)  # zlib-wrapped, as HTTP "deflate" means
        self.decoded_body = body
        self._buffer = b""
        self._offsets = {}
        if header_length is None:
            try:
                self._result = json.loads(body)
            except UnicodeDecodeError as e:
                raise_error("Failed to encode using UTF-8. Please use binary_data=True, if"
                            f" you want to pass a byte array. UnicodeError: {e}")
        else:
            header_length = int(header_length)
            self._result = json.loads(body[:header_length])
            self._buffer = body[header_length:]
            idx = 0
            for out in self._result["outputs"]:
                params = out.get("parameters")
                if params is not None and params.get("binary_data_size") is not None:
                    self._offsets[out["name"]] = idx
                    idx += params["binary_data_size"]

    def as_numpy(self, name):
        for out in self._result.get("outputs") or []:
            if out["name"] != name:
                continue
            datatype = out["datatype"]
            params = out.get("parameters")
            size = None if params is None else params.get("binary_data_size")
            if size is not None:
                if size == 0:
                    arr = np.empty(0, dtype=triton_to_np_dtype(datatype))
                else:
                    # KeyError here == the real client's failure when the server
                    # omits Inference-Header-Content-Length for binary outputs.
                    start = self._offsets[name]
                    chunk = self._buffer[start:start + size]
                    if datatype == "BYTES":
                        arr = deserialize_bytes_tensor(chunk)
                    elif datatype == "BF16":
                        arr = deserialize_bf16_tensor(chunk)
                    else:
                        arr = np.frombuffer(chunk, dtype=triton_to_np_dtype(datatype))
            else:
                # JSON data; BYTES comes back as Python str elements, not bytes.
                arr = np.array(out["data"], dtype=triton_to_np_dtype(datatype))
            return arr.reshape(out["shape"])
        return None

    def get_output(self, name):
        for out in self._result["outputs"]:
            if out["name"] == name:
                return out
        return None

    def get_response(self):
        return self._result


# --------------------------------------------------------------------------
# request building (tritonclient.http._utils._get_inference_request et al.)
# --------------------------------------------------------------------------
def _input_tensor(name, arr, datatype, binary):
    """Returns (tensor_json, raw_bytes_or_None) like InferInput."""
    if not isinstance(arr, np.ndarray):
        raise_error("input_tensor must be a numpy array")
    if datatype == "BF16":
        if arr.dtype != triton_to_np_dtype(datatype):
            raise_error("got unexpected datatype {} from numpy array, expected {} for BF16 type"
                        .format(arr.dtype, triton_to_np_dtype(datatype)))
    else:
        dt = np_to_triton_dtype(arr.dtype)
        if dt != datatype:
            raise_error("got unexpected datatype {} from numpy array, expected {}"
                        .format(dt, datatype))
    tensor = {"name": name, "shape": [int(d) for d in arr.shape], "datatype": datatype}
    if not binary:
        if datatype == "BF16":
            raise_error("BF16 inputs must be sent as binary data over HTTP. "
                        "Please set binary_data=True")
        if datatype == "BYTES":
            data = []
            if arr.size > 0:
                for obj in np.nditer(arr, flags=["refs_ok"], order="C"):
                    item = obj.item()
                    try:
                        if arr.dtype == np.object_ and not isinstance(item, bytes):
                            data.append(str(item))
                        else:
                            data.append(str(item, encoding="utf-8"))
                    except UnicodeDecodeError:
                        raise_error(f'Failed to encode "{item}" using UTF-8. Please use '
                                    "binary_data=True, if you want to pass a byte array.")
        else:
            data = [v.item() for v in arr.flatten()]
        tensor["data"] = data
        return tensor, None
    if datatype == "BYTES":
        s = serialize_byte_tensor(arr)
        raw = s.item() if s.size > 0 else b""
    elif datatype == "BF16":
        s = serialize_bf16_tensor(arr)
        raw = s.item() if s.size > 0 else b""
    else:
        raw = arr.tobytes()
    tensor["parameters"] = {"binary_data_size": len(raw)}
    return tensor, raw


def _output_tensor(spec, default_binary):
    if isinstance(spec, str):
        name, binary, class_count = spec, default_binary, 0
    else:
        name = spec[0]
        binary = spec[1] if len(spec) > 1 else default_binary
        class_count = spec[2] if len(spec) > 2 else 0
    params = {}
    if class_count != 0:
        params["classification"] = class_count
    params["binary_data"] = binary
    return {"name": name, "parameters": params}


def build_infer_body(inputs, outputs=None, request_id="", binary_inputs=True,
                     binary_outputs=True, timeout=None, parameters=None,
                     sequence_id=0, sequence_start=False, sequence_end=False, priority=0):
    """Returns (body_bytes, json_size_or_None) exactly as tritonclient builds them."""
    req = {}
    params = {}
    if request_id != "":
        req["id"] = request_id
    if sequence_id != 0 and sequence_id != "":
        params["sequence_id"] = sequence_id
        params["sequence_start"] = sequence_start
        params["sequence_end"] = sequence_end
    if priority != 0:
        params["priority"] = priority
    if timeout is not None:
        params["timeout"] = timeout  # microseconds, a *request* parameter
    tensors, raws = [], []
    for spec in inputs:
        name, arr, datatype = spec[0], spec[1], spec[2]
        binary = spec[3] if len(spec) > 3 else binary_inputs
        t, raw = _input_tensor(name, arr, datatype, binary)
        tensors.append(t)
        if raw is not None:
            raws.append(raw)
    req["inputs"] = tensors
    if outputs:
        req["outputs"] = [_output_tensor(o, binary_outputs) for o in outputs]
    elif binary_outputs:
        params["binary_data_output"] = True
    for key, value in (parameters or {}).items():
        if key in ("sequence_id", "sequence_start", "sequence_end", "priority",
                   "binary_data_output"):
            raise_error(f'Parameter "{key}" is a reserved parameter and cannot be specified.')
        params[key] = value
    if params:
        req["parameters"] = params
    # rapidjson.dumps: compact, ASCII-only (so len(str) == byte length)
    header = json.dumps(req, separators=(",", ":"), ensure_ascii=True).encode("ascii")
    if not raws:
        return header, None
    return header + b"".join(raws), len(header)


# --------------------------------------------------------------------------
# client
# --------------------------------------------------------------------------
class TritonLikeClient:
    """Wire-level mirror of tritonclient.http.InferenceServerClient (sync parts)."""

    def __init__(self, url, connection_timeout=60.0, network_timeout=60.0, verbose=False):
        if url.startswith("https://"):
            raise_error("https is not supported by tritonlike")
        if url.startswith("http://"):
            url = url[len("http://"):]
        hostport, _, base = url.partition("/")
        host, _, port = hostport.rpartition(":")
        if not host:
            host, port = hostport, "80"
        self.host = host.strip("[]")
        self.port = int(port)
        self._base_uri = ("/" + base).rstrip("/")
        self._timeout = network_timeout
        self._connect_timeout = connection_timeout
        self.verbose = verbose
        self._conn = None
        self._conn_requests = 0
        self.connections_opened = 0
        self.requests_sent = 0
        self.stale_reconnects = 0
        self.last_response = None

    # -- transport --------------------------------------------------------
    def close(self):
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _connect(self):
        self.close()
        self._conn = http.client.HTTPConnection(self.host, self.port, timeout=self._connect_timeout)
        self._conn.connect()
        self._conn.sock.settimeout(self._timeout)
        self._conn_requests = 0
        self.connections_opened += 1

    def _closed_by_peer(self):
        """Whether the idle keep-alive connection was closed by the server: an idle HTTP/1.1
        connection only becomes readable when the server ends it (EOF)."""
        sock = self._conn.sock
        if sock is None:
            return True
        readable, _, _ = select.select([sock], [], [], 0)
        return bool(readable)

    def _uri(self, request_uri, query_params):
        uri = self._base_uri + "/" + request_uri
        if query_params:
            items = []
            for k, v in query_params.items():
                for item in (v if isinstance(v, list) else [v]):
                    items.append("%s=%s" % (quote_plus(k), quote_plus(str(item))))
            uri += "?" + "&".join(items)
        return uri

    def _send_once(self, method, uri, body, headers):
        conn = self._conn
        conn.putrequest(method, uri, skip_accept_encoding=True)  # Host is added here
        conn.putheader("User-Agent", USER_AGENT)
        for k, v in (headers or {}).items():
            conn.putheader(k, str(v))
        if method == "POST":
            conn.putheader("Content-Length", str(len(body)))
        conn.endheaders(body if body else None)
        resp = conn.getresponse()
        data = resp.read()
        raw = _RawResponse(resp.status, resp.reason, list(resp.getheaders()), data)
        if resp.will_close:
            self.close()
        return raw

    def _request(self, method, request_uri, body=b"", headers=None, query_params=None):
        if headers and any(k.lower() == "transfer-encoding" for k in headers):
            raise_error("Unsupported HTTP header: 'Transfer-Encoding' is not supported in the "
                        "Python client library. Use raw HTTP request libraries or the C++ "
                        "client instead for this header.")
        uri = self._uri(request_uri, query_params)
        if self.verbose:
            print(method, uri, headers)
        if self._conn is not None and self._conn_requests > 0 and self._closed_by_peer():
            self.stale_reconnects += 1  # nothing was sent on it: not a re-send
            self.close()
        if self._conn is None:
            self._connect()
        try:
            self._conn_requests += 1
            self.requests_sent += 1
            raw = self._send_once(method, uri, body, headers)
        except Exception:
            self.close()  # never re-sent: the caller (a test) sees the failure
            raise
        self.last_response = raw
        if self.verbose:
            print(raw.status, raw.headers, raw.body[:512])
        return raw

    # -- API --------------------------------------------------------------
    def is_server_live(self, headers=None, query_params=None):
        return self._request("GET", "v2/health/live", None, headers, query_params).status == 200

    def is_server_ready(self, headers=None, query_params=None):
        return self._request("GET", "v2/health/ready", None, headers, query_params).status == 200

    @staticmethod
    def _model_uri(model_name, model_version, suffix=""):
        if type(model_version) != str:  # noqa: E721 - mirrors the client's check
            raise_error("model version must be a string")
        uri = "v2/models/{}".format(quote(model_name))
        if model_version != "":
            uri += "/versions/{}".format(model_version)
        return uri + suffix

    def is_model_ready(self, name, version="", headers=None, query_params=None):
        uri = self._model_uri(name, version, "/ready")
        return self._request("GET", uri, None, headers, query_params).status == 200

    def _get_json(self, uri, headers, query_params):
        raw = self._request("GET", uri, None, headers, query_params)
        _raise_if_error(raw)
        return json.loads(raw.body)

    def get_server_metadata(self, headers=None, query_params=None):
        return self._get_json("v2", headers, query_params)

    def get_model_metadata(self, name, version="", headers=None, query_params=None):
        return self._get_json(self._model_uri(name, version), headers, query_params)

    def get_model_config(self, name, version="", headers=None, query_params=None):
        return self._get_json(self._model_uri(name, version, "/config"), headers, query_params)

    def get_model_repository_index(self, headers=None, query_params=None):
        raw = self._request("POST", "v2/repository/index", b"", headers, query_params)
        _raise_if_error(raw)
        return json.loads(raw.body)

    def infer(self, model_name, inputs, outputs=None, model_version="", request_id="",
              binary_inputs=True, binary_outputs=True, timeout=None, headers=None,
              parameters=None, sequence_id=0, sequence_start=False, sequence_end=False,
              priority=0, request_compression_algorithm=None,
              response_compression_algorithm=None, query_params=None):
        """inputs: [(name, ndarray, datatype[, binary])]; outputs: None or
        [name | (name, binary_data[, class_count])].  ``timeout`` is the request's
        "timeout" parameter in microseconds, as in tritonclient."""
        body, json_size = build_infer_body(
            inputs, outputs, request_id, binary_inputs, binary_outputs, timeout,
            parameters, sequence_id, sequence_start, sequence_end, priority)
        headers = dict(headers or {})
        if request_compression_algorithm == "gzip":
            headers["Content-Encoding"] = "gzip"
            body = gzip.compress(body)
        elif request_compression_algorithm == "deflate":
            headers["Content-Encoding"] = "deflate"
            body = zlib.compress(body)
        if response_compression_algorithm in ("gzip", "deflate"):
            headers["Accept-Encoding"] = response_compression_algorithm
        if json_size is not None:
            headers[INFER_HEADER] = json_size
        uri = self._model_uri(model_name, model_version, "/infer")
        raw = self._request("POST", uri, body, headers, query_params)
        _raise_if_error(raw)
        return InferResult(raw)


# --------------------------------------------------------------------------
if __name__ == "__main__":
    # BYTES round trip (object array of bytes/str, 2-D, with empty and NUL bytes)
    src = np.array([[b"abc", b""], ["h\u00e9llo", b"\x00\xff"]], dtype=np.object_)
    ser = serialize_byte_tensor(src)
    blob = ser.item()
    assert blob[:7] == b"\x03\x00\x00\x00abc", blob[:7]
    assert len(blob) == 4 * 4 + 3 + 0 + len("h\u00e9llo".encode()) + 2
    back = deserialize_bytes_tensor(blob).reshape(src.shape)
    assert back.dtype == np.object_ and back[1, 0] == "h\u00e9llo".encode() and back[1, 1] == b"\x00\xff"
    assert serialize_byte_tensor(np.array([], dtype=np.object_)).size == 0
    assert deserialize_bytes_tensor(b"").shape == (0,)

    # BF16 round trip: exactly representable values survive; others truncate
    f = np.array([[1.0, -2.5, 0.0], [3.140625, 65280.0, -0.0078125]], dtype=np.float32)
    bblob = serialize_bf16_tensor(f).item()
    assert len(bblob) == 2 * f.size and bblob[:2] == b"\x80\x3f", bblob[:2]
    g = deserialize_bf16_tensor(bblob)
    assert g.shape == (f.size, 1) and g.dtype == np.float32
    assert np.array_equal(g.reshape(f.shape), f)
    t = deserialize_bf16_tensor(serialize_bf16_tensor(np.array([1.00999], np.float32)).item())
    assert t[0, 0] == np.float32(1.0078125), t  # truncation, not rounding

    # dtype maps and request building
    assert np_to_triton_dtype(np.float16) == "FP16" and np_to_triton_dtype(np.bool_) == "BOOL"
    assert np_to_triton_dtype(np.dtype("S3")) == "BYTES" and np_to_triton_dtype(np.dtype("U3")) is None
    assert triton_to_np_dtype("BF16") is np.float32
    body, n = build_infer_body([("X", np.arange(4, dtype=np.int32).reshape(2, 2), "INT32")])
    hdr = json.loads(body[:n])
    assert hdr == {"inputs": [{"name": "X", "shape": [2, 2], "datatype": "INT32",
                               "parameters": {"binary_data_size": 16}}],
                   "parameters": {"binary_data_output": True}}, hdr
    assert body[n:] == np.arange(4, dtype="<i4").tobytes()
    txt = np.array([b"abc", "h\u00e9llo"], dtype=np.object_)
    body, n = build_infer_body([("S", txt, "BYTES")], outputs=["Y"], binary_inputs=False,
                               binary_outputs=False)
    assert n is None and json.loads(body)["inputs"][0]["data"] == ["abc", "h\u00e9llo"]
    assert json.loads(body)["outputs"] == [{"name": "Y", "parameters": {"binary_data": False}}]
    try:  # non-UTF-8 BYTES cannot go as JSON, as in tritonclient
        build_infer_body([("S", src, "BYTES")], binary_inputs=False)
        raise AssertionError("expected InferenceServerException")
    except InferenceServerException as exc:
        assert exc.status() is None and "UTF-8" in exc.message()

    # response decoding (binary + JSON mixed)
    out_hdr = json.dumps({"model_name": "m", "model_version": "1", "outputs": [
        {"name": "A", "datatype": "BYTES", "shape": [2, 2], "parameters": {"binary_data_size": len(blob)}},
        {"name": "B", "datatype": "FP32", "shape": [3], "data": [0.5, 1.5, 2.5]},
        {"name": "C", "datatype": "BF16", "shape": [2, 3], "parameters": {"binary_data_size": len(bblob)}},
        {"name": "D", "datatype": "FP16", "shape": [0], "parameters": {"binary_data_size": 0}}]}).encode()
    r = InferResult(_RawResponse(200, "OK", [(INFER_HEADER, str(len(out_hdr)))], out_hdr + blob + bblob))
    assert r.as_numpy("A")[1, 1] == b"\x00\xff" and r.as_numpy("B").dtype == np.float32
    assert np.array_equal(r.as_numpy("C"), f) and r.as_numpy("D").shape == (0,)
    assert r.as_numpy("nope") is None
    e = _get_error(_RawResponse(400, "Bad Request", [], b'{"error":"boom"}'))
    assert str(e) == "[400] boom" and e.status() == "400" and e.message() == "boom"
    e = _get_error(_RawResponse(404, "Not Found", [], b""))
    assert e.message() == "client received an empty response from the server."
    print("OK")
