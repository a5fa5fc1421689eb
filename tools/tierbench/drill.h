/* drill: `tierbench drill`, failure drills on a live stack under open-loop load.
 *
 * The load is `tierbench load`'s (load.h, the same arrival options); beside it a control
 * thread acts on the stack at set times and polls the router's /admin/status:
 *   gpu-outage  kills one backend (SIGKILL to --kill-pid, or --fault-requests inferences to a
 *               worker whose fault injection is armed) and measures how long the router
 *               still sends it requests, the failed requests, how long until the pool is
 *               healthy again after --restart, and the P95 after recovery against before;
 *   rolling     stops every --worker in turn, restarts it, waits until the router sees it
 *               healthy again, then the next: no request may fail.
 *   surge       (drillsurge.h) replays a surge through the router and the simulator and compares.
 *   day         (drillday.h) a compressed day, the pool scaled on the router's gauge, against the sim.
 * See docs/operate/tuning.md, "Drills".
 */
#ifndef TS_DRILL_H
#define TS_DRILL_H

#include <sys/types.h>

/* argv[1] is "drill", argv[2] the drill. Exit codes: 0 every goal met, 2 a goal missed (the
 * report says which), 1 the drill could not be run (a kill, the status or a restart failed;
 * the target unreachable), 64 bad arguments. */
int drill_main(int argc, char **argv);

/* Starts `sh -c cmd` with no terminal streams (a caller reading our stdout must not wait for
 * the worker's; the command redirects its own log). Only async-signal-safe calls between fork
 * and exec: safe on a drill's control thread. -1: fork failed. */
pid_t drill_spawn(const char *cmd);

#endif
