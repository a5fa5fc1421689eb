/* tracecvt.c: `tierbench trace`, a router access log into a replayable trace (tracecvt.h). */
#include "tracecvt.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"

#define EXIT_USAGE 64
/* the router's log lines are at most 8 KiB; twice that leaves room for a future field */
#define CVT_LINE_MAX 16384
#define CVT_BAD_SHOWN 5

typedef struct {
    double t;   /* arrival, seconds since the epoch */
    size_t seq; /* line order: equal arrivals keep it */
    trace_arrival a;
} cvt_item;

/* Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's days_from_civil): no
 * timegm, no TZ. */
static long days_from_civil(long y, long m, long d)
{
    y -= m <= 2;
    long era = (y >= 0 ? y : y - 399) / 400;
    long yoe = y - era * 400;
    long doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    long doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

/* The log's "YYYY-MM-DDTHH:MM:SS.ffffffZ" (UTC) as seconds since the epoch. */
static int parse_ts(const char *s, double *out)
{
    int y, mo, d, h, mi, sec, n = 0;
    if (sscanf(s, "%4d-%2d-%2dT%2d:%2d:%2d%n", &y, &mo, &d, &h, &mi, &sec, &n) != 6 || n != 19) return -1;
    if (mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || sec > 60 || y < 1970) return -1;
    double frac = 0;
    const char *p = s + n;
    if (*p == '.') {
        double scale = 0.1;
        if (!(p[1] >= '0' && p[1] <= '9')) return -1;
        for (p++; *p >= '0' && *p <= '9'; p++, scale /= 10) frac += (*p - '0') * scale;
    }
    if (strcmp(p, "Z") != 0) return -1;
    *out = (double)days_from_civil(y, mo, d) * 86400.0 + h * 3600.0 + mi * 60.0 + sec + frac;
    return 0;
}

static const char *str_field(json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);
    return json_is_string(v) ? json_string_value(v) : NULL;
}

/* One parsed access line into it; -1 with why (a field named) when it cannot be. */
static int access_item(json_t *o, double bytes_per_row, trace *t, cvt_item *it, char *why, size_t len)
{
    const char *ts = str_field(o, "ts"), *dur = str_field(o, "duration_ms"), *prio = str_field(o, "priority"),
               *tenant = str_field(o, "tenant"), *dc = str_field(o, "data_class"), *model = str_field(o, "model"),
               *bytes = str_field(o, "request_bytes");
    double end_s, dur_ms;
    char *e = NULL;
    if (!ts || parse_ts(ts, &end_s) != 0) return ts_fail(why, len, "ts is missing or not an ISO 8601 UTC time");
    errno = 0;
    dur_ms = dur && dur[0] >= '0' && dur[0] <= '9' ? strtod(dur, &e) : NAN;
    if (!e || *e || errno || !isfinite(dur_ms)) return ts_fail(why, len, "duration_ms is missing or not a number >= 0");
    int p = -1;
    for (int i = 0; prio && i < PRIO_COUNT; i++)
        if (strcmp(prio, trace_prio_name((priority_class)i)) == 0) p = i;
    if (p < 0) return ts_fail(why, len, "priority is missing or not urgent, normal or batch");
    bool sensitive = dc && strcmp(dc, "sensitive") == 0;
    if (!dc || (!sensitive && strcmp(dc, "public") != 0))
        return ts_fail(why, len, "data_class is missing or not sensitive or public");
    if (!tenant || !trace_name_ok(tenant)) return ts_fail(why, len, "tenant is missing or not 1..63 of [A-Za-z0-9_.:-]");
    if (!model || !trace_name_ok(model)) return ts_fail(why, len, "model is missing or not 1..63 of [A-Za-z0-9_.:-]");
    errno = 0;
    e = NULL;
    unsigned long long nb = bytes && bytes[0] >= '0' && bytes[0] <= '9' ? strtoull(bytes, &e, 10) : 0;
    if (!e || *e || errno) return ts_fail(why, len, "request_bytes is missing or not an unsigned integer");
    int ti = trace_intern(t->tenants, &t->n_tenants, tenant);
    int mi = trace_intern(t->models, &t->n_models, model);
    if (ti < 0 || mi < 0) return ts_fail(why, len, "more than %d distinct tenants or models", TRACE_MAX_NAMES);
    double size = bytes_per_row > 0 ? ceil((double)nb / bytes_per_row) : 1;
    if (size < 1) size = 1;
    if (size > TRACE_MAX_SIZE) size = TRACE_MAX_SIZE;
    it->t = end_s - dur_ms / 1e3;
    it->a = (trace_arrival){.size = (uint32_t)size, .prio = (uint8_t)p, .sensitive = sensitive,
                            .tenant = (uint8_t)ti, .model = (uint8_t)mi};
    return 0;
}

/* One line into buf: 1 read, 0 at the end, -1 too long, -2 a NUL in it (either way the
 * rest of the line is consumed, so the next one starts clean). */
static int read_line(FILE *f, char *buf, size_t cap)
{
    size_t n = 0;
    int c = EOF;
    bool over = false, nul = false;
    while ((c = getc(f)) != EOF && c != '\n') {
        if (c == '\0') nul = true;
        if (n + 1 >= cap) over = true;
        else buf[n++] = (char)c;
    }
    if (c == EOF && n == 0 && !over) return 0;
    buf[n] = '\0';
    return over ? -1 : nul ? -2 : 1;
}

static int cmp_item(const void *a, const void *b)
{
    const cvt_item *x = a, *y = b;
    if (x->t != y->t) return x->t < y->t ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

static void note_bad(FILE *bad_out, tracecvt_counts *c, const char *name, const char *why)
{
    c->bad++;
    if (bad_out && c->bad <= CVT_BAD_SHOWN) fprintf(bad_out, "tierbench trace: %s:%zu: %s\n", name, c->lines, why);
}

/* Converts the log read from in into out (trace_free it). bytes_per_row 0: every size 1.
 * bad_out, when not NULL, gets one "name:line: why" note for each of the first few bad lines.
 * Returns 0, or -1 with a message in err (no good access line, a read error, out of memory);
 * counts are filled in either way. */
static int tracecvt_convert(FILE *in, const char *name, double bytes_per_row, trace *out, tracecvt_counts *counts,
                            FILE *bad_out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    memset(counts, 0, sizeof *counts);
    char *line = malloc(CVT_LINE_MAX);
    cvt_item *items = NULL;
    size_t n = 0, cap = 0;
    int rc = 0, got;
    if (!line) return ts_fail(err, errlen, "out of memory");
    while ((got = read_line(in, line, CVT_LINE_MAX)) != 0) {
        counts->lines++;
        if (got < 0) {
            note_bad(bad_out, counts, name, got == -1 ? "line longer than 16384 bytes" : "a NUL byte in the line");
            continue;
        }
        if (line[0] == '\0') continue;
        json_error_t je;
        json_t *o = json_loads(line, JSON_REJECT_DUPLICATES, &je);
        if (!json_is_object(o)) {
            json_decref(o);
            note_bad(bad_out, counts, name, "not a JSON log line");
            continue;
        }
        const char *msg = str_field(o, "msg");
        if (!msg || strcmp(msg, "access") != 0) {
            json_decref(o);
            counts->skipped++;
            continue;
        }
        if (n == cap) {
            size_t ncap = cap ? cap * 2 : 1024;
            if (ncap > TRACE_MAX_REQUESTS) ncap = TRACE_MAX_REQUESTS;
            cvt_item *g = n < TRACE_MAX_REQUESTS ? realloc(items, ncap * sizeof *g) : NULL;
            if (!g) {
                json_decref(o);
                rc = ts_fail(err, errlen, "%s: more than %d access lines (or out of memory)", name, TRACE_MAX_REQUESTS);
                goto out;
            }
            items = g;
            cap = ncap;
        }
        char why[160];
        items[n].seq = n;
        if (access_item(o, bytes_per_row, out, &items[n], why, sizeof why) != 0) note_bad(bad_out, counts, name, why);
        else n++;
        json_decref(o);
    }
    if (ferror(in)) {
        rc = ts_fail(err, errlen, "%s: read error", name);
        goto out;
    }
    if (n == 0) {
        rc = ts_fail(err, errlen, "%s: no good access line in %zu lines (%zu bad, %zu other log lines): is access_log "
                                  "on and log_level info or lower?",
                     name, counts->lines, counts->bad, counts->skipped);
        goto out;
    }
    /* lines come as requests end; a replay wants them as they arrived */
    qsort(items, n, sizeof *items, cmp_item);
    out->a = malloc(n * sizeof *out->a);
    if (!out->a) {
        rc = ts_fail(err, errlen, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        out->a[i] = items[i].a;
        out->a[i].t = items[i].t - items[0].t;
    }
    out->n = out->cap = n;
    counts->access = n;
out:
    free(items);
    free(line);
    if (rc != 0) trace_free(out);
    return rc;
}

static void usage(FILE *f)
{
    fputs("usage: tierbench trace --access-log ROUTER.log [--out trace.csv] [--bytes-per-row B]\n"
          "  --access-log FILE   tierrouter's log with access_log: true (\"-\": stdin); other lines are skipped\n"
          "  --out FILE          the trace CSV (default stdout), for tierbench sim --trace\n"
          "  --bytes-per-row B   size = the request's bytes / B, rounded up (default: every size 1)\n",
          f);
}

int tracecvt_main(int argc, char **argv)
{
    const char *log_path = NULL, *out_path = NULL;
    double bpr = 0;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        }
        bool known = !strcmp(a, "--access-log") || !strcmp(a, "--out") || !strcmp(a, "--bytes-per-row");
        if (!known) {
            fprintf(stderr, "tierbench trace: unknown argument '%.100s' (see tierbench trace --help)\n", a);
            return EXIT_USAGE;
        }
        if (i + 1 >= argc || !argv[i + 1][0]) {
            fprintf(stderr, "tierbench trace: %s needs a value\n", a);
            return EXIT_USAGE;
        }
        const char *v = argv[++i];
        if (!strcmp(a, "--access-log")) log_path = v;
        else if (!strcmp(a, "--out")) out_path = v;
        else {
            char *e = NULL;
            errno = 0;
            bpr = v[0] >= '0' && v[0] <= '9' ? strtod(v, &e) : NAN;
            if (!e || *e || errno || !isfinite(bpr) || bpr < 1) {
                fprintf(stderr, "tierbench trace: --bytes-per-row: '%.40s' is not a number >= 1\n", v);
                return EXIT_USAGE;
            }
        }
    }
    if (!log_path) {
        fprintf(stderr, "tierbench trace: --access-log FILE is required\n");
        usage(stderr);
        return EXIT_USAGE;
    }
    bool std_in = !strcmp(log_path, "-");
    FILE *in = std_in ? stdin : fopen(log_path, "r");
    if (!in) {
        fprintf(stderr, "tierbench trace: %s: %s\n", log_path, strerror(errno));
        return 1;
    }
    trace t;
    tracecvt_counts c;
    char err[400];
    int rc = tracecvt_convert(in, log_path, bpr, &t, &c, stderr, err, sizeof err);
    if (!std_in) fclose(in);
    if (rc != 0) {
        fprintf(stderr, "tierbench trace: %s\n", err);
        return strstr(err, "read error") || strstr(err, "out of memory") ? 1 : EXIT_USAGE;
    }
    bool std_out = !out_path || !strcmp(out_path, "-");
    FILE *f = std_out ? stdout : fopen(out_path, "w");
    if (!f) {
        fprintf(stderr, "tierbench trace: %s: %s\n", out_path, strerror(errno));
        trace_free(&t);
        return 1;
    }
    trace_write(&t, f);
    int bad = ferror(f);
    bad |= std_out ? fflush(f) : fclose(f);
    /* the counts go to stderr, so that the trace on stdout stays a clean file */
    fprintf(stderr, "tierbench trace: %zu requests over %.3f s from %zu lines (%zu other log lines skipped, %zu bad)\n",
            c.access, trace_span(&t), c.lines, c.skipped, c.bad);
    trace_free(&t);
    if (bad) {
        fprintf(stderr, "tierbench trace: %s: could not write\n", std_out ? "stdout" : out_path);
        return 1;
    }
    return 0;
}
