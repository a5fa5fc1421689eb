#include "jfast.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

/* ---- scanning ---------------------------------------------------------------------- */

typedef struct {
    const char *s;
    size_t i, n;
} cur;

static void ws(cur *c)
{
    while (c->i < c->n && (c->s[c->i] == ' ' || c->s[c->i] == '\n' || c->s[c->i] == '\r' || c->s[c->i] == '\t'))
        c->i++;
}

/* A string; *plain tells whether it has no escapes (then [*a, *b) is its text). */
static int str(cur *c, size_t *a, size_t *b, bool *plain)
{
    if (c->i >= c->n || c->s[c->i] != '"') return -1;
    *a = ++c->i;
    *plain = true;
    while (c->i < c->n && c->s[c->i] != '"') {
        if (c->s[c->i] == '\\') {
            *plain = false;
            c->i++;
        }
        c->i++;
    }
    if (c->i >= c->n) return -1;
    *b = c->i++;
    return 0;
}

static int skip_value(cur *c, int depth);

static int skip_container(cur *c, int depth, char open, char close)
{
    if (depth > 64) return -1;
    c->i++; /* open */
    (void)open;
    ws(c);
    if (c->i < c->n && c->s[c->i] == close) {
        c->i++;
        return 0;
    }
    for (;;) {
        ws(c);
        if (close == '}') {
            size_t a, b;
            bool plain;
            if (str(c, &a, &b, &plain)) return -1;
            ws(c);
            if (c->i >= c->n || c->s[c->i++] != ':') return -1;
            ws(c);
        }
        if (skip_value(c, depth + 1)) return -1;
        ws(c);
        if (c->i >= c->n) return -1;
        char x = c->s[c->i++];
        if (x == close) return 0;
        if (x != ',') return -1;
    }
}

static int skip_value(cur *c, int depth)
{
    ws(c);
    if (c->i >= c->n) return -1;
    char x = c->s[c->i];
    if (x == '{') return skip_container(c, depth, '{', '}');
    if (x == '[') return skip_container(c, depth, '[', ']');
    if (x == '"') {
        size_t a, b;
        bool plain;
        return str(c, &a, &b, &plain);
    }
    /* number or literal: up to the next delimiter */
    size_t start = c->i;
    while (c->i < c->n) {
        char d = c->s[c->i];
        if (d == ',' || d == ']' || d == '}' || d == ' ' || d == '\n' || d == '\r' || d == '\t') break;
        c->i++;
    }
    return c->i > start ? 0 : -1;
}

static bool key_is(cur *c, size_t a, size_t b, const char *k)
{
    size_t l = strlen(k);
    return b - a == l && memcmp(c->s + a, k, l) == 0;
}

/* The first '[', ']', '"' or '{' in [p, end), or end: what ends or nests a data array, or
 * takes it off the fast path. One pass over the numbers (it was four memchr passes). */
static const char *next_special(const char *p, const char *end)
{
#if defined(__SSE2__)
    const __m128i a = _mm_set1_epi8('['), b = _mm_set1_epi8(']'), q = _mm_set1_epi8('"'),
                  o = _mm_set1_epi8('{');
    while (end - p >= 16) {
        __m128i x = _mm_loadu_si128((const __m128i *)(const void *)p);
        __m128i m = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(x, a), _mm_cmpeq_epi8(x, b)),
                                 _mm_or_si128(_mm_cmpeq_epi8(x, q), _mm_cmpeq_epi8(x, o)));
        unsigned bits = (unsigned)_mm_movemask_epi8(m);
        if (bits) return p + __builtin_ctz(bits);
        p += 16;
    }
#endif
    while (p < end && *p != '[' && *p != ']' && *p != '"' && *p != '{') p++;
    return p;
}

/* Within one element of "inputs": records its "data" array span. */
static int scan_input(cur *c, size_t idx, jfast_span *spans, size_t max, int *n)
{
    ws(c);
    if (c->i >= c->n || c->s[c->i] != '{') return -1;
    c->i++;
    ws(c);
    if (c->i < c->n && c->s[c->i] == '}') {
        c->i++;
        return 0;
    }
    for (;;) {
        ws(c);
        size_t a, b;
        bool plain;
        if (str(c, &a, &b, &plain) || !plain) return -1;
        ws(c);
        if (c->i >= c->n || c->s[c->i++] != ':') return -1;
        ws(c);
        bool data = key_is(c, a, b, "data") && c->i < c->n && c->s[c->i] == '[';
        size_t vstart = c->i;
        if (data) { /* numbers and brackets only (no strings): find the matching ']' */
            size_t k = c->i + 1;
            int depth = 1;
            for (;;) { /* one pass; the brackets of a nested array are sparse */
                k = (size_t)(next_special(c->s + k, c->s + c->n) - c->s);
                if (k >= c->n) return -1;
                char d = c->s[k];
                if (d == '"' || d == '{') return -1; /* BYTES or odd: jansson's job */
                if (d == ']' && --depth == 0) break;
                if (d == '[') depth++;
                k++;
            }
            if (k >= c->n) return -1;
            c->i = k + 1;
        } else if (skip_value(c, 2)) {
            return -1;
        }
        if (data) {
            if ((size_t)*n >= max) return -1;
            spans[*n] = (jfast_span){idx, vstart, c->i};
            (*n)++;
        }
        ws(c);
        if (c->i >= c->n) return -1;
        char x = c->s[c->i++];
        if (x == '}') return 0;
        if (x != ',') return -1;
    }
}

int jfast_find_data(const char *json, size_t len, jfast_span *spans, size_t max)
{
    cur c = {json, 0, len};
    int n = 0;
    ws(&c);
    if (c.i >= c.n || json[c.i] != '{') return -1;
    c.i++;
    for (;;) {
        ws(&c);
        if (c.i < c.n && json[c.i] == '}') break;
        size_t a, b;
        bool plain;
        if (str(&c, &a, &b, &plain) || !plain) return -1;
        ws(&c);
        if (c.i >= c.n || json[c.i++] != ':') return -1;
        ws(&c);
        if (key_is(&c, a, b, "inputs") && c.i < c.n && json[c.i] == '[') {
            c.i++;
            ws(&c);
            size_t idx = 0;
            if (c.i < c.n && json[c.i] == ']') {
                c.i++;
            } else {
                for (;;) {
                    if (scan_input(&c, idx++, spans, max, &n)) return -1;
                    ws(&c);
                    if (c.i >= c.n) return -1;
                    char x = json[c.i++];
                    if (x == ']') break;
                    if (x != ',') return -1;
                }
            }
        } else if (skip_value(&c, 1)) {
            return -1;
        }
        ws(&c);
        if (c.i >= c.n) return -1;
        char x = json[c.i++];
        if (x == '}') break;
        if (x != ',') return -1;
    }
    return n;
}

/* ---- powers of ten and a wide multiply ------------------------------------------------- */

/* 10^k ~= m * 2^e with m in [2^63, 2^64), rounded to nearest (generated with exact rational
 * arithmetic), for k in [P10_MIN, P10_MAX]: what both directions scale by. One 64x64 product
 * keeps a float's 24 bits and some 35 bits to spare, which is what lets them tell a sure
 * rounding from a near-tie, and send only the near-ties to the C library. */
#define P10_MIN (-64)
#define P10_MAX 64
typedef struct {
    uint64_t m;
    int e;
} p10;
static const p10 k_p10[] = {
    {0xa87fea27a539e9a5u, -276}, {0xd29fe4b18e88640fu, -273}, {0x83a3eeeef9153e89u, -269},
    {0xa48ceaaab75a8e2bu, -266}, {0xcdb02555653131b6u, -263}, {0x808e17555f3ebf12u, -259},
    {0xa0b19d2ab70e6ed6u, -256}, {0xc8de047564d20a8cu, -253}, {0xfb158592be068d2fu, -250},
    {0x9ced737bb6c4183du, -246}, {0xc428d05aa4751e4du, -243}, {0xf53304714d9265e0u, -240},
    {0x993fe2c6d07b7facu, -236}, {0xbf8fdb78849a5f97u, -233}, {0xef73d256a5c0f77du, -230},
    {0x95a8637627989aaeu, -226}, {0xbb127c53b17ec159u, -223}, {0xe9d71b689dde71b0u, -220},
    {0x9226712162ab070eu, -216}, {0xb6b00d69bb55c8d1u, -213}, {0xe45c10c42a2b3b06u, -210},
    {0x8eb98a7a9a5b04e3u, -206}, {0xb267ed1940f1c61cu, -203}, {0xdf01e85f912e37a3u, -200},
    {0x8b61313bbabce2c6u, -196}, {0xae397d8aa96c1b78u, -193}, {0xd9c7dced53c72256u, -190},
    {0x881cea14545c7575u, -186}, {0xaa242499697392d3u, -183}, {0xd4ad2dbfc3d07788u, -180},
    {0x84ec3c97da624ab5u, -176}, {0xa6274bbdd0fadd62u, -173}, {0xcfb11ead453994bau, -170},
    {0x81ceb32c4b43fcf5u, -166}, {0xa2425ff75e14fc32u, -163}, {0xcad2f7f5359a3b3eu, -160},
    {0xfd87b5f28300ca0eu, -157}, {0x9e74d1b791e07e48u, -153}, {0xc612062576589ddbu, -150},
    {0xf79687aed3eec551u, -147}, {0x9abe14cd44753b53u, -143}, {0xc16d9a0095928a27u, -140},
    {0xf1c90080baf72cb1u, -137}, {0x971da05074da7befu, -133}, {0xbce5086492111aebu, -130},
    {0xec1e4a7db69561a5u, -127}, {0x9392ee8e921d5d07u, -123}, {0xb877aa3236a4b449u, -120},
    {0xe69594bec44de15bu, -117}, {0x901d7cf73ab0acd9u, -113}, {0xb424dc35095cd80fu, -110},
    {0xe12e13424bb40e13u, -107}, {0x8cbccc096f5088ccu, -103}, {0xafebff0bcb24aaffu, -100},
    {0xdbe6fecebdedd5bfu, -97}, {0x89705f4136b4a597u, -93}, {0xabcc77118461cefdu, -90},
    {0xd6bf94d5e57a42bcu, -87}, {0x8637bd05af6c69b6u, -83}, {0xa7c5ac471b478423u, -80},
    {0xd1b71758e219652cu, -77}, {0x83126e978d4fdf3bu, -73}, {0xa3d70a3d70a3d70au, -70},
    {0xcccccccccccccccdu, -67}, {0x8000000000000000u, -63}, {0xa000000000000000u, -60},
    {0xc800000000000000u, -57}, {0xfa00000000000000u, -54}, {0x9c40000000000000u, -50},
    {0xc350000000000000u, -47}, {0xf424000000000000u, -44}, {0x9896800000000000u, -40},
    {0xbebc200000000000u, -37}, {0xee6b280000000000u, -34}, {0x9502f90000000000u, -30},
    {0xba43b74000000000u, -27}, {0xe8d4a51000000000u, -24}, {0x9184e72a00000000u, -20},
    {0xb5e620f480000000u, -17}, {0xe35fa931a0000000u, -14}, {0x8e1bc9bf04000000u, -10},
    {0xb1a2bc2ec5000000u, -7}, {0xde0b6b3a76400000u, -4}, {0x8ac7230489e80000u, 0},
    {0xad78ebc5ac620000u, 3}, {0xd8d726b7177a8000u, 6}, {0x878678326eac9000u, 10},
    {0xa968163f0a57b400u, 13}, {0xd3c21bcecceda100u, 16}, {0x84595161401484a0u, 20},
    {0xa56fa5b99019a5c8u, 23}, {0xcecb8f27f4200f3au, 26}, {0x813f3978f8940984u, 30},
    {0xa18f07d736b90be5u, 33}, {0xc9f2c9cd04674edfu, 36}, {0xfc6f7c4045812296u, 39},
    {0x9dc5ada82b70b59eu, 43}, {0xc5371912364ce305u, 46}, {0xf684df56c3e01bc7u, 49},
    {0x9a130b963a6c115cu, 53}, {0xc097ce7bc90715b3u, 56}, {0xf0bdc21abb48db20u, 59},
    {0x96769950b50d88f4u, 63}, {0xbc143fa4e250eb31u, 66}, {0xeb194f8e1ae525fdu, 69},
    {0x92efd1b8d0cf37beu, 73}, {0xb7abc627050305aeu, 76}, {0xe596b7b0c643c719u, 79},
    {0x8f7e32ce7bea5c70u, 83}, {0xb35dbf821ae4f38cu, 86}, {0xe0352f62a19e306fu, 89},
    {0x8c213d9da502de45u, 93}, {0xaf298d050e4395d7u, 96}, {0xdaf3f04651d47b4cu, 99},
    {0x88d8762bf324cd10u, 103}, {0xab0e93b6efee0054u, 106}, {0xd5d238a4abe98068u, 109},
    {0x85a36366eb71f041u, 113}, {0xa70c3c40a64e6c52u, 116}, {0xd0cf4b50cfe20766u, 119},
    {0x82818f1281ed44a0u, 123}, {0xa321f2d7226895c8u, 126}, {0xcbea6f8ceb02bb3au, 129},
    {0xfee50b7025c36a08u, 132}, {0x9f4f2726179a2245u, 136}, {0xc722f0ef9d80aad6u, 139},
    {0xf8ebad2b84e0d58cu, 142}, {0x9b934c3b330c8577u, 146}, {0xc2781f49ffcfa6d5u, 149},
};

#ifdef __SIZEOF_INT128__
__extension__ typedef unsigned __int128 u128;
#endif

/* The high 64 bits of a * b. */
static inline uint64_t mul_hi(uint64_t a, uint64_t b)
{
#ifdef __SIZEOF_INT128__
    return (uint64_t)((u128)a * b >> 64);
#else
    uint64_t a0 = (uint32_t)a, a1 = a >> 32, b0 = (uint32_t)b, b1 = b >> 32;
    uint64_t p01 = a0 * b1, p10 = a1 * b0;
    uint64_t mid = (a0 * b0 >> 32) + (uint32_t)p01 + (uint32_t)p10;
    return a1 * b1 + (p01 >> 32) + (p10 >> 32) + (mid >> 32);
#endif
}

static inline int clz64(uint64_t x) /* x != 0 */
{
#if defined(__GNUC__)
    return __builtin_clzll(x);
#else
    int n = 0;
    while (!(x >> 63)) x <<= 1, n++;
    return n;
#endif
}

/* ---- parsing numbers ----------------------------------------------------------------- */

static const uint64_t k_pow10_u64[] = {UINT64_C(1), UINT64_C(10), UINT64_C(100), UINT64_C(1000),
                                       UINT64_C(10000), UINT64_C(100000), UINT64_C(1000000),
                                       UINT64_C(10000000), UINT64_C(100000000), UINT64_C(1000000000),
                                       UINT64_C(10000000000), UINT64_C(100000000000),
                                       UINT64_C(1000000000000), UINT64_C(10000000000000),
                                       UINT64_C(100000000000000), UINT64_C(1000000000000000),
                                       UINT64_C(10000000000000000), UINT64_C(100000000000000000),
                                       UINT64_C(1000000000000000000)};
#define M_CAP UINT64_C(1000000000000000000) /* digits are taken while the mantissa is below */

static const double k_pow10[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
                                 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

/* A scanned JSON number: value = (neg ? -1 : 1) * m * 10^exp10, m being the first digits
 * (while m < 10^18; later integer digits only raise exp10 and set overflow, later fraction
 * digits are dropped). */
typedef struct {
    uint64_t m;
    int exp10;
    bool neg, overflow, is_int;
    int64_t ival; /* the integer, when is_int and ival_ok */
    bool ival_ok;
} jnum;

#if defined(__GNUC__) && defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define JF_SWAR 1 /* eight digits at a time */
#define ONES UINT64_C(0x0101010101010101)
#define HIGH UINT64_C(0x8080808080808080)

/* How many of the eight bytes in x (in text order) lead with digits. Borrows and carries
 * only run upwards, from a byte that is itself flagged, so the lowest flag is exact. */
static inline unsigned lead_digits(uint64_t x)
{
    uint64_t m = ((x - ONES * '0') | (x + ONES * (0x7f - '9')) | x) & HIGH;
    return m ? (unsigned)__builtin_ctzll(m) >> 3 : 8;
}

/* The value of the first k (1..8) bytes of x, all digits (the rest is shifted out). */
static inline uint64_t digits_value(uint64_t x, unsigned k)
{
    uint64_t v = x - ONES * '0';
    if (k < 8) v <<= 8 * (8 - k); /* the digits to the top, zero digits below */
    v = v * 10 + (v >> 8);        /* pairs */
    v = ((v & UINT64_C(0x000000FF000000FF)) * (100 + (UINT64_C(1000000) << 32)) +
         ((v >> 16) & UINT64_C(0x000000FF000000FF)) * (1 + (UINT64_C(10000) << 32))) >> 32;
    return (uint32_t)v;
}
#endif

/* Takes the digits at p into (*mp, *ep, *ovp) exactly as one digit at a time would (the
 * blocks of eight are taken only while they keep m below M_CAP). Works on locals: through
 * the pointers, each digit would wait on the last one's store. */
static inline const char *take_digits(const char *p, const char *end, uint64_t *mp, int *ep, bool *ovp,
                                      bool frac)
{
    uint64_t m = *mp;
    int e = *ep;
#ifdef JF_SWAR
    while (end - p >= 8) {
        uint64_t x;
        memcpy(&x, p, 8);
        unsigned k = lead_digits(x);
        if (k == 0) goto out;
        if (m >= k_pow10_u64[18 - k]) break;
        m = m * k_pow10_u64[k] + digits_value(x, k);
        if (frac) e -= (int)k;
        p += k;
        if (k < 8) goto out;
    }
#endif
    for (; p < end && (unsigned)(*p - '0') < 10; p++) {
        if (m < M_CAP) {
            m = m * 10 + (uint64_t)(*p - '0');
            if (frac) e--;
        } else if (!frac) {
            *ovp = true;
            e++;
        }
    }
#ifdef JF_SWAR
out:
#endif
    *mp = m;
    *ep = e;
    return p;
}

/* One JSON number at p (strict grammar) into n. Returns the byte after it, or NULL. */
static inline const char *scan_number(const char *p, const char *end, jnum *n)
{
    n->m = 0;
    n->exp10 = 0;
    n->neg = n->overflow = false;
    n->is_int = true;
    if (p < end && *p == '-') n->neg = true, p++;
    if (p >= end || (unsigned)(*p - '0') >= 10) return NULL;
    if (*p == '0' && p + 1 < end && (unsigned)(p[1] - '0') < 10) return NULL; /* leading zero */
    p = take_digits(p, end, &n->m, &n->exp10, &n->overflow, false);
    n->ival_ok = !n->overflow && (n->neg ? n->m <= (uint64_t)INT64_MAX + 1 : n->m <= (uint64_t)INT64_MAX);
    n->ival = n->ival_ok ? (n->neg ? (int64_t)(0 - n->m) : (int64_t)n->m) : 0;
    if (p < end && *p == '.') {
        n->is_int = false;
        p++;
        if (p >= end || (unsigned)(*p - '0') >= 10) return NULL;
        p = take_digits(p, end, &n->m, &n->exp10, &n->overflow, true);
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        n->is_int = false;
        p++;
        bool eneg = false;
        if (p < end && (*p == '+' || *p == '-')) eneg = *p == '-', p++;
        if (p >= end || (unsigned)(*p - '0') >= 10) return NULL;
        int e = 0;
        for (; p < end && (unsigned)(*p - '0') < 10; p++)
            if (e < 100000) e = e * 10 + (*p - '0');
        n->exp10 += eneg ? -e : e;
    }
    return p;
}

/* n exactly as strtod reads it when the digits fit 2^53 and the exponent is within 22
 * (Clinger's fast path: one correctly rounded operation on exact operands). */
static inline bool clinger(const jnum *n, double *out)
{
    if (n->overflow || n->m > (UINT64_C(1) << 53) || n->exp10 < -22 || n->exp10 > 22) return false;
    double d = (double)n->m;
    d = n->exp10 < 0 ? d / k_pow10[-n->exp10] : d * k_pow10[n->exp10];
    *out = n->neg ? -d : d;
    return true;
}

/* The token [start, p) as strtod reads it. */
static bool to_double(const jnum *n, const char *start, const char *p, double *out)
{
    if (clinger(n, out)) return true;
    char tmp[64];
    size_t l = (size_t)(p - start);
    if (l >= sizeof tmp) return false;
    memcpy(tmp, start, l);
    tmp[l] = '\0';
    *out = strtod(tmp, NULL);
    return true;
}

/* n as the float (float)strtod gives (what the jansson path stores), when that is certain;
 * false leaves it to to_double. hi is within a few dozen units of the exact product (the
 * table's rounding, the bits below hi, digits past M_CAP); strtod's double within half a
 * double ulp, 2^10 of those units: unless the decimal lies that close to a midpoint between
 * two floats, both roundings land on the same side of it. */
static bool to_float(const jnum *n, float *out)
{
    if (n->m == 0) {
        *out = n->neg ? -0.0f : 0.0f;
        return true;
    }
    if (n->exp10 < P10_MIN || n->exp10 > P10_MAX) return false;
    const p10 *t = &k_p10[n->exp10 - P10_MIN];
    int lz = clz64(n->m);
    uint64_t a = n->m << lz, hi = mul_hi(a, t->m); /* value ~= hi * 2^(t->e + 64 - lz) */
    int e = t->e + 64 - lz + 40;                   /* value ~= (hi >> 40) * 2^e */
    /* a product below 2^127 takes one more bit from below (no branch: it goes either way
     * at random) */
    unsigned s = (unsigned)(1 - (hi >> 63));
    hi = hi << s | ((a * t->m) >> 63 & s);
    e -= (int)s;
    const uint64_t half = UINT64_C(1) << 39, tol = 4096;
    uint64_t r = hi & ((UINT64_C(1) << 40) - 1);
    if (r - (half - tol) <= 2 * tol) return false;
    uint64_t mant = (hi >> 40) + (r > half);
    if (mant >> 24) mant >>= 1, e++;
    int biased = e + 23 + 127; /* mant in [2^23, 2^24) */
    if (biased < 1 || biased > 254) return false; /* subnormal or past FLT_MAX: strtod */
    uint32_t bits = (uint32_t)n->neg << 31 | (uint32_t)biased << 23 | (uint32_t)(mant & 0x7fffff);
    memcpy(out, &bits, 4);
    return true;
}

static bool store(ts_dtype dt, uint8_t *out, size_t i, const jnum *n, const char *start, const char *p)
{
    double d;
    switch (dt) {
    case DT_FP32: {
        float f;
        if (clinger(n, &d)) { /* short mantissas: one division, as fast as it gets */
            f = (float)d;
        } else if (!to_float(n, &f)) {
            if (!to_double(n, start, p, &d)) return false;
            f = (float)d;
            if (isinf(f)) return false; /* overflow: the slow path words the error */
        }
        memcpy(out + 4 * i, &f, 4);
        return true;
    }
    case DT_FP64:
        if (!to_double(n, start, p, &d)) return false;
        memcpy(out + 8 * i, &d, 8);
        return true;
    case DT_FP16: case DT_BF16: {
        if (!to_double(n, start, p, &d)) return false;
        uint16_t h = dt == DT_FP16 ? dtype_f64_to_f16(d) : dtype_f64_to_bf16(d);
        if ((h & 0x7fffu) == (dt == DT_FP16 ? 0x7c00u : 0x7f80u)) return false;
        memcpy(out + 2 * i, &h, 2);
        return true;
    }
    default: break;
    }
    if (!n->is_int || !n->ival_ok) return false;
    int64_t iv = n->ival;
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

int jfast_parse_array(const char *p, const char *end, ts_dtype dt, uint8_t *out, size_t count)
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
                for (;;) {
                    jnum n;
                    const char *start = p;
                    p = scan_number(p, end, &n);
                    if (!p || !store(dt, out, i, &n, start, p)) return -1;
                    i++;
                    /* the common case, "1.5, -2": on to the next number without going
                     * round the loop for the ',' and the ' ' */
                    if (end - p < 3 || *p != ',' || i >= count) break;
                    const char *q = p + 1 + (p[1] == ' ');
                    if ((unsigned)(*q - '0') >= 10 && *q != '-') break;
                    p = q;
                }
            }
            want_value = after_comma = false;
        }
    }
    return depth == 0 && i == count ? 0 : -1;
}

/* ---- one flat array, split across threads ---------------------------------------------- */

/* Commas in [p, end), and whether a bracket or a quote is among them (then the array is not
 * flat and the split does not apply). */
static size_t count_commas(const char *p, const char *end, bool *nested)
{
    size_t n = 0;
    bool odd = false;
#if defined(__SSE2__)
    const __m128i c = _mm_set1_epi8(','), a = _mm_set1_epi8('['), b = _mm_set1_epi8(']'),
                  q = _mm_set1_epi8('"');
    while (end - p >= 16) {
        __m128i x = _mm_loadu_si128((const __m128i *)(const void *)p);
        n += (size_t)__builtin_popcount((unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(x, c)));
        odd |= _mm_movemask_epi8(_mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(x, a), _mm_cmpeq_epi8(x, b)),
                                              _mm_cmpeq_epi8(x, q))) != 0;
        p += 16;
    }
#endif
    for (; p < end; p++) {
        n += *p == ',';
        odd |= *p == '[' || *p == ']' || *p == '"';
    }
    *nested = odd;
    return n;
}

#define SPLIT_MAX 32

typedef struct {
    ts_dtype dt;
    uint8_t *out;
    size_t nr;
    const char *from[SPLIT_MAX], *to[SPLIT_MAX]; /* range k: [from, to), commas excluded */
    size_t first[SPLIT_MAX], nel[SPLIT_MAX];      /* its first element's index, its count */
    bool bad[SPLIT_MAX];
} split;

static void split_count(void *arg, size_t k)
{
    split *sp = arg;
    bool nested;
    sp->nel[k] = count_commas(sp->from[k], sp->to[k], &nested) + 1;
    sp->bad[k] = nested;
}

static bool is_ws(char x) { return x == ' ' || x == '\n' || x == '\r' || x == '\t'; }

/* Range k: "v, v, ..., v" with exactly nel[k] values, into out from first[k] on. */
static void split_parse(void *arg, size_t k)
{
    split *sp = arg;
    const char *p = sp->from[k], *end = sp->to[k];
    size_t i = sp->first[k], last = i + sp->nel[k];
    for (;;) {
        while (p < end && is_ws(*p)) p++;
        if (p >= end || i >= last) goto bad;
        if (sp->dt == DT_BOOL) {
            if (end - p >= 4 && memcmp(p, "true", 4) == 0) sp->out[i++] = 1, p += 4;
            else if (end - p >= 5 && memcmp(p, "false", 5) == 0) sp->out[i++] = 0, p += 5;
            else goto bad;
        } else {
            jnum n;
            const char *start = p;
            p = scan_number(p, end, &n);
            if (!p || !store(sp->dt, sp->out, i, &n, start, p)) goto bad;
            i++;
        }
        while (p < end && is_ws(*p)) p++;
        if (p == end) break;
        if (*p++ != ',') goto bad;
    }
    if (i == last) return;
bad:
    sp->bad[k] = true;
}

int jfast_parse_array_par(const char *p, const char *end, ts_dtype dt, uint8_t *out, size_t count,
                          const parfor *par)
{
    size_t ways = par ? par->ways : 1;
    size_t len = (size_t)(end - p);
    if (ways <= 1 || count < JFAST_SPLIT_MIN || len < 3 || *p != '[' || end[-1] != ']' ||
        dt == DT_BYTES || dt == DT_INVALID)
        return jfast_parse_array(p, end, dt, out, count);
    /* a few ranges per thread, so that one thread held up elsewhere costs little */
    size_t want = ways * 4 < SPLIT_MAX ? ways * 4 : SPLIT_MAX;
    split sp = {.dt = dt, .out = out};
    const char *lo = p + 1, *hi = end - 1, *at = lo;
    for (size_t k = 1; k < want && at < hi; k++) { /* cut at the first comma past each mark */
        const char *mark = lo + (size_t)(hi - lo) * k / want;
        if (mark < at) mark = at;
        const char *comma = memchr(mark, ',', (size_t)(hi - mark));
        if (!comma) break;
        sp.from[sp.nr] = at;
        sp.to[sp.nr++] = comma;
        at = comma + 1;
    }
    sp.from[sp.nr] = at;
    sp.to[sp.nr++] = hi;
    parfor_run(par, split_count, &sp, sp.nr);
    size_t total = 0;
    for (size_t k = 0; k < sp.nr; k++) {
        if (sp.bad[k]) return jfast_parse_array(p, end, dt, out, count); /* nested: one thread */
        sp.first[k] = total;
        total += sp.nel[k];
    }
    if (total != count) return -1;
    parfor_run(par, split_parse, &sp, sp.nr);
    for (size_t k = 0; k < sp.nr; k++)
        if (sp.bad[k]) return -1;
    return 0;
}

/* ---- formatting ---------------------------------------------------------------------- */

size_t jfast_fmt_u64(char *out, uint64_t v)
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

size_t jfast_fmt_i64(char *out, int64_t v)
{
    if (v >= 0) return jfast_fmt_u64(out, (uint64_t)v);
    out[0] = '-';
    return 1 + jfast_fmt_u64(out + 1, 0 - (uint64_t)v);
}

/* printf's "%.9g" digits of f (finite, > 0): d in [10^8, 10^9) and the decimal exponent of
 * its first digit, rounded from f's exact value, ties to even. f * 10^k comes from one
 * product with the table; its fraction decides the last digit unless it lies within 2^-28
 * of a half (the product is good to some 2^-31), and then snprintf does. */
static uint32_t f32_digits(float f, int *e10)
{
    uint32_t bits;
    memcpy(&bits, &f, 4);
    uint64_t m2 = bits & 0x7fffff;
    int e2 = (int)(bits >> 23 & 0xff);
    if (e2) {
        m2 |= 0x800000;
        e2 -= 150;
    } else { /* subnormal: normalized here, the value is what counts */
        int s = clz64(m2) - 40;
        m2 <<= s;
        e2 = -149 - s;
    }
    /* f = m2 * 2^e2, m2 in [2^23, 2^24), so floor(log10 f) is est = floor((e2 + 23) log10 2)
     * or est + 1: both products are taken and the one whose integer part has nine digits
     * kept (no branch: which one it is goes either way at random) */
    int x = e2 + 23;
    int est = x >= 0 ? (x * 78913) >> 18 : -((-x * 78913) >> 18) - 1;
    int k = 8 - est;
    if (k - 1 >= P10_MIN && k <= P10_MAX) {
        uint64_t a = m2 << 40;
        const p10 *t0 = &k_p10[k - P10_MIN], *t1 = t0 - 1;
        uint64_t hi0 = mul_hi(a, t0->m), hi1 = mul_hi(a, t1->m);
        int sh0 = -(e2 + 24 + t0->e), sh1 = -(e2 + 24 + t1->e); /* f * 10^k ~= hi / 2^sh */
        bool up = sh0 >= 30 && sh0 <= 63 && hi0 >> sh0 >= 1000000000;
        uint64_t hi = up ? hi1 : hi0;
        int sh = up ? sh1 : sh0;
        k -= up;
        if (sh >= 30 && sh <= 63) {
            uint64_t ip = hi >> sh, fr = hi & ((UINT64_C(1) << sh) - 1), half = UINT64_C(1) << (sh - 1);
            uint64_t tol = UINT64_C(1) << (sh - 28);
            /* a tie or nearly: printf decides; so it does if est was off (never, but cheap) */
            if (ip >= 100000000 && ip < 1000000000 && fr - (half - tol) > 2 * tol) {
                uint32_t d = (uint32_t)ip + (fr > half);
                *e10 = 8 - k;
                if (d == 1000000000) { /* 999999999.5 and up */
                    d = 100000000;
                    ++*e10;
                }
                return d;
            }
        }
    }
    char tmp[32]; /* "d.dddddddde-XX" */
    snprintf(tmp, sizeof tmp, "%.8e", (double)f);
    uint32_t d = (uint32_t)(tmp[0] - '0');
    for (int i = 2; i < 10; i++) d = d * 10 + (uint32_t)(tmp[i] - '0');
    *e10 = atoi(tmp + 11);
    return d;
}

/* The eight digits of v (< 10^8) as text, in memory order: the first digit in the lowest
 * byte. Whole-register arithmetic: byte stores read back as a word stall the CPU. */
static inline uint64_t digits8(uint32_t v)
{
    uint64_t x = v / 10000 | (uint64_t)(v % 10000) << 32;         /* 4 + 4 */
    uint64_t y = (x * 10486 >> 20) & UINT64_C(0x0000007F0000007F); /* /100 in each half */
    x = y | (x - y * 100) << 16;                                    /* 2 + 2 + 2 + 2 */
    y = (x * 103 >> 10) & UINT64_C(0x000F000F000F000F);             /* /10 in each quarter */
    x = y | (x - y * 10) << 8;                                      /* 1 x 8 */
    return x + UINT64_C(0x3030303030303030);
}

/* %.9g's layout of the nine digits plus our ".0" rule: what buf_put_double writes for float
 * precision, byte for byte. Writes whole words past the end (out has 32 bytes). */
size_t jfast_fmt_f32(char *out, float f)
{
    uint32_t bits;
    memcpy(&bits, &f, 4);
    /* the sign without a branch (mixed signs would mispredict half the time) */
    out[0] = '-';
    size_t n = bits >> 31;
    if ((bits & 0x7fffffffu) - 1 >= 0x7f7fffffu) { /* zero, infinite or NaN */
        if (isnan(f)) return (size_t)(memcpy(out, "NaN", 3), 3);
        if (isinf(f)) return n + (size_t)(memcpy(out + n, "Infinity", 8), 8);
        memcpy(out + n, "0.0", 3);
        return n + 3;
    }
    f = fabsf(f);
    int e10;
    uint32_t d = f32_digits(f, &e10);
    char first = (char)('0' + d / 100000000);
    uint32_t rest = d % 100000000;
    uint64_t w = digits8(rest); /* digits 2..9 */
    /* significant digits (%g drops trailing zeros): the zero digits at w's top end */
    uint64_t z = w - UINT64_C(0x3030303030303030);
    int nd = z ? 9 - clz64(z) / 8 : 1;
    if (e10 < -4 || e10 >= 9) {
        out[n] = first;
        out[n + 1] = '.';
        memcpy(out + n + 2, &w, 8);
        n += nd > 1 ? (size_t)nd + 1 : 1;
        out[n++] = 'e';
        int e = e10;
        out[n++] = e < 0 ? '-' : '+';
        if (e < 0) e = -e;
        out[n] = (char)('0' + e / 10);
        out[n + 1] = (char)('0' + e % 10);
        return n + 2;
    }
    if (e10 < 0) { /* 0.000ddd */
        memcpy(out + n, "0.0000", 6);
        n += (size_t)(1 - e10);
        out[n] = first;
        memcpy(out + n + 1, &w, 8);
        return n + (size_t)nd;
    }
    /* e10 + 1 integer digits, then '.', then the rest or a 0 */
    out[n] = first;
    memcpy(out + n + 1, &w, 8);
    if (e10 == 8) {
        memcpy(out + n + 9, ".0", 2);
        return n + 11;
    }
    size_t id = (size_t)e10 + 1;
    n += id;
    out[n++] = '.';
    uint64_t frac = w >> (8 * (id - 1)); /* the digits after the point, from the 'id'th on */
    memcpy(out + n, &frac, 8);
    if (nd > (int)id) return n + (size_t)nd - id;
    out[n] = '0';
    return n + 1;
}
