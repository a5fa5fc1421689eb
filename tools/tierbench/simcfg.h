/* simcfg: `tierbench sim`'s options, from the command line or a config file.
 *
 * A config file holds the same options, one per line, without the leading "--":
 *     # two GPU backends that fail over to four CPU ones
 *     pool name=gpu,kind=gpu,backends=2,slots=1,mean_ms=100,p95_ms=200,cost=8
 *     pool name=cpu,kind=cpu,sensitive=1,backends=4,mean_ms=400,p95_ms=800
 *     policy queue.high=8,queue.low=2,stages=0/0.25/0.5/1
 * Options apply in the order given, file lines where the --config option stands: a later
 * one overrides an earlier one. The first `pool` replaces the two default pools. */
#ifndef TS_SIMCFG_H
#define TS_SIMCFG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "sim.h"
#include "simsweep.h"

#define SIMCFG_MAX_LINES 10000

typedef struct simcfg {
    sim_config sim;
    bool pools_given; /* the first --pool drops the defaults */
    sim_sweep sweep;  /* --sweep: no axes, a single run */
    char sweep_csv[512]; /* --sweep-csv FILE ("" none, "-" stdout) */
    bool sweep_all;   /* --sweep-all: every point in the table, not only the frontier */
} simcfg;

void simcfg_init(simcfg *c);
/* One option (its name without "--"; value NULL for a flag). Returns 1 when the name is not
 * a sim option, 0 when set, -1 with a message naming the option and the field. */
int simcfg_option(simcfg *c, const char *key, const char *value, char *err, size_t errlen);
/* The options in a config file, through `apply` (which gets each line's key and value and
 * returns as simcfg_option does; 1 counts as an error). -1 with "path:line: message". */
int simcfg_file(const char *path, int (*apply)(void *ctx, const char *key, const char *value, char *err, size_t errlen),
                void *ctx, char *err, size_t errlen);
/* The options' help text. */
void simcfg_help(FILE *out);

#endif
