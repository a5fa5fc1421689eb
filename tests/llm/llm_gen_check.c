/* llm_gen_check: drives src/llm's generation core on the tiny test decoder
 * (tests/models/gen_llm_model.py) through the real engine, and checks what needs no
 * reference. tests/llm/gen_check.py runs it and compares the greedy tokens with numpy.
 *
 *   llm_gen_check MODELDIR N PROMPT...     FP32 model: prints one JSON object
 *       {"prompts": [[ids]...], "single": [[ids]...], "batched": [[ids]...]}
 *       after checking that batched == single, seeded sampling, cancellation and the queue
 *       bounds (exit 1 with a message on stderr when a check fails)
 *   llm_gen_check --fp16 MODELDIR N PROMPT...   the FP16 variant loads and generates
 *   llm_gen_check --no-position-ids MODELDIR N PROMPT...   the variant without position_ids
 *       (gen_llm_model.py --no-position-ids): the same JSON; batched == single with the
 *       engine stepping one sequence per Run() (never left-padded), joins and leaves
 *
 * TIERSERVE_LLM_KV (auto|host|bound) picks the KV cache's path as in the worker.
 * EXECUTION_MODE (default cpu) and STRICT_EP pick the tier the way the worker does: the GPU
 * check is `EXECUTION_MODE=cuda STRICT_EP=1 ctest -R llm_generation` (exit 78, a failure,
 * when CUDA does not work rather than a silent CPU run). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "ep.h"
#include "llm_engine.h"
#include "llm_model.h"
#include "ortenv.h"
#include "tokenizer.h"

#define MAX_PROMPTS 8
#define MAX_TOKENS 512
#define WAIT_S 120.0 /* generous: an ASan build on a loaded 2-core VM */

/* What the callback collects for one sequence. */
typedef struct {
    pthread_mutex_t *mu;
    pthread_cond_t *cv;
    int32_t toks[MAX_TOKENS];
    size_t n;
    llm_finish fin;
    bool done;
    int finals; /* final callbacks seen: must end at exactly 1 */
    char err[512];
    /* a gate for the batching check: at hold_at tokens the engine thread waits (in this
     * callback) until the test has added sequence `index + 1`, so the next sequence joins
     * while this one runs however the two threads are scheduled */
    size_t hold_at, index;
} collect;

static bool g_nopos; /* the model has no position_ids: the engine must never batch it */
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cv = PTHREAD_COND_INITIALIZER;
static size_t g_added; /* sequences the batching check has added (under g_mu) */
static int g_fail;

#define CHECK(cond, ...)                                                                   \
    do {                                                                                   \
        if (!(cond)) {                                                                     \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                           \
            fprintf(stderr, __VA_ARGS__);                                                  \
            fprintf(stderr, "\n");                                                         \
            g_fail = 1;                                                                    \
        }                                                                                  \
    } while (0)

static void on_token(void *ud, uint64_t id, int32_t tok, llm_finish fin, const ts_err *err)
{
    (void)id;
    collect *c = ud;
    pthread_mutex_lock(c->mu);
    if (tok >= 0 && c->n < MAX_TOKENS) c->toks[c->n++] = tok;
    if (fin != LLM_FIN_NONE) {
        c->fin = fin;
        c->done = true;
        c->finals++;
        if (err) snprintf(c->err, sizeof c->err, "%s", err->msg);
    }
    pthread_cond_broadcast(c->cv);
    if (c->hold_at && c->n == c->hold_at && fin == LLM_FIN_NONE) {
        double end = ts_now() + WAIT_S;
        while (g_added <= c->index + 1 && ts_now() < end) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += 20 * 1000 * 1000;
            if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
            pthread_cond_timedwait(c->cv, c->mu, &ts);
        }
    }
    pthread_mutex_unlock(c->mu);
}

static void collect_init(collect *c)
{
    memset(c, 0, sizeof *c);
    c->mu = &g_mu;
    c->cv = &g_cv;
}

/* Waits until c has at least n tokens (or is done when n == 0). false on timeout. */
static bool wait_for(collect *c, size_t n)
{
    double end = ts_now() + WAIT_S;
    bool ok = true;
    pthread_mutex_lock(&g_mu);
    while (n ? c->n < n && !c->done : !c->done) {
        if (ts_now() > end) {
            ok = false;
            break;
        }
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 20 * 1000 * 1000;
        if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&g_cv, &g_mu, &ts);
    }
    pthread_mutex_unlock(&g_mu);
    return ok;
}

static llm_engine *engine(llm_model *m, size_t active, size_t waiting, size_t chunk)
{
    llm_engine_opts o = {.max_active = active, .max_waiting = waiting, .prefill_chunk = chunk};
    llm_engine *e = NULL;
    ts_err err = {0};
    if (llm_engine_new(m, &o, &e, &err)) {
        fprintf(stderr, "llm_engine_new: %s\n", err.msg);
        exit(1);
    }
    return e;
}

static llm_gen_params greedy(int64_t n)
{
    return (llm_gen_params){.max_new_tokens = n, .sample = {.temperature = 0, .top_p = 1}};
}

static uint64_t add(llm_engine *e, const tok_ids *p, const llm_gen_params *gp, collect *c)
{
    uint64_t id = 0;
    ts_err err = {0};
    if (llm_engine_add(e, p->v, p->n, gp, on_token, c, &id, &err)) {
        fprintf(stderr, "llm_engine_add: %s\n", err.msg);
        exit(1);
    }
    return id;
}

static void print_ids(const int32_t *v, size_t n)
{
    printf("[");
    for (size_t i = 0; i < n; i++) printf("%s%d", i ? ", " : "", v[i]);
    printf("]");
}

static bool same(const collect *a, const collect *b)
{
    return a->n == b->n && memcmp(a->toks, b->toks, a->n * sizeof *a->toks) == 0;
}

/* Every prompt alone (one active sequence), then all of them on one engine with room for
 * all, each joining after the one before has produced a few tokens, so the batch changes
 * between steps and the pasts differ in length; small prefill chunks make prompts span
 * several Run()s. Each sequence must get the same tokens both ways. */
static void check_batching(llm_model *m, tok_ids *prompts, size_t np, int64_t n, collect *single,
                           collect *batched)
{
    llm_gen_params gp = greedy(n);
    llm_engine *e = engine(m, 1, MAX_PROMPTS, 3);
    for (size_t i = 0; i < np; i++) {
        collect_init(&single[i]);
        add(e, &prompts[i], &gp, &single[i]);
        CHECK(wait_for(&single[i], 0), "prompt %zu alone: no end within %.0f s", i, WAIT_S);
        CHECK(single[i].fin != LLM_FIN_ERROR, "prompt %zu alone: %s", i, single[i].err);
    }
    llm_engine_free(e);

    e = engine(m, MAX_PROMPTS, MAX_PROMPTS, 2);
    pthread_mutex_lock(&g_mu);
    g_added = 0;
    pthread_mutex_unlock(&g_mu);
    for (size_t i = 0; i < np; i++) {
        collect_init(&batched[i]);
        batched[i].index = i;
        if (i + 1 < np) batched[i].hold_at = 1 + i % 2;
        add(e, &prompts[i], &gp, &batched[i]);
        pthread_mutex_lock(&g_mu);
        g_added = i + 1; /* releases the sequence before, held at its hold_at-th token */
        pthread_cond_broadcast(&g_cv);
        pthread_mutex_unlock(&g_mu);
        if (i + 1 < np) CHECK(wait_for(&batched[i], 1 + i % 2), "prompt %zu batched: too slow", i);
    }
    for (size_t i = 0; i < np; i++) {
        CHECK(wait_for(&batched[i], 0), "prompt %zu batched: no end", i);
        CHECK(batched[i].finals == 1, "prompt %zu: %d final callbacks", i, batched[i].finals);
        CHECK(same(&single[i], &batched[i]), "prompt %zu: batched tokens differ from one at a time", i);
    }
    llm_engine_stats st;
    llm_engine_stats_get(e, &st);
    if (g_nopos)
        CHECK(st.max_batch == 1 && st.batch_limit == 1 && st.batch_note && strstr(st.batch_note, "position_ids"),
              "no position_ids: %zu sequences in one decode step, limit %zu (%s)", st.max_batch, st.batch_limit,
              st.batch_note ? st.batch_note : "no note");
    else
        CHECK(st.max_batch >= 2 && st.batch_limit == MAX_PROMPTS && !st.batch_note,
              "the decode steps never carried more than %zu sequence(s) (limit %zu)", st.max_batch, st.batch_limit);
    CHECK(st.active == 0 && st.waiting == 0 && st.kv_bytes == 0,
          "after the end: %zu active, %zu waiting, %zu KV bytes", st.active, st.waiting, st.kv_bytes);
    fprintf(stderr, "batching: %llu decode steps, at most %zu sequences in one, %llu prefill runs\n",
            (unsigned long long)st.steps, st.max_batch, (unsigned long long)st.prefill_runs);
    llm_engine_free(e);
}

/* Continuous batching with sequences joining and leaving mid-batch: a long sequence X
 * runs while the prompts join one after another (different lengths, different
 * max_new_tokens, so the short ones finish and leave while the others decode), X is
 * cancelled in the middle, and every surviving sequence's greedy tokens must be the prefix
 * of its one-at-a-time tokens (single[], equal to numpy's). On the bound path every join
 * and leave dissolves the kept batch (the surviving rows written back) and rebuilds it, so
 * a write-back that misses anything changes the tokens. The KV gauge ends at 0. */
static void check_join_leave(llm_model *m, tok_ids *prompts, size_t np, const collect *single)
{
    static const int64_t lens[MAX_PROMPTS] = {5, 16, 9, 16, 3, 12, 16, 7};
    static collect c[MAX_PROMPTS], x, y;
    llm_engine *e = engine(m, MAX_PROMPTS + 2, MAX_PROMPTS, 3);
    llm_gen_params gx = greedy(300);
    gx.ignore_eos = true;
    collect_init(&x);
    uint64_t ix = add(e, &prompts[np - 1], &gx, &x);
    /* a second long one, Y, decodes until every prompt is done: each prompt joins a batch of two
     * however slowly this thread wakes (with X alone, a loaded machine let a short prompt finish
     * before the next joined, and no step held three) */
    collect_init(&y);
    uint64_t iy = add(e, &prompts[0], &gx, &y);
    CHECK(wait_for(&x, 2) && wait_for(&y, 2), "join/leave: X or Y never ran");
    for (size_t i = 0; i < np; i++) {
        llm_gen_params gp = greedy(lens[i]);
        collect_init(&c[i]);
        add(e, &prompts[i], &gp, &c[i]);
        CHECK(wait_for(&c[i], 1 + i % 3), "join/leave: prompt %zu too slow", i);
        if (i == np / 2) llm_engine_cancel(e, ix);
    }
    for (size_t i = 0; i < np; i++) {
        CHECK(wait_for(&c[i], 0), "join/leave: prompt %zu no end", i);
        size_t want = single[i].n < (size_t)lens[i] ? single[i].n : (size_t)lens[i];
        CHECK(c[i].fin != LLM_FIN_ERROR && c[i].n == want &&
                  memcmp(c[i].toks, single[i].toks, want * sizeof *c[i].toks) == 0,
              "join/leave: prompt %zu (%lld new tokens) differs from one at a time (%zu tokens, %s)", i,
              (long long)lens[i], c[i].n, c[i].err);
        if (getenv("LLM_GEN_CHECK_DEBUG")) {
            for (size_t j = 0; j < c[i].n; j++) fprintf(stderr, " %d/%d", c[i].toks[j], single[i].toks[j]);
            fprintf(stderr, "\n");
        }
    }
    CHECK(wait_for(&x, 0) && x.fin == LLM_FIN_CANCELLED && x.n < 300, "join/leave: X not cancelled (%zu, %s)",
          x.n, llm_finish_name(x.fin));
    llm_engine_cancel(e, iy);
    CHECK(wait_for(&y, 0) && y.fin != LLM_FIN_ERROR, "join/leave: Y failed (%s)", y.err);
    llm_engine_stats st;
    llm_engine_stats_get(e, &st);
    CHECK(st.active == 0 && st.kv_bytes == 0 && st.kv_batch_bytes == 0,
          "join/leave: after the end: %zu active, %zu KV bytes (%zu in the batch)", st.active, st.kv_bytes,
          st.kv_batch_bytes);
    if (g_nopos) CHECK(st.max_batch == 1, "join/leave: %zu sequences in a step without position_ids", st.max_batch);
    else CHECK(st.max_batch >= 3, "join/leave: at most %zu sequences in a step", st.max_batch);
    llm_engine_free(e);
}

/* The engine's error hook fails the Nth Run() (counting prefill chunks and decode steps). */
typedef struct {
    int runs, fail_at, errors;
} fault_hook;

static int fail_nth_run(void *ctx, ts_err *err)
{
    fault_hook *h = ctx;
    if (++h->runs != h->fail_at) return 0;
    ts_err_set(err, TS_INTERNAL_ERROR, "injected: CUDA failure 700 (a test's before_run hook)");
    return -1;
}

static void count_error(void *ctx, const ts_err *err)
{
    (void)err;
    ((fault_hook *)ctx)->errors++;
}

/* A decode step that fails after the bound path has kept its batch (prefill, two good steps,
 * the third fails): the sequence ends with the error and the batch's tensors are released
 * with it, so the idle engine holds no KV memory at all; the next request runs normally
 * and gets its one-at-a-time tokens. */
static void check_failed_step(llm_model *m, const tok_ids *p, const collect *single)
{
    fault_hook fh = {.fail_at = 4};
    llm_engine_opts o = {.max_active = 2, .max_waiting = 2, .prefill_chunk = 64,
                         .hooks = {.before_run = fail_nth_run, .on_run_error = count_error, .ctx = &fh}};
    llm_engine *e = NULL;
    ts_err err = {0};
    if (llm_engine_new(m, &o, &e, &err)) {
        CHECK(0, "failed step: llm_engine_new: %s", err.msg);
        return;
    }
    llm_gen_params gp = greedy(100);
    gp.ignore_eos = true;
    collect a, b;
    collect_init(&a);
    add(e, p, &gp, &a);
    CHECK(wait_for(&a, 0) && a.fin == LLM_FIN_ERROR && strstr(a.err, "injected") && a.n == 3 && a.finals == 1,
          "failed step: %zu tokens, %s (%s), %d finals", a.n, llm_finish_name(a.fin), a.err, a.finals);
    llm_engine_stats st;
    llm_engine_stats_get(e, &st);
    CHECK(st.active == 0 && st.kv_bytes == 0 && st.kv_batch_bytes == 0 && fh.errors == 1,
          "failed step: after it: %zu active, %zu KV bytes (%zu in the batch), %d error hook calls", st.active,
          st.kv_bytes, st.kv_batch_bytes, fh.errors);
    gp = greedy((int64_t)single->n);
    collect_init(&b);
    add(e, p, &gp, &b);
    CHECK(wait_for(&b, 0) && b.fin != LLM_FIN_ERROR && same(&b, single), "failed step: the next request: %zu "
          "tokens, %s (%s)", b.n, llm_finish_name(b.fin), b.err);
    llm_engine_free(e);
}

/* Seeded sampling repeats itself; another seed gives other tokens; greedy ignores seeds. */
static void check_sampling(llm_model *m, const tok_ids *p)
{
    llm_gen_params gp = {.max_new_tokens = 24, .sample = {.temperature = 0.9, .top_k = 50, .top_p = 0.95},
                         .seeded = true, .seed = 42, .ignore_eos = true};
    collect a, b, c, d;
    llm_engine *e = engine(m, 4, 4, 16);
    collect_init(&a);
    collect_init(&b);
    collect_init(&c);
    add(e, p, &gp, &a);
    add(e, p, &gp, &b); /* the same seed in the same batch */
    gp.seed = 43;
    add(e, p, &gp, &c);
    CHECK(wait_for(&a, 0) && wait_for(&b, 0) && wait_for(&c, 0), "sampling: no end");
    CHECK(a.n == 24 && same(&a, &b), "sampling: seed 42 twice gave different tokens");
    CHECK(!same(&a, &c), "sampling: seeds 42 and 43 gave the same 24 tokens");
    /* top_k 1 is greedy whatever the temperature */
    gp.sample.top_k = 1;
    collect_init(&d);
    add(e, p, &gp, &d);
    collect g;
    collect_init(&g);
    llm_gen_params gg = greedy(24);
    gg.ignore_eos = true;
    add(e, p, &gg, &g);
    CHECK(wait_for(&d, 0) && wait_for(&g, 0) && same(&d, &g), "sampling: top_k 1 is not greedy");
    llm_engine_free(e);
}

/* Two slots, one waiting place: a third sequence waits, a fourth is refused with 503;
 * cancelling a running one frees its slot and cache before the next step, and the waiting
 * one takes the slot. */
static void check_cancel(llm_model *m, const tok_ids *p)
{
    llm_gen_params gp = greedy(400);
    gp.ignore_eos = true;
    collect a, b, c;
    collect_init(&a);
    collect_init(&b);
    collect_init(&c);
    llm_engine *e = engine(m, 2, 1, 16);
    uint64_t ia = add(e, p, &gp, &a);
    CHECK(wait_for(&a, 1), "cancel: A never ran");
    add(e, p, &gp, &b);
    CHECK(wait_for(&b, 2), "cancel: B never ran");
    add(e, p, &gp, &c);
    llm_engine_stats st;
    llm_engine_stats_get(e, &st);
    CHECK(st.active == 2 && st.waiting == 1, "cancel: %zu active, %zu waiting (want 2, 1)", st.active,
          st.waiting);
    size_t per_seq = (st.kv_bytes - st.kv_batch_bytes) / 2;
    CHECK(per_seq == (p->n + 400) * llm_model_kv_bytes_per_token(m), "cancel: %zu KV bytes for 2", st.kv_bytes);
    uint64_t id = 0;
    ts_err err = {0};
    collect d;
    collect_init(&d);
    int rc = llm_engine_add(e, p->v, p->n, &gp, on_token, &d, &id, &err);
    CHECK(rc == -1 && err.http == 503, "cancel: a full wait queue answered %d %d (%s)", rc, err.http, err.msg);
    llm_engine_cancel(e, ia);
    CHECK(wait_for(&a, 0) && a.fin == LLM_FIN_CANCELLED, "cancel: A did not end cancelled");
    CHECK(wait_for(&c, 2), "cancel: C never got the freed slot");
    llm_engine_stats_get(e, &st);
    CHECK(st.active == 2 && st.waiting == 0, "cancel: after: %zu active, %zu waiting", st.active, st.waiting);
    CHECK(st.kv_bytes - st.kv_batch_bytes == 2 * per_seq, "cancel: after: %zu KV bytes in caches",
          st.kv_bytes - st.kv_batch_bytes);
    CHECK(!b.done, "cancel: B ended (%s)", llm_finish_name(b.fin));
    llm_engine_free(e); /* B and C end cancelled */
    CHECK(b.fin == LLM_FIN_CANCELLED && c.fin == LLM_FIN_CANCELLED && b.finals == 1 && c.finals == 1,
          "cancel: freeing the engine did not end B and C once each");
    CHECK(a.n < 400 && a.finals == 1, "cancel: A kept going (%zu tokens, %d finals)", a.n, a.finals);
}

/* ---- n sequences of one prompt (llm_engine_add_n): one prefill, forked KV ----
 * The hook runs before every Run() on the generation thread: at run add_at it adds an
 * urgent sequence (the group's priority is 1), at run cancel_at it cancels cancel_id. */
#define FORK_N 4
#define FORK_TOKENS 12
typedef struct {
    int runs, add_at, cancel_at;
    llm_engine *e;
    const tok_ids *p;
    collect urgent;
    uint64_t cancel_id;
    _Atomic bool ready; /* cancel_id is set: the first Run() waits for it */
} fork_hook;

static int fork_before_run(void *ctx, ts_err *err)
{
    (void)err;
    fork_hook *h = ctx;
    double end = ts_now() + WAIT_S;
    while (!atomic_load(&h->ready) && ts_now() < end) nanosleep(&(struct timespec){0, 1000000}, NULL);
    h->runs++;
    if (h->runs == h->add_at) {
        llm_gen_params gu = greedy(4);
        gu.priority = 0;
        gu.ignore_eos = true;
        uint64_t id;
        ts_err e2 = {0};
        collect_init(&h->urgent);
        CHECK(llm_engine_add(h->e, h->p->v, h->p->n, &gu, on_token, &h->urgent, &id, &e2) == 0, "fork: urgent: %s",
              e2.msg);
    }
    if (h->runs == h->cancel_at) llm_engine_cancel(h->e, h->cancel_id);
    return 0;
}

static llm_gen_params fork_params(size_t i, int64_t n)
{
    return (llm_gen_params){.max_new_tokens = n, .sample = {.temperature = 0.9, .top_k = 50, .top_p = 0.95},
                            .seeded = true, .seed = 77 + i, .ignore_eos = true, .priority = 1};
}

/* One scenario: FORK_N sequences of p added as one group (prefill chunks of 2 tokens, so the
 * prompt spans several Run()s, no prefix cache) beside the hook's events; sequence i must
 * generate what it generates alone with seed 77 + i (ref), the prompt must be prefilled
 * `prefills` times (0: not checked, a preemption or cancel recomputes part of it) and `forked`
 * sequences started from a copy. cancel: which sequence the
 * hook cancels (-1: none; that one must end cancelled). */
static void fork_case(llm_model *m, const tok_ids *p, const collect *ref, const char *what, int add_at,
                      int cancel, int cancel_at, int64_t max_new, size_t kv_budget, uint64_t prefills,
                      uint64_t forked)
{
    fork_hook h = {.add_at = add_at, .cancel_at = cancel_at, .p = p};
    llm_engine_opts o = {.max_active = FORK_N, .max_waiting = 8, .prefill_chunk = 2, .kv_budget = kv_budget,
                         .hooks = {.before_run = fork_before_run, .ctx = &h}};
    ts_err err = {0};
    if (llm_engine_new(m, &o, &h.e, &err)) {
        CHECK(0, "fork %s: llm_engine_new: %s", what, err.msg);
        return;
    }
    static collect c[FORK_N];
    llm_gen_params gp[FORK_N];
    void *ud[FORK_N];
    uint64_t ids[FORK_N];
    for (size_t i = 0; i < FORK_N; i++) {
        gp[i] = fork_params(i, max_new);
        collect_init(&c[i]);
        ud[i] = &c[i];
    }
    CHECK(llm_engine_add_n(h.e, p->v, p->n, gp, FORK_N, on_token, ud, ids, &err) == 0, "fork %s: add_n: %s", what,
          err.msg);
    if (cancel >= 0) h.cancel_id = ids[cancel];
    atomic_store(&h.ready, true);
    for (size_t i = 0; i < FORK_N; i++) {
        CHECK(wait_for(&c[i], 0), "fork %s: sequence %zu: no end", what, i);
        CHECK(c[i].finals == 1, "fork %s: sequence %zu: %d final callbacks", what, i, c[i].finals);
        if ((int)i == cancel) {
            CHECK(c[i].fin == LLM_FIN_CANCELLED, "fork %s: sequence %zu not cancelled (%s)", what, i,
                  llm_finish_name(c[i].fin));
            continue;
        }
        size_t want = (size_t)max_new;
        CHECK(c[i].fin == LLM_FIN_LENGTH && c[i].n == want &&
                  memcmp(c[i].toks, ref[i].toks, want * sizeof *c[i].toks) == 0,
              "fork %s: sequence %zu (%zu tokens, %s %s) differs from its seed alone", what, i, c[i].n,
              llm_finish_name(c[i].fin), c[i].err);
    }
    if (add_at) CHECK(wait_for(&h.urgent, 0) && h.urgent.n == 4, "fork %s: the urgent sequence: %zu tokens", what,
                      h.urgent.n);
    llm_engine_stats st;
    llm_engine_stats_get(h.e, &st);
    uint64_t urgent_pf = add_at ? p->n : 0;
    CHECK(st.forked == forked, "fork %s: %llu sequences forked, want %llu", what, (unsigned long long)st.forked,
          (unsigned long long)forked);
    if (prefills)
        CHECK(st.prefill_tokens == prefills * p->n + urgent_pf, "fork %s: %llu prompt tokens prefilled, want %llu x %zu",
              what, (unsigned long long)(st.prefill_tokens - urgent_pf), (unsigned long long)prefills, p->n);
    if (add_at) CHECK(st.preemptions >= 1, "fork %s: nobody was preempted", what);
    CHECK(st.active == 0 && st.waiting == 0 && st.kv_bytes == 0 && st.kv_reserved == 0,
          "fork %s: after the end: %zu active, %zu waiting, %zu KV bytes, %zu reserved", what, st.active, st.waiting,
          st.kv_bytes, st.kv_reserved);
    fprintf(stderr, "fork %s: %llu prefill tokens (prompt %zu), %llu forked, %llu preemptions\n", what,
            (unsigned long long)st.prefill_tokens, p->n, (unsigned long long)st.forked,
            (unsigned long long)st.preemptions);
    llm_engine_free(h.e);
}

static void check_fork(llm_model *m, const tok_ids *p)
{
    static collect ref[FORK_N];
    llm_engine *e = engine(m, 1, FORK_N, 16);
    for (size_t i = 0; i < FORK_N; i++) {
        llm_gen_params gp = fork_params(i, FORK_TOKENS);
        collect_init(&ref[i]);
        add(e, p, &gp, &ref[i]);
    }
    for (size_t i = 0; i < FORK_N; i++) CHECK(wait_for(&ref[i], 0) && ref[i].n == FORK_TOKENS, "fork: ref %zu", i);
    llm_engine_free(e);
    CHECK(!same(&ref[0], &ref[1]), "fork: seeds 77 and 78 gave the same tokens");
    int chunks = (int)(p->n + 1) / 2, none = -1;
    size_t one = (p->n + FORK_TOKENS) * llm_model_kv_bytes_per_token(m);
    fork_case(m, p, ref, "plain", 0, none, 0, FORK_TOKENS, 0, 1, FORK_N - 1);
    fork_case(m, p, ref, "one token", 0, none, 0, 1, 0, 1, FORK_N - 1);
    /* an urgent sequence during the leader's prefill: the whole group waits again */
    fork_case(m, p, ref, "preempted before the fork", 2, none, 0, FORK_TOKENS, 0, 0, FORK_N - 1);
    /* during decoding: the latest fork leaves alone and resumes */
    fork_case(m, p, ref, "preempted after the fork", chunks + 3, none, 0, FORK_TOKENS, 0, 0, FORK_N - 1);
    /* the leader cancelled mid-prefill: its forks prefill alone */
    fork_case(m, p, ref, "leader cancelled", 0, 0, 2, FORK_TOKENS, 0, 0, 0);
    fork_case(m, p, ref, "a fork cancelled", 0, FORK_N - 1, 2, FORK_TOKENS, 0, 1, FORK_N - 2);
    /* a KV budget for two caches: a group of two, the others alone */
    fork_case(m, p, ref, "budget of two", 0, none, 0, FORK_TOKENS, one * 5 / 2, 3, 1);
}

/* Requests the engine must refuse with 400. */
static void check_refusals(llm_model *m)
{
    llm_engine *e = engine(m, 1, 1, 16);
    collect c;
    collect_init(&c);
    uint64_t id;
    ts_err err = {0};
    int32_t bad[2] = {1, 32000};
    llm_gen_params gp = greedy(4);
    CHECK(llm_engine_add(e, bad, 2, &gp, on_token, &c, &id, &err) == -1 && err.http == 400 &&
              strstr(err.msg, "vocabulary"), "an id outside the vocabulary: %s", err.msg);
    CHECK(llm_engine_add(e, bad, 0, &gp, on_token, &c, &id, &err) == -1 && err.http == 400,
          "an empty prompt: %s", err.msg);
    gp.sample.top_p = 0;
    CHECK(llm_engine_add(e, bad, 1, &gp, on_token, &c, &id, &err) == -1 && err.http == 400,
          "top_p 0: %s", err.msg);
    static int32_t longp[2048];
    for (size_t i = 0; i < 2048; i++) longp[i] = 1;
    gp = greedy(4);
    CHECK(llm_engine_add(e, longp, 2048, &gp, on_token, &c, &id, &err) == -1 && err.http == 400 &&
              strstr(err.msg, "context"), "a prompt filling the context: %s", err.msg);
    /* near the end of the context: generation stops with "length" when it is full */
    gp = greedy(100);
    gp.ignore_eos = true;
    add(e, &(tok_ids){.v = longp, .n = 2040}, &gp, &c);
    CHECK(wait_for(&c, 0) && c.fin == LLM_FIN_LENGTH && c.n == 8, "context end: %zu tokens, %s (%s)",
          c.n, llm_finish_name(c.fin), c.err);
    llm_engine_free(e);
}

/* The bound path checks itself against the host path at load (llm_check.c): it passes on a
 * sound path, and a write-back that copies nothing (the test-only fault) is caught: an
 * explicit bound fails the load, auto falls back to the host path and says why. */
static void check_kv_check(const char *dir, const llm_model_opts *mo, const llm_model *ok)
{
    CHECK(strstr(llm_model_kv_note(ok), "checked at load: 8 logits rows equal the host path's") != NULL,
          "kv check: the note does not report the check: %s", llm_model_kv_note(ok));
    llm_model_opts bad = *mo;
    bad.fault_kv_writeback = true;
    llm_model *m = NULL;
    ts_err te = {0};
    CHECK(llm_model_open(dir, &bad, &m, &te) != 0 && strstr(te.msg, "failed its check against the host path"),
          "kv check: bound with a broken write-back: %s", m ? llm_model_kv_note(m) : te.msg);
    llm_model_free(m);
    m = NULL;
    bad.kv = LLM_KV_AUTO;
    if (llm_model_open(dir, &bad, &m, &te)) {
        CHECK(0, "kv check: auto with a broken write-back failed the load: %s", te.msg);
        return;
    }
    CHECK(strcmp(llm_model_kv_where(m), "host") == 0 && strstr(llm_model_kv_note(m), "failed its check"),
          "kv check: auto with a broken write-back: %s", llm_model_kv_note(m));
    fprintf(stderr, "KV cache with a broken write-back: %s\n", llm_model_kv_note(m));
    llm_model_free(m);
}

int main(int argc, char **argv)
{
    bool fp16 = argc > 1 && strcmp(argv[1], "--fp16") == 0;
    if (fp16) argc--, argv++;
    g_nopos = argc > 1 && strcmp(argv[1], "--no-position-ids") == 0;
    if (g_nopos) argc--, argv++;
    if (argc < 4 || argc - 3 > MAX_PROMPTS) {
        fprintf(stderr, "usage: llm_gen_check [--fp16] [--no-position-ids] MODELDIR N PROMPT... (at most %d)\n",
                MAX_PROMPTS);
        return 64;
    }
    const char *dir = argv[1];
    int64_t n = atoll(argv[2]);
    char err[1024];
    if (ortenv_init(LOG_ERROR, err, sizeof err)) {
        fprintf(stderr, "ortenv_init: %s\n", err);
        return 1;
    }
    log_set_level(LOG_WARN);
    ep_config epc = {.mode = EXEC_CPU};
    const char *mode = getenv("EXECUTION_MODE");
    if (mode && tier_mode_parse(mode, &epc.mode)) {
        fprintf(stderr, "bad EXECUTION_MODE %s\n", mode);
        return 64;
    }
    const char *strict = getenv("STRICT_EP");
    epc.strict = strict && strcmp(strict, "1") == 0;
    ep_result epr;
    ep_resolve(&epc, &epr);
    if (epr.decision.refuse) {
        fprintf(stderr, "STRICT_EP=1: EXECUTION_MODE=%s cannot run here\n", tier_mode_name(epc.mode));
        return 78;
    }
    fprintf(stderr, "tier: %s (%s)\n", tier_name(epr.decision.tier), tier_provider_name(epr.decision.active));
    llm_model_opts mo = {.ep_cfg = &epc, .ep = &epr, .intra_op_threads = 1};
    const char *kv = getenv("TIERSERVE_LLM_KV");
    if (kv && llm_kv_mode_parse(kv, &mo.kv)) {
        fprintf(stderr, "bad TIERSERVE_LLM_KV %s\n", kv);
        return 64;
    }
    llm_model *m = NULL;
    ts_err te = {0};
    if (llm_model_open(dir, &mo, &m, &te)) {
        fprintf(stderr, "llm_model_open: %s\n", te.msg);
        return 1;
    }
    fprintf(stderr, "KV cache: %s\n", llm_model_kv_note(m));
    if (mo.kv == LLM_KV_BOUND) check_kv_check(dir, &mo, m);
    const llm_sig *sig = llm_model_sig(m);
    CHECK(sig->layers == 2 && sig->kv_heads == 2 && sig->head_dim == 16 && sig->vocab == 32000 &&
              sig->position_ids == !g_nopos && sig->kv_fp16 == fp16 && sig->logits_fp16 == fp16,
          "signature: %zu layers, %zu kv heads, head %zu, vocab %zu, fp16 %d", sig->layers,
          sig->kv_heads, sig->head_dim, sig->vocab, sig->kv_fp16);
    CHECK(llm_model_max_context(m) == 2048, "context %lld", (long long)llm_model_max_context(m));
    CHECK(llm_model_gen(m)->n_eos == 1 && llm_model_gen(m)->eos[0] == 2, "generation_config eos");

    ts_err terr = {0};
    tokenizer *tok = tok_load(dir, &terr);
    if (!tok) {
        fprintf(stderr, "tok_load: %s\n", terr.msg);
        return 1;
    }
    size_t np = (size_t)argc - 3;
    tok_ids prompts[MAX_PROMPTS];
    for (size_t i = 0; i < np; i++) {
        tok_ids_init(&prompts[i], 1024);
        if (tok_encode(tok, argv[3 + i], strlen(argv[3 + i]), true, &prompts[i], &terr)) {
            fprintf(stderr, "tok_encode: %s\n", terr.msg);
            return 1;
        }
    }
    static collect single[MAX_PROMPTS], batched[MAX_PROMPTS];
    check_batching(m, prompts, np, n, single, batched);
    if (!fp16) {
        check_join_leave(m, prompts, np, single);
        check_failed_step(m, &prompts[0], &single[0]);
    }
    if (!fp16 && !g_nopos) {
        check_sampling(m, &prompts[0]);
        check_cancel(m, &prompts[0]);
        check_refusals(m);
        check_fork(m, &prompts[np > 2 ? 2 : 0]);
    }
    printf("{\"prompts\": [");
    for (size_t i = 0; i < np; i++) {
        printf(i ? ", " : "");
        print_ids(prompts[i].v, prompts[i].n);
    }
    printf("], \"single\": [");
    for (size_t i = 0; i < np; i++) {
        printf(i ? ", " : "");
        print_ids(single[i].toks, single[i].n);
    }
    printf("], \"batched\": [");
    for (size_t i = 0; i < np; i++) {
        printf(i ? ", " : "");
        print_ids(batched[i].toks, batched[i].n);
    }
    printf("]}\n");
    for (size_t i = 0; i < np; i++) tok_ids_free(&prompts[i]);
    tok_free(tok);
    llm_model_free(m);
    ortenv_shutdown();
    return g_fail;
}
