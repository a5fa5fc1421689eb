#include "tenant.h"

#include <math.h>

static int64_t minute_of(double now) { return (int64_t)floor(now / TENANT_BUCKET_S); }
static int64_t day_of(double now) { return (int64_t)floor(now / TENANT_DAY_S); }

void tenant_meter_init(tenant_meter *m)
{
    for (size_t i = 0; i < TENANT_BUCKETS; i++) m->bucket[i] = 0, m->bucket_id[i] = -1;
    m->day = -1;
    m->day_spent = 0;
}

void tenant_meter_add(tenant_meter *m, double cost, double now)
{
    if (!(cost > 0) || !isfinite(cost) || !isfinite(now) || now < 0) return;
    int64_t id = minute_of(now);
    size_t k = (size_t)(id % TENANT_BUCKETS);
    if (m->bucket_id[k] != id) m->bucket[k] = 0, m->bucket_id[k] = id;
    m->bucket[k] += cost;
    int64_t d = day_of(now);
    if (m->day != d) m->day = d, m->day_spent = 0;
    m->day_spent += cost;
}

static bool in_hour(int64_t id, int64_t cur) { return id >= 0 && id <= cur && id > cur - TENANT_BUCKETS; }

double tenant_meter_spent(const tenant_meter *m, tenant_window w, double now)
{
    if (w == TENANT_DAY) return m->day == day_of(now) ? m->day_spent : 0;
    int64_t cur = minute_of(now);
    double s = 0;
    for (size_t i = 0; i < TENANT_BUCKETS; i++)
        if (in_hour(m->bucket_id[i], cur)) s += m->bucket[i];
    return s;
}

/* Seconds until the rolling hour holds less than limit: its oldest minutes leave first. */
static double hour_frees_in(const tenant_meter *m, double limit, double now)
{
    int64_t cur = minute_of(now);
    double left = tenant_meter_spent(m, TENANT_HOUR, now);
    for (int64_t id = cur - TENANT_BUCKETS + 1; id <= cur; id++) {
        size_t k = (size_t)(((id % TENANT_BUCKETS) + TENANT_BUCKETS) % TENANT_BUCKETS);
        if (m->bucket_id[k] != id) continue;
        left -= m->bucket[k];
        if (left < limit) return (double)(id + TENANT_BUCKETS) * TENANT_BUCKET_S - now;
    }
    return TENANT_BUCKETS * TENANT_BUCKET_S; /* not reached: the whole hour leaves by then */
}

void tenant_budget_check(const tenant_budget *b, const tenant_meter *m, double now, tenant_verdict *out)
{
    *out = (tenant_verdict){TENANT_OK, TENANT_HOUR, 0, 0, 0};
    for (int w = 0; w < TENANT_WINDOWS; w++) {
        double spent = tenant_meter_spent(m, (tenant_window)w, now);
        if (b->hard[w] > 0 && spent >= b->hard[w]) {
            double wait = w == TENANT_DAY ? (double)(day_of(now) + 1) * TENANT_DAY_S - now
                                          : hour_frees_in(m, b->hard[w], now);
            if (wait < 1) wait = 1;
            if (out->state != TENANT_HARD || wait > out->retry_after_s)
                *out = (tenant_verdict){TENANT_HARD, (tenant_window)w, b->hard[w], spent, ceil(wait)};
        } else if (out->state == TENANT_OK && b->soft[w] > 0 && spent >= b->soft[w]) {
            *out = (tenant_verdict){TENANT_SOFT, (tenant_window)w, b->soft[w], spent, 0};
        }
    }
}

priority_class tenant_demote(priority_class p) { return p == PRIO_URGENT ? PRIO_NORMAL : PRIO_BATCH; }

void tenant_fair_join(double *finish, double vtime, size_t t)
{
    if (finish[t] < vtime) finish[t] = vtime;
}

size_t tenant_fair_pick(const double *finish, const double *weight, const size_t *waiting, size_t n)
{
    size_t best = SIZE_MAX;
    double best_f = 0;
    for (size_t t = 0; t < n; t++) {
        if (!waiting[t]) continue;
        double f = finish[t] + 1.0 / weight[t];
        if (best == SIZE_MAX || f < best_f) best = t, best_f = f;
    }
    return best;
}

void tenant_fair_charge(double *finish, double *vtime, const double *weight, size_t t)
{
    if (finish[t] > *vtime) *vtime = finish[t]; /* the start tag of the request served */
    finish[t] += 1.0 / weight[t];
}

size_t tenant_fair_victim(const size_t *queued, const double *weight, size_t n, size_t me)
{
    size_t worst = SIZE_MAX;
    double worst_share = 0;
    for (size_t t = 0; t < n; t++) {
        double share = (double)queued[t] / weight[t];
        if (queued[t] && (worst == SIZE_MAX || share > worst_share)) worst = t, worst_share = share;
    }
    if (worst == SIZE_MAX || worst == me || me >= n) return SIZE_MAX;
    return worst_share > (double)(queued[me] + 1) / weight[me] ? worst : SIZE_MAX;
}
