/* The JSON number routines as they were before the exact-scaling rewrite (jfast.c at
 * 7f62397), kept only as bench_jsonrate's baseline so one run prints before and after. */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jfast_baseline.h"

/* ---- parsing numbers ----------------------------------------------------------------- */

static const double k_pow10[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
                                 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

/* One JSON number at p (strict grammar). Exact (Clinger's fast path) when the digits fit
 * 2^53 and the exponent is within 22, else strtod on the token. *is_int: no '.'/exponent. */
static const char *parse_number(const char *p, const char *end, bool f32_target, double *out,
                                bool *is_int, int64_t *ival, bool *ival_ok)
{
    const char *start = p;
    bool neg = false;
    if (p < end && *p == '-') neg = true, p++;
    if (p >= end || *p < '0' || *p > '9') return NULL;
    if (*p == '0' && p + 1 < end && p[1] >= '0' && p[1] <= '9') return NULL; /* leading zero */
    uint64_t m = 0;
    int exp10 = 0;
    bool overflow = false;
    while (p < end && *p >= '0' && *p <= '9') {
        if (m < UINT64_C(1000000000000000000)) m = m * 10 + (uint64_t)(*p - '0');
        else overflow = true, exp10++;
        p++;
    }
    *is_int = true;
    *ival_ok = !overflow && (neg ? m <= (uint64_t)INT64_MAX + 1 : m <= (uint64_t)INT64_MAX);
    *ival = *ival_ok ? (neg ? (int64_t)(0 - m) : (int64_t)m) : 0;
    if (p < end && *p == '.') {
        *is_int = false;
        p++;
        if (p >= end || *p < '0' || *p > '9') return NULL;
        while (p < end && *p >= '0' && *p <= '9') {
            if (m < UINT64_C(1000000000000000000)) m = m * 10 + (uint64_t)(*p - '0'), exp10--;
            p++;
        }
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        *is_int = false;
        p++;
        bool eneg = false;
        if (p < end && (*p == '+' || *p == '-')) eneg = *p == '-', p++;
        if (p >= end || *p < '0' || *p > '9') return NULL;
        int e = 0;
        while (p < end && *p >= '0' && *p <= '9') {
            if (e < 100000) e = e * 10 + (*p - '0');
            p++;
        }
        exp10 += eneg ? -e : e;
    }
    if (!overflow && m <= (UINT64_C(1) << 53) && exp10 >= -22 && exp10 <= 22) {
        double d = (double)m;
        d = exp10 < 0 ? d / k_pow10[-exp10] : d * k_pow10[exp10];
        *out = neg ? -d : d;
        return p;
    }
    /* Long mantissas (what Python writes for a float32: 17 digits) headed for FP32: the
     * approximation is within a few double ulps, so it picks the same float as the exact
     * value unless it sits next to the midpoint between two floats; then strtod decides. */
    if (f32_target && m != 0 && exp10 >= -22 && exp10 <= 22) {
        double d = (double)m;
        d = exp10 < 0 ? d / k_pow10[-exp10] : d * k_pow10[exp10];
        float f = (float)d;
        if (isfinite(f) && f != 0) {
            double fd = f, other = nextafterf(f, d > fd ? INFINITY : -INFINITY);
            double mid = (fd + other) / 2;
            if (fabs(d - mid) > 1e-14 * d) {
                *out = neg ? -d : d;
                return p;
            }
        }
    }
    char tmp[64];
    size_t l = (size_t)(p - start);
    if (l >= sizeof tmp) return NULL;
    memcpy(tmp, start, l);
    tmp[l] = '\0';
    *out = strtod(tmp, NULL);
    return p;
}

static bool store(ts_dtype dt, uint8_t *out, size_t i, double d, bool is_int, int64_t iv, bool iv_ok)
{
    switch (dt) {
    case DT_FP64: memcpy(out + 8 * i, &d, 8); return true;
    case DT_FP32: {
        float f = (float)d;
        if (isinf(f)) return false; /* overflow: the slow path words the error */
        memcpy(out + 4 * i, &f, 4);
        return true;
    }
    case DT_FP16: case DT_BF16: {
        uint16_t h = dt == DT_FP16 ? dtype_f64_to_f16(d) : dtype_f64_to_bf16(d);
        if ((h & 0x7fffu) == (dt == DT_FP16 ? 0x7c00u : 0x7f80u)) return false;
        memcpy(out + 2 * i, &h, 2);
        return true;
    }
    default: break;
    }
    if (!is_int || !iv_ok) return false;
    switch (dt) {
    case DT_INT8: if (iv < INT8_MIN || iv > INT8_MAX) return false; out[i] = (uint8_t)(int8_t)iv; return true;
    case DT_UINT8: if (iv < 0 || iv > UINT8_MAX) return false; out[i] = (uint8_t)iv; return true;
    case DT_INT16: { if (iv < INT16_MIN || iv > INT16_MAX) return false; int16_t v = (int16_t)iv; memcpy(out + 2 * i, &v, 2); return true; }
    case DT_UINT16: { if (iv < 0 || iv > UINT16_MAX) return false; uint16_t v = (uint16_t)iv; memcpy(out + 2 * i, &v, 2); return true; }
    case DT_INT32: { if (iv < INT32_MIN || iv > INT32_MAX) return false; int32_t v = (int32_t)iv; memcpy(out + 4 * i, &v, 4); return true; }
    case DT_UINT32: { if (iv < 0 || iv > (int64_t)UINT32_MAX) return false; uint32_t v = (uint32_t)iv; memcpy(out + 4 * i, &v, 4); return true; }
    case DT_INT64: memcpy(out + 8 * i, &iv, 8); return true;
    case DT_UINT64: { if (iv < 0) return false; uint64_t v = (uint64_t)iv; memcpy(out + 8 * i, &v, 8); return true; }
    default: return false;
    }
}

int base_parse_array(const char *p, const char *end, ts_dtype dt, uint8_t *out, size_t count)
{
    if (dt == DT_BYTES || dt == DT_INVALID) return -1;
    size_t i = 0;
    int depth = 0;
    bool want_value = true; /* after '[' or ',' */
    bool after_comma = false;
    while (p < end) {
        char x = *p;
        if (x == ' ' || x == '\n' || x == '\r' || x == '\t') {
            p++;
        } else if (x == '[') {
            if (!want_value || ++depth > 32) return -1;
            after_comma = false;
            p++;
        } else if (x == ']') {
            if (depth-- <= 0 || after_comma) return -1;
            want_value = false;
            p++;
        } else if (x == ',') {
            if (want_value) return -1;
            want_value = after_comma = true;
            p++;
        } else {
            if (!want_value || i >= count || depth == 0) return -1;
            if (dt == DT_BOOL) {
                if (end - p >= 4 && memcmp(p, "true", 4) == 0) out[i++] = 1, p += 4;
                else if (end - p >= 5 && memcmp(p, "false", 5) == 0) out[i++] = 0, p += 5;
                else return -1;
            } else {
                double d;
                bool is_int, iv_ok;
                int64_t iv;
                p = parse_number(p, end, dt == DT_FP32, &d, &is_int, &iv, &iv_ok);
                if (!p || !store(dt, out, i, d, is_int, iv, iv_ok)) return -1;
                i++;
            }
            want_value = after_comma = false;
        }
    }
    return depth == 0 && i == count ? 0 : -1;
}

/* ---- formatting ---------------------------------------------------------------------- */

static size_t base_fmt_u64(char *out, uint64_t v)
{
    char tmp[24];
    size_t n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    for (size_t i = 0; i < n; i++) out[i] = tmp[n - 1 - i];
    return n;
}

static const double k_p10[] = {1e-45, 1e-44, 1e-43, 1e-42, 1e-41, 1e-40, 1e-39, 1e-38, 1e-37, 1e-36,
                               1e-35, 1e-34, 1e-33, 1e-32, 1e-31, 1e-30, 1e-29, 1e-28, 1e-27, 1e-26,
                               1e-25, 1e-24, 1e-23, 1e-22, 1e-21, 1e-20, 1e-19, 1e-18, 1e-17, 1e-16,
                               1e-15, 1e-14, 1e-13, 1e-12, 1e-11, 1e-10, 1e-9,  1e-8,  1e-7,  1e-6,
                               1e-5,  1e-4,  1e-3,  1e-2,  1e-1,  1e0,   1e1,   1e2,   1e3,   1e4,
                               1e5,   1e6,   1e7,   1e8,   1e9,   1e10,  1e11,  1e12,  1e13,  1e14,
                               1e15,  1e16,  1e17,  1e18,  1e19,  1e20,  1e21,  1e22,  1e23,  1e24,
                               1e25,  1e26,  1e27,  1e28,  1e29,  1e30,  1e31,  1e32,  1e33,  1e34,
                               1e35,  1e36,  1e37,  1e38,  1e39,  1e40,  1e41,  1e42,  1e43,  1e44,
                               1e45,  1e46,  1e47,  1e48,  1e49,  1e50,  1e51,  1e52,  1e53,  1e54, 1e55};
#define P10(k) k_p10[(k) + 45]

/* Nine significant digits of |f| as printf's %.9g would pick them (ties aside, which
 * cannot change the float they read back as), then %g's layout plus our ".0" rule. */
size_t base_fmt_f32(char *out, float f)
{
    if (isnan(f)) return (size_t)(memcpy(out, "NaN", 3), 3);
    if (isinf(f)) {
        if (f > 0) return (size_t)(memcpy(out, "Infinity", 8), 8);
        return (size_t)(memcpy(out, "-Infinity", 9), 9);
    }
    size_t n = 0;
    if (signbit(f)) out[n++] = '-';
    double v = fabs((double)f);
    if (v == 0) {
        memcpy(out + n, "0.0", 3);
        return n + 3;
    }
    /* decimal exponent from the binary one (no log10), corrected by one step if needed */
    int e2;
    frexp(v, &e2);
    int e10 = (int)floor((double)(e2 - 1) * 0.30102999566398120);
    double s = v * P10(8 - e10); /* |8 - e10| stays inside the table for any float */
    if (s >= 999999999.5) {
        e10++;
        s = v * P10(8 - e10);
    } else if (s < 99999999.5) {
        e10--;
        s = v * P10(8 - e10);
    }
    uint64_t d = (uint64_t)rint(s); /* ties to even, as printf does on exact decimals */
    if (d >= UINT64_C(1000000000)) { /* 999999999.5 rounded up */
        d /= 10;
        e10++;
    }
    /* two digits per division */
    static const char k_pairs[] = "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
                                  "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
                                  "8081828384858687888990919293949596979899";
    char dig[10];
    uint32_t rest = (uint32_t)d;
    for (int i = 7; i >= 1; i -= 2) {
        uint32_t q = rest / 100, r = rest - q * 100;
        dig[i] = k_pairs[2 * r];
        dig[i + 1] = k_pairs[2 * r + 1];
        rest = q;
    }
    dig[0] = (char)('0' + rest);
    int nd = 9;
    while (nd > 1 && dig[nd - 1] == '0') nd--; /* %g drops trailing zeros */
    if (e10 < -4 || e10 >= 9) {
        out[n++] = dig[0];
        if (nd > 1) {
            out[n++] = '.';
            memcpy(out + n, dig + 1, (size_t)nd - 1);
            n += (size_t)nd - 1;
        }
        out[n++] = 'e';
        int e = e10;
        out[n++] = e < 0 ? '-' : '+';
        if (e < 0) e = -e;
        if (e < 10) out[n++] = '0';
        n += base_fmt_u64(out + n, (uint64_t)e);
        return n;
    }
    if (e10 < 0) {
        out[n++] = '0';
        out[n++] = '.';
        for (int z = -1; z > e10; z--) out[n++] = '0';
        memcpy(out + n, dig, (size_t)nd);
        return n + (size_t)nd;
    }
    int int_digits = e10 + 1;
    for (int i = 0; i < int_digits; i++) out[n++] = i < nd ? dig[i] : '0';
    out[n++] = '.';
    if (nd > int_digits) {
        memcpy(out + n, dig + int_digits, (size_t)(nd - int_digits));
        n += (size_t)(nd - int_digits);
    } else {
        out[n++] = '0';
    }
    return n;
}
