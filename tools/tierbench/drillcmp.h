/* drillcmp: "the simulator against the live run", the comparison both `tierbench drill surge`
 * and `tierbench drill day` report: rows of a live and a simulated figure, each judged against
 * a tolerance or shown for the record, the verdict, the table as text and JSON, and the small
 * pieces both drills share (P95 of a sample, a number option).
 */
#ifndef TS_DRILLCMP_H
#define TS_DRILLCMP_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#define DC_MAX_ROWS 64

/* One line of the comparison. judged: it counts towards the verdict. */
typedef struct {
    char name[96];
    const char *unit;
    double live, sim; /* NAN: no figure */
    bool judged, agree;
    char why[160];
} dc_row;

typedef struct {
    dc_row rows[DC_MAX_ROWS];
    size_t n;
    bool agree; /* every judged row agrees (dc_verdict) */
} dc_table;

/* A new row named fmt % arg, no figures yet; NULL when the table is full. */
dc_row *dc_add(dc_table *t, const char *unit, const char *fmt, const char *arg);
/* r agrees when its figures are within tolerance; `what` names the tolerance. */
void dc_judge(dc_row *r, double tolerance, const char *what);
/* Figures shown for the record only (r may be NULL: a full table). */
void dc_info(dc_row *r, double live, double sim, const char *why);
/* Sets t->agree. */
void dc_verdict(dc_table *t);
/* The rows as a table with `decimals` digits, then "verdict: " + agree or disagree. */
void dc_text(const dc_table *t, int decimals, const char *agree, const char *disagree, FILE *out);
/* The rows as a JSON array. */
json_t *dc_rows_json(const dc_table *t);
/* Writes o (taking it) to path, "-" for stdout; 0, or -1 (said on stderr). */
int dc_write_json(json_t *o, const char *path);
/* P95 (nearest rank, as the simulator's) of v[0..n); sorts v. -1 without samples. */
double dc_p95(double *v, size_t n);
/* --key's value as a number in [lo, hi]. */
int dc_number(const char *key, const char *v, double lo, double hi, double *out, char *err, size_t errlen);

#endif
