/* libFuzzer harness for everything a client's bytes reach before ORT: the JSON / binary
 * tensor parser and the binding to a model signature.
 *
 * Input layout: byte 0 selects the Inference-Header-Content-Length mode (odd: absent;
 * even: the next 2 bytes are the header length, little-endian), the rest is the body. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "infer.h"

static io_sig k_in[] = {
    {.name = "input", .dt = DT_FP32, .ndim = 2, .dims = {-1, 4}},
    {.name = "INPUT0", .dt = DT_BYTES, .ndim = 2, .dims = {-1, -1}},
    {.name = "flag", .dt = DT_BOOL, .ndim = 1, .dims = {-1}},
};
static io_sig k_out[] = {{.name = "probabilities", .dt = DT_FP32, .ndim = 2, .dims = {-1, 3}}};
static const model_sig k_sig = {3, 1, k_in, k_out};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 3) return 0;
    int64_t hlen = -1;
    if ((data[0] & 1) == 0) hlen = (int64_t)(data[1] | (data[2] << 8));
    size -= 3;
    data += 3;
    uint8_t *body = malloc(size ? size : 1);
    if (!body) return 0;
    memcpy(body, data, size);
    infer_request r;
    ts_err e;
    if (infer_parse(body, size, hlen, 1 << 20, &r, &e) == 0) {
        (void)infer_bind(&k_sig, &r, &e);
        /* every parsed tensor must hold exactly what its shape says */
        for (size_t i = 0; i < r.n_inputs; i++) {
            const ts_tensor *t = &r.inputs[i];
            if (t->dt != DT_BYTES && t->nbytes != t->count * dtype_size(t->dt)) abort();
        }
    }
    infer_request_free(&r);
    return 0;
}
