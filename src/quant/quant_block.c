#include "quant_block.h"

#include <math.h>
#include <string.h>

size_t qb_blocks(size_t k, size_t block) { return (k + block - 1) / block; }

size_t qb_blob(size_t block, int bits) { return block * (size_t)bits / 8; }

size_t qb_zp_bytes(size_t n_blocks, int bits) { return (n_blocks * (size_t)bits + 7) / 8; }

bool qb_valid(int bits, size_t block)
{
    return (bits == 4 || bits == 8) && block >= 16 && block <= 256 && (block & (block - 1)) == 0;
}

static void put_code(uint8_t *codes, size_t i, int bits, unsigned q)
{
    if (bits == 8) {
        codes[i] = (uint8_t)q;
        return;
    }
    uint8_t *b = &codes[i / 2];
    *b = (i & 1) ? (uint8_t)((*b & 0x0f) | (q << 4)) : (uint8_t)((*b & 0xf0) | (q & 0x0f));
}

unsigned qb_code(const uint8_t *codes, size_t i, int bits)
{
    if (bits == 8) return codes[i];
    return (i & 1) ? codes[i / 2] >> 4 : codes[i / 2] & 0x0f;
}

static unsigned clamp_code(float v, unsigned qmax)
{
    if (!(v > 0)) return 0; /* also NaN */
    return v >= (float)qmax ? qmax : (unsigned)v;
}

void qb_quantize_row(const float *w, size_t k, size_t block, int bits, uint8_t *codes, float *scales, uint8_t *zp)
{
    size_t nb = qb_blocks(k, block);
    unsigned qmax = (1u << bits) - 1, mid = 1u << (bits - 1);
    memset(codes, 0, nb * qb_blob(block, bits));
    for (size_t b = 0; b < nb; b++) {
        size_t lo = b * block, hi = lo + block < k ? lo + block : k;
        float scale, z;
        if (zp) {
            float mn = 0, mx = 0;
            for (size_t i = lo; i < hi; i++) {
                if (w[i] < mn) mn = w[i];
                if (w[i] > mx) mx = w[i];
            }
            scale = (mx - mn) / (float)qmax;
            z = scale != 0 ? roundf(-mn / scale) : (float)mid;
            zp[b] = (uint8_t)clamp_code(z, qmax);
            z = zp[b];
        } else {
            float m = 0;
            for (size_t i = lo; i < hi; i++)
                if (fabsf(w[i]) > fabsf(m)) m = w[i];
            scale = m / -(float)mid;
            z = (float)mid;
        }
        scales[b] = scale;
        for (size_t i = lo; i < lo + block; i++) {
            float v = i < hi && scale != 0 ? roundf(w[i] / scale) + z : z;
            put_code(codes, i, bits, clamp_code(v, qmax));
        }
    }
}

void qb_dequantize_row(const uint8_t *codes, const float *scales, const uint8_t *zp_packed, size_t k, size_t block,
                       int bits, float *w)
{
    unsigned mid = 1u << (bits - 1);
    for (size_t i = 0; i < k; i++) {
        size_t b = i / block;
        float z = zp_packed ? (float)qb_code(zp_packed, b, bits) : (float)mid;
        w[i] = ((float)qb_code(codes, i, bits) - z) * scales[b];
    }
}

void qb_pack_zero_points(const uint8_t *zp, size_t n_blocks, int bits, uint8_t *out)
{
    memset(out, 0, qb_zp_bytes(n_blocks, bits));
    for (size_t b = 0; b < n_blocks; b++) put_code(out, b, bits, zp[b]);
}
