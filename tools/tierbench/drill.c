#include "drill.h"
#include "err.h"
#include "drillday.h"
#include "drillsurge.h"
#include "opts.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "load.h"
#include "loadbody.h"
#include "loadreport.h"

#define EXIT_USAGE 64
#define EXIT_GOAL 2
#define DRILL_MAX_WORKERS 16
#define DRILL_MAX_ARGS 256
#define DRILL_CMD_MAX 1024
#define DRILL_POLL_S 0.05
#define DRILL_STATUS_MAX (4u << 20)
#define DRILL_MIN_SAMPLES 20 /* fewer latencies than this on either side: no P95 to judge */

typedef struct {
    pid_t pid;
    char match[128]; /* the backend: its address, or ":PORT" it ends with */
    char cmd[DRILL_CMD_MAX];
    double signalled, down, gone, restarted, up; /* seconds from the start; -1: not reached */
    pid_t new_pid;
} drill_worker;

typedef struct {
    bool outage; /* gpu-outage; else rolling */
    const char *url, *json;
    char host[256], port[8];
    char backend[300]; /* the outage's backend (see match()) */
    pid_t kill_pid;
    const char *fault_url;
    long fault_n, fault_sent; /* sent: the inferences it took */
    char fault_host[256], fault_port[8];
    char model[64];
    double at, duration, restart_after, stop_within, p95_pct, p95_floor_ms, settle_s;
    char restart[DRILL_CMD_MAX];
    drill_worker w[DRILL_MAX_WORKERS];
    size_t n_w;
    int sig;
    char *fault_body; /* owned: one JSON inference for the fault worker */
    size_t fault_len;
    /* the run: t0 and the per-request flags are written before the thread starts */
    double t0;
    size_t n;
    uint8_t *to_target; /* owned: 1 when request i's reply named the outage's backend */
    pthread_t th;
    bool th_started;
    atomic_bool stop;
    /* the thread's, read after the join */
    double kill_t, last_change_t, down_t, restart_t, healthy_t;
    long pool_before;
    pid_t restart_pid;
    size_t polls, poll_errors;
    char fail[300];
    /* the verdict */
    size_t failed, ok, by_err[LE_COUNT], by_5xx, by_other;
    double last_reply_t, stop_s, p95_pre, p95_post;
    size_t n_pre, n_post;
    bool goal_failed, goal_stop, goal_recovered, goal_p95, goal_rolled;
    bool done;
} drill;

/* ---- helpers ----------------------------------------------------------------------- */

static double rel(const drill *d) { return ts_now() - d->t0; }

static void nap(double s)
{
    if (s <= 0) return;
    struct timespec ts = {.tv_sec = (time_t)s, .tv_nsec = (long)((s - floor(s)) * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* Sleeps until `t` seconds from the start, or the stop flag. false: stopped. */
static bool sleep_until(drill *d, double t)
{
    while (!atomic_load(&d->stop)) {
        double left = t - rel(d);
        if (left <= 0) return true;
        nap(left < DRILL_POLL_S ? left : DRILL_POLL_S);
    }
    return false;
}

/* A backend address matches "HOST:PORT" exactly, or a bare "PORT" by its ":PORT" end. */
static bool match(const char *addr, const char *want)
{
    if (!strcmp(addr, want)) return true;
    size_t al = strlen(addr), wl = strlen(want);
    return !strchr(want, ':') && wl + 1 < al && addr[al - wl - 1] == ':' && !strcmp(addr + al - wl, want);
}

/* One poll of /admin/status: the matching backend's pool's healthy count, whether it is
 * healthy, the tries it was sent (requests + failures) and its address. -1: no status, or
 * no such backend. */
typedef struct {
    long pool_healthy;
    bool healthy;
    long long tries;
    char addr[128];
} drill_seen;

static int poll_status(drill *d, const char *want, drill_seen *out)
{
    lb_reply rep;
    char err[300];
    int rc = -1;
    json_t *root = NULL;
    d->polls++;
    if (lb_http(d->host, d->port, "GET", "/admin/status", NULL, NULL, 0, DRILL_STATUS_MAX, 2.0, &rep, err, sizeof err) != 0) {
        d->poll_errors++;
        return -1;
    }
    if (rep.status != 200 || !(root = json_loadb(rep.body, rep.len, 0, NULL))) goto out;
    json_t *pools = json_object_get(root, "pools"), *p, *b;
    size_t i, k;
    json_array_foreach(pools, i, p) {
        json_array_foreach(json_object_get(p, "backends"), k, b) {
            const char *a = json_string_value(json_object_get(b, "address"));
            if (!a || !match(a, want)) continue;
            out->pool_healthy = (long)json_integer_value(json_object_get(p, "healthy"));
            out->healthy = json_is_true(json_object_get(b, "healthy"));
            out->tries = (long long)json_integer_value(json_object_get(b, "requests")) +
                         (long long)json_integer_value(json_object_get(b, "failures"));
            snprintf(out->addr, sizeof out->addr, "%s", a);
            rc = 0;
            goto out;
        }
    }
out:
    if (rc != 0) d->poll_errors++;
    json_decref(root);
    lb_reply_free(&rep);
    return rc;
}

pid_t drill_spawn(const char *cmd)
{
    pid_t pid = fork();
    if (pid != 0) return pid;
    int fd = open("/dev/null", O_RDWR);
    if (fd >= 0) {
        dup2(fd, 0);
        dup2(fd, 1);
        dup2(fd, 2);
    }
    execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
    _exit(127);
}

/* true while the child has not exited (a command that fails at once is a drill failure) */
static bool child_running(pid_t pid)
{
    int st;
    return waitpid(pid, &st, WNOHANG) == 0;
}

/* ---- the control thread ------------------------------------------------------------ */

/* The outage: a SIGKILL, or inferences to the armed worker until one fails (the injected
 * fault, or "not live" when the load's own requests reached the Nth run first). kill_t is
 * when it happened: the kill, or the failed reply. */
static void outage_act(drill *d)
{
    if (d->kill_pid > 0) {
        d->kill_t = rel(d);
        if (kill(d->kill_pid, SIGKILL) != 0)
            snprintf(d->fail, sizeof d->fail, "kill %ld: %s", (long)d->kill_pid, strerror(errno));
        return;
    }
    char path[128], hdr[64], err[300];
    snprintf(path, sizeof path, "/v2/models/%s/infer", d->model);
    snprintf(hdr, sizeof hdr, "Content-Type: application/json\r\n");
    for (long i = 0; i < d->fault_n && !atomic_load(&d->stop); i++) {
        lb_reply rep;
        if (lb_http(d->fault_host, d->fault_port, "POST", path, hdr, d->fault_body, d->fault_len, 1u << 20, 5.0, &rep,
                    err, sizeof err) != 0) {
            snprintf(d->fail, sizeof d->fail, "--fault-url: %.200s", err);
            return;
        }
        int st = rep.status;
        lb_reply_free(&rep);
        if (st != 200) {
            d->kill_t = rel(d);
            d->fault_sent = i + 1;
            return;
        }
    }
    snprintf(d->fail, sizeof d->fail, "--fault-url: %ld inferences and no fault: is TIERSERVE_FAULT_INJECT_GPU_RUN armed?",
             d->fault_n);
}

static void outage_thread(drill *d)
{
    drill_seen s = {0};
    bool have = false;
    while (rel(d) < d->at && !atomic_load(&d->stop)) {
        if (poll_status(d, d->backend, &s) == 0) {
            have = true;
            d->pool_before = s.pool_healthy;
        }
        sleep_until(d, rel(d) + DRILL_POLL_S < d->at ? rel(d) + DRILL_POLL_S : d->at);
    }
    if (atomic_load(&d->stop)) return;
    if (!have) {
        snprintf(d->fail, sizeof d->fail, "the router's /admin/status never named backend %.200s", d->backend);
        return;
    }
    long long prev = s.tries;
    outage_act(d);
    if (d->fail[0]) return;
    d->last_change_t = d->kill_t;
    while (!atomic_load(&d->stop)) {
        sleep_until(d, rel(d) + DRILL_POLL_S);
        if (poll_status(d, d->backend, &s) != 0) continue;
        double t = rel(d);
        if (d->restart_t < 0 && s.tries != prev) d->last_change_t = t;
        prev = s.tries;
        if (!s.healthy && d->down_t < 0) d->down_t = t;
        /* restarted only once the router has let go of it: the stop time is measured first */
        if (d->restart[0] && d->restart_t < 0 && d->down_t >= 0 && t >= d->kill_t + d->restart_after) {
            d->restart_pid = drill_spawn(d->restart);
            if (d->restart_pid < 0) {
                snprintf(d->fail, sizeof d->fail, "--restart: fork: %s", strerror(errno));
                return;
            }
            d->restart_t = rel(d);
        }
        if (d->restart_t >= 0 && d->healthy_t < 0 && s.healthy && s.pool_healthy >= d->pool_before) d->healthy_t = t;
    }
}

/* Waits (polling) until the backend's health is `healthy`, within settle_s. -1: it was not. */
static double wait_health(drill *d, const char *want, bool healthy, drill_seen *s)
{
    double until = rel(d) + d->settle_s;
    while (!atomic_load(&d->stop) && rel(d) < until) {
        if (poll_status(d, want, s) == 0 && s->healthy == healthy) return rel(d);
        sleep_until(d, rel(d) + DRILL_POLL_S);
    }
    return -1;
}

static void rolling_thread(drill *d)
{
    if (!sleep_until(d, d->at)) return;
    for (size_t i = 0; i < d->n_w && !atomic_load(&d->stop); i++) {
        drill_worker *w = &d->w[i];
        drill_seen s = {0};
        if (wait_health(d, w->match, true, &s) < 0) {
            snprintf(d->fail, sizeof d->fail, "worker %s is not healthy on the router before its restart", w->match);
            return;
        }
        char host[256], port[8], err[300];
        snprintf(host, sizeof host, "%s", s.addr);
        char *colon = strrchr(host, ':');
        if (!colon || strlen(colon + 1) >= sizeof port) {
            snprintf(d->fail, sizeof d->fail, "backend address '%s' has no port", s.addr);
            return;
        }
        snprintf(port, sizeof port, "%s", colon + 1);
        *colon = '\0';
        w->signalled = rel(d);
        if (kill(w->pid, d->sig) != 0) {
            snprintf(d->fail, sizeof d->fail, "kill %ld: %s", (long)w->pid, strerror(errno));
            return;
        }
        w->down = wait_health(d, w->match, false, &s);
        /* the old process must have let go of its port before the new one binds it: the
         * pid may be another program's child (a zombie answers kill(0)), so ask the port */
        double until = rel(d) + d->settle_s;
        while (!atomic_load(&d->stop) && rel(d) < until) {
            lb_reply rep;
            if (lb_http(host, port, "GET", "/v2/health/live", NULL, NULL, 0, 65536, 0.5, &rep, err, sizeof err) != 0) {
                w->gone = rel(d);
                break;
            }
            lb_reply_free(&rep);
            sleep_until(d, rel(d) + DRILL_POLL_S);
        }
        if (w->gone < 0) {
            if (!atomic_load(&d->stop)) snprintf(d->fail, sizeof d->fail, "worker %s still answers after the signal", w->match);
            return;
        }
        w->new_pid = drill_spawn(w->cmd);
        if (w->new_pid < 0) {
            snprintf(d->fail, sizeof d->fail, "restart of %s: fork: %s", w->match, strerror(errno));
            return;
        }
        w->restarted = rel(d);
        w->up = wait_health(d, w->match, true, &s);
        if (w->up < 0) {
            if (atomic_load(&d->stop)) return;
            snprintf(d->fail, sizeof d->fail, "worker %s not healthy again within %g s of its restart%s", w->match,
                     d->settle_s, child_running(w->new_pid) ? "" : " (its command exited)");
            return;
        }
    }
}

static void *thread_main(void *arg)
{
    drill *d = arg;
    if (d->outage) outage_thread(d);
    else rolling_thread(d);
    return NULL;
}

/* ---- the load's hooks -------------------------------------------------------------- */

static int on_start(void *ctx, double t0, size_t n)
{
    drill *d = ctx;
    d->t0 = t0;
    d->n = n;
    d->to_target = calloc(n ? n : 1, 1);
    if (!d->to_target) return -1;
    if (pthread_create(&d->th, NULL, thread_main, d) != 0) return -1;
    d->th_started = true;
    return 0;
}

static void on_header(void *ctx, size_t i, const char *name, const char *value)
{
    drill *d = ctx;
    if (d->outage && i < d->n && !strcasecmp(name, "X-Tierrouter-Backend") && match(value, d->backend)) d->to_target[i] = 1;
}

static void join(drill *d)
{
    if (!d->th_started) return;
    atomic_store(&d->stop, true);
    pthread_join(d->th, NULL);
    d->th_started = false;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* P95 (nearest rank) of the successful requests scheduled in [from, to). */
static double p95(const load_result *res, double from, double to, size_t *count)
{
    double *v = malloc((res->n ? res->n : 1) * sizeof *v);
    size_t n = 0;
    if (!v) {
        *count = 0;
        return NAN;
    }
    for (size_t i = 0; i < res->n; i++) {
        const load_rec *q = &res->rec[i];
        if (q->err == LE_NONE && q->status >= 200 && q->status < 300 && q->sched >= from && q->sched < to)
            v[n++] = q->done - q->sched;
    }
    *count = n;
    double r = NAN;
    if (n) {
        qsort(v, n, sizeof *v, cmp_double);
        size_t k = (size_t)ceil(0.95 * (double)n);
        r = v[k ? k - 1 : 0];
    }
    free(v);
    return r;
}

static void on_done(void *ctx, const load_result *res)
{
    drill *d = ctx;
    join(d);
    d->done = true;
    for (size_t i = 0; i < res->n; i++) {
        const load_rec *q = &res->rec[i];
        bool ok = q->err == LE_NONE && q->status >= 200 && q->status < 300;
        if (ok) {
            d->ok++;
            continue;
        }
        d->failed++;
        if (q->err != LE_NONE) d->by_err[q->err]++;
        else if (q->status >= 500) d->by_5xx++;
        else d->by_other++;
    }
    if (!d->outage) {
        d->goal_rolled = !d->fail[0];
        for (size_t i = 0; i < d->n_w; i++) d->goal_rolled = d->goal_rolled && d->w[i].up >= 0;
        d->goal_failed = d->failed == 0;
        return;
    }
    if (d->kill_t < 0) return;
    /* the last request the backend answered after the kill (before its restart) */
    d->last_reply_t = d->kill_t;
    for (size_t i = 0; i < res->n && i < d->n; i++) {
        const load_rec *q = &res->rec[i];
        if (d->to_target[i] && q->sent >= d->kill_t && (d->restart_t < 0 || q->sent < d->restart_t) &&
            q->sent > d->last_reply_t)
            d->last_reply_t = q->sent;
    }
    double last = d->last_reply_t > d->last_change_t ? d->last_reply_t : d->last_change_t;
    d->stop_s = last - d->kill_t;
    d->goal_failed = d->failed == 0;
    d->goal_stop = d->stop_within <= 0 || d->stop_s <= d->stop_within;
    d->goal_recovered = !d->restart[0] || d->healthy_t >= 0;
    /* after recovery: once the pool is whole again (--restart), else once the traffic has
     * left the dead backend */
    double from = d->restart[0] ? d->healthy_t : d->kill_t + d->stop_s;
    d->p95_pre = p95(res, 0, d->kill_t, &d->n_pre);
    d->p95_post = from >= 0 ? p95(res, from, INFINITY, &d->n_post) : NAN;
    d->goal_p95 = d->n_pre >= DRILL_MIN_SAMPLES && d->n_post >= DRILL_MIN_SAMPLES &&
                  (d->p95_post <= d->p95_pre * (1 + d->p95_pct / 100) ||
                   d->p95_post - d->p95_pre <= d->p95_floor_ms / 1e3);
}

/* ---- the report -------------------------------------------------------------------- */

static json_t *num(double v) { return v >= 0 && isfinite(v) ? json_real(v) : json_null(); }

static json_t *report_json(const drill *d)
{
    json_t *errs = json_object();
    for (int e = 1; e < LE_COUNT; e++) json_object_set_new(errs, loadreport_err_name((load_err)e), json_integer((json_int_t)d->by_err[e]));
    json_object_set_new(errs, "5xx", json_integer((json_int_t)d->by_5xx));
    json_object_set_new(errs, "other_status", json_integer((json_int_t)d->by_other));
    json_t *o = json_pack("{s:s, s:s, s:I, s:I, s:I, s:o, s:s, s:b}", "drill", d->outage ? "gpu-outage" : "rolling", "url",
                          d->url, "requests", (json_int_t)d->n, "ok", (json_int_t)d->ok, "failed", (json_int_t)d->failed,
                          "failed_by", errs, "error", d->fail, "goal_no_failed", d->goal_failed);
    if (d->outage) {
        json_object_set_new(o, "backend", json_string(d->backend));
        json_object_set_new(o, "kill_s", num(d->kill_t));
        json_object_set_new(o, "fault_requests", json_integer(d->fault_sent));
        json_object_set_new(o, "stop_s", num(d->kill_t >= 0 ? d->stop_s : -1));
        json_object_set_new(o, "last_reply_after_kill_s", num(d->kill_t >= 0 ? d->last_reply_t - d->kill_t : -1));
        json_object_set_new(o, "last_try_after_kill_s", num(d->kill_t >= 0 ? d->last_change_t - d->kill_t : -1));
        json_object_set_new(o, "unhealthy_after_kill_s", num(d->down_t >= 0 ? d->down_t - d->kill_t : -1));
        json_object_set_new(o, "restart_s", num(d->restart_t));
        json_object_set_new(o, "restart_pid", d->restart_pid > 0 ? json_integer(d->restart_pid) : json_null());
        json_object_set_new(o, "healthy_after_kill_s", num(d->healthy_t >= 0 ? d->healthy_t - d->kill_t : -1));
        json_object_set_new(o, "healthy_after_restart_s", num(d->healthy_t >= 0 ? d->healthy_t - d->restart_t : -1));
        json_object_set_new(o, "p95_before_ms", num(d->p95_pre * 1e3));
        json_object_set_new(o, "p95_after_ms", num(d->p95_post * 1e3));
        json_object_set_new(o, "n_before", json_integer((json_int_t)d->n_pre));
        json_object_set_new(o, "n_after", json_integer((json_int_t)d->n_post));
        json_object_set_new(o, "p95_within_pct", json_real(d->p95_pct));
        json_object_set_new(o, "goal_stop", json_boolean(d->goal_stop));
        json_object_set_new(o, "goal_recovered", json_boolean(d->goal_recovered));
        json_object_set_new(o, "goal_p95", json_boolean(d->goal_p95));
    } else {
        json_t *ws = json_array();
        for (size_t i = 0; i < d->n_w; i++) {
            const drill_worker *w = &d->w[i];
            json_array_append_new(ws, json_pack("{s:s, s:o, s:o, s:o, s:o, s:o, s:o}", "backend", w->match, "signalled_s",
                                                num(w->signalled), "unhealthy_s", num(w->down), "gone_s", num(w->gone),
                                                "restarted_s", num(w->restarted), "healthy_s", num(w->up), "pid",
                                                w->new_pid > 0 ? json_integer(w->new_pid) : json_null()));
        }
        json_object_set_new(o, "workers", ws);
        json_object_set_new(o, "goal_rolled", json_boolean(d->goal_rolled));
    }
    return o;
}

static void report_text(const drill *d, FILE *f)
{
    fprintf(f, "drill %s against %s: %zu requests, %zu ok, %zu failed", d->outage ? "gpu-outage" : "rolling", d->url, d->n,
            d->ok, d->failed);
    if (d->failed) {
        fprintf(f, " (");
        for (int e = 1; e < LE_COUNT; e++)
            if (d->by_err[e]) fprintf(f, "%s %zu, ", loadreport_err_name((load_err)e), d->by_err[e]);
        fprintf(f, "5xx %zu, other status %zu)", d->by_5xx, d->by_other);
    }
    fprintf(f, "   goal 0 failed: %s\n", d->goal_failed ? "met" : "MISSED");
    if (d->fail[0]) fprintf(f, "  drill error: %s\n", d->fail);
    if (d->outage && d->kill_t >= 0) {
        fprintf(f, "  backend %s %s at %.3f s; last request to it %.3f s after (last reply naming it %.3f s, "
                   "last try in /admin/status %.3f s)",
                d->backend, d->kill_pid > 0 ? "killed" : "faulted", d->kill_t, d->stop_s, d->last_reply_t - d->kill_t, d->last_change_t - d->kill_t);
        if (d->stop_within > 0) fprintf(f, "   goal <= %g s: %s", d->stop_within, d->goal_stop ? "met" : "MISSED");
        fprintf(f, "\n");
        if (d->down_t >= 0) fprintf(f, "  the router marked it unhealthy %.3f s after the kill or fault\n", d->down_t - d->kill_t);
        if (d->restart[0]) {
            if (d->healthy_t >= 0)
                fprintf(f, "  restarted at %.3f s; pool healthy again %.3f s after the kill (%.3f s after the restart)\n",
                        d->restart_t, d->healthy_t - d->kill_t, d->healthy_t - d->restart_t);
            else fprintf(f, "  restart: the pool was not healthy again before the end   goal: MISSED\n");
        }
        fprintf(f, "  P95 before %.2f ms (%zu requests), after recovery %.2f ms (%zu requests): within %g %% (or %g ms): %s\n",
                d->p95_pre * 1e3, d->n_pre, d->p95_post * 1e3, d->n_post, d->p95_pct, d->p95_floor_ms,
                d->goal_p95 ? "met" : d->n_pre < DRILL_MIN_SAMPLES || d->n_post < DRILL_MIN_SAMPLES ? "MISSED (too few requests)" : "MISSED");
    } else if (d->outage) {
        fprintf(f, "  the backend was never killed\n");
    }
    for (size_t i = 0; !d->outage && i < d->n_w; i++) {
        const drill_worker *w = &d->w[i];
        fprintf(f, "  worker %s: signalled %.3f s, unhealthy %.3f s, gone %.3f s, restarted %.3f s, healthy %.3f s\n", w->match,
                w->signalled, w->down, w->gone, w->restarted, w->up);
    }
    if (!d->outage) fprintf(f, "  every worker restarted and healthy again: %s\n", d->goal_rolled ? "yes" : "NO");
}

/* ---- options ----------------------------------------------------------------------- */

static void usage(FILE *out)
{
    fprintf(out,
            "usage: tierbench drill gpu-outage --url http://ROUTER --backend ADDR (--kill-pid PID | --fault-url URL\n"
            "                                  [--fault-requests N]) [--restart CMD] [options] [load options]\n"
            "       tierbench drill rolling --url http://ROUTER --worker PID:ADDR=CMD ... [options] [load options]\n"
            "       tierbench drill surge --url http://ROUTER --sim-config FILE [options] [load options]\n"
            "                             (tierbench drill surge --help for its options)\n"
            "       tierbench drill day --url http://ROUTER --sim-config FILE --pool NAME --worker PORT=CMD ...\n"
            "                           (tierbench drill day --help for its options)\n\n"
            "  --backend ADDR        the killed backend as the router names it (HOST:PORT, or PORT)\n"
            "  --kill-pid PID        SIGKILL at --at;  --fault-url http://WORKER --fault-requests N (default 1):\n"
            "                        N inferences of --model to a worker with fault injection armed\n"
            "  --at S                when to act (default: a third of --duration; rolling: 1)\n"
            "  --restart CMD         sh -c CMD once the router marked the backend unhealthy, and at least\n"
            "                        --restart-after S (default 0.5) after the kill\n"
            "  --stop-within S       goal: no request goes to the killed backend later than S after the kill\n"
            "  --p95-within PCT      goal: P95 after recovery within PCT %% of before (default 50), or within\n"
            "                        --p95-floor-ms MS of it (default 5)\n"
            "  --worker PID:ADDR=CMD rolling: signal PID, wait until ADDR stops answering, run CMD, wait until\n"
            "                        the router has it healthy (repeatable, in order)\n"
            "  --signal TERM|INT|KILL  rolling's stop signal (default TERM)\n"
            "  --settle-timeout S    the longest wait for a backend to go or come back (default 10)\n"
            "  --json FILE           the drill's report as JSON (FILE - : stdout)\n"
            "load options: as tierbench load (--rate, --duration, --model, --connections, --timeout, ...)\n"
            "exit: 0 every goal met, 2 a goal missed, 1 the drill could not run, 64 bad arguments\n");
}

static int parse_seconds(const char *key, const char *v, double lo, double *out, char *err, size_t errlen)
{
    char *end;
    double s = v ? strtod(v, &end) : NAN;
    if (!v || end == v || *end || !(s >= lo && s <= 86400))
        return ts_fail(err, errlen, "--%s: '%.40s' is not a number in [%g, 86400]", key, v ? v : "", lo);
    *out = s;
    return 0;
}

static int parse_worker(drill *d, const char *v, char *err, size_t errlen)
{
    const char *colon = strchr(v, ':'), *eq = colon ? strchr(colon, '=') : NULL;
    char *end;
    long pid = strtol(v, &end, 10);
    size_t ml = eq ? (size_t)(eq - colon - 1) : 0;
    if (d->n_w == DRILL_MAX_WORKERS || !colon || end != colon || pid < 2 || !eq || ml == 0 ||
        ml >= sizeof d->w[0].match || !eq[1] || strlen(eq + 1) >= DRILL_CMD_MAX) {
        return ts_fail(err, errlen, "--worker: '%.60s' is not PID:ADDR=CMD (at most %d workers)", v, DRILL_MAX_WORKERS);
    }
    drill_worker *w = &d->w[d->n_w++];
    *w = (drill_worker){.pid = (pid_t)pid, .signalled = -1, .down = -1, .gone = -1, .restarted = -1, .up = -1};
    memcpy(w->match, colon + 1, ml);
    snprintf(w->cmd, sizeof w->cmd, "%s", eq + 1);
    return 0;
}

/* A drill option: 0 taken, 1 not the drill's, -1 bad. */
static int option(drill *d, const char *key, const char *v, char *err, size_t errlen)
{
    if (!strcmp(key, "json")) {
        d->json = v;
        return 0;
    }
    if (!strcmp(key, "backend")) {
        if (!v || !*v || strlen(v) >= sizeof d->backend) goto bad;
        snprintf(d->backend, sizeof d->backend, "%s", v);
        return 0;
    }
    if (!strcmp(key, "kill-pid") || !strcmp(key, "fault-requests")) {
        char *end;
        long n = v ? strtol(v, &end, 10) : -1;
        if (!v || end == v || *end || n < 1 || n > 1000000) goto bad;
        if (key[0] == 'k') d->kill_pid = (pid_t)n;
        else d->fault_n = n;
        return 0;
    }
    if (!strcmp(key, "fault-url")) {
        d->fault_url = v;
        return lb_parse_url(v, d->fault_host, sizeof d->fault_host, d->fault_port, sizeof d->fault_port, err, errlen);
    }
    if (!strcmp(key, "restart")) {
        if (!v || !*v || strlen(v) >= sizeof d->restart) goto bad;
        snprintf(d->restart, sizeof d->restart, "%s", v);
        return 0;
    }
    if (!strcmp(key, "worker")) return parse_worker(d, v, err, errlen);
    if (!strcmp(key, "signal")) {
        d->sig = !v ? -1 : !strcmp(v, "TERM") ? SIGTERM : !strcmp(v, "INT") ? SIGINT : !strcmp(v, "KILL") ? SIGKILL : -1;
        if (d->sig < 0) goto bad;
        return 0;
    }
    static const struct {
        const char *key;
        size_t off;
        double lo;
    } secs[] = {{"at", offsetof(drill, at), 0},
                {"restart-after", offsetof(drill, restart_after), 0},
                {"stop-within", offsetof(drill, stop_within), 0.001},
                {"p95-within", offsetof(drill, p95_pct), 0},
                {"p95-floor-ms", offsetof(drill, p95_floor_ms), 0},
                {"settle-timeout", offsetof(drill, settle_s), 0.1}};
    for (size_t i = 0; i < sizeof secs / sizeof secs[0]; i++)
        if (!strcmp(key, secs[i].key)) return parse_seconds(key, v, secs[i].lo, (double *)((char *)d + secs[i].off), err, errlen);
    return 1;
bad:
    return ts_fail(err, errlen, "--%s: bad value '%.60s' (see tierbench drill --help)", key, v ? v : "");
}

static bool load_flag(const char *k) { return !strcmp(k, "fixed") || !strcmp(k, "poisson") || !strcmp(k, "quiet"); }

/* The drill's own options, and the load's it reads on the way (0 taken, 1 the load's). */
static int own_option(void *ctx, const char *key, const char *v, char *err, size_t errlen)
{
    drill *d = ctx;
    int r = option(d, key, v, err, errlen);
    if (r != 1) return r;
    if (!strcmp(key, "url")) {
        d->url = v;
        if (lb_parse_url(v, d->host, sizeof d->host, d->port, sizeof d->port, err, errlen) != 0) return -1;
    } else if (!strcmp(key, "duration")) {
        d->duration = atof(v);
    } else if (!strcmp(key, "model")) {
        snprintf(d->model, sizeof d->model, "%s", v);
    }
    return 1;
}

/* Takes the drill's options; the rest go to the load (fwd). */
static int parse(drill *d, int argc, char **argv, char **fwd, int *n_fwd, char *err, size_t errlen)
{
    int rc = tb_opt_split(argc, argv, 3, load_flag, "drill", own_option, d, fwd, n_fwd, DRILL_MAX_ARGS, err, errlen);
    if (rc) return rc;
    if (!d->url)
        return ts_fail(err, errlen, "--url http://ROUTER:PORT is required");
    if (d->outage) {
        if (!d->backend[0] && d->fault_url) snprintf(d->backend, sizeof d->backend, "%s:%s", d->fault_host, d->fault_port);
        if ((d->kill_pid > 0) == (d->fault_url != NULL) || !d->backend[0])
            return ts_fail(err, errlen, "gpu-outage needs --backend ADDR and one of --kill-pid PID or --fault-url URL");
        if (d->n_w)
            return ts_fail(err, errlen, "--worker is for the rolling drill");
        if (d->at < 0) d->at = d->duration / 3;
    } else {
        if (!d->n_w || d->kill_pid > 0 || d->fault_url || d->restart[0])
            return ts_fail(err, errlen, "rolling needs --worker PID:ADDR=CMD (and no --kill-pid, --fault-url or --restart)");
        if (d->at < 0) d->at = 1;
    }
    return 0;
}

/* One JSON inference of a single row of --model, for the fault worker. */
static int prepare_fault(drill *d, char *err, size_t errlen)
{
    static lb_model m;
    static lb_body b;
    int rc = -1;
    if (lb_fetch(&m, d->fault_host, d->fault_port, d->model, 10, err, errlen) != 0 || lb_build(&m, 1, 1, err, errlen) != 0 ||
        lb_body_make(&m, 1, false, &b) != 0)
        goto out;
    d->fault_body = malloc(b.total ? b.total : 1);
    if (!d->fault_body) {
        snprintf(err, errlen, "out of memory");
        goto out;
    }
    for (size_t p = 0; p < b.n_part; p++) {
        memcpy(d->fault_body + d->fault_len, b.part[p].p, b.part[p].n);
        d->fault_len += b.part[p].n;
    }
    rc = 0;
out:
    lb_free(&m);
    return rc;
}

int drill_main(int argc, char **argv)
{
    static drill d;
    static char *fwd[DRILL_MAX_ARGS];
    int n_fwd = 0, rc = EXIT_USAGE;
    char err[1200];
    if (argc < 3 || !strcmp(argv[2], "--help") || !strcmp(argv[2], "-h")) {
        usage(argc < 3 ? stderr : stdout);
        return argc < 3 ? EXIT_USAGE : 0;
    }
    if (!strcmp(argv[2], "surge")) return drillsurge_main(argc, argv);
    if (!strcmp(argv[2], "day")) return drillday_main(argc, argv);
    if (!strcmp(argv[2], "gpu-outage")) d.outage = true;
    else if (strcmp(argv[2], "rolling") != 0) {
        fprintf(stderr, "tierbench: unknown drill '%.60s' (gpu-outage, rolling, surge or day)\n", argv[2]);
        return EXIT_USAGE;
    }
    d.at = -1;
    d.duration = 60; /* the generator's default */
    d.restart_after = 0.5;
    d.p95_pct = 50;
    d.p95_floor_ms = 5;
    d.settle_s = 10;
    d.fault_n = 1;
    d.sig = SIGTERM;
    d.kill_t = d.last_change_t = d.down_t = d.restart_t = d.healthy_t = -1;
    snprintf(d.model, sizeof d.model, "demo");
    int p = parse(&d, argc, argv, fwd, &n_fwd, err, sizeof err);
    int done_rc = tb_parsed(p, usage, err);
    if (done_rc >= 0) return done_rc;
    if (d.fault_url && prepare_fault(&d, err, sizeof err) != 0) {
        fprintf(stderr, "tierbench: --fault-url: %s\n", err);
        rc = 1;
        goto out;
    }
    load_hooks h = {.ctx = &d, .on_start = on_start, .on_header = on_header, .on_done = on_done};
    int lrc = load_run(n_fwd, fwd, &h);
    join(&d);
    if (lrc != 0 || !d.done) {
        rc = lrc == EXIT_USAGE ? EXIT_USAGE : 1;
        goto out;
    }
    report_text(&d, stdout);
    if (d.json) {
        json_t *o = report_json(&d);
        bool std = !strcmp(d.json, "-");
        FILE *f = std ? stdout : fopen(d.json, "w");
        int bad = !f || !o || json_dumpf(o, f, JSON_INDENT(2)) != 0;
        if (f) bad |= std ? fflush(f) : fclose(f);
        json_decref(o);
        if (bad) {
            fprintf(stderr, "tierbench: %s: could not write\n", d.json);
            rc = 1;
            goto out;
        }
    }
    if (d.fail[0]) rc = 1;
    else if (d.outage) rc = d.kill_t >= 0 && d.goal_failed && d.goal_stop && d.goal_recovered && d.goal_p95 ? 0 : EXIT_GOAL;
    else rc = d.goal_failed && d.goal_rolled ? 0 : EXIT_GOAL;
    if (fflush(stdout) != 0) rc = 1;
out:
    free(d.fault_body);
    free(d.to_target);
    return rc;
}
