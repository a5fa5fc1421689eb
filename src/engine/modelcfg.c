#include "modelcfg.h"
#include "err.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

typedef struct {
    yaml_document_t *doc;
    const char *path;
    char *err;
    size_t errlen;
} walker;

static int fail(walker *w, const yaml_node_t *n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int fail(walker *w, const yaml_node_t *n, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return ts_fail(w->err, w->errlen, "%s:%zu:%zu: %s", w->path, n->start_mark.line + 1,
                    n->start_mark.column + 1, msg);
}

static yaml_node_t *node(walker *w, int id) { return yaml_document_get_node(w->doc, id); }

static const char *scalar(const yaml_node_t *n)
{
    return n->type == YAML_SCALAR_NODE ? (const char *)n->data.scalar.value : NULL;
}

static int get_int(walker *w, const yaml_node_t *n, const char *key, int64_t lo, int64_t hi,
                   int64_t *out)
{
    const char *s = scalar(n);
    char *end = NULL;
    errno = 0;
    long long v = s ? strtoll(s, &end, 10) : 0;
    if (!s || errno || end == s || *end || v < lo || v > hi)
        return fail(w, n, "%s must be an integer in [%lld, %lld]", key, (long long)lo, (long long)hi);
    *out = v;
    return 0;
}

static int get_bool(walker *w, const yaml_node_t *n, const char *key, bool *out)
{
    const char *s = scalar(n);
    if (s && (!strcmp(s, "true") || !strcmp(s, "True"))) *out = true;
    else if (s && (!strcmp(s, "false") || !strcmp(s, "False"))) *out = false;
    else return fail(w, n, "%s must be true or false", key);
    return 0;
}

static int get_str(walker *w, const yaml_node_t *n, const char *key, char *out, size_t len)
{
    const char *s = scalar(n);
    if (!s || strlen(s) >= len) return fail(w, n, "%s must be a string under %zu bytes", key, len);
    strcpy(out, s);
    return 0;
}

static int get_int_list(walker *w, const yaml_node_t *n, const char *key, int64_t lo, int64_t hi,
                        int64_t *out, size_t max, size_t *count)
{
    if (n->type != YAML_SEQUENCE_NODE) return fail(w, n, "%s must be a list of integers", key);
    size_t k = 0;
    for (yaml_node_item_t *it = n->data.sequence.items.start; it < n->data.sequence.items.top; it++) {
        if (k >= max) return fail(w, n, "%s has more than %zu entries", key, max);
        if (get_int(w, node(w, *it), key, lo, hi, &out[k++])) return -1;
    }
    *count = k;
    return 0;
}

#define FOR_EACH_PAIR(w, map, kname, vnode)                                                  \
    for (yaml_node_pair_t *p_##kname = (map)->data.mapping.pairs.start;                          \
         p_##kname < (map)->data.mapping.pairs.top; p_##kname++)                                        \
        for (const char *kname = scalar(node(w, p_##kname->key)); kname; kname = NULL)             \
            for (yaml_node_t *vnode = node(w, p_##kname->value); vnode; vnode = NULL)

static int need_map(walker *w, const yaml_node_t *n, const char *key)
{
    return n->type == YAML_MAPPING_NODE ? 0 : fail(w, n, "%s must be a mapping", key);
}

static int parse_version_policy(walker *w, yaml_node_t *n, model_config *c)
{
    if (need_map(w, n, "version_policy")) return -1;
    FOR_EACH_PAIR(w, n, k, v) {
        if (!strcmp(k, "latest")) {
            c->vp = VP_LATEST;
            if (need_map(w, v, "version_policy.latest")) return -1;
            FOR_EACH_PAIR(w, v, k2, v2) {
                if (strcmp(k2, "num_versions")) return fail(w, v2, "unknown key '%s' in version_policy.latest", k2);
                if (get_int(w, v2, "num_versions", 1, MODELCFG_MAX_VERSIONS, &c->vp_latest_n)) return -1;
            }
        } else if (!strcmp(k, "all")) {
            c->vp = VP_ALL;
        } else if (!strcmp(k, "specific")) {
            c->vp = VP_SPECIFIC;
            if (need_map(w, v, "version_policy.specific")) return -1;
            FOR_EACH_PAIR(w, v, k2, v2) {
                if (strcmp(k2, "versions")) return fail(w, v2, "unknown key '%s' in version_policy.specific", k2);
                if (get_int_list(w, v2, "versions", 1, INT64_MAX, c->vp_specific, MODELCFG_MAX_VERSIONS,
                                 &c->vp_n_specific))
                    return -1;
            }
        } else {
            return fail(w, v, "unknown key '%s' in version_policy (latest, all, specific)", k);
        }
    }
    return 0;
}

static int parse_gpus(walker *w, yaml_node_t *v, instance_group_cfg *g)
{
    if (get_int_list(w, v, "instance_group.gpus", 0, 63, g->gpus, MODELCFG_MAX_GPUS, &g->n_gpus))
        return -1;
    for (size_t i = 0; i < g->n_gpus; i++)
        for (size_t k = 0; k < i; k++)
            if (g->gpus[i] == g->gpus[k])
                return fail(w, v, "instance_group.gpus lists device %lld twice", (long long)g->gpus[i]);
    return 0;
}

static int parse_instance_group(walker *w, yaml_node_t *n, model_config *c)
{
    if (n->type != YAML_SEQUENCE_NODE) return fail(w, n, "instance_group must be a list");
    c->instances = 0;
    c->n_groups = 0;
    int64_t expanded = 0; /* instances on a GPU tier, where gpus multiplies the count */
    for (yaml_node_item_t *it = n->data.sequence.items.start; it < n->data.sequence.items.top; it++) {
        yaml_node_t *g = node(w, *it);
        if (need_map(w, g, "instance_group[]")) return -1;
        if (c->n_groups >= MODELCFG_MAX_GROUPS)
            return fail(w, g, "instance_group has more than %d entries", MODELCFG_MAX_GROUPS);
        instance_group_cfg *grp = &c->groups[c->n_groups];
        *grp = (instance_group_cfg){.count = 1, .kind = KIND_AUTO};
        yaml_node_t *gpus_node = NULL;
        FOR_EACH_PAIR(w, g, k, v) {
            if (!strcmp(k, "count")) {
                if (get_int(w, v, "instance_group.count", 1, MODELCFG_MAX_INSTANCES, &grp->count)) return -1;
            } else if (!strcmp(k, "kind")) {
                const char *s = scalar(v);
                if (s && !strcmp(s, "KIND_AUTO")) grp->kind = KIND_AUTO;
                else if (s && !strcmp(s, "KIND_CPU")) grp->kind = KIND_CPU;
                else if (s && !strcmp(s, "KIND_GPU")) grp->kind = KIND_GPU;
                else return fail(w, v, "instance_group.kind must be KIND_AUTO, KIND_CPU or KIND_GPU");
            } else if (!strcmp(k, "gpus")) {
                if (parse_gpus(w, v, grp)) return -1;
                gpus_node = v;
            } else if (!strcmp(k, "name")) {
                /* accepted for Triton compatibility */
            } else {
                return fail(w, v, "unknown key '%s' in instance_group", k);
            }
        }
        if (grp->kind == KIND_CPU && grp->n_gpus)
            return fail(w, gpus_node, "instance_group.gpus is set on a KIND_CPU group (gpus needs "
                        "KIND_GPU or KIND_AUTO)");
        c->instances += grp->count;
        expanded += grp->count * (int64_t)(grp->n_gpus ? grp->n_gpus : 1);
        if (expanded > MODELCFG_MAX_INSTANCES)
            return fail(w, g, "instance_group makes %lld instances (count on each of gpus); at most %d",
                        (long long)expanded, MODELCFG_MAX_INSTANCES);
        c->n_groups++;
    }
    return 0;
}

static int parse_queue_policy(walker *w, yaml_node_t *n, const char *where, queue_policy *q)
{
    if (need_map(w, n, where)) return -1;
    FOR_EACH_PAIR(w, n, k, v) {
        if (!strcmp(k, "max_queue_size")) {
            if (get_int(w, v, "max_queue_size", 1, 1000000, &q->max_queue_size)) return -1;
        } else if (!strcmp(k, "default_timeout_microseconds")) {
            if (get_int(w, v, "default_timeout_microseconds", 0, INT64_C(3600000000), &q->default_timeout_us))
                return -1;
        } else if (!strcmp(k, "timeout_action")) {
            const char *s = scalar(v);
            if (s && !strcmp(s, "REJECT")) q->action = TIMEOUT_REJECT;
            else if (s && !strcmp(s, "DELAY")) q->action = TIMEOUT_DELAY;
            else return fail(w, v, "timeout_action must be REJECT or DELAY");
        } else if (!strcmp(k, "allow_timeout_override")) {
            if (get_bool(w, v, k, &q->allow_timeout_override)) return -1;
        } else {
            return fail(w, v, "unknown key '%s' in %s", k, where);
        }
    }
    return 0;
}

static int parse_dynamic_batching(walker *w, yaml_node_t *n, model_config *c)
{
    if (need_map(w, n, "dynamic_batching")) return -1;
    c->dynamic_batching = true;
    yaml_node_t *level_policies = NULL;
    FOR_EACH_PAIR(w, n, k, v) {
        if (!strcmp(k, "max_queue_delay_microseconds")) {
            if (get_int(w, v, k, 0, 10000000, &c->max_queue_delay_us)) return -1;
        } else if (!strcmp(k, "preferred_batch_size")) {
            if (get_int_list(w, v, k, 1, 1 << 20, c->preferred_batch_size, 8, &c->n_preferred)) return -1;
        } else if (!strcmp(k, "default_queue_policy")) {
            if (parse_queue_policy(w, v, "dynamic_batching.default_queue_policy", &c->default_policy)) return -1;
        } else if (!strcmp(k, "priority_levels")) {
            if (get_int(w, v, k, 1, MODELCFG_MAX_LEVELS, &c->priority_levels)) return -1;
        } else if (!strcmp(k, "default_priority_level")) {
            if (get_int(w, v, k, 1, MODELCFG_MAX_LEVELS, &c->default_priority_level)) return -1;
        } else if (!strcmp(k, "priority_queue_policy")) {
            level_policies = v; /* read after priority_levels is known */
        } else if (!strcmp(k, "preserve_ordering")) {
            bool b = false;
            if (get_bool(w, v, k, &b)) return -1;
        } else {
            return fail(w, v, "unknown key '%s' in dynamic_batching", k);
        }
    }
    int64_t levels = c->priority_levels ? c->priority_levels : 1;
    if (c->default_priority_level > levels)
        return fail(w, n, "default_priority_level %lld is above priority_levels %lld",
                    (long long)c->default_priority_level, (long long)levels);
    if (level_policies) {
        if (need_map(w, level_policies, "priority_queue_policy")) return -1;
        FOR_EACH_PAIR(w, level_policies, k, v) {
            char *end = NULL;
            long lvl = strtol(k, &end, 10);
            if (*end || lvl < 1 || lvl > levels)
                return fail(w, v, "priority_queue_policy key '%s' is not a level in 1..%lld", k, (long long)levels);
            /* a level's policy starts from the default policy's values */
            c->level_policy[lvl - 1] = c->default_policy;
            if (parse_queue_policy(w, v, "priority_queue_policy.<level>", &c->level_policy[lvl - 1])) return -1;
            c->level_policy_set[lvl - 1] = true;
        }
    }
    return 0;
}

static int parse_parameters(walker *w, yaml_node_t *n, model_config *c)
{
    if (need_map(w, n, "parameters")) return -1;
    FOR_EACH_PAIR(w, n, k, v) {
        int64_t *dst = !strcmp(k, "intra_op_thread_count")   ? &c->intra_op_threads
                       : !strcmp(k, "inter_op_thread_count") ? &c->inter_op_threads
                                                             : NULL;
        if (!dst) return fail(w, v, "unknown key '%s' in parameters", k);
        /* Triton writes parameters as {string_value: "N"}; a bare scalar is accepted too */
        yaml_node_t *val = v;
        if (v->type == YAML_MAPPING_NODE) {
            val = NULL;
            FOR_EACH_PAIR(w, v, k2, v2) {
                if (strcmp(k2, "string_value")) return fail(w, v2, "unknown key '%s' in parameters.%s", k2, k);
                val = v2;
            }
            if (!val) return fail(w, v, "parameters.%s needs string_value", k);
        }
        if (get_int(w, val, k, 0, 1024, dst)) return -1;
    }
    return 0;
}

static int parse_warmup_input(walker *w, const char *name, yaml_node_t *n, warmup_input *in)
{
    if (need_map(w, n, "model_warmup.inputs.<name>")) return -1;
    snprintf(in->name, sizeof in->name, "%s", name);
    bool have_dt = false, have_data = false;
    FOR_EACH_PAIR(w, n, k, v) {
        if (!strcmp(k, "data_type")) {
            const char *s = scalar(v);
            in->dt = s ? dtype_parse_config(s) : DT_INVALID;
            if (in->dt == DT_INVALID) return fail(w, v, "unknown data_type '%s'", s ? s : "");
            have_dt = true;
        } else if (!strcmp(k, "dims")) {
            if (get_int_list(w, v, "dims", 0, 1 << 24, in->dims, MODELCFG_MAX_DIMS, &in->ndim)) return -1;
        } else if (!strcmp(k, "zero_data") || !strcmp(k, "random_data")) {
            bool b = false;
            if (get_bool(w, v, k, &b)) return -1;
            if (b) in->random = !strcmp(k, "random_data");
            have_data = true;
        } else {
            return fail(w, v, "unknown key '%s' in model_warmup input '%s' (input_data_file is not supported)", k, name);
        }
    }
    if (!have_dt) return fail(w, n, "model_warmup input '%s' needs data_type", name);
    if (!have_data) return fail(w, n, "model_warmup input '%s' needs zero_data or random_data", name);
    return 0;
}

static int parse_warmup(walker *w, yaml_node_t *n, model_config *c)
{
    if (n->type != YAML_SEQUENCE_NODE) return fail(w, n, "model_warmup must be a list");
    for (yaml_node_item_t *it = n->data.sequence.items.start; it < n->data.sequence.items.top; it++) {
        if (c->n_warmup >= MODELCFG_MAX_WARMUP) return fail(w, n, "at most %d model_warmup samples", MODELCFG_MAX_WARMUP);
        warmup_sample *s = &c->warmup[c->n_warmup++];
        s->count = 1;
        yaml_node_t *g = node(w, *it);
        if (need_map(w, g, "model_warmup[]")) return -1;
        FOR_EACH_PAIR(w, g, k, v) {
            if (!strcmp(k, "name")) {
                if (get_str(w, v, "name", s->name, sizeof s->name)) return -1;
            } else if (!strcmp(k, "batch_size")) {
                if (get_int(w, v, "batch_size", 0, 1 << 16, &s->batch_size)) return -1;
            } else if (!strcmp(k, "count")) {
                if (get_int(w, v, "count", 1, 10000, &s->count)) return -1;
            } else if (!strcmp(k, "inputs")) {
                if (need_map(w, v, "model_warmup.inputs")) return -1;
                FOR_EACH_PAIR(w, v, iname, iv) {
                    if (s->n_inputs >= MODELCFG_MAX_WARMUP_INPUTS) return fail(w, iv, "too many warm-up inputs");
                    if (parse_warmup_input(w, iname, iv, &s->inputs[s->n_inputs++])) return -1;
                }
            } else {
                return fail(w, v, "unknown key '%s' in model_warmup", k);
            }
        }
    }
    return 0;
}

static int parse_root(walker *w, yaml_node_t *root, model_config *c)
{
    if (need_map(w, root, "the config")) return -1;
    FOR_EACH_PAIR(w, root, k, v) {
        int rc = 0;
        if (!strcmp(k, "name")) rc = get_str(w, v, k, c->name, sizeof c->name);
        else if (!strcmp(k, "platform") || !strcmp(k, "backend")) {
            const char *s = scalar(v);
            if (!s || (strcmp(s, "onnxruntime_onnx") && strcmp(s, "onnxruntime")))
                rc = fail(w, v, "%s must be onnxruntime_onnx / onnxruntime", k);
        } else if (!strcmp(k, "max_batch_size")) rc = get_int(w, v, k, 0, 1 << 20, &c->max_batch_size);
        else if (!strcmp(k, "version_policy")) rc = parse_version_policy(w, v, c);
        else if (!strcmp(k, "instance_group")) rc = parse_instance_group(w, v, c);
        else if (!strcmp(k, "dynamic_batching")) rc = parse_dynamic_batching(w, v, c);
        else if (!strcmp(k, "parameters")) rc = parse_parameters(w, v, c);
        else if (!strcmp(k, "model_warmup")) rc = parse_warmup(w, v, c);
        else if (!strcmp(k, "input") || !strcmp(k, "output")) {
            /* Triton allows declaring I/O; the ONNX model's own signature is authoritative */
        } else rc = fail(w, v, "unknown key '%s' (see docs/model-config.md)", k);
        if (rc) return rc;
    }
    return 0;
}

void modelcfg_defaults(model_config *c)
{
    memset(c, 0, sizeof *c);
    c->vp = VP_LATEST;
    c->vp_latest_n = 1;
    c->intra_op_threads = -1;
    c->inter_op_threads = -1;
}

const char *modelcfg_kind_name(instance_kind k)
{
    return k == KIND_CPU ? "KIND_CPU" : k == KIND_GPU ? "KIND_GPU" : "KIND_AUTO";
}

const queue_policy *modelcfg_policy(const model_config *c, int level)
{
    if (level >= 1 && level <= MODELCFG_MAX_LEVELS && c->level_policy_set[level - 1])
        return &c->level_policy[level - 1];
    return &c->default_policy;
}

int modelcfg_levels(const model_config *c) { return c->priority_levels > 0 ? (int)c->priority_levels : 1; }

int modelcfg_default_level(const model_config *c)
{
    /* Triton's default is the lowest priority when levels exist */
    if (c->default_priority_level > 0) return (int)c->default_priority_level;
    return modelcfg_levels(c);
}

int modelcfg_load(const char *path, model_config *c, char *err, size_t errlen)
{
    modelcfg_defaults(c);
    FILE *f = fopen(path, "rb");
    if (!f) {
        if (errno == ENOENT) return 0;
        return ts_fail(err, errlen, "%s: %s", path, strerror(errno));
    }
    yaml_parser_t parser;
    yaml_document_t doc;
    int rc = -1;
    yaml_parser_initialize(&parser);
    yaml_parser_set_input_file(&parser, f);
    if (!yaml_parser_load(&parser, &doc)) {
        snprintf(err, errlen, "%s:%zu:%zu: YAML error: %s", path, parser.problem_mark.line + 1,
                 parser.problem_mark.column + 1, parser.problem ? parser.problem : "unknown");
        yaml_parser_delete(&parser);
        fclose(f);
        return -1;
    }
    walker w = {&doc, path, err, errlen};
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    c->present = true;
    rc = root ? parse_root(&w, root, c) : 0; /* an empty file is an empty config */
    yaml_document_delete(&doc);
    yaml_parser_delete(&parser);
    fclose(f);
    return rc;
}
