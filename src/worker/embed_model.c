/* embed_model.c: an encoder folder opened as an embedding model, and its runner (embed.h).
 *
 * The folder (a version folder of the repository, beside model.onnx and tokenizer.json):
 *   modules.json               sentence-transformers' modules: Transformer, Pooling (its path,
 *                              usually 1_Pooling), Normalize; any other module is refused
 *   1_Pooling/config.json      pooling_mode_mean_tokens | _cls_token | _lasttoken (one of them)
 *   sentence_bert_config.json  max_seq_length
 * An ONNX whose inputs are input_ids, attention_mask and optionally token_type_ids (int64,
 * [batch, sequence]) and whose output is last_hidden_state / token_embeddings [batch,
 * sequence, hidden] (pooled here) or sentence_embedding [batch, hidden] (pooled by the graph). */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "clock.h"
#include "embed.h"
#include "log.h"
#include "ortenv.h"
#include "tune.h"

#define EMB_DEFAULT_MAX_LEN 512
#define EMB_MAX_HIDDEN 65536

const char *embed_pool_name(emb_pool p)
{
    switch (p) {
    case EMB_POOL_MEAN: return "mean";
    case EMB_POOL_CLS: return "cls";
    case EMB_POOL_LAST: return "lasttoken";
    default: return "model";
    }
}

static bool exists(const char *dir, const char *rel)
{
    char path[1600];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", dir, rel);
    return stat(path, &st) == 0;
}

static json_t *load_json(const char *dir, const char *rel)
{
    char path[1600];
    snprintf(path, sizeof path, "%s/%s", dir, rel);
    return json_load_file(path, 0, NULL);
}

/* modules.json: the Pooling module's folder and whether Normalize follows. */
static int read_modules(const char *dir, char *pool_dir, size_t pdlen, bool *normalize, char *err, size_t errlen)
{
    snprintf(pool_dir, pdlen, "1_Pooling");
    *normalize = false;
    if (!exists(dir, "modules.json")) return 0;
    json_t *j = load_json(dir, "modules.json");
    if (!json_is_array(j)) {
        json_decref(j);
        return ts_fail(err, errlen, "%s/modules.json: not a JSON array of modules", dir);
    }
    size_t i;
    json_t *mod;
    int rc = 0;
    json_array_foreach(j, i, mod) {
        const char *type = json_string_value(json_object_get(mod, "type"));
        const char *path = json_string_value(json_object_get(mod, "path"));
        const char *t = type ? strrchr(type, '.') : NULL;
        t = t ? t + 1 : type ? type : "";
        if (strcmp(t, "Transformer") == 0) continue;
        if (strcmp(t, "Pooling") == 0) {
            if (path && *path) snprintf(pool_dir, pdlen, "%s", path);
        } else if (strcmp(t, "Normalize") == 0) {
            *normalize = true;
        } else {
            rc = ts_fail(err, errlen, "%s/modules.json: module '%.128s' is not supported (supported: "
                         "sentence_transformers.models.Transformer, Pooling, Normalize)", dir, type ? type : "?");
            break;
        }
    }
    json_decref(j);
    return rc;
}

/* <pool_dir>/config.json: exactly one of mean, CLS, last token. */
static int read_pooling(const char *dir, const char *pool_dir, emb_pool *out, char *err, size_t errlen)
{
    char rel[600];
    snprintf(rel, sizeof rel, "%s/config.json", pool_dir);
    *out = EMB_POOL_MEAN; /* sentence-transformers' choice for a plain transformer folder */
    if (!exists(dir, rel)) return 0;
    json_t *j = load_json(dir, rel);
    if (!json_is_object(j)) {
        json_decref(j);
        return ts_fail(err, errlen, "%s/%s: not a JSON object", dir, rel);
    }
    static const struct {
        const char *key;
        int mode; /* -1: refused */
    } modes[] = {{"pooling_mode_mean_tokens", EMB_POOL_MEAN}, {"pooling_mode_cls_token", EMB_POOL_CLS},
                 {"pooling_mode_lasttoken", EMB_POOL_LAST}, {"pooling_mode_max_tokens", -1},
                 {"pooling_mode_mean_sqrt_len_tokens", -1}, {"pooling_mode_weightedmean_tokens", -1}};
    int n = 0, rc = 0;
    for (size_t i = 0; i < sizeof modes / sizeof *modes; i++) {
        if (!json_is_true(json_object_get(j, modes[i].key))) continue;
        if (modes[i].mode < 0) {
            rc = ts_fail(err, errlen, "%s/%s: %s is not supported (supported: pooling_mode_mean_tokens, "
                         "pooling_mode_cls_token, pooling_mode_lasttoken)", dir, rel, modes[i].key);
            break;
        }
        *out = (emb_pool)modes[i].mode;
        n++;
    }
    if (!rc && n != 1)
        rc = ts_fail(err, errlen, "%s/%s: exactly one of pooling_mode_mean_tokens, pooling_mode_cls_token, "
                     "pooling_mode_lasttoken must be true (%d are)", dir, rel, n);
    json_decref(j);
    return rc;
}

static int64_t json_pos_int(const char *dir, const char *rel, const char *key)
{
    json_t *j = load_json(dir, rel);
    json_t *v = json_object_get(j, key);
    int64_t r = json_is_integer(v) && json_integer_value(v) > 0 ? (int64_t)json_integer_value(v) : 0;
    json_decref(j);
    return r;
}

/* Tokens per input: sentence-transformers' max_seq_length, within config.json's positions. */
static void decide_max_len(emb_served *E, const char *dir, int64_t graph_seq)
{
    int64_t st = json_pos_int(dir, "sentence_bert_config.json", "max_seq_length");
    int64_t pos = json_pos_int(dir, "config.json", "max_position_embeddings");
    E->max_len = EMB_DEFAULT_MAX_LEN;
    snprintf(E->max_len_from, sizeof E->max_len_from, "default");
    if (pos > 0) {
        E->max_len = pos;
        snprintf(E->max_len_from, sizeof E->max_len_from, "config.json max_position_embeddings");
    }
    if (st > 0 && (pos == 0 || st < pos)) {
        E->max_len = st;
        snprintf(E->max_len_from, sizeof E->max_len_from, "sentence_bert_config.json max_seq_length");
    }
    if (graph_seq > 0 && graph_seq < E->max_len) {
        E->max_len = graph_seq;
        snprintf(E->max_len_from, sizeof E->max_len_from, "model.onnx's fixed sequence length");
    }
}

typedef struct {
    char name[64];
    ONNXTensorElementDataType el;
    size_t ndim;
    int64_t dims[4];
} emb_io;

/* The graph's inputs or outputs (at most 8; names up to 63 bytes). */
static int read_ios(OrtSession *s, bool inputs, emb_io *out, size_t *n, char *err, size_t errlen)
{
    OrtAllocator *alloc = NULL;
    size_t cnt = 0;
    if (ort_check(g_ort->GetAllocatorWithDefaultOptions(&alloc), err, errlen) ||
        ort_check(inputs ? g_ort->SessionGetInputCount(s, &cnt) : g_ort->SessionGetOutputCount(s, &cnt), err, errlen))
        return -1;
    *n = 0;
    for (size_t i = 0; i < cnt && i < 8; i++) {
        char *name = NULL;
        OrtTypeInfo *ti = NULL;
        if (ort_check(inputs ? g_ort->SessionGetInputName(s, i, alloc, &name) : g_ort->SessionGetOutputName(s, i, alloc, &name),
                      err, errlen))
            return -1;
        emb_io *io = &out[(*n)++];
        memset(io, 0, sizeof *io);
        snprintf(io->name, sizeof io->name, "%s", name);
        alloc->Free(alloc, name);
        if (ort_check(inputs ? g_ort->SessionGetInputTypeInfo(s, i, &ti) : g_ort->SessionGetOutputTypeInfo(s, i, &ti),
                      err, errlen))
            return -1;
        const OrtTensorTypeAndShapeInfo *tinfo = NULL;
        if (!ort_check(g_ort->CastTypeInfoToTensorInfo(ti, &tinfo), NULL, 0) && tinfo) {
            (void)ort_check(g_ort->GetTensorElementType(tinfo, &io->el), NULL, 0);
            (void)ort_check(g_ort->GetDimensionsCount(tinfo, &io->ndim), NULL, 0);
            if (io->ndim <= 4) (void)ort_check(g_ort->GetDimensions(tinfo, io->dims, io->ndim), NULL, 0);
            else io->el = ONNX_TENSOR_ELEMENT_DATA_TYPE_UNDEFINED;
        }
        g_ort->ReleaseTypeInfo(ti);
    }
    if (cnt > 8) return ts_fail(err, errlen, "%zu %s: an encoder has at most 3 inputs", cnt, inputs ? "inputs" : "outputs");
    return 0;
}

/* Is the graph an Optimum feature-extraction encoder? Fills E's output and hidden size;
 * why: what it lacks (for the load error or the KServe log line). */
static bool read_signature(emb_served *E, const emb_io *in, size_t nin, const emb_io *out, size_t nout,
                           int64_t *graph_seq, char *why, size_t whylen)
{
    bool ids = false, mask = false;
    *graph_seq = 0;
    for (size_t i = 0; i < nin; i++) {
        bool ok_type = in[i].el == ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64 && in[i].ndim == 2;
        if (strcmp(in[i].name, "input_ids") == 0) ids = ok_type, *graph_seq = in[i].dims[1];
        else if (strcmp(in[i].name, "attention_mask") == 0) mask = ok_type;
        else if (strcmp(in[i].name, "token_type_ids") == 0 && ok_type) E->token_type_ids = true;
        else {
            snprintf(why, whylen, "input '%s' is not one of input_ids, attention_mask, token_type_ids (int64 "
                     "[batch, sequence])", in[i].name);
            return false;
        }
    }
    if (!ids || !mask) {
        snprintf(why, whylen, "no %s input (int64 [batch, sequence])", !ids ? "input_ids" : "attention_mask");
        return false;
    }
    static const char *const tokens[] = {"last_hidden_state", "token_embeddings"};
    static const char *const pooled[] = {"sentence_embedding", "pooler_output_normalized"};
    const emb_io *pick = NULL;
    for (size_t k = 0; k < 2 && !pick; k++)
        for (size_t i = 0; i < nout && !pick; i++)
            if (strcmp(out[i].name, tokens[k]) == 0 && out[i].ndim == 3) pick = &out[i];
    if (pick) E->hidden = pick->dims[2] > 0 ? (size_t)pick->dims[2] : 0;
    for (size_t k = 0; k < 2 && !pick; k++)
        for (size_t i = 0; i < nout && !pick; i++)
            if (strcmp(out[i].name, pooled[k]) == 0 && out[i].ndim == 2) {
                pick = &out[i];
                E->pool = EMB_POOL_GIVEN;
                E->hidden = pick->dims[1] > 0 ? (size_t)pick->dims[1] : 0;
            }
    if (!pick) {
        snprintf(why, whylen, "no last_hidden_state / token_embeddings [batch, sequence, hidden] or "
                 "sentence_embedding [batch, hidden] output");
        return false;
    }
    if (pick->el != ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT) {
        snprintf(why, whylen, "output '%s' is not FP32", pick->name);
        return false;
    }
    if (E->hidden == 0 || E->hidden > EMB_MAX_HIDDEN) {
        snprintf(why, whylen, "output '%s' has no fixed hidden size (its last dimension)", pick->name);
        return false;
    }
    snprintf(E->out_name, sizeof E->out_name, "%s", pick->name);
    return true;
}

static bool any_rows(const sched_item *a, const sched_item *b);
static void embed_run(sched_item **items, size_t n, size_t runner, void *ctx);

void embed_free(emb_served *E)
{
    if (!E) return;
    if (E->s) sched_destroy(E->s); /* runs what is queued, joins the runner */
    if (E->session) g_ort->ReleaseSession(E->session);
    tok_free(E->tok);
    free(E);
}

int embed_open(server *srv, const char *dir, const char *name, const ep_config *cfg, const ep_result *ep,
               emb_served **out, char *err, size_t errlen)
{
    *out = NULL;
    /* a sentence-transformers folder claims to be an encoder: what it lacks fails the load */
    bool claims = exists(dir, "modules.json") || exists(dir, "1_Pooling/config.json") ||
                  exists(dir, "sentence_bert_config.json");
    emb_served *E = calloc(1, sizeof *E);
    if (!E) return ts_fail(err, errlen, "out of memory");
    E->kind = V1_EMBED;
    E->srv = srv;
    snprintf(E->name, sizeof E->name, "%s", name);
    hist_init(&E->e2e, HIST_LATENCY_BOUNDS, HIST_LATENCY_N);
    char path[1600], msg[1024] = "", pool_dir[512];
    OrtSessionOptions *so = NULL;
    int rc = -1;
    snprintf(path, sizeof path, "%s/model.onnx", dir);
    /* on the CPU tier never ORT's default thread count: it counts cores from CPUID and can see
     * one core where the kernel gives two (tune.h); the usable cores instead, as the LLM's */
    int threads = srv->set->intra_op_threads > 0 ? (int)srv->set->intra_op_threads
                  : ep->decision.active == PROV_CPU ? tune_hw_get()->usable : 0;
    if (ort_check(g_ort->CreateSessionOptions(&so), msg, sizeof msg) ||
        (threads > 0 && ort_check(g_ort->SetIntraOpNumThreads(so, threads), msg, sizeof msg)) ||
        ep_apply(cfg, ep, so, msg, sizeof msg) ||
        ort_check(g_ort->CreateSession(ortenv_env(), path, so, &E->session), msg, sizeof msg)) {
        snprintf(err, errlen, "%s: %s", path, msg);
        goto out;
    }
    emb_io in[8], outs[8];
    size_t nin = 0, nout = 0;
    int64_t graph_seq = 0;
    if (read_ios(E->session, true, in, &nin, msg, sizeof msg) || read_ios(E->session, false, outs, &nout, msg, sizeof msg)) {
        snprintf(err, errlen, "%s: %s", path, msg);
        goto out;
    }
    if (!read_signature(E, in, nin, outs, nout, &graph_seq, msg, sizeof msg)) {
        if (claims) {
            snprintf(err, errlen, "%s: the folder is a sentence-transformers encoder (modules.json / 1_Pooling / "
                     "sentence_bert_config.json) but model.onnx is not an Optimum feature-extraction export: %s",
                     path, msg);
        } else {
            snprintf(err, errlen, "%s is neither an Optimum decoder nor a feature-extraction encoder: %s", path, msg);
            rc = 0; /* a KServe model with a tokenizer */
        }
        goto out;
    }
    emb_pool given = E->pool;
    if (read_modules(dir, pool_dir, sizeof pool_dir, &E->normalize, err, errlen)) goto out;
    if (given != EMB_POOL_GIVEN && read_pooling(dir, pool_dir, &E->pool, err, errlen)) goto out;
    decide_max_len(E, dir, graph_seq);
    ts_err te = {0};
    if (!(E->tok = tok_load(dir, &te))) {
        snprintf(err, errlen, "%s", te.msg);
        goto out;
    }
    E->vocab = tok_vocab_size(E->tok);
    sched_config sc = {.levels = 3, .threads = 1, .max_batch = EMB_MAX_BATCH_ROWS, .max_delay_us = EMB_BATCH_DELAY_US};
    for (size_t l = 0; l < sc.levels; l++)
        sc.capacity[l] = (size_t)(srv->set->queue_size > 0 ? srv->set->queue_size : 64);
    if (!(E->s = sched_create(&sc, embed_run, any_rows, E, name))) {
        snprintf(err, errlen, "%s: could not start the runner thread", name);
        goto out;
    }
    LOG_INFO_(LOGF({"model", name}), "embeddings: %s output, hidden %zu, pooling %s%s, %lld tokens per input (%s)%s",
              E->out_name, E->hidden, embed_pool_name(E->pool), E->normalize ? ", normalised" : "",
              (long long)E->max_len, E->max_len_from, E->token_type_ids ? ", token_type_ids" : "");
    *out = E;
    E = NULL;
    rc = 1;
out:
    if (so) g_ort->ReleaseSessionOptions(so);
    embed_free(E);
    return rc;
}

/* ---- the runner --------------------------------------------------------------------- */

typedef struct {
    ereq *r;
    size_t row;
    size_t n;
} emb_ref;

/* Any rows may share a Run(): each is padded to the Run()'s longest under its mask. */
static bool any_rows(const sched_item *a, const sched_item *b)
{
    (void)a, (void)b;
    return true;
}

static int by_len(const void *a, const void *b)
{
    const emb_ref *x = a, *y = b;
    return x->n < y->n ? 1 : x->n > y->n ? -1 : 0; /* longest first */
}

/* One Run() over refs[0..k) (longest first), padded to refs[0].n; their vectors pooled into
 * each request's vec. */
static int run_chunk(emb_served *E, const emb_ref *refs, size_t k, char *err, size_t errlen)
{
    size_t S = refs[0].n, H = E->hidden;
    int64_t shape[2] = {(int64_t)k, (int64_t)S};
    int64_t *ids = calloc(k * S, sizeof *ids), *mask = calloc(k * S, sizeof *mask), *tt = calloc(k * S, sizeof *tt);
    OrtValue *inv[3] = {NULL, NULL, NULL}, *outv = NULL;
    int rc = -1;
    if (!ids || !mask || !tt) {
        ts_fail(err, errlen, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < k; i++)
        for (size_t j = 0; j < refs[i].n; j++) {
            ids[i * S + j] = refs[i].r->rows[refs[i].row].ids[j];
            mask[i * S + j] = 1; /* the rest stays 0: padding the model must not see */
        }
    const OrtMemoryInfo *mi = ortenv_cpu_meminfo();
    int64_t *bufs[3] = {ids, mask, tt};
    size_t nin = E->token_type_ids ? 3 : 2;
    for (size_t i = 0; i < nin; i++)
        if (ort_check(g_ort->CreateTensorWithDataAsOrtValue(mi, bufs[i], k * S * sizeof(int64_t), shape, 2,
                                                             ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64, &inv[i]),
                      err, errlen))
            goto out;
    const char *in_names[3] = {"input_ids", "attention_mask", "token_type_ids"};
    const char *out_names[1] = {E->out_name};
    double t0 = ts_now();
    if (ort_check(g_ort->Run(E->session, NULL, in_names, (const OrtValue *const *)inv, nin, out_names, 1, &outv),
                  err, errlen))
        goto out;
    atomic_fetch_add(&E->runs, 1);
    float *y = NULL;
    OrtTensorTypeAndShapeInfo *info = NULL;
    size_t count = 0;
    if (ort_check(g_ort->GetTensorMutableData(outv, (void **)&y), err, errlen) ||
        ort_check(g_ort->GetTensorTypeAndShape(outv, &info), err, errlen))
        goto out;
    (void)ort_check(g_ort->GetTensorShapeElementCount(info, &count), NULL, 0);
    g_ort->ReleaseTensorTypeAndShapeInfo(info);
    size_t want = E->pool == EMB_POOL_GIVEN ? k * H : k * S * H;
    if (count != want) {
        ts_fail(err, errlen, "model output '%s' has %zu values; expected %zu", E->out_name, count, want);
        goto out;
    }
    double ms = (ts_now() - t0) * 1e3;
    for (size_t i = 0; i < k; i++) {
        ereq *r = refs[i].r;
        size_t n = refs[i].n;
        float *v = r->vec + refs[i].row * H;
        const float *x = E->pool == EMB_POOL_GIVEN ? y + i * H : y + i * S * H;
        if (E->pool == EMB_POOL_MEAN) { /* over the row's own tokens: the mask's ones */
            for (size_t h = 0; h < H; h++) {
                double s = 0;
                for (size_t t = 0; t < n; t++) s += x[t * H + h];
                v[h] = (float)(s / (double)n);
            }
        } else {
            const float *src = E->pool == EMB_POOL_LAST ? x + (n - 1) * H : x; /* GIVEN and CLS: row 0 */
            memcpy(v, src, H * sizeof *v);
        }
        if (E->normalize) {
            double s = 0;
            for (size_t h = 0; h < H; h++) s += (double)v[h] * v[h];
            double nrm = sqrt(s);
            if (nrm < 1e-12) nrm = 1e-12; /* torch.nn.functional.normalize's eps */
            for (size_t h = 0; h < H; h++) v[h] = (float)(v[h] / nrm);
        }
        r->compute_ms += ms * (double)n / (double)(k * S); /* the Run()'s share of its tokens */
    }
    rc = 0;
out:
    for (size_t i = 0; i < 3; i++)
        if (inv[i]) g_ort->ReleaseValue(inv[i]);
    if (outv) g_ort->ReleaseValue(outv);
    free(ids);
    free(mask);
    free(tt);
    return rc;
}

/* Runner thread: the items' rows in Run()s, pooled into each request's vec, whose reply is
 * written and handed back through srv->embed_done. */
static void embed_run(sched_item **items, size_t n, size_t runner, void *ctx)
{
    (void)runner;
    emb_served *E = ctx;
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        ereq *r = (ereq *)((char *)items[i] - offsetof(ereq, item));
        if (!atomic_load(&r->gone)) total += r->n_rows;
    }
    emb_ref *refs = calloc(total ? total : 1, sizeof *refs);
    char err[600] = "";
    bool failed = !refs;
    if (failed) snprintf(err, sizeof err, "out of memory");
    size_t m = 0;
    for (size_t i = 0; refs && i < n; i++) {
        ereq *r = (ereq *)((char *)items[i] - offsetof(ereq, item));
        if (atomic_load(&r->gone)) continue;
        for (size_t j = 0; j < r->n_rows; j++) refs[m++] = (emb_ref){r, j, r->rows[j].n};
    }
    /* longest first: each Run() pads to its first row, so rows of like length share one */
    if (refs) qsort(refs, m, sizeof *refs, by_len);
    for (size_t at = 0; !failed && at < m;) {
        size_t k = 1;
        while (at + k < m && (k + 1) * refs[at].n <= EMB_RUN_TOKENS) k++;
        if (run_chunk(E, refs + at, k, err, sizeof err)) failed = true;
        at += k;
    }
    free(refs);
    for (size_t i = 0; i < n; i++) {
        ereq *r = (ereq *)((char *)items[i] - offsetof(ereq, item));
        if (failed && !atomic_load(&r->gone)) {
            r->failed = true;
            v1_fail(&r->err, TS_INTERNAL_ERROR, NULL, "embedding run failed: %s", err);
        } else if (!atomic_load(&r->gone)) {
            embed_reply_body(r);
        }
        doneq_push(r->srv->embed_done, r);
    }
}
