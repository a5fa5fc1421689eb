#include "trace.h"
#include "err.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "route.h"

static const char *const k_prio[PRIO_COUNT] = {"urgent", "normal", "batch"};

const char *trace_prio_name(priority_class p) { return k_prio[p]; }

bool trace_name_ok(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n >= TRACE_NAME_LEN) return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
                  c == '.' || c == ':' || c == '-';
        if (!ok) return false;
    }
    return true;
}

int trace_intern(char tab[][TRACE_NAME_LEN], size_t *n, const char *name)
{
    for (size_t i = 0; i < *n; i++)
        if (strcmp(tab[i], name) == 0) return (int)i;
    if (*n == TRACE_MAX_NAMES) return -1;
    snprintf(tab[*n], TRACE_NAME_LEN, "%s", name);
    return (int)(*n)++;
}

static int parse_double(const char *s, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || *end || errno || !isfinite(v)) return -1;
    *out = v;
    return 0;
}

static int parse_u64(const char *s, uint64_t *out)
{
    if (!*s || *s == '-' || *s == '+') return -1;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (*end || errno) return -1;
    *out = v;
    return 0;
}

static int parse_prio(const char *s, priority_class *p)
{
    for (int i = 0; i < PRIO_COUNT; i++)
        if (strcmp(s, k_prio[i]) == 0) {
            *p = (priority_class)i;
            return 0;
        }
    return -1;
}

/* Splits line at commas into at most max fields (in place); returns how many, or max + 1
 * when there are more. */
static size_t split(char *line, char **f, size_t max)
{
    size_t n = 0;
    for (char *p = line;;) {
        if (n == max) return max + 1;
        f[n++] = p;
        char *c = strchr(p, ',');
        if (!c) return n;
        *c = '\0';
        p = c + 1;
    }
}

/* Room for one more arrival: the array doubles, up to TRACE_MAX_REQUESTS. */
static int grow(trace *t)
{
    if (t->n < t->cap) return 0;
    if (t->cap == TRACE_MAX_REQUESTS) return -1;
    size_t cap = t->cap ? t->cap * 2 : 4096;
    if (cap > TRACE_MAX_REQUESTS) cap = TRACE_MAX_REQUESTS;
    trace_arrival *a = realloc(t->a, cap * sizeof *a);
    if (!a) return -1;
    t->a = a;
    t->cap = cap;
    return 0;
}

static int add_arrival(trace *t, const trace_arrival *a)
{
    if (grow(t) != 0) return -1;
    t->a[t->n++] = *a;
    return 0;
}

static int parse_event(trace_event *ev, double at, char **f, size_t nf, char *err, size_t errlen)
{
    if (nf != 5) return ts_fail(err, errlen, "an event line has 5 fields (t_s,event,kill|revive,POOL,INDEX|all), not %zu", nf);
    ev->t = at;
    if (strcmp(f[2], "kill") == 0) ev->kill = true;
    else if (strcmp(f[2], "revive") == 0) ev->kill = false;
    else return ts_fail(err, errlen, "event: '%.40s' is not kill or revive", f[2]);
    if (!trace_name_ok(f[3])) return ts_fail(err, errlen, "event: pool '%.40s' is not a name", f[3]);
    snprintf(ev->pool, sizeof ev->pool, "%s", f[3]);
    uint64_t idx;
    if (strcmp(f[4], "all") == 0) ev->backend = -1;
    else if (parse_u64(f[4], &idx) == 0 && idx < 4096) ev->backend = (int)idx;
    else return ts_fail(err, errlen, "event: backend '%.40s' is not an index or all", f[4]);
    return 0;
}

static int parse_line(trace *t, char *line, double *last, char *err, size_t errlen)
{
    char *f[8] = {0}; /* split_fields fills what the line has; its count is checked */
    size_t nf = split(line, f, 7);
    double at;
    if (parse_double(f[0], &at) != 0 || at < 0) return ts_fail(err, errlen, "t_s: '%.40s' is not a time >= 0", f[0]);
    if (at < *last)
        return ts_fail(err, errlen, "t_s: %g is before the line above (%g): the trace must be in time order", at, *last);
    *last = at;
    if (nf >= 2 && strcmp(f[1], "event") == 0) {
        if (t->n_ev == TRACE_MAX_EVENTS) return ts_fail(err, errlen, "more than %d event lines", TRACE_MAX_EVENTS);
        if (parse_event(&t->ev[t->n_ev], at, f, nf, err, errlen) != 0) return -1;
        t->n_ev++;
        return 0;
    }
    if (nf != 6 && nf != 7)
        return ts_fail(err, errlen, "a request line has 6 or 7 fields (t_s,priority,tenant,data_class,model,size"
                                    "[,conversation])");
    trace_arrival a = {.t = at};
    priority_class p;
    if (parse_prio(f[1], &p) != 0) return ts_fail(err, errlen, "priority: '%.40s' is not urgent, normal or batch", f[1]);
    a.prio = (uint8_t)p;
    if (!trace_name_ok(f[2])) return ts_fail(err, errlen, "tenant: '%.40s' is not 1..63 of [A-Za-z0-9_.:-]", f[2]);
    if (strcmp(f[3], "sensitive") == 0) a.sensitive = true;
    else if (strcmp(f[3], "public") != 0) return ts_fail(err, errlen, "data_class: '%.40s' is not public or sensitive", f[3]);
    if (!trace_name_ok(f[4])) return ts_fail(err, errlen, "model: '%.40s' is not 1..63 of [A-Za-z0-9_.:-]", f[4]);
    uint64_t size;
    if (parse_u64(f[5], &size) != 0 || size < 1 || size > TRACE_MAX_SIZE)
        return ts_fail(err, errlen, "size: '%.40s' is not 1..%u", f[5], TRACE_MAX_SIZE);
    a.size = (uint32_t)size;
    uint64_t conv = 0;
    if (nf == 7 && f[6][0] && (parse_u64(f[6], &conv) != 0 || conv > UINT32_MAX))
        return ts_fail(err, errlen, "conversation: '%.40s' is not 0..%u", f[6], (unsigned)UINT32_MAX);
    a.conv = (uint32_t)conv;
    int ti = trace_intern(t->tenants, &t->n_tenants, f[2]);
    int mi = trace_intern(t->models, &t->n_models, f[4]);
    if (ti < 0) return ts_fail(err, errlen, "tenant: more than %d distinct tenants", TRACE_MAX_NAMES);
    if (mi < 0) return ts_fail(err, errlen, "model: more than %d distinct models", TRACE_MAX_NAMES);
    a.tenant = (uint8_t)ti;
    a.model = (uint8_t)mi;
    if (add_arrival(t, &a) != 0) return ts_fail(err, errlen, "more than %d requests (or out of memory)", TRACE_MAX_REQUESTS);
    return 0;
}

/* One line into buf (without its newline): 1 read, 0 at the end, -1 too long, -2 a NUL. */
static int read_line(FILE *f, char *buf, size_t cap, size_t *len)
{
    size_t n = 0;
    int c = EOF;
    while ((c = getc(f)) != EOF && c != '\n') {
        if (c == '\0') return -2;
        if (n + 1 >= cap) return -1;
        buf[n++] = (char)c;
    }
    if (c == EOF && n == 0) return 0;
    if (n && buf[n - 1] == '\r') n--;
    buf[n] = '\0';
    *len = n;
    return 1;
}

int trace_load(const char *path, trace *t, char *err, size_t errlen)
{
    memset(t, 0, sizeof *t);
    FILE *f = fopen(path, "r");
    if (!f) return ts_fail(err, errlen, "%s: %s", path, strerror(errno));
    char line[TRACE_LINE_MAX + 1];
    char msg[256];
    size_t lineno = 0, n = 0;
    double last = 0;
    int rc = 0, got;
    while ((got = read_line(f, line, sizeof line, &n)) != 0) {
        lineno++;
        if (got < 0) {
            rc = ts_fail(err, errlen, "%s:%zu: %s", path, lineno,
                      got == -1 ? "line longer than 1024 bytes" : "a NUL byte in the line");
            goto out;
        }
        if (n == 0 || line[0] == '#' || strncmp(line, "t_s,", 4) == 0) continue;
        if (parse_line(t, line, &last, msg, sizeof msg) != 0) {
            rc = ts_fail(err, errlen, "%s:%zu: %s", path, lineno, msg);
            goto out;
        }
    }
    if (ferror(f)) rc = ts_fail(err, errlen, "%s: read error", path);
out:
    fclose(f);
    if (rc != 0) trace_free(t);
    return rc;
}

void trace_write(const trace *t, FILE *out)
{
    bool convs = false; /* the column only when some request has one: older readers read the rest */
    for (size_t k = 0; k < t->n && !convs; k++) convs = t->a[k].conv != 0;
    fputs(convs ? "t_s,priority,tenant,data_class,model,size,conversation\n" : "t_s,priority,tenant,data_class,model,size\n",
          out);
    size_t i = 0, e = 0;
    while (i < t->n || e < t->n_ev) {
        /* events first at equal times, so that a replay applies them before the arrival */
        if (e < t->n_ev && (i == t->n || t->ev[e].t <= t->a[i].t)) {
            const trace_event *ev = &t->ev[e++];
            if (ev->backend < 0) fprintf(out, "%.4f,event,%s,%s,all\n", ev->t, ev->kill ? "kill" : "revive", ev->pool);
            else fprintf(out, "%.4f,event,%s,%s,%d\n", ev->t, ev->kill ? "kill" : "revive", ev->pool, ev->backend);
            continue;
        }
        const trace_arrival *a = &t->a[i++];
        fprintf(out, "%.4f,%s,%s,%s,%s,%u", a->t, k_prio[a->prio], t->tenants[a->tenant],
                a->sensitive ? "sensitive" : "public", t->models[a->model], a->size);
        if (convs) fprintf(out, ",%u", a->conv);
        fputc('\n', out);
    }
}

void trace_free(trace *t)
{
    free(t->a);
    t->a = NULL;
    t->n = t->cap = 0;
}

double trace_span(const trace *t)
{
    double s = t->n ? t->a[t->n - 1].t : 0;
    for (size_t e = 0; e < t->n_ev; e++)
        if (t->ev[e].t > s) s = t->ev[e].t;
    return s;
}

/* ---- generation --------------------------------------------------------------------- */

void trace_gen_defaults(trace_gen *g)
{
    memset(g, 0, sizeof *g);
    g->rate_rps = 10;
    g->duration_s = 60;
    g->mix[PRIO_URGENT] = 0.1, g->mix[PRIO_NORMAL] = 0.7, g->mix[PRIO_BATCH] = 0.2;
    snprintf(g->tenants[0], TRACE_NAME_LEN, "acme");
    g->tenant_share[0] = 1;
    g->n_tenants = 1;
    snprintf(g->model, sizeof g->model, "demo");
    g->conversations = 64;
    g->size_max = 1;
    g->seed = 1;
}

/* Parses "a:b:c" into up to max numbers; returns how many, *bad on a non-number or more. */
static size_t numbers(const char *s, double *v, size_t max, bool *bad)
{
    char buf[256];
    snprintf(buf, sizeof buf, "%s", s);
    size_t n = 0;
    *bad = false;
    char *save = NULL;
    for (char *tok = strtok_r(buf, ":", &save); tok; tok = strtok_r(NULL, ":", &save)) {
        if (n == max || parse_double(tok, &v[n]) != 0) {
            *bad = true;
            return n;
        }
        n++;
    }
    return n;
}

static int gen_event(trace_gen *g, bool kill, const char *value, char *err, size_t errlen)
{
    char buf[256];
    snprintf(buf, sizeof buf, "%s", value);
    char *save = NULL;
    char *ts = strtok_r(buf, ":", &save), *pool = strtok_r(NULL, ":", &save), *idx = strtok_r(NULL, ":", &save);
    const char *opt = kill ? "--kill" : "--revive";
    double at;
    if (!ts || !pool || strtok_r(NULL, ":", &save) || parse_double(ts, &at) != 0 || at < 0 || !trace_name_ok(pool))
        return ts_fail(err, errlen, "%s: '%.80s' is not T:POOL[:INDEX]", opt, value);
    if (g->n_ev == TRACE_MAX_EVENTS) return ts_fail(err, errlen, "%s: more than %d events", opt, TRACE_MAX_EVENTS);
    trace_event *ev = &g->ev[g->n_ev];
    ev->t = at;
    ev->kill = kill;
    snprintf(ev->pool, sizeof ev->pool, "%s", pool);
    ev->backend = -1;
    uint64_t k;
    if (idx && strcmp(idx, "all") != 0) {
        if (parse_u64(idx, &k) != 0 || k >= 4096) return ts_fail(err, errlen, "%s: index '%.40s' is not 0..4095", opt, idx);
        ev->backend = (int)k;
    }
    g->n_ev++;
    return 0;
}

static int gen_mix(trace_gen *g, const char *value, char *err, size_t errlen)
{
    char buf[256];
    snprintf(buf, sizeof buf, "%s", value);
    double mix[PRIO_COUNT] = {0, 0, 0};
    char *save = NULL;
    for (char *kv = strtok_r(buf, ",", &save); kv; kv = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(kv, '=');
        priority_class p;
        double v;
        if (!eq) return ts_fail(err, errlen, "--mix: '%.40s' is not PRIORITY=SHARE", kv);
        *eq = '\0';
        if (parse_prio(kv, &p) != 0) return ts_fail(err, errlen, "--mix: '%.40s' is not urgent, normal or batch", kv);
        if (parse_double(eq + 1, &v) != 0 || v < 0) return ts_fail(err, errlen, "--mix: %s: '%.40s' is not a share >= 0", kv, eq + 1);
        mix[p] = v;
    }
    if (mix[0] + mix[1] + mix[2] <= 0) return ts_fail(err, errlen, "--mix: the shares add up to 0");
    memcpy(g->mix, mix, sizeof mix);
    return 0;
}

static int gen_tenants(trace_gen *g, const char *value, char *err, size_t errlen)
{
    char buf[600];
    snprintf(buf, sizeof buf, "%s", value);
    size_t n = 0;
    char *save = NULL;
    for (char *s = strtok_r(buf, ",", &save); s; s = strtok_r(NULL, ",", &save)) {
        if (n == 8) return ts_fail(err, errlen, "--tenants: at most 8");
        /* NAME[:SHARE]: a name may hold ':' itself, so the share is what follows the last one
         * when that parses as a number */
        double share = 1;
        char *colon = strrchr(s, ':');
        if (colon && colon[1]) {
            char *end;
            double v = strtod(colon + 1, &end);
            if (!*end) {
                if (!(v > 0 && v <= 1e6))
                    return ts_fail(err, errlen, "--tenants: '%.40s': the share must be in (0, 1e6]", s);
                share = v;
                *colon = '\0';
            }
        }
        if (!trace_name_ok(s)) return ts_fail(err, errlen, "--tenants: '%.40s' is not 1..63 of [A-Za-z0-9_.:-]", s);
        g->tenant_share[n] = share;
        snprintf(g->tenants[n++], TRACE_NAME_LEN, "%s", s);
    }
    if (n == 0) return ts_fail(err, errlen, "--tenants: none given");
    g->n_tenants = n;
    return 0;
}

int trace_gen_option(trace_gen *g, const char *key, const char *value, char *err, size_t errlen)
{
    double v[5];
    bool bad;
    uint64_t u;
    if (strcmp(key, "fixed") == 0 || strcmp(key, "poisson") == 0) {
        g->fixed = key[0] == 'f';
        return 0;
    }
    if (!value) value = "";
    if (strcmp(key, "rate") == 0) {
        if (parse_double(value, &v[0]) != 0 || v[0] <= 0 || v[0] > 1e6)
            return ts_fail(err, errlen, "--rate: '%.40s' is not a rate in (0, 1e6] per second", value);
        g->rate_rps = v[0];
    } else if (strcmp(key, "duration") == 0) {
        if (parse_double(value, &v[0]) != 0 || v[0] <= 0 || v[0] > 7 * 86400.0)
            return ts_fail(err, errlen, "--duration: '%.40s' is not seconds in (0, 604800]", value);
        g->duration_s = v[0];
    } else if (strcmp(key, "surge") == 0) {
        if (numbers(value, v, 3, &bad) != 3 || bad || v[0] < 0 || v[1] <= 0 || v[2] <= 0 || v[2] > 1000)
            return ts_fail(err, errlen, "--surge: '%.80s' is not START:LEN:FACTOR (factor in (0, 1000])", value);
        if (g->n_surge == TRACE_MAX_SHAPES) return ts_fail(err, errlen, "--surge: at most %d", TRACE_MAX_SHAPES);
        g->surge[g->n_surge].start = v[0], g->surge[g->n_surge].len = v[1], g->surge[g->n_surge].factor = v[2];
        g->n_surge++;
    } else if (strcmp(key, "wave") == 0) {
        if (numbers(value, v, 5, &bad) != 5 || bad || v[0] < 0 || v[1] <= 0 || v[2] <= 0 || v[3] <= 0 || v[4] <= 0 ||
            v[3] > 1000 || v[4] > 1000)
            return ts_fail(err, errlen, "--wave: '%.80s' is not START:LEN:PERIOD:HIGH:LOW (factors in (0, 1000])", value);
        if (g->n_wave == TRACE_MAX_SHAPES) return ts_fail(err, errlen, "--wave: at most %d", TRACE_MAX_SHAPES);
        g->wave[g->n_wave].start = v[0], g->wave[g->n_wave].len = v[1], g->wave[g->n_wave].period = v[2];
        g->wave[g->n_wave].high = v[3], g->wave[g->n_wave].low = v[4];
        g->n_wave++;
    } else if (strcmp(key, "day") == 0) {
        if (parse_double(value, &v[0]) != 0 || v[0] < 0.01 || v[0] > 3600)
            return ts_fail(err, errlen, "--day: '%.40s' is not the seconds one hour takes, in [0.01, 3600]", value);
        g->day_hour_s = v[0];
    } else if (strcmp(key, "mix") == 0) {
        return gen_mix(g, value, err, errlen);
    } else if (strcmp(key, "sensitive") == 0) {
        if (parse_double(value, &v[0]) != 0 || v[0] < 0 || v[0] > 1)
            return ts_fail(err, errlen, "--sensitive: '%.40s' is not a share in [0, 1]", value);
        g->sensitive = v[0];
    } else if (strcmp(key, "tenants") == 0) {
        return gen_tenants(g, value, err, errlen);
    } else if (strcmp(key, "model") == 0) {
        if (!trace_name_ok(value)) return ts_fail(err, errlen, "--model: '%.40s' is not 1..63 of [A-Za-z0-9_.:-]", value);
        snprintf(g->model, sizeof g->model, "%s", value);
    } else if (strcmp(key, "size-max") == 0) {
        if (parse_u64(value, &u) != 0 || u < 1 || u > TRACE_MAX_SIZE)
            return ts_fail(err, errlen, "--size-max: '%.40s' is not 1..%u", value, TRACE_MAX_SIZE);
        g->size_max = (unsigned)u;
    } else if (strcmp(key, "turns") == 0) {
        if (parse_u64(value, &u) != 0 || u > 10000)
            return ts_fail(err, errlen, "--turns: '%.40s' is not 0..10000 (turns per conversation; 0: none)", value);
        g->turns = (unsigned)u;
    } else if (strcmp(key, "conversations") == 0) {
        if (parse_u64(value, &u) != 0 || u < 1 || u > TRACE_GEN_MAX_OPEN)
            return ts_fail(err, errlen, "--conversations: '%.40s' is not 1..%d (conversations open at once)", value,
                           TRACE_GEN_MAX_OPEN);
        g->conversations = (unsigned)u;
    } else if (strcmp(key, "seed") == 0) {
        if (parse_u64(value, &u) != 0) return ts_fail(err, errlen, "--seed: '%.40s' is not an unsigned integer", value);
        g->seed = u;
    } else if (strcmp(key, "kill") == 0 || strcmp(key, "revive") == 0) {
        return gen_event(g, key[0] == 'k', value, err, errlen);
    } else {
        return 1;
    }
    return 0;
}

/* A support desk's day, per hour from midnight, as a share of the day's peak: a night
 * trough, a morning ramp, a lunch peak, an afternoon dip and an evening peak. */
static const double k_day[24] = {0.15, 0.10, 0.08, 0.08, 0.10, 0.15, 0.30, 0.50, 0.70, 0.80, 0.85, 0.95,
                                 1.00, 0.95, 0.80, 0.75, 0.75, 0.80, 0.90, 1.00, 0.95, 0.75, 0.50, 0.30};
#define DAY_STEPS_PER_HOUR 12 /* the profile is interpolated in 5-minute steps */

double trace_day_factor(double hour)
{
    double h = fmod(hour, 24.0);
    if (h < 0) h += 24;
    size_t a = (size_t)h % 24, b = (a + 1) % 24;
    double w = h - floor(h);
    return k_day[a] * (1 - w) + k_day[b] * w;
}

/* The rate multiplier at t, and the next time it may change (piecewise constant). */
static double rate_factor(const trace_gen *g, double t, double *next_change)
{
    double f = 1, next = g->duration_s;
    if (g->day_hour_s > 0) {
        double step = g->day_hour_s / DAY_STEPS_PER_HOUR;
        double k = floor(t / step);
        f *= trace_day_factor((k + 0.5) / DAY_STEPS_PER_HOUR);
        double edge = (k + 1) * step;
        if (edge <= t) edge = t + step; /* rounding: never stand still */
        if (edge < next) next = edge;
    }
    for (size_t i = 0; i < g->n_surge; i++) {
        double a = g->surge[i].start, b = a + g->surge[i].len;
        if (t >= a && t < b) f *= g->surge[i].factor;
        if (a > t && a < next) next = a;
        if (b > t && b < next) next = b;
    }
    for (size_t i = 0; i < g->n_wave; i++) {
        double a = g->wave[i].start, b = a + g->wave[i].len, half = g->wave[i].period / 2;
        if (t >= a && t < b) {
            double k = floor((t - a) / half);
            f *= fmod(k, 2) == 0 ? g->wave[i].high : g->wave[i].low;
            double edge = a + (k + 1) * half;
            if (edge <= t) edge = t + half; /* rounding: never stand still */
            if (edge < next) next = edge;
        }
        if (a > t && a < next) next = a;
        if (b > t && b < next) next = b;
    }
    *next_change = next;
    return f;
}

typedef struct {
    uint32_t id;
    unsigned left; /* turns still to come */
    trace_arrival like; /* its priority, tenant, data class */
} gen_conv;

/* --turns: makes a the next turn of a conversation (a new one, or a random open one). */
static void gen_turn(const trace_gen *g, route_rng *rng, gen_conv *open, size_t *n_open, uint32_t *next_id,
                     trace_arrival *a)
{
    bool fresh = *n_open < g->conversations;
    if (fresh) {
        a->conv = ++*next_id;
        if (g->turns > 1) open[(*n_open)++] = (gen_conv){a->conv, g->turns - 1, *a};
        return;
    }
    size_t j = (size_t)(route_rng_uniform(rng) * (double)*n_open);
    gen_conv *c = &open[j];
    a->conv = c->id;
    a->prio = c->like.prio;
    a->sensitive = c->like.sensitive;
    a->tenant = c->like.tenant;
    if (--c->left == 0) *c = open[--*n_open];
}

/* The tenant a uniform draw u picks, by the tenants' shares (equal shares: floor(u x n), the
 * pick before shares existed, so traces of the same seed are unchanged). */
static uint8_t pick_tenant(const trace_gen *g, double u)
{
    double sum = 0, cum = 0;
    for (size_t i = 0; i < g->n_tenants; i++) sum += g->tenant_share[i];
    double x = u * sum;
    for (size_t i = 0; i + 1 < g->n_tenants; i++) {
        cum += g->tenant_share[i];
        if (x < cum) return (uint8_t)i;
    }
    return (uint8_t)(g->n_tenants ? g->n_tenants - 1 : 0);
}

int trace_generate(const trace_gen *g, trace *t, char *err, size_t errlen)
{
    memset(t, 0, sizeof *t);
    gen_conv *open = g->turns ? malloc(g->conversations * sizeof *open) : NULL;
    size_t n_open = 0;
    uint32_t next_id = 0;
    if (g->turns && !open) return ts_fail(err, errlen, "out of memory");
    route_rng rng;
    route_rng_seed(&rng, g->seed);
    for (size_t i = 0; i < g->n_tenants; i++) trace_intern(t->tenants, &t->n_tenants, g->tenants[i]);
    trace_intern(t->models, &t->n_models, g->model);
    double msum = g->mix[0] + g->mix[1] + g->mix[2];
    double at = 0, seg = 0; /* fixed spacing: k-th arrival of a segment at seg + k / rate, no drift */
    uint64_t k = 0;
    while (at < g->duration_s) {
        double next;
        double r = g->rate_rps * rate_factor(g, at, &next);
        /* Poisson is memoryless: a gap that crosses a rate change is redrawn from the change on */
        double t_next = g->fixed ? seg + (double)k / r : at - log(1.0 - route_rng_uniform(&rng)) / r;
        if (t_next >= next) {
            at = seg = next;
            k = 0;
            continue;
        }
        at = t_next;
        k++;
        trace_arrival a = {.t = at, .size = 1};
        double u = route_rng_uniform(&rng) * msum;
        a.prio = u < g->mix[0] ? PRIO_URGENT : u < g->mix[0] + g->mix[1] ? PRIO_NORMAL : PRIO_BATCH;
        a.sensitive = route_rng_uniform(&rng) < g->sensitive;
        a.tenant = pick_tenant(g, route_rng_uniform(&rng));
        if (g->size_max > 1) a.size = 1 + (uint32_t)(route_rng_uniform(&rng) * g->size_max);
        if (g->turns) gen_turn(g, &rng, open, &n_open, &next_id, &a);
        if (add_arrival(t, &a) != 0) {
            free(open);
            trace_free(t);
            return ts_fail(err, errlen, "the generated trace would exceed %d requests: lower --rate or --duration",
                        TRACE_MAX_REQUESTS);
        }
    }
    free(open);
    /* events in time order, as a file would have them */
    memcpy(t->ev, g->ev, g->n_ev * sizeof g->ev[0]);
    t->n_ev = g->n_ev;
    for (size_t i = 1; i < t->n_ev; i++)
        for (size_t j = i; j > 0 && t->ev[j - 1].t > t->ev[j].t; j--) {
            trace_event x = t->ev[j];
            t->ev[j] = t->ev[j - 1];
            t->ev[j - 1] = x;
        }
    return 0;
}
