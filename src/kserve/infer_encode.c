/* infer_encode.c: the reply (JSON, or a JSON header and binary outputs), and the zero-filled
 * requests warm-up runs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "infer.h"
#include "jfast.h"

/* Numbers go through jfast's formatters into a stack chunk, appended in bulk. */
static void put_json_data(buf *b, const ts_tensor *t)
{
    const uint8_t *p = t->data;
    char chunk[4096];
    size_t n = 0, off = 0;
    buf_putc(b, '[');
    for (size_t i = 0; i < t->count; i++) {
        if (n > sizeof chunk - 40) {
            buf_put(b, chunk, n);
            n = 0;
        }
        if (i) chunk[n++] = ',';
        switch (t->dt) {
        case DT_BOOL: n += (size_t)(p[i] ? (memcpy(chunk + n, "true", 4), 4) : (memcpy(chunk + n, "false", 5), 5)); break;
        case DT_UINT8: n += jfast_fmt_u64(chunk + n, p[i]); break;
        case DT_INT8: n += jfast_fmt_i64(chunk + n, (int8_t)p[i]); break;
        case DT_UINT16: { uint16_t v; memcpy(&v, p + 2 * i, 2); n += jfast_fmt_u64(chunk + n, v); break; }
        case DT_INT16: { int16_t v; memcpy(&v, p + 2 * i, 2); n += jfast_fmt_i64(chunk + n, v); break; }
        case DT_UINT32: { uint32_t v; memcpy(&v, p + 4 * i, 4); n += jfast_fmt_u64(chunk + n, v); break; }
        case DT_INT32: { int32_t v; memcpy(&v, p + 4 * i, 4); n += jfast_fmt_i64(chunk + n, v); break; }
        case DT_UINT64: { uint64_t v; memcpy(&v, p + 8 * i, 8); n += jfast_fmt_u64(chunk + n, v); break; }
        case DT_INT64: { int64_t v; memcpy(&v, p + 8 * i, 8); n += jfast_fmt_i64(chunk + n, v); break; }
        case DT_FP16: { uint16_t v; memcpy(&v, p + 2 * i, 2); n += jfast_fmt_f32(chunk + n, dtype_f16_to_f32(v)); break; }
        case DT_BF16: { uint16_t v; memcpy(&v, p + 2 * i, 2); n += jfast_fmt_f32(chunk + n, dtype_bf16_to_f32(v)); break; }
        case DT_FP32: { float v; memcpy(&v, p + 4 * i, 4); n += jfast_fmt_f32(chunk + n, v); break; }
        case DT_FP64: {
            double v;
            memcpy(&v, p + 8 * i, 8);
            buf_put(b, chunk, n);
            n = 0;
            buf_put_double(b, v, false);
            break;
        }
        case DT_BYTES: {
            uint32_t l = dtype_rd_u32le(p + off);
            buf_put(b, chunk, n);
            n = 0;
            buf_put_json_str(b, (const char *)p + off + 4, l);
            off += 4 + l;
            break;
        }
        default: memcpy(chunk + n, "null", 4); n += 4; break;
        }
    }
    buf_put(b, chunk, n);
    buf_putc(b, ']');
}

int infer_encode(const infer_request *r, const infer_result *res, const char *model,
                 const char *version, buf *out, size_t *json_len, bool *binary, ts_err *err)
{
    *binary = false;
    buf_puts(out, "{\"model_name\":");
    buf_put_json_str(out, model, strlen(model));
    buf_puts(out, ",\"model_version\":");
    buf_put_json_str(out, version, strlen(version));
    if (r->id) {
        buf_puts(out, ",\"id\":");
        buf_put_json_str(out, r->id, strlen(r->id));
    }
    buf_puts(out, ",\"outputs\":[");
    for (size_t i = 0; i < res->n; i++) {
        const ts_tensor *t = &res->tensors[i];
        if (i) buf_putc(out, ',');
        buf_puts(out, "{\"name\":");
        buf_put_json_str(out, t->name, strlen(t->name));
        buf_printf(out, ",\"datatype\":\"%s\",\"shape\":[", dtype_name(t->dt));
        for (size_t d = 0; d < t->ndim; d++) buf_printf(out, "%s%lld", d ? "," : "", (long long)t->shape[d]);
        buf_putc(out, ']');
        if (res->binary[i]) {
            buf_printf(out, ",\"parameters\":{\"binary_data_size\":%zu}}", t->nbytes);
            *binary = true;
        } else {
            buf_puts(out, ",\"data\":");
            put_json_data(out, t);
            buf_putc(out, '}');
        }
    }
    buf_puts(out, "]}");
    *json_len = out->len;
    for (size_t i = 0; i < res->n; i++)
        if (res->binary[i]) buf_put(out, res->tensors[i].data, res->tensors[i].nbytes);
    if (buf_failed(out)) {
        ts_err_set(err, TS_INTERNAL_ERROR, "reply exceeds the %zu-byte response limit", out->limit);
        return -1;
    }
    return 0;
}

int infer_synth_request(const model_sig *sig, int64_t batch, infer_request *r, ts_err *err)
{
    memset(r, 0, sizeof *r);
    r->inputs = calloc(sig->n_inputs ? sig->n_inputs : 1, sizeof *r->inputs);
    if (!r->inputs) {
        ts_err_set(err, TS_INTERNAL_ERROR, "out of memory");
        return -1;
    }
    for (size_t i = 0; i < sig->n_inputs; i++) {
        const io_sig *s = &sig->inputs[i];
        ts_tensor *t = &r->inputs[i];
        r->n_inputs = i + 1;
        t->name = s->name;
        t->dt = s->dt;
        t->ndim = s->ndim;
        for (size_t d = 0; d < s->ndim; d++)
            t->shape[d] = s->dims[d] >= 0 ? s->dims[d] : (d == 0 ? batch : 1);
        if (infer_tensor_zero_fill(t, err)) return -1;
    }
    return 0;
}

int infer_tensor_zero_fill(ts_tensor *t, ts_err *err)
{
    size_t count = 1;
    for (size_t d = 0; d < t->ndim; d++) count *= (size_t)t->shape[d];
    free(t->owned);
    t->count = count;
    /* zeros; for BYTES that is count empty strings: a 4-byte zero length each */
    t->nbytes = t->dt == DT_BYTES ? 4 * count : count * dtype_size(t->dt);
    t->owned = calloc(t->nbytes ? t->nbytes : 1, 1);
    t->data = t->owned;
    if (!t->owned) {
        ts_err_set(err, TS_INTERNAL_ERROR, "out of memory");
        return -1;
    }
    return 0;
}
