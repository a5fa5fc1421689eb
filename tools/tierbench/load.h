/* load: `tierbench load`, open-loop load and trace replay against a live stack.
 *
 * Arrivals come from a trace file or the generator (the sim's format and options); each is
 * sent at its time whatever happened to the ones before (open loop). One event loop
 * (libevent bufferevents) holds a pool of keep-alive connections: a due request takes an
 * idle connection, or opens a new one up to --connections, or waits for one; either way its
 * latency runs from its scheduled time, so the loader's own lag is never hidden. No request
 * is ever retried. See docs/operate/tuning.md, "Load against a live stack".
 */
#ifndef TS_LOAD_H
#define TS_LOAD_H

/* argv[1] is "load". Returns the exit code: 0 done (whatever the replies were), 64 bad
 * arguments or trace, 1 the target's metadata could not be read or a file not written. */
int load_main(int argc, char **argv);

#endif
