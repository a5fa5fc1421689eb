/* server: the HTTP front of the worker (KServe v2 over the h1srv layer on libevent's loop).
 *
 * The event loop parses requests, hands inference to the model's runq and writes replies;
 * Run() and the reply encoding happen on runner threads, never on the loop. Every request
 * has a deadline (504), a full queue answers 503 + Retry-After, and SIGTERM drains.
 */
#ifndef TS_SERVER_H
#define TS_SERVER_H

#include "ep.h"
#include "model.h"
#include "settings.h"

typedef struct server server;

/* Binds the listener (port 0 picks one) and sets up routes; does not run the loop. */
server *server_create(const ts_settings *s, const ep_result *ep, char *err, size_t errlen);
/* What each model's scheduler runs (and batches by), and its context. */
void server_sched_hooks(server *srv, sched_run_fn *run, sched_compat_fn *compat, void **ctx);
/* Hands the (scanned, possibly still loading) repository to the server. */
void server_set_repo(server *srv, model_repo *repo);
/* Called from the loader thread when loading ends; failed = models that failed. */
void server_loading_done(server *srv, size_t failed);
/* Runs the loop until shutdown; returns the process exit code. */
int server_run(server *srv);
/* Call after the model repository is destroyed (its runners joined). */
void server_destroy(server *srv);

#endif
