/* tenants: what the router keeps per tenant beyond the cost book (docs/router.md "Tenant
 * budgets" and "Fair share between tenants"): budget verdicts over the book's meters, the
 * demoted and refused counters, and the admission queue's fair-share tags. Tenants are the
 * configured ones plus one "unknown" that every unconfigured name shares, so nothing here
 * grows with what clients send. Per router process: with N replicas each enforces the whole
 * budget on what it sees (set budgets / N to enforce the total). */
#ifndef TS_ROUTER_TENANTS_H
#define TS_ROUTER_TENANTS_H

#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "costbook.h"
#include "policy.h"
#include "rconfig.h"
#include "tenant.h"

typedef struct rt_tenants {
    const router_config *cfg;
    size_t n;                    /* configured + unknown */
    tenant_budget *budget;       /* [n] (unknown: none) */
    double *weight;              /* [n] */
    uint64_t *demoted, *refused; /* [n] */
    double *finish[PRIO_COUNT];  /* [n] fair-share tags per priority */
    double vtime[PRIO_COUNT];
    size_t *waiting[PRIO_COUNT]; /* [n] requests queued per priority and tenant */
} rt_tenants;

int rt_tenants_init(rt_tenants *t, const router_config *c);
void rt_tenants_free(rt_tenants *t);
/* The tenant's budget verdict now (wall clock), from the book's meter. */
void rt_tenants_check(const rt_tenants *t, const cost_book *b, size_t tenant, tenant_verdict *v);
/* "tenant budget 'acme' hard per-hour budget 12.00 spent" */
void rt_tenants_describe(const rt_tenants *t, size_t tenant, const tenant_verdict *v, char *out, size_t len);
/* tierrouter_tenant_budget_used_ratio, tierrouter_tenant_budget_spent_usd,
 * tierrouter_tenant_demoted_total, tierrouter_tenant_refused_total */
void rt_tenants_metrics(const rt_tenants *t, const cost_book *b, buf *out);
/* /admin/status "tenants": [{name, weight, spent_hour, spent_day, budget, state, demoted, refused}] */
void rt_tenants_json(const rt_tenants *t, const cost_book *b, buf *out);

#endif
