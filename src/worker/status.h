/* status: the JSON and Prometheus views of the worker (/v2/status, /metrics, metadata).
 * Pure renderers over a snapshot the server fills in; loop thread only. */
#ifndef TS_STATUS_H
#define TS_STATUS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "ep.h"
#include "model.h"
#include "settings.h"

typedef struct {
    const ts_settings *set;
    const ep_result *ep;
    const model_repo *repo; /* may be NULL early on */
    bool live, ready, draining;
    size_t in_flight;
    uint64_t inline_runs; /* requests an idle worker ran on its loop thread */
    const char *hw_json;
    /* what the worker holds for its clients, and what it refused (metrics only) */
    size_t connections;           /* client connections open now */
    uint64_t connections_refused; /* past --max-connections */
    uint64_t connections_cut;     /* too slow to send a request or to read a reply */
    size_t body_bytes, body_limit;   /* request bytes held (--max-inflight-body-bytes) */
    uint64_t body_refused;
    size_t reply_bytes, reply_limit; /* reply bytes not yet written (--max-pending-reply-bytes) */
    uint64_t reply_refused;
    uint64_t unauthorized;        /* 401s (--auth-token) */
} status_view;

void status_json(const status_view *v, buf *out);
void status_metrics(const status_view *v, buf *out);
void status_model_metadata(const model_repo *r, const ts_model *m, buf *out);
/* gpu: the worker runs a GPU tier (instance kind KIND_GPU) */
void status_model_config(const ts_model *m, bool gpu, buf *out);
void status_repository_index(const model_repo *r, buf *out);

#endif
