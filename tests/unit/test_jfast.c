/* The JSON fast path against the slow one: formatting as printf does, parsing as strtod. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
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

static void test_f32_format_matches_printf(void **state)
{
    (void)state;
    size_t same = 0, total = 0;
    float specials[] = {0.0f, -0.0f, 1.0f, -1.0f, 0.5f, 1e-3f, 1e8f, 1e9f, 123456789.0f,
                        3.4028235e38f, 1.17549435e-38f, 1.4e-45f, 0.1f, 1e-5f, 9.99999975e-05f, 65504.0f};
    for (size_t k = 0; k < 1000000 + sizeof specials / sizeof specials[0]; k++) {
        float f;
        if (k < sizeof specials / sizeof specials[0]) f = specials[k];
        else {
            uint32_t bits = next();
            memcpy(&f, &bits, 4);
            if (!isfinite(f)) continue;
        }
        char fast[40], slow[64];
        size_t n = jfast_fmt_f32(fast, f);
        fast[n] = '\0';
        slow_fmt(slow, f);
        total++;
        if (strcmp(fast, slow) == 0) {
            same++;
            continue;
        }
        /* a digit off at a near-tie is allowed only if it reads back as the same float */
        float back = strtof(fast, NULL);
        if (memcmp(&back, &f, 4) != 0) fail_msg("%.9g: fast '%s' reads back as %.9g", (double)f, fast, (double)back);
    }
    assert_true(same * 1000 >= total * 999); /* near-ties are rare */
    char out[40];
    assert_int_equal(jfast_fmt_f32(out, NAN), 3);
    assert_memory_equal(out, "NaN", 3);
    assert_int_equal(jfast_fmt_f32(out, -INFINITY), 9);
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_f32_format_matches_printf),
        cmocka_unit_test(test_int_format),
        cmocka_unit_test(test_find_data),
        cmocka_unit_test(test_parse_array),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
