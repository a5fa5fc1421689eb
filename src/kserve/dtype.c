#include "dtype.h"

#include <math.h>
#include <string.h>

typedef struct {
    const char *name;
    const char *config_name;
    size_t size;
} dtype_info;

static const dtype_info k_info[DT_COUNT] = {
    [DT_INVALID] = {"INVALID", "TYPE_INVALID", 0},
    [DT_BOOL] = {"BOOL", "TYPE_BOOL", 1},
    [DT_UINT8] = {"UINT8", "TYPE_UINT8", 1},
    [DT_UINT16] = {"UINT16", "TYPE_UINT16", 2},
    [DT_UINT32] = {"UINT32", "TYPE_UINT32", 4},
    [DT_UINT64] = {"UINT64", "TYPE_UINT64", 8},
    [DT_INT8] = {"INT8", "TYPE_INT8", 1},
    [DT_INT16] = {"INT16", "TYPE_INT16", 2},
    [DT_INT32] = {"INT32", "TYPE_INT32", 4},
    [DT_INT64] = {"INT64", "TYPE_INT64", 8},
    [DT_FP16] = {"FP16", "TYPE_FP16", 2},
    [DT_FP32] = {"FP32", "TYPE_FP32", 4},
    [DT_FP64] = {"FP64", "TYPE_FP64", 8},
    [DT_BYTES] = {"BYTES", "TYPE_STRING", 0},
    [DT_BF16] = {"BF16", "TYPE_BF16", 2},
};

const char *dtype_name(ts_dtype dt) { return k_info[dt < DT_COUNT ? dt : DT_INVALID].name; }

const char *dtype_triton_config_name(ts_dtype dt)
{
    return k_info[dt < DT_COUNT ? dt : DT_INVALID].config_name;
}

ts_dtype dtype_parse(const char *name)
{
    for (int i = 1; i < DT_COUNT; i++)
        if (strcmp(name, k_info[i].name) == 0) return (ts_dtype)i;
    return DT_INVALID;
}

ts_dtype dtype_parse_config(const char *name)
{
    for (int i = 1; i < DT_COUNT; i++)
        if (strcmp(name, k_info[i].config_name) == 0) return (ts_dtype)i;
    return dtype_parse(name);
}

size_t dtype_size(ts_dtype dt) { return k_info[dt < DT_COUNT ? dt : DT_INVALID].size; }

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* IEEE binary16 with round-to-nearest-even, overflow to infinity, NaN kept quiet. */
uint16_t dtype_f32_to_f16(float f)
{
    uint32_t x = f32_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t absx = x & 0x7fffffffu;
    if (absx >= 0x7f800000u) /* inf or nan */
        return (uint16_t)(sign | 0x7c00u | (absx > 0x7f800000u ? 0x200u : 0));
    if (absx >= 0x477ff000u) /* rounds to >= 65520: overflow */
        return (uint16_t)(sign | 0x7c00u);
    if (absx < 0x38800000u) { /* below the smallest normal half: subnormal or zero */
        float a = bits_f32(absx);
        /* 2^-24 is the half subnormal step; rint does round-half-even */
        return (uint16_t)(sign | (uint16_t)rintf(a * 16777216.0f));
    }
    uint32_t mant = absx & 0x7fffffu;
    uint32_t exp = (absx >> 23) - 127 + 15;
    uint32_t h = (exp << 10) | (mant >> 13);
    uint32_t rem = mant & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h++;
    return (uint16_t)(sign | h);
}

float dtype_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    if (exp == 0) {
        float v = (float)mant / 16777216.0f;
        return sign ? -v : v;
    }
    if (exp == 31) return bits_f32(sign | 0x7f800000u | (mant << 13));
    return bits_f32(sign | ((exp - 15 + 127) << 23) | (mant << 13));
}

uint16_t dtype_f32_to_bf16(float f)
{
    uint32_t x = f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u);
    uint32_t rounding = 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)((x + rounding) >> 16);
}

float dtype_bf16_to_f32(uint16_t b) { return bits_f32((uint32_t)b << 16); }

/* double -> float rounding to odd: when inexact, take the neighbour whose last mantissa bit
 * is 1. A float rounded that way carries enough to round once more, to half or bfloat16,
 * exactly as if the double had been rounded directly (no double-rounding error). */
static float f64_to_f32_odd(double d)
{
    float f = (float)d;
    if ((double)f == d || isnan(d) || isinf(f)) return f;
    if ((f32_bits(f) & 1u) == 0) f = nextafterf(f, (double)f < d ? INFINITY : -INFINITY);
    return f;
}

uint16_t dtype_f64_to_f16(double d) { return dtype_f32_to_f16(f64_to_f32_odd(d)); }
uint16_t dtype_f64_to_bf16(double d) { return dtype_f32_to_bf16(f64_to_f32_odd(d)); }
