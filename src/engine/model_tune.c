/* model_tune.c: a CPU model's execution layout at load (tune.h): the hardware's default,
 * then, unless settings fix every knob, a bounded measurement of candidate layouts whose
 * medians tune_choose() picks from. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "clock.h"
#include "log.h"
#include "model_internal.h"

#define TUNE_TINY_US 100.0      /* a Run() this short gains nothing from a pool: one thread */
#define TUNE_SLOW_US 200000.0   /* longer than this cannot be searched within the budget */
#define TUNE_BUDGET_US 600000.0 /* the timed rounds of one model, all candidates */

static bool on_gpu(const model_repo *r) { return r->opt.ep->decision.active != PROV_CPU; }

void model_layout_init(model_repo *r, ts_model *m)
{
    model_layout *L = &m->layout;
    memset(L, 0, sizeof *L);
    L->chosen = -1;
    const tune_hw *hw = tune_hw_get();
    int64_t t = m->cfg.intra_op_threads >= 0 ? m->cfg.intra_op_threads : r->opt.intra_op_threads;
    L->threads_set = t > 0;
    int64_t inst = 0;
    for (size_t g = 0; g < m->cfg.n_groups; g++) inst += m->cfg.groups[g].count;
    L->instances_set = m->cfg.n_groups > 0 || r->opt.instances > 0;
    L->instances = (int)(m->cfg.n_groups ? inst : r->opt.instances > 0 ? r->opt.instances : 1);
    if (L->instances < 1) L->instances = 1;
    L->spin_set = r->opt.spinning != SWITCH_AUTO;
    L->spin = r->opt.spinning != SWITCH_OFF;
    if (L->threads_set) L->threads = (int)t;
    else if (on_gpu(r)) L->threads = 0; /* the GPU does the work: ORT's default for the host part */
    else L->threads = hw->usable / L->instances > 0 ? hw->usable / L->instances : 1;
    snprintf(L->source, sizeof L->source, "%s", L->threads_set && L->instances_set && L->spin_set ? "settings"
                                                 : "hardware");
}

/* ---- measuring ------------------------------------------------------------------- */

typedef struct {
    OrtSession **sessions; /* cand.instances of them (a shared candidate's: the same one) */
    size_t n_sessions;
    bool shared;
} cand_rt;

/* The competitor of a contended round: busy for busy_us, asleep for as long, until stopped:
 * half a core, taken and given back at the pace of a Run() (busy_us is one, measured), the
 * way the HTTP loop thread and the clients take a core in the middle of a Run(). */
typedef struct {
    double busy_us;
    atomic_bool stop;
} rival;

static void *rival_loop(void *p)
{
    rival *rv = p;
    struct timespec nap = {.tv_sec = (time_t)(rv->busy_us / 1e6),
                           .tv_nsec = (long)((rv->busy_us - (double)(time_t)(rv->busy_us / 1e6) * 1e6) * 1e3)};
    while (!atomic_load_explicit(&rv->stop, memory_order_relaxed)) {
        double until = ts_now() + rv->busy_us / 1e6;
        while (ts_now() < until && !atomic_load_explicit(&rv->stop, memory_order_relaxed)) {
        }
        nanosleep(&nap, NULL);
    }
    return NULL;
}

typedef struct {
    ts_model *m;
    OrtSession *session;
    const infer_request *req;
    int runs;
    double *lat_us; /* runs of them */
    int rc;
} run_arg;

static void *run_loop(void *p)
{
    run_arg *a = p;
    infer_target t = {.session = a->session, .binding = NULL, .out_mem = ortenv_cpu_meminfo()};
    for (int k = 0; k < a->runs && a->rc == 0; k++) {
        infer_result res;
        ts_err e;
        double t0 = ts_now();
        a->rc = infer_run(&t, NULL, &a->m->sig, a->req, &res, &e);
        a->lat_us[k] = (ts_now() - t0) * 1e6;
        if (a->rc == 0) infer_result_free(&res);
    }
    return NULL;
}

/* One round of one candidate: runs Run()s on `loops` of its sessions at once, with a
 * competing thread when busy_us > 0. */
static int run_round(ts_model *m, cand_rt *rt, const infer_request *req, int runs, size_t loops, double busy_us,
                     double *lat_med, double *rps)
{
    size_t n = loops < rt->n_sessions ? loops : rt->n_sessions;
    rival rv = {.busy_us = busy_us};
    atomic_init(&rv.stop, false);
    pthread_t rth;
    bool rival_on = busy_us > 0 && pthread_create(&rth, NULL, rival_loop, &rv) == 0;

    run_arg args[TUNE_MAX_CANDS];
    pthread_t th[TUNE_MAX_CANDS];
    double *lat = calloc(n * (size_t)runs, sizeof *lat);
    if (!lat) return -1;
    size_t started = 0;
    for (size_t i = 0; i < n; i++) {
        args[i] = (run_arg){.m = m, .session = rt->sessions[i], .req = req, .runs = runs,
                            .lat_us = lat + i * (size_t)runs};
        if (i == 0) continue; /* the first runs on this thread */
        if (pthread_create(&th[i], NULL, run_loop, &args[i]) != 0) break;
        started = i;
    }
    run_loop(&args[0]);
    for (size_t i = 1; i <= started; i++) pthread_join(th[i], NULL);
    if (rival_on) {
        atomic_store(&rv.stop, true);
        pthread_join(rth, NULL);
    }
    int rc = started + 1 == n ? 0 : -1;
    for (size_t i = 0; i < n; i++) rc |= args[i].rc;
    *lat_med = tune_median(lat, n * (size_t)runs);
    /* from the median, not the wall clock: on a shared machine a few preempted runs decide
     * the wall time, and the choice must not follow them. The instances' contention for the
     * cores is in each Run()'s latency. */
    *rps = *lat_med > 0 ? (double)n * 1e6 / *lat_med : 0;
    free(lat);
    return rc;
}

static void release_rt(cand_rt *rt, size_t n, OrtSession *keep)
{
    for (size_t i = 0; i < n; i++) {
        for (size_t k = 0; k < (rt[i].shared ? 1 : rt[i].n_sessions); k++)
            if (rt[i].sessions[k] && rt[i].sessions[k] != keep) g_ort->ReleaseSession(rt[i].sessions[k]);
        free(rt[i].sessions);
    }
}

typedef struct {
    ts_model *m;
    cand_rt *rt;
    const infer_request *req;
    double probe_us;
} measure_ctx;

/* A round: after an untimed Run() per session, the candidate's instances at once, alone on
 * the machine (latency, Run()s/s), then with the competitor (contended Run()s/s), busy for
 * that median Run() and asleep as long; a shared candidate's latency from one runner alone,
 * what a lone request gets. */
static int measure_round(void *ctx, size_t cand, int runs, tune_fig *fig)
{
    measure_ctx *mc = ctx;
    cand_rt *rt = &mc->rt[cand];
    int h = runs > 1 ? runs / 2 : 1;
    double lat, ignored;
    /* untimed: one Run() on each of its sessions first. The candidate before this one ran
     * other sessions: their weights evicted this one's from the cache and a spinning pool of
     * theirs may still hold a core; a served model's session has run alone (tune_order).
     * Only where the parts have several runs each (at most a twelfth more time): a slow
     * model's round is a run or two per part, and its Run() dwarfs a pool's spinning tail */
    int rc = h >= 4 ? run_round(mc->m, rt, mc->req, 1, rt->n_sessions, 0, &lat, &ignored) : 0;
    if (rc == 0) rc = run_round(mc->m, rt, mc->req, h, rt->n_sessions, 0, &lat, &fig->rps);
    fig->run_us = lat;
    if (rc == 0 && rt->shared) rc = run_round(mc->m, rt, mc->req, h, 1, 0, &fig->run_us, &ignored);
    /* the competitor's pace: this candidate's own Run() of this round (the probe before the
     * search is three Run()s, too few on a busy machine); busy as long as a Run(), it lands in
     * most of them, so a pool's stall shows in the median */
    double pace = lat > 0 ? lat : mc->probe_us;
    if (rc == 0) rc = run_round(mc->m, rt, mc->req, h, rt->n_sessions, pace, &lat, &fig->crps);
    return rc;
}

/* Creates every candidate's sessions (cands[0]'s first is m->session), runs the interleaved
 * rounds and fills each candidate's medians. -1 with err when a candidate failed. */
static int measure(model_repo *r, ts_model *m, const infer_request *req, double probe_us, tune_cand *c,
                   size_t n, char *err, size_t errlen)
{
    cand_rt rt[TUNE_MAX_CANDS] = {{0}};
    model_layout saved = m->layout;
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        rt[i].sessions = calloc((size_t)c[i].instances, sizeof *rt[i].sessions);
        if (!rt[i].sessions) {
            rc = -1;
            break;
        }
        m->layout.threads = c[i].threads;
        m->layout.spin = c[i].spin;
        rt[i].shared = c[i].shared;
        for (int k = 0; k < c[i].instances && rc == 0; k++) {
            if (i == 0 && k == 0) rt[i].sessions[k] = m->session;
            else if (c[i].shared && k > 0) rt[i].sessions[k] = rt[i].sessions[0];
            else rc = model_create_session(r, m, NULL, -1, &rt[i].sessions[k], err, errlen);
            rt[i].n_sessions = (size_t)k + 1;
        }
    }
    m->layout = saved;
    measure_ctx mc = {.m = m, .rt = rt, .req = req, .probe_us = probe_us};
    if (rc == 0) rc = tune_search(c, n, probe_us, TUNE_BUDGET_US, measure_round, &mc);
    if (rc && !err[0]) snprintf(err, errlen, "a measurement Run() failed");
    release_rt(rt, n, m->session);
    return rc;
}

static void log_layout(const ts_model *m) { tune_log_layout(&m->layout, m->name, m->version); }

int model_tune(model_repo *r, ts_model *m, char *err, size_t errlen)
{
    model_layout *L = &m->layout;
    const tune_hw *hw = tune_hw_get();
    char set[64] = "";
    size_t so = 0;
    if (L->threads_set) so += (size_t)snprintf(set + so, sizeof set - so, " intra-op threads");
    if (L->instances_set && so < sizeof set) so += (size_t)snprintf(set + so, sizeof set - so, " instances");
    if (L->spin_set && so < sizeof set) snprintf(set + so, sizeof set - so, " spinning");
    const char *fixed = set[0] ? set : " nothing";
    if (on_gpu(r)) {
        snprintf(L->note, sizeof L->note, "GPU tier: not searched; set:%s", fixed);
        log_layout(m);
        return 0;
    }
    if (L->instances > 4) { /* each candidate would hold that many sessions */
        snprintf(L->note, sizeof L->note, "%d instances set: not searched; set:%s", L->instances, fixed);
        log_layout(m);
        return 0;
    }
    if (!r->opt.tune || !r->opt.warmup || (L->threads_set && L->instances_set && L->spin_set)) {
        /* no warm-up asked for: no runs at load at all */
        snprintf(L->note, sizeof L->note, "%s; %d usable core(s) of %d (%d CPUs, quota %.2g); set:%s",
                 !r->opt.tune ? "TIERSERVE_TUNE=off" : !r->opt.warmup ? "TIERSERVE_WARMUP=0: not searched"
                 : "every knob set", hw->usable, hw->cores, hw->pus,
                 hw->quota, fixed);
        log_layout(m);
        return 0;
    }
    infer_request req;
    ts_err e;
    if (model_probe_request(m, &req, &e)) {
        snprintf(L->note, sizeof L->note, "not searched: the warm-up request cannot be built (%.200s)", e.msg);
        log_layout(m);
        return 0;
    }
    double t0 = ts_now(), probe[3] = {0};
    infer_target t = {.session = m->session, .binding = NULL, .out_mem = ortenv_cpu_meminfo()};
    int rc = 0;
    for (int k = 0; k < 4 && rc == 0; k++) { /* the first allocates: not counted */
        infer_result res;
        double s = ts_now();
        rc = infer_run(&t, NULL, &m->sig, &req, &res, &e);
        if (rc == 0) infer_result_free(&res);
        if (k) probe[k - 1] = (ts_now() - s) * 1e6;
    }
    double probe_us = tune_median(probe, 3);
    struct stat st;
    double bytes = stat(m->path, &st) == 0 ? (double)st.st_size : 0;
    err[0] = '\0';
    int ret = 0;
    if (rc) {
        snprintf(L->note, sizeof L->note, "not searched: the warm-up request failed");
    } else if (probe_us < TUNE_TINY_US && !L->threads_set) {
        /* a pool's hand-offs cost more than such a Run() could gain */
        snprintf(L->note, sizeof L->note, "Run() %.0f us at %d thread(s), under %.0f us: one thread, not searched",
                 probe_us, L->threads, TUNE_TINY_US);
        if (L->threads != 1) {
            L->threads = 1;
            OrtSession *s = NULL;
            ret = model_create_session(r, m, NULL, -1, &s, err, errlen);
            if (ret == 0) {
                g_ort->ReleaseSession(m->session);
                m->session = s;
            }
        }
    } else if (probe_us > TUNE_SLOW_US) {
        snprintf(L->note, sizeof L->note, "Run() %.0f ms: too slow to search within the budget", probe_us / 1e3);
    } else {
        L->n_cands = tune_plan(L, hw->usable, bytes, r->opt.place_instances, L->cands);
        char why[300] = "";
        if (measure(r, m, &req, probe_us, L->cands, L->n_cands, why, sizeof why)) {
            snprintf(L->note, sizeof L->note, "measurement failed (%.200s): hardware layout", why);
            L->n_cands = 0;
        } else {
            L->chosen = tune_choose(L->cands, L->n_cands, TUNE_LATENCY_SLACK, TUNE_TOLERANCE);
        }
        if (L->chosen >= 0) {
            const tune_cand *c = &L->cands[L->chosen];
            bool same = c->threads == L->threads && c->spin == L->spin;
            L->threads = c->threads;
            L->spin = c->spin;
            L->instances = c->instances;
            L->shared = c->shared;
            snprintf(L->source, sizeof L->source, "measured");
            snprintf(L->note, sizeof L->note, "%zu candidate(s), %d usable core(s) of %d (%d CPUs, quota %.2g); "
                     "rule: the most Run()s/s (with a competing thread busy and asleep for a Run() in turn) within "
                     "%.0f %% of the best single-instance latency, the simplest within %.0f %%; set:%s", L->n_cands, hw->usable, hw->cores, hw->pus,
                     hw->quota, TUNE_LATENCY_SLACK * 100, TUNE_TOLERANCE * 100, fixed);
            if (!same) {
                OrtSession *s = NULL;
                ret = model_create_session(r, m, NULL, -1, &s, err, errlen);
                if (ret == 0) {
                    g_ort->ReleaseSession(m->session);
                    m->session = s;
                }
            }
            if (ret == 0 && (size_t)c->instances != m->n_inst) {
                free(m->inst);
                m->inst = NULL;
                if (model_plan_instances(r, m)) ret = ts_fail(err, errlen, "out of memory planning instances");
            }
        }
    }
    L->search_ms = (ts_now() - t0) * 1e3;
    infer_request_free(&req);
    log_layout(m);
    return ret;
}

const model_layout *model_layout_of(const ts_model *m) { return &m->layout; }
