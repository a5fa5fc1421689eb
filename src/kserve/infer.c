#include "infer.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jfast.h"


/* At most this many inputs or outputs in one request (models have far fewer; the bound
 * keeps the duplicate-name checks cheap). */
#define TS_MAX_IO 1024

/* No tensor may claim more elements than this, whatever its shape says. */
#define TS_MAX_ELEMENTS (INT64_C(1) << 31)

static void wr_u32le(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

/* ---- parsing ----------------------------------------------------------------------- */

static int parse_shape(json_t *js, const char *name, ts_tensor *t, ts_err *err)
{
    if (!json_is_array(js)) {
        ts_err_set(err, TS_BAD_REQUEST, "input '%s': \"shape\" must be an array of non-negative integers", name);
        return -1;
    }
    size_t nd = json_array_size(js);
    if (nd > TS_MAX_DIMS) {
        ts_err_set(err, TS_BAD_REQUEST, "input '%s': shape has %zu dimensions, at most %d are supported", name,
                   nd, TS_MAX_DIMS);
        return -1;
    }
    int64_t count = 1;
    for (size_t i = 0; i < nd; i++) {
        json_t *d = json_array_get(js, i);
        if (!json_is_integer(d) || json_integer_value(d) < 0) {
            ts_err_set(err, TS_BAD_REQUEST, "input '%s': shape[%zu] must be a non-negative integer", name, i);
            return -1;
        }
        int64_t v = json_integer_value(d);
        t->shape[i] = v;
        if (v != 0 && count > TS_MAX_ELEMENTS / v) {
            ts_err_set(err, TS_BAD_REQUEST, "input '%s': shape has more than %lld elements", name,
                       (long long)TS_MAX_ELEMENTS);
            return -1;
        }
        count *= v;
    }
    t->ndim = nd;
    t->count = (size_t)count;
    return 0;
}

/* Validates a BYTES payload in binary layout: exactly count elements filling n bytes. */
static int check_bytes_layout(const uint8_t *p, size_t n, size_t count, const char *name,
                              ts_err *err)
{
    size_t off = 0;
    for (size_t i = 0; i < count; i++) {
        if (n - off < 4) {
            ts_err_set(err, TS_BAD_REQUEST, "input '%s': BYTES data ends inside element %zu's length prefix",
                       name, i);
            return -1;
        }
        uint32_t l = dtype_rd_u32le(p + off);
        off += 4;
        if (l > n - off) {
            ts_err_set(err, TS_BAD_REQUEST, "input '%s': BYTES element %zu claims %u bytes, only %zu remain",
                       name, i, l, n - off);
            return -1;
        }
        off += l;
    }
    if (off != n) {
        ts_err_set(err, TS_BAD_REQUEST, "input '%s': %zu bytes left after %zu BYTES elements", name, n - off,
                   count);
        return -1;
    }
    return 0;
}

typedef struct {
    const char *name;
    ts_dtype dt;
    uint8_t *out;     /* numeric: count * size bytes */
    size_t idx, count;
    buf *bytes;       /* BYTES: serialized here */
    ts_err *err;
} json_fill;

static int fill_bad(json_fill *f, const char *what)
{
    ts_err_set(f->err, TS_BAD_REQUEST, "input '%s': element %zu: expected %s for datatype %s", f->name, f->idx,
               what, dtype_name(f->dt));
    return -1;
}

static int fill_int(json_fill *f, json_t *v, int64_t lo, uint64_t hi)
{
    if (!json_is_integer(v)) return fill_bad(f, "an integer");
    json_int_t x = json_integer_value(v);
    if ((int64_t)x < lo || (x >= 0 && (uint64_t)x > hi)) {
        ts_err_set(f->err, TS_BAD_REQUEST, "input '%s': element %zu: %lld is out of range for %s", f->name,
                   f->idx, (long long)x, dtype_name(f->dt));
        return -1;
    }
    uint8_t *p = f->out + f->idx * dtype_size(f->dt);
    switch (dtype_size(f->dt)) {
    case 1: { uint8_t u = (uint8_t)x; memcpy(p, &u, 1); break; }
    case 2: { uint16_t u = (uint16_t)x; memcpy(p, &u, 2); break; }
    case 4: { uint32_t u = (uint32_t)x; memcpy(p, &u, 4); break; }
    default: { uint64_t u = (uint64_t)x; memcpy(p, &u, 8); break; }
    }
    return 0;
}

static int fill_one(json_fill *f, json_t *v)
{
    uint8_t *p = f->out ? f->out + f->idx * dtype_size(f->dt) : NULL;
    switch (f->dt) {
    case DT_BOOL:
        if (!json_is_boolean(v)) return fill_bad(f, "true or false");
        *p = json_is_true(v) ? 1 : 0;
        return 0;
    case DT_UINT8: return fill_int(f, v, 0, UINT8_MAX);
    case DT_UINT16: return fill_int(f, v, 0, UINT16_MAX);
    case DT_UINT32: return fill_int(f, v, 0, UINT32_MAX);
    case DT_UINT64: return fill_int(f, v, 0, UINT64_MAX);
    case DT_INT8: return fill_int(f, v, INT8_MIN, INT8_MAX);
    case DT_INT16: return fill_int(f, v, INT16_MIN, INT16_MAX);
    case DT_INT32: return fill_int(f, v, INT32_MIN, INT32_MAX);
    case DT_INT64: return fill_int(f, v, INT64_MIN, INT64_MAX);
    case DT_FP16: case DT_BF16: case DT_FP32: case DT_FP64: {
        if (!json_is_number(v)) return fill_bad(f, "a number");
        double d = json_number_value(v);
        if (f->dt == DT_FP64) {
            memcpy(p, &d, 8);
            return 0;
        }
        bool inf;
        if (f->dt == DT_FP32) {
            float x = (float)d;
            memcpy(p, &x, 4);
            inf = isinf(x);
        } else {
            uint16_t h = f->dt == DT_FP16 ? dtype_f64_to_f16(d) : dtype_f64_to_bf16(d);
            memcpy(p, &h, 2);
            inf = (h & 0x7fffu) == (f->dt == DT_FP16 ? 0x7c00u : 0x7f80u);
        }
        if (inf) { /* JSON has no infinity: a finite number that overflows is a mistake */
            ts_err_set(f->err, TS_BAD_REQUEST, "input '%s': element %zu: %g is out of range for %s", f->name,
                       f->idx, d, dtype_name(f->dt));
            return -1;
        }
        return 0;
    }
    case DT_BYTES: {
        if (!json_is_string(v)) return fill_bad(f, "a string");
        size_t n = json_string_length(v);
        if (n > UINT32_MAX) return fill_bad(f, "a string under 4 GiB");
        uint8_t len[4];
        wr_u32le(len, (uint32_t)n);
        buf_put(f->bytes, len, 4);
        buf_put(f->bytes, json_string_value(v), n);
        return 0;
    }
    default: return fill_bad(f, "a supported datatype");
    }
}

/* Walks "data" row-major; nesting is allowed (KServe) but never deeper than the shape. */
static int fill_walk(json_fill *f, json_t *v, size_t depth, size_t max_depth)
{
    if (json_is_array(v)) {
        if (depth >= max_depth) {
            ts_err_set(f->err, TS_BAD_REQUEST, "input '%s': \"data\" is nested deeper than its shape", f->name);
            return -1;
        }
        size_t n = json_array_size(v);
        for (size_t i = 0; i < n; i++)
            if (fill_walk(f, json_array_get(v, i), depth + 1, max_depth)) return -1;
        return 0;
    }
    if (f->idx >= f->count) {
        ts_err_set(f->err, TS_BAD_REQUEST, "input '%s': \"data\" has more elements than shape's %zu", f->name,
                   f->count);
        return -1;
    }
    if (fill_one(f, v)) return -1;
    f->idx++;
    return 0;
}

static int parse_json_data(json_t *data, size_t json_len, ts_tensor *t, ts_err *err)
{
    /* Every JSON element takes at least one byte of text: a shape that claims more elements
     * than the JSON has bytes is a lie, and is refused before anything is allocated. */
    if (t->count > json_len) {
        ts_err_set(err, TS_BAD_REQUEST, "input '%s': shape claims %zu elements, more than \"data\" can hold",
                   t->name, t->count);
        return -1;
    }
    json_fill f = {.name = t->name, .dt = t->dt, .count = t->count, .err = err};
    buf bytes;
    buf_init(&bytes, SIZE_MAX);
    if (t->dt == DT_BYTES) {
        f.bytes = &bytes;
    } else {
        size_t n = t->count * dtype_size(t->dt);
        t->owned = malloc(n ? n : 1);
        if (!t->owned) {
            ts_err_set(err, TS_INTERNAL_ERROR, "input '%s': out of memory", t->name);
            return -1;
        }
        f.out = t->owned;
        t->nbytes = n;
    }
    /* a scalar "data" is allowed for a one-element tensor */
    int rc = fill_walk(&f, data, 0, t->ndim + 1);
    if (rc == 0 && f.idx != t->count) {
        ts_err_set(err, TS_BAD_REQUEST, "input '%s': \"data\" has %zu elements, shape needs %zu", t->name,
                   f.idx, t->count);
        rc = -1;
    }
    if (rc == 0 && t->dt == DT_BYTES) {
        if (buf_failed(&bytes)) {
            ts_err_set(err, TS_INTERNAL_ERROR, "input '%s': out of memory", t->name);
            rc = -1;
        } else {
            t->owned = bytes.data ? bytes.data : malloc(1);
            t->nbytes = bytes.len;
            bytes.data = NULL;
        }
    }
    buf_free(&bytes);
    if (rc == 0) t->data = t->owned;
    return rc;
}

/* The fast path's view of the request text: the data arrays it found, by input. */
typedef struct {
    const char *text;
    const jfast_span *spans;
    int n;
    bool failed; /* a data array the fast path could not take: redo it all with jansson */
    const parfor *par; /* threads a big array's numbers may be split across */
} fast_ctx;

static const jfast_span *fast_span_for(const fast_ctx *fc, size_t idx)
{
    for (int k = 0; fc && k < fc->n; k++)
        if (fc->spans[k].input == idx) return &fc->spans[k];
    return NULL;
}

static int parse_fast_data(fast_ctx *fc, const jfast_span *sp, size_t json_len, ts_tensor *t)
{
    if (t->dt == DT_BYTES || t->count > json_len) {
        fc->failed = true;
        return -1;
    }
    size_t n = t->count * dtype_size(t->dt);
    t->owned = malloc(n ? n : 1);
    if (!t->owned ||
        jfast_parse_array_par(fc->text + sp->start, fc->text + sp->end, t->dt, t->owned, t->count, fc->par)) {
        fc->failed = true;
        return -1;
    }
    t->data = t->owned;
    t->nbytes = n;
    return 0;
}

static int parse_input(json_t *in, size_t idx, size_t json_len, const uint8_t *bin, size_t bin_len, size_t *bin_off,
                       fast_ctx *fc, ts_tensor *t, ts_err *err)
{
    if (!json_is_object(in)) {
        ts_err_set(err, TS_BAD_REQUEST, "inputs[%zu] must be an object", idx);
        return -1;
    }
    json_t *name = json_object_get(in, "name");
    if (!json_is_string(name) || json_string_length(name) == 0 ||
        json_string_length(name) >= TS_NAME_MAX ||
        strlen(json_string_value(name)) != json_string_length(name)) {
        ts_err_set(err, TS_BAD_REQUEST, "inputs[%zu]: \"name\" must be a non-empty string under %d bytes", idx,
                   TS_NAME_MAX);
        return -1;
    }
    t->name = json_string_value(name);
    json_t *dt = json_object_get(in, "datatype");
    if (!json_is_string(dt)) {
        ts_err_set(err, TS_BAD_REQUEST, "input '%s': \"datatype\" must be a string", t->name);
        return -1;
    }
    t->dt = dtype_parse(json_string_value(dt));
    if (t->dt == DT_INVALID) {
        ts_err_set(err, TS_BAD_REQUEST, "input '%s': unknown datatype \"%.32s\"", t->name, json_string_value(dt));
        return -1;
    }
    if (parse_shape(json_object_get(in, "shape"), t->name, t, err)) return -1;

    json_t *params = json_object_get(in, "parameters");
    json_t *bds = json_is_object(params) ? json_object_get(params, "binary_data_size") : NULL;
    json_t *data = json_object_get(in, "data");
    if (bds && data) {
        ts_err_set(err, TS_BAD_REQUEST, "input '%s': both \"data\" and binary_data_size given", t->name);
        return -1;
    }
    if (!bds && !data) {
        ts_err_set(err, TS_BAD_REQUEST, "input '%s': no \"data\" and no parameters.binary_data_size", t->name);
        return -1;
    }
    const jfast_span *sp = data ? fast_span_for(fc, idx) : NULL;
    if (sp) return parse_fast_data(fc, sp, json_len, t);
    if (data) return parse_json_data(data, json_len, t, err);

    if (!json_is_integer(bds) || json_integer_value(bds) < 0) {
        ts_err_set(err, TS_BAD_REQUEST, "input '%s': binary_data_size must be a non-negative integer", t->name);
        return -1;
    }
    uint64_t n = (uint64_t)json_integer_value(bds);
    if (n > bin_len - *bin_off) {
        ts_err_set(err, TS_BAD_REQUEST,
                   "input '%s': binary_data_size %llu exceeds the %zu binary bytes left in the body",
                   t->name, (unsigned long long)n, bin_len - *bin_off);
        return -1;
    }
    t->data = bin + *bin_off;
    t->nbytes = (size_t)n;
    *bin_off += (size_t)n;
    if (t->dt == DT_BYTES) return check_bytes_layout(t->data, t->nbytes, t->count, t->name, err);
    if (t->nbytes != t->count * dtype_size(t->dt)) {
        ts_err_set(err, TS_BAD_REQUEST, "input '%s': binary_data_size %zu does not match shape (%zu x %zu bytes)",
                   t->name, t->nbytes, t->count, dtype_size(t->dt));
        return -1;
    }
    return 0;
}

static int parse_outputs(json_t *outs, infer_request *r, ts_err *err)
{
    if (!outs) return 0;
    if (!json_is_array(outs)) {
        ts_err_set(err, TS_BAD_REQUEST, "\"outputs\" must be an array");
        return -1;
    }
    size_t n = json_array_size(outs);
    if (n == 0) return 0;
    if (n > TS_MAX_IO) {
        ts_err_set(err, TS_BAD_REQUEST, "%zu outputs requested, at most %d", n, TS_MAX_IO);
        return -1;
    }
    r->outputs = calloc(n, sizeof *r->outputs);
    if (!r->outputs) {
        ts_err_set(err, TS_INTERNAL_ERROR, "out of memory");
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        json_t *o = json_array_get(outs, i);
        json_t *name = json_is_object(o) ? json_object_get(o, "name") : NULL;
        if (!json_is_string(name) || strlen(json_string_value(name)) != json_string_length(name)) {
            ts_err_set(err, TS_BAD_REQUEST, "outputs[%zu]: \"name\" must be a string", i);
            return -1;
        }
        r->outputs[i].name = json_string_value(name);
        json_t *p = json_object_get(o, "parameters");
        json_t *b = json_is_object(p) ? json_object_get(p, "binary_data") : NULL;
        if (b && !json_is_boolean(b)) {
            ts_err_set(err, TS_BAD_REQUEST, "output '%s': parameters.binary_data must be a boolean",
                       r->outputs[i].name);
            return -1;
        }
        json_t *cls = json_is_object(p) ? json_object_get(p, "classification") : NULL;
        if (cls) {
            ts_err_set(err, TS_BAD_REQUEST, "output '%s': the classification extension is not supported",
                       r->outputs[i].name);
            return -1;
        }
        r->outputs[i].binary = b ? json_is_true(b) : r->binary_output_default;
        for (size_t j = 0; j < i; j++)
            if (strcmp(r->outputs[j].name, r->outputs[i].name) == 0) {
                ts_err_set(err, TS_BAD_REQUEST, "output '%s' requested twice", r->outputs[i].name);
                return -1;
            }
        r->n_outputs = i + 1;
    }
    return 0;
}

static int parse_json_part(infer_request *r, const char *text, size_t text_len, size_t jlen,
                           fast_ctx *fc, ts_err *err);

bool infer_header_len(const char *v, int64_t *len, ts_err *err)
{
    *len = -1;
    if (!v) return true;
    char *end = NULL;
    errno = 0;
    long long n = strtoll(v, &end, 10);
    if (errno || end == v || *end || n < 0 || v[0] == '-' || v[0] == '+') {
        ts_err_set(err, TS_BAD_REQUEST, "Inference-Header-Content-Length \"%.40s\" is not a byte count", v);
        return false;
    }
    *len = n;
    return true;
}

int infer_parse(uint8_t *body, size_t len, int64_t header_len, size_t json_limit,
                infer_request *r, ts_err *err)
{
    return infer_parse_par(body, len, header_len, json_limit, NULL, r, err);
}

int infer_parse_par(uint8_t *body, size_t len, int64_t header_len, size_t json_limit, const parfor *par,
                    infer_request *r, ts_err *err)
{
    memset(r, 0, sizeof *r);
    r->body = body;
    r->body_len = len;
    size_t jlen = len;
    if (header_len >= 0) {
        if ((uint64_t)header_len > len) {
            ts_err_set(err, TS_BAD_REQUEST,
                       "Inference-Header-Content-Length %lld is larger than the %zu-byte body",
                       (long long)header_len, len);
            return -1;
        }
        jlen = (size_t)header_len;
    }
    if (jlen > json_limit) {
        ts_err_set(err, TS_PAYLOAD_TOO_LARGE, "JSON part of %zu bytes exceeds the %zu-byte limit", jlen, json_limit);
        return -1;
    }
    if (jlen == 0) {
        ts_err_set(err, TS_BAD_REQUEST, "empty request body: expected a JSON inference request");
        return -1;
    }
    /* Big JSON bodies: find the data arrays, let jansson parse only the skeleton around
     * them, and read the numbers straight into the tensors. Anything the fast path does
     * not take is parsed again, all of it, by jansson (which also words the errors). */
    if (jlen >= 16384) {
        jfast_span spans[JFAST_MAX_SPANS];
        int ns = jfast_find_data((const char *)body, jlen, spans, JFAST_MAX_SPANS);
        char *skel = ns > 0 ? malloc(jlen) : NULL;
        if (skel) {
            size_t sl = 0, from = 0; /* the text with each data array replaced by a 0 */
            for (int k = 0; k < ns; k++) {
                memcpy(skel + sl, body + from, spans[k].start - from);
                sl += spans[k].start - from;
                skel[sl++] = '0';
                from = spans[k].end;
            }
            memcpy(skel + sl, body + from, jlen - from);
            sl += jlen - from;
            fast_ctx fc = {(const char *)body, spans, ns, false, par};
            int rc = parse_json_part(r, skel, sl, jlen, &fc, err);
            free(skel);
            if (!fc.failed) return rc;
            uint8_t *keep = r->body;
            r->body = NULL;
            infer_request_free(r);
            r->body = keep;
            r->body_len = len;
        }
    }
    return parse_json_part(r, (const char *)body, jlen, jlen, NULL, err);
}

/* Parses text (the JSON part of the body, or the fast path's skeleton of it); jlen is the
 * JSON part's length in the body, where the binary part starts. */
static int parse_json_part(infer_request *r, const char *text, size_t text_len, size_t jlen,
                           fast_ctx *fc, ts_err *err)
{
    uint8_t *body = r->body;
    size_t len = r->body_len;
    json_error_t je;
    /* \u0000 is allowed: BYTES elements may hold NULs (we write them that way too) */
    json_t *root = json_loadb(text, text_len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &je);
    if (!root) {
        ts_err_set(err, TS_BAD_REQUEST, "malformed JSON at line %d column %d: %s", je.line, je.column, je.text);
        return -1;
    }
    r->json = root;
    if (!json_is_object(root)) {
        ts_err_set(err, TS_BAD_REQUEST, "the request must be a JSON object");
        return -1;
    }
    json_t *id = json_object_get(root, "id");
    if (id && (!json_is_string(id) || strlen(json_string_value(id)) != json_string_length(id))) {
        ts_err_set(err, TS_BAD_REQUEST, "\"id\" must be a string without NUL characters");
        return -1;
    }
    r->id = id ? json_string_value(id) : NULL;

    json_t *params = json_object_get(root, "parameters");
    if (params && !json_is_object(params)) {
        ts_err_set(err, TS_BAD_REQUEST, "\"parameters\" must be an object");
        return -1;
    }
    json_t *bdo = params ? json_object_get(params, "binary_data_output") : NULL;
    if (bdo && !json_is_boolean(bdo)) {
        ts_err_set(err, TS_BAD_REQUEST, "parameters.binary_data_output must be a boolean");
        return -1;
    }
    r->binary_output_default = bdo && json_is_true(bdo);
    json_t *prio = params ? json_object_get(params, "priority") : NULL;
    if (prio) {
        if (!json_is_integer(prio) || json_integer_value(prio) < 0 || json_integer_value(prio) > 1000) {
            ts_err_set(err, TS_BAD_REQUEST, "parameters.priority must be an integer level (1 = highest; 0 = the model's default)");
            return -1;
        }
        r->priority = (int)json_integer_value(prio);
    }
    json_t *to = params ? json_object_get(params, "timeout") : NULL;
    if (to) {
        if (!json_is_integer(to) || json_integer_value(to) < 0) {
            ts_err_set(err, TS_BAD_REQUEST, "parameters.timeout must be a non-negative integer (microseconds)");
            return -1;
        }
        r->timeout_us = json_integer_value(to);
    }

    /* empty is fine: a model may take no inputs (infer_bind checks what the model needs) */
    json_t *ins = json_object_get(root, "inputs");
    if (!json_is_array(ins)) {
        ts_err_set(err, TS_BAD_REQUEST, "\"inputs\" must be an array");
        return -1;
    }
    size_t nin = json_array_size(ins);
    if (nin > TS_MAX_IO) {
        ts_err_set(err, TS_BAD_REQUEST, "%zu inputs given, at most %d", nin, TS_MAX_IO);
        return -1;
    }
    r->inputs = calloc(nin ? nin : 1, sizeof *r->inputs);
    if (!r->inputs) {
        ts_err_set(err, TS_INTERNAL_ERROR, "out of memory");
        return -1;
    }
    const uint8_t *bin = body + jlen;
    size_t bin_len = len - jlen, bin_off = 0;
    for (size_t i = 0; i < nin; i++) {
        r->n_inputs = i + 1;
        if (parse_input(json_array_get(ins, i), i, jlen, bin, bin_len, &bin_off, fc, &r->inputs[i], err))
            return -1;
        for (size_t j = 0; j < i; j++)
            if (strcmp(r->inputs[j].name, r->inputs[i].name) == 0) {
                ts_err_set(err, TS_BAD_REQUEST, "input '%s' given twice", r->inputs[i].name);
                return -1;
            }
    }
    if (bin_off != bin_len) {
        ts_err_set(err, TS_BAD_REQUEST,
                   "binary data does not add up: inputs declare %zu bytes, the body carries %zu after "
                   "the %zu-byte JSON header",
                   bin_off, bin_len, jlen);
        return -1;
    }
    return parse_outputs(json_object_get(root, "outputs"), r, err);
}

void infer_request_free(infer_request *r)
{
    if (!r) return;
    for (size_t i = 0; i < r->n_inputs; i++) free(r->inputs[i].owned);
    free(r->inputs);
    free(r->outputs);
    if (r->json) json_decref((json_t *)r->json);
    free(r->body);
    memset(r, 0, sizeof *r);
}

/* ---- binding to the model --------------------------------------------------------- */

static void shape_str(const int64_t *d, size_t n, char *out, size_t len)
{
    size_t o = 0;
    o += (size_t)snprintf(out + o, len - o, "[");
    for (size_t i = 0; i < n && o < len; i++)
        o += (size_t)snprintf(out + o, len - o, "%s%lld", i ? "," : "", (long long)d[i]);
    if (o < len) snprintf(out + o, len - o, "]");
}

int infer_bind(const model_sig *sig, infer_request *r, ts_err *err)
{
    for (size_t i = 0; i < r->n_inputs; i++) {
        const ts_tensor *t = &r->inputs[i];
        const io_sig *s = NULL;
        for (size_t k = 0; k < sig->n_inputs; k++)
            if (strcmp(sig->inputs[k].name, t->name) == 0) s = &sig->inputs[k];
        if (!s) {
            ts_err_set(err, TS_BAD_REQUEST, "unexpected input '%s': the model has no input of that name", t->name);
            return -1;
        }
        if (s->dt != t->dt) {
            ts_err_set(err, TS_BAD_REQUEST, "input '%s': datatype %s does not match the model's %s", t->name,
                       dtype_name(t->dt), dtype_name(s->dt));
            return -1;
        }
        /* ORT reports no dims both for scalars and for inputs of unknown rank: leave those
         * to ORT's own check (its invalid-argument error becomes a 400) */
        bool ok = s->ndim == 0 || s->ndim == t->ndim;
        for (size_t d = 0; ok && d < s->ndim; d++)
            if (s->dims[d] >= 0 && s->dims[d] != t->shape[d]) ok = false;
        if (!ok) {
            char want[160], got[160];
            shape_str(s->dims, s->ndim, want, sizeof want);
            shape_str(t->shape, t->ndim, got, sizeof got);
            ts_err_set(err, TS_BAD_REQUEST, "input '%s': shape %s does not match the model's %s (-1 = any)",
                       t->name, got, want);
            return -1;
        }
    }
    if (r->n_inputs != sig->n_inputs) {
        for (size_t k = 0; k < sig->n_inputs; k++) {
            bool found = false;
            for (size_t i = 0; i < r->n_inputs; i++)
                if (strcmp(sig->inputs[k].name, r->inputs[i].name) == 0) found = true;
            if (!found) {
                ts_err_set(err, TS_BAD_REQUEST, "missing input '%s' (%s)", sig->inputs[k].name,
                           dtype_name(sig->inputs[k].dt));
                return -1;
            }
        }
    }
    for (size_t i = 0; i < r->n_outputs; i++) {
        bool found = false;
        for (size_t k = 0; k < sig->n_outputs; k++)
            if (strcmp(sig->outputs[k].name, r->outputs[i].name) == 0) found = true;
        if (!found) {
            ts_err_set(err, TS_BAD_REQUEST, "unknown output '%s' requested", r->outputs[i].name);
            return -1;
        }
    }
    /* every input is present exactly once: put them in the signature's order, so that
     * requests batched together line up input by input */
    for (size_t k = 0; k < sig->n_inputs; k++)
        for (size_t i = k; i < r->n_inputs; i++)
            if (strcmp(r->inputs[i].name, sig->inputs[k].name) == 0 && i != k) {
                ts_tensor tmp = r->inputs[k];
                r->inputs[k] = r->inputs[i];
                r->inputs[i] = tmp;
            }
    return 0;
}

int64_t infer_rows(const infer_request *r)
{
    if (r->n_inputs == 0 || r->inputs[0].ndim == 0) return -1;
    int64_t rows = r->inputs[0].shape[0];
    for (size_t i = 1; i < r->n_inputs; i++)
        if (r->inputs[i].ndim == 0 || r->inputs[i].shape[0] != rows) return -1;
    return rows;
}

uint64_t infer_batch_key(const infer_request *r)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a over dtypes and non-batch dims */
#define MIX(v) (h = (h ^ (uint64_t)(v)) * 1099511628211ull)
    for (size_t i = 0; i < r->n_inputs; i++) {
        const ts_tensor *t = &r->inputs[i];
        MIX(t->dt);
        MIX(t->ndim);
        for (size_t d = 1; d < t->ndim; d++) MIX(t->shape[d]);
    }
#undef MIX
    return h ? h : 1;
}
