/* bench_jsonrate: how fast the JSON tensor codec decodes and encodes, in MB/s of JSON text,
 * on a FP32 tensor of the given shape (no ORT run involved). Prints one JSON line.
 *   bench_jsonrate D0 D1 ... (e.g. 1 3 224 224)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "infer.h"

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
    if (argc < 2) return 64;
    int64_t shape[TS_MAX_DIMS];
    size_t nd = (size_t)argc - 1, count = 1;
    for (size_t i = 0; i < nd; i++) count *= (size_t)(shape[i] = atoll(argv[i + 1]));
    float *x = malloc(count * sizeof *x);
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
    printf("{\"elements\":%zu,\"json_bytes\":%zu,\"binary_bytes\":%zu,\"encode_mb_s\":%.1f,"
           "\"decode_mb_s\":%.1f,\"encode_ms\":%.2f,\"decode_ms\":%.2f}\n",
           count, jl, count * 4, (double)jl / enc_s / 1e6, (double)req.len / dec_s / 1e6, enc_s * 1e3,
           dec_s * 1e3);
    buf_free(&out);
    buf_free(&req);
    free(x);
    return 0;
}
