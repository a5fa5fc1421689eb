/* drillsurge: `tierbench drill surge`, a surge replayed through the real router and through
 * the simulator, side by side.
 *
 * The load is `tierbench load`'s (a --trace file, or the generator's --rate/--surge); the
 * router's stage changes and cost come from the difference of its /metrics before and
 * after the run; the P95 per priority and the share each pool served come from the replies
 * (X-Tierrouter-Pool). The same arrivals then go through `tierbench sim` with --sim-config
 * (a file of sim options, e.g. pool lines from `tierbench calibrate` of the same workers).
 * The verdict is the simulator's credibility on this trace: its P95 per priority, its pool
 * shares and its stage changes must agree with the live run within stated tolerances.
 * See docs/operate/tuning.md, "Drills".
 */
#ifndef TS_DRILLSURGE_H
#define TS_DRILLSURGE_H

/* argv[1] is "drill", argv[2] "surge". Exit codes: 0 the simulator agrees with the live
 * run, 2 it does not (the report names each disagreement), 1 the drill could not run,
 * 64 bad arguments. */
int drillsurge_main(int argc, char **argv);

#endif
