/* load: `tierbench load`, open-loop load and trace replay against a live stack.
 *
 * Arrivals come from a trace file or the generator (the sim's format and options); each is
 * sent at its time whatever happened to the ones before (open loop). One event loop
 * (src/net/h1cli on libevent; replies parsed by http-parser) holds a pool of keep-alive connections: a due request takes an
 * idle connection, or opens a new one up to --connections, or waits for one; either way its
 * latency runs from its scheduled time, so the loader's own lag is never hidden. No request
 * is ever retried. See docs/operate/tuning.md, "Load against a live stack".
 */
#ifndef TS_LOAD_H
#define TS_LOAD_H

#include <stddef.h>

#include "loadreport.h"

/* argv[1] is "load". Returns the exit code: 0 done (whatever the replies were), 64 bad
 * arguments or trace, 1 the target's metadata could not be read or a file not written. */
int load_main(int argc, char **argv);

/* What a caller that drives a run (`tierbench drill`) sees of it. Every hook may be NULL.
 * on_start and on_header run on the load's own loop thread and must not block: the load
 * is open loop, and a stalled loop would show as latency. */
typedef struct {
    void *ctx;
    /* once, just before the first request; t0 is ts_now() at the run's start (time 0 of
     * every record), n the number of requests (i < n in on_header). Non-zero stops the run
     * (nothing is sent; the run fails). */
    int (*on_start)(void *ctx, double t0, size_t n);
    /* every header line of the reply to request i (name and value trimmed) */
    void (*on_header)(void *ctx, size_t i, const char *name, const char *value);
    /* after the run, with its records; they are freed when it returns */
    void (*on_done)(void *ctx, const load_result *res);
} load_hooks;

/* load_main with hooks: the same options and exit codes (argv[1] is the caller's command
 * name, skipped like "load"). */
int load_run(int argc, char **argv, const load_hooks *hooks);

#endif
