/* llm_engine: the generation thread and its queues (see llm_engine.h for the loop). */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "heapres.h"
#include "clock.h"
#include "llm_budget.h"
#include "llm_int.h"
#include "llm_prefix.h"
#include "log.h"

struct llm_engine {
    llm_model *m;
    llm_engine_opts opt;
    pthread_t thread;
    bool started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool stop;                /* under mu */
    llm_seq **wait;           /* ring of wcap, under mu */
    size_t w_head, w_n;
    size_t wcap;              /* opt.max_waiting + max_active: a preempted sequence always
                                 finds a place back (llm_engine_add still stops at max_waiting) */
    llm_seq **active;         /* opt.max_active slots; changed only by the generation thread,
                                 under mu (cancel reads it under mu) */
    size_t n_active;
    uint64_t next_id;         /* under mu */
    llm_engine_stats st;      /* under mu */
    /* the generation thread's own */
    llm_sampler *sampler;
    float *lp_row;            /* vocab: a logits row kept from the penalties for logprobs
                                 (allocated on the first penalized logprobs sequence) */
    float *logits;            /* max_active x vocab */
    float *fork_row;          /* vocab: a leader's last logits row, for its forks' first draws */
    llm_seq **batch;
    llm_kv_ctx *kv;           /* the bound path's batch and IoBinding (NULL: host path) */
    bool one_per_run;         /* no position_ids: one sequence per decode Run() (see decode_set) */
    uint64_t turn;            /* decode steps taken: whose turn it is when one_per_run */
    struct ended { llm_seq *s; int32_t tok; llm_finish fin; } *ended; /* max_active: decode's */
    llm_prefix *pc;           /* the prefix cache (NULL: off); its blocks are llm_kv_blocks */
    /* the step budget's measurements (seconds, moving averages; 0: none yet): a decode step,
       and a prefill chunk's time per token (prefill_tokens) */
    double dec_s, pf_tok_s;
    llm_budget_fit fit;       /* a prefill chunk's cost (llm_budget.h, step_prefill_tokens) */
    char *model_id;
};

static const char k_no_position_ids[] =
    "the model has no position_ids input (it derives positions from the past's length, which "
    "left padding would shift): its sequences are never batched, one per decode Run(), taking turns";

const char *llm_finish_name(llm_finish f)
{
    static const char *const k[] = {"", "stop", "length", "cancelled", "error", "stop"};
    return (unsigned)f < sizeof k / sizeof *k ? k[f] : "error";
}

/* ---- helpers on the generation thread ---- */

/* The trace hook (llm_engine_hooks.on_trace): off, the loop takes no time stamp for it. */
static bool tracing(const llm_engine *e)
{
    return e->opt.hooks.on_trace != NULL;
}

static double trace_t0(const llm_engine *e)
{
    return tracing(e) ? ts_now() : 0;
}

static void trace(const llm_engine *e, llm_trace_kind k, size_t n, size_t tokens, size_t past, size_t budget,
                  double t0)
{
    if (!tracing(e)) return;
    llm_trace_ev ev = {.kind = k, .n = n, .tokens = tokens, .past = past, .budget = budget, .t0 = t0,
                       .t1 = ts_now()};
    e->opt.hooks.on_trace(e->opt.hooks.ctx, &ev);
}

/* Into the wait queue (under mu, room checked by the caller), kept in (priority, id) order:
 * a new sequence goes behind every waiting one of the same or a lower priority value, ahead
 * of the rest; a preempted one (an older id) goes back ahead of the later arrivals of its
 * priority. */
static void enqueue(llm_engine *e, llm_seq *s)
{
    size_t at = e->w_n;
    for (; at > 0; at--) {
        const llm_seq *q = e->wait[(e->w_head + at - 1) % e->wcap];
        if (q->params.priority < s->params.priority || (q->params.priority == s->params.priority && q->id < s->id))
            break;
        e->wait[(e->w_head + at) % e->wcap] = e->wait[(e->w_head + at - 1) % e->wcap];
    }
    e->wait[(e->w_head + at) % e->wcap] = s;
    e->w_n++;
    e->st.waiting = e->w_n;
}

/* Takes s out of the active slots (under mu) and frees its cache at once. */
static void drop_active(llm_engine *e, llm_seq *s)
{
    pthread_mutex_lock(&e->mu);
    for (size_t i = 0; i < e->n_active; i++)
        if (e->active[i] == s) {
            e->active[i] = e->active[--e->n_active];
            break;
        }
    if (s->kv) e->st.kv_bytes -= s->kv_bytes;
    e->st.kv_reserved -= s->kv_bytes; /* reserved when it took the slot (reshuffle) */
    e->st.active = e->n_active;
    pthread_mutex_unlock(&e->mu);
}

/* The final callback, then the sequence is gone. Called without mu held. err NULL: the one
 * take_token kept in s->err. */
static void finish(llm_seq *s, int32_t tok, llm_finish fin, const ts_err *err)
{
    s->state = SEQ_DONE;
    s->cb(s->ud, s->id, tok, fin, fin == LLM_FIN_ERROR ? (err ? err : &s->err) : NULL);
    llm_seq_free(s);
}

/* Draws of tool_choice "auto" before a call (llm_gen_params.gram_auto): a token that starts a
 * call the grammar cannot go on with (`<tool_call>` then a byte no call has, in one token) is
 * taken off row and the draw repeated, so a call, once started, is one the tools allow. */
#define WATCH_REDRAWS 256

static int32_t watch_call(llm_engine *e, llm_seq *s, float *row, int32_t tok)
{
    for (int k = 0;; k++) {
        int rc = llm_gram_watch_token(s->params.gram, s->watch, tok, &s->matcher, &s->err);
        if (rc < 0) return -1;
        if (rc == 0) {
            if (s->matcher) { /* the call started: the grammar holds from the next step */
                free(s->watch);
                s->watch = NULL;
            }
            return tok;
        }
        if (k == WATCH_REDRAWS) break;
        row[tok] = -INFINITY;
        tok = llm_sample(e->sampler, row, &s->params.sample, &s->rng);
    }
    ts_err_set(&s->err, TS_BAD_REQUEST, "constrained decoding: %d draws in a row started a tool call no tool "
               "allows", WATCH_REDRAWS + 1);
    return -1;
}

/* The grammar's mask on row (first: llm_gen_params.gram), the request's edits, then the draw.
 * -1 with s->err set when the grammar fails the step or leaves no token the draw may take. */
static int32_t pick(llm_engine *e, llm_seq *s, float *row, bool adjust)
{
    size_t vocab = e->m->sig.vocab;
    if (s->matcher && !llm_gram_mask_row(s->matcher, s->gmask, s->gwords, row, vocab, &s->err)) return -1;
    if (s->counts) llm_counts_penalize(s->counts, row, &s->params.sample);
    if (adjust) /* logit_bias, min_tokens (llm_sample.h) */
        llm_sample_adjust(&s->params.sample, row, vocab, (int64_t)(s->n_tokens - s->n_prompt), e->m->gen.eos,
                          e->m->gen.n_eos);
    int32_t tok = llm_sample(e->sampler, row, &s->params.sample, &s->rng);
    if (s->watch) return watch_call(e, s, row, tok);
    ts_err why = {0};
    if (!s->matcher || gram_accept_token(s->matcher, tok, &why)) return tok;
    /* every allowed token was -inf after the edits (min_tokens holding the only end id):
     * the grammar wins (llm_gen_params.gram) */
    for (size_t i = 0; i < e->m->gen.n_eos; i++) {
        ts_err ignored = {0};
        if (gram_accept_token(s->matcher, e->m->gen.eos[i], &ignored)) return e->m->gen.eos[i];
    }
    ts_err_set(&s->err, TS_BAD_REQUEST, "constrained decoding: no token the grammar allows is left after "
               "logit_bias and min_tokens (%s)", why.msg);
    return -1;
}

/* Appends the token sampled from row and reports it; returns true if the sequence ended
 * (and was freed). With `later`, an ending sequence is only marked SEQ_DONE: leaving its
 * slot, the final callback and the freeing are the caller's (*later filled in). */
static bool take_token(llm_engine *e, llm_seq *s, float *row, struct ended *later)
{
    /* row is this sequence's own row of e->logits: penalizing it touches no other one */
    const float *raw = row; /* logprobs read the model's own row, before the mask and penalties */
    bool lp = s->params.logprobs && s->params.on_logprobs;
    bool adjust = llm_sample_adjusts(&s->params.sample);
    if (lp && (s->counts || adjust || s->matcher || s->watch)) {
        if (!e->lp_row) e->lp_row = malloc(e->m->sig.vocab * sizeof *e->lp_row);
        if (e->lp_row) {
            memcpy(e->lp_row, row, e->m->sig.vocab * sizeof *row);
            raw = e->lp_row;
        }
    }
    int32_t tok = pick(e, s, row, adjust);
    llm_finish fin = LLM_FIN_NONE;
    if (tok < 0) {
        fin = LLM_FIN_ERROR;
        goto end;
    }
    if (lp) {
        llm_logprobs out;
        llm_logprobs_compute(raw, e->m->sig.vocab, tok, s->params.top_logprobs, &out);
        s->params.on_logprobs(s->ud, s->id, &out);
    }
    s->tokens[s->n_tokens++] = tok;
    /* never full: the map holds as many distinct ids as the sequence may generate */
    if (s->counts) (void)llm_counts_add(s->counts, tok);
    if ((!s->params.ignore_eos && gen_config_is_eos(&e->m->gen, tok)) || llm_sample_stop_id(&s->params.sample, tok) ||
        (s->matcher && gram_ended(s->matcher)))
        fin = LLM_FIN_EOS;
    else if (s->matcher && gram_is_done(s->matcher))
        fin = LLM_FIN_DONE;
    else if ((int64_t)(s->n_tokens - s->n_prompt) >= s->params.max_new_tokens || s->n_tokens >= s->cap)
        fin = LLM_FIN_LENGTH;
    if (fin == LLM_FIN_NONE) {
        s->cb(s->ud, s->id, tok, LLM_FIN_NONE, NULL);
        return false;
    }
end:
    if (later) { /* it still holds its slot: the caller settles the batch first */
        s->state = SEQ_DONE;
        /* its generated tokens' blocks too */
        s->keep_kv = e->pc && s->params.cache_scope[0] && fin != LLM_FIN_ERROR;
        *later = (struct ended){s, tok, fin};
        return true;
    }
    drop_active(e, s);
    finish(s, tok, fin, NULL);
    return true;
}

static size_t decode_set(llm_engine *e);
static int settle(llm_engine *e, size_t n);

/* ---- the prefix cache (generation thread) ---- */

static void pc_free_block(void *ctx, void *payload)
{
    (void)ctx;
    llm_kv_block_free(payload);
}

/* The stats' copy of the cache's counters. */
static void pc_sync(llm_engine *e)
{
    llm_prefix_stats ps;
    llm_prefix_stats_get(e->pc, &ps);
    pthread_mutex_lock(&e->mu);
    e->st.pc_bytes = ps.bytes;
    e->st.pc_blocks = ps.blocks;
    e->st.pc_lookups = ps.lookups;
    e->st.pc_hits = ps.hits;
    e->st.pc_hit_tokens = ps.hit_tokens;
    e->st.pc_stores = ps.stores;
    e->st.pc_evictions = ps.evictions;
    pthread_mutex_unlock(&e->mu);
}

/* What the KV budget leaves the prefix cache now (the active caches come first). */
static size_t pc_room(llm_engine *e)
{
    if (!e->opt.kv_budget) return SIZE_MAX;
    pthread_mutex_lock(&e->mu);
    size_t used = e->st.kv_reserved;
    pthread_mutex_unlock(&e->mu);
    return used < e->opt.kv_budget ? e->opt.kv_budget - used : 0;
}

/* What a sequence prefills before it samples: its prompt, or after a preemption everything
 * it had (the prompt and the tokens generated so far: the last of them was never fed). */
static size_t fill_to(const llm_seq *s)
{
    return s->n_resume ? s->n_resume : s->n_prompt;
}

/* A joining sequence takes the cached blocks its prompt starts with: their KV is copied into
 * its cache and its prefill starts after them. At least the prompt's last token is always
 * computed (its logits give the first token), so a prompt of n tokens reuses at most
 * (n - 1) / B blocks. */
static void pc_attach(llm_engine *e, llm_seq *s)
{
    if (!e->pc || !s->params.cache_scope[0]) return;
    size_t B = LLM_PREFIX_BLOCK, usable = (fill_to(s) - 1) / B, got = 0;
    llm_pkey parent = llm_prefix_root(e->pc, e->model_id, s->params.cache_scope);
    for (; got < usable; got++) {
        llm_pkey key = llm_prefix_next(e->pc, parent, s->tokens + got * B);
        llm_kv_block *b = llm_prefix_get(e->pc, parent, key, s->tokens + got * B);
        char msg[300];
        if (!b) break;
        if (llm_kv_block_copy(e->m, s, got * B, B, b, true, msg, sizeof msg)) {
            /* the tokens before it are whole; the rest is computed as if it had missed */
            LOG_WARN_(LOGF({"component", "llm"}), "prefix cache: attaching a block: %s", msg);
            break;
        }
        parent = key;
    }
    llm_prefix_count(e->pc, usable, got);
    s->n_cached = s->n_synced = s->n_reused = got * B;
    pc_sync(e);
}

/* The whole blocks of s's first `upto` tokens (their KV in s's cache) that the cache lacks
 * are copied in, as far as the budgets allow. */
static void pc_store(llm_engine *e, llm_seq *s, size_t upto)
{
    if (!e->pc || !s->params.cache_scope[0]) return;
    size_t B = LLM_PREFIX_BLOCK;
    if (upto > s->n_synced) upto = s->n_synced;
    llm_pkey parent = llm_prefix_root(e->pc, e->model_id, s->params.cache_scope);
    for (size_t i = 0; i + 1 <= upto / B; i++) {
        llm_pkey key = llm_prefix_next(e->pc, parent, s->tokens + i * B);
        if (!llm_prefix_has(e->pc, key)) {
            if (!llm_prefix_make_room(e->pc, pc_room(e))) break;
            ts_err err = {0};
            char msg[300] = "";
            llm_kv_block *b = llm_kv_block_new(e->m, B, &err);
            if (!b || llm_kv_block_copy(e->m, s, i * B, B, b, false, msg, sizeof msg) ||
                !llm_prefix_put(e->pc, parent, key, s->tokens + i * B, b)) {
                if (b || err.msg[0])
                    LOG_WARN_(LOGF({"component", "llm"}), "prefix cache: storing a block: %s",
                              msg[0] ? msg : err.msg[0] ? err.msg : "not taken");
                llm_kv_block_free(b);
                break;
            }
        }
        parent = key;
    }
    pc_sync(e);
}

/* ---- priority preemption (docs/llm.md "Priority preemption") ---- */

/* Under mu: would s fit in a slot and in the KV budget once `slots` slots and `bytes`
 * reserved bytes were given back? */
static bool fits(const llm_engine *e, const llm_seq *s, size_t slots, size_t bytes)
{
    /* a leader joins with its waiting forks (llm_engine_add_n): room for all of them */
    return e->n_active - slots + 1 + s->n_forks <= e->opt.max_active &&
           (!e->opt.kv_budget || e->st.kv_reserved - bytes + s->kv_bytes + s->fork_bytes <= e->opt.kv_budget);
}

/* Under mu: the running sequences that must leave for `head` to join, least urgent first
 * (a higher priority value; the latest to arrive among equals: the least work lost), only
 * ones strictly less urgent than head; 0 when those would not make room enough (nobody is
 * preempted for nothing) or when the wait queue could not take them back. */
static size_t pick_victims(llm_engine *e, const llm_seq *head, llm_seq **out)
{
    size_t n = 0, bytes = 0;
    while (!fits(e, head, n, bytes)) {
        llm_seq *v = NULL;
        for (size_t i = 0; i < e->n_active; i++) {
            llm_seq *a = e->active[i];
            bool taken = false;
            for (size_t j = 0; j < n && !taken; j++) taken = out[j] == a;
            if (taken || a->state == SEQ_DONE || atomic_load(&a->cancelled) ||
                a->params.priority <= head->params.priority)
                continue;
            if (!v || a->params.priority > v->params.priority ||
                (a->params.priority == v->params.priority && a->id > v->id))
                v = a;
        }
        if (!v || e->w_n + n + 1 > e->wcap) return 0;
        out[n++] = v;
        bytes += v->kv_bytes;
    }
    return n;
}

/* s leaves its slot for the wait queue. What it has computed is offered to the prefix cache
 * (kept if the budgets allow: it then resumes from those blocks), its own cache is freed, and
 * it rejoins later recomputing the rest from its tokens: its prompt and what it generated.
 * Its sampler state (rng, penalty counts) stays in the sequence, so it goes on exactly as if
 * never stopped. */
static void preempt(llm_engine *e, llm_seq *s)
{
    if (s->fork_from) { /* a fork before its leader's prompt is done: the group goes back together */
        preempt(e, s->fork_from);
        return;
    }
    bool was_decoding = s->state == SEQ_DECODE, rows_ok = true;
    s->state = SEQ_WAITING; /* out of the decode set: its rows are written back below */
    if (was_decoding) rows_ok = settle(e, decode_set(e)) == 0;
    drop_active(e, s); /* gives back its reservation: the blocks below fit in what is left */
    if (rows_ok) pc_store(e, s, s->n_cached);
    llm_kv_mem_free(s->kv, s->kv_val);
    s->kv = NULL;
    s->kv_val = NULL;
    s->n_cached = s->n_synced = 0;
    s->n_resume = s->n_tokens;
    pthread_mutex_lock(&e->mu);
    enqueue(e, s);
    e->st.preemptions++;
    pthread_mutex_unlock(&e->mu);
    LOG_INFO_(LOGF({"component", "llm"}), "LLM: sequence %llu (priority %d) preempted after %zu tokens",
              (unsigned long long)s->id, s->params.priority, s->n_tokens);
    if (!s->n_forks) return;
    /* its forks hold slots and reservations, no cache: they wait again with it (behind it:
     * their ids follow its), and join with it once the group fits again */
    pthread_mutex_lock(&e->mu);
    for (size_t i = 0; i < e->n_active;) {
        llm_seq *f = e->active[i];
        if (f->fork_from != s) {
            i++;
            continue;
        }
        e->active[i] = e->active[--e->n_active];
        e->st.kv_reserved -= f->kv_bytes;
        f->state = SEQ_WAITING;
        f->n_resume = f->n_tokens; /* it joined once: its client heard so then */
        enqueue(e, f);
        e->st.preemptions++;
    }
    e->st.active = e->n_active;
    pthread_mutex_unlock(&e->mu);
}

/* ---- n choices of one prompt (llm_engine_add_n) ---- */

/* Under mu: takes the i-th waiting sequence out of the queue, keeping the order. */
static llm_seq *wait_take(llm_engine *e, size_t i)
{
    llm_seq *s = e->wait[(e->w_head + i) % e->wcap];
    for (size_t j = i; j + 1 < e->w_n; j++)
        e->wait[(e->w_head + j) % e->wcap] = e->wait[(e->w_head + j + 1) % e->wcap];
    e->w_n--;
    e->st.waiting = e->w_n;
    return s;
}

/* Under mu: s takes a slot and its reservation. */
static void take_slot(llm_engine *e, llm_seq *s, seq_state st)
{
    e->st.kv_reserved += s->kv_bytes;
    s->state = st;
    e->active[e->n_active++] = s;
    e->st.active = e->n_active;
}

static void orphan_forks(llm_engine *e, llm_seq *l);

/* A joining sequence's cache (its reservation is made): allocated, then the prefix cache's
 * blocks attached. announce: its first join (not a fork started alone), so on_join and
 * cached_tokens. Returns 0, or -1 when it ended with the error (freed). */
static int start_kv(llm_engine *e, llm_seq *s, bool announce)
{
    ts_err err = {0};
    bool first = !s->n_resume; /* it joined once already: its client heard so then */
    if (llm_seq_alloc_kv(e->m, s, &err)) {
        if (announce && first && s->params.on_join) s->params.on_join(s->ud, s->id);
        orphan_forks(e, s);
        drop_active(e, s);
        finish(s, -1, LLM_FIN_ERROR, &err);
        return -1;
    }
    pthread_mutex_lock(&e->mu);
    e->st.kv_bytes += s->kv_bytes;
    pthread_mutex_unlock(&e->mu);
    pc_attach(e, s);
    if (announce && !first) return 0;
    if (s->params.cached_tokens) atomic_store(s->params.cached_tokens, s->n_reused);
    if (announce && s->params.on_join) s->params.on_join(s->ud, s->id);
    return 0;
}

/* A fork leaves before its leader's prompt is done (cancelled): the group is one smaller. */
static void unfork(llm_engine *e, llm_seq *f)
{
    pthread_mutex_lock(&e->mu);
    f->fork_from->n_forks--;
    f->fork_from->fork_bytes -= f->kv_bytes;
    f->fork_from = NULL;
    pthread_mutex_unlock(&e->mu);
}

/* The leader leaves before its prompt is done (cancelled, failed): its forks go on alone,
 * the waiting ones as plain waiting sequences, the joined ones (SEQ_FORK) prefilling the
 * prompt themselves from now on. */
static void orphan_forks(llm_engine *e, llm_seq *l)
{
    if (!l->n_forks) return;
    llm_seq *go[LLM_MAX_ACTIVE];
    size_t n = 0;
    pthread_mutex_lock(&e->mu);
    for (size_t i = 0; i < e->w_n; i++) {
        llm_seq *f = e->wait[(e->w_head + i) % e->wcap];
        if (f->fork_from == l) f->fork_from = NULL;
    }
    for (size_t i = 0; i < e->n_active; i++) {
        llm_seq *f = e->active[i];
        if (f->fork_from != l) continue;
        f->fork_from = NULL;
        /* a cancelled one stays as it is: reshuffle takes it out */
        if (!atomic_load(&f->cancelled)) go[n++] = f;
    }
    l->n_forks = l->fork_bytes = 0;
    pthread_mutex_unlock(&e->mu);
    for (size_t i = 0; i < n; i++) {
        go[i]->state = SEQ_PREFILL;
        (void)start_kv(e, go[i], false);
    }
}

/* The leader's prompt is computed, its last logits row in e->logits: each fork gets a copy
 * of its KV (the copy the prefix cache's blocks use, through the copy backend) and decodes
 * from there. The row is kept in fork_row for their first draws (prefill). Before the
 * leader's own draw, which may end it. Returns how many forks decode, in out. */
static size_t fork_kv(llm_engine *e, llm_seq *l, llm_seq **out)
{
    llm_seq *f[LLM_MAX_ACTIVE];
    size_t nf = 0, n = 0;
    if (!l->n_forks) return 0;
    memcpy(e->fork_row, e->logits, e->m->sig.vocab * sizeof *e->fork_row);
    pthread_mutex_lock(&e->mu);
    for (size_t i = 0; i < e->n_active; i++)
        if (e->active[i]->fork_from == l) {
            f[nf++] = e->active[i];
            e->active[i]->fork_from = NULL;
        }
    l->n_forks = l->fork_bytes = 0;
    pthread_mutex_unlock(&e->mu);
    for (size_t i = 0; i < nf; i++) {
        llm_seq *s = f[i];
        if (atomic_load(&s->cancelled)) continue; /* reshuffle takes it out (SEQ_FORK, no cache) */
        ts_err err = {0};
        char msg[300] = "";
        if (llm_seq_alloc_kv(e->m, s, &err)) {
            drop_active(e, s);
            finish(s, -1, LLM_FIN_ERROR, &err);
            continue;
        }
        pthread_mutex_lock(&e->mu);
        e->st.kv_bytes += s->kv_bytes;
        pthread_mutex_unlock(&e->mu);
        if (llm_kv_seq_copy(e->m, s, l, l->n_cached, msg, sizeof msg)) {
            ts_err_set(&err, TS_INTERNAL_ERROR, "LLM KV cache: copying a prompt's KV to its fork: %s", msg);
            /* a failed device copy is as much a GPU fault as a failed Run() */
            if (e->opt.hooks.on_run_error) e->opt.hooks.on_run_error(e->opt.hooks.ctx, &err);
            drop_active(e, s);
            finish(s, -1, LLM_FIN_ERROR, &err);
            continue;
        }
        s->n_cached = s->n_synced = l->n_cached;
        /* the prompt's share of the prefix cache, as its leader found it (the prompt is one) */
        if (s->params.cached_tokens) atomic_store(s->params.cached_tokens, l->n_reused);
        s->state = SEQ_DECODE;
        out[n++] = s;
    }
    pthread_mutex_lock(&e->mu);
    e->st.forked += n;
    pthread_mutex_unlock(&e->mu);
    return n;
}

/* Between steps: cancelled sequences leave, waiting ones join while slots are free. */
static void reshuffle(llm_engine *e)
{
    for (;;) {
        llm_seq *gone = NULL;
        pthread_mutex_lock(&e->mu);
        for (size_t i = 0; i < e->n_active && !gone; i++)
            if (atomic_load(&e->active[i]->cancelled)) gone = e->active[i];
        for (size_t i = 0; i < e->w_n && !gone; i++)
            if (atomic_load(&e->wait[(e->w_head + i) % e->wcap]->cancelled)) gone = wait_take(e, i);
        pthread_mutex_unlock(&e->mu);
        if (!gone) break;
        if (gone->fork_from) unfork(e, gone);
        else orphan_forks(e, gone);
        if (gone->state != SEQ_WAITING) {
            /* its rows leave the kept batch before it leaves its slot (see decode) */
            (void)settle(e, decode_set(e));
            drop_active(e, gone);
        }
        finish(gone, -1, LLM_FIN_CANCELLED, NULL);
    }
    for (;;) {
        llm_seq *s = NULL, *victims[LLM_MAX_ACTIVE], *forks[LLM_MAX_ACTIVE];
        size_t n_victims = 0, n_forks = 0;
        /* from the wait queue straight into a slot under one lock, so that a cancel always
         * finds the sequence in one of the two */
        size_t left = 0; /* what the budget leaves the prefix cache once s holds its cache */
        pthread_mutex_lock(&e->mu);
        /* the head of the queue joins when its cache fits beside the active ones' (the
         * prefix cache gives way below); it is never passed over, so priority order holds;
         * when it does not fit, less urgent running sequences may make room for it */
        if (e->w_n > 0 && !fits(e, e->wait[e->w_head], 0, 0))
            n_victims = pick_victims(e, e->wait[e->w_head], victims);
        if (n_victims) {
            pthread_mutex_unlock(&e->mu);
            /* one at a time, planning again: a failed write-back while one leaves ends the
             * decoding ones, which may have been the next victims */
            preempt(e, victims[0]);
            continue;
        }
        if (e->w_n > 0 && fits(e, e->wait[e->w_head], 0, 0)) {
            s = wait_take(e, 0);
            take_slot(e, s, SEQ_PREFILL);
            /* a leader's forks join with it, holding their slots and reservations until its
             * prompt is done (they wait behind it in the queue: their ids follow its) */
            for (size_t i = 0; i < e->w_n && n_forks < s->n_forks;)
                if (e->wait[(e->w_head + i) % e->wcap]->fork_from == s) {
                    forks[n_forks] = wait_take(e, i);
                    take_slot(e, forks[n_forks++], SEQ_FORK);
                } else {
                    i++;
                }
            left = e->opt.kv_budget ? e->opt.kv_budget - e->st.kv_reserved : SIZE_MAX;
        }
        pthread_mutex_unlock(&e->mu);
        if (!s) break;
        if (e->pc && left != SIZE_MAX && llm_prefix_shrink(e->pc, left)) pc_sync(e);
        for (size_t i = 0; i < n_forks; i++) /* their queue time ends here too */
            if (!forks[i]->n_resume && forks[i]->params.on_join) forks[i]->params.on_join(forks[i]->ud, forks[i]->id);
        (void)start_kv(e, s, true);
    }
}

/* llm_step_run behind the error hook. */
/* decode: the bound path keeps this batch's presents for the next step (a prefill chunk
 * writes its slots back at once). */
/* logits: e->logits, or NULL for a prefill chunk before the last (nobody reads its logits: the
 * model's trunk session runs when it has one, docs/llm.md "Prefill without the LM head"). */
static int run_step(llm_engine *e, bool decode, llm_seq **seqs, size_t n, size_t n_new, float *logits,
                    ts_err *err)
{
    const llm_engine_hooks *h = &e->opt.hooks;
    int rc = -1;
    double t0 = ts_now();
    if (!(h->before_run && h->before_run(h->ctx, err)))
        rc = e->kv ? llm_kv_step(e->m, e->kv, decode, seqs, n, n_new, logits, err)
                   : llm_step_run(e->m, seqs, n, n_new, logits, err);
    if (rc && h->on_run_error) h->on_run_error(h->ctx, err);
    if (!rc && !logits && llm_model_prefill_trunk(e->m)) { /* llm_step_run ran the trunk */
        pthread_mutex_lock(&e->mu);
        e->st.prefill_trunk_runs++;
        pthread_mutex_unlock(&e->mu);
    }
    uint64_t share = rc ? 0 : (uint64_t)((ts_now() - t0) * 1e9 / (double)n); /* llm_gen_params.compute_ns */
    for (size_t i = 0; share && i < n; i++)
        if (seqs[i]->params.compute_ns) atomic_fetch_add(seqs[i]->params.compute_ns, share);
    return rc;
}

/* The step budget (docs/llm.md "Prefill beside decoding"): a Run() of prefill between two
 * decode steps delays every running stream's next token by its length. While sequences
 * decode, the prefill tokens of a loop turn are held to opt.step_tokens minus the decoding
 * ones, or (auto, 0) to what the measurements say costs LLM_STEP_PREFILL_SHARE of a decode
 * step: c = share x decode step / (prefill time per token). The time per token is measured
 * on the chunks themselves (fixed costs included), so the chunk settles where its whole Run()
 * costs that share (never below LLM_STEP_MIN_CHUNK tokens). Returns the tokens a turn may
 * prefill beside `n_dec` decoding sequences (SIZE_MAX: none decode, nothing to protect). */
#define LLM_STEP_PREFILL_SHARE 0.5
#define LLM_EWMA 0.25 /* weight of a new measurement */
/* The smallest chunk the auto budget gives. A chunk's time is its fixed cost (a Run()'s
 * overhead, and for a model whose attention copies its past, that copy) plus a cost per token
 * that grows with the past. The rule above divides by the time per token, fixed cost
 * included, which grows as chunks shrink, so it settles on this floor on a CPU: at 4 a worker
 * with 16 joining conversations made a quarter of its tokens (128 vs 542 tokens/s at c=16) and
 * a 2000-token prompt waited 15x its unbudgeted TTFT; at 64 it keeps 93 % of the throughput
 * and 1.6x the TTFT and still cuts the worst inter-token gap 3.7x (docs/llm.md "Prefill beside
 * decoding", quiet-machine table). */
#define LLM_STEP_MIN_CHUNK 64

static size_t step_prefill_tokens(const llm_engine *e, size_t n_dec, size_t past)
{
    if (n_dec == 0) return SIZE_MAX;
    if (e->opt.step_tokens) return e->opt.step_tokens > n_dec ? e->opt.step_tokens - n_dec : 1;
    if (e->dec_s <= 0 || e->pf_tok_s <= 0) return LLM_STEP_MIN_CHUNK; /* nothing measured yet */
    double share = e->opt.step_share > 0 ? e->opt.step_share : LLM_STEP_PREFILL_SHARE;
    double c = e->opt.step_fit ? llm_budget_chunk(&e->fit, past, 1e3 * share * e->dec_s, LLM_STEP_MIN_CHUNK) : -1;
    if (c < 0) { /* the time per token (or the fit is not usable yet) */
        c = share * e->dec_s / e->pf_tok_s;
        if (c < LLM_STEP_MIN_CHUNK) c = LLM_STEP_MIN_CHUNK;
    }
    return c > (double)e->opt.prefill_chunk ? e->opt.prefill_chunk : (size_t)c;
}

static void ewma(double *avg, double x)
{
    *avg = *avg > 0 ? *avg + LLM_EWMA * (x - *avg) : x;
}

/* Who prefills first: the more urgent, then the earlier. */
static bool prefill_before(const llm_seq *a, const llm_seq *b)
{
    return a->params.priority != b->params.priority ? a->params.priority < b->params.priority : a->id < b->id;
}

/* Chunks of the joining sequences' prompts, each its own Run() (prompts differ in length;
 * padding the new tokens too is not worth it): at most prefill_chunk tokens per sequence per
 * loop turn, and in all no more than the step budget allows beside the decoding sequences
 * (step_prefill_tokens), given in (priority, arrival) order. A sequence more urgent than
 * every decoding one is not held back by them (their streams wait for it). */
static void kv_gauge(llm_engine *e);

/* Bound path: s's prefill is over; its kept prefill batch goes now, and the KV gauge with it. */
static void prefill_end(llm_engine *e, const llm_seq *s)
{
    if (!e->kv) return;
    llm_kv_prefill_end(e->kv, s->id);
    kv_gauge(e);
}

/* A prompt's last chunk: only its last row's logits are read (the first token's; nothing
 * else reads a prefill's logits: llm_step_outputs keeps the last row only, and there is no
 * prompt echo or prompt logprobs). With a trunk session the chunk's first c-1 tokens run on
 * the trunk and its last token alone on the whole model, so the LM head computes one row
 * instead of c (docs/llm.md "Prefill without the LM head"). The two Run()s are two chunks to
 * both KV paths (the bound path keeps its prefill batch between them, so the one-row Run()
 * copies no past). The second Run() reads the trunk's weights again for one row: below
 * LLM_HEAD_SPLIT_MIN tokens that costs more than the LM head's rows it saves (measured, one
 * intra-op thread, interleaved: 2-8 tokens slower, 32-128 faster, 16 even; docs/llm.md). */
#ifndef LLM_HEAD_SPLIT_MIN
#define LLM_HEAD_SPLIT_MIN 16
#endif
static int prefill_run(llm_engine *e, llm_seq *s, size_t c, bool last, ts_err *err)
{
    if (!last) return run_step(e, false, &s, 1, c, NULL, err);
    if (c < LLM_HEAD_SPLIT_MIN || !llm_model_prefill_trunk(e->m)) return run_step(e, false, &s, 1, c, e->logits, err);
    if (run_step(e, false, &s, 1, c - 1, NULL, err)) return -1;
    return run_step(e, false, &s, 1, 1, e->logits, err);
}

static void prefill(llm_engine *e)
{
    size_t n = 0, n_dec = 0;
    int dec_prio = 0; /* the most urgent decoding sequence's priority */
    for (size_t i = 0; i < e->n_active; i++) {
        llm_seq *a = e->active[i];
        if (a->state == SEQ_DECODE) {
            if (n_dec == 0 || a->params.priority < dec_prio) dec_prio = a->params.priority;
            n_dec++;
        }
        if (a->state != SEQ_PREFILL) continue;
        size_t at = n++;
        for (; at > 0 && prefill_before(a, e->batch[at - 1]); at--) e->batch[at] = e->batch[at - 1];
        e->batch[at] = a;
    }
    if (e->one_per_run && n_dec > 1) n_dec = 1; /* one decodes per Run() (decode_set) */
    size_t budget = step_prefill_tokens(e, n_dec, n ? e->batch[0]->n_cached : 0);
    for (size_t i = 0; i < n; i++) {
        llm_seq *s = e->batch[i];
        bool urgent = n_dec && s->params.priority < dec_prio;
        if (budget == 0 && !urgent) continue;
        size_t left = fill_to(s) - s->n_cached;
        size_t c = left < e->opt.prefill_chunk ? left : e->opt.prefill_chunk;
        if (!urgent && c > budget) c = budget;
        ts_err err = {0};
        double t0 = ts_now();
        bool last = s->n_cached + c >= fill_to(s);
        if (prefill_run(e, s, c, last, &err)) {
            prefill_end(e, s);
            orphan_forks(e, s);
            drop_active(e, s);
            finish(s, -1, LLM_FIN_ERROR, &err);
            continue;
        }
        ewma(&e->pf_tok_s, (ts_now() - t0) / (double)c);
        if (e->opt.step_fit) llm_budget_fit_add(&e->fit, c, s->n_cached - c, 1e3 * (ts_now() - t0));
        trace(e, !last && llm_model_prefill_trunk(e->m) ? LLM_TR_TRUNK : LLM_TR_PREFILL, 1, c, s->n_cached - c,
              urgent ? SIZE_MAX : budget, t0);
        if (!urgent && budget != SIZE_MAX) budget -= c;
        pthread_mutex_lock(&e->mu);
        e->st.prefill_runs++;
        e->st.prefill_tokens += c;
        pthread_mutex_unlock(&e->mu);
        if (s->n_cached < fill_to(s)) continue;
        double te = trace_t0(e);
        size_t end = fill_to(s); /* s may be freed by its first token (take_token) */
        s->state = SEQ_DECODE;
        prefill_end(e, s); /* before its first token, which may end it (or a fork) */
        pc_store(e, s, fill_to(s)); /* the next turn of a conversation starts with these (once for n forks) */
        llm_seq *forks[LLM_MAX_ACTIVE];
        size_t nf = fork_kv(e, s, forks);
        take_token(e, s, e->logits, NULL);
        for (size_t k = 0; k < nf; k++) { /* the same row, each with its own rng, penalties, grammar */
            memcpy(e->logits, e->fork_row, e->m->sig.vocab * sizeof *e->logits);
            take_token(e, forks[k], e->logits, NULL);
        }
        trace(e, LLM_TR_PROMPT_END, 1 + nf, 0, end, SIZE_MAX, te);
    }
}

/* The decoding sequences, in slot order, into e->batch; returns how many. A model without
 * position_ids derives its positions from the past's length (past + arange, as Hugging Face
 * does), not from the mask: left-padded in a batch, a sequence would be computed at positions
 * shifted by its padding. Such a model gets one sequence per Run(), the decoding ones taking
 * turns, so every stream advances (a token each per round) rather than one stream holding
 * the model until it ends. */
static size_t decode_set(llm_engine *e)
{
    size_t n = 0;
    for (size_t i = 0; i < e->n_active; i++)
        if (e->active[i]->state == SEQ_DECODE && !atomic_load(&e->active[i]->cancelled))
            e->batch[n++] = e->active[i];
    if (e->one_per_run && n > 1) {
        e->batch[0] = e->batch[e->turn % n];
        n = 1;
    }
    return n;
}

/* The KV gauge: the caches (drop_active and reshuffle keep that part) plus the tensors of
 * the bound path's decode batch. */
static void kv_gauge(llm_engine *e)
{
    size_t b = llm_kv_batch_bytes(e->kv);
    pthread_mutex_lock(&e->mu);
    e->st.kv_bytes = e->st.kv_bytes - e->st.kv_batch_bytes + b;
    e->st.kv_batch_bytes = b;
    e->st.kv_copy_bytes = llm_kv_copied_bytes(e->kv);
    pthread_mutex_unlock(&e->mu);
}

/* Bound path: unless the decode batch holds exactly e->batch[0..n), write it back and
 * release it (see llm_kv_settle). A failed write-back leaves those n sequences' caches
 * incomplete: they end with the error. Returns 0 or -1. */
static int settle(llm_engine *e, size_t n)
{
    if (!e->kv) return 0;
    ts_err err = {0};
    double t0 = trace_t0(e);
    int rc = llm_kv_settle(e->m, e->kv, e->active, e->n_active, e->batch, n, &err);
    kv_gauge(e);
    trace(e, LLM_TR_SETTLE, n, 0, 0, SIZE_MAX, t0);
    if (!rc) return 0;
    /* a failed device copy is as much a GPU fault as a failed Run() */
    if (e->opt.hooks.on_run_error) e->opt.hooks.on_run_error(e->opt.hooks.ctx, &err);
    LOG_ERROR_(LOGF({"component", "llm"}), "%s", err.msg);
    for (size_t i = 0; i < n; i++) {
        drop_active(e, e->batch[i]);
        finish(e->batch[i], -1, LLM_FIN_ERROR, &err);
    }
    return -1;
}

/* One Run() for every decoding sequence. */
static void decode(llm_engine *e)
{
    size_t n = decode_set(e);
    if (settle(e, n) || n == 0) return;
    ts_err err = {0};
    size_t past = 0;
    for (size_t i = 0; tracing(e) && i < n; i++)
        if (e->batch[i]->n_cached > past) past = e->batch[i]->n_cached;
    double t0 = ts_now();
    int rc = run_step(e, true, e->batch, n, 1, e->logits, &err);
    if (!rc) ewma(&e->dec_s, ts_now() - t0);
    if (!rc) trace(e, LLM_TR_DECODE, n, 1, past, SIZE_MAX, t0);
    e->turn++;
    kv_gauge(e);
    pthread_mutex_lock(&e->mu);
    e->st.steps++;
    if (n > e->st.max_batch) e->st.max_batch = n;
    pthread_mutex_unlock(&e->mu);
    if (rc) {
        LOG_ERROR_(LOGF({"component", "llm"}), "%s", err.msg);
        /* the kept batch dies with its sequences: release it before they end (nothing to
         * write back, their caches go too), or an idle engine would keep its (device) memory
         * until the next request */
        for (size_t i = 0; i < n; i++) e->batch[i]->state = SEQ_DONE;
        (void)settle(e, 0);
        for (size_t i = 0; i < n; i++) {
            drop_active(e, e->batch[i]);
            finish(e->batch[i], -1, LLM_FIN_ERROR, &err);
        }
        return;
    }
    size_t n_ended = 0;
    double ts = trace_t0(e);
    for (size_t i = 0; i < n; i++)
        if (take_token(e, e->batch[i], e->logits + i * e->m->sig.vocab, &e->ended[n_ended])) n_ended++;
    trace(e, LLM_TR_SAMPLE, n, 1, 0, SIZE_MAX, ts);
    /* a finished sequence's rows leave the batch before it leaves its slot: once the
     * running gauge has dropped, the KV gauge counts none of its memory */
    if (n_ended && settle(e, decode_set(e))) {
        /* the sequences still decoding ended with the error; the written-back rows of the
         * ended ones may be incomplete: store nothing of them */
        for (size_t i = 0; i < n_ended; i++) e->ended[i].s->keep_kv = false;
    }
    for (size_t i = 0; i < n_ended; i++) {
        /* a reply's blocks: the next turn re-sends it as part of its prompt */
        if (e->ended[i].s->keep_kv) pc_store(e, e->ended[i].s, e->ended[i].s->n_cached);
        drop_active(e, e->ended[i].s);
        finish(e->ended[i].s, e->ended[i].tok, e->ended[i].fin, NULL);
    }
}

static void *gen_thread(void *arg)
{
    llm_engine *e = arg;
    bool reserved = false;
    for (;;) {
        pthread_mutex_lock(&e->mu);
        while (!e->stop && e->n_active == 0 && e->w_n == 0) pthread_cond_wait(&e->cv, &e->mu);
        bool stop = e->stop;
        pthread_mutex_unlock(&e->mu);
        if (stop) break;
        if (!reserved) { /* the step thread's arena resident, at its first work (heapres.h) */
            heap_thread_reserve(HEAPRES_THREAD);
            reserved = true;
        }
        double t0 = trace_t0(e);
        reshuffle(e);
        trace(e, LLM_TR_JOIN, 0, 0, 0, SIZE_MAX, t0);
        prefill(e);
        decode(e);
    }
    return NULL;
}

int llm_engine_new(llm_model *m, const llm_engine_opts *opt, llm_engine **out, ts_err *err)
{
    *out = NULL;
    if (opt->max_active < 1 || opt->max_active > LLM_MAX_ACTIVE || opt->max_waiting > LLM_MAX_WAITING ||
        opt->prefill_chunk < 1 || opt->prefill_chunk > LLM_MAX_PREFILL_CHUNK || opt->step_tokens > LLM_MAX_STEP_TOKENS ||
        !(opt->step_share >= 0 && opt->step_share <= 4)) {
        ts_err_set(err, TS_INTERNAL_ERROR, "LLM engine: max_active must be 1..%d, max_waiting "
                   "0..%d, prefill_chunk 1..%d, step_tokens 0..%d and step_share 0..4", LLM_MAX_ACTIVE, LLM_MAX_WAITING,
                   LLM_MAX_PREFILL_CHUNK, LLM_MAX_STEP_TOKENS);
        return -1;
    }
    llm_engine *e = calloc(1, sizeof *e);
    if (!e) goto oom;
    e->m = m;
    e->opt = *opt;
    e->next_id = 1;
    e->one_per_run = !m->sig.position_ids;
    e->st.batch_limit = e->one_per_run ? 1 : opt->max_active;
    e->st.kv_budget = opt->kv_budget;
    e->opt.model_id = NULL; /* the engine's own copy below */
    if (e->one_per_run) e->st.batch_note = k_no_position_ids;
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv, NULL);
    e->wcap = opt->max_waiting + opt->max_active;
    e->wait = calloc(e->wcap, sizeof *e->wait);
    e->active = calloc(opt->max_active, sizeof *e->active);
    e->batch = calloc(opt->max_active, sizeof *e->batch);
    e->ended = calloc(opt->max_active, sizeof *e->ended);
    e->logits = malloc(opt->max_active * m->sig.vocab * sizeof *e->logits);
    e->fork_row = malloc(m->sig.vocab * sizeof *e->fork_row);
    e->sampler = llm_sampler_new(m->sig.vocab);
    if (!e->wait || !e->active || !e->batch || !e->ended || !e->logits || !e->fork_row || !e->sampler) goto oom;
    if (opt->prefix_cache_bytes) {
        size_t bb = llm_kv_block_bytes(m, LLM_PREFIX_BLOCK);
        e->model_id = strdup(opt->model_id ? opt->model_id : "");
        e->pc = llm_prefix_new(LLM_PREFIX_BLOCK, bb, opt->prefix_cache_bytes, pc_free_block, NULL);
        if (!e->model_id || !e->pc) goto oom;
        e->st.pc_budget = opt->prefix_cache_bytes;
    }
    if (llm_model_kv_bound(m) && llm_kv_ctx_new(m, &e->kv, err)) {
        llm_engine_free(e);
        return -1;
    }
    if (pthread_create(&e->thread, NULL, gen_thread, e) != 0) {
        ts_err_set(err, TS_INTERNAL_ERROR, "LLM engine: cannot start the generation thread");
        llm_engine_free(e);
        return -1;
    }
    e->started = true;
    if (e->one_per_run) LOG_WARN_(LOGF({"component", "llm"}), "LLM: %s", k_no_position_ids);
    *out = e;
    return 0;
oom:
    llm_engine_free(e);
    ts_err_set(err, TS_INTERNAL_ERROR, "LLM engine: out of memory");
    return -1;
}

void llm_engine_free(llm_engine *e)
{
    if (!e) return;
    if (e->started) {
        pthread_mutex_lock(&e->mu);
        e->stop = true;
        pthread_cond_signal(&e->cv);
        pthread_mutex_unlock(&e->mu);
        pthread_join(e->thread, NULL);
    }
    for (size_t i = 0; e->active && i < e->n_active; i++) finish(e->active[i], -1, LLM_FIN_CANCELLED, NULL);
    for (size_t i = 0; e->wait && i < e->w_n; i++)
        finish(e->wait[(e->w_head + i) % e->wcap], -1, LLM_FIN_CANCELLED, NULL);
    llm_kv_ctx_free(e->kv);
    llm_prefix_free(e->pc); /* after the generation thread: its blocks may be device memory */
    free(e->model_id);
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->cv);
    free(e->wait);
    free(e->active);
    free(e->batch);
    free(e->ended);
    free(e->logits);
    free(e->fork_row);
    free(e->lp_row);
    llm_sampler_free(e->sampler);
    free(e);
}

static int check_params(const llm_gen_params *p, ts_err *err)
{
    const llm_sample_params *s = &p->sample;
    if (!isfinite(s->temperature) || s->temperature < 0 || s->temperature > 100) {
        ts_err_set(err, TS_BAD_REQUEST, "temperature must be in [0, 100]");
        return -1;
    }
    if (!isfinite(s->top_p) || s->top_p <= 0 || s->top_p > 1) {
        ts_err_set(err, TS_BAD_REQUEST, "top_p must be in (0, 1]");
        return -1;
    }
    if (p->logprobs && (p->top_logprobs < 0 || p->top_logprobs > LLM_MAX_TOP_LOGPROBS)) {
        ts_err_set(err, TS_BAD_REQUEST, "top_logprobs must be in [0, %d]", LLM_MAX_TOP_LOGPROBS);
        return -1;
    }
    if (s->top_k < 0) {
        ts_err_set(err, TS_BAD_REQUEST, "top_k must be 0 (off) or more");
        return -1;
    }
    if (!(s->presence_penalty >= -2 && s->presence_penalty <= 2)) {
        ts_err_set(err, TS_BAD_REQUEST, "presence_penalty must be in [-2, 2]");
        return -1;
    }
    if (!(s->frequency_penalty >= -2 && s->frequency_penalty <= 2)) {
        ts_err_set(err, TS_BAD_REQUEST, "frequency_penalty must be in [-2, 2]");
        return -1;
    }
    return 0;
}

int llm_engine_add_n(llm_engine *e, const int32_t *prompt, size_t n_prompt, const llm_gen_params *p, size_t n,
                     llm_token_fn cb, void *const *ud, uint64_t *ids, ts_err *err)
{
    llm_seq *s[LLM_MAX_GROUP] = {0};
    int rc = -1;
    if (n < 1 || n > LLM_MAX_GROUP) {
        ts_err_set(err, TS_BAD_REQUEST, "1 to %d sequences of one prompt at a time", LLM_MAX_GROUP);
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        if (check_params(&p[i], err)) goto out;
        if (p[i].priority != p[0].priority || strcmp(p[i].cache_scope, p[0].cache_scope) != 0) {
            ts_err_set(err, TS_BAD_REQUEST, "sequences of one prompt share its priority and cache scope");
            goto out;
        }
        if (!(s[i] = llm_seq_new(e->m, prompt, n_prompt, &p[i], err))) goto out;
        if (e->opt.kv_budget && s[i]->kv_bytes > e->opt.kv_budget) {
            ts_err_set(err, TS_BAD_REQUEST, "the prompt plus max_tokens need a KV cache of %zu bytes (%zu tokens); "
                       "this model's KV budget is %zu bytes: lower max_tokens or the prompt", s[i]->kv_bytes,
                       s[i]->cap, e->opt.kv_budget);
            goto out;
        }
        s[i]->cb = cb;
        s[i]->ud = ud[i];
        s[i]->t_added = ts_now();
    }
    /* the group: as many as could ever join together (slots, budget); the rest prefill alone */
    size_t g = 1, bytes = s[0]->kv_bytes;
    while (g < n && g < e->opt.max_active && (!e->opt.kv_budget || bytes + s[g]->kv_bytes <= e->opt.kv_budget))
        bytes += s[g++]->kv_bytes;
    s[0]->n_forks = g - 1;
    s[0]->fork_bytes = bytes - s[0]->kv_bytes;
    for (size_t i = 1; i < g; i++) s[i]->fork_from = s[0];
    pthread_mutex_lock(&e->mu);
    if (e->stop || e->w_n + n > e->opt.max_waiting) {
        size_t w = e->w_n;
        /* slots are free, yet sequences wait: the budget holds them (a queue of 0 refuses all) */
        bool kv = e->opt.kv_budget && e->n_active < e->opt.max_active && w > 0;
        size_t res = e->st.kv_reserved;
        pthread_mutex_unlock(&e->mu);
        if (kv)
            ts_err_set(err, TS_UNAVAILABLE, "the KV cache budget is full (%zu of %zu bytes reserved by the running "
                       "sequences) and %zu sequences wait for it", res, e->opt.kv_budget, w);
        else if (n > 1)
            ts_err_set(err, TS_UNAVAILABLE, "the LLM wait queue is full (%zu sequences waiting, %zu places asked "
                       "for, %zu in all)", w, n, e->opt.max_waiting);
        else
            ts_err_set(err, TS_UNAVAILABLE, "the LLM wait queue is full (%zu sequences waiting)", w);
        goto out;
    }
    /* consecutive ids: the forks wait right behind their leader in (priority, id) order */
    for (size_t i = 0; i < n; i++) {
        s[i]->id = e->next_id++;
        llm_rng_seed(&s[i]->rng, p[i].seeded ? p[i].seed
                                             : (uint64_t)(ts_now() * 1e9) ^ (s[i]->id * 0x9e3779b97f4a7c15ULL));
        enqueue(e, s[i]);
        ids[i] = s[i]->id;
        s[i] = NULL; /* the engine's */
    }
    pthread_cond_signal(&e->cv);
    pthread_mutex_unlock(&e->mu);
    rc = 0;
out:
    for (size_t i = 0; i < n; i++) llm_seq_free(s[i]);
    return rc;
}

int llm_engine_add(llm_engine *e, const int32_t *prompt, size_t n, const llm_gen_params *p,
                   llm_token_fn cb, void *ud, uint64_t *id, ts_err *err)
{
    return llm_engine_add_n(e, prompt, n, p, 1, cb, &ud, id, err);
}

void llm_engine_cancel(llm_engine *e, uint64_t id)
{
    pthread_mutex_lock(&e->mu);
    for (size_t i = 0; i < e->n_active; i++)
        if (e->active[i]->id == id) atomic_store(&e->active[i]->cancelled, true);
    for (size_t i = 0; i < e->w_n; i++) {
        llm_seq *s = e->wait[(e->w_head + i) % e->wcap];
        if (s->id == id) atomic_store(&s->cancelled, true);
    }
    pthread_cond_signal(&e->cv);
    pthread_mutex_unlock(&e->mu);
}

bool llm_engine_kv_full(llm_engine *e)
{
    pthread_mutex_lock(&e->mu);
    bool full = e->opt.kv_budget && e->n_active < e->opt.max_active && e->w_n > 0;
    pthread_mutex_unlock(&e->mu);
    return full;
}

void llm_engine_stats_get(llm_engine *e, llm_engine_stats *out)
{
    pthread_mutex_lock(&e->mu);
    *out = e->st;
    pthread_mutex_unlock(&e->mu);
}
