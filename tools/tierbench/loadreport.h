/* loadreport: what `tierbench load` measured, per request and summed up per priority and
 * per pool (the router's X-Tierrouter-Pool reply header), as text, JSON and CSV.
 *
 * Latency is measured from the time a request was SCHEDULED to be sent, not from the time
 * it was sent: when the loader (or a full connection pool) falls behind, the wait counts.
 * (--latency-from send reports the closed-loop figure instead, to show what that hides.)
 */
#ifndef TS_LOADREPORT_H
#define TS_LOADREPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "trace.h"

#define LOAD_MAX_POOLS 16 /* distinct pool names kept; more are counted as "other" */

typedef enum {
    LE_NONE = 0,   /* a reply came (any status) */
    LE_CONNECT,    /* the connection could not be opened */
    LE_TIMEOUT,    /* no complete reply within --timeout of the send */
    LE_IO,         /* the connection broke, or the reply was not HTTP/1.x */
    LE_CANCELLED,  /* interrupted (SIGINT) before it ended */
    LE_COUNT
} load_err;

typedef struct {
    double sched, sent, done; /* seconds from the start; sent < 0: never sent */
    uint16_t status;          /* HTTP status, 0 without a reply */
    uint8_t err;              /* load_err */
    uint8_t pool;             /* index into load_result.pools */
} load_rec;

typedef struct {
    const trace *t;           /* the arrivals, rec[i] is t->a[i] */
    const load_rec *rec;
    size_t n;
    char pools[LOAD_MAX_POOLS][64]; /* [0] is "-": no X-Tierrouter-Pool header */
    size_t n_pools;
    double span_s;            /* from the start to the last reply */
    bool from_send;           /* latency from the actual send time (closed-loop view) */
    size_t max_open;          /* most connections open at once */
    size_t connects;          /* connections opened */
    const char *source, *url;
} load_result;

void loadreport_text(const load_result *r, FILE *out);
void loadreport_json(const load_result *r, FILE *out);
/* One row per priority ("all" first) and per pool, the same columns. */
void loadreport_csv(const load_result *r, FILE *out);
/* One row per request: i,sched_s,sent_s,done_s,latency_s,priority,tenant,data_class,model,size,status,error,pool */
void loadreport_requests_csv(const load_result *r, FILE *out);
const char *loadreport_err_name(load_err e);

#endif
