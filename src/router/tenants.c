#include "tenants.h"
#include "prom.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const k_window[TENANT_WINDOWS] = {"hour", "day"};
static const char *const k_window_per[TENANT_WINDOWS] = {"per-hour", "per-day"};

int rt_tenants_init(rt_tenants *t, const router_config *c)
{
    memset(t, 0, sizeof *t);
    t->cfg = c;
    t->n = c->tenants_count + 1;
    t->budget = calloc(t->n, sizeof *t->budget);
    t->weight = calloc(t->n, sizeof *t->weight);
    t->demoted = calloc(t->n, sizeof *t->demoted);
    t->refused = calloc(t->n, sizeof *t->refused);
    bool ok = t->budget && t->weight && t->demoted && t->refused;
    for (int q = 0; q < PRIO_COUNT; q++) {
        t->finish[q] = calloc(t->n, sizeof *t->finish[q]);
        t->waiting[q] = calloc(t->n, sizeof *t->waiting[q]);
        ok = ok && t->finish[q] && t->waiting[q];
    }
    if (!ok) {
        rt_tenants_free(t);
        return -1;
    }
    for (size_t i = 0; i < t->n; i++) {
        const rc_tenant *ct = i < c->tenants_count ? &c->tenants[i] : NULL;
        t->weight[i] = ct && ct->weight > 0 ? ct->weight : 1;
        if (!ct) continue;
        t->budget[i] = (tenant_budget){.soft = {ct->budget.soft_per_hour, ct->budget.soft_per_day},
                                       .hard = {ct->budget.hard_per_hour, ct->budget.hard_per_day}};
    }
    return 0;
}

void rt_tenants_free(rt_tenants *t)
{
    free(t->budget);
    free(t->weight);
    free(t->demoted);
    free(t->refused);
    for (int q = 0; q < PRIO_COUNT; q++) {
        free(t->finish[q]);
        free(t->waiting[q]);
    }
    memset(t, 0, sizeof *t);
}

static const char *name_of(const rt_tenants *t, size_t i)
{
    return i < t->cfg->tenants_count ? t->cfg->tenants[i].name : "unknown";
}

static bool has_budget(const tenant_budget *b)
{
    for (int w = 0; w < TENANT_WINDOWS; w++)
        if (b->soft[w] > 0 || b->hard[w] > 0) return true;
    return false;
}

void rt_tenants_check(const rt_tenants *t, const cost_book *b, size_t tenant, tenant_verdict *v)
{
    const tenant_meter *m = cost_tenant_meter(b, tenant);
    /* a tenant without a budget is never over one: its windows are not summed per request
     * (tenant_budget_check's verdict for all-zero limits, without its two passes over the
     * meter's buckets) */
    if (!m || tenant >= t->n || !has_budget(&t->budget[tenant])) {
        *v = (tenant_verdict){TENANT_OK, TENANT_HOUR, 0, 0, 0};
        return;
    }
    tenant_budget_check(&t->budget[tenant], m, cost_wall_now(), v);
}

void rt_tenants_describe(const rt_tenants *t, size_t tenant, const tenant_verdict *v, char *out, size_t len)
{
    snprintf(out, len, "tenant budget '%s' %s %s budget %.2f spent", name_of(t, tenant),
             v->state == TENANT_HARD ? "hard" : "soft", k_window_per[v->window], v->limit);
}

/* One counter family, a series per tenant with a budget (the only ones it can move). */
static void counters(const rt_tenants *t, buf *out, const char *name, const char *help, const char *labels,
                     const uint64_t *v)
{
    prom_family(out, name, "counter", help);
    for (size_t i = 0; i < t->n; i++)
        if (has_budget(&t->budget[i]))
            buf_printf(out, "%s{tenant=\"%s\"%s} %llu\n", name, name_of(t, i), labels, (unsigned long long)v[i]);
}

void rt_tenants_metrics(const rt_tenants *t, const cost_book *b, buf *out)
{
    double now = cost_wall_now();
    prom_family(out, "tierrouter_tenant_budget_spent_usd", "gauge",
                "Cost a tenant with a budget spent over the rolling hour and the calendar day (UTC), as its "
                "budgets count it");
    for (size_t i = 0; i < t->n; i++) {
        const tenant_meter *m = cost_tenant_meter(b, i);
        if (!m || !has_budget(&t->budget[i])) continue;
        for (int w = 0; w < TENANT_WINDOWS; w++)
            buf_printf(out, "tierrouter_tenant_budget_spent_usd{tenant=\"%s\",window=\"%s\"} %.6f\n", name_of(t, i),
                       k_window[w], tenant_meter_spent(m, (tenant_window)w, now));
    }
    prom_family(out, "tierrouter_tenant_budget_used_ratio", "gauge",
                "What a tenant spent over a window divided by its budget there (1: reached; soft demotes, hard "
                "refuses)");
    for (size_t i = 0; i < t->n; i++) {
        const tenant_meter *m = cost_tenant_meter(b, i);
        if (!m) continue;
        for (int w = 0; w < TENANT_WINDOWS; w++) {
            double spent = tenant_meter_spent(m, (tenant_window)w, now);
            const double lim[2] = {t->budget[i].soft[w], t->budget[i].hard[w]};
            for (int k = 0; k < 2; k++)
                if (lim[k] > 0)
                    buf_printf(out, "tierrouter_tenant_budget_used_ratio{tenant=\"%s\",window=\"%s\",budget=\"%s\"} "
                               "%.6f\n", name_of(t, i), k_window[w], k ? "hard" : "soft", spent / lim[k]);
        }
    }
    counters(t, out, "tierrouter_tenant_demoted_total",
             "Requests demoted for passing their tenant's soft budget (a lower priority, CPU pools only)", "",
             t->demoted);
    counters(t, out, "tierrouter_tenant_refused_total", "Requests refused (429) for passing their tenant's hard budget",
             ",reason=\"budget\"", t->refused);
}

void rt_tenants_json(const rt_tenants *t, const cost_book *b, buf *out)
{
    static const char *const k_state[] = {"ok", "soft", "hard"};
    double now = cost_wall_now();
    buf_puts(out, "\"tenants\":[");
    for (size_t i = 0; i < t->n; i++) {
        const tenant_meter *m = cost_tenant_meter(b, i);
        tenant_verdict v;
        rt_tenants_check(t, b, i, &v);
        const tenant_budget *bu = &t->budget[i];
        buf_printf(out, "%s{\"name\":", i ? "," : "");
        buf_put_json_str(out, name_of(t, i), strlen(name_of(t, i)));
        buf_printf(out,
                   ",\"weight\":%g,\"spent_hour\":%.6f,\"spent_day\":%.6f,\"budget\":{\"soft_per_hour\":%g,"
                   "\"hard_per_hour\":%g,\"soft_per_day\":%g,\"hard_per_day\":%g},\"state\":\"%s\",\"demoted\":%llu,"
                   "\"refused\":%llu}",
                   t->weight[i], m ? tenant_meter_spent(m, TENANT_HOUR, now) : 0,
                   m ? tenant_meter_spent(m, TENANT_DAY, now) : 0, bu->soft[0], bu->hard[0], bu->soft[1], bu->hard[1],
                   k_state[v.state], (unsigned long long)t->demoted[i], (unsigned long long)t->refused[i]);
    }
    buf_puts(out, "]");
}
