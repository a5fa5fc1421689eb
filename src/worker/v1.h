/* v1: the worker's OpenAI-compatible /v1 API over the LLMs of its repository.
 *
 *   GET  /v1/models[/{m}]        the LLMs (OpenAI's list shape), or one
 *   POST /v1/completions         a prompt
 *   POST /v1/chat/completions    messages, rendered with the model's chat template
 *   POST /v1/embeddings          vectors of an embedding model (embed.h)
 *   GET  /v1/accounting/{key}    the router's question after it cancelled a try (llm_acct.h)
 * (the route table in v1_handlers.c). The two POSTs answer whole or as server-sent events (stream: true). docs/llm.md, "The /v1 API",
 * lists the fields supported and refused and the errors.
 *
 * A request's life: parsed, validated, rendered and tokenized on a decode thread (the
 * server's decode pool; the loop answers others meanwhile), back through llm_done; a sequence in
 * the model's llm_engine; its tokens arrive on the generation thread, which only appends
 * them to the request under its lock and wakes the loop through a doneq; the loop decodes,
 * matches stop strings, writes the reply or the SSE chunks. A client that leaves cancels
 * its sequence at once (the engine frees its slot and KV cache before the next step).
 *
 * Ownership: the LLM handles belong to the model repository (opened and freed through the
 * repo_options hooks v1_hooks sets); a request is freed on the loop once both its
 * HTTP request and its sequence are over. Loop thread only, except the open hook (loader
 * thread). */
#ifndef TS_V1_H
#define TS_V1_H

#include <stddef.h>

#include "buf.h"
#include "h1srv.h"
#include "model.h"
#include "server.h"

/* The doneq the generation threads hand tokens back through: created with the server,
 * flushed and destroyed after the repository (whose engines deliver their last
 * cancellations into it). */
int v1_init(server *srv);
void v1_shutdown(server *srv);
/* The doneq /v1/embeddings requests come back through (v1_embed.c), made and destroyed beside
 * v1_init's: after the repository (whose runners push their last requests into it). */
int v1_embed_init(server *srv);
void v1_embed_shutdown(server *srv);
/* Sets ro's llm_open / llm_free / llm_ctx. */
void v1_hooks(server *srv, repo_options *ro);

/* Answers a request on /v1: path is its decoded segments joined (server.c's on_request);
 * 405 with Allow, or OpenAI's 404 (code unknown_url) for a path it does not serve. */
void v1_route(server *srv, h1req *req, const char *path);

/* /v2/status: ,"llm":{...} for an LLM (nothing for another model). */
void v1_status(const ts_model *m, buf *b);
/* An LLM's execution layout (its session's threads and the table measured for it), NULL
 * for any other model or before the LLM is READY. */
const model_layout *v1_layout(const ts_model *m);
/* /metrics: the LLM families, one series per LLM version ({model,version}, as the KServe ones). */
void v1_metrics(const model_repo *r, buf *b);
/* What a model has queued or running: for an LLM its sequences generating plus waiting for
 * a slot (it has no KServe scheduler), else model_queue_depth. /v2/status's queue_depth
 * (which the router reads as a pressure signal) and tierserve_queue_depth use it. */
size_t v1_queue_depth(const ts_model *m);

#endif
