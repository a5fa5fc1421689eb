/* tenant: budgets and fair share between tenants, as pure code the router and the simulator
 * share (docs/router.md "Tenant budgets" and "Fair share between tenants").
 *
 *   tenant_meter_*()      what a tenant spent over a rolling hour (60 one-minute buckets)
 *                         and over the current calendar day in UTC, fed with cost as it is
 *                         billed; the caller owns the meter (one per tenant, fixed size)
 *   tenant_budget_check() within budget, past the soft budget (demote) or past the hard
 *                         one (refuse, with the seconds until the window frees enough)
 *   tenant_demote()       the priority a demoted request runs at
 *   tenant_fair_pick()    which tenant's request leaves a priority's admission queue next:
 *                         weighted fair queueing over finish tags (start-time fair queueing)
 *   tenant_fair_victim()  which tenant gives up a place when the queue is full
 *
 * Times are seconds since the Unix epoch (UTC): the calendar day is what a finance team reads.
 * Nothing here reads a clock.
 */
#ifndef TS_TENANT_H
#define TS_TENANT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "policy.h"

#define TENANT_BUCKET_S 60
#define TENANT_BUCKETS 60 /* one rolling hour */
#define TENANT_DAY_S 86400

typedef enum { TENANT_HOUR = 0, TENANT_DAY, TENANT_WINDOWS } tenant_window;

/* A tenant's budgets in the router's cost units per window; 0: none. */
typedef struct {
    double soft[TENANT_WINDOWS], hard[TENANT_WINDOWS];
} tenant_budget;

typedef struct {
    double bucket[TENANT_BUCKETS];
    int64_t bucket_id[TENANT_BUCKETS]; /* the minute each bucket holds (-1: none) */
    int64_t day;                       /* the UTC day day_spent belongs to */
    double day_spent;
} tenant_meter;

void tenant_meter_init(tenant_meter *m);
/* cost billed to the tenant at now (cost < 0 or not finite: ignored) */
void tenant_meter_add(tenant_meter *m, double cost, double now);
/* Spent over the rolling hour (the current minute and the 59 before it) or the UTC day. */
double tenant_meter_spent(const tenant_meter *m, tenant_window w, double now);

typedef enum { TENANT_OK = 0, TENANT_SOFT, TENANT_HARD } tenant_state;

typedef struct {
    tenant_state state;
    tenant_window window; /* the window that decided (the hard one; for soft the first passed) */
    double limit;         /* the budget that was passed */
    double spent;         /* what that window holds now */
    double retry_after_s; /* TENANT_HARD: until every passed hard budget is below its limit
                           * again (>= 1 s) */
} tenant_verdict;

/* A budget is passed once spent reaches it. Hard wins over soft; between windows, the one
 * that frees last decides a refusal (its Retry-After), the hour first otherwise. */
void tenant_budget_check(const tenant_budget *b, const tenant_meter *m, double now, tenant_verdict *out);

/* urgent -> normal, normal -> batch, batch stays batch. */
priority_class tenant_demote(priority_class p);

/* Weighted fair share within one priority (start-time fair queueing over tenants).
 * finish[t]: tenant t's finish tag, vtime: the queue's virtual clock, all 0 at start, kept by
 * the caller per priority; weight[t] > 0.
 * tenant_fair_join: tenant t's sub-queue was empty and gets a request: its tag starts at the
 * virtual time at least, so a tenant cannot bank credit while away.
 * tenant_fair_pick: of the tenants with waiting[t] > 0, the one whose next request finishes
 * first, finish[t] + 1/weight[t] (lowest index on ties), or SIZE_MAX when none waits: a
 * tenant's burst gets its weight's share of the turns while others wait, no more.
 * tenant_fair_charge: tenant t's request leaves the queue. */
void tenant_fair_join(double *finish, double vtime, size_t t);
size_t tenant_fair_pick(const double *finish, const double *weight, const size_t *waiting, size_t n);
void tenant_fair_charge(double *finish, double *vtime, const double *weight, size_t t);
/* The queue is full of requests of this priority or higher: the tenant holding the most
 * places per weight gives its newest one up, if it holds more than `me` would after queueing
 * (queued[t] / weight[t] > (queued[me] + 1) / weight[me]); else SIZE_MAX (refuse the new
 * request as before). queued: this priority's waiting requests per tenant. */
size_t tenant_fair_victim(const size_t *queued, const double *weight, size_t n, size_t me);

#endif
