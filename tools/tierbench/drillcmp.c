#include "drillcmp.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"

dc_row *dc_add(dc_table *t, const char *unit, const char *fmt, const char *arg)
{
    if (t->n == DC_MAX_ROWS) return NULL;
    dc_row *r = &t->rows[t->n++];
    memset(r, 0, sizeof *r);
    snprintf(r->name, sizeof r->name, fmt, arg);
    r->unit = unit;
    r->live = r->sim = NAN;
    return r;
}

void dc_judge(dc_row *r, double tolerance, const char *what)
{
    r->judged = true;
    r->agree = fabs(r->sim - r->live) <= tolerance + 1e-9;
    snprintf(r->why, sizeof r->why, "%s %.3g %s", r->agree ? "within" : "apart by more than", tolerance, what);
}

void dc_info(dc_row *r, double live, double sim, const char *why)
{
    if (!r) return;
    r->live = live, r->sim = sim;
    snprintf(r->why, sizeof r->why, "not judged: %s", why);
}

void dc_verdict(dc_table *t)
{
    t->agree = true;
    for (size_t i = 0; i < t->n; i++)
        if (t->rows[i].judged && !t->rows[i].agree) t->agree = false;
}

static void put_fig(FILE *out, double v, const char *unit, int decimals)
{
    if (isnan(v)) fprintf(out, "%12s", "-");
    else fprintf(out, "%10.*f%-2s", decimals, v, unit);
}

void dc_text(const dc_table *t, int decimals, const char *agree, const char *disagree, FILE *out)
{
    fprintf(out, "%-28s %12s %12s  %s\n", "", "live", "sim", "verdict");
    for (size_t i = 0; i < t->n; i++) {
        const dc_row *r = &t->rows[i];
        fprintf(out, "%-28s ", r->name);
        put_fig(out, r->live, r->unit, decimals);
        fputc(' ', out);
        put_fig(out, r->sim, r->unit, decimals);
        fprintf(out, "  %s%s\n", r->judged ? (r->agree ? "agree: " : "DISAGREE: ") : "", r->why);
    }
    fprintf(out, "verdict: %s\n", t->agree ? agree : disagree);
}

static json_t *num_or_null(double v) { return isnan(v) ? json_null() : json_real(v); }

json_t *dc_rows_json(const dc_table *t)
{
    json_t *rows = json_array();
    for (size_t i = 0; i < t->n; i++) {
        const dc_row *r = &t->rows[i];
        json_array_append_new(rows, json_pack("{s:s,s:s,s:o,s:o,s:b,s:b,s:s}", "name", r->name, "unit", r->unit, "live",
                                              num_or_null(r->live), "sim", num_or_null(r->sim), "judged", r->judged,
                                              "agree", r->agree, "why", r->why));
    }
    return rows;
}

int dc_write_json(json_t *o, const char *path)
{
    bool std = !strcmp(path, "-");
    FILE *f = std ? stdout : fopen(path, "w");
    int bad = !f || !o || json_dumpf(o, f, JSON_INDENT(2)) != 0;
    if (f) bad |= std ? fflush(f) : fclose(f);
    json_decref(o);
    if (bad) fprintf(stderr, "tierbench: %s: could not write\n", path);
    return bad ? -1 : 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

double dc_p95(double *v, size_t n)
{
    if (!n) return -1;
    qsort(v, n, sizeof *v, cmp_double);
    size_t k = (size_t)ceil(0.95 * (double)n);
    return v[k ? k - 1 : 0];
}

int dc_number(const char *key, const char *v, double lo, double hi, double *out, char *err, size_t errlen)
{
    char *end;
    double x = v ? strtod(v, &end) : NAN;
    if (!v || end == v || *end || !(x >= lo && x <= hi))
        return ts_fail(err, errlen, "--%s: '%.40s' is not a number in [%g, %g]", key, v ? v : "", lo, hi);
    *out = x;
    return 0;
}
