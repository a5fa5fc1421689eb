/* v1: the worker's OpenAI-compatible /v1 API over the LLMs of its repository.
 *
 *   GET  /v1/models             the LLMs (OpenAI's list shape)
 *   POST /v1/completions        a prompt
 *   POST /v1/chat/completions   messages, rendered with the model's chat template
 * Both answer whole or as server-sent events (stream: true). docs/llm.md, "The /v1 API",
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
#include "httppath.h"
#include "model.h"
#include "server.h"

/* The doneq the generation threads hand tokens back through: created with the server,
 * flushed and destroyed after the repository (whose engines deliver their last
 * cancellations into it). */
int v1_init(server *srv);
void v1_shutdown(server *srv);
/* Sets ro's llm_open / llm_free / llm_ctx. */
void v1_hooks(server *srv, repo_options *ro);

/* segs[0] is "v1". */
void v1_handle(server *srv, h1req *req, char segs[HTTPPATH_MAX_SEGS][HTTPPATH_SEG_MAX], size_t n);
/* An OpenAI-style error: {"error":{"message","type","param","code"}}; 503 with
 * Retry-After. param and code may be NULL (JSON null). */
void v1_error(h1req *req, int status, const char *param, const char *code, const char *msg);

/* h1_error_body_cb: the HTTP layer's own errors (413, 400 framing, 431) on /v1 paths in
 * the OpenAI shape above; false (the layer's {"error": msg}) elsewhere. */
bool v1_error_body(const char *path, size_t path_len, int code, const char *msg, buf *b, void *arg);

/* /v2/status: ,"llm":{...} for an LLM (nothing for another model). */
void v1_status(const ts_model *m, buf *b);
/* /metrics: the LLM families, one series per LLM version ({model,version}, as the KServe ones). */
void v1_metrics(const model_repo *r, buf *b);
/* What a model has queued or running: for an LLM its sequences generating plus waiting for
 * a slot (it has no KServe scheduler), else model_queue_depth. /v2/status's queue_depth
 * (which the router reads as a pressure signal) and tierserve_queue_depth use it. */
size_t v1_queue_depth(const ts_model *m);

#endif
