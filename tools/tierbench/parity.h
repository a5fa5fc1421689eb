/* parity: `tierbench parity`, the quality gate between tiers and model variants.
 *
 * The same inputs go to a target and to a baseline (a second live server, or a reference
 * file recorded earlier with --record); per output it measures the largest absolute and
 * relative error and, for classifiers, top-1 agreement, and holds them to thresholds.
 * Inputs are seeded random from the model's metadata (loadbody.h): N requests of B rows,
 * sent as JSON, one request at a time, never retried. See docs/operate/tuning.md, "Parity".
 */
#ifndef TS_PARITY_H
#define TS_PARITY_H

/* Exit codes: a deploy pipeline gates on them. */
#define PARITY_EXIT_PASS 0
#define PARITY_EXIT_ERROR 1  /* a target unreachable, a non-200 reply or one that is not KServe; a file not written */
#define PARITY_EXIT_BROKEN 2 /* measured, and a threshold or the outputs' structure is broken */
#define PARITY_EXIT_USAGE 64 /* bad arguments, reference or thresholds file */

/* argv[1] is "parity". Returns one of the exit codes above. */
int parity_main(int argc, char **argv);

#endif
