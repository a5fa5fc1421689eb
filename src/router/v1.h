/* v1: tierrouter's OpenAI-style /v1 traffic (docs/router.md "/v1 (LLM) traffic").
 *
 * POST /v1/chat/completions, /v1/completions and /v1/embeddings are classified and routed exactly like KServe
 * inference (front.c, proxy.c, route.h); what differs lives here: the body is read for its
 * "model" (jcheck's one bounded pass, then a scan of the top-level keys: no tree is built),
 * the model's value is spliced for a pool that serves the model under another name,
 * the reply is watched as it streams through (TTFT, inter-token gaps, token usage), and every
 * error the router itself answers on /v1 has OpenAI's shape
 * {"error":{"message","type","param","code"}} (common/openai_err.h, h1req_reply_openai_error).
 *
 * Accounting: every /v1 try carries `Tierserve-Accounting: 1` and a key of its own,
 * `Tierserve-Accounting-Key: <key>` (a random prefix per router process and a counter:
 * unique across tries, retries and router replicas, and naming no tenant). A worker that
 * sees them reports what the request used, exactly, without the router reading the body:
 * a non-stream reply in its head,
 *   Tierserve-Usage: prompt_tokens=N completion_tokens=M compute_ms=X
 * (and Tierserve-Compute-Ms, as KServe replies; an older worker sends only that, and then
 * the body's "usage" is read, up to RT_V1_REPLY_MAX), a stream in one SSE comment line just
 * before `data: [DONE]`,
 *   : tierserve-usage prompt_tokens=N completion_tokens=M compute_ms=X
 * That line is the router's: it is taken out of the stream (the client gets every other
 * byte as the worker wrote it). To take it out without delaying the stream, a line is passed
 * on as soon as its first bytes differ from RT_V1_ACCT_PREFIX; only bytes that still match
 * (at most its length) wait, and are passed on once they stop matching or the reply ends.
 * A try the router closes before either report arrived (its client left) is reported by
 * the worker on request, keyed by the try's key: see rt_v1_ask_cancelled (v1ask.c).
 *
 * The state below is embedded in each proxy_req (pr->v1) and owned by it: rt_v1_free()
 * releases what it holds. Nothing here keeps global state. */
#ifndef TS_ROUTER_V1_H
#define TS_ROUTER_V1_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "err.h"
#include "h1cli.h"
#include "h1srv.h"
#include "v1acct.h"

struct proxy_req;
struct router;

#define RT_V1_LINE_MAX (64u << 10) /* an SSE line longer than this is passed on, not parsed */
#define RT_V1_REPLY_MAX (1u << 20) /* a non-stream reply longer than this is passed on, not parsed */
#define RT_V1_MODEL_MAX 255        /* the longest model name accepted (proxy_req.logical) */
#define RT_V1_ACCT_PREFIX ": tierserve-usage "
#define RT_V1_ACCT_PREFIX_LEN (sizeof RT_V1_ACCT_PREFIX - 1)
#define RT_V1_USAGE_HEADER "Tierserve-Usage"
#define RT_V1_KEY_HEADER "Tierserve-Accounting-Key"
#define RT_V1_KEY_MAX 48 /* "<16 hex>-<counter in hex>" and its NUL */

typedef struct {
    const char *target;       /* "/v1/chat/completions", "/v1/completions" or "/v1/embeddings"; NULL: not /v1 */
    size_t model_at, model_end; /* where the body's "model" value lies: [model_at, model_end) */
    size_t messages_at, messages_end; /* ... its "messages" (end 0: absent) */
    size_t prompt_at, prompt_end;     /* ... its "prompt" (end 0: absent) */
    buf sent;                 /* the body with that value replaced, for sent_for */
    const void *sent_for;     /* the rt_pool it was rewritten for */
    const char *param;        /* the request parameter an error of the router's names, or NULL */
    /* the reply of the current try */
    bool sse;                 /* text/event-stream: parsed line by line */
    buf line;                 /* SSE: the line being read (bounded: RT_V1_LINE_MAX) */
    bool line_over;           /* ... it was longer: skipped to its end */
    buf reply;                /* not SSE: the body (bounded: RT_V1_REPLY_MAX), for its usage */
    uint64_t tokens;          /* SSE events that carried content */
    double last_token;        /* when the last of them arrived (0: none yet) */
    bool have_usage;          /* the reply named its usage (a final chunk, or the JSON's "usage") */
    uint64_t prompt, completion;
    bool have_cached;         /* ... and its prompt_tokens_details.cached_tokens */
    uint64_t cached;
    /* SSE: the current line, as far as passing it on goes */
    enum { RT_V1_LINE_OPEN, RT_V1_LINE_PASS, RT_V1_LINE_DROP } line_fate;
    uint8_t hold[RT_V1_ACCT_PREFIX_LEN]; /* its first bytes while they match the prefix */
    size_t n_hold;
    /* the worker's accounting line, when the stream had one */
    bool have_acct;
    uint64_t acct_prompt, acct_completion;
    double acct_compute_ms;
    bool acct_has_cached;
    uint64_t acct_cached;
    char key[RT_V1_KEY_MAX]; /* the current try's Tierserve-Accounting-Key */
} rt_v1;

/* Where rt_v1_reply_body sends the bytes the client may see. */
typedef void (*rt_v1_pass_fn)(struct proxy_req *pr, const uint8_t *data, size_t len);

/* Reads a /v1 request's body (pr->body, pr->cenc): inflated when it came compressed (the
 * plain bytes are what is forwarded), one JSON object nested at most 64 deep, a top-level
 * "model" (once) that is a string of 1..RT_V1_MODEL_MAX bytes with no control characters
 * (into pr->logical), "stream" (once) true, false or null when present. True, or false with
 * the status to answer with and a message in *e and the offending parameter (NULL when none). */
bool rt_v1_parse(struct proxy_req *pr, ts_err *e, const char **param);

/* The request's prefix key (policy/affinity.h) for backend affinity: a chat's messages up to
 * the first user message, a completion's prompt_bytes, with its model and (tenant scope, or
 * a sensitive request) its tenant. False for /v1/embeddings and bodies without either. */
bool rt_v1_prefix_key(const struct proxy_req *pr, uint64_t *key);

/* The body to send to pr->pool: the client's bytes when the pool serves the model under its
 * own name, else the same bytes with the model's value replaced by the pool's name for it
 * (kept until the next call or rt_v1_free). Returns 0, or -1 when it cannot be built (out of memory). */
int rt_v1_body_for(struct proxy_req *pr, const uint8_t **body, size_t *len);

/* The reply of a new try: forget what the last one said; the try gets a new key. */
void rt_v1_try_start(struct proxy_req *pr);
/* Its head arrived (q's headers). */
void rt_v1_reply_head(struct proxy_req *pr, h1cli_req *q);
/* Some of its body arrived, at the router's clock now: SSE events are timed as they pass
 * (TTFT and inter-token histograms, observed at once), the usage and the accounting line are
 * read, and what the client may see goes to pass (every byte but the accounting line's, in
 * order; contiguous bytes in one call). pass may end the client (pr stays valid). */
void rt_v1_reply_body(struct proxy_req *pr, const uint8_t *data, size_t len, rt_v1_pass_fn pass);
/* The reply ended complete: bytes still held (a last line that had matched the prefix so far,
 * with no line end after it) go to pass. */
void rt_v1_reply_flush(struct proxy_req *pr, rt_v1_pass_fn pass);
/* The compute time the worker reported (its Tierserve-Usage or accounting line), if any. */
bool rt_v1_compute_ms(const struct proxy_req *pr, double *ms);
/* Did the current try's worker report its usage (Tierserve-Usage, or the accounting line)? */
bool rt_v1_reported(const struct proxy_req *pr);
/* A reply below 400 ended complete, or its client left (cancelled): its tokens (and their
 * cost) are counted: the worker's report, else the reply's usage, else one per chunk with
 * content. */
void rt_v1_account(struct proxy_req *pr);
/* rt_v1_account also counts, per pool, the prompt tokens of the replies whose worker said how
 * many of them its prefix cache gave (cached_tokens in its report, else the usage's
 * prompt_tokens_details) and those cached tokens: the prefix cache's real hit rate as the
 * router's traffic got it (tierrouter_prefix_*_tokens_total, /admin/status pools[].prefix).
 * The counts rt_v1_account bills, without billing them. */
void rt_v1_seen(struct proxy_req *pr, uint64_t *prompt, uint64_t *completion);

/* v1ask.c. The try of a /v1 request whose client left was closed before the worker's
 * report came (cancel_try in proxy.c; cost_request has counted the request, with the
 * compute its head reported if any). Its tokens and compute are billed to the request's
 * pool, tenant and priority once its worker answers GET /v1/accounting/{key} (asked after
 * 25 ms, then again while the worker says the request is still winding down, about 3 s in
 * all; at most RT_V1_ASKS_MAX asks wait at once), else, when it cannot (an older worker,
 * no record, the worker unreachable), by rt_v1_account's rule over what the router saw.
 * Copies what it needs: pr may be freed right after. */
#define RT_V1_ASKS_MAX 1024
void rt_v1_ask_cancelled(struct proxy_req *pr);
/* Shutdown: the asks still waiting are billed by the fallback rule and freed. */
void rt_v1_asks_end(struct router *r);

/* GET /v1/models (one == NULL) or /v1/models/{one}: the union of the names the pools serve
 * (their model maps; for a pool without one, what its backends list in /v2/status), in
 * OpenAI's list (model) shape. Returns false when `one` is not among them (out untouched). */
bool rt_v1_models(struct router *r, const char *one, buf *out);

void rt_v1_free(struct proxy_req *pr);

#endif
