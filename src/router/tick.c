/* tick.c: the router's periodic work (every probe_interval_ms) and the GPU pools' policy. */
#include <stdio.h>

#include "clock.h"
#include "log.h"
#include "tick.h"

static void log_events(router *r, rt_pool *p)
{
    const policy_state *st = &p->st;
    for (size_t i = 0; i < st->n_events; i++) {
        const policy_event *e = &st->events[i];
        r->policy_events[rt_pool_index(p)][e->kind]++;
        char sig[256];
        size_t o = 0;
        for (int s = 0; s < SIG_COUNT && o < sizeof sig; s++) {
            if (e->value[s] < 0)
                o += (size_t)snprintf(sig + o, sizeof sig - o, "%s%s=unknown", s ? " " : "", policy_signal_name((policy_signal)s));
            else
                o += (size_t)snprintf(sig + o, sizeof sig - o, "%s%s=%.3g%s", s ? " " : "",
                                      policy_signal_name((policy_signal)s), e->value[s], e->hot[s] ? "(hot)" : "");
        }
        char from[16], to[16], healthy[16];
        snprintf(from, sizeof from, "%zu", e->stage_from);
        snprintf(to, sizeof to, "%zu", e->stage_to);
        snprintf(healthy, sizeof healthy, "%zu", e->healthy);
        LOG_WARN_(LOGF({"event", policy_event_name(e->kind)}, {"pool", p->cfg->name}, {"stage_from", from},
                       {"stage_to", to}, {"healthy_gpu_backends", healthy}),
                  "policy %s: pool %s stage %s -> %s (%s; healthy GPU backends %s)", policy_event_name(e->kind),
                  p->cfg->name, from, to, sig, healthy);
        rt_event_add(&r->events, policy_event_name(e->kind), p->cfg->name, "stage %s -> %s (%s; healthy GPU backends %s)", from,
                     to, sig, healthy);
    }
}

/* The start-up guard: no policy before every backend has answered (or failed) a first probe,
 * for at most 5 probe intervals: a router that just started has not lost its GPU pool. */
static bool policy_armed(const router *r, double now)
{
    bool all_probed = true;
    for (size_t i = 0; i < r->n_pools; i++)
        for (size_t k = 0; k < r->pools[i].n; k++) all_probed &= r->pools[i].backends[k]->probed;
    return all_probed || now - r->started >= 5.0 * r->cfg->probe_interval_ms / 1e3;
}

void rt_pool_policy(router *r, rt_pool *p, double now)
{
    if (!p->pol || !policy_armed(r, now)) return;
    rt_pool_signals(r, p, now, &p->sig);
    policy_tick(p->pol, &p->sig, now, &p->st);
    log_events(r, p);
}

/* One tick's work at `now`. */
static void tick(router *r, double now)
{
    rt_dns_refresh(r, now);
    rt_reap(r);
    rt_probe_all(r);
    /* cost accrues from the start, before the policy is armed: backends cost money as soon
     * as they exist, and requests served meanwhile share it */
    size_t backends[RT_MAX_POOLS];
    for (size_t i = 0; i < r->n_pools; i++) backends[i] = r->pools[i].n;
    cost_tick(r->cost, backends, now);
    if (!policy_armed(r, now)) return;
    /* each GPU pool has its own policy over its own signals; the answers to the probes just
     * sent are not in yet: a health change in them runs the pool's policy when it lands
     * (backend.c set_health), so a dead backend is acted on within one interval, not two */
    for (size_t i = 0; i < r->n_pools; i++) rt_pool_policy(r, &r->pools[i], now);
}


static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    tick(arg, ts_now());
}

int rt_tick_start(router *r)
{
    r->tick = event_new(r->base, -1, EV_PERSIST, on_tick, r);
    if (!r->tick) return -1;
    unsigned ms = r->cfg->probe_interval_ms;
    struct timeval iv = {(time_t)(ms / 1000), (suseconds_t)(ms % 1000) * 1000};
    return event_add(r->tick, &iv);
}
