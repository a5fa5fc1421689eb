/* bench_jsonrate: how fast the JSON tensor codec decodes and encodes a FP32 tensor of the
 * given shape (no ORT run, no HTTP). Prints one JSON line:
 *   - encode/decode: infer_encode and infer_parse on the whole body, ms and MB/s of JSON;
 *   - per number, ns, for the formatter (jfast_fmt_f32) and the array parser
 *     (jfast_parse_array) on two texts: what the encoder writes (%.9g) and what Python's
 *     json.dumps writes for a float32 widened to double (%.17g, the bench's requests);
 *     and both for a tensor like a model's output (mixed signs, eight decades: mixed_*);
 *     each against the routines before the rewrite (bench/jfast_baseline.c), the two
 *     alternating round by round so a loaded machine slows both alike; the best round wins.
 *   bench_jsonrate D0 D1 ... (e.g. 1 3 224 224)
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "infer.h"
#include "jfast.h"
#include "jfast_baseline.h"

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

#define ROUNDS 15

typedef size_t (*fmt_fn)(char *, float);
typedef int (*parse_fn)(const char *, const char *, ts_dtype, uint8_t *, size_t);

static double time_fmt(fmt_fn fn, const float *x, size_t count, char *text, size_t *len)
{
    double t0 = now();
    size_t n = 0;
    for (size_t i = 0; i < count; i++) {
        if (i) text[n++] = ',';
        n += fn(text + n, x[i]);
    }
    *len = n;
    return now() - t0;
}

static double time_parse(parse_fn fn, const char *text, size_t len, float *out, size_t count)
{
    double t0 = now();
    if (fn(text, text + len, DT_FP32, (uint8_t *)out, count) != 0) {
        fprintf(stderr, "parse failed\n");
        exit(1);
    }
    return now() - t0;
}

static double min2(double a, double b) { return a < b ? a : b; }

int main(int argc, char **argv)
{
    if (argc < 2) return 64;
    int64_t shape[TS_MAX_DIMS];
    size_t nd = (size_t)argc - 1, count = 1;
    for (size_t i = 0; i < nd; i++) count *= (size_t)(shape[i] = atoll(argv[i + 1]));
    float *x = malloc(count * sizeof *x), *y = malloc(count * sizeof *y);
    for (size_t i = 0; i < count; i++) x[i] = (float)((i * 2654435761u) % 100000) / 997.0f;
    /* a reply with this tensor: what the encoder writes, and a request the decoder reads */
    ts_tensor t = {.name = "x", .dt = DT_FP32, .ndim = nd, .count = count, .data = (uint8_t *)x,
                   .nbytes = count * 4};
    memcpy(t.shape, shape, sizeof shape);
    bool bin = false;
    infer_result res = {.n = 1, .binary = &bin, .tensors = &t};
    infer_request empty = {0};
    int reps = 20;
    buf out;
    size_t jl = 0;
    bool any;
    ts_err e;
    double t0 = now();
    for (int i = 0; i < reps; i++) {
        buf_init(&out, (size_t)1 << 31);
        infer_encode(&empty, &res, "m", "1", &out, &jl, &any, &e);
        if (i < reps - 1) buf_free(&out);
    }
    double enc_s = (now() - t0) / reps;
    /* turn the reply's output into a request's input */
    const char *data = strstr((char *)out.data, "\"data\":");
    size_t dlen = out.len - (size_t)(data - (char *)out.data);
    buf req;
    buf_init(&req, (size_t)1 << 31);
    buf_puts(&req, "{\"inputs\":[{\"name\":\"x\",\"datatype\":\"FP32\",\"shape\":[");
    for (size_t i = 0; i < nd; i++) buf_printf(&req, "%s%lld", i ? "," : "", (long long)shape[i]);
    buf_puts(&req, "],");
    buf_put(&req, data, dlen - 3); /* drop the closing "}]}" */
    buf_puts(&req, "}]}");
    double d0 = now();
    for (int i = 0; i < reps; i++) {
        uint8_t *b = malloc(req.len);
        memcpy(b, req.data, req.len);
        infer_request r;
        if (infer_parse(b, req.len, -1, (size_t)1 << 31, &r, &e) != 0) {
            fprintf(stderr, "parse failed: %s\n", e.msg);
            return 1;
        }
        infer_request_free(&r);
    }
    double dec_s = (now() - d0) / reps;

    /* the routines alone, before (baseline) and after, alternating */
    char *text = malloc(count * 48 + 2), *text17 = malloc(count * 48 + 2);
    size_t tl = 0, tl17 = 1;
    text17[0] = '[';
    for (size_t i = 0; i < count; i++)
        tl17 += (size_t)snprintf(text17 + tl17, 48, "%s%.17g", i ? ", " : "", (double)x[i]);
    text17[tl17++] = ']';
    /* and a tensor like a model's output: both signs, magnitudes over eight decades */
    float *mx = malloc(count * sizeof *mx);
    uint32_t s = 1;
    for (size_t i = 0; i < count; i++) {
        s = s * 1103515245u + 12345u;
        float u = (float)(s >> 8) / 16777216.0f;
        mx[i] = (s & 1 ? -1.0f : 1.0f) * u * (float)pow(10.0, (double)(s >> 4 & 7) - 6.0);
    }
    double fmt_new = 1e9, fmt_old = 1e9, p9_new = 1e9, p9_old = 1e9, p17_new = 1e9, p17_old = 1e9;
    double mf_new = 1e9, mf_old = 1e9, mp_new = 1e9, mp_old = 1e9;
    size_t ml = 0;
    for (int r = 0; r < ROUNDS; r++) {
        size_t l;
        fmt_old = min2(fmt_old, time_fmt(base_fmt_f32, x, count, text + 1, &l));
        fmt_new = min2(fmt_new, time_fmt(jfast_fmt_f32, x, count, text + 1, &l));
        text[0] = '[';
        text[l + 1] = ']';
        tl = l + 2;
        p9_old = min2(p9_old, time_parse(base_parse_array, text, tl, y, count));
        p9_new = min2(p9_new, time_parse(jfast_parse_array, text, tl, y, count));
        if (memcmp(x, y, count * 4) != 0) {
            fprintf(stderr, "the parsed tensor differs from the written one\n");
            return 1;
        }
        p17_old = min2(p17_old, time_parse(base_parse_array, text17, tl17, y, count));
        p17_new = min2(p17_new, time_parse(jfast_parse_array, text17, tl17, y, count));
        mf_old = min2(mf_old, time_fmt(base_fmt_f32, mx, count, text + 1, &l));
        mf_new = min2(mf_new, time_fmt(jfast_fmt_f32, mx, count, text + 1, &l));
        text[0] = '[';
        text[l + 1] = ']';
        ml = l + 2;
        mp_old = min2(mp_old, time_parse(base_parse_array, text, ml, y, count));
        mp_new = min2(mp_new, time_parse(jfast_parse_array, text, ml, y, count));
        if (memcmp(mx, y, count * 4) != 0) {
            fprintf(stderr, "the parsed tensor differs from the written one\n");
            return 1;
        }
    }
    double ns = 1e9 / (double)count;
    printf("{\"elements\":%zu,\"json_bytes\":%zu,\"binary_bytes\":%zu,\"encode_mb_s\":%.1f,"
           "\"decode_mb_s\":%.1f,\"encode_ms\":%.2f,\"decode_ms\":%.2f,"
           "\"fmt_ns\":%.1f,\"fmt_ns_before\":%.1f,\"fmt_mb_s\":%.0f,\"fmt_mb_s_before\":%.0f,"
           "\"parse9_ns\":%.1f,\"parse9_ns_before\":%.1f,\"parse9_mb_s\":%.0f,\"parse9_mb_s_before\":%.0f,"
           "\"parse17_ns\":%.1f,\"parse17_ns_before\":%.1f,\"parse17_mb_s\":%.0f,\"parse17_mb_s_before\":%.0f,"
           "\"mixed_fmt_ns\":%.1f,\"mixed_fmt_ns_before\":%.1f,\"mixed_parse_ns\":%.1f,\"mixed_parse_ns_before\":%.1f,"
           "\"mixed_mb_s\":%.0f}\n",
           count, jl, count * 4, (double)jl / enc_s / 1e6, (double)req.len / dec_s / 1e6, enc_s * 1e3,
           dec_s * 1e3, fmt_new * ns, fmt_old * ns, (double)tl / fmt_new / 1e6, (double)tl / fmt_old / 1e6,
           p9_new * ns, p9_old * ns, (double)tl / p9_new / 1e6, (double)tl / p9_old / 1e6, p17_new * ns,
           p17_old * ns, (double)tl17 / p17_new / 1e6, (double)tl17 / p17_old / 1e6, mf_new * ns, mf_old * ns,
           mp_new * ns, mp_old * ns, (double)ml / mp_new / 1e6);
    buf_free(&out);
    buf_free(&req);
    free(text);
    free(text17);
    free(x);
    free(y);
    free(mx);
    return 0;
}
