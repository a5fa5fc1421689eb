/* rstatus: what tierrouter says about itself (rstatus.c): /admin/status (the dashboard's
 * source), /metrics, and the KServe repository index. */
#ifndef TS_ROUTER_RSTATUS_H
#define TS_ROUTER_RSTATUS_H

#include "buf.h"
#include "router.h"

/* POST /v2/repository/index: every logical model the pools serve, READY when a healthy
 * backend of a pool serving it has its physical model ready. */
void rt_repository_index(router *r, buf *out);
void rt_status_json(router *r, buf *out);
void rt_metrics(router *r, buf *out);

#endif
