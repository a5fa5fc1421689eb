/* The model rewrite behind quant.h: protobuf-c's generated ONNX types, mutated in place. Every
 * allocation put into the tree uses malloc, protobuf-c's default allocator, so
 * onnx__model_proto__free_unpacked frees old and new parts alike. */
#include "quant.h"
#include "quant_block.h"
#include "quant_io.h"
#include "err.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "onnx.pb-c.h"

#define QM_FILE_MAX ((size_t)2 << 30)          /* protobuf's own limit for one message */
#define QM_ONE_FILE_MAX ((size_t)1800 << 20)   /* above this the weights go to a side file */
#define QM_EXT_MIN 1024                        /* smaller initializers stay inline */
#define QM_EXT_ALIGN 4096                      /* side-file offsets, page-aligned for mmap */
#define QM_TENSOR_MAX ((size_t)1 << 34)        /* one external tensor */

enum { DT_FLOAT = 1, DT_UINT8 = 2, DT_FLOAT16 = 10 };

/* One B already rewritten: a second MatMul on the same weights reuses its tensors. */
typedef struct {
    char *src; /* the initializer's name */
    bool transposed;
    char *codes, *scales, *zp;
    int64_t k, n;
} done_b;

typedef struct {
    Onnx__ModelProto *m;
    Onnx__GraphProto *g;
    const quant_opts *o;
    quant_report *r;
    char dir[4096]; /* the input model's folder: external data is relative to it */
    done_b *done;
    size_t n_done;
    char *err;
    size_t errlen;
} qctx;

/* ---- small helpers ------------------------------------------------------------------ */

static char *xstrdup(const char *s)
{
    char *p = strdup(s ? s : "");
    if (!p) abort(); /* a tool: running out of memory for a name ends it */
    return p;
}

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) abort();
    return p;
}

static void *xcalloc(size_t n, size_t sz)
{
    void *p = calloc(n ? n : 1, sz ? sz : 1);
    if (!p) abort();
    return p;
}

static Onnx__TensorProto *find_init(Onnx__GraphProto *g, const char *name, size_t *idx)
{
    for (size_t i = 0; i < g->n_initializer; i++)
        if (g->initializer[i]->name && !strcmp(g->initializer[i]->name, name)) {
            if (idx) *idx = i;
            return g->initializer[i];
        }
    return NULL;
}

static Onnx__NodeProto *producer(Onnx__GraphProto *g, const char *name)
{
    for (size_t i = 0; i < g->n_node; i++)
        for (size_t j = 0; j < g->node[i]->n_output; j++)
            if (!strcmp(g->node[i]->output[j], name)) return g->node[i];
    return NULL;
}

static bool is_graph_input(const Onnx__GraphProto *g, const char *name)
{
    for (size_t i = 0; i < g->n_input; i++)
        if (g->input[i]->name && !strcmp(g->input[i]->name, name)) return true;
    return false;
}

static bool used_in_graph(const Onnx__GraphProto *g, const char *name);

static bool used_in_node(const Onnx__NodeProto *n, const char *name)
{
    for (size_t j = 0; j < n->n_input; j++)
        if (!strcmp(n->input[j], name)) return true;
    for (size_t a = 0; a < n->n_attribute; a++) { /* If / Loop / Scan bodies see the outer names */
        const Onnx__AttributeProto *at = n->attribute[a];
        if (at->g && used_in_graph(at->g, name)) return true;
        for (size_t k = 0; k < at->n_graphs; k++)
            if (used_in_graph(at->graphs[k], name)) return true;
    }
    return false;
}

static bool used_in_graph(const Onnx__GraphProto *g, const char *name)
{
    for (size_t i = 0; i < g->n_node; i++)
        if (used_in_node(g->node[i], name)) return true;
    for (size_t i = 0; i < g->n_output; i++)
        if (g->output[i]->name && !strcmp(g->output[i]->name, name)) return true;
    return false;
}

static bool name_taken(Onnx__GraphProto *g, const char *name)
{
    return find_init(g, name, NULL) || producer(g, name) || is_graph_input(g, name);
}

/* base + suffix, made unique in the graph. */
static char *fresh_name(Onnx__GraphProto *g, const char *base, const char *suffix)
{
    size_t cap = strlen(base) + strlen(suffix) + 24;
    char *s = xmalloc(cap);
    snprintf(s, cap, "%s%s", base, suffix);
    for (unsigned i = 1; name_taken(g, s); i++) snprintf(s, cap, "%s%s_%u", base, suffix, i);
    return s;
}

static const Onnx__AttributeProto *attr_get(const Onnx__NodeProto *n, const char *name)
{
    for (size_t a = 0; a < n->n_attribute; a++)
        if (n->attribute[a]->name && !strcmp(n->attribute[a]->name, name)) return n->attribute[a];
    return NULL;
}

static bool default_domain(const char *d) { return !d || !d[0] || !strcmp(d, "ai.onnx"); }

static void skip(qctx *c, bool dynamic, const Onnx__NodeProto *n, const char *fmt, const char *detail)
{
    c->r->skipped++;
    if (dynamic) return; /* attention's products: expected, not worth a note */
    c->r->skipped_other++;
    if (!c->r->why[0]) {
        char what[200];
        snprintf(what, sizeof what, fmt, detail);
        snprintf(c->r->why, sizeof c->r->why, "MatMul '%.80s': %s", n->name ? n->name : "?", what);
    }
}

/* ---- external data ------------------------------------------------------------------ */

static const char *ext_get(const Onnx__TensorProto *t, const char *key)
{
    for (size_t i = 0; i < t->n_external_data; i++)
        if (t->external_data[i]->key && !strcmp(t->external_data[i]->key, key)) return t->external_data[i]->value;
    return NULL;
}

static size_t dtype_size(int32_t dt)
{
    switch (dt) {
    case 1: case 6: case 12: return 4;  /* float, int32, uint32 */
    case 2: case 3: case 9: return 1;   /* uint8, int8, bool */
    case 4: case 5: case 10: case 16: return 2; /* uint16, int16, float16, bfloat16 */
    case 7: case 11: case 13: return 8; /* int64, double, uint64 */
    default: return 0;
    }
}

static int parse_size(const char *s, size_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = s ? strtoull(s, &end, 10) : 0;
    if (!s || end == s || *end || errno || s[0] == '-') return -1;
    *out = (size_t)v;
    return 0;
}

static void ext_clear(Onnx__TensorProto *t)
{
    for (size_t i = 0; i < t->n_external_data; i++)
        protobuf_c_message_free_unpacked(&t->external_data[i]->base, NULL);
    free(t->external_data);
    t->external_data = NULL;
    t->n_external_data = 0;
    t->has_data_location = 0;
    t->data_location = ONNX__TENSOR_PROTO__DATA_LOCATION__DEFAULT;
}

/* Brings one tensor's external bytes into raw_data. Locations are file names relative to the
 * model's folder (as ONNX and ONNX Runtime require): an absolute one or one with ".." is refused. */
static int ext_load(qctx *c, Onnx__TensorProto *t)
{
    const char *loc = ext_get(t, "location"), *off_s = ext_get(t, "offset"), *len_s = ext_get(t, "length");
    const char *tn = t->name ? t->name : "?";
    if (!loc || !loc[0] || loc[0] == '/' || strstr(loc, ".."))
        return ts_fail(c->err, c->errlen, "initializer '%.100s': external data location '%.200s' is not a file name "
                       "relative to the model's folder", tn, loc ? loc : "");
    size_t off = 0, len = 0, elems = 1;
    if (off_s && parse_size(off_s, &off) != 0)
        return ts_fail(c->err, c->errlen, "initializer '%.100s': external data offset '%.40s' is not a number", tn, off_s);
    for (size_t i = 0; i < t->n_dims; i++) {
        if (t->dims[i] < 0 || (t->dims[i] && elems > QM_TENSOR_MAX / (size_t)t->dims[i]))
            return ts_fail(c->err, c->errlen, "initializer '%.100s': bad dims", tn);
        elems *= (size_t)t->dims[i];
    }
    if (len_s) {
        if (parse_size(len_s, &len) != 0)
            return ts_fail(c->err, c->errlen, "initializer '%.100s': external data length '%.40s' is not a number", tn, len_s);
    } else if (dtype_size(t->data_type)) {
        len = elems * dtype_size(t->data_type);
    } else {
        return ts_fail(c->err, c->errlen, "initializer '%.100s': external data without a length", tn);
    }
    if (len > QM_TENSOR_MAX) return ts_fail(c->err, c->errlen, "initializer '%.100s': %zu bytes is too large", tn, len);
    char path[8192];
    snprintf(path, sizeof path, "%s/%s", c->dir, loc);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return ts_fail(c->err, c->errlen, "initializer '%.100s': %.300s: %s", tn, path, strerror(errno));
    uint8_t *buf = xmalloc(len);
    size_t got = 0;
    while (got < len) {
        ssize_t k = pread(fd, buf + got, len - got, (off_t)(off + got));
        if (k <= 0) break;
        got += (size_t)k;
    }
    close(fd);
    if (got < len) {
        free(buf);
        return ts_fail(c->err, c->errlen, "initializer '%.100s': %.300s holds %zu of its %zu bytes at offset %zu", tn,
                       path, got, len, off);
    }
    ext_clear(t);
    if (t->has_raw_data) free(t->raw_data.data);
    t->has_raw_data = 1;
    t->raw_data.data = buf;
    t->raw_data.len = len;
    return 0;
}

static int ext_load_all(qctx *c)
{
    for (size_t i = 0; i < c->g->n_initializer; i++) {
        Onnx__TensorProto *t = c->g->initializer[i];
        if (t->has_data_location && t->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL &&
            ext_load(c, t) != 0)
            return -1;
    }
    return 0;
}

/* ---- the rewrite -------------------------------------------------------------------- */

/* The FP32 weights of t (raw_data or float_data), copied: elems floats, or NULL. */
static float *weights_of(const Onnx__TensorProto *t, size_t elems)
{
    float *w = xmalloc(elems * sizeof *w);
    if (t->has_raw_data && t->raw_data.len == elems * sizeof(float)) {
        memcpy(w, t->raw_data.data, elems * sizeof *w); /* little-endian, as ONNX stores it */
        return w;
    }
    if (!t->has_raw_data && t->n_float_data == elems) {
        memcpy(w, t->float_data, elems * sizeof *w);
        return w;
    }
    free(w);
    return NULL;
}

static Onnx__TensorProto *tensor_new(char *name, int32_t dt, const int64_t *dims, size_t nd, void *data, size_t len)
{
    Onnx__TensorProto *t = xmalloc(sizeof *t);
    onnx__tensor_proto__init(t);
    t->name = name;
    t->n_dims = nd;
    t->dims = xmalloc(nd * sizeof *t->dims);
    memcpy(t->dims, dims, nd * sizeof *dims);
    t->has_data_type = 1;
    t->data_type = dt;
    t->has_raw_data = 1;
    t->raw_data.data = data;
    t->raw_data.len = len;
    return t;
}

static void add_init(Onnx__GraphProto *g, Onnx__TensorProto *t)
{
    Onnx__TensorProto **a = realloc(g->initializer, (g->n_initializer + 1) * sizeof *a);
    if (!a) abort();
    g->initializer = a;
    g->initializer[g->n_initializer++] = t;
}

static Onnx__AttributeProto *attr_int_new(const char *name, int64_t v)
{
    Onnx__AttributeProto *a = xmalloc(sizeof *a);
    onnx__attribute_proto__init(a);
    a->name = xstrdup(name);
    a->has_type = 1;
    a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT;
    a->has_i = 1;
    a->i = v;
    return a;
}

/* Quantizes W (FP32; [K, N], or [N, K] when transposed) into three (or two) new initializers. */
static done_b *quantize_b(qctx *c, const Onnx__TensorProto *t, bool transposed)
{
    int64_t k = transposed ? t->dims[1] : t->dims[0], n = transposed ? t->dims[0] : t->dims[1];
    size_t K = (size_t)k, N = (size_t)n, block = (size_t)c->o->block;
    int bits = c->o->bits;
    float *w = weights_of(t, K * N);
    if (!w) return NULL;
    size_t nb = qb_blocks(K, block), blob = qb_blob(block, bits), zpb = qb_zp_bytes(nb, bits);
    uint8_t *codes = xmalloc(N * nb * blob);
    float *scales = xmalloc(N * nb * sizeof *scales);
    uint8_t *zp = c->o->zero_points ? xmalloc(N * zpb) : NULL;
    float *row = xmalloc(K * sizeof *row);
    uint8_t *zrow = xmalloc(nb);
    for (size_t j = 0; j < N; j++) {
        for (size_t i = 0; i < K; i++) row[i] = transposed ? w[j * K + i] : w[i * N + j];
        qb_quantize_row(row, K, block, bits, codes + j * nb * blob, scales + j * nb, zp ? zrow : NULL);
        if (zp) qb_pack_zero_points(zrow, nb, bits, zp + j * zpb);
    }
    free(row);
    free(zrow);
    free(w);
    done_b *d = realloc(c->done, (c->n_done + 1) * sizeof *d);
    if (!d) abort();
    c->done = d;
    d = &c->done[c->n_done++];
    memset(d, 0, sizeof *d);
    d->src = xstrdup(t->name);
    d->transposed = transposed;
    d->k = k;
    d->n = n;
    char suffix[16];
    snprintf(suffix, sizeof suffix, "_Q%d", bits);
    d->codes = fresh_name(c->g, t->name, suffix);
    int64_t cd[3] = {n, (int64_t)nb, (int64_t)blob};
    add_init(c->g, tensor_new(xstrdup(d->codes), DT_UINT8, cd, 3, codes, N * nb * blob));
    d->scales = fresh_name(c->g, t->name, "_scales");
    int64_t sd[2] = {n, (int64_t)nb};
    add_init(c->g, tensor_new(xstrdup(d->scales), DT_FLOAT, sd, 2, scales, N * nb * sizeof *scales));
    if (zp) {
        d->zp = fresh_name(c->g, t->name, "_zp");
        int64_t zd[2] = {n, (int64_t)zpb};
        add_init(c->g, tensor_new(xstrdup(d->zp), DT_UINT8, zd, 2, zp, N * zpb));
    }
    c->r->weights_in_bytes += K * N * sizeof(float);
    c->r->weights_out_bytes += N * nb * blob + N * nb * sizeof(float) + (zp ? N * zpb : 0);
    return d;
}

/* The MatMul node becomes MatMulNBits over d, its A and output unchanged. */
static void rewrite_node(qctx *c, Onnx__NodeProto *node, const done_b *d)
{
    char **in = xcalloc(4, sizeof *in);
    size_t n_in = 0;
    in[n_in++] = node->input[0];
    free(node->input[1]);
    free(node->input);
    in[n_in++] = xstrdup(d->codes);
    in[n_in++] = xstrdup(d->scales);
    if (d->zp) in[n_in++] = xstrdup(d->zp);
    node->input = in;
    node->n_input = n_in;
    free(node->op_type);
    node->op_type = xstrdup("MatMulNBits");
    if (node->domain != protobuf_c_empty_string) free(node->domain);
    node->domain = xstrdup("com.microsoft");
    for (size_t a = 0; a < node->n_attribute; a++) protobuf_c_message_free_unpacked(&node->attribute[a]->base, NULL);
    free(node->attribute);
    node->attribute = xcalloc(5, sizeof *node->attribute);
    node->n_attribute = 0;
    node->attribute[node->n_attribute++] = attr_int_new("K", d->k);
    node->attribute[node->n_attribute++] = attr_int_new("N", d->n);
    node->attribute[node->n_attribute++] = attr_int_new("bits", c->o->bits);
    node->attribute[node->n_attribute++] = attr_int_new("block_size", c->o->block);
    if (c->o->accuracy_level > 0) node->attribute[node->n_attribute++] = attr_int_new("accuracy_level", c->o->accuracy_level);
}

/* A Transpose that swaps the two axes of a 2-D tensor: perm [1, 0], or none (reversal). */
static bool is_swap(const Onnx__NodeProto *p)
{
    if (!p || strcmp(p->op_type, "Transpose") != 0 || !default_domain(p->domain) || p->n_input != 1) return false;
    const Onnx__AttributeProto *perm = attr_get(p, "perm");
    return !perm || (perm->n_ints == 2 && perm->ints[0] == 1 && perm->ints[1] == 0);
}

static void visit_matmul(qctx *c, Onnx__NodeProto *node)
{
    c->r->matmuls++;
    if (node->n_input != 2) {
        skip(c, false, node, "%s", "not two inputs");
        return;
    }
    const char *b = node->input[1];
    Onnx__TensorProto *t = find_init(c->g, b, NULL);
    bool transposed = false;
    if (!t) {
        Onnx__NodeProto *p = producer(c->g, b);
        if (is_swap(p)) t = find_init(c->g, p->input[0], NULL);
        if (!t) {
            skip(c, true, node, "%s", "B is computed");
            return;
        }
        transposed = true;
    }
    if (is_graph_input(c->g, t->name)) {
        skip(c, false, node, "B '%.80s' is also a graph input (a caller may replace it)", t->name);
        return;
    }
    if (t->data_type != DT_FLOAT) {
        skip(c, false, node, "B '%.80s' is not FP32", t->name);
        return;
    }
    if (t->n_dims != 2 || t->dims[0] < 1 || t->dims[1] < 1 || t->dims[0] > (int64_t)1 << 30 ||
        t->dims[1] > (int64_t)1 << 30 || (size_t)t->dims[0] * (size_t)t->dims[1] > QM_TENSOR_MAX / sizeof(float)) {
        skip(c, false, node, "B '%.80s' is not a 2-D matrix", t->name);
        return;
    }
    if (c->o->min_elements && (size_t)t->dims[0] * (size_t)t->dims[1] < c->o->min_elements) {
        skip(c, false, node, "B '%.80s' is smaller than --min-elements", t->name);
        return;
    }
    const done_b *d = NULL;
    for (size_t i = 0; i < c->n_done && !d; i++)
        if (!strcmp(c->done[i].src, t->name) && c->done[i].transposed == transposed) d = &c->done[i];
    if (!d && !(d = quantize_b(c, t, transposed))) {
        skip(c, false, node, "B '%.80s' holds no FP32 data of its shape", t->name);
        return;
    }
    c->r->quantized++;
    if (transposed) c->r->via_transpose++;
    rewrite_node(c, node, d);
}

/* Drops the Transposes and initializers that fed only rewritten MatMuls. */
static void drop_unused(qctx *c)
{
    Onnx__GraphProto *g = c->g;
    for (size_t d = 0; d < c->n_done; d++) {
        if (!c->done[d].transposed) continue;
        for (size_t i = 0; i < g->n_node; i++) {
            Onnx__NodeProto *p = g->node[i];
            if (!is_swap(p) || strcmp(p->input[0], c->done[d].src) != 0 || p->n_output != 1) continue;
            if (used_in_graph(g, p->output[0])) continue;
            protobuf_c_message_free_unpacked(&p->base, NULL);
            memmove(&g->node[i], &g->node[i + 1], (g->n_node - i - 1) * sizeof *g->node);
            g->n_node--;
            i--;
        }
    }
    for (size_t d = 0; d < c->n_done; d++) {
        size_t idx;
        Onnx__TensorProto *t = find_init(g, c->done[d].src, &idx);
        if (!t || used_in_graph(g, t->name)) continue;
        protobuf_c_message_free_unpacked(&t->base, NULL);
        memmove(&g->initializer[idx], &g->initializer[idx + 1], (g->n_initializer - idx - 1) * sizeof *g->initializer);
        g->n_initializer--;
    }
}

static void import_ms_opset(Onnx__ModelProto *m)
{
    for (size_t i = 0; i < m->n_opset_import; i++)
        if (m->opset_import[i]->domain && !strcmp(m->opset_import[i]->domain, "com.microsoft")) return;
    Onnx__OperatorSetIdProto *op = xmalloc(sizeof *op);
    onnx__operator_set_id_proto__init(op);
    op->domain = xstrdup("com.microsoft");
    op->has_version = 1;
    op->version = 1;
    Onnx__OperatorSetIdProto **a = realloc(m->opset_import, (m->n_opset_import + 1) * sizeof *a);
    if (!a) abort();
    m->opset_import = a;
    m->opset_import[m->n_opset_import++] = op;
}

/* ---- files -------------------------------------------------------------------------- */

uint8_t *quant_read_file(const char *path, size_t *len, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    struct stat st;
    if (!f || fstat(fileno(f), &st) != 0) {
        ts_fail(err, errlen, "%s: %s", path, strerror(errno));
        if (f) fclose(f);
        return NULL;
    }
    if (!S_ISREG(st.st_mode) || (size_t)st.st_size >= QM_FILE_MAX) {
        ts_fail(err, errlen, "%s: not a regular file under 2 GiB (larger models keep their weights as external data)", path);
        fclose(f);
        return NULL;
    }
    *len = (size_t)st.st_size;
    uint8_t *buf = xmalloc(*len);
    size_t got = fread(buf, 1, *len, f);
    fclose(f);
    if (got != *len) {
        free(buf);
        ts_fail(err, errlen, "%s: short read", path);
        return NULL;
    }
    return buf;
}

typedef struct {
    ProtobufCBuffer base; /* first: protobuf-c passes &base back */
    FILE *f;
    bool bad;
} file_sink;

static void sink_append(ProtobufCBuffer *b, size_t len, const uint8_t *data)
{
    file_sink *s = (file_sink *)b;
    if (!s->bad && fwrite(data, 1, len, s->f) != len) s->bad = true;
}

static Onnx__StringStringEntryProto *entry_new(const char *k, const char *v)
{
    Onnx__StringStringEntryProto *e = xmalloc(sizeof *e);
    onnx__string_string_entry_proto__init(e);
    e->key = xstrdup(k);
    e->value = xstrdup(v);
    return e;
}

/* Moves every initializer of QM_EXT_MIN bytes or more into the side file at data_path. */
static int write_side_file(qctx *c, const char *data_path, const char *location, size_t *bytes)
{
    FILE *f = fopen(data_path, "wb");
    if (!f) return ts_fail(c->err, c->errlen, "%s: %s", data_path, strerror(errno));
    static const uint8_t zeros[QM_EXT_ALIGN];
    size_t off = 0;
    bool bad = false;
    for (size_t i = 0; i < c->g->n_initializer && !bad; i++) {
        Onnx__TensorProto *t = c->g->initializer[i];
        if (!t->has_raw_data || t->raw_data.len < QM_EXT_MIN) continue;
        size_t pad = (QM_EXT_ALIGN - off % QM_EXT_ALIGN) % QM_EXT_ALIGN;
        bad = fwrite(zeros, 1, pad, f) != pad || fwrite(t->raw_data.data, 1, t->raw_data.len, f) != t->raw_data.len;
        off += pad;
        char o[32], l[32];
        snprintf(o, sizeof o, "%zu", off);
        snprintf(l, sizeof l, "%zu", t->raw_data.len);
        off += t->raw_data.len;
        free(t->raw_data.data);
        t->raw_data.data = NULL;
        t->raw_data.len = 0;
        t->has_raw_data = 0;
        t->external_data = xcalloc(3, sizeof *t->external_data);
        t->external_data[0] = entry_new("location", location);
        t->external_data[1] = entry_new("offset", o);
        t->external_data[2] = entry_new("length", l);
        t->n_external_data = 3;
        t->has_data_location = 1;
        t->data_location = ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
    }
    bad |= fclose(f) != 0;
    *bytes = off;
    if (bad) return ts_fail(c->err, c->errlen, "%s: could not write", data_path);
    return 0;
}

static int write_model(qctx *c, const char *out)
{
    size_t size = onnx__model_proto__get_packed_size(c->m), side = 0;
    bool ext = c->o->external == QUANT_EXT_ALWAYS || (c->o->external == QUANT_EXT_AUTO && size > QM_ONE_FILE_MAX);
    size_t n = strlen(out) + 16;
    char *tmp = xmalloc(n), *data = xmalloc(n), *data_tmp = xmalloc(n), *base = xstrdup(out);
    snprintf(tmp, n, "%s.tmp", out);
    snprintf(data, n, "%s.data", out);
    snprintf(data_tmp, n, "%s.data.tmp", out);
    char location[1024];
    snprintf(location, sizeof location, "%s.data", basename(base));
    int rc = -1;
    if (ext && write_side_file(c, data_tmp, location, &side) != 0) goto out;
    if (!ext && size >= QM_FILE_MAX) {
        ts_fail(c->err, c->errlen, "%s: %zu bytes in one file pass protobuf's 2 GiB limit (use external data)", out, size);
        goto out;
    }
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        ts_fail(c->err, c->errlen, "%s: %s", tmp, strerror(errno));
        goto out;
    }
    file_sink s = {.base = {.append = sink_append}, .f = f};
    size_t packed = onnx__model_proto__pack_to_buffer(c->m, &s.base);
    s.bad |= fclose(f) != 0;
    if (s.bad) {
        ts_fail(c->err, c->errlen, "%s: could not write", tmp);
        goto out;
    }
    if ((ext && rename(data_tmp, data) != 0) || rename(tmp, out) != 0) {
        ts_fail(c->err, c->errlen, "%s: rename: %s", out, strerror(errno));
        goto out;
    }
    c->r->external = ext;
    c->r->file_bytes = packed + side;
    rc = 0;
out:
    if (rc != 0) {
        unlink(tmp);
        unlink(data_tmp);
    }
    free(tmp);
    free(data);
    free(data_tmp);
    free(base);
    return rc;
}

int quant_model_file(const char *in, const char *out, const quant_opts *o, quant_report *r, char *err, size_t errlen)
{
    memset(r, 0, sizeof *r);
    if (!qb_valid(o->bits, (size_t)o->block))
        return ts_fail(err, errlen, "bits %d with block %d: MatMulNBits takes bits 4 or 8 and a block of 16..256, "
                       "a power of two", o->bits, o->block);
    if (o->accuracy_level < 0 || o->accuracy_level > 4)
        return ts_fail(err, errlen, "accuracy level %d is not 0..4", o->accuracy_level);
    qctx c = {.o = o, .r = r, .err = err, .errlen = errlen};
    char *d = xstrdup(in);
    snprintf(c.dir, sizeof c.dir, "%s", dirname(d));
    free(d);
    size_t len;
    uint8_t *buf = quant_read_file(in, &len, err, errlen);
    if (!buf) return -1;
    c.m = onnx__model_proto__unpack(NULL, len, buf);
    free(buf);
    int rc = -1;
    if (!c.m || !c.m->graph) {
        ts_fail(err, errlen, "%s: not an ONNX model (its protobuf does not parse as a ModelProto with a graph)", in);
        goto out;
    }
    c.g = c.m->graph;
    if (ext_load_all(&c) != 0) goto out;
    size_t n_node = c.g->n_node; /* nodes are rewritten in place, never added */
    for (size_t i = 0; i < n_node; i++) {
        Onnx__NodeProto *node = c.g->node[i];
        if (node->op_type && !strcmp(node->op_type, "MatMul") && default_domain(node->domain)) visit_matmul(&c, node);
    }
    if (r->quantized) {
        drop_unused(&c);
        import_ms_opset(c.m);
    }
    rc = write_model(&c, out);
out:
    for (size_t i = 0; i < c.n_done; i++) {
        free(c.done[i].src);
        free(c.done[i].codes);
        free(c.done[i].scales);
        free(c.done[i].zp);
    }
    free(c.done);
    if (c.m) onnx__model_proto__free_unpacked(c.m, NULL);
    return rc;
}
