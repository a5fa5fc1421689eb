"""Reading a KServe v2 JSON reply's tensor data exactly (shared by test_infer and the
conformance sweep).

numpy's np.array(data, dtype) wraps an out-of-range integer (with only a warning) and a
float parse rounds through float64, so neither can tell a right reply from a wrong one in
the last bit. Here integers stay Python ints and must lie in the datatype's range, and
every other number keeps its decimal text and is rounded once, correctly, into the
datatype (FP16, FP32, BF16 or FP64), so the result can be compared bit for bit.
"""
import decimal
import fractions
import json

import numpy as np

NP_INT = {"UINT8": np.uint8, "UINT16": np.uint16, "UINT32": np.uint32, "UINT64": np.uint64,
          "INT8": np.int8, "INT16": np.int16, "INT32": np.int32, "INT64": np.int64}
# numpy types a JSON float decodes to (BF16 values are float32 values with 16 zero low bits)
NP_FLOAT = {"FP16": np.float16, "FP32": np.float32, "FP64": np.float64, "BF16": np.float32}


def exact_json(text):
    """JSON with every number kept exact: integers as Python ints, every other number
    (the NaN / Infinity tokens the worker writes included) as the Decimal of its text."""
    return json.loads(text, parse_float=decimal.Decimal, parse_constant=decimal.Decimal)


def nearest_float(dt, dec):
    """The value of datatype dt nearest to the decimal dec, ties to even: what a reader
    that rounds the decimal once into dt gets (with fractions: never double-rounded)."""
    ty = NP_FLOAT[dt]
    if dec.is_nan():
        return ty(np.nan)
    if dec.is_infinite():
        return ty(-np.inf if dec.is_signed() else np.inf)
    exact = fractions.Fraction(dec)
    big = np.finfo(ty).max
    top = fractions.Fraction(float(big))
    half_top = top + (top - fractions.Fraction(float(np.nextafter(big, ty(0))))) / 2
    if abs(exact) >= half_top:  # past the largest finite value by half an ulp: rounds to inf
        return ty(-np.inf if exact < 0 else np.inf)
    with np.errstate(over="ignore"):  # stepping past the largest finite value gives inf
        c = ty(float(dec))  # correctly rounded to float64, then once more: maybe off by one
        cands = (np.nextafter(c, ty(-np.inf)), c, np.nextafter(c, ty(np.inf)))
    best = None
    for cand in cands:
        if not np.isfinite(cand):
            continue
        err = abs(fractions.Fraction(float(cand)) - exact)
        even = int(np.array(cand).view(f"u{np.dtype(ty).itemsize}")) % 2 == 0
        key = (err, not even)
        if best is None or key < best[0]:
            best = (key, cand)
    got = best[1]
    if got == 0 and dec.is_signed():
        got = ty(-0.0)  # "-0.0" is negative zero; the fraction lost the sign
    return got


def _floats(dt, data):
    """nearest_float over a list, fast: float64 first (correctly rounded from the text);
    for FP16/FP32/BF16 the second rounding can only go wrong when the float64 lands exactly
    on a midpoint between two neighbours of the narrow type (or past its top): those few
    elements are redone exactly."""
    ty = NP_FLOAT[dt]
    d = np.array([float(x) for x in data], dtype=np.float64)
    if ty is np.float64:
        return d
    with np.errstate(over="ignore", invalid="ignore"):
        c = d.astype(ty)
        up = np.nextafter(c, np.where(d > c.astype(np.float64), ty(np.inf), ty(-np.inf)).astype(ty))
        mid = (c.astype(np.float64) + up.astype(np.float64)) / 2
    redo = np.isfinite(d) & (~np.isfinite(c) | (mid == d))
    for i in np.flatnonzero(redo):
        c[i] = nearest_float(dt, data[i])
    return c


def decode_data(dt, data, shape):
    """A reply's JSON "data" (parsed by exact_json) as an array of dt, checked element by
    element: BOOL true/false, integers JSON integers inside dt's range, floats JSON floats
    (a bare "-0" or "3" would read back as an integer; NaN/Infinity allowed), BF16 values
    exact bfloat16s, BYTES strings (returned as their UTF-8 bytes). Raises AssertionError
    naming the first offending values."""
    data = list(data)
    if dt == "BYTES":
        assert all(isinstance(s, str) for s in data), f"BYTES data must be strings: {data[:5]}"
        arr = np.empty(len(data), dtype=object)
        arr[:] = [s.encode("utf-8") for s in data]
        return arr.reshape(shape)
    if dt == "BOOL":
        assert all(type(x) is bool for x in data), f"BOOL data must be true/false: {data[:5]}"
        return np.array(data, dtype=np.bool_).reshape(shape)
    if dt in NP_FLOAT:
        bad = [x for x in data if not isinstance(x, decimal.Decimal)]
        assert not bad, f"{dt} data must be JSON floats (with '.' or 'e'): {bad[:5]}"
        arr = _floats(dt, data)
        if dt == "BF16":
            low = np.ascontiguousarray(arr, dtype="<f4").view("<u4") & 0xFFFF
            assert not low.any(), f"BF16 data holds values that are not bfloat16: " \
                                  f"{[data[i] for i in np.flatnonzero(low)[:5]]}"
        return arr.reshape(shape)
    info = np.iinfo(NP_INT[dt])
    bad = [x for x in data if type(x) is not int or not info.min <= x <= info.max]
    assert not bad, f"{dt} data holds values that are not {dt} integers: {bad[:5]}"
    return np.array(data, dtype=NP_INT[dt]).reshape(shape)


def same_bits(dt, a, b):
    """Whether two arrays of dt hold the same values exactly: floats bit for bit (the sign
    of zero included), NaN matching NaN whatever its payload (JSON cannot carry one)."""
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape:
        return False
    if dt == "BYTES":
        return [bytes(x) if not isinstance(x, str) else x.encode() for x in a.reshape(-1)] == \
               [bytes(x) if not isinstance(x, str) else x.encode() for x in b.reshape(-1)]
    if dt in NP_FLOAT:
        ty = NP_FLOAT[dt]
        a, b = a.astype(ty).reshape(-1), b.astype(ty).reshape(-1)
        nan_a, nan_b = np.isnan(a), np.isnan(b)
        u = f"u{np.dtype(ty).itemsize}"
        return bool(np.array_equal(nan_a, nan_b)
                    and np.array_equal(a[~nan_a].view(u), b[~nan_b].view(u)))
    return a.dtype == b.dtype and bool(np.array_equal(a, b))
