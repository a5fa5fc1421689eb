/* quant_trunk: a decoder without its logits (see quant.h). Read with the same protobuf-c
 * reader as quant_onnx.c; the graph's nodes are in topological order (ONNX requires it), so
 * one walk from the last node back marks every node some kept output needs. */
#include "quant.h"
#include "quant_io.h"
#include "err.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "onnx.pb-c.h"

/* A set of names (open addressing, pointers into the model: nothing copied). */
typedef struct {
    const char **slot;
    size_t cap, n;
} name_set;

static uint64_t hash(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

static bool set_has(const name_set *s, const char *name)
{
    for (size_t i = hash(name) & (s->cap - 1); s->slot[i]; i = (i + 1) & (s->cap - 1))
        if (!strcmp(s->slot[i], name)) return true;
    return false;
}

static void set_add(name_set *s, const char *name)
{
    if (!name || !name[0]) return;
    size_t i = hash(name) & (s->cap - 1);
    for (; s->slot[i]; i = (i + 1) & (s->cap - 1))
        if (!strcmp(s->slot[i], name)) return;
    s->slot[i] = name;
    s->n++;
}

static bool has_subgraph(const Onnx__NodeProto *n)
{
    for (size_t a = 0; a < n->n_attribute; a++)
        if (n->attribute[a]->type == ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPH ||
            n->attribute[a]->type == ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPHS || n->attribute[a]->g ||
            n->attribute[a]->n_graphs)
            return true;
    return false;
}

int quant_trunk(const char *path, const char *drop, uint8_t **out, size_t *out_len, quant_trunk_report *r,
                char *err, size_t errlen)
{
    size_t len = 0;
    *out = NULL;
    *out_len = 0;
    memset(r, 0, sizeof *r);
    uint8_t *buf = quant_read_file(path, &len, err, errlen);
    if (!buf) return -1;
    Onnx__ModelProto *m = onnx__model_proto__unpack(NULL, len, buf);
    free(buf);
    name_set need = {0};
    int rc = -1;
    if (!m || !m->graph) {
        ts_fail(err, errlen, "%s: not an ONNX model", path);
        goto out;
    }
    Onnx__GraphProto *g = m->graph;
    size_t drop_at = g->n_output;
    for (size_t i = 0; i < g->n_output; i++)
        if (g->output[i]->name && !strcmp(g->output[i]->name, drop)) drop_at = i;
    if (drop_at == g->n_output || g->n_output < 2) {
        ts_fail(err, errlen, "%s: no output '%s' beside others", path, drop);
        goto out;
    }
    for (size_t i = 0; i < g->n_initializer; i++)
        if (g->initializer[i]->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL) {
            ts_fail(err, errlen, "%s: its weights are external data", path);
            goto out;
        }
    size_t names = g->n_output + g->n_initializer + 1;
    for (size_t i = 0; i < g->n_node; i++) {
        if (has_subgraph(g->node[i])) {
            ts_fail(err, errlen, "%s: node '%s' holds a subgraph", path, g->node[i]->name ? g->node[i]->name : "");
            goto out;
        }
        names += g->node[i]->n_input;
    }
    for (need.cap = 16; need.cap < 2 * names; need.cap *= 2) {}
    need.slot = calloc(need.cap, sizeof *need.slot);
    if (!need.slot) {
        ts_fail(err, errlen, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < g->n_output; i++)
        if (i != drop_at) set_add(&need, g->output[i]->name);
    /* back from the last node: a node stays when one of its outputs is needed */
    size_t kept = g->n_node;
    for (size_t i = g->n_node; i-- > 0;) {
        Onnx__NodeProto *n = g->node[i];
        bool keep = false;
        for (size_t o = 0; !keep && o < n->n_output; o++) keep = n->output[o][0] && set_has(&need, n->output[o]);
        if (keep) {
            for (size_t k = 0; k < n->n_input; k++) set_add(&need, n->input[k]);
            g->node[--kept] = n;
        } else {
            protobuf_c_message_free_unpacked(&n->base, NULL);
            r->nodes_dropped++;
        }
    }
    memmove(g->node, g->node + kept, (g->n_node - kept) * sizeof *g->node);
    g->n_node -= kept;
    r->nodes_kept = g->n_node;
    size_t w = 0;
    for (size_t i = 0; i < g->n_initializer; i++) {
        Onnx__TensorProto *t = g->initializer[i];
        if (t->name && set_has(&need, t->name)) {
            g->initializer[w++] = t;
            continue;
        }
        r->bytes_dropped += t->raw_data.len + t->n_float_data * sizeof(float);
        protobuf_c_message_free_unpacked(&t->base, NULL);
    }
    g->n_initializer = w;
    protobuf_c_message_free_unpacked(&g->output[drop_at]->base, NULL);
    memmove(g->output + drop_at, g->output + drop_at + 1, (g->n_output - drop_at - 1) * sizeof *g->output);
    g->n_output--;
    size_t sz = onnx__model_proto__get_packed_size(m);
    if (!(*out = malloc(sz ? sz : 1))) {
        ts_fail(err, errlen, "out of memory for the model without '%s' (%zu bytes)", drop, sz);
        goto out;
    }
    *out_len = onnx__model_proto__pack(m, *out);
    rc = 0;
out:
    free(need.slot);
    if (m) onnx__model_proto__free_unpacked(m, NULL);
    return rc;
}
