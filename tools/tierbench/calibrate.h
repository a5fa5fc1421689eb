/* calibrate: `tierbench calibrate`, a simulator pool measured on a real worker.
 *
 * Sends one model's requests of a fixed size to one worker, closed loop: `tierbench load`
 * (load_run) with every request due at time 0 and --connections C, so that C requests are
 * in flight at all times and latency is taken from the send. At concurrency 1 that latency
 * is the service time a router sees (the worker's run plus HTTP); its mean and p95 are fitted
 * to the sim's lognormal, or to an exponential when that is the closer fit (the smaller
 * Kolmogorov-Smirnov distance to the samples). The throughput at each higher concurrency
 * shows where it stops growing: that concurrency is the backend's slots. The result is one
 * `pool` line that `tierbench sim --config` reads unchanged. Each level runs in a child
 * process (load_run keeps its state in statics: one run per process), which hands its
 * latencies back through a pipe. See docs/operate/tuning.md, "Calibrating from real workers".
 */
#ifndef TS_CALIBRATE_H
#define TS_CALIBRATE_H

/* argv[1] is "calibrate". Returns the exit code: 0 done, 64 bad arguments, 1 the worker
 * could not be measured (a request failed, no reply) or the file not written. */
int calibrate_main(int argc, char **argv);

#endif
