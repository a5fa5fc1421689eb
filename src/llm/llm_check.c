/* llm_check: the bound KV path proves itself on the model before it serves.
 *
 * The bound path (llm_kv.c) moves the cache through code no CI machine runs on a GPU: the
 * allocator of the session's device memory, strided copies through the CUDA runtime, the
 * waits between our copies and ORT's stream. A mistake there would not fail a request: it
 * would quietly change what the model says. So at load, two short sequences go through the
 * bound path the way the engine drives it (prefills written back, a padded batch built from
 * the caches, presents fed back as pasts, the batch dissolved and rebuilt in another
 * composition twice) and every logits row is compared with the same tokens run one
 * sequence at a time on the host path, which shares nothing with the bound path but the
 * session. The tokens are fixed, not sampled: both paths see the same inputs whatever the
 * model predicts. On a GPU tier these runs are also the LLM's warm-up (cuBLAS and kernel
 * set-up happen here, not on the first request). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llm_check.h"
#include "llm_int.h"

/* a's prompt runs as two chunks (3 then 2: the second builds its batch from the cache and
 * writes back from a slot past 0, as every prompt longer than the prefill chunk does) */
enum { PROMPT_A = 5, CHUNK_A = 3, PROMPT_B = 3, DECODE = 3, ROWS = 1 + DECODE };
_Static_assert(PROMPT_A + DECODE == LLM_KV_CHECK_MIN_CONTEXT, "the check's longest sequence");

/* Fixed, spread-out ids inside any vocabulary. */
static int32_t tok(const llm_model *m, size_t seq, size_t i)
{
    return (int32_t)((seq * 7919u + i * 104729u + 11u) % m->sig.vocab);
}

static llm_seq *seq_for(const llm_model *m, size_t which, size_t n_prompt, ts_err *err)
{
    int32_t prompt[PROMPT_A];
    for (size_t i = 0; i < n_prompt; i++) prompt[i] = tok(m, which, i);
    llm_gen_params p = {.max_new_tokens = DECODE + 1};
    llm_seq *s = llm_seq_new(m, prompt, n_prompt, &p, err);
    if (s) s->id = which + 1;
    if (s && llm_seq_alloc_kv(m, s, err)) {
        llm_seq_free(s);
        s = NULL;
    }
    return s;
}

/* The next fixed token, fed at the next step (the sequences are sized for all of them:
 * llm_kv_check runs only when the context holds LLM_KV_CHECK_MIN_CONTEXT tokens). */
static void feed(const llm_model *m, llm_seq *s, size_t which)
{
    if (s->n_tokens >= s->cap) return; /* never true (see above); keeps a change from writing past */
    s->tokens[s->n_tokens] = tok(m, which, s->n_tokens);
    s->n_tokens++;
}

/* One sequence alone on the host path: its prompt, then DECODE fixed tokens; ROWS rows. */
static int reference(llm_model *m, size_t which, size_t n_prompt, float *rows, ts_err *err)
{
    llm_seq *s = seq_for(m, which, n_prompt, err);
    int rc = s ? 0 : -1;
    for (size_t r = 0; !rc && r < ROWS; r++) {
        if (r) feed(m, s, which);
        rc = llm_step_run(m, &s, 1, r ? 1 : n_prompt, rows + r * m->sig.vocab, err);
    }
    llm_seq_free(s);
    return rc;
}

typedef struct {
    size_t rows;
    double worst;   /* max |bound - host| over a row, over max(1, max |host|) of that row */
    bool nonfinite; /* a bound row has a NaN or infinity where the host row is finite */
    char bad[200];
} cmp_state;

static void compare(const llm_model *m, cmp_state *c, const float *got, const float *want, const char *what)
{
    double d = 0, scale = 1;
    for (size_t v = 0; v < m->sig.vocab; v++) {
        double w = want[v], g = got[v];
        if (!isfinite(w)) continue; /* the host path's own overflow says nothing of the bound one */
        if (!isfinite(g)) {
            if (!c->nonfinite) snprintf(c->bad, sizeof c->bad, "%s", what);
            c->nonfinite = true;
            continue;
        }
        if (fabs(g - w) > d) d = fabs(g - w);
        if (fabs(w) > scale) scale = fabs(w);
    }
    c->rows++;
    if (d / scale > c->worst) {
        c->worst = d / scale;
        if (!c->nonfinite) snprintf(c->bad, sizeof c->bad, "%s", what);
    }
}

/* The engine's sequence of bound-path calls; each row compared as it comes. */
static int bound_run(llm_model *m, const float *ref_a, const float *ref_b, cmp_state *c, ts_err *err)
{
    size_t V = m->sig.vocab;
    llm_kv_ctx *ctx = NULL;
    llm_seq *a = NULL, *b = NULL;
    float *lg = malloc(2 * V * sizeof *lg);
    int rc = -1;
    if (!lg) {
        ts_err_set(err, TS_INTERNAL_ERROR, "out of memory");
        return -1;
    }
    if (llm_kv_ctx_new(m, &ctx, err) || !(a = seq_for(m, 0, PROMPT_A, err)) ||
        !(b = seq_for(m, 1, PROMPT_B, err)))
        goto out;
    llm_seq *ab[2] = {a, b};
    /* prefills: a batch of their own, written back into the caches; a's in two chunks */
    if (llm_kv_step(m, ctx, false, &a, 1, CHUNK_A, lg, err) ||
        llm_kv_step(m, ctx, false, &a, 1, PROMPT_A - CHUNK_A, lg, err))
        goto out;
    compare(m, c, lg, ref_a, "a prompt's second chunk");
    if (llm_kv_step(m, ctx, false, &b, 1, PROMPT_B, lg, err)) goto out;
    compare(m, c, lg, ref_b, "the second prefill");
    /* two steps of one padded batch: built from the caches, then presents fed back; a model
     * without position_ids is never batched (llm_engine.c): a and b take turns, each batch
     * built from its cache and dissolved again */
    for (size_t r = 1; r <= 2; r++) {
        feed(m, a, 0);
        feed(m, b, 1);
        if (m->sig.position_ids) {
            if (llm_kv_settle(m, ctx, ab, 2, ab, 2, err) || llm_kv_step(m, ctx, true, ab, 2, 1, lg, err)) goto out;
        } else {
            for (size_t i = 0; i < 2; i++)
                if (llm_kv_settle(m, ctx, ab, 2, &ab[i], 1, err) ||
                    llm_kv_step(m, ctx, true, &ab[i], 1, 1, lg + i * V, err))
                    goto out;
        }
        compare(m, c, lg, ref_a + r * V, r == 1 ? "a batch built from the caches" : "presents fed back as pasts");
        compare(m, c, lg + V, ref_b + r * V, r == 1 ? "a batch built from the caches" : "presents fed back as pasts");
    }
    /* the batch dissolves (both rows written back) and b goes on alone, then a alone */
    feed(m, b, 1);
    if (llm_kv_settle(m, ctx, ab, 2, &b, 1, err) || llm_kv_step(m, ctx, true, &b, 1, 1, lg, err)) goto out;
    compare(m, c, lg, ref_b + DECODE * V, "a batch rebuilt after a write-back");
    feed(m, a, 0);
    if (llm_kv_settle(m, ctx, ab, 2, &a, 1, err) || llm_kv_step(m, ctx, true, &a, 1, 1, lg, err)) goto out;
    compare(m, c, lg, ref_a + DECODE * V, "a batch rebuilt after a write-back");
    rc = 0;
out:
    llm_kv_ctx_free(ctx);
    llm_seq_free(a);
    llm_seq_free(b);
    free(lg);
    return rc;
}

int llm_kv_check(llm_model *m, llm_kv_check_result *res, ts_err *err)
{
    size_t V = m->sig.vocab;
    float *ref = malloc(2 * ROWS * V * sizeof *ref);
    cmp_state c = {0};
    ts_err be = {0};
    int rc = -1;
    memset(res, 0, sizeof *res);
    if (m->max_context < LLM_KV_CHECK_MIN_CONTEXT) { /* its sequences would not fit */
        free(ref);
        res->skipped = true;
        return 0;
    }
    if (!ref) {
        ts_err_set(err, TS_INTERNAL_ERROR, "out of memory for the KV check's logits");
        return -1;
    }
    /* the reference: the host path, its caches malloc'd (the model is switched to it for
     * the duration; nothing else uses the model yet) */
    bool bound = m->kv_bound;
    m->kv_bound = false;
    int hr = reference(m, 0, PROMPT_A, ref, err) || reference(m, 1, PROMPT_B, ref + ROWS * V, err);
    m->kv_bound = bound;
    if (hr) goto out;
    rc = 0;
    res->tolerance = m->sig.kv_fp16 || m->kv_half || m->sig.logits_fp16 ? LLM_KV_CHECK_TOL_FP16 : LLM_KV_CHECK_TOL_FP32;
    if (bound_run(m, ref, ref + ROWS * V, &c, &be)) {
        res->failed = true;
        snprintf(res->why, sizeof res->why, "%.390s", be.msg);
        goto out;
    }
    res->rows = c.rows;
    res->worst = c.worst;
    if (c.nonfinite) {
        res->failed = true;
        snprintf(res->why, sizeof res->why, "logits are not finite (NaN or infinity) where the host path's "
                 "are finite, first at %s", c.bad);
    } else if (!(c.worst <= res->tolerance)) {
        res->failed = true;
        snprintf(res->why, sizeof res->why, "logits differ from the host path's by %.3g of their scale "
                 "(tolerance %.3g), worst at %s", c.worst, res->tolerance, c.bad);
    }
out:
    free(ref);
    return rc;
}
