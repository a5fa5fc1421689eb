/* report: a simulation's figures as text (stdout), JSON, CSV, a timeline CSV and an SVG.
 * Every number is printed with a fixed format and no wall-clock time appears anywhere, so
 * the same run writes the same bytes. */
#ifndef TS_REPORT_H
#define TS_REPORT_H

#include <stdio.h>

#include "sim.h"
#include "trace.h"

/* source: what the arrivals came from (a path or "generated ..."). max_events: policy
 * events listed (the rest counted). */
void report_text(const sim_config *c, const char *source, const sim_result *r, size_t max_events, FILE *out);
void report_json(const sim_config *c, const char *source, const sim_result *r, FILE *out);
/* One row per priority (and "all") and per pool, the same columns. */
void report_csv(const sim_config *c, const sim_result *r, FILE *out);
/* One markdown row (header: the header lines first) to compare fleets on one trace. */
void report_row(const sim_config *c, const sim_result *r, const char *label, bool header, FILE *out);
/* One row per timeline step. */
void report_timeline_csv(const sim_result *r, FILE *out);
/* Arrivals, the lead GPU pool's p95, the share served on CPU and the stage over time. */
void report_svg(const sim_config *c, const sim_result *r, FILE *out);

#endif
