/* costbook: the router's cost book (not tierbench's cost report): what each request cost,
 * by pool, tenant and priority, in total and over a window.
 *
 * usage pools bill usd_per_hour x the compute time the worker reports per request
 * (Tierserve-Compute-Ms: its share of the Run() it was batched into; a /v1 stream reports it
 * in its accounting line, see v1.h); fixed pools accrue
 * usd_per_hour per backend whether used or not, spread at each tick over the requests the
 * pool served since the previous tick (an idle pool's cost goes to tenant "idle"). */
#ifndef TS_ROUTER_COSTBOOK_H
#define TS_ROUTER_COSTBOOK_H

#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "policy.h"
#include "rconfig.h"
#include "tenant.h"

#define COST_BUCKET_S 10
#define COST_BUCKETS 360 /* one hour of 10 s buckets */

typedef struct cost_book cost_book;

/* The book's clock starts at now: the first tick accrues fixed-price pools' cost since then
 * and shares it among the requests served meanwhile. */
cost_book *cost_create(const router_config *c, double now);
void cost_destroy(cost_book *b);
/* tenant: index into the config's tenants, or tenants_count for "unknown". */
size_t cost_tenant_index(const router_config *c, const char *name);
/* One request served: usage cost now, fixed cost at the next tick. */
void cost_request(cost_book *b, size_t pool, size_t tenant, priority_class prio, double compute_s, double now);
/* More compute time of a request cost_request() counted already (a cancelled /v1 try's,
 * reported by its worker later): usage cost only, no request. */
void cost_compute(cost_book *b, size_t pool, size_t tenant, priority_class prio, double compute_s, double now);
/* The tokens a /v1 request used (as its worker reported them, or as counted): priced at the
 * pool's cost.usd_per_1k_tokens on top of what cost_request() billed, and counted in
 * tierrouter_tokens_total. Call after cost_request() for the same request. */
void cost_tokens(cost_book *b, size_t pool, size_t tenant, priority_class prio, uint64_t prompt,
                 uint64_t completion, double now);
/* Accrues fixed pools' cost since the last tick; backends: per pool, how many. */
void cost_tick(cost_book *b, const size_t *backends, double now);
/* Prometheus lines for tierrouter_cost_usd_total, tierrouter_tokens_total (by pool and
 * priority), tierrouter_tenant_tokens_total and tierrouter_compute_seconds_total (by pool,
 * tenant and priority). */
void cost_metrics(const cost_book *b, buf *out);
/* One pool's cost and requests over the last window_s seconds (<= one hour). */
void cost_pool_window(const cost_book *b, size_t pool, double window_s, double now, double *usd, double *requests);
/* One pool's totals since start, for the dashboard: its cost (every tenant and priority,
 * idle included) and the /v1 tokens it served per priority (prompt, completion). */
void cost_pool_totals(const cost_book *b, size_t pool, double *usd, uint64_t prompt[PRIO_COUNT],
                      uint64_t completion[PRIO_COUNT]);
/* What tenant (an index as above, "unknown" included) spent, as its budgets count it: every
 * cost the book attributes to it, metered by the wall clock (tenant.h: a rolling hour and the
 * UTC day). NULL for an index out of range. */
const tenant_meter *cost_tenant_meter(const cost_book *b, size_t tenant);
/* The wall clock the meters use (seconds since the epoch). */
double cost_wall_now(void);
/* /admin/cost JSON over the last window_s seconds (<= one hour). */
void cost_json(const cost_book *b, double window_s, double now, buf *out);

#endif
