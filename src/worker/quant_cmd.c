#include "quant_cmd.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "quant.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: tierserve quantize IN.onnx OUT.onnx [--bits 8|4] [--block 16|32|64|128|256] [--zero-points]\n"
            "                          [--accuracy-level 0..4] [--external-data] [--min-elements N]\n"
            "  weight-only quantization of an FP32 decoder (or any FP32 model) for the CPU tier: every MatMul\n"
            "  whose B is a constant FP32 [K, N] (or a Transpose of a constant [N, K]) becomes ONNX Runtime's\n"
            "  com.microsoft MatMulNBits; everything else is kept as it was.\n"
            "  --bits            8 (default) or 4\n"
            "  --block           weights per scale along K (default 32)\n"
            "  --zero-points     asymmetric blocks with a zero point each (default: symmetric, no zero points)\n"
            "  --accuracy-level  MatMulNBits' compute type: 0 unset (FP32, exact to the dequantized weights),\n"
            "                    4 int8 activations (ONNX Runtime's fast CPU path). Default: 4 with 8 bits, 0 with\n"
            "                    4 (at 4 ONNX Runtime's 4-bit results depend on the batch: docs/llm.md)\n"
            "  --external-data   weights in a side file OUT.onnx.data (automatic above 1.8 GiB)\n"
            "  --min-elements N  leave a B of fewer than N weights in FP32 (default 0: quantize all)\n"
            "  Copy the model folder's other files (tokenizer.json, ...) beside OUT.onnx yourself.\n");
}

static int int_arg(const char *flag, const char *v, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long n = v ? strtol(v, &end, 10) : 0;
    if (!v || end == v || *end || errno || n < lo || n > hi) {
        fprintf(stderr, "tierserve quantize: %s: '%.40s' is not an integer in %ld..%ld\n", flag, v ? v : "", lo, hi);
        return -1;
    }
    *out = n;
    return 0;
}

int quant_cmd(int argc, char **argv)
{
    quant_opts o = {.bits = 8, .block = 32, .accuracy_level = -1, .external = QUANT_EXT_AUTO};
    const char *pos[2] = {NULL, NULL};
    int n_pos = 0;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        long v;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--zero-points")) o.zero_points = true;
        else if (!strcmp(a, "--external-data")) o.external = QUANT_EXT_ALWAYS;
        else if (!strcmp(a, "--bits") || !strcmp(a, "--block") || !strcmp(a, "--accuracy-level") ||
                 !strcmp(a, "--min-elements")) {
            const char *val = i + 1 < argc ? argv[++i] : NULL;
            if (!strcmp(a, "--bits")) {
                if (int_arg(a, val, 1, 64, &v) != 0) return 64;
                o.bits = (int)v;
            } else if (!strcmp(a, "--block")) {
                if (int_arg(a, val, 16, 256, &v) != 0) return 64; /* MatMulNBits: 16..256 */
                o.block = (int)v;
            } else if (!strcmp(a, "--accuracy-level")) {
                if (int_arg(a, val, 0, 4, &v) != 0) return 64;
                o.accuracy_level = (int)v;
            } else {
                if (int_arg(a, val, 0, 1L << 40, &v) != 0) return 64;
                o.min_elements = (size_t)v;
            }
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "tierserve quantize: unknown option %.60s (see tierserve quantize --help)\n", a);
            return 64;
        } else if (n_pos < 2) {
            pos[n_pos++] = a;
        } else {
            fprintf(stderr, "tierserve quantize: one input and one output file, not '%.200s' too\n", a);
            return 64;
        }
    }
    if (n_pos != 2) {
        usage(stderr);
        return 64;
    }
    if (o.bits != 4 && o.bits != 8) {
        fprintf(stderr, "tierserve quantize: --bits: %d is not 4 or 8\n", o.bits);
        return 64;
    }
    if (o.block & (o.block - 1)) {
        fprintf(stderr, "tierserve quantize: --block: %d is not a power of two\n", o.block);
        return 64;
    }
    if (o.accuracy_level < 0) o.accuracy_level = o.bits == 8 ? 4 : 0;
    if (!strcmp(pos[0], pos[1])) {
        fprintf(stderr, "tierserve quantize: the output must not be the input (%.200s)\n", pos[0]);
        return 64;
    }
    quant_report r;
    char err[1024];
    if (quant_model_file(pos[0], pos[1], &o, &r, err, sizeof err) != 0) {
        fprintf(stderr, "tierserve quantize: %s\n", err);
        return 1;
    }
    printf("quantized %zu of %zu MatMul nodes to %d bits, block %d, %s, accuracy level %d (%zu through a Transpose); "
           "%zu left: %zu with a computed B, %zu other%s%s\n",
           r.quantized, r.matmuls, o.bits, o.block, o.zero_points ? "zero points" : "symmetric", o.accuracy_level,
           r.via_transpose, r.skipped, r.skipped - r.skipped_other, r.skipped_other, r.why[0] ? ": first " : "", r.why);
    printf("weights %.1f MiB FP32 -> %.1f MiB; wrote %s%s, %.1f MiB\n", (double)r.weights_in_bytes / 1048576.0,
           (double)r.weights_out_bytes / 1048576.0, pos[1], r.external ? " (+ .data)" : "",
           (double)r.file_bytes / 1048576.0);
    return 0;
}
