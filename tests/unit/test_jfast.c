/* The JSON fast path against the slow one: formatting as printf does, parsing as strtod. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "infer.h"
#include "jfast.h"

static uint32_t rng = 12345;
static uint32_t next(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 17;
    rng ^= rng << 5;
    return rng;
}

/* What the slow path writes (buf_put_double with float precision). */
static void slow_fmt(char *out, float f)
{
    buf b;
    buf_init(&b, 64);
    buf_put_double(&b, f, true);
    memcpy(out, b.data, b.len);
    out[b.len] = '\0';
    buf_free(&b);
}

static void check_fmt(float f)
{
    char fast[40], slow[64];
    size_t n = jfast_fmt_f32(fast, f);
    fast[n] = '\0';
    slow_fmt(slow, f);
    if (strcmp(fast, slow) != 0) fail_msg("%a: fast '%s', printf '%s'", (double)f, fast, slow);
}

/* Byte for byte what buf_put_double writes (printf's %.9g, correctly rounded from the
 * float's exact value, ties to even), across the whole range: random bit patterns (normals
 * and subnormals alike), every power of two, the floats around each power of ten, and runs
 * of floats whose tenth significant digit is an exact 5 (the ties). */
static void test_f32_format_matches_printf(void **state)
{
    (void)state;
    float specials[] = {0.0f, -0.0f, 1.0f, -1.0f, 0.5f, 1e-3f, 1e8f, 1e9f, 123456789.0f,
                        3.4028235e38f, 1.17549435e-38f, 1.4e-45f, 0.1f, 1e-5f, 9.99999975e-05f, 65504.0f,
                        2097151.875f, 2097150.625f, 999999.938f, 9.99999944e-05f, 1e-4f, 99999.9922f,
                        999999999.0f, 99999999.0f, 9.99999949e+08f};
    for (size_t k = 0; k < sizeof specials / sizeof specials[0]; k++) check_fmt(specials[k]);
    /* near-ties the formatter before the exact scaling rounded the wrong way (one digit off,
     * found by tests/exhaustive/jfast_all_f32.c) */
    uint32_t near_ties[] = {0x71122a80u, 0x738f8e50u, 0x75bb99fau};
    for (size_t k = 0; k < sizeof near_ties / sizeof near_ties[0]; k++) {
        float f;
        memcpy(&f, &near_ties[k], 4);
        check_fmt(f);
        check_fmt(-f);
    }
    for (int k = 0; k < 1000000; k++) {
        uint32_t bits = next();
        if (k % 4 == 0) bits &= 0x807fffffu; /* a quarter subnormal */
        float f;
        memcpy(&f, &bits, 4);
        if (isfinite(f)) check_fmt(f);
    }
    for (int e = -149; e <= 127; e++) check_fmt(ldexpf(1.0f, e));
    for (int e = -45; e <= 38; e++) {
        float p = (float)pow(10.0, e);
        for (int d = -3; d <= 3; d++) {
            float f = p;
            for (int s = 0; s < (d < 0 ? -d : d); s++) f = nextafterf(f, d < 0 ? 0.0f : INFINITY);
            if (isfinite(f) && f != 0) check_fmt(f);
        }
    }
    /* [2^20, 2^21) in steps of 1/8: seven integer digits, three after the point: odd eighths
     * end in 5 at the tenth digit */
    for (int k = 0; k < 200000; k++) check_fmt(1048576.0f + (float)k * 5.125f);
    for (uint32_t bits = 0x49800000u; bits < 0x49800000u + 100000; bits++) { /* 2^20 on */
        float f;
        memcpy(&f, &bits, 4);
        check_fmt(f);
    }
    char out[40];
    assert_int_equal(jfast_fmt_f32(out, NAN), 3);
    assert_memory_equal(out, "NaN", 3);
    assert_int_equal(jfast_fmt_f32(out, -INFINITY), 9);
    assert_memory_equal(out, "-Infinity", 9);
    assert_int_equal(jfast_fmt_f32(out, INFINITY), 8);
}

static void test_int_format(void **state)
{
    (void)state;
    char out[32];
    int64_t vals[] = {0, 1, -1, 42, INT64_MAX, INT64_MIN, -1000000};
    for (size_t i = 0; i < sizeof vals / sizeof vals[0]; i++) {
        char want[32];
        snprintf(want, sizeof want, "%lld", (long long)vals[i]);
        size_t n = jfast_fmt_i64(out, vals[i]);
        out[n] = '\0';
        assert_string_equal(out, want);
    }
    size_t n = jfast_fmt_u64(out, UINT64_MAX);
    out[n] = '\0';
    assert_string_equal(out, "18446744073709551615");
}

static void test_find_data(void **state)
{
    (void)state;
    const char *js = "{\"id\":\"x\\\"y\",\"inputs\":[{\"name\":\"a\",\"data\":[[1,2],[3,4]],\"shape\":[2,2]},"
                     "{\"name\":\"b\",\"parameters\":{\"data\":[9]}},{\"data\":[5] , \"name\":\"c\"}],"
                     "\"outputs\":[{\"name\":\"o\"}]}";
    jfast_span s[8];
    int n = jfast_find_data(js, strlen(js), s, 8);
    assert_int_equal(n, 2);
    assert_int_equal(s[0].input, 0);
    assert_memory_equal(js + s[0].start, "[[1,2],[3,4]]", s[0].end - s[0].start);
    assert_int_equal(s[1].input, 2);
    assert_memory_equal(js + s[1].start, "[5]", 3);
    assert_int_equal(jfast_find_data("{\"in\\u0070uts\":[]}", 18, s, 8), -1); /* escaped key */
    /* nested past the 16-byte blocks the scan takes, brackets at every offset in a block */
    char big[2048];
    int o = snprintf(big, sizeof big, "{\"inputs\":[{\"data\":");
    size_t start = (size_t)o;
    for (int k = 0; k < 40; k++) o += snprintf(big + o, sizeof big - (size_t)o, "%s[%.*s1", k ? "," : "", k % 17, "00000000000000000");
    for (int k = 0; k < 40; k++) big[o++] = ']';
    size_t stop = (size_t)o;
    o += snprintf(big + o, sizeof big - (size_t)o, ",\"name\":\"n]\"}]}");
    assert_int_equal(jfast_find_data(big, (size_t)o, s, 8), 1);
    assert_int_equal(s[0].start, start);
    assert_int_equal(s[0].end, stop);
    /* strings or objects inside: not the fast path's (even past a ']' of an inner array) */
    const char *odd[] = {"{\"inputs\":[{\"data\":[[1],\"a]\"]}]}", "{\"inputs\":[{\"data\":[1,2,3,4,5,6,7,8,9,10,{}]}]}",
                         "{\"inputs\":[{\"data\":[[1,2,3,4,5,6,7,8,9],[1,2,3,4,5,6,7,8]"};
    for (size_t k = 0; k < sizeof odd / sizeof odd[0]; k++)
        assert_int_equal(jfast_find_data(odd[k], strlen(odd[k]), s, 8), -1);
    assert_int_equal(jfast_find_data("[1]", 3, s, 8), -1);
    assert_int_equal(jfast_find_data("{\"inputs\":[{\"data\":[1", 21, s, 8), -1);
}

static void test_parse_array(void **state)
{
    (void)state;
    float f[4];
    const char *a = "[[1.5, -2e-3],[3, 0.1]]";
    assert_int_equal(jfast_parse_array(a, a + strlen(a), DT_FP32, (uint8_t *)f, 4), 0);
    assert_true(f[0] == 1.5f && f[1] == -2e-3f && f[2] == 3.0f && f[3] == 0.1f);
    double d;
    const char *b = "[1.7976931348623157e308]";
    assert_int_equal(jfast_parse_array(b, b + strlen(b), DT_FP64, (uint8_t *)&d, 1), 0);
    assert_true(d == 1.7976931348623157e308);
    int8_t i8[3];
    const char *c = "[-128, 127, 0]";
    assert_int_equal(jfast_parse_array(c, c + strlen(c), DT_INT8, (uint8_t *)i8, 3), 0);
    assert_int_equal(i8[0], -128);
    const char *bad[] = {"[128]", "[1.5]", "[1,]", "[,1]", "[01]", "[1 2]", "[\"a\"]", "[1e400]", "[[1]", "[1]]", "[true]"};
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        uint8_t out[16];
        ts_dtype dt = k == 7 ? DT_FP32 : DT_INT8;
        if (jfast_parse_array(bad[k], bad[k] + strlen(bad[k]), dt, out, 1) != -1) fail_msg("accepted %s", bad[k]);
    }
    uint8_t bools[2];
    const char *t = "[true,false]";
    assert_int_equal(jfast_parse_array(t, t + strlen(t), DT_BOOL, bools, 2), 0);
    assert_int_equal(bools[0], 1);
    /* 17-digit decimals (Python's repr of a float32 widened to double) land on the float
     * that (float)strtod picks */
    for (int k = 0; k < 200000; k++) {
        uint32_t bits = next();
        float x, y;
        memcpy(&x, &bits, 4);
        if (!isfinite(x)) continue;
        double wide = (double)x + (double)(int32_t)next() * 1e-25 * fabs((double)x);
        char txt[64];
        int n = snprintf(txt, sizeof txt, "[%.17g]", wide);
        assert_int_equal(jfast_parse_array(txt, txt + n, DT_FP32, (uint8_t *)&y, 1), 0);
        float want = (float)strtod(txt + 1, NULL);
        if (memcmp(&want, &y, 4) != 0) fail_msg("%s -> %.9g, want %.9g", txt, (double)y, (double)want);
    }
    /* every float written by the formatter parses back exactly */
    for (int k = 0; k < 100000; k++) {
        uint32_t bits = next();
        float x, y;
        memcpy(&x, &bits, 4);
        if (!isfinite(x)) continue;
        char txt[48] = "[";
        size_t n = 1 + jfast_fmt_f32(txt + 1, x);
        txt[n++] = ']';
        assert_int_equal(jfast_parse_array(txt, txt + n, DT_FP32, (uint8_t *)&y, 1), 0);
        if (memcmp(&x, &y, 4) != 0) fail_msg("%.*s -> %.9g, want %.9g", (int)n, txt, (double)y, (double)x);
    }
}

/* One number as FP32: what (float)strtod reads (the jansson path's value). A refusal is
 * allowed only where the slow path would refuse too (past FLT_MAX) or for tokens too long
 * for the strtod fallback's buffer. */
static void check_parse_f32(const char *num)
{
    char txt[160];
    int n = snprintf(txt, sizeof txt, "[%s]", num);
    float got, want = (float)strtod(num, NULL);
    int rc = jfast_parse_array(txt, txt + n, DT_FP32, (uint8_t *)&got, 1);
    if (rc != 0) {
        if (isinf(want) || strlen(num) >= 63) return;
        fail_msg("%s refused, want %a", num, (double)want);
    }
    if (memcmp(&got, &want, 4) != 0) fail_msg("%s -> %a, want %a", num, (double)got, (double)want);
}

/* Decimals at and next to the midpoints between floats (where the float picked depends on
 * digits far down), long and short mantissas, the ends of the range. */
static void test_parse_f32_tricky(void **state)
{
    (void)state;
    const char *fixed[] = {
        "0", "-0", "0.0", "-0.0", "0e999", "-0E-999", "1", "16777216", "16777217", "16777218", "16777219",
        "33554435", "8388608.5", "8388609.5", "0.1", "0.2", "0.3", "1e-45", "1.4e-45", "7e-46", "7.1e-46",
        "1.1754942e-38", "1.17549435e-38", "1.1754944e-38", "3.4028235e38", "3.40282347e+38",
        "3.4028236e38", "3.40282357e38", "340282356779733661637539395458142568447",
        "340282356779733661637539395458142568448", "1e38", "1e39", "1e-38", "1e-39", "1e-50", "1e-64",
        "1e-65", "1e64", "1e65", "123456789012345678901234567890", "0.000000000000000000000000000001",
        "1.00000005960464477539062500000000000000001", "1.000000059604644775390625",
        "1.00000005960464477539062499999999999999999", "1.0000000596046447753906249999999999999999999999999",
        "0.009999999776482582", "0.30000001192092896", "9007199254740993", "9007199254740992.5",
        "18446744073709551615", "18446744073709551616", "99999999999999999999", "1e0000000000000000001",
        "4.7019774032891500318749461488889827112746622270883500860350068251e-38",
        "2.350988701644575015937473074444491355637331113544175043017503412556834518909454345703125e-38",
        "1.00000011920928955078125", "1.000000119209289550781249", "1.000000119209289550781251",
        "5e-324", "2.2250738585072014e-308", "1.7976931348623157e308", "-123.456e-7", "1E+2", "12e+00"};
    for (size_t k = 0; k < sizeof fixed / sizeof fixed[0]; k++) check_parse_f32(fixed[k]);
    char num[128];
    for (int k = 0; k < 200000; k++) {
        uint32_t bits = next() & 0x7fffffffu;
        float f;
        memcpy(&f, &bits, 4);
        if (!isfinite(f) || !isfinite(nextafterf(f, INFINITY))) continue;
        double mid = ((double)f + (double)nextafterf(f, INFINITY)) / 2; /* exact */
        /* 40 significant digits, then the last one nudged down, kept, nudged up */
        snprintf(num, sizeof num, "%.39e", mid);
        char *last = strchr(num, 'e') - 1;
        check_parse_f32(num);
        if (*last > '0') {
            (*last)--;
            check_parse_f32(num);
            (*last)++;
        }
        if (*last < '9') {
            (*last)++;
            check_parse_f32(num);
        }
        /* the exact midpoint, and a float's 17 and 9 digits */
        snprintf(num, sizeof num, "%.60g", mid);
        check_parse_f32(num);
        snprintf(num, sizeof num, "%.17g", (double)f);
        check_parse_f32(num);
        snprintf(num, sizeof num, "%.9g", (double)f);
        check_parse_f32(num);
        /* integers of 1..25 digits: the eight-at-a-time digits against one at a time */
        int nd = 1 + k % 25;
        for (int i = 0; i < nd; i++) num[i] = (char)('0' + (i == 0 ? 1 + next() % 9 : next() % 10));
        num[nd] = '\0';
        check_parse_f32(num);
    }
}

/* FP64 and the integer types keep strtod's and strtoll's values, whatever the digit count. */
static void test_parse_other_types(void **state)
{
    (void)state;
    char num[64], txt[80];
    for (int k = 0; k < 100000; k++) {
        int nd = 1 + k % 24;
        int o = 0;
        if (k & 1) num[o++] = '-';
        for (int i = 0; i < nd; i++) num[o++] = (char)('0' + (i == 0 ? 1 + next() % 9 : next() % 10));
        num[o] = '\0';
        int n = snprintf(txt, sizeof txt, "[%s]", num);
        int64_t iv;
        errno = 0;
        long long want = strtoll(num, NULL, 10);
        int rc = jfast_parse_array(txt, txt + n, DT_INT64, (uint8_t *)&iv, 1);
        if (errno == ERANGE) assert_int_equal(rc, -1);
        else if (rc != 0 || iv != want) fail_msg("%s as INT64: rc %d, %lld", num, rc, (long long)iv);
        double d, wd = strtod(num, NULL);
        assert_int_equal(jfast_parse_array(txt, txt + n, DT_FP64, (uint8_t *)&d, 1), 0);
        if (memcmp(&d, &wd, 8) != 0) fail_msg("%s as FP64: %a, want %a", num, d, wd);
        /* a fraction and an exponent too */
        uint64_t bits = (uint64_t)next() << 32 | next();
        memcpy(&wd, &bits, 8);
        if (!isfinite(wd)) continue;
        n = snprintf(txt, sizeof txt, "[%.*g]", 1 + k % 17, wd);
        wd = strtod(txt + 1, NULL);
        assert_int_equal(jfast_parse_array(txt, txt + n, DT_FP64, (uint8_t *)&d, 1), 0);
        if (memcmp(&d, &wd, 8) != 0) fail_msg("%s as FP64: %a, want %a", txt, d, wd);
    }
}

/* ---- one big array split across threads ------------------------------------------------- */

/* A parfor that runs the ranges last first (a range that leaned on the one before it would
 * read what is not there yet) and counts what it was asked. */
static size_t g_runs, g_ranges;
static void run_backwards(void *ctx, parfor_task task, void *arg, size_t n)
{
    (void)ctx;
    g_runs++;
    g_ranges += n;
    for (size_t i = n; i-- > 0;) task(arg, i);
}
static const parfor k_backwards = {run_backwards, NULL, 3};

/* count numbers as JSON: random FP32 values as %.17g (17-20 bytes each, like Python's
 * json.dumps of float32 values) and short integers, with assorted spaces. */
static char *big_array(size_t count, size_t *len)
{
    char *t = malloc(count * 32 + 8);
    size_t n = 0;
    t[n++] = '[';
    for (size_t i = 0; i < count; i++) {
        if (i) n += (size_t)sprintf(t + n, next() % 5 ? "," : " ,\n ");
        uint32_t bits = next() & 0xbf7fffffu; /* finite */
        float f;
        memcpy(&f, &bits, 4);
        n += (size_t)(i % 7 == 3 ? sprintf(t + n, "%d", (int)(next() % 2001) - 1000) : sprintf(t + n, "%.17g", (double)f));
    }
    t[n++] = ']';
    *len = n;
    return t;
}

/* The split parse gives the one-thread parse's bytes, every one, for counts that do and do
 * not divide evenly; and refuses what it refuses. */
static void test_split_parse_matches_one_thread(void **state)
{
    (void)state;
    size_t counts[] = {JFAST_SPLIT_MIN, JFAST_SPLIT_MIN + 1, 150528, 200003};
    for (size_t c = 0; c < sizeof counts / sizeof *counts; c++) {
        size_t count = counts[c], len;
        char *t = big_array(count, &len);
        float *want = malloc(count * 4), *got = malloc(count * 4);
        assert_int_equal(jfast_parse_array(t, t + len, DT_FP32, (uint8_t *)want, count), 0);
        memset(got, 0xff, count * 4);
        g_runs = g_ranges = 0;
        assert_int_equal(jfast_parse_array_par(t, t + len, DT_FP32, (uint8_t *)got, count, &k_backwards), 0);
        assert_true(g_runs == 2 && g_ranges == 24); /* it did split: counted, then parsed */
        for (size_t i = 0; i < count; i++)
            if (memcmp(&got[i], &want[i], 4) != 0) fail_msg("count %zu: element %zu differs", count, i);
        /* one element short or over, as the one-thread parse says */
        assert_int_equal(jfast_parse_array_par(t, t + len, DT_FP32, (uint8_t *)got, count + 1, &k_backwards), -1);
        assert_int_equal(jfast_parse_array_par(t, t + len, DT_FP32, (uint8_t *)got, count - 1, &k_backwards), -1);
        free(t);
        free(want);
        free(got);
    }
}

/* A bad token anywhere (here in the second half, and right at a cut) fails the whole parse,
 * so the caller's slow path words the error; empty elements too. Nested arrays are parsed
 * on one thread, with the same answer. */
static void test_split_parse_refuses(void **state)
{
    (void)state;
    size_t count = 100000, len;
    char *t = big_array(count, &len);
    uint8_t *out = malloc(count * 4);
    const char *bad[] = {"1.5x", "--1", "", "1 2", "true"};
    /* ways 3: 12 ranges, cut at the first comma past each twelfth; the element just before
     * and just after the ninth cut, one in between, and the last */
    char *cut = strchr(t + 1 + (len - 2) * 9 / 12, ','), *before = cut - 1;
    while (*before != ',') before--;
    size_t where_at[] = {(size_t)(before - t), (size_t)(cut - t), (size_t)(strchr(t + len * 5 / 6, ',') - t),
                         (size_t)(strrchr(t, ',') - t)};
    for (size_t b = 0; b < sizeof bad / sizeof *bad; b++) {
        for (size_t w = 0; w < sizeof where_at / sizeof *where_at; w++) {
            char *c = t + where_at[w]; /* replace the element after this comma */
            char *e = c + 1;
            while (*e != ',' && *e != ']') e++;
            size_t tail = (size_t)(t + len - e);
            char *u = malloc(len + 16);
            size_t k = (size_t)(c + 1 - t);
            memcpy(u, t, k);
            k += (size_t)sprintf(u + k, "%s", bad[b]);
            memcpy(u + k, e, tail);
            k += tail;
            size_t n = count + (b == 3);
            if (jfast_parse_array_par(u, u + k, DT_FP32, out, n, &k_backwards) != -1) fail_msg("\"%s\" after byte %zu taken", bad[b], where_at[w]);
            free(u);
        }
    }
    /* nested: [[...],[...]] */
    char *nest = malloc(len + 8);
    size_t half = (size_t)(strchr(t + len / 2, ',') - t);
    size_t k = 0;
    nest[k++] = '[';
    memcpy(nest + k, t, half);
    k += half;
    memcpy(nest + k, "],[", 3);
    k += 3;
    memcpy(nest + k, t + half + 1, len - half - 1);
    k += len - half - 1;
    nest[k++] = ']';
    float *want = malloc(count * 4), *got = malloc(count * 4);
    assert_int_equal(jfast_parse_array(t, t + len, DT_FP32, (uint8_t *)want, count), 0);
    assert_int_equal(jfast_parse_array_par(nest, nest + k, DT_FP32, (uint8_t *)got, count, &k_backwards), 0);
    assert_memory_equal(got, want, count * 4);
    free(nest);
    free(want);
    free(got);
    free(out);
    free(t);
}

/* A big output formatted in ranges into pieces: the pieces in order are the one-buffer
 * reply, byte for byte, JSON length included. */
static void test_split_encode_matches_one_buffer(void **state)
{
    (void)state;
    size_t counts[] = {INFER_SPLIT_MIN - 1, INFER_SPLIT_MIN, 150529};
    for (size_t c = 0; c < sizeof counts / sizeof *counts; c++) {
        size_t count = counts[c];
        float *y = malloc(count * 4);
        for (size_t i = 0; i < count; i++) {
            uint32_t bits = next() & 0xbf7fffffu;
            memcpy(&y[i], &bits, 4);
        }
        int32_t small[3] = {1, -2, 3};
        ts_tensor t[3] = {{.name = "y", .dt = DT_FP32, .ndim = 2, .shape = {1, (int64_t)count}, .count = count,
                           .data = (uint8_t *)y, .nbytes = count * 4},
                          {.name = "s", .dt = DT_INT32, .ndim = 1, .shape = {3}, .count = 3, .data = (uint8_t *)small,
                           .nbytes = 12},
                          {.name = "z", .dt = DT_FP32, .ndim = 1, .shape = {(int64_t)count}, .count = count,
                           .data = (uint8_t *)y, .nbytes = count * 4}};
        bool bin[3] = {false, true, false};
        infer_result res = {.n = 3, .binary = bin, .tensors = t};
        infer_request req = {0};
        buf one, first;
        buf_init(&one, SIZE_MAX);
        buf_init(&first, SIZE_MAX);
        size_t jl1, jl2, n_more = 0;
        bool b1, b2;
        buf *more = NULL;
        ts_err err = {0};
        assert_int_equal(infer_encode(&req, &res, "m", "1", &one, &jl1, &b1, &err), 0);
        g_runs = g_ranges = 0;
        assert_int_equal(infer_encode_par(&req, &res, "m", "1", &k_backwards, &first, &more, &n_more, &jl2, &b2, &err), 0);
        bool split = count >= INFER_SPLIT_MIN;
        assert_int_equal(n_more, split ? 2 * (2 * 3 + 1) : 0); /* 2 ranges a way, 1 piece after */
        assert_int_equal(g_runs, split ? 2 : 0);
        assert_int_equal(jl1, jl2);
        assert_true(b1 && b2);
        buf all;
        buf_init(&all, SIZE_MAX);
        buf_put(&all, first.data, first.len);
        for (size_t i = 0; i < n_more; i++) buf_put(&all, more[i].data, more[i].len);
        assert_int_equal(all.len, one.len);
        assert_memory_equal(all.data, one.data, one.len);
        infer_pieces_free(more, n_more);
        buf_free(&all);
        buf_free(&one);
        buf_free(&first);
        free(y);
    }
}

/* An output that might not fit the response limit is never split: ranges formatted side by
 * side would each grow until the end's check, several times the limit in memory. */
static void test_encode_split_never_risks_the_limit(void **state)
{
    (void)state;
    size_t count = INFER_SPLIT_MIN * 2;
    float *y = calloc(count, 4);
    for (size_t i = 0; i < count; i++) y[i] = -1.17549435e-38f; /* 15 characters each */
    ts_tensor t = {.name = "y", .dt = DT_FP32, .ndim = 1, .shape = {(int64_t)count}, .count = count,
                   .data = (uint8_t *)y, .nbytes = count * 4};
    bool bin = false;
    infer_result res = {.n = 1, .binary = &bin, .tensors = &t};
    infer_request req = {0};
    size_t limits[] = {count * 8, count * INFER_ELEM_TEXT_MAX - 1, count * INFER_ELEM_TEXT_MAX + 4096};
    for (size_t l = 0; l < sizeof limits / sizeof *limits; l++) {
        buf out;
        buf_init(&out, limits[l]);
        buf *more = NULL;
        size_t jl = 0, n_more = 0;
        bool b = false;
        ts_err err = {0};
        g_runs = g_ranges = 0;
        int rc = infer_encode_par(&req, &res, "m", "1", &k_backwards, &out, &more, &n_more, &jl, &b, &err);
        bool may_split = l == 2;
        assert_int_equal(g_runs, may_split ? 1 : 0);
        assert_int_equal(rc, l == 0 ? -1 : 0); /* 8 bytes a number: over the limit */
        if (rc) assert_non_null(strstr(err.msg, "response limit"));
        assert_true(out.cap <= limits[l]);
        infer_pieces_free(more, n_more);
        buf_free(&out);
    }
    free(y);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_f32_format_matches_printf),
        cmocka_unit_test(test_int_format),
        cmocka_unit_test(test_find_data),
        cmocka_unit_test(test_encode_split_never_risks_the_limit),
        cmocka_unit_test(test_parse_array),
        cmocka_unit_test(test_parse_f32_tricky),
        cmocka_unit_test(test_parse_other_types),
        cmocka_unit_test(test_split_parse_matches_one_thread),
        cmocka_unit_test(test_split_parse_refuses),
        cmocka_unit_test(test_split_encode_matches_one_buffer),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
