/* simprefix: the simulator's model of the workers' prefix caches and of tierrouter's prefix
 * affinity (`tierbench sim --prefix-cache N`, docs/tierbench.md "Prefix caching").
 *
 * A trace with a conversation column (trace.h; `gen --turns`) holds conversations whose turns
 * re-send their history. Each backend keeps an LRU of the conversations it served, `capacity`
 * of them (what its prefix-cache budget holds). A later turn that lands on a backend holding
 * its conversation skips the history's prefill: its service time loses
 * prefill_share x (turn - 1) / turn. With affinity on, the backend inside the pool the policy
 * chose is affinity.h's (the router's own code): a ring over the pool's backends keyed by the
 * conversation, within the load bound; without it, route_pick_backend's least loaded.
 * `--affinity compare` runs the trace both ways and prints hit rate, TTFT and latency side by
 * side. sim.c calls the hooks below; everything here is per run, owned by the sim. */
#ifndef TS_SIMPREFIX_H
#define TS_SIMPREFIX_H

#include <stdint.h>
#include <stdio.h>

#include "route.h"
#include "sim.h"
#include "trace.h"

typedef struct simprefix simprefix;

void simprefix_defaults(sim_prefix_cfg *c);
/* One sim option: prefix-cache N (0..SIM_PREFIX_MAX_CAPACITY), prefill-share F (0..1),
 * affinity on|off|compare, affinity-load-factor F (1..100). 1 when key is none of them, 0
 * when set, -1 with a message naming the option. */
int simprefix_option(sim_prefix_cfg *c, const char *key, const char *value, char *err, size_t errlen);
const char *simprefix_help(void);

/* A run's model (c->prefix.capacity > 0), over pools of nb[p] backend slots; NULL when out of
 * memory. */
simprefix *simprefix_new(const sim_config *c, const trace *t, const unsigned *nb, size_t np);
void simprefix_free(simprefix *x);
/* The backend of pool pi (v: as route.h sees it) for request i by its conversation, when
 * affinity is on and it has one; -1: the pool's ordinary pick. */
int simprefix_pick(simprefix *x, uint32_t i, size_t pi, const route_pool *v, int avoid);
/* Request i starts on backend k of pool pi, waited s after its arrival, with a drawn service
 * time: the service time it takes (cut on a hit); the conversation becomes the backend's most
 * recent. */
double simprefix_start(simprefix *x, uint32_t i, size_t pi, unsigned k, double service, double waited);
/* Request i was served (its last start is what counts). */
void simprefix_served(simprefix *x, uint32_t i);
/* The run's figures into out; -1 out of memory. */
int simprefix_figures(simprefix *x, sim_prefix_stats *out);

/* With c->prefix.compare (and prefixes modelled): runs t once more without affinity into
 * r->prefix_off, which the summaries print beside r's own figures. 0 (nothing to do
 * included), or -1 with a message. */
int simprefix_compare(const sim_config *c, const trace *t, sim_result *r, char *err, size_t errlen);
/* The prefix block of `tierbench sim`'s summary for r (a run of c on t); with compare, both
 * runs are printed (the one without affinity is r->prefix_off when simprefix_compare filled
 * it, else run here). 0, or -1 with a message. */
int simprefix_report(const sim_config *c, const trace *t, const sim_result *r, FILE *out, char *err, size_t errlen);

#endif
