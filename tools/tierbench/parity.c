#include "parity.h"
#include "parity_llm.h"
#include "opts.h"
#include "err.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "loadbody.h"

#define PAR_MAX_OUTPUTS 16
#define PAR_MAX_REQUESTS 100000
#define PAR_MAX_ROWS 65536
#define PAR_REPLY_MAX (64u << 20)  /* one inference reply */
#define PAR_FILE_MAX (256u << 20)  /* a reference or thresholds file */
#define PAR_HEADERS_MAX 2048       /* the extra header lines of one side */
#define PAR_FORMAT "tierbench-parity-1"

/* Where a threshold came from: a flag beats a file's per-output value beats its global. */
typedef struct {
    double max_abs, max_rel, min_top1; /* NAN: not set */
} limits;

typedef struct {
    const char *url;
    char host[256], port[8];
    char headers[PAR_HEADERS_MAX]; /* "K: V\r\n" lines */
    size_t headers_len;
    const char *model; /* NULL: --model */
    char pool[64];     /* X-Tierrouter-Pool of its replies; "mixed" when they differ */
    bool pool_seen;
} side;

typedef struct {
    side target, baseline;
    bool has_baseline;
    const char *model, *reference, *record, *thresholds, *json;
    long requests, rows;
    unsigned long long seed;
    double timeout_s, rel_floor;
    limits flags;
    bool quiet;
} opts;

/* What one output measured, over every request. */
typedef struct {
    char name[64], datatype[16];
    bool is_float, has_top1;
    size_t elems, rows, agree;
    double max_abs, max_rel;
    size_t abs_req, abs_idx; /* where max_abs is */
    char problem[200];       /* a structural break: the gate fails whatever the numbers */
    limits lim;
    bool pass;
} out_stat;

typedef struct {
    out_stat out[PAR_MAX_OUTPUTS];
    size_t n_out;
    size_t compared;
    char problem[300]; /* a request-level break (an output missing from the baseline's reply...) */
} tally;

static void usage(FILE *out)
{
    fprintf(out,
            "usage: tierbench parity --target URL --baseline URL [inputs] [thresholds] [outputs]\n"
            "       tierbench parity --target URL --record FILE [inputs]\n"
            "       tierbench parity --target URL --reference FILE [thresholds] [outputs]\n\n"
            "targets (http://HOST:PORT, a worker or a router):\n"
            "  --target URL             the side under test\n"
            "  --baseline URL           the side it must match, live (or --reference FILE, recorded)\n"
            "  --header 'K: V'          sent to the target (repeatable), e.g. 'X-Data-Class: sensitive'\n"
            "  --baseline-header 'K: V' sent to the baseline (repeatable)\n"
            "  --model NAME             (default demo)   --baseline-model NAME (default --model)\n"
            "  --timeout S              per request (default 30)\n"
            "inputs (seeded random from the model's metadata, GET /v2/models/{m} on the baseline):\n"
            "  --requests N (default 16)   --rows B (rows per request, default 8)   --seed N (default 1)\n"
            "thresholds (a flag beats the file; without any, the outputs' structure alone is held):\n"
            "  --max-abs X   --max-rel X   --min-top1 F (0..1)   --thresholds FILE (JSON)\n"
            "  --rel-floor X            relative error is |t - b| / max(|b|, X) (default 1e-3)\n"
            "files:\n"
            "  --record FILE            write the inputs and the target's outputs (JSON), compare nothing\n"
            "  --reference FILE         replay a recorded file's inputs against the target, compare to its outputs\n"
            "  --json FILE              the measurements (FILE - : stdout); the table on stdout unless --quiet\n"
            "LLMs over /v1 (top-1 agreement and logprob error on a corpus): tierbench parity --llm --help\n"
            "exit: 0 pass, 2 a threshold or the outputs' structure broken, 1 a target or file failed, 64 usage\n");
}

/* ---- options ----------------------------------------------------------------------- */

static int parse_header(side *s, const char *v, const char *flag, char *err, size_t errlen)
{
    size_t n = strlen(v);
    const char *colon = strchr(v, ':');
    bool ok = colon && colon > v && n < 512;
    for (size_t i = 0; ok && i < n; i++) ok = (v[i] >= ' ' && v[i] <= '~') || v[i] == '\t';
    for (const char *p = v; ok && p < colon; p++) ok = *p > ' ' && *p <= '~';
    if (!ok) return ts_fail(err, errlen, "%s: '%.80s' is not 'Name: value' (visible characters, under 512)", flag, v);
    if (s->headers_len + n + 3 > sizeof s->headers)
        return ts_fail(err, errlen, "%s: the headers of one side exceed %d bytes", flag, PAR_HEADERS_MAX);
    memcpy(s->headers + s->headers_len, v, n);
    memcpy(s->headers + s->headers_len + n, "\r\n", 3);
    s->headers_len += n + 2;
    return 0;
}

static int parse_num(const char *key, const char *v, double lo, double hi, double *out, char *err, size_t errlen)
{
    char *end;
    errno = 0;
    double d = v ? strtod(v, &end) : NAN;
    if (!v || end == v || *end || errno || !(d >= lo && d <= hi))
        return ts_fail(err, errlen, "--%s: '%.40s' is not a number in [%g, %g]", key, v ? v : "", lo, hi);
    *out = d;
    return 0;
}

static bool model_name_ok(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n >= 64) return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
              c == '.'))
            return false;
    }
    return true;
}

static int option(opts *o, const char *key, const char *v, char *err, size_t errlen)
{
    double d;
    if (!strcmp(key, "quiet")) {
        o->quiet = true;
        return 0;
    }
    if (!v || !*v) return ts_fail(err, errlen, "--%s needs a value", key);
    if (!strcmp(key, "target") || !strcmp(key, "baseline")) {
        side *s = key[0] == 't' ? &o->target : &o->baseline;
        char msg[300];
        if (lb_parse_url(v, s->host, sizeof s->host, s->port, sizeof s->port, msg, sizeof msg) != 0)
            return ts_fail(err, errlen, "--%s: %s", key, msg);
        s->url = v;
        if (s == &o->baseline) o->has_baseline = true;
        return 0;
    }
    if (!strcmp(key, "header")) return parse_header(&o->target, v, "--header", err, errlen);
    if (!strcmp(key, "baseline-header")) return parse_header(&o->baseline, v, "--baseline-header", err, errlen);
    if (!strcmp(key, "model") || !strcmp(key, "baseline-model")) {
        if (!model_name_ok(v)) return ts_fail(err, errlen, "--%s: '%.80s' is not a model name ([A-Za-z0-9_.-], 1..63)", key, v);
        if (key[0] == 'm') o->model = v;
        else o->baseline.model = v;
        return 0;
    }
    const char **slot = !strcmp(key, "record") ? &o->record : !strcmp(key, "reference") ? &o->reference
                      : !strcmp(key, "thresholds") ? &o->thresholds : !strcmp(key, "json") ? &o->json : NULL;
    if (slot) {
        *slot = v;
        return 0;
    }
    if (!strcmp(key, "requests") || !strcmp(key, "rows")) {
        long hi = key[1] == 'e' ? PAR_MAX_REQUESTS : PAR_MAX_ROWS;
        char *end;
        long n = strtol(v, &end, 10);
        if (end == v || *end || n < 1 || n > hi) return ts_fail(err, errlen, "--%s: '%.40s' is not 1..%ld", key, v, hi);
        if (key[1] == 'e') o->requests = n;
        else o->rows = n;
        return 0;
    }
    if (!strcmp(key, "seed")) {
        char *end;
        errno = 0;
        unsigned long long n = strtoull(v, &end, 10);
        if (end == v || *end || errno || *v == '-') return ts_fail(err, errlen, "--seed: '%.40s' is not an integer >= 0", v);
        o->seed = n;
        return 0;
    }
    if (!strcmp(key, "timeout")) {
        if (parse_num(key, v, 0.001, 3600, &d, err, errlen) != 0) return -1;
        o->timeout_s = d;
        return 0;
    }
    if (!strcmp(key, "rel-floor")) return parse_num(key, v, 1e-30, 1e30, &o->rel_floor, err, errlen);
    if (!strcmp(key, "max-abs")) return parse_num(key, v, 0, 1e300, &o->flags.max_abs, err, errlen);
    if (!strcmp(key, "max-rel")) return parse_num(key, v, 0, 1e300, &o->flags.max_rel, err, errlen);
    if (!strcmp(key, "min-top1")) return parse_num(key, v, 0, 1, &o->flags.min_top1, err, errlen);
    return ts_fail(err, errlen, "unknown option --%.60s (see tierbench parity --help)", key);
}

static bool quiet_flag(const char *key) { return !strcmp(key, "quiet"); }

static int parse(opts *o, int argc, char **argv, char *err, size_t errlen)
{
    for (int i = 2; i < argc; i++) {
        char key[TB_OPT_KEY];
        const char *v;
        int rc = tb_opt(argc, argv, &i, quiet_flag, "parity", key, &v, err, errlen);
        if (rc) return rc;
        if (option(o, key, v, err, errlen) != 0) return -1;
    }
    if (!o->target.url) return ts_fail(err, errlen, "--target http://HOST:PORT is required");
    int modes = o->has_baseline + (o->reference != NULL) + (o->record != NULL);
    if (modes != 1)
        return ts_fail(err, errlen, "give exactly one of --baseline URL, --reference FILE or --record FILE (with --target)");
    if (!o->has_baseline && (o->baseline.headers_len || o->baseline.model))
        return ts_fail(err, errlen, "--baseline-header and --baseline-model need --baseline URL");
    return 0;
}

/* ---- thresholds -------------------------------------------------------------------- */

static int limits_from_json(json_t *j, limits *l, const char *where, char *err, size_t errlen)
{
    static const char *keys[] = {"max_abs", "max_rel", "min_top1"};
    double *dst[] = {&l->max_abs, &l->max_rel, &l->min_top1};
    const char *k;
    json_t *v;
    json_object_foreach(j, k, v) {
        size_t i = 0;
        while (i < 3 && strcmp(k, keys[i]) != 0) i++;
        if (i == 3) {
            if (!strcmp(k, "outputs") && !strcmp(where, "")) continue;
            return ts_fail(err, errlen, "%.100s: unknown key '%.60s' (max_abs, max_rel, min_top1%s)", where[0] ? where : "top level",
                        k, where[0] ? "" : ", outputs");
        }
        double d = json_number_value(v);
        if (!json_is_number(v) || d < 0 || (i == 2 && d > 1))
            return ts_fail(err, errlen, "%.100s%s%s: not a number %s", where, where[0] ? "." : "", k, i == 2 ? "in [0, 1]" : ">= 0");
        *dst[i] = d;
    }
    return 0;
}

static json_t *load_json_file(const char *path, const char *what, char *err, size_t errlen)
{
    struct stat st;
    if (stat(path, &st) != 0) {
        ts_fail(err, errlen, "%s %s: %s", what, path, strerror(errno));
        return NULL;
    }
    if (st.st_size > (off_t)PAR_FILE_MAX) {
        ts_fail(err, errlen, "%s %s: over %u MiB", what, path, PAR_FILE_MAX >> 20);
        return NULL;
    }
    json_error_t je;
    json_t *j = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
    if (!j) ts_fail(err, errlen, "%s %s: line %d: %.200s", what, path, je.line, je.text);
    else if (!json_is_object(j)) {
        ts_fail(err, errlen, "%s %s: not a JSON object", what, path);
        json_decref(j);
        j = NULL;
    }
    return j;
}

/* Each measured output's limits: flag, else the file's per-output value, else its global. */
static int resolve_limits(const opts *o, tally *t, char *err, size_t errlen)
{
    json_t *file = NULL;
    limits global = {NAN, NAN, NAN};
    int rc = -1;
    if (o->thresholds) {
        if (!(file = load_json_file(o->thresholds, "thresholds", err, errlen))) return -1;
        if (limits_from_json(file, &global, "", err, errlen) != 0) goto out;
        json_t *outs = json_object_get(file, "outputs");
        if (outs && !json_is_object(outs)) {
            ts_fail(err, errlen, "thresholds %s: \"outputs\" is not an object", o->thresholds);
            goto out;
        }
        const char *k;
        json_t *v;
        json_object_foreach(outs, k, v) {
            char where[100];
            snprintf(where, sizeof where, "outputs.%.60s", k);
            limits dummy;
            if (!json_is_object(v)) {
                ts_fail(err, errlen, "thresholds %s: %s is not an object", o->thresholds, where);
                goto out;
            }
            if (limits_from_json(v, &dummy, where, err, errlen) != 0) goto out;
        }
    }
    for (size_t i = 0; i < t->n_out; i++) {
        out_stat *s = &t->out[i];
        limits l = global;
        json_t *per = file ? json_object_get(json_object_get(file, "outputs"), s->name) : NULL;
        if (per) limits_from_json(per, &l, "", err, errlen); /* checked above */
        if (!isnan(o->flags.max_abs)) l.max_abs = o->flags.max_abs;
        if (!isnan(o->flags.max_rel)) l.max_rel = o->flags.max_rel;
        if (!isnan(o->flags.min_top1)) l.min_top1 = o->flags.min_top1;
        s->lim = l;
    }
    rc = 0;
out:
    json_decref(file);
    return rc;
}

/* ---- requests ---------------------------------------------------------------------- */

/* POSTs body to side s's model; returns the reply's "outputs" array (owned) or NULL. */
static json_t *infer(side *s, const char *model, const char *body, size_t len, size_t req, double timeout_s, char *err,
                     size_t errlen)
{
    char path[128], hdrs[PAR_HEADERS_MAX + 200], msg[400];
    snprintf(path, sizeof path, "/v2/models/%s/infer", model);
    snprintf(hdrs, sizeof hdrs, "Content-Type: application/json\r\nX-Request-Id: parity-%zu\r\n%s", req, s->headers);
    lb_reply r;
    if (lb_http(s->host, s->port, "POST", path, hdrs, body, len, PAR_REPLY_MAX, timeout_s, &r, msg, sizeof msg) != 0) {
        ts_fail(err, errlen, "%s: request %zu: POST %s: %s", s->url, req, path, msg);
        return NULL;
    }
    json_t *root = NULL, *outs = NULL;
    if (r.status != 200) {
        ts_fail(err, errlen, "%s: request %zu: POST %s: status %d: %.200s", s->url, req, path, r.status, r.body);
        goto out;
    }
    char pool[64];
    if (lb_reply_header(&r, "X-Tierrouter-Pool", pool, sizeof pool)) {
        if (!s->pool_seen) snprintf(s->pool, sizeof s->pool, "%s", pool);
        else if (strcmp(s->pool, pool) != 0) snprintf(s->pool, sizeof s->pool, "mixed");
        s->pool_seen = true;
    }
    json_error_t je;
    root = json_loadb(r.body, r.len, 0, &je);
    outs = root ? json_object_get(root, "outputs") : NULL;
    if (!json_is_array(outs)) {
        ts_fail(err, errlen, "%s: request %zu: the reply has no \"outputs\" list: %.200s", s->url, req, r.body);
        outs = NULL;
        goto out;
    }
    json_incref(outs);
out:
    json_decref(root);
    lb_reply_free(&r);
    return outs;
}

/* ---- comparison -------------------------------------------------------------------- */

static bool dt_float(const char *dt)
{
    return !strcmp(dt, "FP32") || !strcmp(dt, "FP64") || !strcmp(dt, "FP16") || !strcmp(dt, "BF16");
}

static json_t *find_output(json_t *outs, const char *name)
{
    size_t i;
    json_t *o;
    json_array_foreach(outs, i, o) {
        const char *n = json_string_value(json_object_get(o, "name"));
        if (n && !strcmp(n, name)) return o;
    }
    return NULL;
}

static out_stat *stat_for(tally *t, const char *name, const char *dt)
{
    for (size_t i = 0; i < t->n_out; i++)
        if (!strcmp(t->out[i].name, name)) return &t->out[i];
    if (t->n_out == PAR_MAX_OUTPUTS) return NULL;
    out_stat *s = &t->out[t->n_out++];
    memset(s, 0, sizeof *s);
    snprintf(s->name, sizeof s->name, "%s", name);
    snprintf(s->datatype, sizeof s->datatype, "%s", dt);
    s->is_float = dt_float(dt);
    return s;
}

/* Argmax of n numbers (the first of equal ones). */
static size_t argmax(json_t *data, size_t off, size_t n)
{
    size_t best = 0;
    double bv = json_number_value(json_array_get(data, off));
    for (size_t k = 1; k < n; k++) {
        double v = json_number_value(json_array_get(data, off + k));
        if (v > bv) bv = v, best = k;
    }
    return best;
}

/* One output of one request: target tv against baseline bv. */
static void compare_output(const opts *o, out_stat *s, size_t req, json_t *bv, json_t *tv)
{
    if (s->problem[0]) return;
    const char *tdt = json_string_value(json_object_get(tv, "datatype"));
    json_t *bshape = json_object_get(bv, "shape"), *tshape = json_object_get(tv, "shape");
    json_t *bd = json_object_get(bv, "data"), *td = json_object_get(tv, "data");
    if (!tdt || (strcmp(tdt, s->datatype) != 0 && !(s->is_float && dt_float(tdt)))) {
        snprintf(s->problem, sizeof s->problem, "request %zu: datatype %.16s, the baseline's %s", req, tdt ? tdt : "?",
                 s->datatype);
        return;
    }
    if (!json_equal(bshape, tshape) || !json_is_array(bshape)) {
        char *a = json_dumps(tshape, JSON_COMPACT), *b = json_dumps(bshape, JSON_COMPACT);
        snprintf(s->problem, sizeof s->problem, "request %zu: shape %.60s, the baseline's %.60s", req, a ? a : "?",
                 b ? b : "?");
        free(a);
        free(b);
        return;
    }
    size_t n = json_array_size(bd);
    if (!json_is_array(bd) || !json_is_array(td) || json_array_size(td) != n) {
        snprintf(s->problem, sizeof s->problem, "request %zu: %zu data elements, the baseline's %zu (binary or missing data?)",
                 req, json_array_size(td), n);
        return;
    }
    size_t nd = json_array_size(bshape);
    size_t last = nd ? (size_t)json_integer_value(json_array_get(bshape, nd - 1)) : 1;
    s->elems += n;
    if (s->is_float) {
        for (size_t k = 0; k < n; k++) {
            json_t *a = json_array_get(td, k), *b = json_array_get(bd, k);
            if (!json_is_number(a) || !json_is_number(b)) {
                snprintf(s->problem, sizeof s->problem, "request %zu: element %zu is not a number", req, k);
                return;
            }
            double x = json_number_value(a), y = json_number_value(b), e = fabs(x - y);
            double rel = e / fmax(fabs(y), o->rel_floor);
            if (e > s->max_abs) s->max_abs = e, s->abs_req = req, s->abs_idx = k;
            if (rel > s->max_rel) s->max_rel = rel;
        }
        /* a classifier's scores: top-1 over the last dimension, per row */
        if (nd >= 1 && last >= 2 && n % last == 0) {
            s->has_top1 = true;
            for (size_t r = 0; r < n / last; r++) {
                s->rows++;
                if (argmax(td, r * last, last) == argmax(bd, r * last, last)) s->agree++;
            }
        }
        return;
    }
    /* labels, ids, strings: exact; agreement counts per element */
    s->has_top1 = true;
    for (size_t k = 0; k < n; k++) {
        s->rows++;
        if (json_equal(json_array_get(td, k), json_array_get(bd, k))) s->agree++;
    }
}

static void compare(const opts *o, tally *t, size_t req, json_t *base, json_t *targ)
{
    size_t i;
    json_t *bv;
    json_array_foreach(base, i, bv) {
        const char *name = json_string_value(json_object_get(bv, "name"));
        const char *dt = json_string_value(json_object_get(bv, "datatype"));
        if (!name || !dt) {
            if (!t->problem[0]) snprintf(t->problem, sizeof t->problem, "request %zu: a baseline output lacks name or datatype", req);
            continue;
        }
        out_stat *s = stat_for(t, name, dt);
        if (!s) {
            if (!t->problem[0]) snprintf(t->problem, sizeof t->problem, "more than %d outputs", PAR_MAX_OUTPUTS);
            continue;
        }
        json_t *tv = find_output(targ, name);
        if (!tv) {
            if (!s->problem[0]) snprintf(s->problem, sizeof s->problem, "request %zu: missing from the target's reply", req);
            continue;
        }
        compare_output(o, s, req, bv, tv);
    }
    t->compared++;
}

/* ---- the report -------------------------------------------------------------------- */

static bool judge(tally *t)
{
    if (t->n_out == 0 && !t->problem[0]) snprintf(t->problem, sizeof t->problem, "the baseline's replies hold no output");
    bool all = !t->problem[0] && t->n_out > 0;
    for (size_t i = 0; i < t->n_out; i++) {
        out_stat *s = &t->out[i];
        double top1 = s->rows ? (double)s->agree / (double)s->rows : 1;
        s->pass = !s->problem[0];
        if (s->is_float && !isnan(s->lim.max_abs) && s->max_abs > s->lim.max_abs) s->pass = false;
        if (s->is_float && !isnan(s->lim.max_rel) && s->max_rel > s->lim.max_rel) s->pass = false;
        if (s->has_top1 && !isnan(s->lim.min_top1) && top1 < s->lim.min_top1) s->pass = false;
        all = all && s->pass;
    }
    return all;
}

static void limit_text(const out_stat *s, char *buf, size_t cap)
{
    size_t o = 0;
    buf[0] = '\0';
    if (s->is_float && !isnan(s->lim.max_abs)) o += (size_t)snprintf(buf + o, cap - o, "abs<=%g ", s->lim.max_abs);
    if (s->is_float && !isnan(s->lim.max_rel) && o < cap) o += (size_t)snprintf(buf + o, cap - o, "rel<=%g ", s->lim.max_rel);
    if (s->has_top1 && !isnan(s->lim.min_top1) && o < cap) o += (size_t)snprintf(buf + o, cap - o, "top1>=%g ", s->lim.min_top1);
    if (o == 0) snprintf(buf, cap, "-");
    else if (o < cap) buf[o - 1] = '\0';
}

static void report_text(const opts *o, const tally *t, bool pass, FILE *f)
{
    fprintf(f, "parity: target %s %s%s%s vs %s %s %s (%zu requests x %ld rows, seed %llu)\n", o->target.url, o->model,
            o->target.pool_seen ? " pool " : "", o->target.pool_seen ? o->target.pool : "",
            o->reference ? "reference" : "baseline", o->reference ? o->reference : o->baseline.url,
            o->baseline.model ? o->baseline.model : o->model, t->compared, o->rows, o->seed);
    if (o->has_baseline && o->baseline.pool_seen) fprintf(f, "baseline served by pool %s\n", o->baseline.pool);
    fprintf(f, "%-20s %-6s %10s %12s %12s %9s  %-30s %s\n", "output", "type", "elements", "max_abs", "max_rel", "top1",
            "limits", "result");
    for (size_t i = 0; i < t->n_out; i++) {
        const out_stat *s = &t->out[i];
        char abs[24] = "-", rel[24] = "-", top1[16] = "-", lim[80];
        if (s->is_float) {
            snprintf(abs, sizeof abs, "%.3e", s->max_abs);
            snprintf(rel, sizeof rel, "%.3e", s->max_rel);
        }
        if (s->has_top1 && s->rows) snprintf(top1, sizeof top1, "%.2f%%", 100.0 * (double)s->agree / (double)s->rows);
        limit_text(s, lim, sizeof lim);
        fprintf(f, "%-20s %-6s %10zu %12s %12s %9s  %-30s %s\n", s->name, s->datatype, s->elems, abs, rel, top1, lim,
                s->pass ? "ok" : "BROKEN");
        if (s->problem[0]) fprintf(f, "  %s: %s\n", s->name, s->problem);
        else if (s->is_float && s->max_abs > 0)
            fprintf(f, "  %s: largest error at request %zu, element %zu\n", s->name, s->abs_req, s->abs_idx);
    }
    if (t->problem[0]) fprintf(f, "problem: %s\n", t->problem);
    fprintf(f, "%s\n", pass ? "PASS" : "FAIL");
}

static json_t *limit_json(double v) { return isnan(v) ? json_null() : json_real(v); }

static json_t *report_json(const opts *o, const tally *t, bool pass)
{
    json_t *outs = json_array();
    for (size_t i = 0; i < t->n_out; i++) {
        const out_stat *s = &t->out[i];
        json_t *j = json_pack("{s:s,s:s,s:I,s:b}", "name", s->name, "datatype", s->datatype, "elements", (json_int_t)s->elems,
                              "pass", s->pass);
        if (s->is_float) {
            json_object_set_new(j, "max_abs", json_real(s->max_abs));
            json_object_set_new(j, "max_rel", json_real(s->max_rel));
        }
        if (s->has_top1)
            json_object_set_new(j, "top1", s->rows ? json_real((double)s->agree / (double)s->rows) : json_null());
        json_object_set_new(j, "limits", json_pack("{s:o,s:o,s:o}", "max_abs", limit_json(s->lim.max_abs), "max_rel",
                                                   limit_json(s->lim.max_rel), "min_top1", limit_json(s->lim.min_top1)));
        json_object_set_new(j, "problem", s->problem[0] ? json_string(s->problem) : json_null());
        json_array_append_new(outs, j);
    }
    json_t *r = json_pack("{s:s,s:s,s:s?,s:s?,s:I,s:I,s:I,s:b,s:o,s:o}", "model", o->model, "target", o->target.url,
                          "baseline", o->has_baseline ? o->baseline.url : NULL, "reference", o->reference,
                          "requests", (json_int_t)t->compared, "rows", (json_int_t)o->rows, "seed", (json_int_t)o->seed,
                          "pass", pass, "outputs", outs,
                          "problem", t->problem[0] ? json_string(t->problem) : json_null());
    if (r && o->target.pool_seen) json_object_set_new(r, "target_pool", json_string(o->target.pool));
    if (r && o->has_baseline && o->baseline.pool_seen) json_object_set_new(r, "baseline_pool", json_string(o->baseline.pool));
    return r;
}

static int write_json(json_t *j, const char *path, size_t flags)
{
    bool std = !strcmp(path, "-");
    FILE *f = std ? stdout : fopen(path, "w");
    if (!f) {
        fprintf(stderr, "tierbench: %s: %s\n", path, strerror(errno));
        return -1;
    }
    int bad = !j || json_dumpf(j, f, flags) != 0;
    fputc('\n', f);
    bad |= ferror(f);
    bad |= std ? fflush(f) : fclose(f);
    if (bad) fprintf(stderr, "tierbench: %s: could not write\n", path);
    return bad ? -1 : 0;
}

/* ---- the run ----------------------------------------------------------------------- */

/* The recorded requests: {"inputs": [...], "outputs": [...]} each; checked before any is sent. */
static json_t *load_reference(opts *o, char *err, size_t errlen)
{
    json_t *ref = load_json_file(o->reference, "reference", err, errlen);
    if (!ref) return NULL;
    const char *fmt = json_string_value(json_object_get(ref, "format"));
    const char *model = json_string_value(json_object_get(ref, "model"));
    json_t *reqs = json_object_get(ref, "requests");
    if (!fmt || strcmp(fmt, PAR_FORMAT) != 0) {
        ts_fail(err, errlen, "reference %s: \"format\" is not \"%s\"", o->reference, PAR_FORMAT);
        goto bad;
    }
    if (!model || !model_name_ok(model) || !json_is_array(reqs) || json_array_size(reqs) == 0 ||
        json_array_size(reqs) > PAR_MAX_REQUESTS) {
        ts_fail(err, errlen, "reference %s: needs \"model\" and 1..%d \"requests\"", o->reference, PAR_MAX_REQUESTS);
        goto bad;
    }
    size_t i;
    json_t *q;
    json_array_foreach(reqs, i, q) {
        if (!json_is_array(json_object_get(q, "inputs")) || !json_is_array(json_object_get(q, "outputs"))) {
            ts_fail(err, errlen, "reference %s: request %zu lacks an \"inputs\" or \"outputs\" list", o->reference, i);
            goto bad;
        }
    }
    if (!o->model) o->model = json_string_value(json_object_get(ref, "model")); /* lives as long as ref */
    json_t *rows = json_object_get(ref, "rows"), *seed = json_object_get(ref, "seed");
    if (json_is_integer(rows)) o->rows = (long)json_integer_value(rows);
    if (json_is_integer(seed)) o->seed = (unsigned long long)json_integer_value(seed);
    o->requests = (long)json_array_size(reqs);
    return ref;
bad:
    json_decref(ref);
    return NULL;
}

/* The body of generated request i: its own seed, so every request holds different rows. */
static char *make_body(lb_model *m, const opts *o, size_t i, size_t *len, char *err, size_t errlen)
{
    static lb_body b; /* 4 KiB of text: not on the stack */
    lb_free(m);
    if (lb_build(m, (uint32_t)o->rows, o->seed * 1000003u + i, err, errlen) != 0) return NULL;
    if (lb_body_make(m, (uint32_t)o->rows, false, &b) != 0) {
        ts_fail(err, errlen, "the request's JSON head is too long");
        return NULL;
    }
    char *body = malloc(b.total + 1);
    if (!body) {
        ts_fail(err, errlen, "out of memory for a %zu-byte body", b.total);
        return NULL;
    }
    size_t off = 0;
    for (size_t p = 0; p < b.n_part; p++) {
        memcpy(body + off, b.part[p].p, b.part[p].n);
        off += b.part[p].n;
    }
    body[off] = '\0';
    *len = off;
    return body;
}

static int run(opts *o, tally *t, json_t *ref, json_t *record, char *err, size_t errlen)
{
    static lb_model m;
    int rc = PARITY_EXIT_ERROR;
    char *body = NULL;
    json_t *req_in = NULL, *base = NULL, *targ = NULL;
    const char *bmodel = o->baseline.model ? o->baseline.model : o->model;
    if (!ref) {
        /* the baseline defines the interface; recording, the target does */
        side *meta = o->has_baseline ? &o->baseline : &o->target;
        if (lb_fetch(&m, meta->host, meta->port, o->has_baseline ? bmodel : o->model, o->timeout_s, err, errlen) != 0)
            goto out;
    }
    for (size_t i = 0; i < (size_t)o->requests; i++) {
        size_t len = 0;
        json_t *q = ref ? json_array_get(json_object_get(ref, "requests"), i) : NULL;
        if (ref) {
            json_t *wrap = json_pack("{s:O}", "inputs", json_object_get(q, "inputs"));
            body = wrap ? json_dumps(wrap, JSON_COMPACT) : NULL;
            json_decref(wrap);
            if (!body) {
                ts_fail(err, errlen, "out of memory");
                goto out;
            }
            len = strlen(body);
        } else if (!(body = make_body(&m, o, i, &len, err, errlen))) {
            rc = PARITY_EXIT_USAGE;
            goto out;
        }
        if (!(targ = infer(&o->target, o->model, body, len, i, o->timeout_s, err, errlen))) goto out;
        if (record) {
            json_error_t je;
            req_in = json_loadb(body, len, 0, &je);
            json_t *ins = json_object_get(req_in, "inputs");
            if (!ins || json_array_append_new(record, json_pack("{s:O,s:O}", "inputs", ins, "outputs", targ)) != 0) {
                ts_fail(err, errlen, "could not keep request %zu for the record", i);
                goto out;
            }
            json_decref(req_in);
            req_in = NULL;
            t->compared++;
        } else {
            if (ref) base = json_incref(json_object_get(q, "outputs"));
            else if (!(base = infer(&o->baseline, bmodel, body, len, i, o->timeout_s, err, errlen))) goto out;
            compare(o, t, i, base, targ);
            json_decref(base);
            base = NULL;
        }
        json_decref(targ);
        targ = NULL;
        free(body);
        body = NULL;
    }
    rc = PARITY_EXIT_PASS;
out:
    free(body);
    json_decref(req_in);
    json_decref(base);
    json_decref(targ);
    lb_free(&m);
    return rc;
}

int parity_main(int argc, char **argv)
{
    for (int i = 2; i < argc; i++)
        if (!strcmp(argv[i], "--llm")) return parity_llm_main(argc, argv);
    static opts o;
    static tally t;
    char err[1200];
    json_t *ref = NULL, *record = NULL;
    int rc = PARITY_EXIT_USAGE;
    o.requests = 16;
    o.rows = 8;
    o.seed = 1;
    o.timeout_s = 30;
    o.rel_floor = 1e-3;
    o.flags = (limits){NAN, NAN, NAN};
    int pr = parse(&o, argc, argv, err, sizeof err);
    if (pr > 0) {
        usage(stdout);
        return PARITY_EXIT_PASS;
    }
    if (pr < 0) {
        fprintf(stderr, "tierbench: %s\n", err);
        return PARITY_EXIT_USAGE;
    }
    if (o.reference && !(ref = load_reference(&o, err, sizeof err))) {
        fprintf(stderr, "tierbench: %s\n", err);
        goto out;
    }
    if (!o.model) o.model = "demo";
    if (resolve_limits(&o, &t, err, sizeof err) != 0) { /* a bad file is refused before any request */
        fprintf(stderr, "tierbench: %s\n", err);
        goto out;
    }
    if (o.record && !(record = json_array())) goto out;
    rc = run(&o, &t, ref, record, err, sizeof err);
    if (rc != PARITY_EXIT_PASS) {
        fprintf(stderr, "tierbench: %s\n", err);
        goto out;
    }
    if (record) {
        json_t *doc = json_pack("{s:s,s:s,s:s,s:I,s:I,s:O}", "format", PAR_FORMAT, "model", o.model, "target", o.target.url,
                                "rows", (json_int_t)o.rows, "seed", (json_int_t)o.seed, "requests", record);
        rc = write_json(doc, o.record, JSON_COMPACT) == 0 ? PARITY_EXIT_PASS : PARITY_EXIT_ERROR;
        json_decref(doc);
        if (rc == PARITY_EXIT_PASS && !o.quiet)
            printf("recorded %zu requests x %ld rows of %s from %s into %s\n", t.compared, o.rows, o.model, o.target.url,
                   o.record);
        goto out;
    }
    if (resolve_limits(&o, &t, err, sizeof err) != 0) {
        fprintf(stderr, "tierbench: %s\n", err);
        rc = PARITY_EXIT_USAGE;
        goto out;
    }
    bool pass = judge(&t);
    if (!o.quiet) report_text(&o, &t, pass, stdout);
    rc = pass ? PARITY_EXIT_PASS : PARITY_EXIT_BROKEN;
    if (o.json) {
        json_t *j = report_json(&o, &t, pass);
        if (write_json(j, o.json, JSON_INDENT(1)) != 0) rc = PARITY_EXIT_ERROR;
        json_decref(j);
    }
    if (fflush(stdout) != 0) rc = PARITY_EXIT_ERROR;
out:
    json_decref(record);
    json_decref(ref);
    return rc;
}
