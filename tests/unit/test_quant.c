/* The quantizer's block math (src/quant/quant_block.c) against a naive reference written
 * here from MatMulNBits' documented layout: codes and values, the 4-bit packing order, every
 * block its own scale, odd K padded, zero points packed; and quant_model_file's refusals. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <cmocka.h>
#include <string.h>
#include <unistd.h>

#include "quant.h"
#include "quant_block.h"
#include "quant_weights.h"
#include "test_util.h"

static uint64_t g_x = 88172645463325252ULL;
static float rnd(void) /* uniform in (-1, 1), xorshift: the same numbers on every machine */
{
    g_x ^= g_x << 13;
    g_x ^= g_x >> 7;
    g_x ^= g_x << 17;
    return (float)((double)(g_x >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

/* The row's codes one per element, read byte by byte: low nibble first (the layout as
 * ContribOperators.md states it), not through qb_code. */
static void unpack(const uint8_t *codes, size_t n, int bits, unsigned *out)
{
    if (bits == 8) {
        for (size_t i = 0; i < n; i++) out[i] = codes[i];
        return;
    }
    for (size_t j = 0; j < n / 2; j++) {
        out[2 * j] = codes[j] & 0x0f;
        out[2 * j + 1] = (unsigned)codes[j] >> 4;
    }
}

/* The naive symmetric reference: per block the weight of largest magnitude m, scale
 * m / -2^(bits-1), code round(w / scale) + 2^(bits-1) clamped, padding at the middle code. */
static void naive_sym(const float *w, size_t k, size_t block, int bits, unsigned *code, float *scale)
{
    int mid = 1 << (bits - 1), qmax = (1 << bits) - 1;
    size_t nb = (k + block - 1) / block;
    for (size_t b = 0; b < nb; b++) {
        float m = 0;
        for (size_t i = b * block; i < (b + 1) * block && i < k; i++)
            if (fabsf(w[i]) > fabsf(m)) m = w[i];
        scale[b] = m / (float)-mid;
        for (size_t i = b * block; i < (b + 1) * block; i++) {
            long q = i < k && scale[b] != 0 ? lroundf(w[i] / scale[b]) + mid : mid;
            code[i] = (unsigned)(q < 0 ? 0 : q > qmax ? qmax : q);
        }
    }
}

static void check_sym(size_t k, size_t block, int bits)
{
    size_t nb = qb_blocks(k, block), pk = nb * block;
    float *w = malloc(k * sizeof *w), *scales = malloc(nb * sizeof *scales), *back = malloc(k * sizeof *back);
    float *rs = malloc(nb * sizeof *rs);
    uint8_t *codes = malloc(nb * qb_blob(block, bits));
    unsigned *got = malloc(pk * sizeof *got), *want = malloc(pk * sizeof *want);
    for (size_t i = 0; i < k; i++) w[i] = rnd() * (float)(1 + (i / block) * 3); /* each block its own range */
    qb_quantize_row(w, k, block, bits, codes, scales, NULL);
    naive_sym(w, k, block, bits, want, rs);
    unpack(codes, pk, bits, got);
    for (size_t i = 0; i < pk; i++) assert_int_equal(got[i], want[i]);
    for (size_t b = 0; b < nb; b++) assert_true(scales[b] == rs[b]);
    qb_dequantize_row(codes, scales, NULL, k, block, bits, back);
    int mid = 1 << (bits - 1);
    for (size_t i = 0; i < k; i++) {
        float s = rs[i / block];
        assert_true(back[i] == ((float)want[i] - (float)mid) * s);
        /* round to nearest: within half a step, except the one code clamped at the top */
        if (want[i] != (unsigned)(2 * mid - 1)) assert_true(fabsf(back[i] - w[i]) <= fabsf(s) * 0.5f * 1.0001f);
    }
    free(w), free(scales), free(back), free(rs), free(codes), free(got), free(want);
}

static void test_round_trip_matches_naive(void **state)
{
    (void)state;
    static const size_t ks[] = {16, 32, 64, 96, 256, 4096};
    static const size_t blocks[] = {16, 32, 64, 128};
    for (size_t a = 0; a < sizeof ks / sizeof *ks; a++)
        for (size_t b = 0; b < sizeof blocks / sizeof *blocks; b++) {
            check_sym(ks[a], blocks[b], 4);
            check_sym(ks[a], blocks[b], 8);
        }
}

/* Weight i of a 4-bit block is the low nibble of byte i/2 when i is even, the high when odd. */
static void test_int4_packing_order(void **state)
{
    (void)state;
    float w[16];
    for (int i = 0; i < 16; i++) w[i] = 0.5f * (float)(i - 8); /* -4 (largest magnitude) .. 3.5 */
    uint8_t codes[8];
    float scale;
    qb_quantize_row(w, 16, 16, 4, codes, &scale, NULL);
    assert_true(scale == 0.5f); /* -4 / -8: weight i gets code i */
    static const uint8_t want[8] = {0x10, 0x32, 0x54, 0x76, 0x98, 0xba, 0xdc, 0xfe};
    assert_memory_equal(codes, want, 8);
    for (unsigned i = 0; i < 16; i++) assert_int_equal(qb_code(codes, i, 4), i);
    float back[16];
    qb_dequantize_row(codes, &scale, NULL, 16, 16, 4, back);
    assert_memory_equal(back, w, sizeof w);
}

/* K = 37 with blocks of 16: three blocks, the last holding 5 weights and 11 padding codes at
 * the zero point; the 37 come back, and each block has its own scale. */
static void test_odd_k_padding(void **state)
{
    (void)state;
    for (int bits = 4; bits <= 8; bits += 4) {
        float w[37], back[37], scales[3];
        for (int i = 0; i < 37; i++) w[i] = (float)(i % 7 - 3) * (i < 16 ? 1.0f : i < 32 ? 10.0f : 0.01f);
        uint8_t codes[48];
        assert_int_equal(qb_blocks(37, 16), 3);
        qb_quantize_row(w, 37, 16, bits, codes, scales, NULL);
        unsigned got[48], mid = 1u << (bits - 1);
        unpack(codes, 48, bits, got);
        for (int i = 37; i < 48; i++) assert_int_equal(got[i], mid);
        assert_true(fabsf(scales[0]) < fabsf(scales[1]) && fabsf(scales[2]) < fabsf(scales[0]));
        qb_dequantize_row(codes, scales, NULL, 37, 16, bits, back);
        for (int i = 0; i < 37; i++) /* the top code may be clamped: -m maps one step past it */
            if (got[i] != 2 * mid - 1) assert_true(fabsf(back[i] - w[i]) <= fabsf(scales[i / 16]) * 0.5001f);
            else assert_true(fabsf(back[i] - w[i]) <= fabsf(scales[i / 16]) * 1.0001f);
    }
}

/* Asymmetric blocks: a zero point each, packed along the blocks low bits first (3 blocks at
 * 4 bits: 2 bytes, the last high nibble 0); all-positive blocks use the whole code range. */
static void test_zero_points(void **state)
{
    (void)state;
    float w[48], back[48], scales[3];
    for (int i = 0; i < 48; i++) w[i] = i < 16 ? 1.0f + (float)i : i < 32 ? -(float)(i - 16) : (float)(i - 40);
    uint8_t codes[24], zp[3], packed[2];
    qb_quantize_row(w, 48, 16, 4, codes, scales, zp);
    assert_int_equal(zp[0], 0);  /* [0, 16]: min 0 */
    assert_int_equal(zp[1], 15); /* [-15, 0]: max 0 */
    assert_int_equal(zp[2], 8);  /* [-8, 7] */
    assert_int_equal(qb_zp_bytes(3, 4), 2);
    qb_pack_zero_points(zp, 3, 4, packed);
    assert_int_equal(packed[0], 0xf0);
    assert_int_equal(packed[1], 0x08);
    qb_dequantize_row(codes, scales, packed, 48, 16, 4, back);
    for (int i = 0; i < 48; i++) {
        unsigned c = qb_code(codes, (size_t)i, 4);
        assert_true(back[i] == ((float)c - (float)zp[i / 16]) * scales[i / 16]);
        assert_true(fabsf(back[i] - w[i]) <= scales[i / 16] * 0.5001f);
    }
    uint8_t codes8[48], zp8[3], packed8[3];
    qb_quantize_row(w, 48, 16, 8, codes8, scales, zp8);
    qb_pack_zero_points(zp8, 3, 8, packed8);
    assert_memory_equal(zp8, packed8, 3); /* 8 bits: one byte each, in order */
}

static void test_valid_pairs(void **state)
{
    (void)state;
    assert_true(qb_valid(4, 32) && qb_valid(8, 128) && qb_valid(4, 16) && qb_valid(8, 256));
    assert_false(qb_valid(2, 32) || qb_valid(3, 32) || qb_valid(4, 48) || qb_valid(4, 8) || qb_valid(8, 512));
    assert_int_equal(qb_blob(32, 4), 16);
    assert_int_equal(qb_blob(32, 8), 32);
}

/* A file that is not ONNX, one that is missing, and bad options each fail with a message. */
static void test_model_refusals(void **state)
{
    (void)state;
    char dir[] = "/tmp/test_quant_XXXXXX";
    assert_non_null(mkdtemp(dir));
    const char *bad = test_write_text(dir, "bad.onnx", "\xff\xff\xff not protobuf");
    char in[600], out[600], err[1024];
    snprintf(in, sizeof in, "%s", bad);
    snprintf(out, sizeof out, "%s/out.onnx", dir);
    quant_opts o = {.bits = 4, .block = 32};
    quant_report r;
    assert_int_equal(quant_model_file(in, out, &o, &r, err, sizeof err), -1);
    assert_non_null(strstr(err, "not an ONNX model"));
    assert_int_equal(access(out, F_OK), -1);
    snprintf(in, sizeof in, "%s/missing.onnx", dir);
    assert_int_equal(quant_model_file(in, out, &o, &r, err, sizeof err), -1);
    assert_non_null(strstr(err, "missing.onnx"));
    o.block = 48;
    assert_int_equal(quant_model_file(in, out, &o, &r, err, sizeof err), -1);
    assert_non_null(strstr(err, "block"));
    o = (quant_opts){.bits = 4, .block = 32, .accuracy_level = 5};
    assert_int_equal(quant_model_file(in, out, &o, &r, err, sizeof err), -1);
    unlink(bad);
    rmdir(dir);
}

/* quant_weights: a ModelProto written by hand in protobuf's wire format. Graph (field 7) with
 * three initializers (field 5): "w" float [2, 3] as raw_data (24 bytes), "tiny" float [1]
 * (4 bytes, under min_bytes), "bad" float [4] whose raw_data holds 8 bytes (not its dims). */
static size_t put_tensor(uint8_t *p, const char *name, const int *dims, int nd, const uint8_t *raw, size_t rawlen)
{
    uint8_t t[128];
    size_t n = 0, nl = strlen(name);
    for (int i = 0; i < nd; i++) { t[n++] = 0x08; t[n++] = (uint8_t)dims[i]; } /* dims: field 1, varint */
    t[n++] = 0x10; t[n++] = 1;                                                   /* data_type: FLOAT */
    t[n++] = 0x42; t[n++] = (uint8_t)nl; memcpy(t + n, name, nl); n += nl;       /* name: field 8 */
    t[n++] = 0x4a; t[n++] = (uint8_t)rawlen; memcpy(t + n, raw, rawlen); n += rawlen; /* raw_data: field 9 */
    p[0] = 0x2a; /* initializer: field 5, length-delimited */
    p[1] = (uint8_t)n;
    memcpy(p + 2, t, n);
    return n + 2;
}

static void test_weights_walk(void **state)
{
    (void)state;
    char dir[] = "/tmp/test_quant_XXXXXX";
    assert_non_null(mkdtemp(dir));
    uint8_t raw[24], g[512], m[600];
    for (size_t i = 0; i < sizeof raw; i++) raw[i] = (uint8_t)(i * 7 + 1);
    size_t gn = 0;
    gn += put_tensor(g + gn, "w", (const int[]){2, 3}, 2, raw, 24);
    gn += put_tensor(g + gn, "tiny", (const int[]){1}, 1, raw, 4);
    gn += put_tensor(g + gn, "bad", (const int[]){4}, 1, raw, 8);
    size_t mn = 0;
    m[mn++] = 0x08; m[mn++] = 8;    /* ir_version */
    m[mn++] = 0x3a; m[mn++] = 0x80 | (gn & 0x7f); m[mn++] = (uint8_t)(gn >> 7); /* graph: field 7 */
    memcpy(m + mn, g, gn);
    mn += gn;
    const char *path = test_write_file(dir, "m.onnx", m, mn);
    quant_weights *w = NULL;
    char err[300];
    assert_int_equal(quant_weights_map(path, 8, &w, err, sizeof err), 0);
    assert_int_equal(quant_weights_count(w), 1);
    const quant_weight *q = quant_weights_at(w, 0);
    assert_string_equal(q->name, "w");
    assert_int_equal(q->ndim, 2);
    assert_int_equal(q->dims[0], 2);
    assert_int_equal(q->dims[1], 3);
    assert_int_equal(q->data_type, 1);
    assert_int_equal(q->bytes, 24);
    assert_memory_equal(q->data, raw, 24);
    assert_null(quant_weights_at(w, 1));
    quant_weights_drop_pages(w);
    assert_memory_equal(q->data, raw, 24); /* file pages: read back after the drop */
    quant_weights_free(w);
    /* every cut of the file: refused or walked, never read past its end (the ASan build) */
    for (size_t cut = 1; cut < mn; cut++) {
        path = test_write_file(dir, "m.onnx", m, cut);
        w = NULL;
        if (quant_weights_map(path, 1, &w, err, sizeof err) == 0) quant_weights_free(w);
        else assert_null(w);
    }
    unlink(path);
    rmdir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip_matches_naive), cmocka_unit_test(test_int4_packing_order),
        cmocka_unit_test(test_odd_k_padding),            cmocka_unit_test(test_zero_points),
        cmocka_unit_test(test_valid_pairs),              cmocka_unit_test(test_model_refusals),
        cmocka_unit_test(test_weights_walk),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
