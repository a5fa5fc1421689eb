/* tracecvt: `tierbench trace`, a router's access log turned into a trace (trace.h) that
 * `tierbench sim --trace` replays.
 *
 * Reads the JSON lines tierrouter writes with access_log: true, keeps those whose msg is
 * "access" and skips every other log line. Each access line becomes one arrival: its time is
 * the line's ts minus its duration_ms (the line is written when the request ends, so lines
 * come in completion order; arrivals are sorted back into arrival order), relative to the
 * first arrival; priority, tenant, data_class and model are copied; the size is 1, or with
 * --bytes-per-row B the request's bytes / B rounded up (1..TRACE_MAX_SIZE).
 *
 * A line that is not JSON, an access line with a missing or malformed field, or one whose
 * tenant or model a trace cannot hold (1..63 of [A-Za-z0-9_.:-]) is bad: counted, the first
 * few named on stderr, and the conversion goes on. Only a log with no good access line at
 * all is refused. */
#ifndef TS_TRACECVT_H
#define TS_TRACECVT_H

#include <stddef.h>
#include <stdio.h>

#include "trace.h"

typedef struct {
    size_t lines;   /* lines read */
    size_t access;  /* access lines converted */
    size_t skipped; /* other log lines (valid JSON, msg not "access") */
    size_t bad;     /* lines neither converted nor skipped */
} tracecvt_counts;


/* `tierbench trace --access-log FILE [--out FILE] [--bytes-per-row B]`. Exit codes: 0
 * written, 64 bad arguments or no good access line, 1 a file not read or written. */
int tracecvt_main(int argc, char **argv);

#endif
