/* drillday: `tierbench drill day`, a day trace compressed to minutes through a live router
 * whose pool grows and shrinks as an autoscaler on the router's desired-backends gauge would
 * make it, then through the simulator on the same arrivals, side by side.
 *
 * One pool of the stack is scaled (--pool). Its backends are the --worker slots (a port the
 * router lists, and the shell command that starts a worker on it); the drill starts the
 * pool's initial `backends` of them, measures how long each takes until the router sees it
 * healthy (the sim's cold start for that pool, unless --keep-cold-start), then runs the load.
 * Every scaler sync_s it reads the pool's `desired_backends` from /admin/status and runs the
 * HPA's algorithm (scaler.h) with that pool's settings from --sim-config (min, max,
 * windows, rate policies, the KEDA AverageValue reading of the gauge, as the simulator's
 * scale_metric=desired does): a scale-up starts workers in free slots, a scale-down stops a
 * starting one first, else the ready one with the fewest requests in flight, with SIGTERM (the
 * worker drains: it finishes what it holds and exits). --time-scale F multiplies every time
 * of that scaler (sync, windows, policy periods) on both sides: a day compressed F times
 * takes F = 1 / compression.
 *
 * The comparison: served share and P95 per priority, replicas (peak, mean, the curve's mean
 * distance), the scaled pool's cost at the sim's prices, each judged within a tolerance.
 * See docs/operate/tuning.md, "Drills".
 */
#ifndef TS_DRILLDAY_H
#define TS_DRILLDAY_H

/* argv[1] is "drill", argv[2] "day". Exit codes: 0 the simulator agrees with the live run, 2
 * it does not (the report names each disagreement), 1 the drill could not run (a worker did
 * not start, the router unreachable), 64 bad arguments. */
int drillday_main(int argc, char **argv);

#endif
