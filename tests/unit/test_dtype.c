/* Half and bfloat16 conversions, and the datatype tables. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <string.h>

#include "dtype.h"
#include "ortenv.h"

static void test_f16_known_values(void **state)
{
    (void)state;
    assert_int_equal(dtype_f32_to_f16(1.0f), 0x3c00);
    assert_int_equal(dtype_f32_to_f16(-2.0f), 0xc000);
    assert_int_equal(dtype_f32_to_f16(65504.0f), 0x7bff);
    assert_int_equal(dtype_f32_to_f16(65520.0f), 0x7c00);   /* rounds up to inf */
    assert_int_equal(dtype_f32_to_f16(5.9604645e-8f), 0x0001); /* smallest subnormal */
    assert_int_equal(dtype_f32_to_f16(0.0f), 0x0000);
    assert_int_equal(dtype_f32_to_f16(-0.0f), 0x8000);
    assert_int_equal(dtype_f32_to_f16(INFINITY), 0x7c00);
    assert_true((dtype_f32_to_f16(NAN) & 0x7c00) == 0x7c00 && (dtype_f32_to_f16(NAN) & 0x3ff));
    /* ties to even: 1 + 2^-11 is halfway between 1 and 1 + 2^-10 */
    assert_int_equal(dtype_f32_to_f16(1.0f + 0x1p-11f), 0x3c00);
    assert_int_equal(dtype_f32_to_f16(1.0f + 3 * 0x1p-11f), 0x3c02);
}

static void test_f16_round_trip_all(void **state)
{
    (void)state;
    for (uint32_t h = 0; h < 0x10000; h++) {
        float f = dtype_f16_to_f32((uint16_t)h);
        if (isnan(f)) {
            assert_true((h & 0x7c00) == 0x7c00 && (h & 0x3ff));
            continue;
        }
        assert_int_equal(dtype_f32_to_f16(f), h);
    }
}

static void test_bf16(void **state)
{
    (void)state;
    assert_int_equal(dtype_f32_to_bf16(1.0f), 0x3f80);
    assert_true(dtype_bf16_to_f32(0x3f80) == 1.0f);
    assert_int_equal(dtype_f32_to_bf16(1.0f + 0x1p-8f), 0x3f80); /* tie -> even */
    assert_int_equal(dtype_f32_to_bf16(1.0f + 3 * 0x1p-8f), 0x3f82);
    for (uint32_t b = 0; b < 0x10000; b++) {
        float f = dtype_bf16_to_f32((uint16_t)b);
        if (!isnan(f)) assert_int_equal(dtype_f32_to_bf16(f), b);
    }
}

static void test_from_double_rounds_once(void **state)
{
    (void)state;
    /* just above a half tie: rounding to float first would land on the tie and go down */
    assert_int_equal(dtype_f64_to_f16(1.0004882812500009), 0x3c01);
    assert_int_equal(dtype_f64_to_f16(1.00048828125), 0x3c00); /* the tie itself: even */
    assert_int_equal(dtype_f64_to_bf16(1.0039062500000009), 0x3f81);
    assert_int_equal(dtype_f64_to_f16(-0.0), 0x8000);
    assert_int_equal(dtype_f64_to_f16(1e300), 0x7c00);
}

static void test_tables(void **state)
{
    (void)state;
    for (int i = 1; i < DT_COUNT; i++) {
        assert_int_equal(dtype_parse(dtype_name((ts_dtype)i)), i);
        assert_int_equal(dtype_parse_config(dtype_triton_config_name((ts_dtype)i)), i);
        assert_int_equal(dtype_from_onnx(dtype_to_onnx((ts_dtype)i)), i);
    }
    assert_int_equal(dtype_parse("FP33"), DT_INVALID);
    assert_int_equal(dtype_size(DT_BYTES), 0);
    assert_int_equal(dtype_size(DT_FP16), 2);
    assert_int_equal(dtype_from_onnx(ONNX_TENSOR_ELEMENT_DATA_TYPE_COMPLEX64), DT_INVALID);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_f16_known_values),
        cmocka_unit_test(test_f16_round_trip_all),
        cmocka_unit_test(test_bf16),
        cmocka_unit_test(test_from_double_rounds_once),
        cmocka_unit_test(test_tables),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
