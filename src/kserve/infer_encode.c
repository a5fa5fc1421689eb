/* infer_encode.c: the reply (JSON, or a JSON header and binary outputs), and the zero-filled
 * requests warm-up runs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "infer.h"
#include "jfast.h"

/* Elements [from, to) of t's "data" array, with the '[' before element 0 and the ']' after
 * the last: numbers go through jfast's formatters into a stack chunk, appended in bulk.
 * BYTES only whole (its elements are found by walking from the start). */
static void put_json_range(buf *b, const ts_tensor *t, size_t from, size_t to)
{
    const uint8_t *p = t->data;
    char chunk[4096];
    size_t n = 0, off = 0;
    if (from == 0) buf_putc(b, '[');
    for (size_t i = from; i < to; i++) {
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
    if (to == t->count) buf_putc(b, ']');
}

/* A big output's numbers, formatted by several threads into pieces of the reply: each
 * range goes into its own buffer, and the pieces are written out in order (writev) with no
 * copy joining them. */
typedef struct {
    const ts_tensor *t;
    buf *piece; /* range k's buffer */
    size_t nr;
} fmt_split;

static void fmt_range(void *arg, size_t k)
{
    fmt_split *fs = arg;
    size_t c = fs->t->count;
    put_json_range(&fs->piece[k], fs->t, c * k / fs->nr, c * (k + 1) / fs->nr);
}

int infer_encode(const infer_request *r, const infer_result *res, const char *model,
                 const char *version, buf *out, size_t *json_len, bool *binary, ts_err *err)
{
    return infer_encode_par(r, res, model, version, NULL, out, NULL, NULL, json_len, binary, err);
}

void infer_pieces_free(buf *more, size_t n)
{
    for (size_t i = 0; more && i < n; i++) buf_free(&more[i]);
    free(more);
}

int infer_encode_par(const infer_request *r, const infer_result *res, const char *model,
                     const char *version, const parfor *par, buf *out, buf **more, size_t *n_more,
                     size_t *json_len, bool *binary, ts_err *err)
{
    *binary = false;
    buf *extra = NULL, *cur = out; /* the pieces after out, and the one being written */
    size_t nx = 0;
    if (more) {
        *more = NULL;
        *n_more = 0;
    }
    bool split = more && par && par->ways > 1;
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
        if (i) buf_putc(cur, ',');
        buf_puts(cur, "{\"name\":");
        buf_put_json_str(cur, t->name, strlen(t->name));
        buf_printf(cur, ",\"datatype\":\"%s\",\"shape\":[", dtype_name(t->dt));
        for (size_t d = 0; d < t->ndim; d++) buf_printf(cur, "%s%lld", d ? "," : "", (long long)t->shape[d]);
        buf_putc(cur, ']');
        if (res->binary[i]) {
            buf_printf(cur, ",\"parameters\":{\"binary_data_size\":%zu}}", t->nbytes);
            *binary = true;
            continue;
        }
        buf_puts(cur, ",\"data\":");
        size_t nr = par ? par->ways * 2 : 0; /* ranges, and one piece for what follows */
        if (nr > INFER_SPLIT_RANGES) nr = INFER_SPLIT_RANGES;
        /* Split only what surely fits: the one buffer stops at the limit, but ranges formatted
         * side by side would each grow until the end's check (several times the limit). */
        size_t used = out->len;
        for (size_t k = 0; k < nx; k++) used += extra[k].len;
        bool fits = used < out->limit && t->count <= (out->limit - used) / INFER_ELEM_TEXT_MAX;
        if (!split || !fits || t->dt == DT_BYTES || t->count < INFER_SPLIT_MIN || nx + nr + 1 > INFER_PIECES_MAX) {
            put_json_range(cur, t, 0, t->count);
            buf_putc(cur, '}');
            continue;
        }
        if (!extra) extra = calloc(INFER_PIECES_MAX, sizeof *extra);
        if (!extra) {
            ts_err_set(err, TS_INTERNAL_ERROR, "out of memory for the reply");
            return -1;
        }
        for (size_t k = 0; k <= nr; k++) buf_init(&extra[nx + k], out->limit - used);
        fmt_split fs = {t, &extra[nx], nr};
        parfor_run(par, fmt_range, &fs, nr);
        nx += nr + 1;
        cur = &extra[nx - 1];
        buf_putc(cur, '}');
    }
    buf_puts(cur, "]}");
    size_t total = out->len;
    bool failed = buf_failed(out);
    for (size_t k = 0; k < nx; k++) {
        total += extra[k].len;
        failed |= buf_failed(&extra[k]);
    }
    *json_len = total;
    for (size_t i = 0; i < res->n; i++)
        if (res->binary[i]) {
            buf_put(cur, res->tensors[i].data, res->tensors[i].nbytes);
            total += res->tensors[i].nbytes;
        }
    failed |= buf_failed(cur);
    if (failed || total > out->limit) {
        infer_pieces_free(extra, nx);
        ts_err_set(err, TS_INTERNAL_ERROR, "reply exceeds the %zu-byte response limit", out->limit);
        return -1;
    }
    if (more) {
        *more = extra;
        *n_more = nx;
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
