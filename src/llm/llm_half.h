/* llm_half: FP32 <-> FP16 (IEEE 754 binary16) for rows of a KV cache stored as FP16 beside an
 * FP32 model (TIERSERVE_LLM_KV_DTYPE=fp16, docs/llm.md "KV cache dtype").
 *
 * FP32 -> FP16 rounds to nearest, ties to even; overflow gives +-inf, inf stays inf, a NaN
 * stays a NaN (quiet, sign and top payload bits kept), values below the smallest normal half
 * become subnormal halfs (or +-0), never flushed. FP16 -> FP32 is exact. The same results on
 * every machine: F16C instructions where the CPU has them (checked once), else portable C
 * giving bit-identical output (tests/unit/test_llm_half.c compares the two). */
#ifndef TS_LLM_HALF_H
#define TS_LLM_HALF_H

#include <stddef.h>
#include <stdint.h>

uint16_t llm_half_from_f32(float f);
float llm_half_to_f32(uint16_t h);
/* n elements; dst and src do not overlap. */
void llm_half_from_f32_row(uint16_t *dst, const float *src, size_t n);
void llm_half_to_f32_row(float *dst, const uint16_t *src, size_t n);
/* The portable rows (what the rows above do without F16C); for the tests. */
void llm_half_from_f32_row_c(uint16_t *dst, const float *src, size_t n);
void llm_half_to_f32_row_c(float *dst, const uint16_t *src, size_t n);
/* 1 when the rows above use F16C on this machine. */
int llm_half_simd(void);

#endif
