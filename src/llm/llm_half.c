/* llm_half: FP32 <-> FP16 (the contract is in llm_half.h). */
#include <string.h>

#include "llm_half.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define HALF_X86 1
#endif

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

uint16_t llm_half_from_f32(float f)
{
    uint32_t u = f32_bits(f), sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
    if (a >= 0x7f800000u) /* inf, or NaN made quiet with its top payload bits */
        return (uint16_t)(sign | 0x7c00u | (a > 0x7f800000u ? 0x200u | ((a >> 13) & 0x3ffu) : 0));
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* rounds to 65520 or more: inf */
    if (a < 0x38800000u) { /* below 2^-14: a subnormal half (or zero) */
        if (a < 0x33000000u) return (uint16_t)sign; /* at most 2^-25: half the least subnormal, ties to 0 */
        uint32_t e = a >> 23, man = (a & 0x7fffffu) | 0x800000u, shift = 126 - e; /* 14..24 */
        uint32_t h = man >> shift, rem = man & ((1u << shift) - 1), halfway = 1u << (shift - 1);
        if (rem > halfway || (rem == halfway && (h & 1))) h++;
        return (uint16_t)(sign | h);
    }
    /* normal: rebias the exponent, round the 13 dropped bits to nearest even (a carry into the
     * exponent is the right answer, up to inf) */
    uint32_t h = ((a - 0x38000000u) >> 13), rem = a & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1))) h++;
    return (uint16_t)(sign | h);
}

float llm_half_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    if (e == 0x1f) return bits_f32(sign | 0x7f800000u | (man << 13));
    if (e) return bits_f32(sign | ((e + 112) << 23) | (man << 13));
    /* zero or subnormal: man * 2^-24, exact in FP32 */
    float f = (float)man * 0x1p-24f;
    return bits_f32(sign | f32_bits(f));
}

void llm_half_from_f32_row_c(uint16_t *dst, const float *src, size_t n)
{
    for (size_t i = 0; i < n; i++) dst[i] = llm_half_from_f32(src[i]);
}

void llm_half_to_f32_row_c(float *dst, const uint16_t *src, size_t n)
{
    for (size_t i = 0; i < n; i++) dst[i] = llm_half_to_f32(src[i]);
}

#ifdef HALF_X86
/* VCVTPS2PH with imm 0 rounds to nearest even whatever MXCSR says; denormal inputs are kept
 * unless MXCSR.DAZ is set, which nothing in this process sets (the tests compare it with the
 * portable rows). */
__attribute__((target("f16c,avx"))) static void from_f16c(uint16_t *dst, const float *src, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(dst + i), _mm256_cvtps_ph(_mm256_loadu_ps(src + i), 0));
    for (; i < n; i++) dst[i] = llm_half_from_f32(src[i]);
}

__attribute__((target("f16c,avx"))) static void to_f16c(float *dst, const uint16_t *src, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
    for (; i < n; i++) dst[i] = llm_half_to_f32(src[i]);
}

int llm_half_simd(void)
{
    static int have = -1; /* a benign race: every thread computes the same answer */
    if (have < 0) have = __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx");
    return have;
}

void llm_half_from_f32_row(uint16_t *dst, const float *src, size_t n)
{
    if (llm_half_simd()) from_f16c(dst, src, n);
    else llm_half_from_f32_row_c(dst, src, n);
}

void llm_half_to_f32_row(float *dst, const uint16_t *src, size_t n)
{
    if (llm_half_simd()) to_f16c(dst, src, n);
    else llm_half_to_f32_row_c(dst, src, n);
}
#else
int llm_half_simd(void) { return 0; }
void llm_half_from_f32_row(uint16_t *dst, const float *src, size_t n) { llm_half_from_f32_row_c(dst, src, n); }
void llm_half_to_f32_row(float *dst, const uint16_t *src, size_t n) { llm_half_to_f32_row_c(dst, src, n); }
#endif
