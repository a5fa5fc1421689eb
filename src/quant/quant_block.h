/* quant_block: weight-only block quantization in ONNX Runtime's MatMulNBits layout, pure math.
 *
 * One row of the quantized matrix is one output column n of the original B [K, N]: its K
 * weights, cut into ceil(K / block) blocks of `block` weights (the last one padded with
 * zeros), each block one scale (float) and one code per weight of `bits` bits (4 or 8). A
 * weight is (code - zero_point) * scale. Codes are packed low bits first along K: with 4
 * bits, weight 2i of a block is the low nibble of byte i and weight 2i + 1 the high nibble.
 * Zero points are one per block, packed the same way along the blocks of a row; without
 * them ONNX Runtime takes 2^(bits - 1) (8 or 128), which is what the symmetric form uses.
 *
 * Symmetric (no zero points, llama.cpp's Q4_0 / Q8_0 rule): the block's weight of largest
 * magnitude m maps to code 0, scale = m / -2^(bits - 1), so the block uses the full range.
 * Asymmetric: the block's [min, max] (widened to hold 0) spans codes 0 .. 2^bits - 1 with a
 * zero point. Rounding is to nearest, halfway away from zero; codes are clamped. */
#ifndef TS_QUANT_BLOCK_H
#define TS_QUANT_BLOCK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Blocks of one row: ceil(k / block). */
size_t qb_blocks(size_t k, size_t block);
/* Bytes of one block's codes: block * bits / 8. */
size_t qb_blob(size_t block, int bits);
/* Bytes of one row's packed zero points: ceil(n_blocks * bits / 8). */
size_t qb_zp_bytes(size_t n_blocks, int bits);
/* True for the (bits, block) pairs MatMulNBits takes: bits 4 or 8, block a power of two 16..256. */
bool qb_valid(int bits, size_t block);

/* Quantizes one row of k weights (contiguous). Writes codes[qb_blocks * qb_blob] bytes,
 * scales[qb_blocks] and, when zp is not NULL, zp[qb_blocks] unpacked zero points (one byte
 * each; the asymmetric form). zp NULL: symmetric. Padding weights get the zero point's code. */
void qb_quantize_row(const float *w, size_t k, size_t block, int bits, uint8_t *codes, float *scales, uint8_t *zp);

/* The code of weight i (0-based along the row, padding included) of a row's packed codes. */
unsigned qb_code(const uint8_t *codes, size_t i, int bits);

/* The row's k weights back: (code - zero point) * scale. zp_packed: the row's packed zero
 * points (qb_pack_zero_points), or NULL for 2^(bits - 1). */
void qb_dequantize_row(const uint8_t *codes, const float *scales, const uint8_t *zp_packed, size_t k, size_t block,
                       int bits, float *w);

/* Packs n_blocks unpacked zero points into qb_zp_bytes(n_blocks, bits) bytes, low bits first;
 * an odd 4-bit count leaves the last high nibble 0. */
void qb_pack_zero_points(const uint8_t *zp, size_t n_blocks, int bits, uint8_t *out);

#endif
