#include "drillday.h"
#include "err.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "drill.h"
#include "drilldayrep.h"
#include "load.h"
#include "loadbody.h"
#include "opts.h"
#include "scaler.h"
#include "sim.h"
#include "simcfg.h"

#define EXIT_USAGE 64
#define EXIT_GOAL 2
#define DD_MAX_ARGS 256
#define DD_POLL_S 0.05 /* reaping exited workers */
#define DD_LOOK_S 0.2  /* a starting worker's health between syncs */
#define DD_STATUS_MAX (4u << 20)

static void usage(FILE *out)
{
    fprintf(out,
            "usage: tierbench drill day --url http://ROUTER --sim-config FILE --pool NAME\n"
            "                           --worker PORT=CMD [--worker ...] (--trace FILE | load options)\n\n"
            "A day compressed to minutes through the router, the --pool's workers started and stopped as\n"
            "an autoscaler on the router's desired-backends gauge would (the pool's scaler settings from\n"
            "--sim-config, scale_metric=desired), then the same arrivals through the simulator; compared.\n"
            "  --sim-config FILE     tierbench sim options, one per line: the modelled stack; the --pool's\n"
            "                        line needs max= (its slots), scale_metric=desired and its scaler\n"
            "  --pool NAME           the pool to scale; the router must list every --worker port in it\n"
            "  --worker PORT=CMD     one backend slot: the port the router lists, and the shell command that\n"
            "                        starts a worker on it (exec it: SIGTERM goes to the command's pid);\n"
            "                        as many as the pool's max; the first `backends` start before the load\n"
            "  --time-scale F        multiply the pool's scaler times (sync_s, windows, policy periods) by F\n"
            "                        on both sides (default 1): a day compressed 2400x takes 1/2400\n"
            "  --keep-cold-start     keep the sim's cold start for the pool (default: the mean time the\n"
            "                        initial workers took from start to healthy on the router, measured now)\n"
            "  --start-timeout S     seconds a worker may take to become healthy (default 30)\n"
            "  --served-agree PTS    served share per priority within PTS points (default 5)\n"
            "  --p95-agree PCT       P95 per priority within PCT %% (default 50) or --p95-floor-ms (10)\n"
            "  --replicas-agree N    peak replicas within N, mean and mean distance within N/2 (default 1)\n"
            "  --cost-agree PCT      the pool's cost within PCT %% (default 25)\n"
            "  --json FILE           the comparison and both replica curves as JSON (FILE - : stdout)\n"
            "load options: as tierbench load (--trace, --rate, --surge, --duration, --connections, --timeout, ...)\n"
            "exit: 0 the simulator agrees, 2 it does not, 1 the drill could not run, 64 bad arguments\n");
}

/* ---- helpers ----------------------------------------------------------------------- */

static double rel(const dd *d) { return ts_now() - d->t0; }

static void nap(double s)
{
    if (s <= 0) return;
    struct timespec ts = {.tv_sec = (time_t)s, .tv_nsec = (long)((s - floor(s)) * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static bool ends_with_port(const char *addr, const char *port)
{
    size_t al = strlen(addr), pl = strlen(port);
    return pl + 1 < al && addr[al - pl - 1] == ':' && !strcmp(addr + al - pl, port);
}

/* One read of /admin/status: the pool's gauge and healthy count, each slot's health and in
 * flight. -1: no status, or no such pool. */
typedef struct {
    long desired, healthy;
    bool slot_healthy[DD_MAX_SLOTS];
    long slot_in_flight[DD_MAX_SLOTS];
} dd_seen;

static int poll_status(dd *d, dd_seen *out)
{
    lb_reply rep;
    char err[300];
    int rc = -1;
    json_t *root = NULL;
    memset(out, 0, sizeof *out);
    if (lb_http(d->host, d->port, "GET", "/admin/status", NULL, NULL, 0, DD_STATUS_MAX, 2.0, &rep, err, sizeof err) != 0) {
        d->poll_errors++;
        return -1;
    }
    if (rep.status != 200 || !(root = json_loadb(rep.body, rep.len, 0, NULL))) goto out;
    json_t *p, *b;
    size_t i, k;
    json_array_foreach(json_object_get(root, "pools"), i, p) {
        const char *name = json_string_value(json_object_get(p, "name"));
        if (!name || strcmp(name, d->pool) != 0) continue;
        out->desired = (long)json_integer_value(json_object_get(p, "desired_backends"));
        out->healthy = (long)json_integer_value(json_object_get(p, "healthy"));
        json_array_foreach(json_object_get(p, "backends"), k, b) {
            const char *a = json_string_value(json_object_get(b, "address"));
            for (size_t s = 0; a && s < d->n_slots; s++) {
                if (!ends_with_port(a, d->slot[s].port)) continue;
                out->slot_healthy[s] = json_is_true(json_object_get(b, "healthy"));
                out->slot_in_flight[s] = (long)json_integer_value(json_object_get(b, "in_flight"));
            }
        }
        rc = 0;
        break;
    }
out:
    if (rc != 0) d->poll_errors++;
    json_decref(root);
    lb_reply_free(&rep);
    return rc;
}

/* ---- the pool's slots -------------------------------------------------------------- */

static unsigned count(const dd *d, bool starting, bool ready, bool draining)
{
    unsigned n = 0;
    for (size_t s = 0; s < d->n_slots; s++) {
        dd_life l = d->slot[s].life;
        n += (starting && l == DD_STARTING) || (ready && l == DD_READY) || (draining && l == DD_DRAINING);
    }
    return n;
}

/* A point of the live replica curve: present = paid (starting, ready or draining). */
static void mark(dd *d, double t)
{
    unsigned present = count(d, true, true, true);
    if (d->n_curve && d->curve[d->n_curve - 1].present == present) return;
    if (d->n_curve == DD_MAX_CURVE) {
        d->curve_truncated = true;
        return;
    }
    d->curve[d->n_curve++] = (dd_point){.t = t, .present = present};
}

static int start_slot(dd *d, size_t s, double t)
{
    dd_slot *w = &d->slot[s];
    w->pid = drill_spawn(w->cmd);
    if (w->pid < 0) {
        snprintf(d->fail, sizeof d->fail, "worker on port %s: fork: %s", w->port, strerror(errno));
        return -1;
    }
    w->life = DD_STARTING;
    w->started = t;
    d->starts++;
    mark(d, t);
    return 0;
}

static void stop_slot(dd *d, size_t s, double t)
{
    dd_slot *w = &d->slot[s];
    if (w->pid > 0) kill(w->pid, SIGTERM);
    w->life = DD_DRAINING;
    d->stops++;
    mark(d, t);
}

/* Reaps the workers that exited: a slot is free again once its process is gone (the port
 * too). A worker that exits while it was starting or ready is counted as lost. */
static void reap(dd *d, double t)
{
    for (size_t s = 0; s < d->n_slots; s++) {
        dd_slot *w = &d->slot[s];
        int st;
        if (w->life == DD_ABSENT || w->pid <= 0 || waitpid(w->pid, &st, WNOHANG) != w->pid) continue;
        if (w->life != DD_DRAINING) d->died++;
        w->life = DD_ABSENT;
        w->pid = -1;
        mark(d, t);
    }
}

static void seen_health(dd *d, const dd_seen *v, double t)
{
    for (size_t s = 0; s < d->n_slots; s++) {
        dd_slot *w = &d->slot[s];
        if (w->life != DD_STARTING || !v->slot_healthy[s]) continue;
        w->life = DD_READY;
        if (d->n_cold < DD_MAX_SLOTS * 8) d->cold[d->n_cold++] = t - w->started;
    }
}

/* One sync of the scaler, as KEDA's HPA on the gauge reads it: current = the Deployment's
 * replicas (starting or ready), metric = gauge / current x target (an AverageValue of the
 * target: the HPA's desired is then the gauge). The sim's on_scale does the same. */
static void sync_once(dd *d, double t)
{
    dd_seen v;
    if (poll_status(d, &v) != 0) return; /* a missed read: the HPA skips the sync too */
    seen_health(d, &v, t);
    unsigned current = count(d, true, true, false);
    double target = d->scaler.target;
    double metric = (current ? (double)v.desired / current : (double)v.desired) * target;
    unsigned next = scaler_step(d->sc, t, current, metric);
    if (d->n_syncs < DD_MAX_SYNCS)
        d->syncs[d->n_syncs++] = (dd_sync){.t = t, .desired = v.desired, .current = current, .next = next};
    for (size_t s = 0; s < d->n_slots && next > current; s++) {
        if (d->slot[s].life != DD_ABSENT) continue;
        if (start_slot(d, s, t) != 0) return;
        current++;
    }
    while (next < current) {
        long pick = -1;
        for (size_t s = 0; s < d->n_slots; s++) {
            const dd_slot *w = &d->slot[s];
            if (w->life == DD_STARTING) {
                pick = (long)s;
                break;
            }
            if (w->life == DD_READY && (pick < 0 || v.slot_in_flight[s] < v.slot_in_flight[pick])) pick = (long)s;
        }
        if (pick < 0) break;
        stop_slot(d, (size_t)pick, t);
        current--;
    }
}

static void *control(void *arg)
{
    dd *d = arg;
    double next_sync = d->scaler.sync_s, next_look = 0;
    while (!atomic_load(&d->stop)) {
        double t = rel(d);
        reap(d, t);
        if (t >= next_sync) {
            sync_once(d, t);
            if (d->fail[0]) return NULL;
            next_sync += d->scaler.sync_s;
        } else if (t >= next_look && count(d, true, false, false)) {
            dd_seen v; /* a starting worker: watch for its health between syncs (its cold start) */
            if (poll_status(d, &v) == 0) seen_health(d, &v, rel(d));
            next_look = t + DD_LOOK_S;
        }
        nap(DD_POLL_S);
    }
    return NULL;
}

/* The initial workers: started, then waited for until the router sees every one healthy. */
static int start_initial(dd *d, unsigned n, char *err, size_t errlen)
{
    d->t0 = ts_now();
    for (size_t s = 0; s < n; s++)
        if (start_slot(d, s, 0) != 0) return ts_fail(err, errlen, "%s", d->fail);
    while (count(d, true, false, false)) {
        double t = rel(d);
        reap(d, t);
        if (d->died) return ts_fail(err, errlen, "a worker of pool %s exited before it was healthy", d->pool);
        if (t > d->start_timeout_s)
            return ts_fail(err, errlen, "pool %s: a worker was not healthy on the router within %g s", d->pool,
                           d->start_timeout_s);
        dd_seen v;
        if (poll_status(d, &v) == 0) seen_health(d, &v, rel(d));
        nap(DD_POLL_S);
    }
    double sum = 0;
    for (size_t i = 0; i < d->n_cold; i++) sum += d->cold[i];
    d->initial_cold_s = n ? sum / (double)d->n_cold : 0;
    d->n_cold = 0, d->starts = 0; /* the run's own starts from here */
    return 0;
}

static void stop_all(dd *d)
{
    for (size_t s = 0; s < d->n_slots; s++)
        if (d->slot[s].life != DD_ABSENT && d->slot[s].pid > 0) kill(d->slot[s].pid, SIGTERM);
    double until = ts_now() + d->start_timeout_s;
    for (size_t s = 0; s < d->n_slots; s++) {
        dd_slot *w = &d->slot[s];
        while (w->life != DD_ABSENT && w->pid > 0) {
            int st;
            if (waitpid(w->pid, &st, WNOHANG) == w->pid) break;
            if (ts_now() > until) {
                kill(w->pid, SIGKILL);
                waitpid(w->pid, &st, 0);
                break;
            }
            nap(DD_POLL_S);
        }
        w->life = DD_ABSENT;
        w->pid = -1;
    }
}

/* ---- the load's hooks ---------------------------------------------------------------- */

static int on_start(void *ctx, double t0, size_t n)
{
    dd *d = ctx;
    (void)n;
    /* the load's time 0 is the scaler's: the initial workers' curve point moves to it */
    d->t0 = t0;
    d->n_curve = 0;
    mark(d, 0);
    if (pthread_create(&d->th, NULL, control, d) != 0) return -1;
    d->th_started = true;
    return 0;
}

static void join(dd *d)
{
    if (!d->th_started) return;
    atomic_store(&d->stop, true);
    pthread_join(d->th, NULL);
    d->th_started = false;
}

static void on_done(void *ctx, const load_result *res)
{
    dd *d = ctx;
    join(d);
    d->done = true;
    d->end_t = rel(d);
    mark(d, d->end_t);
    ddrep_live(d, res);
    if (sim_run(&d->cfg.sim, res->t, &d->sim, d->sim_err, sizeof d->sim_err) == 0) d->sim_ok = true;
}

/* ---- options ------------------------------------------------------------------------ */

static int sim_option(void *ctx, const char *key, const char *value, char *err, size_t errlen)
{
    return simcfg_option(ctx, key, value, err, errlen);
}

static int worker_option(dd *d, const char *v, char *err, size_t errlen)
{
    const char *eq = v ? strchr(v, '=') : NULL;
    size_t pl = eq ? (size_t)(eq - v) : 0;
    if (!eq || pl == 0 || pl >= sizeof d->slot[0].port || strspn(v, "0123456789") != pl || !eq[1])
        return ts_fail(err, errlen, "--worker: '%.60s' is not PORT=COMMAND", v ? v : "");
    if (strlen(eq + 1) >= sizeof d->slot[0].cmd) return ts_fail(err, errlen, "--worker: the command is too long");
    if (d->n_slots == DD_MAX_SLOTS) return ts_fail(err, errlen, "--worker: at most %d", DD_MAX_SLOTS);
    dd_slot *w = &d->slot[d->n_slots++];
    memcpy(w->port, v, pl);
    w->port[pl] = '\0';
    snprintf(w->cmd, sizeof w->cmd, "%s", eq + 1);
    w->pid = -1;
    return 0;
}

/* The drill's own options: 0 taken, 1 the load's, -1 bad. */
static int option(dd *d, const char *key, const char *v, char *err, size_t errlen)
{
    if (!strcmp(key, "keep-cold-start")) {
        d->keep_cold = true;
        return 0;
    }
    bool valued = !strcmp(key, "json") || !strcmp(key, "sim-config") || !strcmp(key, "pool") || !strcmp(key, "worker");
    if (valued && (!v || !*v)) return ts_fail(err, errlen, "--%s: needs a value (see tierbench drill day --help)", key);
    if (!strcmp(key, "json")) d->json = v;
    else if (!strcmp(key, "pool")) d->pool = v;
    else if (!strcmp(key, "worker")) return worker_option(d, v, err, errlen);
    else if (!strcmp(key, "sim-config")) {
        d->sim_path = v;
        return simcfg_file(v, sim_option, &d->cfg, err, errlen) != 0 ? -1 : 0;
    } else if (!strcmp(key, "time-scale")) return dc_number(key, v, 1e-6, 1e6, &d->time_scale, err, errlen);
    else if (!strcmp(key, "start-timeout")) return dc_number(key, v, 0.1, 3600, &d->start_timeout_s, err, errlen);
    else if (!strcmp(key, "served-agree")) return dc_number(key, v, 0, 100, &d->served_pts, err, errlen);
    else if (!strcmp(key, "p95-agree")) return dc_number(key, v, 0, 10000, &d->p95_pct, err, errlen);
    else if (!strcmp(key, "p95-floor-ms")) return dc_number(key, v, 0, 1e6, &d->p95_floor_ms, err, errlen);
    else if (!strcmp(key, "replicas-agree")) return dc_number(key, v, 0, 1e6, &d->replicas_n, err, errlen);
    else if (!strcmp(key, "cost-agree")) return dc_number(key, v, 0, 1e6, &d->cost_pct, err, errlen);
    else return 1;
    return 0;
}

static bool load_flag(const char *k)
{
    return !strcmp(k, "fixed") || !strcmp(k, "poisson") || !strcmp(k, "quiet") || !strcmp(k, "keep-cold-start");
}

static int own_option(void *ctx, const char *key, const char *v, char *err, size_t errlen)
{
    dd *d = ctx;
    int r = option(d, key, v, err, errlen);
    if (r != 1 || strcmp(key, "url") != 0) return r;
    d->url = v;
    return lb_parse_url(v, d->host, sizeof d->host, d->port, sizeof d->port, err, errlen) != 0 ? -1 : 1;
}

/* The scaled pool's settings: checked, scaled in time on the sim's side too. */
static int pool_setup(dd *d, char *err, size_t errlen)
{
    sim_config *c = &d->cfg.sim;
    sim_pool_cfg *p = NULL;
    for (size_t i = 0; i < c->n_pools; i++)
        if (!strcmp(c->pools[i].name, d->pool)) p = &c->pools[i], d->pool_i = i;
    if (!p) return ts_fail(err, errlen, "--pool %.60s: no such pool in %s", d->pool, d->sim_path);
    if (!p->max) return ts_fail(err, errlen, "--pool %.60s: the sim config gives it no max= (it does not scale)", d->pool);
    if (p->scale_metric != SCALE_DESIRED)
        return ts_fail(err, errlen, "--pool %.60s: needs scale_metric=desired (the drill follows the router's gauge)",
                       d->pool);
    if (d->n_slots != p->max)
        return ts_fail(err, errlen, "--pool %.60s: %zu --worker slots for max=%u (one per backend the router lists)",
                       d->pool, d->n_slots, p->max);
    scaler_config *s = &p->scaler;
    s->sync_s *= d->time_scale;
    s->up_window_s *= d->time_scale;
    s->down_window_s *= d->time_scale;
    for (size_t i = 0; i < s->n_up; i++) s->up[i].period_s *= d->time_scale;
    for (size_t i = 0; i < s->n_down; i++) s->down[i].period_s *= d->time_scale;
    if (sim_config_check(c, err, errlen) != 0) return -1;
    d->scaler = *s;
    d->scaler.min = p->min, d->scaler.max = p->max;
    return 0;
}

static int parse(dd *d, int argc, char **argv, char **fwd, int *n_fwd, char *err, size_t errlen)
{
    int rc = tb_opt_split(argc, argv, 3, load_flag, "drill day", own_option, d, fwd, n_fwd, DD_MAX_ARGS, err, errlen);
    if (rc) return rc;
    if (!d->url) return ts_fail(err, errlen, "--url http://ROUTER:PORT is required");
    if (!d->sim_path) return ts_fail(err, errlen, "--sim-config FILE is required: the simulator's model of this stack");
    if (!d->pool) return ts_fail(err, errlen, "--pool NAME is required: the pool the drill scales");
    return pool_setup(d, err, errlen);
}

int drillday_main(int argc, char **argv)
{
    static dd d;
    static char *fwd[DD_MAX_ARGS];
    int n_fwd = 0, rc = 1;
    char err[1200];
    simcfg_init(&d.cfg);
    d.time_scale = 1;
    d.start_timeout_s = 30;
    d.served_pts = 5;
    d.p95_pct = 50;
    d.p95_floor_ms = 10;
    d.replicas_n = 1;
    d.cost_pct = 25;
    int p = parse(&d, argc, argv, fwd, &n_fwd, err, sizeof err);
    int done_rc = tb_parsed(p, usage, err);
    if (done_rc >= 0) return done_rc;
    sim_pool_cfg *pc = &d.cfg.sim.pools[d.pool_i];
    if (!(d.sc = scaler_create(&d.scaler))) {
        fprintf(stderr, "tierbench: out of memory\n");
        return 1;
    }
    if (start_initial(&d, pc->backends, err, sizeof err) != 0) {
        fprintf(stderr, "tierbench: %s\n", err);
        goto out;
    }
    if (!d.keep_cold) {
        pc->provision_s = pc->pull_s = pc->warmup_s = 0;
        pc->load_s = d.initial_cold_s;
    }
    d.sim_cold_s = pc->provision_s + pc->pull_s + pc->load_s + pc->warmup_s;
    load_hooks h = {.ctx = &d, .on_start = on_start, .on_done = on_done};
    int lrc = load_run(n_fwd, fwd, &h);
    join(&d);
    if (lrc != 0 || !d.done) {
        rc = lrc == EXIT_USAGE ? EXIT_USAGE : 1;
        goto out;
    }
    if (d.fail[0]) {
        fprintf(stderr, "tierbench: %s\n", d.fail);
        goto out;
    }
    if (!d.sim_ok) {
        fprintf(stderr, "tierbench: the simulator could not run the trace: %s\n", d.sim_err);
        goto out;
    }
    ddrep_compare(&d);
    ddrep_text(&d, stdout);
    rc = d.cmp.agree ? 0 : EXIT_GOAL;
    if (d.json && ddrep_json(&d) != 0) rc = 1;
    if (fflush(stdout) != 0) rc = 1;
out:
    join(&d);
    stop_all(&d);
    if (d.sim_ok) sim_result_free(&d.sim);
    scaler_destroy(d.sc);
    return rc;
}
