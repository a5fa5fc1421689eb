/* FP32 <-> FP16 for the FP16 KV cache (src/llm/llm_half.c): every half round-trips; selected
 * FP32 values (ties to even, overflow, subnormals, inf, NaN) land where IEEE 754 says; the
 * F16C rows and the portable rows agree bit for bit. Checked against kserve's independent
 * conversion (src/kserve/dtype.c) on the same inputs as a second opinion. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "dtype.h"
#include "llm_half.h"

static uint32_t bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static void test_every_half_round_trips(void **state)
{
    (void)state;
    for (uint32_t h = 0; h < 0x10000; h++) {
        float f = llm_half_to_f32((uint16_t)h);
        uint16_t back = llm_half_from_f32(f);
        if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff)) { /* NaN: stays a NaN of the same sign, made quiet */
            assert_true(isnan(f));
            assert_int_equal(back, h | 0x200);
            continue;
        }
        if (back != h) fail_msg("half 0x%04x -> %a -> 0x%04x", h, (double)f, back);
        /* the value is exact: kserve's decoder says the same */
        if (bits(f) != bits(dtype_f16_to_f32((uint16_t)h))) fail_msg("half 0x%04x decodes to %a", h, (double)f);
    }
}

static void test_selected_f32(void **state)
{
    (void)state;
    static const struct {
        float f;
        uint16_t h;
    } k[] = {
        {1.0f, 0x3c00},
        {-2.0f, 0xc000},
        {0.0f, 0x0000},
        {-0.0f, 0x8000},
        {65504.0f, 0x7bff},                 /* the largest half */
        {65519.99f, 0x7bff},                /* just under the tie to inf */
        {65520.0f, 0x7c00},                 /* the tie: even is inf */
        {1e10f, 0x7c00},
        {-1e10f, 0xfc00},
        {INFINITY, 0x7c00},
        {-INFINITY, 0xfc00},
        {1.0f + 0x1p-11f, 0x3c00},          /* tie between 1 and 1+2^-10: even (down) */
        {1.0f + 3 * 0x1p-11f, 0x3c02},      /* tie between 1+2^-10 and 1+2^-9: even (up) */
        {1.0f + 0x1p-11f + 0x1p-20f, 0x3c01}, /* just above the tie: up */
        {2047.0f + 0.5f, 0x6800},           /* tie, odd 2047 below: up to 2048 */
        {2048.0f + 1.0f, 0x6800},           /* 2049: tie between 2048 and 2050: even 2048 */
        {0x1p-14f, 0x0400},                 /* the smallest normal */
        {0x1p-14f - 0x1p-24f, 0x03ff},      /* the largest subnormal */
        {0x1p-24f, 0x0001},                 /* the smallest subnormal */
        {0x1p-25f, 0x0000},                 /* half of it: a tie, even is 0 */
        {0x1p-25f + 0x1p-40f, 0x0001},      /* above the tie: up */
        {-0x1p-25f, 0x8000},
        {3 * 0x1p-25f, 0x0002},             /* 1.5 subnormal units: tie, even is 2 */
        {5 * 0x1p-25f, 0x0002},             /* 2.5 units: tie, even is 2 */
        {0x1p-30f, 0x0000},
        {0x1p-149f, 0x0000},                /* an FP32 subnormal */
        {0.1f, 0x2e66},
        {-3.14159265f, 0xc248},
    };
    for (size_t i = 0; i < sizeof k / sizeof *k; i++) {
        uint16_t h = llm_half_from_f32(k[i].f), d = dtype_f32_to_f16(k[i].f), v = 0;
        llm_half_from_f32_row(&v, &k[i].f, 1);
        if (h != k[i].h || d != k[i].h || v != k[i].h)
            fail_msg("%a: 0x%04x (kserve 0x%04x, row 0x%04x), want 0x%04x", (double)k[i].f, h, d, v, k[i].h);
    }
    uint16_t n = llm_half_from_f32(NAN), sn = llm_half_from_f32(from_bits(0xff800001u)); /* -sNaN */
    assert_true((n & 0x7c00) == 0x7c00 && (n & 0x200));
    assert_int_equal(sn & 0x8000, 0x8000);
    assert_true((sn & 0x7c00) == 0x7c00 && (sn & 0x3ff));
}

/* A small xorshift: the same inputs on every run. */
static uint32_t next(uint32_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 17;
    *s ^= *s << 5;
    return *s;
}

static void test_rows_agree_with_scalar(void **state)
{
    (void)state;
    enum { N = 4099 }; /* not a multiple of 8: the rows' tails too */
    static float f[N];
    static uint16_t h[N], h_c[N];
    uint32_t s = 0x9e3779b9u;
    printf("rows use %s\n", llm_half_simd() ? "F16C" : "portable C");
    for (int round = 0; round < 256; round++) {
        for (size_t i = 0; i < N; i++) {
            uint32_t r = next(&s);
            /* half the values in the half's range, the rest any bit pattern (NaNs, huge, tiny) */
            f[i] = i % 2 ? from_bits(r) : ldexpf((float)(int32_t)r / 2147483648.0f, (int)(r % 40) - 26);
        }
        llm_half_from_f32_row(h, f, N);
        llm_half_from_f32_row_c(h_c, f, N);
        for (size_t i = 0; i < N; i++) {
            if (h[i] != h_c[i]) fail_msg("%a (0x%08x): row 0x%04x, portable 0x%04x", (double)f[i], bits(f[i]), h[i], h_c[i]);
            if (!isnan(f[i]) && h[i] != dtype_f32_to_f16(f[i]))
                fail_msg("%a: 0x%04x, kserve 0x%04x", (double)f[i], h[i], dtype_f32_to_f16(f[i]));
        }
    }
    uint16_t all[0x10000];
    static float all_f[0x10000], all_c[0x10000];
    for (uint32_t i = 0; i < 0x10000; i++) all[i] = (uint16_t)i;
    llm_half_to_f32_row(all_f, all, 0x10000);
    llm_half_to_f32_row_c(all_c, all, 0x10000);
    for (uint32_t i = 0; i < 0x10000; i++)
        if (bits(all_f[i]) != bits(all_c[i]) && !(isnan(all_f[i]) && isnan(all_c[i])))
            fail_msg("half 0x%04x: row %a, portable %a", i, (double)all_f[i], (double)all_c[i]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_half_round_trips),
        cmocka_unit_test(test_selected_f32),
        cmocka_unit_test(test_rows_agree_with_scalar),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
