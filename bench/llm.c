/* bench_llm: the generation engine in-process on one model: time to first token, inter-token
 * latency (p50/p95) and aggregate tokens/s with 1, 4 and 16 sequences in flight (closed loop:
 * a finished sequence is replaced at once), against one sequence at a time (an engine with
 * one slot, fed the same requests back to back). Each concurrency runs on both KV cache paths
 * in the same process, one after the other: TIERSERVE_LLM_KV=host (every sequence's cache
 * gathered into the batch and scattered back every step) and bound (the batch's presents
 * fed back as pasts while the batch is unchanged).
 *
 *   bench_llm MODELDIR [REQUESTS [NEW_TOKENS [PROMPT_TOKENS]]]   (defaults 48 64 32)
 *   bench_llm --multiturn MODELDIR [HISTORY [TURNS [NEW_TOKENS [USER_TOKENS [CONVERSATIONS]]]]]
 *                                                           (defaults 400 3 32 24 5)
 *   bench_llm --itl MODELDIR [STREAMS [LONG_PROMPT]]        (defaults 8 2000)
 *   bench_llm --variants REQUESTS NEW_TOKENS PROMPT_TOKENS ROUNDS MODELDIR...
 *
 * --variants: the same model in several weight formats (FP32, and `tierserve quantize`'s INT8
 * and INT4), bound KV path, c=1 (one slot) and c=16 (16 slots), interleaved: each round runs
 * every model once at each concurrency, so a loaded machine slows them alike; prints every
 * run, then per concurrency the median tokens/s of each model and its ratio to the first.
 *   bench_llm --urgent MODELDIR [SLOTS [PROMPT]]            (defaults 16 128)
 *
 * --itl: issue 25's chunked prefill. STREAMS greedy streams decode; their inter-token gaps
 * are recorded (16 each), then a LONG_PROMPT-token prompt arrives and their gaps are recorded
 * until its first token: ITL p50 without, p50/p99/max with, and the long prompt's TTFT, with
 * no step budget (every prefill chunk whole: the behaviour before) and with the auto budget,
 * on both KV paths (BENCH_ITL, e.g. "bound-auto,host-auto", picks some of host-none,
 * host-auto, bound-none, bound-auto). BENCH_ITL_TRACE=N also prints the N worst gaps while
 * the prompt arrives, each with what the generation loop did inside it (the engine's trace
 * hook: decode and prefill Run()s with their tokens, past and budget, the bound path's
 * write-backs, sampling, joins, the prompt's end; work under 0.1 ms summed as "small", the
 * rest of the gap "untraced"), one line per gap.
 * BENCH_STEP_SHARE=S sets the auto budget's target (S x a decode step for a prefill Run();
 * default 0.5) and BENCH_STEP_FIT=1 its fitted cost model instead of the time per token
 * (llm_engine_opts.step_share, step_fit), for every mode (--variants' c=16 included).
 * --urgent: issue 25's priority preemption (bound path). An urgent request's TTFT on an idle
 * engine, then with SLOTS batch-priority streams in every slot (it preempts one; 5 times).
 * TIERSERVE_INTRA_OP_THREADS, TIERSERVE_INTRA_OP_SPINNING and TIERSERVE_TUNE set the session's
 * layout as they set the worker's (unset: measured at open as the worker does, at a batch of
 * 16; TIERSERVE_TUNE=0: the usable cores of the hardware map, not ORT's CPUID count);
 * TIERSERVE_LLM_KV_DTYPE=fp16 stores both paths' KV caches as FP16 as it does the worker's. The
 * bound path's session is opened (and measured) first; the host path's takes its layout.
 *   bench_llm --layout MODELDIR [REQUESTS [NEW_TOKENS [PROMPT_TOKENS]]]
 * prints the layout (and the table measured for it), then the bound path at c=1 and c=16
 * only: bench/llm_layout.sh runs it with the defaults and explicit settings, interleaved.
 *
 * --multiturn: issue 25's conversation. Each conversation starts with a HISTORY-token
 * history plus a USER_TOKENS-token question; each turn re-sends everything so far (the
 * previous prompt, the answer's NEW_TOKENS tokens, a new question), one request at a time.
 * The time to first token of every turn is measured with the automatic prefix cache off
 * and on, on both KV paths, in the same process (the median over CONVERSATIONS distinct
 * conversations), then the last turn's ratio (off / on) is printed.
 *
 * Greedy, ignore_eos (every request generates exactly NEW_TOKENS), CPU tier unless
 * EXECUTION_MODE says otherwise. Prints one line per configuration. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "ep.h"
#include "llm_engine.h"
#include "llm_model.h"
#include "tune.h"
#include "ortenv.h"

#define MAX_REQ 4096

/* BENCH_STEP_SHARE=S, BENCH_STEP_FIT=1: the auto step budget's target and rule
 * (llm_engine_opts.step_share, step_fit) for every engine the bench opens. */
static void step_opts(llm_engine_opts *o)
{
    const char *share = getenv("BENCH_STEP_SHARE"), *fit = getenv("BENCH_STEP_FIT");
    if (share) o->step_share = atof(share);
    o->step_fit = fit && strcmp(fit, "1") == 0;
}

typedef struct {
    double t_add, t_first, t_last;
    size_t n;
    bool done;
} req;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cv = PTHREAD_COND_INITIALIZER;
static double *g_itl;          /* every inter-token gap of the run */
static size_t g_n_itl, g_cap_itl;
static size_t g_done;

static void on_token(void *ud, uint64_t id, int32_t tok, llm_finish fin, const ts_err *err)
{
    (void)id;
    (void)tok;
    req *r = ud;
    double now = ts_now();
    pthread_mutex_lock(&g_mu);
    if (fin == LLM_FIN_ERROR) fprintf(stderr, "error: %s\n", err ? err->msg : "?");
    if (tok >= 0) {
        if (r->n == 0) r->t_first = now;
        else if (g_n_itl < g_cap_itl) g_itl[g_n_itl++] = now - r->t_last;
        r->t_last = now;
        r->n++;
    }
    if (fin != LLM_FIN_NONE) {
        r->done = true;
        g_done++;
        pthread_cond_signal(&g_cv);
    }
    pthread_mutex_unlock(&g_mu);
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double pct(double *v, size_t n, double p)
{
    if (n == 0) return 0;
    qsort(v, n, sizeof *v, cmp_d);
    size_t i = (size_t)(p * (double)(n - 1) + 0.5);
    return v[i];
}

/* Runs nreq requests keeping `conc` in flight on an engine with `slots` slots. */
static double run(llm_model *m, const char *label, size_t slots, size_t conc, size_t nreq, int64_t new_tokens,
                const int32_t *prompt, size_t plen)
{
    llm_engine_opts o = {.max_active = slots, .max_waiting = MAX_REQ, .prefill_chunk = 64};
    step_opts(&o);
    llm_engine *e = NULL;
    ts_err err = {0};
    if (llm_engine_new(m, &o, &e, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        exit(1);
    }
    static req reqs[MAX_REQ];
    memset(reqs, 0, sizeof reqs);
    g_cap_itl = nreq * (size_t)new_tokens;
    g_itl = calloc(g_cap_itl, sizeof *g_itl);
    g_n_itl = 0;
    g_done = 0;
    llm_gen_params gp = {.max_new_tokens = new_tokens, .sample = {.temperature = 0, .top_p = 1},
                         .ignore_eos = true};
    double t0 = ts_now();
    size_t sent = 0;
    pthread_mutex_lock(&g_mu);
    while (g_done < nreq) {
        while (sent < nreq && sent - g_done < conc) {
            uint64_t id;
            reqs[sent].t_add = ts_now();
            pthread_mutex_unlock(&g_mu);
            if (llm_engine_add(e, prompt, plen, &gp, on_token, &reqs[sent], &id, &err)) {
                fprintf(stderr, "%s\n", err.msg);
                exit(1);
            }
            pthread_mutex_lock(&g_mu);
            sent++;
        }
        pthread_cond_wait(&g_cv, &g_mu);
    }
    pthread_mutex_unlock(&g_mu);
    double wall = ts_now() - t0;
    llm_engine_stats st;
    llm_engine_stats_get(e, &st);
    llm_engine_free(e);
    double *ttft = calloc(nreq, sizeof *ttft);
    size_t toks = 0;
    for (size_t i = 0; i < nreq; i++) {
        ttft[i] = reqs[i].t_first - reqs[i].t_add;
        toks += reqs[i].n;
    }
    printf("%-28s c=%-3zu TTFT p50 %7.2f ms p95 %7.2f ms | ITL p50 %6.2f ms p95 %6.2f ms | %7.1f tok/s"
           " | %zu tokens in %.2f s, largest batch %zu\n",
           label, conc, 1e3 * pct(ttft, nreq, 0.5), 1e3 * pct(ttft, nreq, 0.95), 1e3 * pct(g_itl, g_n_itl, 0.5),
           1e3 * pct(g_itl, g_n_itl, 0.95), (double)toks / wall, toks, wall, st.max_batch);
    fflush(stdout);
    free(ttft);
    free(g_itl);
    g_itl = NULL;
    return (double)toks / wall;
}

/* ---- --multiturn ---- */

typedef struct {
    double t_first;
    int32_t *out;
    size_t n, cap;
    bool done;
    uint64_t cached;
} turn_req;

static void on_turn_token(void *ud, uint64_t id, int32_t tok, llm_finish fin, const ts_err *err)
{
    (void)id;
    turn_req *r = ud;
    double now = ts_now();
    pthread_mutex_lock(&g_mu);
    if (fin == LLM_FIN_ERROR) fprintf(stderr, "error: %s\n", err ? err->msg : "?");
    if (tok >= 0) {
        if (r->n == 0) r->t_first = now;
        if (r->n < r->cap) r->out[r->n++] = tok;
    }
    if (fin != LLM_FIN_NONE) {
        r->done = true;
        pthread_cond_signal(&g_cv);
    }
    pthread_mutex_unlock(&g_mu);
}

static void fill(int32_t *v, size_t n, uint64_t *x, size_t vocab)
{
    for (size_t i = 0; i < n; i++) {
        *x = *x * 6364136223846793005ULL + 1442695040888963407ULL;
        v[i] = (int32_t)(3 + (*x >> 33) % (vocab - 3));
    }
}

/* conv conversations of `turns` turns on one engine; ttft[c * turns + t] in seconds, cached
 * tokens of each turn's prompt in cached[] (the same layout). */
static void conversations(llm_model *m, bool cache, size_t hist, size_t turns, int64_t new_tokens, size_t user,
                          size_t conv, double *ttft, uint64_t *cached)
{
    llm_engine_opts o = {.max_active = 1, .max_waiting = 4, .prefill_chunk = 512, .model_id = "bench",
                         .prefix_cache_bytes = cache ? (size_t)256 << 20 : 0};
    llm_engine *e = NULL;
    ts_err err = {0};
    if (llm_engine_new(m, &o, &e, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        exit(1);
    }
    size_t vocab = llm_model_sig(m)->vocab, cap = hist + turns * (user + (size_t)new_tokens) + 1;
    int32_t *prompt = calloc(cap, sizeof *prompt), *out = calloc((size_t)new_tokens, sizeof *out);
    for (size_t c = 0; c < conv; c++) {
        uint64_t x = 777 + c; /* the same conversations with and without the cache */
        size_t len = 1;
        prompt[0] = 1;
        fill(prompt + len, hist, &x, vocab);
        len += hist;
        for (size_t t = 0; t < turns; t++) {
            fill(prompt + len, user, &x, vocab);
            len += user;
            _Atomic uint64_t got = 0;
            llm_gen_params gp = {.max_new_tokens = new_tokens, .sample = {.temperature = 0, .top_p = 1},
                                 .ignore_eos = true, .cache_scope = "bench", .cached_tokens = &got};
            turn_req r = {.out = out, .cap = (size_t)new_tokens};
            uint64_t id;
            double t0 = ts_now();
            if (llm_engine_add(e, prompt, len, &gp, on_turn_token, &r, &id, &err)) {
                fprintf(stderr, "%s\n", err.msg);
                exit(1);
            }
            pthread_mutex_lock(&g_mu);
            while (!r.done) pthread_cond_wait(&g_cv, &g_mu);
            pthread_mutex_unlock(&g_mu);
            ttft[c * turns + t] = r.t_first - t0;
            cached[c * turns + t] = atomic_load(&got);
            memcpy(prompt + len, out, r.n * sizeof *out); /* the answer is part of the next turn */
            len += r.n;
        }
    }
    free(prompt);
    free(out);
    llm_engine_free(e);
}

/* ---- --itl and --urgent: the scheduler (issue 25 items 5 and 4) ---- */

typedef struct {
    double t_add, t_first, t_last;
    size_t n;
    bool done;
} stream;

static double *g_gaps[2];      /* the running streams' inter-token gaps: [0] before the
                                  long prompt arrived, [1] from then to its first token */
static size_t g_n_gaps[2], g_cap_gaps;
static int g_phase = -1;       /* under g_mu; -1: not recording */

/* BENCH_ITL_TRACE=N: the engine's trace (llm_engine_hooks.on_trace) while recording, and each
 * gap's window of phase 1, to print the N worst gaps' composition. */
typedef struct { double a, b; } window;
static llm_trace_ev *g_ev;
static size_t g_n_ev, g_cap_ev;
static window *g_win;          /* [i]: g_gaps[1][i]'s window */

static void on_trace(void *ctx, const llm_trace_ev *ev)
{
    (void)ctx;
    pthread_mutex_lock(&g_mu);
    if (g_phase >= 0 && g_n_ev < g_cap_ev) g_ev[g_n_ev++] = *ev;
    pthread_mutex_unlock(&g_mu);
}

static void on_stream(void *ud, uint64_t id, int32_t tok, llm_finish fin, const ts_err *err)
{
    (void)id;
    stream *r = ud;
    double now = ts_now();
    pthread_mutex_lock(&g_mu);
    if (fin == LLM_FIN_ERROR) fprintf(stderr, "error: %s\n", err ? err->msg : "?");
    if (tok >= 0) {
        if (r->n == 0) r->t_first = now;
        else if (g_phase >= 0 && g_n_gaps[g_phase] < g_cap_gaps) {
            if (g_phase == 1 && g_win) g_win[g_n_gaps[1]] = (window){r->t_last, now};
            g_gaps[g_phase][g_n_gaps[g_phase]++] = now - r->t_last;
        }
        r->t_last = now;
        r->n++;
    }
    if (fin != LLM_FIN_NONE) r->done = true;
    pthread_cond_broadcast(&g_cv);
    pthread_mutex_unlock(&g_mu);
}

static llm_engine *sched_engine(llm_model *m, size_t slots, size_t step_tokens)
{
    llm_engine_opts o = {.max_active = slots, .max_waiting = 64, .prefill_chunk = 512, .step_tokens = step_tokens};
    if (g_ev) o.hooks.on_trace = on_trace;
    step_opts(&o);
    llm_engine *e = NULL;
    ts_err err = {0};
    if (llm_engine_new(m, &o, &e, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        exit(1);
    }
    return e;
}

static uint64_t add_stream(llm_engine *e, const int32_t *prompt, size_t n, int64_t new_tokens, int priority,
                           stream *r)
{
    llm_gen_params gp = {.max_new_tokens = new_tokens, .sample = {.temperature = 0, .top_p = 1},
                         .ignore_eos = true, .priority = priority};
    uint64_t id = 0;
    ts_err err = {0};
    r->t_add = ts_now();
    if (llm_engine_add(e, prompt, n, &gp, on_stream, r, &id, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        exit(1);
    }
    return id;
}

/* Until every one of r[0..n) has made `tokens` tokens (or ended). Under g_mu. */
static void wait_tokens(stream *r, size_t n, size_t tokens)
{
    for (;;) {
        size_t ok = 0;
        for (size_t i = 0; i < n; i++) ok += r[i].n >= tokens || r[i].done;
        if (ok == n) return;
        pthread_cond_wait(&g_cv, &g_mu);
    }
}

static int cmp_gap_desc(const void *a, const void *b)
{
    const window *u = &g_win[*(const size_t *)a], *v = &g_win[*(const size_t *)b]; /* g_gaps[1] is sorted by now */
    double x = u->b - u->a, y = v->b - v->a;
    return (x < y) - (x > y);
}

/* The `worst` longest gaps of phase 1 (one per window: the streams of a decode step share
 * theirs), each with the loop's work that ended inside it; work under 0.1 ms is summed. */
static void trace_print(size_t worst, double t_arrive)
{
    static const char *const kname[] = {"decode", "prefill", "trunk", "settle", "sample", "join", "prompt-end"};
    size_t n = g_n_gaps[1], *ix = calloc(n ? n : 1, sizeof *ix), shown = 0;
    window *done = calloc(worst ? worst : 1, sizeof *done);
    for (size_t i = 0; i < n; i++) ix[i] = i;
    qsort(ix, n, sizeof *ix, cmp_gap_desc);
    /* the chunks run beside decoding since the prompt arrived: their sizes, and any over the
     * budget the rule gave it (the engine must never run one) */
    size_t nc = 0, over = 0, cmin = SIZE_MAX, cmax = 0;
    double tmax = 0;
    for (size_t i = 0; i < g_n_ev; i++) {
        const llm_trace_ev *ev = &g_ev[i];
        if ((ev->kind != LLM_TR_PREFILL && ev->kind != LLM_TR_TRUNK) || ev->budget == SIZE_MAX || ev->t0 < t_arrive)
            continue;
        nc++;
        over += ev->tokens > ev->budget;
        if (ev->tokens < cmin) cmin = ev->tokens;
        if (ev->tokens > cmax) cmax = ev->tokens;
        if (ev->t1 - ev->t0 > tmax) tmax = ev->t1 - ev->t0;
    }
    printf("  %zu budgeted chunks: %zu..%zu tokens, longest %.2f ms, %zu over their budget\n", nc, nc ? cmin : 0, cmax,
           1e3 * tmax, over);
    /* the decode Run()s themselves, before the prompt and beside its chunks: a step that
     * slows down beside prefill (another session's threads, caches) widens every gap */
    double *dr[2] = {calloc(g_n_ev + 1, sizeof **dr), calloc(g_n_ev + 1, sizeof **dr)};
    size_t nd[2] = {0, 0};
    for (size_t i = 0; dr[0] && dr[1] && i < g_n_ev; i++)
        if (g_ev[i].kind == LLM_TR_DECODE) {
            int ph = g_ev[i].t0 >= t_arrive;
            dr[ph][nd[ph]++] = g_ev[i].t1 - g_ev[i].t0;
        }
    printf("  decode Run()s: p50 %.2f p90 %.2f ms before the prompt (%zu), p50 %.2f p90 %.2f ms while (%zu)\n",
           1e3 * pct(dr[0], nd[0], 0.5), 1e3 * pct(dr[0], nd[0], 0.9), nd[0], 1e3 * pct(dr[1], nd[1], 0.5),
           1e3 * pct(dr[1], nd[1], 0.9), nd[1]);
    free(dr[0]);
    free(dr[1]);
    for (size_t k = 0; k < n && shown < worst; k++) {
        window w = g_win[ix[k]];
        bool dup = false;
        for (size_t j = 0; j < shown && !dup; j++) /* overlaps a shown one by half or more */
            dup = (w.b < done[j].b ? w.b : done[j].b) - (w.a > done[j].a ? w.a : done[j].a) >= 0.5 * (w.b - w.a);
        if (dup) continue;
        done[shown++] = w;
        printf("  gap %7.2f ms at +%7.1f ms:", 1e3 * (w.b - w.a), 1e3 * (w.a - t_arrive));
        double small = 0, covered = 0;
        for (size_t i = 0; i < g_n_ev; i++) {
            const llm_trace_ev *ev = &g_ev[i];
            if (ev->t1 <= w.a || ev->t0 >= w.b) continue;
            double lo = ev->t0 > w.a ? ev->t0 : w.a, hi = ev->t1 < w.b ? ev->t1 : w.b, d = hi - lo;
            covered += d;
            if (ev->t1 - ev->t0 < 1e-4) {
                small += d;
                continue;
            }
            printf(" | %s", kname[ev->kind]);
            if (ev->kind == LLM_TR_DECODE) printf(" %zux1 past %zu", ev->n, ev->past);
            if (ev->kind == LLM_TR_PREFILL || ev->kind == LLM_TR_TRUNK) {
                printf(" %zu tok past %zu", ev->tokens, ev->past);
                if (ev->budget != SIZE_MAX) printf(" (budget %zu)", ev->budget);
            }
            printf(" %.2f", 1e3 * (ev->t1 - ev->t0));
            if (d < ev->t1 - ev->t0 - 1e-6) printf(" (%.2f inside)", 1e3 * d);
        }
        printf(" | small %.2f | untraced %.2f\n", 1e3 * small, 1e3 * (w.b - w.a - covered));
    }
    free(ix);
    free(done);
}

/* One --itl run: `streams` decoding streams of a 128-token prompt; their ITL over 16 tokens
 * each, then a `long_n`-token prompt arrives and their ITL until its first token. */
static void itl_run(llm_model *m, const char *label, size_t step_tokens, size_t streams, size_t long_n)
{
    size_t vocab = llm_model_sig(m)->vocab, plen = 128;
    int64_t ctx = llm_model_max_context(m);
    int32_t *prompt = calloc(long_n, sizeof *prompt);
    uint64_t x = 4242;
    prompt[0] = 1;
    fill(prompt + 1, long_n - 1, &x, vocab);
    stream *r = calloc(streams + 1, sizeof *r);
    uint64_t *ids = calloc(streams, sizeof *ids);
    g_cap_gaps = 1 << 16;
    for (int p = 0; p < 2; p++) {
        g_gaps[p] = calloc(g_cap_gaps, sizeof *g_gaps[p]);
        g_n_gaps[p] = 0;
    }
    const char *tr = getenv("BENCH_ITL_TRACE");
    size_t worst = tr ? (size_t)atol(tr) : 0;
    if (worst) {
        g_cap_ev = 1 << 18;
        g_ev = calloc(g_cap_ev, sizeof *g_ev);
        g_win = calloc(g_cap_gaps, sizeof *g_win);
        g_n_ev = 0;
    }
    llm_engine *e = sched_engine(m, streams + 1, step_tokens);
    for (size_t i = 0; i < streams; i++) /* distinct prompts: the tail differs */
        ids[i] = add_stream(e, prompt + i, plen, ctx - (int64_t)plen - 1, 2, &r[i]);
    pthread_mutex_lock(&g_mu);
    wait_tokens(r, streams, 4);
    g_phase = 0;
    wait_tokens(r, streams, 20);
    g_phase = 1;
    pthread_mutex_unlock(&g_mu);
    add_stream(e, prompt, long_n, 1, 2, &r[streams]);
    pthread_mutex_lock(&g_mu);
    while (!r[streams].done) pthread_cond_wait(&g_cv, &g_mu);
    g_phase = -1;
    pthread_mutex_unlock(&g_mu);
    for (size_t i = 0; i < streams; i++) llm_engine_cancel(e, ids[i]);
    llm_engine_stats st;
    llm_engine_stats_get(e, &st);
    llm_engine_free(e);
    double p50 = pct(g_gaps[0], g_n_gaps[0], 0.5), p99 = pct(g_gaps[1], g_n_gaps[1], 0.99);
    printf("%-24s %zu streams: ITL p50 %6.2f ms without | while a %zu-token prompt arrives: ITL p50 %6.2f p99 %7.2f "
           "max %7.2f ms (%zu gaps) = p99 %.2fx the p50 without | its TTFT %7.1f ms, %llu prefill Run()s\n",
           label, streams, 1e3 * p50, long_n, 1e3 * pct(g_gaps[1], g_n_gaps[1], 0.5), 1e3 * p99,
           1e3 * pct(g_gaps[1], g_n_gaps[1], 1.0), g_n_gaps[1], p99 / p50,
           1e3 * (r[streams].t_first - r[streams].t_add), (unsigned long long)st.prefill_runs);
    if (worst) {
        trace_print(worst, r[streams].t_add);
        free(g_ev);
        free(g_win);
        g_ev = NULL;
        g_win = NULL;
    }
    fflush(stdout);
    for (int p = 0; p < 2; p++) free(g_gaps[p]);
    free(r);
    free(ids);
    free(prompt);
}

/* a[0..n): STREAMS LONG, each optional */
static int itl(int n, char **a, llm_model *m, llm_model *mb)
{
    size_t streams = n > 0 ? (size_t)atol(a[0]) : 8, long_n = n > 1 ? (size_t)atol(a[1]) : 2000;
    if (streams < 1 || streams > 64 || long_n < 200 || long_n + 1 >= (size_t)llm_model_max_context(m)) return 64;
    const char *share = getenv("BENCH_STEP_SHARE"), *fit = getenv("BENCH_STEP_FIT");
    printf("bench_llm --itl: %zu greedy streams decoding, then a %zu-token prompt arrives; prefill chunk 512; "
           "auto budget: share %s, %s\n", streams, long_n, share ? share : "default",
           fit && strcmp(fit, "1") == 0 ? "fitted cost model" : "time per token");
    /* BENCH_ITL=host|bound|bound-auto|host-auto...: only the runs named (a loaded machine
     * makes the whole set take many minutes) */
    const char *only = getenv("BENCH_ITL");
    for (int kv = 0; kv < 2; kv++)
        for (int b = 0; b < 2; b++) {
            char label[64];
            snprintf(label, sizeof label, "KV %s, %s", kv ? "bound" : "host", b ? "budget auto" : "no step budget");
            char key[32];
            snprintf(key, sizeof key, "%s%s", kv ? "bound" : "host", b ? "-auto" : "-none");
            if (only && !strstr(only, key)) continue;
            itl_run(kv ? mb : m, label, b ? 0 : LLM_MAX_STEP_TOKENS, streams, long_n);
        }
    return 0;
}

/* --urgent: TTFT of an urgent request on an idle engine, then with every slot taken by
 * batch-priority streams (it preempts one), REPEATS times each; medians. */
static int urgent(int n, char **a, llm_model *m)
{
    size_t slots = n > 0 ? (size_t)atol(a[0]) : 16, plen = n > 1 ? (size_t)atol(a[1]) : 128, reps = 5;
    int64_t ctx = llm_model_max_context(m);
    if (slots < 1 || slots > 64 || plen < 2 || (int64_t)plen * 2 + 2 >= ctx) return 64;
    size_t vocab = llm_model_sig(m)->vocab;
    int32_t *prompt = calloc(plen + slots + reps, sizeof *prompt);
    uint64_t x = 99;
    prompt[0] = 1;
    fill(prompt + 1, plen + slots + reps - 1, &x, vocab);
    double idle[16], busy[16];
    llm_engine *e = sched_engine(m, slots, 0);
    stream *r = calloc(slots + reps, sizeof *r);
    uint64_t *ids = calloc(slots, sizeof *ids);
    for (size_t i = 0; i < reps; i++) { /* idle */
        stream u = {0};
        add_stream(e, prompt + slots + i, plen, 1, 0, &u);
        pthread_mutex_lock(&g_mu);
        while (!u.done) pthread_cond_wait(&g_cv, &g_mu);
        pthread_mutex_unlock(&g_mu);
        idle[i] = u.t_first - u.t_add;
    }
    for (size_t i = 0; i < slots; i++) ids[i] = add_stream(e, prompt + i, plen, ctx - (int64_t)plen - 1, 2, &r[i]);
    pthread_mutex_lock(&g_mu);
    wait_tokens(r, slots, 4);
    pthread_mutex_unlock(&g_mu);
    for (size_t i = 0; i < reps; i++) {
        stream *u = &r[slots + i];
        add_stream(e, prompt + slots + i, plen, 1, 0, u);
        pthread_mutex_lock(&g_mu);
        while (!u->done) pthread_cond_wait(&g_cv, &g_mu);
        wait_tokens(r, slots, r[0].n + 2); /* the preempted one is back */
        pthread_mutex_unlock(&g_mu);
        busy[i] = u->t_first - u->t_add;
    }
    for (size_t i = 0; i < slots; i++) llm_engine_cancel(e, ids[i]);
    llm_engine_stats st;
    llm_engine_stats_get(e, &st);
    llm_engine_free(e);
    double pi = pct(idle, reps, 0.5), pb = pct(busy, reps, 0.5);
    printf("bench_llm --urgent: %zu-token urgent prompt, TTFT p50 idle %.1f ms | with %zu batch streams in every "
           "slot %.1f ms (max %.1f) = %.2fx | %llu preemptions\n", plen, 1e3 * pi, slots, 1e3 * pb,
           1e3 * pct(busy, reps, 1.0), pb / pi, (unsigned long long)st.preemptions);
    free(r);
    free(ids);
    free(prompt);
    return 0;
}

/* a[0..n): HISTORY TURNS NEW_TOKENS USER_TOKENS CONVERSATIONS, each optional */
static int multiturn(int n, char **a, llm_model *m, llm_model *mb)
{
    size_t hist = n > 0 ? (size_t)atol(a[0]) : 400, turns = n > 1 ? (size_t)atol(a[1]) : 3;
    int64_t new_tokens = n > 2 ? atoll(a[2]) : 32;
    size_t user = n > 3 ? (size_t)atol(a[3]) : 24, conv = n > 4 ? (size_t)atol(a[4]) : 5;
    if (hist < 1 || turns < 1 || turns > 64 || new_tokens < 1 || new_tokens > 4096 || user < 1 || conv < 1 ||
        conv > 1000 || hist + turns * (user + (size_t)new_tokens) + 1 >= (size_t)llm_model_max_context(m))
        return 64;
    printf("bench_llm --multiturn: %zu conversations, history %zu tokens, %zu turns of %zu question + %lld "
           "answer tokens, one request at a time, prefill chunk 512\n", conv, hist, turns, user,
           (long long)new_tokens);
    double *ttft = calloc(conv * turns, sizeof *ttft), *col = calloc(conv, sizeof *col), last[2][2] = {{0}};
    uint64_t *cached = calloc(conv * turns, sizeof *cached);
    for (int kv = 0; kv < 2; kv++)
        for (int cache = 0; cache < 2; cache++) {
            conversations(kv ? mb : m, cache, hist, turns, new_tokens, user, conv, ttft, cached);
            printf("%-11s prefix cache %-3s", kv ? "KV bound" : "KV host", cache ? "on" : "off");
            for (size_t t = 0; t < turns; t++) {
                for (size_t c = 0; c < conv; c++) col[c] = ttft[c * turns + t];
                double p50 = pct(col, conv, 0.5);
                printf(" | turn %zu TTFT p50 %7.2f ms (cached %llu of %zu)", t + 1, 1e3 * p50,
                       (unsigned long long)cached[t], 1 + hist + t * ((size_t)new_tokens + user) + user);
                if (t + 1 == turns) last[kv][cache] = p50;
            }
            printf("\n");
            fflush(stdout);
        }
    for (int kv = 0; kv < 2; kv++)
        printf("%s: turn %zu TTFT without / with the prefix cache = %.2f / %.2f ms = %.1fx\n",
               kv ? "KV bound" : "KV host", turns, 1e3 * last[kv][0], 1e3 * last[kv][1], last[kv][0] / last[kv][1]);
    free(ttft);
    free(col);
    free(cached);
    return 0;
}

static ts_switch switch_env(const char *name)
{
    const char *v = getenv(name);
    return !v || !strcmp(v, "auto") ? SWITCH_AUTO : !strcmp(v, "0") || !strcmp(v, "off") ? SWITCH_OFF : SWITCH_ON;
}

static void print_layout(const llm_model *m)
{
    const model_layout *L = llm_model_layout(m);
    printf("layout: %d intra-op thread(s), spinning %s (%s: %s; %.0f ms)\n", L->threads, L->spin ? "on" : "off",
           L->source, L->note, L->search_ms);
    for (size_t i = 0; i < L->n_cands; i++)
        printf("  %d thread(s) spinning %-3s step b1 %7.0f us, b%d %7.0f us = %7.1f tokens/s%s\n", L->cands[i].threads,
               L->cands[i].spin ? "on" : "off", L->cands[i].run_us, L->cands[i].batch, L->cands[i].batch_us,
               L->cands[i].rps, (int)i == L->chosen ? "  <- chosen" : "");
}

/* ---- --variants ---- */

#define VAR_MAX 8
#define VAR_ROUNDS 16

/* The worker's prefill trunk setting and its default (auto): off runs every prefill chunk
 * through the whole model. Non-zero: the setting is not off|auto|on. */
static int trunk_env(llm_trunk_mode *mode)
{
    *mode = LLM_TRUNK_AUTO;
    const char *v = getenv("TIERSERVE_LLM_PREFILL_TRUNK");
    return v ? llm_trunk_mode_parse(v, mode) : 0;
}

static int variants(int argc, char **argv)
{
    if (argc < 5 || argc - 4 > VAR_MAX) return 64;
    size_t nreq = (size_t)atol(argv[0]), plen = (size_t)atol(argv[2]), rounds = (size_t)atol(argv[3]);
    int64_t new_tokens = atoll(argv[1]);
    size_t nm = (size_t)argc - 4;
    if (nreq < 1 || nreq > MAX_REQ || new_tokens < 1 || plen < 1 || plen > 1024 || rounds < 1 || rounds > VAR_ROUNDS)
        return 64;
    char msg[1024];
    if (ortenv_init(LOG_ERROR, msg, sizeof msg)) {
        fprintf(stderr, "%s\n", msg);
        return 1;
    }
    log_set_level(LOG_WARN);
    ep_config epc = {.mode = EXEC_CPU};
    const char *mode = getenv("EXECUTION_MODE");
    if (mode && tier_mode_parse(mode, &epc.mode)) return 64;
    ep_result epr;
    ep_resolve(&epc, &epr);
    if (epr.decision.refuse) return 78;
    const char *threads = getenv("TIERSERVE_INTRA_OP_THREADS");
    llm_model_opts mo = {.ep_cfg = &epc, .ep = &epr, .kv = LLM_KV_BOUND, .intra_op_threads = threads ? atoi(threads) : 0};
    if (trunk_env(&mo.trunk)) return 64;
    llm_model *m[VAR_MAX] = {0};
    ts_err err = {0};
    for (size_t i = 0; i < nm; i++)
        if (llm_model_open(argv[4 + i], &mo, &m[i], &err)) {
            fprintf(stderr, "%s: %s\n", argv[4 + i], err.msg);
            return 1;
        }
    int32_t *prompt = calloc(plen, sizeof *prompt);
    uint64_t x = 12345;
    prompt[0] = 1;
    for (size_t i = 1; i < plen; i++) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        prompt[i] = (int32_t)(3 + (x >> 33) % (llm_model_sig(m[0])->vocab - 3));
    }
    printf("bench_llm --variants: %zu requests x %lld new tokens, prompt %zu tokens, KV bound, tier %s, %zu rounds, "
           "intra-op threads %d (0: the usable cores, %d here)\n", nreq, (long long)new_tokens, plen,
           tier_name(epr.decision.tier), rounds, mo.intra_op_threads, tune_hw_get()->usable);
    static const size_t conc[2] = {1, 16};
    static double tps[2][VAR_MAX][VAR_ROUNDS];
    for (size_t r = 0; r < rounds; r++)
        for (size_t c = 0; c < 2; c++)
            for (size_t i = 0; i < nm; i++) {
                char label[64];
                snprintf(label, sizeof label, "r%zu %.24s", r + 1, argv[4 + i]);
                tps[c][i][r] = run(m[i], label, conc[c], conc[c], nreq, new_tokens, prompt, plen);
            }
    for (size_t c = 0; c < 2; c++) {
        double base = pct(tps[c][0], rounds, 0.5);
        for (size_t i = 0; i < nm; i++) {
            double med = pct(tps[c][i], rounds, 0.5);
            printf("c=%-2zu %-40.40s median %8.1f tok/s  %.2fx the first\n", conc[c], argv[4 + i], med,
                   base > 0 ? med / base : 0);
        }
    }
    free(prompt);
    for (size_t i = 0; i < nm; i++) llm_model_free(m[i]);
    ortenv_shutdown();
    return 0;
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--variants") == 0) {
        int rc = variants(argc - 2, argv + 2);
        if (rc == 64)
            fprintf(stderr, "usage: bench_llm --variants REQUESTS NEW_TOKENS PROMPT_TOKENS ROUNDS MODELDIR... "
                            "(rounds 1..%d, at most %d models)\n", VAR_ROUNDS, VAR_MAX);
        return rc;
    }
    bool layout_only = argc > 1 && strcmp(argv[1], "--layout") == 0;
    if (layout_only) {
        argv++;
        argc--;
    }
    int mode_arg = argc > 1 ? strcmp(argv[1], "--multiturn") == 0 ? 1 : strcmp(argv[1], "--itl") == 0 ? 2
                                 : strcmp(argv[1], "--urgent") == 0 ? 3 : 0 : 0;
    bool mt = mode_arg != 0;
    if (mt) { /* the model is argv[1] below; the multi-turn arguments follow it */
        argv++;
        argc--;
    }
    if (argc < 2) {
        fprintf(stderr, "usage: bench_llm MODELDIR [REQUESTS [NEW_TOKENS [PROMPT_TOKENS]]]\n");
        return 64;
    }
    size_t nreq = argc > 2 && !mt ? (size_t)atol(argv[2]) : 48;
    int64_t new_tokens = argc > 3 && !mt ? atoll(argv[3]) : 64;
    size_t plen = argc > 4 && !mt ? (size_t)atol(argv[4]) : 32;
    if (nreq < 1 || nreq > MAX_REQ || new_tokens < 1 || plen < 1 || plen > 1024) return 64;
    char msg[1024];
    if (ortenv_init(LOG_ERROR, msg, sizeof msg)) {
        fprintf(stderr, "%s\n", msg);
        return 1;
    }
    log_set_level(LOG_WARN);
    ep_config epc = {.mode = EXEC_CPU};
    const char *mode = getenv("EXECUTION_MODE");
    if (mode && tier_mode_parse(mode, &epc.mode)) return 64;
    ep_result epr;
    ep_resolve(&epc, &epr);
    if (epr.decision.refuse) return 78;
    /* the same file opened twice: one session per path, so neither warms the other's */
    /* the worker's thread setting, so its figures are the worker's (0: the usable cores) */
    const char *threads = getenv("TIERSERVE_INTRA_OP_THREADS");
    llm_model_opts mo = {.ep_cfg = &epc, .ep = &epr, .kv = LLM_KV_BOUND,
                         .intra_op_threads = threads ? atoi(threads) : 0,
                         .spinning = switch_env("TIERSERVE_INTRA_OP_SPINNING"),
                         .tune = switch_env("TIERSERVE_TUNE") != SWITCH_OFF, .tune_batch = 16};
    /* the worker's setting: fp16 stores the caches of both paths as FP16 */
    const char *kv_dtype = getenv("TIERSERVE_LLM_KV_DTYPE");
    mo.kv_fp16 = kv_dtype && strcmp(kv_dtype, "fp16") == 0;
    if (trunk_env(&mo.trunk)) return 64;
    if (mo.intra_op_threads < 0 || mo.intra_op_threads > 1024) return 64;
    llm_model *m = NULL, *mb = NULL;
    ts_err err = {0};
    if (llm_model_open(argv[1], &mo, &mb, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    if (layout_only) {
        int32_t pr[1024];
        uint64_t x = 12345;
        pr[0] = 1;
        fill(pr + 1, plen - 1, &x, llm_model_sig(mb)->vocab);
        printf("bench_llm --layout: %zu requests x %lld new tokens, prompt %zu tokens, bound KV path, %d usable "
               "core(s)\n", nreq, (long long)new_tokens, plen, tune_hw_get()->usable);
        print_layout(mb);
        run(mb, "layout, KV bound", 16, 1, nreq, new_tokens, pr, plen);
        run(mb, "layout, KV bound", 16, 16, nreq, new_tokens, pr, plen);
        llm_model_free(mb);
        ortenv_shutdown();
        return 0;
    }
    /* the host path's session: the bound one's layout, as settings (measured once) */
    mo.kv = LLM_KV_HOST;
    mo.intra_op_threads = llm_model_layout(mb)->threads;
    mo.spinning = llm_model_layout(mb)->spin ? SWITCH_ON : SWITCH_OFF;
    if (llm_model_open(argv[1], &mo, &m, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    if (mt) {
        int rc = mode_arg == 1 ? multiturn(argc - 2, argv + 2, m, mb) /* after MODELDIR */
                 : mode_arg == 2 ? itl(argc - 2, argv + 2, m, mb) : urgent(argc - 2, argv + 2, mb);
        llm_model_free(m);
        llm_model_free(mb);
        ortenv_shutdown();
        if (rc == 64) fprintf(stderr, "usage: bench_llm --multiturn MODELDIR [HISTORY [TURNS [NEW_TOKENS "
                              "[USER_TOKENS [CONVERSATIONS]]]]] (within the model's context)\n"
                              "       bench_llm --itl MODELDIR [STREAMS [LONG_PROMPT]]\n"
                              "       bench_llm --urgent MODELDIR [SLOTS [PROMPT]]\n");
        return rc;
    }
    int32_t *prompt = calloc(plen, sizeof *prompt);
    uint64_t x = 12345;
    prompt[0] = 1;
    for (size_t i = 1; i < plen; i++) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        prompt[i] = (int32_t)(3 + (x >> 33) % (llm_model_sig(m)->vocab - 3));
    }
    printf("bench_llm: %zu requests x %lld new tokens, prompt %zu tokens, tier %s, intra-op threads %d "
           "(TIERSERVE_INTRA_OP_THREADS; 0: the usable cores, %d here)\n", nreq, (long long)new_tokens, plen,
           tier_name(epr.decision.tier), mo.intra_op_threads, tune_hw_get()->usable);
    printf("host:  %s\nbound: %s\n", llm_model_kv_note(m), llm_model_kv_note(mb));
    print_layout(mb);
    run(mb, "one at a time (1 slot) bound", 1, 16, nreq, new_tokens, prompt, plen);
    static const size_t conc[] = {1, 4, 16};
    for (size_t i = 0; i < sizeof conc / sizeof *conc; i++) {
        run(m, "batching, KV host", 16, conc[i], nreq, new_tokens, prompt, plen);
        run(mb, "batching, KV bound", 16, conc[i], nreq, new_tokens, prompt, plen);
    }
    free(prompt);
    llm_model_free(m);
    llm_model_free(mb);
    ortenv_shutdown();
    return 0;
}
