/* drilldayrep: the state of one `tierbench drill day` (drillday.c runs it) and its verdict:
 * the live run's figures from the load's records and the drill's replica curve, the
 * comparison with the simulator's run on the same arrivals, and the reports (text, JSON).
 * Private to the two files of the drill.
 */
#ifndef TS_DRILLDAYREP_H
#define TS_DRILLDAYREP_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/types.h>

#include "drillcmp.h"
#include "load.h"
#include "scaler.h"
#include "sim.h"
#include "simcfg.h"

#define DD_MAX_SLOTS 16
#define DD_MAX_CURVE 4096
#define DD_MAX_SYNCS 4096
#define DD_CMD_MAX 1024

typedef enum { DD_ABSENT = 0, DD_STARTING, DD_READY, DD_DRAINING } dd_life;

typedef struct {
    char port[8];
    char cmd[DD_CMD_MAX];
    pid_t pid; /* -1: none */
    dd_life life;
    double started; /* seconds from t0 */
} dd_slot;

typedef struct {
    double t;
    unsigned present; /* starting + ready + draining: paid */
} dd_point;

typedef struct {
    double t;
    long desired; /* the router's gauge */
    unsigned current, next;
} dd_sync;

typedef struct dd {
    /* options */
    const char *url, *json, *sim_path, *pool;
    char host[256], port[8];
    simcfg cfg;
    size_t pool_i;
    bool keep_cold;
    double time_scale, start_timeout_s, served_pts, p95_pct, p95_floor_ms, replicas_n, cost_pct;
    /* the scaler the drill runs (the pool's, time-scaled) */
    scaler_config scaler;
    scaler *sc;
    dd_slot slot[DD_MAX_SLOTS];
    size_t n_slots;
    /* the run: the control thread's until it is joined */
    double t0, end_t;
    pthread_t th;
    bool th_started;
    atomic_bool stop;
    dd_point curve[DD_MAX_CURVE];
    size_t n_curve;
    bool curve_truncated;
    dd_sync syncs[DD_MAX_SYNCS];
    size_t n_syncs;
    double cold[DD_MAX_SLOTS * 8];
    size_t n_cold;
    double initial_cold_s, sim_cold_s;
    size_t starts, stops, died, poll_errors;
    char fail[300];
    /* the live outcome */
    bool done;
    size_t n;
    size_t live_arrivals[PRIO_COUNT + 1], live_served[PRIO_COUNT + 1];
    double live_p95[PRIO_COUNT + 1];
    /* the simulator's */
    char sim_err[600];
    sim_result sim;
    bool sim_ok;
    /* the verdict */
    dc_table cmp; /* the comparison (drillcmp.h) */
} dd;

/* The live figures from the load's records (served and P95 per priority). */
void ddrep_live(dd *d, const load_result *res);
/* Fills d->cmp and its verdict. */
void ddrep_compare(dd *d);
void ddrep_text(const dd *d, FILE *out);
/* Writes d->json; 0, or -1 (said on stderr). */
int ddrep_json(const dd *d);

#endif
