/* v1_load.c: an LLM of the repository, opened on the loader thread through the repository's
 * llm_open hook (a folder that is a decoder with a tokenizer) and freed with the repository. */
#include <jansson.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "clock.h"
#include "health.h"
#include "log.h"
#include "embed.h"
#include "v1_internal.h"

#define LLM_PREFILL_CHUNK_MAX 512                    /* auto: longer chunks gain little */
#define LLM_PREFILL_CHUNK_MIN 16
#define LLM_PREFILL_LOGITS_BUDGET ((size_t)64 << 20) /* auto: one chunk's [chunk, vocab] logits */
#define LLM_MAX_SPECIALS 4096

static void llm_served_free(void *p)
{
    llm_served *L = p;
    if (!L) return;
    llm_engine_free(L->engine); /* delivers the last cancellations: before the model */
    llm_gram_cache_free(L->gram); /* after the sequences, which hold its grammars */
    llm_model_free(L->model);
    tok_free(L->tok);
    chat_tmpl_free(L->chat);
    for (size_t i = 0; i < L->n_specials; i++) free(L->specials[i]);
    free(L->specials);
    free(L);
}

/* Does the folder carry a chat template (tokenizer_config.json's chat_template, or
 * chat_template.jinja)? Then it must load; without one the model serves completions only. */
static bool has_chat_template(const char *dir)
{
    char path[1500];
    struct stat st;
    snprintf(path, sizeof path, "%s/chat_template.jinja", dir);
    if (stat(path, &st) == 0) return true;
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    if (stat(path, &st) != 0 || (size_t)st.st_size > CHAT_MAX_CONFIG_BYTES) return stat(path, &st) == 0;
    json_t *j = json_load_file(path, JSON_DECODE_INT_AS_REAL, NULL); /* model_max_length: 1e30 */
    bool has = j && json_is_object(j) && json_object_get(j, "chat_template") &&
               !json_is_null(json_object_get(j, "chat_template"));
    json_decref(j);
    return has || !j; /* an unreadable config: let chat_load say why */
}

static int collect_specials(llm_served *L)
{
    size_t nv = tok_vocab_size(L->tok);
    for (size_t id = 0; id < nv; id++) {
        if (!tok_is_special(L->tok, (int32_t)id)) continue;
        size_t len = 0;
        const char *t = tok_id_token(L->tok, (int32_t)id, &len);
        if (!t || len == 0 || L->n_specials >= LLM_MAX_SPECIALS) continue;
        if (L->n_specials % 64 == 0) {
            char **p = realloc(L->specials, (L->n_specials + 64) * sizeof *p);
            if (!p) return -1;
            L->specials = p;
        }
        char *s = malloc(len + 1);
        if (!s) return -1;
        memcpy(s, t, len);
        s[len] = '\0';
        L->specials[L->n_specials++] = s;
    }
    return 0;
}

/* The model's vocabulary for constrained decoding (llm_gram_cache's builder, on the first
 * constrained request): the logits' ids (the tokenizer's may be fewer: the rest are never
 * allowed), each id's bytes, the tokenizer's special tokens never inside the output, and the
 * ids that end a sequence (generation_config.json's eos ids with <|eot_id|>, and
 * tokenizer_config.json's eos_token) only where the grammar may end. */
static gram_vocab *build_vocab(void *ctx, ts_err *err)
{
    const llm_served *L = ctx;
    size_t n = llm_model_sig(L->model)->vocab, nt = tok_vocab_size(L->tok);
    const gen_config *g = llm_model_gen(L->model);
    const unsigned char **bytes = calloc(n ? n : 1, sizeof *bytes);
    size_t *lens = calloc(n ? n : 1, sizeof *lens);
    bool *special = calloc(n ? n : 1, sizeof *special);
    int32_t ends[GEN_MAX_EOS + 1];
    size_t n_end = 0;
    gram_vocab *v = NULL;
    if (!bytes || !lens || !special) {
        ts_err_set(err, TS_INTERNAL_ERROR, "out of memory for the vocabulary");
        goto out;
    }
    for (size_t i = 0; i < n && i < nt; i++) {
        bytes[i] = tok_id_bytes(L->tok, (int32_t)i, &lens[i]);
        special[i] = tok_is_special(L->tok, (int32_t)i);
    }
    for (size_t i = 0; i < g->n_eos; i++)
        if (g->eos[i] >= 0 && (size_t)g->eos[i] < n) ends[n_end++] = g->eos[i];
    int32_t te = tok_eos(L->tok);
    if (te >= 0 && (size_t)te < n && !gen_config_is_eos(g, te)) ends[n_end++] = te;
    double t0 = ts_now();
    v = gram_vocab_new(n, bytes, lens, special, ends, n_end, err);
    if (v)
        LOG_INFO_(LOGF({"model", L->name}), "LLM: constrained decoding's vocabulary of %zu tokens built in %.0f ms",
                  n, (ts_now() - t0) * 1e3);
out:
    free(bytes);
    free(lens);
    free(special);
    return v;
}

/* The engine's error hook (generation thread). The fault injection counts LLM Run()s with
 * the KServe ones: the Nth of either kind fails. */
static int llm_before_run(void *ctx, ts_err *err)
{
    const llm_served *L = ctx;
    int64_t nth = L->srv->set->fault_inject_gpu_run;
    if (nth <= 0 || atomic_fetch_add(&L->srv->runs, 1) + 1 != (uint64_t)nth) return 0;
    ts_err_set(err, TS_INTERNAL_ERROR, "LLM step failed: CUDA failure 700: an illegal memory access was "
               "encountered (injected by TIERSERVE_FAULT_INJECT_GPU_RUN=%lld)", (long long)nth);
    return -1;
}

/* A step's device error latches the worker's GPU fault, as a KServe Run()'s does. */
static void llm_on_run_error(void *ctx, const ts_err *err)
{
    const llm_served *L = ctx;
    health_check_gpu_error(err->msg, L->name);
}

/* TIERSERVE_LLM_PREFILL_CHUNK, or 0: ORT writes a prefill chunk's whole [1, chunk, vocab]
 * logits though we keep one row, 311 MB in FP32 for 512 tokens of Qwen3's 152k vocabulary: the
 * longest chunk up to 512 whose logits fit the budget (at least 16: a shorter one spends more
 * Run()s than it saves). */
static size_t prefill_chunk(int64_t set, const llm_sig *s)
{
    if (set > 0) return (size_t)set;
    size_t row = (s->vocab ? s->vocab : 1) * (s->logits_fp16 ? 2 : 4);
    size_t c = LLM_PREFILL_LOGITS_BUDGET / row;
    return c > LLM_PREFILL_CHUNK_MAX ? LLM_PREFILL_CHUNK_MAX : c < LLM_PREFILL_CHUNK_MIN ? LLM_PREFILL_CHUNK_MIN : c;
}

static int llm_open(void *ctx, const char *dir, const char *name, const ep_config *cfg, const ep_result *ep,
                    void **out, double *warmup_ms, char *err, size_t errlen)
{
    server *srv = ctx;
    *out = NULL;
    llm_served *L = calloc(1, sizeof *L);
    if (!L) return ts_fail(err, errlen, "out of memory");
    L->kind = V1_LLM;
    snprintf(L->name, sizeof L->name, "%s", name);
    L->srv = srv;
    hist_init(&L->ttft, HIST_LATENCY_BOUNDS, HIST_LATENCY_N);
    hist_init(&L->itl, HIST_LATENCY_BOUNDS, HIST_LATENCY_N);
    hist_init(&L->e2e, HIST_LATENCY_BOUNDS, HIST_LATENCY_N);
    hist_init(&L->queue, HIST_LATENCY_BOUNDS, HIST_LATENCY_N);
    ts_err e = {0};
    /* the layout's knobs as the KServe models take them (TIERSERVE_TUNE, _INTRA_OP_*), the
     * throughput figure at the engine's slots */
    llm_model_opts mo = {.ep_cfg = cfg, .ep = ep, .intra_op_threads = (int)srv->set->intra_op_threads,
                         .spinning = srv->set->intra_op_spinning, .tune = srv->set->tune,
                         .no_warmup = !srv->set->warmup, .tune_batch = (size_t)srv->set->llm_max_sequences,
                         .fault_kv_writeback = srv->set->fault_inject_kv_writeback,
                         .kv_fp16 = strcmp(srv->set->llm_kv_dtype, "fp16") == 0};
    (void)llm_kv_mode_parse(srv->set->llm_kv, &mo.kv); /* settings_load checked it */
    (void)llm_trunk_mode_parse(srv->set->llm_prefill_trunk, &mo.trunk);
    llm_open_result res = llm_model_try_open(dir, &mo, &L->model, &e);
    if (res != LLM_OPEN_OK) {
        snprintf(err, errlen, "%s", e.msg);
        llm_served_free(L);
        if (res != LLM_OPEN_NOT_DECODER) return -1;
        /* not a decoder: an encoder (embeddings), else a KServe model (a classifier with a
         * tokenizer); the decoder's complaint is kept for the KServe case's log line */
        emb_served *E = NULL;
        char why[1024];
        int erc = embed_open(srv, dir, name, cfg, ep, &E, why, sizeof why);
        if (erc != 0) snprintf(err, errlen, "%s", why);
        if (erc != 1) return erc;
        *out = E;
        return REPO_V1_EMBEDDINGS;
    }
    L->context = llm_model_max_context(L->model);
    L->prefill_chunk = prefill_chunk(srv->set->llm_prefill_chunk, llm_model_sig(L->model));
    L->tok = tok_load(dir, &e);
    if (!L->tok) goto fail;
    /* the operator's template file: its failure fails the model (they asked for it) */
    char tfile[SETTINGS_STR_MAX];
    int ov = chat_override_for(srv->set->chat_template, name, tfile, sizeof tfile);
    if (ov < 0) {
        ts_err_set(&e, TS_INTERNAL_ERROR, "%s", tfile);
        goto fail;
    }
    if (ov > 0 && !(L->chat = chat_load_override(dir, tfile, &e))) goto fail;
    if (ov == 0 && has_chat_template(dir) && !(L->chat = chat_load(dir, &e))) {
        /* only chat needs the template: a model whose template we do not render (a Llama-3.1
         * export) still serves /v1/completions, rather than failing the model and, with
         * --exit-on-error, the worker. The note drops the model folder: clients see it */
        size_t dl = strlen(dir);
        const char *why = strncmp(e.msg, dir, dl) == 0 && e.msg[dl] == '/' ? e.msg + dl + 1 : e.msg;
        snprintf(L->chat_note, sizeof L->chat_note, "%s", why);
        LOG_WARN_(LOGF({"model", name}), "LLM: chat template not supported, so /v1/chat/completions refuses this "
                  "model (/v1/completions serves it): %s", L->chat_note);
        e = (ts_err){0};
    }
    if (collect_specials(L) || !(L->gram = llm_gram_cache_new(build_vocab, L))) {
        ts_err_set(&e, TS_INTERNAL_ERROR, "out of memory");
        goto fail;
    }
    llm_engine_opts eo = {.max_active = (size_t)srv->set->llm_max_sequences,
                          .max_waiting = (size_t)srv->set->llm_queue_size,
                          .prefill_chunk = L->prefill_chunk, .step_tokens = (size_t)srv->set->llm_step_tokens,
                          .hooks = {.before_run = llm_before_run, .on_run_error = llm_on_run_error, .ctx = L},
                          .model_id = dir}; /* the folder names the model and its version */
    char how[200] = "set";
    eo.kv_budget = srv->set->llm_kv_budget ? (size_t)srv->set->llm_kv_budget
                                           : llm_model_kv_budget_auto(L->model, how, sizeof how);
    if (strcmp(srv->set->llm_prefix_scope, "off") != 0)
        eo.prefix_cache_bytes = srv->set->llm_prefix_cache ? (size_t)srv->set->llm_prefix_cache
                                : eo.kv_budget ? eo.kv_budget / 4 : (size_t)1 << 30;
    if (llm_engine_new(L->model, &eo, &L->engine, &e)) goto fail;
    LOG_INFO_(LOGF({"model", name}), "LLM: context %lld, chat template %s, %zu sequences, %zu waiting, "
              "prefill chunk %zu, KV budget %zu MiB (%s), prefix cache %zu MiB (scope %s)", (long long)L->context,
              L->chat ? chat_variant(L->chat) : "none", eo.max_active, eo.max_waiting, eo.prefill_chunk,
              eo.kv_budget >> 20, how, eo.prefix_cache_bytes >> 20, srv->set->llm_prefix_scope);
    *out = L;
    *warmup_ms = llm_model_check_ms(L->model);
    return REPO_V1_LLM;
fail:
    snprintf(err, errlen, "%s", e.msg);
    llm_served_free(L);
    return -1;
}

/* The repository's free hook: an LLM's or an embedding model's handle. */
static void served_free(void *p)
{
    if (p && *(const v1_kind *)p == V1_EMBED) embed_free(p);
    else llm_served_free(p);
}

void v1_hooks(server *srv, repo_options *ro)
{
    ro->llm_open = llm_open;
    ro->llm_free = served_free;
    ro->llm_ctx = srv;
}
