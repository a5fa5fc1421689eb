/* llm_tune.c: an LLM session's layout at open (llm_tune.h). Decode is latency-bound with one
 * stream and throughput-bound with many, so each candidate (intra-op threads 1, 2, 4, ...,
 * the usable cores; spinning off at the most) is timed on two decode steps: one sequence,
 * and the engine's slots in one batch, at a past of LLM_TUNE_PAST tokens. tune_search runs
 * the interleaved rounds; tune_choose with the LLM's slack and tolerance picks (tune.h).
 * Inter-op threads are not searched: the session runs its graph sequentially (ORT's
 * default execution mode), where the inter-op pool does nothing.
 *
 * The steps are plain Run()s on CPU tensors (zeros for the pasts, ones for the mask), not the
 * engine's KV path: what the thread count changes is the kernels' time, the same whichever
 * way the cache travels. */
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "clock.h"
#include "llm_tune.h"
#include "log.h"

#define LLM_TUNE_BUDGET_US 1000000.0 /* the timed rounds of one model, all candidates */
#define LLM_TUNE_MIN_ROUNDS 1         /* a probe (both steps) so slow that not one round of every
                                        candidate fits 1.5 times the budget: not searched (a busy
                                        machine slows the probe too, and it is where the hardware
                                        layout is furthest off: its search may take a few seconds) */
#define LLM_TUNE_PAST 128            /* past tokens of the timed steps (at most half the context) */
#define LLM_TUNE_MAX_BATCH 64
#define LLM_TUNE_INPUT_BYTES ((size_t)256 << 20) /* the batch's pasts: the batch shrinks to fit */
#define LLM_TUNE_SESSION_BYTES (1024.0 * 1024 * 1024) /* candidate sessions' weights at once */

void llm_layout_init(model_layout *L, const llm_model_opts *opt)
{
    memset(L, 0, sizeof *L);
    L->chosen = -1;
    L->instances = 1; /* one generation thread runs the session: not a knob */
    L->threads_set = opt->intra_op_threads > 0;
    L->spin_set = opt->spinning != SWITCH_AUTO;
    L->spin = opt->spinning != SWITCH_OFF;
    bool gpu = opt->ep->decision.active != PROV_CPU;
    L->threads = L->threads_set ? opt->intra_op_threads : gpu ? 0 : tune_hw_get()->usable;
    snprintf(L->source, sizeof L->source, "%s", L->threads_set && L->spin_set ? "settings" : "hardware");
}

/* The step inputs, for batch 1 and batch B over the same buffers (row 0 of the batch is the
 * batch-1 step's input). */
typedef struct {
    const llm_model *m;
    OrtSession **sessions; /* one per candidate */
    void *block;
    OrtValue *in[2][2 + 1 + 2 * LLM_MAX_LAYERS];
    size_t batch[2];
    double *lat[2];        /* LLM_TUNE_MAX_RUNS timings each */
    int cap;
} tune_io;

static int make_inputs(tune_io *io, const llm_model *m, size_t B, size_t P, char *msg, size_t len)
{
    const llm_sig *s = &m->sig;
    size_t row = s->kv_heads * P * s->head_dim * m->io_elem, past_bytes = B * row;
    size_t total = P + 1, n_mask = B * total;
    size_t bytes = (2 * B + n_mask) * sizeof(int64_t) + 2 * s->layers * past_bytes;
    io->block = calloc(1, bytes);
    if (!io->block) return ts_fail(msg, len, "out of memory for the layout's step inputs (%zu bytes)", bytes);
    int64_t *ids = io->block, *pos = ids + B, *mask = pos + B;
    uint8_t *pasts = (uint8_t *)(mask + n_mask);
    for (size_t i = 0; i < B; i++) ids[i] = 1, pos[i] = (int64_t)P;
    for (size_t i = 0; i < n_mask; i++) mask[i] = 1;
    ONNXTensorElementDataType kv_t = s->kv_fp16 ? ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16
                                                : ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT;
    const OrtMemoryInfo *mi = ortenv_cpu_meminfo();
    io->batch[0] = 1;
    io->batch[1] = B;
    for (int b = 0; b < 2; b++) {
        int64_t n = (int64_t)io->batch[b];
        int64_t ids_shape[2] = {n, 1}, mask_shape[2] = {n, (int64_t)total};
        int64_t kv_shape[4] = {n, (int64_t)s->kv_heads, (int64_t)P, (int64_t)s->head_dim};
        size_t k = 0, nb = (size_t)n;
        OrtStatus *st = g_ort->CreateTensorWithDataAsOrtValue(mi, ids, nb * sizeof *ids, ids_shape, 2,
                                                              ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64, &io->in[b][k++]);
        if (!st) st = g_ort->CreateTensorWithDataAsOrtValue(mi, mask, nb * total * sizeof *mask, mask_shape, 2,
                                                            ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64, &io->in[b][k++]);
        if (!st && s->position_ids)
            st = g_ort->CreateTensorWithDataAsOrtValue(mi, pos, nb * sizeof *pos, ids_shape, 2,
                                                       ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64, &io->in[b][k++]);
        for (size_t t = 0; !st && t < 2 * s->layers; t++)
            st = g_ort->CreateTensorWithDataAsOrtValue(mi, pasts + t * past_bytes, nb * row, kv_shape, 4, kv_t,
                                                       &io->in[b][k++]);
        if (ort_check(st, msg, len)) return -1;
    }
    return 0;
}

static void free_inputs(tune_io *io)
{
    for (int b = 0; b < 2; b++)
        for (size_t k = 0; k < sizeof io->in[b] / sizeof *io->in[b]; k++)
            if (io->in[b][k]) g_ort->ReleaseValue(io->in[b][k]);
    free(io->block);
    free(io->lat[0]);
    free(io->lat[1]);
}

/* One decode step of batch b (0: one sequence, 1: the slots) on session s; its time in us. */
static int step(tune_io *io, OrtSession *s, int b, double *us)
{
    const llm_model *m = io->m;
    OrtValue *out[1 + 2 * LLM_MAX_LAYERS] = {0};
    double t0 = ts_now();
    OrtStatus *st = g_ort->Run(s, NULL, m->in_names, (const OrtValue *const *)io->in[b], m->n_in, m->out_names,
                               m->n_out, out);
    *us = (ts_now() - t0) * 1e6;
    for (size_t o = 0; o < m->n_out; o++)
        if (out[o]) g_ort->ReleaseValue(out[o]);
    return ort_check(st, NULL, 0);
}

static int round_fn(void *ctx, size_t cand, int runs, tune_fig *fig)
{
    tune_io *io = ctx;
    if (runs > io->cap) runs = io->cap;
    for (int k = 0; k < runs; k++)
        for (int b = 0; b < 2; b++)
            if (step(io, io->sessions[cand], b, &io->lat[b][k])) return -1;
    fig->run_us = tune_median(io->lat[0], (size_t)runs);
    fig->batch_us = tune_median(io->lat[1], (size_t)runs);
    fig->rps = fig->batch_us > 0 ? (double)io->batch[1] * 1e6 / fig->batch_us : 0;
    return 0;
}

static void log_layout(const model_layout *L, const char *dir)
{
    char d1[1200], d2[1200];
    snprintf(d1, sizeof d1, "%s", dir);
    snprintf(d2, sizeof d2, "%s", dir);
    const char *version = basename(d1), *name = basename(dirname(d2));
    tune_log_layout(L, name, version);
}

int llm_tune(llm_model *m, const char *dir, const char *path, const llm_model_opts *opt, char *msg, size_t len)
{
    model_layout *L = &m->layout;
    const tune_hw *hw = tune_hw_get();
    char set[64] = "";
    size_t so = 0;
    if (L->threads_set) so += (size_t)snprintf(set, sizeof set, " intra-op threads");
    if (L->spin_set && so < sizeof set) snprintf(set + so, sizeof set - so, " spinning");
    const char *fixed = set[0] ? set : " nothing";
    struct stat st;
    double bytes = stat(path, &st) == 0 ? (double)st.st_size : 0;
    size_t ncand = tune_plan(L, hw->usable, bytes, false, L->cands);
    /* the throughput figure's batch: the engine's slots, fewer when the model cannot batch
     * (no position_ids: one sequence a step) or the pasts would not fit the inputs' budget */
    size_t P = m->max_context / 2 < LLM_TUNE_PAST ? (size_t)(m->max_context / 2) : LLM_TUNE_PAST;
    size_t B = opt->tune_batch ? opt->tune_batch : 16, tok = llm_model_kv_bytes_per_token(m);
    if (B > LLM_TUNE_MAX_BATCH) B = LLM_TUNE_MAX_BATCH;
    if (!m->sig.position_ids) B = 1;
    while (B > 1 && B * P * tok > LLM_TUNE_INPUT_BYTES) B /= 2;
    const char *skip = NULL;
    char why[160] = "";
    if (m->gpu) skip = "GPU tier: not searched";
    else if (!opt->tune) skip = "TIERSERVE_TUNE=off";
    else if (opt->no_warmup) skip = "TIERSERVE_WARMUP=0: not searched";
    else if (L->threads_set && L->spin_set) skip = "every knob set";
    else if (ncand < 2) skip = "one layout to measure: not searched";
    else if (P < 1) skip = "a context under 2 tokens: not searched";
    else if (bytes * (double)ncand > LLM_TUNE_SESSION_BYTES) {
        snprintf(why, sizeof why, "%.0f MB of weights x %zu candidate sessions is over %.0f MB: not searched",
                 bytes / 1e6, ncand, LLM_TUNE_SESSION_BYTES / 1e6);
        skip = why;
    }
    if (skip) {
        snprintf(L->note, sizeof L->note, "%s; %d usable core(s) of %d (%d CPUs, quota %.2g); set:%s", skip,
                 hw->usable, hw->cores, hw->pus, hw->quota, fixed);
        log_layout(L, dir);
        return 0;
    }
    double t0 = ts_now();
    tune_io io = {.m = m, .cap = 400};
    OrtSession *sessions[TUNE_MAX_CANDS] = {0};
    io.sessions = sessions;
    io.lat[0] = calloc((size_t)io.cap, sizeof(double));
    io.lat[1] = calloc((size_t)io.cap, sizeof(double));
    int rc = !io.lat[0] || !io.lat[1] ? ts_fail(why, sizeof why, "out of memory") : 0;
    if (!rc) rc = make_inputs(&io, m, B, P, why, sizeof why);
    /* the sessions, then the probe: both steps once on each (its first Run allocates: not
     * counted), the fastest candidate's time sizing the rounds. Not the first session's
     * alone: on a busy machine spinning threads can make it several times the others' */
    sessions[0] = m->session;
    int ret = 0;
    for (size_t i = 1; i < ncand && !rc; i++) /* cands[0] is the first session's layout */
        if ((rc = llm_session_new(path, opt, L->cands[i].threads, L->cands[i].spin, &sessions[i], msg, len)))
            ret = -1; /* a session the worker's own settings make could not be made */
    double probe = 0, us = 0;
    for (size_t i = 0; i < ncand && !rc; i++)
        for (int k = 0; k < 2 && !rc; k++) {
            double t = 0;
            for (int b = 0; b < 2 && !rc; b++) {
                rc = step(&io, sessions[i], b, &us);
                t += us;
            }
            if (k && (probe == 0 || t < probe)) probe = t;
        }
    if (rc && !ret && !why[0]) snprintf(why, sizeof why, "a decode step failed");
    if (!rc && probe * (double)ncand * LLM_TUNE_MIN_ROUNDS > 1.5 * LLM_TUNE_BUDGET_US) {
        snprintf(L->note, sizeof L->note, "decode steps at batch 1 and %zu took %.0f ms: too slow for %d rounds "
                 "of %zu candidates within %.1f s; %d usable core(s); set:%s", B, probe / 1e3, LLM_TUNE_MIN_ROUNDS,
                 ncand, 1.5 * LLM_TUNE_BUDGET_US / 1e6, hw->usable, fixed);
    } else if (!rc) {
        L->n_cands = ncand;
        for (size_t i = 0; i < ncand; i++) L->cands[i].batch = (int)B;
        if (tune_search(L->cands, ncand, probe, LLM_TUNE_BUDGET_US, round_fn, &io)) {
            snprintf(why, sizeof why, "a decode step failed");
            rc = -1;
        } else {
            /* tokens/s from the median step over rounds (a median of rounds' ratios is another figure) */
            for (size_t i = 0; i < ncand; i++)
                L->cands[i].rps = L->cands[i].batch_us > 0 ? (double)B * 1e6 / L->cands[i].batch_us : 0;
            L->chosen = tune_choose(L->cands, ncand, TUNE_LLM_LATENCY_SLACK, TUNE_LLM_TOLERANCE);
        }
        if (L->chosen >= 0) {
            const tune_cand *c = &L->cands[L->chosen];
            L->threads = c->threads;
            L->spin = c->spin;
            m->session = sessions[L->chosen];
            snprintf(L->source, sizeof L->source, "measured");
            snprintf(L->note, sizeof L->note, "%zu candidate(s), decode steps at a past of %zu tokens; %d usable "
                     "core(s) of %d (%d CPUs, quota %.2g); rule: the most tokens/s at batch %zu within %.0f %% of "
                     "the fastest batch-1 step, the simplest within %.0f %%; inter-op: sequential graph; set:%s",
                     ncand, P, hw->usable, hw->cores, hw->pus, hw->quota, B, TUNE_LLM_LATENCY_SLACK * 100,
                     TUNE_LLM_TOLERANCE * 100, fixed);
        } else {
            L->n_cands = 0;
        }
    }
    if (rc && !ret)
        snprintf(L->note, sizeof L->note, "measurement failed (%.200s): hardware layout; set:%s", why, fixed);
    for (size_t i = 0; i < TUNE_MAX_CANDS; i++)
        if (sessions[i] && sessions[i] != m->session) g_ort->ReleaseSession(sessions[i]);
    free_inputs(&io);
    L->search_ms = (ts_now() - t0) * 1e3;
    if (!ret) log_layout(L, dir);
    return ret;
}
