/* tick: the router's periodic work, a timer on its loop: DNS re-resolution, reaping backends
 * that left DNS, probes, the cost book's fixed-price accrual, and each GPU pool's pressure
 * policy (policy/policy.h) on the signals the router knows. */
#ifndef TS_ROUTER_TICK_H
#define TS_ROUTER_TICK_H

#include "router.h"

/* Arms the tick (r->tick, every cfg->probe_interval_ms; freed by the caller). -1: it could not. */
int rt_tick_start(router *r);
/* Runs a GPU pool's policy at `now` on its signals as the router knows them, and logs what it
 * changed (nothing for a pool without a policy, nor before the start-up guard lets it: every
 * backend probed once, or 5 probe intervals). The tick calls it for every pool; a probe
 * answer that changes a backend's health calls it for that backend's pool at once. */
void rt_pool_policy(router *r, rt_pool *p, double now);

#endif
