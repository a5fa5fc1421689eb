#include "opts.h"
#include "cost.h"
#include "err.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "loadbody.h"

#define CR_EXIT_USAGE 64
#define CR_MAX_NAMES 256           /* pools, tenants: the router's config is far smaller */
#define CR_REPLY_MAX (8u << 20)    /* one /admin reply */
#define CR_LINE_MAX 1024           /* one history line */
#define CR_MAX_LINES 500000        /* a history file: years of hourly runs */
#define CR_MAX_KEYS 512            /* distinct (section, name) in a week of history */
#define CR_DAYS 7
#define CR_NAME_MAX 64
#define CR_FIELDS 12

static const char k_header[] =
    "ts,window_s,section,name,requests,cost_usd,usd_per_request,backend_hours,compute_hours,p50_ms,p95_ms,p99_ms";
static const char *const k_prio[3] = {"urgent", "normal", "batch"};

/* One row of the report and of the history file: NAN is "not measured" (an empty field). */
typedef struct {
    char section[16]; /* pool, tenant, priority, latency */
    char name[CR_NAME_MAX];
    double requests, usd, per_req, backend_h, compute_h, p50, p95, p99;
} cr_row;

typedef struct {
    char model[16];
    double usd_per_hour;
    size_t backends, healthy;
} cr_price;

typedef struct {
    const char *router, *token, *markdown, *csv, *append, *weekly;
    double window_s, timeout_s;
} cr_opts;

/* A tenant with a budget, from /admin/status "tenants" (docs/router.md "Tenant budgets"). */
typedef struct {
    char name[CR_NAME_MAX], state[8];
    double spent[2], soft[2], hard[2]; /* [0] the rolling hour, [1] the UTC day */
    double demoted, refused;
} cr_budget;

typedef struct {
    char ts[32];
    double window_s;
    cr_budget budgets[CR_MAX_NAMES];
    size_t n_budgets;
    cr_row rows[3 * CR_MAX_NAMES + 3]; /* + a latency row per priority */
    cr_price price[CR_MAX_NAMES]; /* per pool row, in the order of the pool rows */
    size_t n, n_pools;
} cr_report;

static void usage(FILE *out)
{
    fputs("usage: tierbench cost --router URL [--token T] [--window S] [--markdown FILE] [--csv FILE]\n"
          "                      [--append HISTORY.csv]\n"
          "       tierbench cost --weekly HISTORY.csv [--markdown FILE] [--csv FILE]\n\n"
          "  --router URL      http://HOST:PORT of a tierrouter; reads /admin/cost and /admin/status\n"
          "  --token T         its admin_token (sent as Authorization: Bearer T)\n"
          "  --window S        seconds of cost, 1..3600 (the router keeps one hour; default 3600)\n"
          "  --timeout S       per request (default 10)\n"
          "  --markdown FILE   the report as Markdown (FILE - : stdout; the default without --csv)\n"
          "  --csv FILE        the report as CSV rows, the history file's format\n"
          "  --append FILE     add this run's rows to a history CSV (created with its header)\n"
          "  --weekly FILE     render the last 7 days of a history CSV instead of asking a router\n"
          "exit: 0 done, 64 usage or a bad history file, 1 the router or a file failed\n",
          out);
}

/* ---- options ----------------------------------------------------------------------- */

static int parse_num(const char *key, const char *v, double lo, double hi, double *out, char *err, size_t errlen)
{
    char *end;
    errno = 0;
    double d = v && *v ? strtod(v, &end) : NAN;
    if (!v || !*v || *end || errno || !(d >= lo && d <= hi))
        return ts_fail(err, errlen, "--%s: '%.40s' is not a number in [%g, %g]", key, v ? v : "", lo, hi);
    *out = d;
    return 0;
}

static int parse(cr_opts *o, int argc, char **argv, char *err, size_t errlen)
{
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) return 1;
        if (strncmp(a, "--", 2) != 0) return ts_fail(err, errlen, "unexpected argument '%.100s' (see tierbench cost --help)", a);
        const char *key = a + 2;
        if (i + 1 >= argc) return ts_fail(err, errlen, "--%.60s needs a value", key);
        const char *v = argv[++i];
        const char **slot = NULL;
        if (!strcmp(key, "router")) slot = &o->router;
        else if (!strcmp(key, "token")) slot = &o->token;
        else if (!strcmp(key, "markdown")) slot = &o->markdown;
        else if (!strcmp(key, "csv")) slot = &o->csv;
        else if (!strcmp(key, "append")) slot = &o->append;
        else if (!strcmp(key, "weekly")) slot = &o->weekly;
        else if (!strcmp(key, "window")) {
            if (parse_num(key, v, 1, 3600, &o->window_s, err, errlen) != 0) return -1;
            continue;
        } else if (!strcmp(key, "timeout")) {
            if (parse_num(key, v, 0.1, 3600, &o->timeout_s, err, errlen) != 0) return -1;
            continue;
        } else {
            return ts_fail(err, errlen, "unknown option --%.60s (see tierbench cost --help)", key);
        }
        if (!*v) return ts_fail(err, errlen, "--%s needs a value", key);
        *slot = v;
    }
    if (o->weekly && (o->router || o->append || o->token))
        return ts_fail(err, errlen, "--weekly renders a history file: not with --router, --token or --append");
    if (!o->weekly && !o->router) return ts_fail(err, errlen, "--router URL (or --weekly HISTORY.csv) is required");
    if (o->token) {
        for (const char *p = o->token; *p; p++)
            if (*p <= ' ' || *p > '~') return ts_fail(err, errlen, "--token: only visible ASCII characters");
        if (strlen(o->token) > 512) return ts_fail(err, errlen, "--token: longer than 512 characters");
    }
    return 0;
}

/* ---- the router's figures ---------------------------------------------------------- */

static json_t *get_json(const cr_opts *o, const char *host, const char *port, const char *path, char *err,
                        size_t errlen)
{
    char hdrs[600] = "";
    if (o->token) snprintf(hdrs, sizeof hdrs, "Authorization: Bearer %s\r\n", o->token);
    lb_reply r;
    char msg[400];
    if (lb_http(host, port, "GET", path, hdrs, NULL, 0, CR_REPLY_MAX, o->timeout_s, &r, msg, sizeof msg) != 0) {
        ts_fail(err, errlen, "%s: GET %s: %s", o->router, path, msg);
        return NULL;
    }
    json_t *j = NULL;
    if (r.status != 200) {
        ts_fail(err, errlen, "%s: GET %s: status %d: %.200s", o->router, path, r.status, r.body);
    } else {
        json_error_t je;
        j = json_loadb(r.body, r.len, JSON_REJECT_DUPLICATES, &je);
        if (!json_is_object(j)) {
            ts_fail(err, errlen, "%s: GET %s: not a JSON object: %.200s", o->router, path, je.text);
            json_decref(j);
            j = NULL;
        }
    }
    lb_reply_free(&r);
    return j;
}

/* A number field; null reads as NAN (the router's "no sample"). */
static int num(json_t *obj, const char *key, bool null_ok, double *out, const char *where, char *err, size_t errlen)
{
    json_t *v = json_object_get(obj, key);
    if (null_ok && json_is_null(v)) {
        *out = NAN;
        return 0;
    }
    if (!json_is_number(v)) return ts_fail(err, errlen, "%s: \"%s\" is missing or not a number", where, key);
    *out = json_number_value(v);
    return 0;
}

static void row_init(cr_row *r, const char *section, const char *name)
{
    memset(r, 0, sizeof *r);
    snprintf(r->section, sizeof r->section, "%s", section);
    snprintf(r->name, sizeof r->name, "%s", name);
    r->backend_h = r->compute_h = r->p50 = r->p95 = r->p99 = NAN;
}

/* Adds /admin/cost's list `key` (pools, tenants, priorities) as rows of `section`. */
static int cost_rows(cr_report *rep, json_t *cost, const char *key, const char *section, char *err, size_t errlen)
{
    json_t *list = json_object_get(cost, key);
    if (!json_is_array(list)) return ts_fail(err, errlen, "/admin/cost: \"%s\" is missing or not a list", key);
    if (json_array_size(list) > CR_MAX_NAMES)
        return ts_fail(err, errlen, "/admin/cost: more than %d %s", CR_MAX_NAMES, key);
    size_t i;
    json_t *e;
    json_array_foreach(list, i, e) {
        const char *name = json_string_value(json_object_get(e, "name"));
        if (!name || strlen(name) >= CR_NAME_MAX)
            return ts_fail(err, errlen, "/admin/cost: %s[%zu] has no \"name\" (or one over %d bytes)", key, i, CR_NAME_MAX - 1);
        cr_row *r = &rep->rows[rep->n++];
        row_init(r, section, name);
        char where[120];
        snprintf(where, sizeof where, "/admin/cost %s[%zu]", key, i);
        if (num(e, "requests", false, &r->requests, where, err, errlen) || num(e, "cost_usd", false, &r->usd, where, err, errlen) ||
            num(e, "usd_per_request", false, &r->per_req, where, err, errlen))
            return -1;
    }
    return 0;
}

/* Prices, backends and hours of the pool rows; latency rows from /admin/status's slo. */
static int status_rows(cr_report *rep, json_t *st, char *err, size_t errlen)
{
    json_t *pools = json_object_get(st, "pools");
    if (!json_is_array(pools)) return ts_fail(err, errlen, "/admin/status: \"pools\" is missing or not a list");
    for (size_t k = 0; k < rep->n; k++) {
        cr_row *r = &rep->rows[k];
        if (strcmp(r->section, "pool") != 0) continue;
        cr_price *pr = &rep->price[rep->n_pools++];
        json_t *p = NULL, *e;
        size_t i;
        json_array_foreach(pools, i, e) {
            const char *name = json_string_value(json_object_get(e, "name"));
            if (name && !strcmp(name, r->name)) p = e;
        }
        json_t *c = p ? json_object_get(p, "cost") : NULL;
        const char *model = c ? json_string_value(json_object_get(c, "model")) : NULL;
        if (!model) return ts_fail(err, errlen, "/admin/status: pool %s has no \"cost\".\"model\"", r->name);
        snprintf(pr->model, sizeof pr->model, "%s", model);
        if (num(c, "usd_per_hour", false, &pr->usd_per_hour, "/admin/status cost", err, errlen)) return -1;
        json_t *bes = json_object_get(p, "backends");
        json_t *h = json_object_get(p, "healthy");
        if (!json_is_array(bes) || !json_is_integer(h))
            return ts_fail(err, errlen, "/admin/status: pool %s has no \"backends\" list or \"healthy\" count", r->name);
        pr->backends = json_array_size(bes);
        pr->healthy = (size_t)json_integer_value(h);
        /* exact where the price model makes cost a measure of time: fixed pools accrue
         * usd_per_hour per backend, usage pools usd_per_hour of reported compute */
        if (pr->usd_per_hour > 0 && !strcmp(model, "fixed")) r->backend_h = r->usd / pr->usd_per_hour;
        if (pr->usd_per_hour > 0 && !strcmp(model, "usage")) r->compute_h = r->usd / pr->usd_per_hour;
    }
    json_t *slo = json_object_get(st, "slo");
    if (!json_is_object(slo)) return ts_fail(err, errlen, "/admin/status: \"slo\" is missing or not an object");
    for (int q = 0; q < 3; q++) {
        json_t *s = json_object_get(slo, k_prio[q]);
        char where[64];
        snprintf(where, sizeof where, "/admin/status slo.%s", k_prio[q]);
        if (!json_is_object(s)) return ts_fail(err, errlen, "%s is missing", where);
        cr_row *r = &rep->rows[rep->n++];
        row_init(r, "latency", k_prio[q]);
        r->usd = r->per_req = NAN;
        if (num(s, "requests_60s", false, &r->requests, where, err, errlen) || num(s, "p50_ms", true, &r->p50, where, err, errlen) ||
            num(s, "p95_ms", true, &r->p95, where, err, errlen) || num(s, "p99_ms", true, &r->p99, where, err, errlen))
            return -1;
    }
    return 0;
}

/* The budget rows: tenants with any budget set. A router without "tenants" in its status
 * (older than budgets) gives none. */
static int budget_rows(cr_report *rep, json_t *st, char *err, size_t errlen)
{
    json_t *list = json_object_get(st, "tenants");
    if (!list) return 0;
    if (!json_is_array(list)) return ts_fail(err, errlen, "/admin/status: \"tenants\" is not a list");
    size_t i;
    json_t *e;
    json_array_foreach(list, i, e) {
        const char *name = json_string_value(json_object_get(e, "name"));
        const char *state = json_string_value(json_object_get(e, "state"));
        json_t *b = json_object_get(e, "budget");
        if (!name || strlen(name) >= CR_NAME_MAX || !state || strlen(state) >= 8 || !json_is_object(b))
            return ts_fail(err, errlen, "/admin/status: tenants[%zu] lacks a name, state or budget", i);
        cr_budget c = {0};
        char where[120];
        snprintf(where, sizeof where, "/admin/status tenants[%zu]", i);
        if (num(b, "soft_per_hour", false, &c.soft[0], where, err, errlen) ||
            num(b, "hard_per_hour", false, &c.hard[0], where, err, errlen) ||
            num(b, "soft_per_day", false, &c.soft[1], where, err, errlen) ||
            num(b, "hard_per_day", false, &c.hard[1], where, err, errlen) ||
            num(e, "spent_hour", false, &c.spent[0], where, err, errlen) ||
            num(e, "spent_day", false, &c.spent[1], where, err, errlen) ||
            num(e, "demoted", false, &c.demoted, where, err, errlen) || num(e, "refused", false, &c.refused, where, err, errlen))
            return -1;
        if (!(c.soft[0] > 0 || c.hard[0] > 0 || c.soft[1] > 0 || c.hard[1] > 0)) continue;
        if (rep->n_budgets == CR_MAX_NAMES) return ts_fail(err, errlen, "/admin/status: more than %d budgets", CR_MAX_NAMES);
        snprintf(c.name, sizeof c.name, "%s", name);
        snprintf(c.state, sizeof c.state, "%s", state);
        rep->budgets[rep->n_budgets++] = c;
    }
    return 0;
}

static int fetch(const cr_opts *o, cr_report *rep, char *err, size_t errlen)
{
    char host[256], port[8], path[64];
    if (lb_parse_url(o->router, host, sizeof host, port, sizeof port, err, errlen) != 0) return -1;
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(rep->ts, sizeof rep->ts, "%Y-%m-%dT%H:%M:%SZ", &tm);
    snprintf(path, sizeof path, "/admin/cost?window=%.0f", o->window_s);
    int rc = -1;
    json_t *st = NULL, *cost = get_json(o, host, port, path, err, errlen);
    if (!cost) goto out;
    st = get_json(o, host, port, "/admin/status", err, errlen);
    if (!st) goto out;
    if (num(cost, "window_s", false, &rep->window_s, "/admin/cost", err, errlen) != 0) goto out;
    if (cost_rows(rep, cost, "pools", "pool", err, errlen) || cost_rows(rep, cost, "tenants", "tenant", err, errlen) ||
        cost_rows(rep, cost, "priorities", "priority", err, errlen) || status_rows(rep, st, err, errlen) ||
        budget_rows(rep, st, err, errlen))
        goto out;
    rc = 0;
out:
    json_decref(cost);
    json_decref(st);
    return rc;
}

/* ---- writing ----------------------------------------------------------------------- */

static void csv_str(FILE *f, const char *s)
{
    if (!strpbrk(s, ",\"\r\n")) {
        fputs(s, f);
        return;
    }
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"') fputc('"', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

/* cost figures keep /admin/cost's own 9 decimals, so the CSV equals the router's JSON */
static void csv_num(FILE *f, double v, const char *fmt)
{
    fputc(',', f);
    if (!isnan(v)) fprintf(f, fmt, v);
}

static void csv_row(FILE *f, const char *ts, double window_s, const cr_row *r)
{
    fprintf(f, "%s,%.0f,%s,", ts, window_s, r->section);
    csv_str(f, r->name);
    csv_num(f, r->requests, "%.0f");
    csv_num(f, r->usd, "%.9f");
    csv_num(f, r->per_req, "%.9f");
    csv_num(f, r->backend_h, "%.10g");
    csv_num(f, r->compute_h, "%.10g");
    csv_num(f, r->p50, "%.10g");
    csv_num(f, r->p95, "%.10g");
    csv_num(f, r->p99, "%.10g");
    fputc('\n', f);
}

typedef void (*writer)(const void *ctx, FILE *f);

/* Writes with fn into path ("-": stdout); mode "w" or "a". */
static int write_to(const char *path, const char *mode, writer fn, const void *ctx)
{
    bool std = !strcmp(path, "-");
    FILE *f = std ? stdout : fopen(path, mode);
    if (!f) {
        fprintf(stderr, "tierbench: %s: %s\n", path, strerror(errno));
        return -1;
    }
    fn(ctx, f);
    int bad = ferror(f);
    bad |= std ? fflush(f) : fclose(f);
    if (bad) {
        fprintf(stderr, "tierbench: %s: could not write\n", path);
        return -1;
    }
    return 0;
}

static void w_csv(const void *ctx, FILE *f)
{
    const cr_report *rep = ctx;
    fprintf(f, "%s\n", k_header);
    for (size_t i = 0; i < rep->n; i++) csv_row(f, rep->ts, rep->window_s, &rep->rows[i]);
}

static void w_rows(const void *ctx, FILE *f)
{
    const cr_report *rep = ctx;
    for (size_t i = 0; i < rep->n; i++) csv_row(f, rep->ts, rep->window_s, &rep->rows[i]);
}

/* A table cell: '|' would end it, newlines would end the table. */
static void md_str(FILE *f, const char *s)
{
    for (; *s; s++) {
        if (*s == '|') fputs("\\|", f);
        else fputc(*s == '\n' || *s == '\r' ? ' ' : *s, f);
    }
}

static void md_num(FILE *f, double v, const char *fmt, const char *missing)
{
    fputs(" | ", f);
    if (isnan(v)) fputs(missing, f);
    else fprintf(f, fmt, v);
}

static void md_cost_table(FILE *f, const cr_report *rep, const char *section, const char *title)
{
    fprintf(f, "\n## %s\n\n| %s | requests | cost_usd | usd_per_request |\n|---|---:|---:|---:|\n", title, section);
    for (size_t i = 0; i < rep->n; i++) {
        const cr_row *r = &rep->rows[i];
        if (strcmp(r->section, section) != 0) continue;
        fputs("| ", f);
        md_str(f, r->name);
        md_num(f, r->requests, "%.0f", "");
        md_num(f, r->usd, "%.9f", "");
        md_num(f, r->per_req, "%.9f", "");
        fputs(" |\n", f);
    }
}

static void w_markdown(const void *ctx, FILE *f)
{
    const cr_report *rep = ctx;
    fprintf(f, "# Cost report\n\nRouter figures over the last %.0f s, read at %s.\n", rep->window_s, rep->ts);
    fputs("\n## Pools\n\n| pool | price model | usd_per_hour | backends (healthy) | requests | cost_usd | "
          "usd_per_request | backend-hours reserved | compute-hours used |\n|---|---|---:|---:|---:|---:|---:|---:|---:|\n",
          f);
    size_t k = 0;
    for (size_t i = 0; i < rep->n; i++) {
        const cr_row *r = &rep->rows[i];
        if (strcmp(r->section, "pool") != 0) continue;
        const cr_price *p = &rep->price[k++];
        fputs("| ", f);
        md_str(f, r->name);
        fprintf(f, " | %s | %g | %zu (%zu)", p->model, p->usd_per_hour, p->backends, p->healthy);
        md_num(f, r->requests, "%.0f", "");
        md_num(f, r->usd, "%.9f", "");
        md_num(f, r->per_req, "%.9f", "");
        md_num(f, r->backend_h, "%.6g", "not measured");
        md_num(f, r->compute_h, "%.6g", "not measured");
        fputs(" |\n", f);
    }
    md_cost_table(f, rep, "tenant", "Tenants");
    md_cost_table(f, rep, "priority", "Priorities");
    if (rep->n_budgets) {
        fputs("\n## Tenant budgets (spent over the rolling hour and the UTC day; used = spent / budget)\n\n"
              "| tenant | state | hour spent | hour used soft | hour used hard | day spent | day used soft | "
              "day used hard | demoted | refused |\n|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n",
              f);
        for (size_t i = 0; i < rep->n_budgets; i++) {
            const cr_budget *b = &rep->budgets[i];
            fputs("| ", f);
            md_str(f, b->name);
            fprintf(f, " | %s", b->state);
            for (int w = 0; w < 2; w++) {
                md_num(f, b->spent[w], "%.6f", "");
                md_num(f, b->soft[w] > 0 ? 100 * b->spent[w] / b->soft[w] : NAN, "%.1f%%", "no budget");
                md_num(f, b->hard[w] > 0 ? 100 * b->spent[w] / b->hard[w] : NAN, "%.1f%%", "no budget");
            }
            md_num(f, b->demoted, "%.0f", "");
            md_num(f, b->refused, "%.0f", "");
            fputs(" |\n", f);
        }
    }
    fputs("\n## Latency by priority (the router's last 60 s, not the cost window)\n\n"
          "| priority | requests | p50_ms | p95_ms | p99_ms |\n|---|---:|---:|---:|---:|\n",
          f);
    for (size_t i = 0; i < rep->n; i++) {
        const cr_row *r = &rep->rows[i];
        if (strcmp(r->section, "latency") != 0) continue;
        fprintf(f, "| %s", r->name);
        md_num(f, r->requests, "%.0f", "");
        md_num(f, r->p50, "%.10g", "no requests");
        md_num(f, r->p95, "%.10g", "no requests");
        md_num(f, r->p99, "%.10g", "no requests");
        fputs(" |\n", f);
    }
    fputs("\n## Not measured by the router\n\n"
          "- Fixed pools: the compute time their backends spent (only usage pools are billed by it), so\n"
          "  used vs reserved is not known there; reserved backend-hours are cost / usd_per_hour.\n"
          "- Usage pools: the backend-hours they held; only the compute they billed (cost / usd_per_hour).\n"
          "- Anything older than one hour: run with --append hourly and render with --weekly.\n",
          f);
}

/* ---- history ----------------------------------------------------------------------- */

/* Splits one CSV line into CR_FIELDS fields (quotes as written by csv_str); bufs hold them. */
static int split(char *line, char **fields)
{
    size_t n = 0;
    char *p = line;
    while (n < CR_FIELDS) {
        if (*p == '"') {
            char *w = ++p, *start = w;
            for (;;) {
                if (!*p) return -1;
                if (*p == '"' && p[1] == '"') *w++ = '"', p += 2;
                else if (*p == '"') break;
                else *w++ = *p++;
            }
            *w = '\0';
            p++;
            fields[n++] = start;
        } else {
            fields[n++] = p;
            p += strcspn(p, ",");
        }
        if (*p == ',') *p++ = '\0';
        else if (!*p) break;
        else return -1;
    }
    return n == CR_FIELDS && !*p ? 0 : -1;
}

/* "YYYY-MM-DDTHH:MM:SSZ" to days since 1970-01-01 (proleptic Gregorian); -1 when malformed. */
static long day_number(const char *ts)
{
    int y, m, d, hh, mm, ss, used = 0;
    if (strlen(ts) != 20 || sscanf(ts, "%4d-%2d-%2dT%2d:%2d:%2dZ%n", &y, &m, &d, &hh, &mm, &ss, &used) != 6 || used != 20)
        return -1;
    if (y < 1970 || m < 1 || m > 12 || d < 1 || d > 31 || hh > 23 || mm > 59 || ss > 60) return -1;
    y -= m <= 2;
    long era = y / 400, yoe = y - era * 400;
    long doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    long doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

static int hnum(const char *s, bool empty_ok, double *out)
{
    if (!*s) {
        *out = NAN;
        return empty_ok ? 0 : -1;
    }
    char *end;
    errno = 0;
    double d = strtod(s, &end);
    if (*end || errno || !isfinite(d) || d < 0) return -1;
    *out = d;
    return 0;
}

typedef struct {
    char ts[21];
    long day;
    double window_s;
    cr_row r;
} hist_row;

typedef struct {
    double requests, usd, backend_h, compute_h, p95, p99; /* p95/p99: the day's worst snapshot */
    bool seen;
} cell;

typedef struct {
    cr_row key[CR_MAX_KEYS]; /* section and name only */
    size_t n_keys;
    cell day[CR_DAYS + 1][CR_MAX_KEYS]; /* [CR_DAYS] is the week */
    double covered_h[CR_DAYS + 1];
    long first_day;
    char day_name[CR_DAYS][24];
} week;

static void add_max(double *acc, double v)
{
    if (!isnan(v) && (isnan(*acc) || v > *acc)) *acc = v;
}

static void add_sum(double *acc, double v)
{
    if (!isnan(v)) *acc = isnan(*acc) ? v : *acc + v;
}

static int key_of(week *w, const cr_row *r)
{
    for (size_t k = 0; k < w->n_keys; k++)
        if (!strcmp(w->key[k].section, r->section) && !strcmp(w->key[k].name, r->name)) return (int)k;
    if (w->n_keys == CR_MAX_KEYS) return -1;
    row_init(&w->key[w->n_keys], r->section, r->name);
    for (int d = 0; d <= CR_DAYS; d++) {
        cell *c = &w->day[d][w->n_keys];
        c->requests = c->usd = c->backend_h = c->compute_h = c->p95 = c->p99 = NAN;
    }
    return (int)w->n_keys++;
}

/* Reads the history file; keeps the rows of the 7 days up to its newest day. */
static int load_week(const char *path, week *w, char *err, size_t errlen)
{
    FILE *f = fopen(path, "r");
    if (!f) return ts_fail(err, errlen, "%s: %s", path, strerror(errno));
    int rc = -1;
    size_t n = 0, cap = 0, lineno = 0;
    hist_row *rows = NULL;
    char line[CR_LINE_MAX + 2];
    while (fgets(line, sizeof line, f)) {
        lineno++;
        size_t len = strlen(line);
        if (len && line[len - 1] == '\n') line[--len] = '\0';
        else if (!feof(f)) {
            ts_fail(err, errlen, "%s:%zu: a line over %d bytes", path, lineno, CR_LINE_MAX);
            goto out;
        }
        if (lineno == 1) {
            if (strcmp(line, k_header) != 0) {
                ts_fail(err, errlen, "%s:1: not a tierbench cost history (the header must be %s)", path, k_header);
                goto out;
            }
            continue;
        }
        if (lineno > CR_MAX_LINES) {
            ts_fail(err, errlen, "%s: more than %d lines", path, CR_MAX_LINES);
            goto out;
        }
        if (n == cap) {
            size_t nc = cap ? cap * 2 : 256;
            hist_row *g = realloc(rows, nc * sizeof *g);
            if (!g) {
                ts_fail(err, errlen, "%s: out of memory", path);
                goto out;
            }
            rows = g, cap = nc;
        }
        hist_row *h = &rows[n];
        char *fl[CR_FIELDS];
        bool ok = split(line, fl) == 0;
        ok = ok && strlen(fl[0]) < sizeof h->ts && (h->day = day_number(fl[0])) >= 0;
        ok = ok && hnum(fl[1], false, &h->window_s) == 0 && h->window_s > 0 && h->window_s <= 86400;
        ok = ok && (!strcmp(fl[2], "pool") || !strcmp(fl[2], "tenant") || !strcmp(fl[2], "priority") || !strcmp(fl[2], "latency"));
        ok = ok && *fl[3] && strlen(fl[3]) < CR_NAME_MAX;
        if (ok) {
            row_init(&h->r, fl[2], fl[3]);
            snprintf(h->ts, sizeof h->ts, "%s", fl[0]);
        }
        double *dst[8] = {&h->r.requests, &h->r.usd, &h->r.per_req, &h->r.backend_h,
                          &h->r.compute_h, &h->r.p50, &h->r.p95, &h->r.p99};
        for (int i = 0; ok && i < 8; i++) ok = hnum(fl[4 + i], i > 0, dst[i]) == 0;
        if (!ok) {
            ts_fail(err, errlen, "%s:%zu: not a history row (%s)", path, lineno, k_header);
            goto out;
        }
        n++;
    }
    if (ferror(f)) {
        ts_fail(err, errlen, "%s: read error", path);
        goto out;
    }
    if (n == 0) {
        ts_fail(err, errlen, "%s: no rows (append some with tierbench cost --router URL --append %s)", path, path);
        goto out;
    }
    long last = rows[0].day;
    for (size_t i = 1; i < n; i++)
        if (rows[i].day > last) last = rows[i].day;
    w->first_day = last - (CR_DAYS - 1);
    for (int d = 0; d < CR_DAYS; d++) {
        /* day number back to a date, for the tables */
        long z = w->first_day + d + 719468, era = z / 146097, doe = z - era * 146097;
        long yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365, doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        long mp = (5 * doy + 2) / 153, dd = doy - (153 * mp + 2) / 5 + 1, mm = mp < 10 ? mp + 3 : mp - 9;
        snprintf(w->day_name[d], sizeof w->day_name[d], "%04d-%02d-%02d", (int)(yoe + era * 400 + (mm <= 2)), (int)mm, (int)dd);
    }
    const char *prev_ts = "";
    for (size_t i = 0; i < n; i++) {
        hist_row *h = &rows[i];
        if (h->day < w->first_day) continue;
        int d = (int)(h->day - w->first_day);
        int k = key_of(w, &h->r);
        if (k < 0) {
            ts_fail(err, errlen, "%s: more than %d pools, tenants and priorities in one week", path, CR_MAX_KEYS);
            goto out;
        }
        /* each run's window counts once toward the hours a day covers */
        if (strcmp(h->ts, prev_ts) != 0) {
            w->covered_h[d] += h->window_s / 3600;
            w->covered_h[CR_DAYS] += h->window_s / 3600;
            prev_ts = h->ts;
        }
        const int slots[2] = {d, CR_DAYS}; /* the day, and the week */
        for (int s = 0; s < 2; s++) {
            cell *c = &w->day[slots[s]][k];
            c->seen = true;
            if (strcmp(h->r.section, "latency") != 0) {
                add_sum(&c->requests, h->r.requests);
                add_sum(&c->usd, h->r.usd);
                add_sum(&c->backend_h, h->r.backend_h);
                add_sum(&c->compute_h, h->r.compute_h);
            } else {
                add_max(&c->p95, h->r.p95);
                add_max(&c->p99, h->r.p99);
            }
        }
    }
    rc = 0;
out:
    free(rows);
    fclose(f);
    return rc;
}

static void w_week_csv(const void *ctx, FILE *f)
{
    const week *w = ctx;
    fputs("day,covered_hours,section,name,requests,cost_usd,usd_per_request,backend_hours,compute_hours,"
          "worst_p95_ms,worst_p99_ms\n",
          f);
    for (int d = 0; d <= CR_DAYS; d++)
        for (size_t k = 0; k < w->n_keys; k++) {
            const cell *c = &w->day[d][k];
            if (!c->seen) continue;
            fprintf(f, "%s,%.10g,%s,", d < CR_DAYS ? w->day_name[d] : "week", w->covered_h[d], w->key[k].section);
            csv_str(f, w->key[k].name);
            csv_num(f, c->requests, "%.0f");
            csv_num(f, c->usd, "%.9f");
            csv_num(f, !isnan(c->requests) && c->requests > 0 ? c->usd / c->requests : NAN, "%.9f");
            csv_num(f, c->backend_h, "%.10g");
            csv_num(f, c->compute_h, "%.10g");
            csv_num(f, c->p95, "%.10g");
            csv_num(f, c->p99, "%.10g");
            fputc('\n', f);
        }
}

static void w_week_md(const void *ctx, FILE *f)
{
    const week *w = ctx;
    fprintf(f, "# Weekly cost report\n\n%s to %s, from the history file. Covered: %.1f of %d hours "
               "(each run adds its window; a day short of 24 h had runs missing).\n",
            w->day_name[0], w->day_name[CR_DAYS - 1], w->covered_h[CR_DAYS], CR_DAYS * 24);
    fputs("\n## Cost per day and pool (USD)\n\n| day | covered hours", f);
    for (size_t k = 0; k < w->n_keys; k++)
        if (!strcmp(w->key[k].section, "pool")) {
            fputs(" | ", f);
            md_str(f, w->key[k].name);
        }
    fputs(" | total |\n|---|---:", f);
    for (size_t k = 0; k < w->n_keys; k++)
        if (!strcmp(w->key[k].section, "pool")) fputs("|---:", f);
    fputs("|---:|\n", f);
    for (int d = 0; d <= CR_DAYS; d++) {
        fprintf(f, "| %s | %.1f", d < CR_DAYS ? w->day_name[d] : "**week**", w->covered_h[d]);
        double total = 0;
        for (size_t k = 0; k < w->n_keys; k++) {
            if (strcmp(w->key[k].section, "pool") != 0) continue;
            const cell *c = &w->day[d][k];
            md_num(f, c->seen ? c->usd : NAN, "%.6f", "no data");
            if (c->seen && !isnan(c->usd)) total += c->usd;
        }
        fprintf(f, " | %.6f |\n", total);
    }
    static const char *const sections[3] = {"pool", "tenant", "priority"};
    for (int s = 0; s < 3; s++) {
        fprintf(f, "\n## The week by %s\n\n| %s | requests | cost_usd | usd_per_request | backend-hours | compute-hours |\n"
                   "|---|---:|---:|---:|---:|---:|\n",
                sections[s], sections[s]);
        for (size_t k = 0; k < w->n_keys; k++) {
            if (strcmp(w->key[k].section, sections[s]) != 0) continue;
            const cell *c = &w->day[CR_DAYS][k];
            fputs("| ", f);
            md_str(f, w->key[k].name);
            md_num(f, c->requests, "%.0f", "");
            md_num(f, c->usd, "%.9f", "");
            md_num(f, !isnan(c->requests) && c->requests > 0 ? c->usd / c->requests : NAN, "%.9f", "");
            md_num(f, c->backend_h, "%.6g", "not measured");
            md_num(f, c->compute_h, "%.6g", "not measured");
            fputs(" |\n", f);
        }
    }
    fputs("\n## Latency trend: the worst p95 / p99 (ms) of each day's runs\n\n"
          "Each run records the router's last 60 s, so these are samples, not the day's percentiles.\n\n"
          "| day | urgent p95 | urgent p99 | normal p95 | normal p99 | batch p95 | batch p99 |\n"
          "|---|---:|---:|---:|---:|---:|---:|\n",
          f);
    for (int d = 0; d < CR_DAYS; d++) {
        fprintf(f, "| %s", w->day_name[d]);
        for (int q = 0; q < 3; q++) {
            const cell *c = NULL;
            for (size_t k = 0; k < w->n_keys; k++)
                if (!strcmp(w->key[k].section, "latency") && !strcmp(w->key[k].name, k_prio[q])) c = &w->day[d][k];
            md_num(f, c && c->seen ? c->p95 : NAN, "%.10g", "-");
            md_num(f, c && c->seen ? c->p99 : NAN, "%.10g", "-");
        }
        fputs(" |\n", f);
    }
}

/* ---- main -------------------------------------------------------------------------- */

/* The history file gets its header when it is new or empty; an existing one must be ours. */
static int append_history(const char *path, const cr_report *rep)
{
    FILE *f = fopen(path, "r");
    char first[sizeof k_header + 2] = "";
    if (f) {
        if (!fgets(first, sizeof first, f)) first[0] = '\0';
        fclose(f);
        first[strcspn(first, "\n")] = '\0';
        if (first[0] && strcmp(first, k_header) != 0) {
            fprintf(stderr, "tierbench: %s: not a tierbench cost history (its first line is not %s); not appending\n",
                    path, k_header);
            return CR_EXIT_USAGE;
        }
    }
    if (!first[0]) return write_to(path, "w", w_csv, rep) ? 1 : 0;
    return write_to(path, "a", w_rows, rep) ? 1 : 0;
}

int cost_main(int argc, char **argv)
{
    cr_opts o = {.window_s = 3600, .timeout_s = 10};
    char err[1200];
    int p = parse(&o, argc, argv, err, sizeof err);
    int done_rc = tb_parsed(p, usage, err);
    if (done_rc >= 0) return done_rc;
    const char *md = o.markdown ? o.markdown : (o.csv ? NULL : "-");
    int rc = 0;
    if (o.weekly) {
        week *w = calloc(1, sizeof *w);
        if (!w) return 1;
        if (load_week(o.weekly, w, err, sizeof err) != 0) {
            fprintf(stderr, "tierbench: %s\n", err);
            free(w);
            return CR_EXIT_USAGE;
        }
        if (md && write_to(md, "w", w_week_md, w) != 0) rc = 1;
        if (o.csv && write_to(o.csv, "w", w_week_csv, w) != 0) rc = 1;
        free(w);
        return rc;
    }
    cr_report *rep = calloc(1, sizeof *rep);
    if (!rep) return 1;
    if (fetch(&o, rep, err, sizeof err) != 0) {
        fprintf(stderr, "tierbench: %s\n", err);
        free(rep);
        return 1;
    }
    if (md && write_to(md, "w", w_markdown, rep) != 0) rc = 1;
    if (o.csv && write_to(o.csv, "w", w_csv, rep) != 0) rc = 1;
    if (o.append) {
        int a = append_history(o.append, rep);
        if (a) rc = a;
    }
    free(rep);
    return rc;
}
