/* bench_llm: the generation engine in-process on one model: time to first token, inter-token
 * latency (p50/p95) and aggregate tokens/s with 1, 4 and 16 sequences in flight (closed loop:
 * a finished sequence is replaced at once), against one sequence at a time (an engine with
 * one slot, fed the same requests back to back). Each concurrency runs on both KV cache paths
 * in the same process, one after the other: TIERSERVE_LLM_KV=host (every sequence's cache
 * gathered into the batch and scattered back every step) and bound (the batch's presents
 * fed back as pasts while the batch is unchanged).
 *
 *   bench_llm MODELDIR [REQUESTS [NEW_TOKENS [PROMPT_TOKENS]]]   (defaults 48 64 32)
 *
 * Greedy, ignore_eos (every request generates exactly NEW_TOKENS), CPU tier unless
 * EXECUTION_MODE says otherwise. Prints one line per configuration. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "ep.h"
#include "llm_engine.h"
#include "llm_model.h"
#include "ortenv.h"

#define MAX_REQ 4096

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
static void run(llm_model *m, const char *label, size_t slots, size_t conc, size_t nreq, int64_t new_tokens,
                const int32_t *prompt, size_t plen)
{
    llm_engine_opts o = {.max_active = slots, .max_waiting = MAX_REQ, .prefill_chunk = 64};
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
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: bench_llm MODELDIR [REQUESTS [NEW_TOKENS [PROMPT_TOKENS]]]\n");
        return 64;
    }
    size_t nreq = argc > 2 ? (size_t)atol(argv[2]) : 48;
    int64_t new_tokens = argc > 3 ? atoll(argv[3]) : 64;
    size_t plen = argc > 4 ? (size_t)atol(argv[4]) : 32;
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
    llm_model_opts mo = {.ep_cfg = &epc, .ep = &epr, .kv = LLM_KV_HOST};
    llm_model *m = NULL, *mb = NULL;
    ts_err err = {0};
    if (llm_model_open(argv[1], &mo, &m, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    mo.kv = LLM_KV_BOUND;
    if (llm_model_open(argv[1], &mo, &mb, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    int32_t *prompt = calloc(plen, sizeof *prompt);
    uint64_t x = 12345;
    prompt[0] = 1;
    for (size_t i = 1; i < plen; i++) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        prompt[i] = (int32_t)(3 + (x >> 33) % (llm_model_sig(m)->vocab - 3));
    }
    printf("bench_llm: %zu requests x %lld new tokens, prompt %zu tokens, tier %s\n", nreq,
           (long long)new_tokens, plen, tier_name(epr.decision.tier));
    printf("host:  %s\nbound: %s\n", llm_model_kv_note(m), llm_model_kv_note(mb));
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
