#include "calibrate.h"
#include "err.h"
#include "opts.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "load.h"
#include "loadbody.h"
#include "loadreport.h"

#define EXIT_USAGE 64
#define CAL_MAX_LEVELS 16
#define CAL_MAX_CONC 1024
#define CAL_MAX_ROWS 65536u
#define CAL_MAX_REQUESTS 100000 /* per level: the samples a child hands back */
#define CAL_MIN_REQUESTS 20     /* per level, however slow the worker */
#define CAL_PILOT 3             /* warm-up requests before the first level, not counted */
#define CAL_GROW 0.10           /* throughput that grows less than this has stopped growing */
#define CAL_METRICS_MAX (8u << 20)
#define Z95 1.6448536269514722  /* the standard normal's 95th percentile, as the sim's */

typedef struct {
    const char *url, *model, *out, *pool_name, *kind;
    unsigned rows, backends;
    unsigned conc[CAL_MAX_LEVELS];
    size_t n_conc;
    double duration_s, timeout_s;
    char host[256], port[8];
} cal_opts;

/* What a level's child hands back: this head, then n_ok latencies (seconds). */
typedef struct {
    uint64_t n_ok, n_fail;
    double span_s;
    int first_status; /* of the first failure: HTTP status, 0 none, -1 no reply */
    int rc;           /* load_run's exit code */
} cal_head;

typedef struct {
    unsigned conc;
    size_t n;
    double *lat; /* owned, sorted */
    double thr;  /* replies per second */
} cal_level;

static void usage(FILE *out)
{
    fprintf(out,
            "usage: tierbench calibrate --url http://WORKER:PORT --model M [options]\n\n"
            "Measures one worker's service time for one model, closed loop, and writes the sim pool it fits.\n"
            "  --rows B            rows per request (default 1; 1..%u)\n"
            "  --concurrency LIST  requests in flight, increasing, e.g. 1,2,4,8 (default; 1 is added when\n"
            "                      missing: the service time is measured there); the throughput's knee is the slots\n"
            "  --duration S        seconds per level, roughly (default 5)\n"
            "  --timeout S         per request (default 30)\n"
            "  --kind gpu|cpu      the pool's kind (default cpu)   --pool-name NAME (default: the kind)\n"
            "  --backends N        backends of this kind in the pool (default 1)\n"
            "  --out FILE          the config (default stdout); `tierbench sim --config FILE` reads it\n",
            CAL_MAX_ROWS);
}

/* ---- options ------------------------------------------------------------------------- */

static int uint_arg(const char *key, const char *v, unsigned lo, unsigned hi, unsigned *out, char *err, size_t errlen)
{
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (end == v || *end || errno || x < lo || x > hi)
        return ts_fail(err, errlen, "--%s: '%.40s' is not %u..%u", key, v, lo, hi);
    *out = (unsigned)x;
    return 0;
}

static int secs_arg(const char *key, const char *v, double lo, double hi, double *out, char *err, size_t errlen)
{
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (end == v || *end || errno || !isfinite(x) || x < lo || x > hi)
        return ts_fail(err, errlen, "--%s: '%.40s' is not seconds in [%g, %g]", key, v, lo, hi);
    *out = x;
    return 0;
}

/* A name the trace format and the sim's pool spec both take: 1..63 of [A-Za-z0-9_.:-]. */
static bool name_ok(const char *s)
{
    size_t n = strlen(s);
    return n >= 1 && n <= 63 && strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.:-") == n;
}

static int conc_list(cal_opts *o, const char *v, char *err, size_t errlen)
{
    char buf[256];
    if (strlen(v) >= sizeof buf)
        return ts_fail(err, errlen, "--concurrency: longer than %zu bytes", sizeof buf - 1);
    snprintf(buf, sizeof buf, "%s", v);
    o->n_conc = 0;
    char *save = NULL;
    for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        unsigned c = 0;
        if (o->n_conc == CAL_MAX_LEVELS - 1)
            return ts_fail(err, errlen, "--concurrency: at most %d levels", CAL_MAX_LEVELS - 1);
        if (uint_arg("concurrency", t, 1, CAL_MAX_CONC, &c, err, errlen) != 0) return -1;
        if (o->n_conc && c <= o->conc[o->n_conc - 1])
            return ts_fail(err, errlen, "--concurrency: '%.60s' does not increase", v);
        o->conc[o->n_conc++] = c;
    }
    if (!o->n_conc)
        return ts_fail(err, errlen, "--concurrency: needs a list such as 1,2,4,8");
    /* the service time is measured with one request in flight */
    if (o->conc[0] != 1) {
        memmove(o->conc + 1, o->conc, o->n_conc * sizeof o->conc[0]);
        o->conc[0] = 1;
        o->n_conc++;
    }
    return 0;
}

static int option(cal_opts *o, const char *key, const char *v, char *err, size_t errlen)
{
    if (!strcmp(key, "url")) o->url = v;
    else if (!strcmp(key, "model")) o->model = v;
    else if (!strcmp(key, "out")) o->out = v;
    else if (!strcmp(key, "pool-name")) o->pool_name = v;
    else if (!strcmp(key, "kind")) {
        if (strcmp(v, "gpu") != 0 && strcmp(v, "cpu") != 0)
            return ts_fail(err, errlen, "--kind: '%.40s' is not gpu or cpu", v);
        o->kind = v;
    } else if (!strcmp(key, "rows")) return uint_arg(key, v, 1, CAL_MAX_ROWS, &o->rows, err, errlen);
    else if (!strcmp(key, "backends")) return uint_arg(key, v, 1, 256, &o->backends, err, errlen);
    else if (!strcmp(key, "concurrency")) return conc_list(o, v, err, errlen);
    else if (!strcmp(key, "duration")) return secs_arg(key, v, 0.01, 3600, &o->duration_s, err, errlen);
    else if (!strcmp(key, "timeout")) return secs_arg(key, v, 0.001, 3600, &o->timeout_s, err, errlen);
    else {
        return ts_fail(err, errlen, "unknown option --%.60s (see tierbench calibrate --help)", key);
    }
    return 0;
}

/* 0 parsed, 1 --help, -1 with a message. */
static int parse(cal_opts *o, int argc, char **argv, char *err, size_t errlen)
{
    for (int i = 2; i < argc; i++) {
        char key[TB_OPT_KEY];
        const char *v;
        int rc = tb_opt(argc, argv, &i, NULL, "calibrate", key, &v, err, errlen);
        if (rc) return rc;
        if (option(o, key, v, err, errlen) != 0) return -1;
    }
    if (!o->url || !o->model)
        return ts_fail(err, errlen, "--url http://WORKER:PORT and --model M are required");
    if (!name_ok(o->model))
        return ts_fail(err, errlen, "--model: '%.60s' is not 1..63 characters of [A-Za-z0-9_.:-]", o->model);
    if (!o->pool_name) o->pool_name = o->kind;
    if (!name_ok(o->pool_name))
        return ts_fail(err, errlen, "--pool-name: '%.60s' is not 1..63 characters of [A-Za-z0-9_.:-]", o->pool_name);
    if (strlen(o->url) > 512)
        return ts_fail(err, errlen, "--url: longer than 512 bytes");
    if (o->out && !*o->out)
        return ts_fail(err, errlen, "--out: needs a file");
    return lb_parse_url(o->url, o->host, sizeof o->host, o->port, sizeof o->port, err, errlen);
}

/* ---- one level, in a child ------------------------------------------------------------ */

typedef struct {
    int fd;
    int rc; /* 0, or 1 when the pipe broke */
} child_ctx;

static int write_all(int fd, const void *p, size_t n)
{
    const char *b = p;
    while (n) {
        ssize_t w = write(fd, b, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        b += w;
        n -= (size_t)w;
    }
    return 0;
}

static void on_done(void *ctx, const load_result *res)
{
    child_ctx *c = ctx;
    cal_head h = {.span_s = res->span_s, .first_status = 0};
    for (size_t i = 0; i < res->n; i++) {
        const load_rec *q = &res->rec[i];
        if (q->err == LE_NONE && q->status == 200) h.n_ok++;
        else if (h.n_fail++ == 0) h.first_status = q->err == LE_NONE ? q->status : -1;
    }
    if (write_all(c->fd, &h, sizeof h) != 0) goto broke;
    for (size_t i = 0; i < res->n; i++) {
        const load_rec *q = &res->rec[i];
        double lat = q->done - q->sent;
        if (q->err == LE_NONE && q->status == 200 && write_all(c->fd, &lat, sizeof lat) != 0) goto broke;
    }
    return;
broke:
    c->rc = 1;
}

/* Writes n requests of the model, all due at 0, as a trace file; its path into path. */
static int write_trace(const cal_opts *o, size_t n, char *path, size_t cap, char *err, size_t errlen)
{
    const char *dir = getenv("TMPDIR");
    snprintf(path, cap, "%s/tierbench-calibrate-XXXXXX", dir && *dir ? dir : "/tmp");
    int fd = mkstemp(path);
    if (fd < 0)
        return ts_fail(err, errlen, "%s: %s", path, strerror(errno));
    FILE *f = fdopen(fd, "w");
    if (!f) {
        close(fd);
        unlink(path);
        return ts_fail(err, errlen, "%s: %s", path, strerror(errno));
    }
    for (size_t i = 0; i < n; i++) fprintf(f, "0,normal,calibrate,public,%s,%u\n", o->model, o->rows);
    if (ferror(f) | fclose(f)) {
        unlink(path);
        return ts_fail(err, errlen, "%s: could not write", path);
    }
    return 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Runs n requests at concurrency conc; on 0, lv holds the sorted latencies. */
static int run_level(const cal_opts *o, unsigned conc, size_t n, cal_level *lv, char *err, size_t errlen)
{
    char trace_path[512], conns[16], timeout[32];
    int fds[2] = {-1, -1};
    pid_t pid = -1;
    int rc = -1;
    cal_head h = {0};
    memset(lv, 0, sizeof *lv);
    lv->conc = conc;
    if (write_trace(o, n, trace_path, sizeof trace_path, err, errlen) != 0) return -1;
    snprintf(conns, sizeof conns, "%u", conc);
    snprintf(timeout, sizeof timeout, "%g", o->timeout_s);
    if (pipe(fds) != 0) {
        snprintf(err, errlen, "pipe: %s", strerror(errno));
        goto out;
    }
    fflush(stdout);
    fflush(stderr);
    pid = fork();
    if (pid < 0) {
        snprintf(err, errlen, "fork: %s", strerror(errno));
        goto out;
    }
    if (pid == 0) {
        close(fds[0]);
        /* load_run takes a mutable argv, as main's */
        char url[600], a0[] = "tierbench", a1[] = "calibrate", k_url[] = "--url", k_trace[] = "--trace",
             k_conns[] = "--connections", k_timeout[] = "--timeout", k_from[] = "--latency-from", v_from[] = "send",
             k_quiet[] = "--quiet";
        snprintf(url, sizeof url, "%s", o->url);
        char *argv[] = {a0, a1, k_url, url, k_trace, trace_path, k_conns, conns, k_timeout, timeout, k_from, v_from,
                        k_quiet, NULL};
        child_ctx c = {.fd = fds[1]};
        load_hooks hk = {.ctx = &c, .on_done = on_done};
        int lrc = load_run((int)(sizeof argv / sizeof argv[0]) - 1, argv, &hk);
        close(fds[1]);
        _exit(lrc ? lrc : c.rc);
    }
    close(fds[1]);
    fds[1] = -1;
    size_t got = 0, cap = 0;
    bool head_ok = false, too_many = false;
    for (;;) {
        if (!head_ok) {
            ssize_t r = read(fds[0], (char *)&h + got, sizeof h - got);
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0) break;
            got += (size_t)r;
            if (got < sizeof h) continue;
            head_ok = true;
            got = 0;
            if (h.n_ok > n || h.n_ok > CAL_MAX_REQUESTS) {
                too_many = true;
                break;
            }
            cap = (size_t)h.n_ok;
            lv->lat = calloc(cap ? cap : 1, sizeof *lv->lat);
            if (!lv->lat) break;
            continue;
        }
        size_t want = cap * sizeof *lv->lat - got;
        if (!want) break;
        ssize_t r = read(fds[0], (char *)lv->lat + got, want);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        got += (size_t)r;
    }
    close(fds[0]);
    fds[0] = -1;
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    pid = -1;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        snprintf(err, errlen, "concurrency %u: the load run failed (exit %d; its message is above)", conc,
                 WIFEXITED(status) ? WEXITSTATUS(status) : -1);
        goto out;
    }
    if (!head_ok || too_many || !lv->lat || got != cap * sizeof *lv->lat) {
        snprintf(err, errlen, "concurrency %u: the load run's results came back short", conc);
        goto out;
    }
    if (h.n_fail) {
        snprintf(err, errlen, "concurrency %u: %llu of %zu requests failed (the first: %s %d); a calibration needs "
                 "every request served", conc, (unsigned long long)h.n_fail, n,
                 h.first_status < 0 ? "no reply," : "HTTP", h.first_status);
        goto out;
    }
    lv->n = cap;
    qsort(lv->lat, lv->n, sizeof *lv->lat, cmp_double);
    lv->thr = h.span_s > 0 ? (double)lv->n / h.span_s : 0;
    rc = 0;
out:
    if (fds[0] >= 0) close(fds[0]);
    if (fds[1] >= 0) close(fds[1]);
    unlink(trace_path);
    if (rc != 0) {
        free(lv->lat);
        lv->lat = NULL;
    }
    return rc;
}

/* ---- the worker's own figures ---------------------------------------------------------- */

/* The sum and count of tierserve_compute_duration_seconds for the model (every version);
 * -1 when the worker has no such metric (not a tierserve worker). */
static int compute_totals(const cal_opts *o, double *sum, double *count)
{
    lb_reply rep;
    char err[300], label[100];
    *sum = *count = 0;
    if (lb_http(o->host, o->port, "GET", "/metrics", NULL, NULL, 0, CAL_METRICS_MAX, o->timeout_s, &rep, err,
                sizeof err) != 0)
        return -1;
    int rc = -1;
    if (rep.status != 200) goto out;
    snprintf(label, sizeof label, "model=\"%s\"", o->model);
    for (const char *l = rep.body; l && *l;) {
        const char *eol = strchr(l, '\n');
        size_t len = eol ? (size_t)(eol - l) : strlen(l);
        static const char sum_name[] = "tierserve_compute_duration_seconds_sum{",
                          count_name[] = "tierserve_compute_duration_seconds_count{";
        bool is_sum = !strncmp(l, sum_name, sizeof sum_name - 1);
        bool is_count = !strncmp(l, count_name, sizeof count_name - 1);
        const char *close_brace = memchr(l, '}', len);
        const char *lab = (is_sum || is_count) && close_brace ? strstr(l, label) : NULL;
        if (lab && lab < close_brace && (lab[-1] == '{' || lab[-1] == ',')) {
            double v = strtod(close_brace + 1, NULL);
            if (is_sum) *sum += v;
            else *count += v;
            rc = 0;
        }
        l = eol ? eol + 1 : NULL;
    }
out:
    lb_reply_free(&rep);
    return rc;
}

/* The worker's own warm-up time for the model (its /v2/status models[].warmup_ms), in
 * seconds, or -1: what the simulator's cold start takes for warm-up (issue 26). */
static double worker_warmup_s(const cal_opts *o)
{
    lb_reply rep;
    char err[300];
    if (lb_http(o->host, o->port, "GET", "/v2/status", NULL, NULL, 0, CAL_METRICS_MAX, o->timeout_s, &rep, err,
                sizeof err) != 0)
        return -1;
    double out = -1;
    json_t *doc = rep.status == 200 && rep.body ? json_loads(rep.body, 0, NULL) : NULL;
    json_t *models = json_object_get(doc, "models");
    for (size_t i = 0; i < json_array_size(models); i++) {
        json_t *m = json_array_get(models, i);
        json_t *w = json_object_get(m, "warmup_ms");
        const char *name = json_string_value(json_object_get(m, "name"));
        if (name && !strcmp(name, o->model) && json_is_number(w) && json_number_value(w) >= 0)
            out = json_number_value(w) / 1e3;
    }
    json_decref(doc);
    lb_reply_free(&rep);
    return out;
}

/* ---- the fit --------------------------------------------------------------------------- */

static double quantile(const double *s, size_t n, double q)
{
    /* nearest rank, as the sim's and the router's p95 */
    size_t k = (size_t)ceil(q * (double)n);
    return s[k ? k - 1 : 0];
}

static double mean_of(const double *s, size_t n)
{
    double t = 0;
    for (size_t i = 0; i < n; i++) t += s[i];
    return n ? t / (double)n : 0;
}

typedef struct {
    double mean, p95;   /* what the pool line says (p95 clamped into the lognormal's range) */
    double mu, sigma;   /* the lognormal the sim draws from those */
    double ks_exp, ks_logn;
    bool lognormal;
    const char *clamp;  /* why the p95 was moved, or NULL */
} cal_fit;

static double cdf_exp(double x, const cal_fit *f) { return x <= 0 ? 0 : 1 - exp(-x / f->mean); }
static double cdf_logn(double x, const cal_fit *f)
{
    return x <= 0 ? 0 : 0.5 * erfc(-(log(x) - f->mu) / (f->sigma * sqrt(2.0)));
}

/* The Kolmogorov-Smirnov distance between the sorted samples and a CDF. */
static double ks(const double *s, size_t n, double (*cdf)(double, const cal_fit *), const cal_fit *f)
{
    double d = 0;
    for (size_t i = 0; i < n; i++) {
        double F = cdf(s[i], f);
        double lo = F - (double)i / (double)n, hi = (double)(i + 1) / (double)n - F;
        if (lo > d) d = lo;
        if (hi > d) d = hi;
    }
    return d;
}

static void fit(const double *s, size_t n, cal_fit *f)
{
    memset(f, 0, sizeof *f);
    f->mean = mean_of(s, n);
    f->p95 = quantile(s, n, 0.95);
    /* the sim solves sigma from ln(p95/mean), real only in (0, z95^2/2] */
    double hi = exp(Z95 * Z95 / 2) * (1 - 1e-9);
    if (f->p95 < f->mean * 1.01) {
        f->clamp = f->p95 < f->mean
                       ? "the p95 was below the mean (a few slow outliers carry the mean): raised to 1.01 x the mean, as "
                         "the sim's lognormal needs p95 > mean"
                       : "the p95 was within 1 % of the mean: raised to 1.01 x it, as the sim's lognormal needs p95 > mean";
        f->p95 = f->mean * 1.01;
    } else if (f->p95 > f->mean * hi) {
        f->p95 = f->mean * hi;
        f->clamp = "the p95 was over 3.87 x the mean, the most a lognormal with that mean can have: clamped";
    }
    double d = log(f->p95 / f->mean);
    f->sigma = Z95 - sqrt(Z95 * Z95 - 2 * d);
    f->mu = log(f->mean) - f->sigma * f->sigma / 2;
    f->ks_exp = ks(s, n, cdf_exp, f);
    f->ks_logn = ks(s, n, cdf_logn, f);
    f->lognormal = f->ks_logn <= f->ks_exp;
}

/* The knee: the first level after which the throughput grows less than CAL_GROW. */
static size_t knee(const cal_level *lv, size_t n, bool *still_growing)
{
    for (size_t k = 0; k + 1 < n; k++)
        if (lv[k + 1].thr < lv[k].thr * (1 + CAL_GROW)) {
            *still_growing = false;
            return k;
        }
    *still_growing = n > 1;
    return n - 1;
}

/* ---- the report ------------------------------------------------------------------------ */

static void report(FILE *f, const char *pfx, const cal_opts *o, const cal_level *lv, size_t n_lv, const cal_fit *ft,
                   double worker_mean, size_t slots_at, bool still_growing)
{
    const cal_level *one = &lv[0];
    fprintf(f, "%stierbench calibrate: %s, model %s, %u row%s a request\n", pfx, o->url, o->model, o->rows,
            o->rows == 1 ? "" : "s");
    fprintf(f, "%sservice time at concurrency 1 (send to reply, %zu requests): mean %.3f ms, p50 %.3f, p95 %.3f, "
            "p99 %.3f, max %.3f ms\n", pfx, one->n, ft->mean * 1e3, quantile(one->lat, one->n, 0.5) * 1e3,
            quantile(one->lat, one->n, 0.95) * 1e3, quantile(one->lat, one->n, 0.99) * 1e3,
            one->lat[one->n - 1] * 1e3);
    if (worker_mean >= 0)
        fprintf(f, "%sthe worker's own compute time (tierserve_compute_duration_seconds) over those: mean %.3f ms; "
                "the rest is HTTP and the worker's queue\n", pfx, worker_mean * 1e3);
    else
        fprintf(f, "%sthe worker's /metrics has no tierserve_compute_duration_seconds for %s: not compared\n", pfx,
                o->model);
    fprintf(f, "%sfit: lognormal KS distance %.3f, exponential %.3f: %s\n", pfx, ft->ks_logn, ft->ks_exp,
            ft->lognormal ? "lognormal, the closer fit (the exponential's spread, p95 = 3 x mean, is wider than measured)"
                          : "exponential, the closer fit (the spread is as wide as memoryless service)");
    if (ft->clamp) fprintf(f, "%s%s\n", pfx, ft->clamp);
    fprintf(f, "%sthroughput (replies/s) by concurrency:", pfx);
    for (size_t k = 0; k < n_lv; k++) fprintf(f, " %u: %.1f%s", lv[k].conc, lv[k].thr, k + 1 < n_lv ? "," : "\n");
    if (still_growing)
        fprintf(f, "%sslots %u: the throughput still grew at the highest concurrency; raise --concurrency to find "
                "the knee\n", pfx, lv[slots_at].conc);
    else
        fprintf(f, "%sslots %u: beyond it the throughput grew less than %.0f %%\n", pfx, lv[slots_at].conc,
                CAL_GROW * 100);
}

static int write_config(const cal_opts *o, const cal_level *lv, size_t n_lv, const cal_fit *ft, double worker_mean,
                        size_t slots_at, bool still_growing, double warmup_s)
{
    bool std = !o->out || !strcmp(o->out, "-");
    FILE *f = std ? stdout : fopen(o->out, "w");
    if (!f) {
        fprintf(stderr, "tierbench: %s: %s\n", o->out, strerror(errno));
        return 1;
    }
    report(f, "# ", o, lv, n_lv, ft, worker_mean, slots_at, still_growing);
    fprintf(f, "# mean_ms and p95_ms are for requests of %u row%s (row_cost=0): replay traces of that size\n", o->rows,
            o->rows == 1 ? "" : "s");
    if (warmup_s >= 0)
        fprintf(f, "# warmup_s: the worker's own warm-up of %s (/v2/status warmup_ms), the last part of an "
                   "autoscaled backend's cold start; provision_s, pull_s and load_s stay the simulator's defaults\n",
                o->model);
    fprintf(f, "pool kind=%s,name=%s,backends=%u,slots=%u,dist=%s,mean_ms=%.4f,p95_ms=%.4f,row_cost=0", o->kind,
            o->pool_name, o->backends, lv[slots_at].conc, ft->lognormal ? "lognormal" : "exp", ft->mean * 1e3,
            ft->p95 * 1e3);
    if (warmup_s >= 0) fprintf(f, ",warmup_s=%.3f", warmup_s);
    fputc('\n', f);
    int bad = ferror(f);
    bad |= std ? fflush(f) : fclose(f);
    if (bad) {
        fprintf(stderr, "tierbench: %s: could not write\n", std ? "stdout" : o->out);
        return 1;
    }
    if (!std) {
        report(stdout, "", o, lv, n_lv, ft, worker_mean, slots_at, still_growing);
        printf("wrote %s\n", o->out);
    }
    return fflush(stdout) != 0;
}

static size_t clamp_n(double x, size_t lo)
{
    if (!(x < CAL_MAX_REQUESTS)) return CAL_MAX_REQUESTS;
    size_t n = (size_t)ceil(x);
    return n < lo ? lo : n;
}

int calibrate_main(int argc, char **argv)
{
    static cal_opts o;
    cal_level lv[CAL_MAX_LEVELS];
    size_t n_lv = 0;
    char err[1200];
    int rc = 1;
    memset(&o, 0, sizeof o);
    o.rows = 1;
    o.backends = 1;
    o.kind = "cpu";
    o.duration_s = 5;
    o.timeout_s = 30;
    o.conc[0] = 1, o.conc[1] = 2, o.conc[2] = 4, o.conc[3] = 8;
    o.n_conc = 4;
    int p = parse(&o, argc, argv, err, sizeof err);
    int done_rc = tb_parsed(p, usage, err);
    if (done_rc >= 0) return done_rc;
    /* warm-up: the first requests pay for connections, caches and lazy initialisation */
    cal_level pilot;
    if (run_level(&o, 1, CAL_PILOT, &pilot, err, sizeof err) != 0) {
        fprintf(stderr, "tierbench: warm-up: %s\n", err);
        return 1;
    }
    double thr = pilot.thr;
    free(pilot.lat);
    double sum0 = 0, cnt0 = 0, sum1 = 0, cnt1 = 0;
    bool have_metrics = compute_totals(&o, &sum0, &cnt0) == 0;
    for (size_t k = 0; k < o.n_conc; k++) {
        /* as many requests as the last level's throughput, scaled by the concurrency, serves
         * in --duration: a level whose throughput has stopped growing runs longer, at most by
         * the ratio of the two concurrencies */
        double scale = k ? (double)o.conc[k] / o.conc[k - 1] : 1;
        size_t n = clamp_n(o.duration_s * thr * scale, CAL_MIN_REQUESTS > 2 * o.conc[k] ? CAL_MIN_REQUESTS : 2 * o.conc[k]);
        if (run_level(&o, o.conc[k], n, &lv[n_lv], err, sizeof err) != 0) {
            fprintf(stderr, "tierbench: %s\n", err);
            goto out;
        }
        thr = lv[n_lv].thr;
        n_lv++;
        if (k == 0 && have_metrics) have_metrics = compute_totals(&o, &sum1, &cnt1) == 0;
    }
    double worker_mean = have_metrics && cnt1 > cnt0 ? (sum1 - sum0) / (cnt1 - cnt0) : -1;
    cal_fit ft;
    fit(lv[0].lat, lv[0].n, &ft);
    bool still_growing;
    size_t slots_at = knee(lv, n_lv, &still_growing);
    rc = write_config(&o, lv, n_lv, &ft, worker_mean, slots_at, still_growing, worker_warmup_s(&o));
out:
    for (size_t k = 0; k < n_lv; k++) free(lv[k].lat);
    return rc;
}
