/* v1_internal.h: what the files of the worker's /v1 API share (v1.h tells a request's life).
 * Not a public header (scripts/check_layout.py keeps it inside src/worker).
 *
 *   v1_load.c      an LLM of the repository: opened on the loader thread, freed with it
 *   v1_handlers.c  the endpoints; a generation request's admission and preparation
 *   v1_request.c   a request's end, its deadline, the hand-off from the generation thread
 *   v1_reply.c     the answer's text (decoding, stop strings) and its JSON / SSE bytes
 *   v1_status.c    /v2/status and /metrics of the LLMs
 *   v1_parse.c     the request body (pure)
 * Everything here runs on the event-loop thread unless said. */
#ifndef TS_V1_INTERNAL_H
#define TS_V1_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "chat.h"
#include "hist.h"
#include "llm_acct.h"
#include "llm_engine.h"
#include "llm_model.h"
#include "server_internal.h"
#include "tokenizer.h"
#include "v1.h"
#include "v1_parse.h"

#define LLM_MAX_BODY ((size_t)8 << 20)     /* what one decode thread parses and tokenizes */
#define LLM_PROMPT_LIMIT TOK_MAX_TEXT_BYTES /* a rendered prompt */
#define LLM_OUT_LIMIT ((size_t)64 << 20)    /* a reply's text, or SSE bytes waiting for a slow reader */

/* What a model's /v1 handle (model_llm) is: its first field says. */
typedef enum { V1_LLM = 1, V1_EMBED } v1_kind;

/* One LLM of the repository (v1_load.c). */
typedef struct {
    v1_kind kind;             /* V1_LLM; first (an embedding model's handle starts alike: embed.h) */
    char name[TS_NAME_MAX];
    server *srv;
    llm_model *model;
    llm_engine *engine;
    tokenizer *tok;
    chat_tmpl *chat;          /* NULL: no chat template (completions only) */
    char chat_note[512];      /* chat NULL for a template we do not render: why (else empty) */
    char **specials;          /* the special tokens' texts, refused in message content */
    size_t n_specials;
    int64_t context;
    size_t prefill_chunk;
    llm_gram_cache *gram;     /* response_format's grammars; the vocabulary built on first use */
    hist ttft, itl, e2e, queue;
    _Atomic uint64_t prompt_tokens, gen_tokens;
} llm_served;

/* One generation request (chat or completion). */
typedef struct lreq {
    void *link;               /* doneq's; must be first */
    server *srv;
    ts_model *m;
    llm_served *L;
    h1req *http;              /* NULL once the request is over (replied and written, or gone) */
    bool chat, stream, include_usage;
    bool added;               /* the engine holds a sequence for it */
    bool engine_done;         /* its final callback has been handled on the loop */
    bool finished;            /* the reply is decided (sent, or the client is gone) */
    bool end_pending;         /* the stream ends once outq is written */
    bool counted;
    int busy;                 /* a loop handler is using it: an end callback it triggers must not free it */
    uint64_t seq;
    /* n > 1: the request (the first choice, index 0) holds the others in kids; each choice is
     * a sequence of its own with its own decoder, stops, tool-call parser, logprobs and
     * finish_reason, all writing through the request's HTTP side (a kid's http mirrors it).
     * The request alone has the deadline, the accounting and the outcome (docs/llm.md, "n"). */
    struct lreq *parent;      /* a kid: the request it belongs to; NULL for the request itself */
    struct lreq **kids;
    int n_kids, index;        /* index: the choice's index in the reply */
    bool choice_done;         /* this choice's end is decided (reason); later tokens are dropped */
    const char *reason;       /* its finish_reason (a literal) */
    char id[48];
    long long created;
    /* shared with the generation thread, under mu */
    pthread_mutex_t mu;
    int32_t *pend, *work;     /* tokens not yet taken by the loop; the loop's copy */
    size_t n_pend, cap;
    llm_finish fin;
    ts_err fin_err;
    bool queued;              /* in the doneq now */
    llm_logprobs *lp_pend, *lp_work; /* with logprobs: pend's and work's entries, same index */
    /* the generation thread's own (one sequence's callbacks never overlap) */
    double t_last;
    bool got_first;
    llm_logprobs lp_cur;      /* the next token's, from on_logprobs */
    /* the loop's own */
    tok_stream *ts;
    buf text;                 /* non-stream: the answer so far */
    buf pending;              /* decoded, not yet emitted (may hold a stop string's start) */
    buf outq;                 /* SSE bytes held while the reader is slow */
    /* logprobs: one entry per generated token, in order; [0, n_lp_out) went out with their
     * text, the rest wait while their text is withheld (a stop string's possible start) */
    struct lp_ent { llm_logprobs lp; size_t start, end; } *lp_ents;
    size_t n_lp, n_lp_out, lp_chunk_from;
    size_t emitted;           /* bytes of answer text emitted so far */
    v1_stops stops;
    /* tools on and the template shows a call syntax: the emitted text goes through the
     * tool-call parser, whose content and calls make the answer (v1_reply.c) */
    toolcall_parser *tc;
    buf calls;                /* non-stream: the tool_calls entries' JSON, comma-joined */
    size_t n_calls;
    char *tool_names;         /* its own copy of v1_args.tool_names: a call to another name is text */
    size_t tool_names_len;
    size_t lp_sent;           /* stream with tc: logprobs entries [0, lp_sent) went out */
    size_t n_prompt, n_gen;
    _Atomic uint64_t compute_ns; /* its share of the engine's Run()s (llm_gen_params.compute_ns) */
    _Atomic uint64_t made;       /* tokens its sequence generated (the loop may take fewer) */
    _Atomic bool joined;         /* its sequence left the wait queue: the prefill began */
    _Atomic uint64_t cached;     /* prompt tokens the prefix cache gave it (set at the join) */
    char scope[96];              /* its prefix cache scope (llm_gen_params.cache_scope) */
    llm_acct_live acct;          /* tracked for the router's cancel report (llm_acct.h) */
    double t_arrive;
    struct event *timer;      /* the deadline, armed at arrival */
    bool timed_out;           /* the deadline's 504 went out while the request was prepared */
    double t_end;             /* when it did: on_prepared counts it with that time */
    /* Preparing: the body parsed, validated, rendered and tokenized on a decode thread (a
     * big prompt takes a while; the loop serves others meanwhile). From the submit to the
     * llm_done handoff the decode thread alone touches what follows, and m, L, the stops,
     * stream/include_usage, n_prompt, cap, pend, work and ts; the loop only sets gone and stop. */
    bool preparing;            /* the loop's view */
    _Atomic bool gone;         /* the client left: the decode thread skips the work */
    _Atomic bool stop;         /* the reply is decided (client gone, or deadline): the decode
                                * thread stops once the model is known (to count the timeout),
                                * the tokenizer within a few thousand steps */
    model_repo *repo;
    uint8_t *body;             /* taken from the request; freed once parsed */
    size_t body_len, held;     /* held: its bytes in srv->bodies (the admission's hold) */
    int priority;
    double timeout_ms;
    bool hdr_bad;              /* a bad X-Priority / X-Request-Timeout-Ms, reported in turn */
    v1_err hdr_err;
    bool failed;               /* the preparation refused it: err */
    bool stopped;              /* ... or failed with stop set: err means nothing (the work was cut) */
    v1_err err;
    llm_gen_params gp;
    tok_ids ids;
} lreq;

/* v1_reply.c: r's tool-call parser over format f (NULL when out of memory). */
/* r's tool-call parser, with its copy of a's tool names; NULL when out of memory. */
toolcall_parser *v1_toolcall_new(lreq *r, toolcall_format f, const v1_args *a);
/* The body's tools' names into a->tool_names (the caller frees them): a call to any other
 * name is answered as text (v1_reply.c). 0, or -1 with e set (out of memory). */
int v1_tool_names(json_t *body, v1_args *a, v1_err *e);

/* An OpenAI error object answering req: e's status, message, param and code. */
void v1_reply_error(h1req *req, const v1_err *e);

/* v1_request.c */
/* The request's outcome, counted once on its model. */
void v1_record(lreq *r, req_outcome o);
/* Frees r once its HTTP side and its sequence are both over (else nothing yet). */
void v1_maybe_free(lreq *r);
/* Frees what a request holds, whatever its state (one never admitted). */
void v1_free_req(lreq *r);
/* The reply is decided: the sequence is no longer needed; counted as o. */
void v1_settle(lreq *r, req_outcome o);
double v1_compute_ms(const lreq *r);
void v1_on_http_end(h1req *req, bool completed, void *arg); /* h1req_on_end */
void v1_on_deadline(evutil_socket_t fd, short what, void *arg);
/* Generation thread: the engine's callbacks for r's sequence. */
void v1_on_token(void *ud, uint64_t seq, int32_t tok, llm_finish fin, const ts_err *err);
void v1_on_logprobs(void *ud, uint64_t seq, const llm_logprobs *lp);
void v1_on_join(void *ud, uint64_t seq);

/* The model's /v1 handle of this kind once READY, else NULL (any thread). */
void *v1_served(const ts_model *m, v1_kind kind);
/* ["chat","completions"], ["completions"] or ["embeddings"] as a JSON array, and the
 * model's context (tokens per input for an embedding model); false: not a /v1 model. */
bool v1_capabilities(const ts_model *m, buf *caps, int64_t *context);

/* v1_handlers.c */
/* X-Priority (the router's header): urgent 0, normal 1 (also when absent), batch 2; -1 with a
 * 400 in e for another value. */
int v1_parse_priority(h1req *req, int *out, v1_err *e);
/* The deadline in ms: TIERSERVE_LLM_REQUEST_TIMEOUT_MS, lowered (never raised) by
 * X-Request-Timeout-Ms; -1 with a 400 in e for a value that is no positive integer. */
int v1_parse_timeout(server *srv, h1req *req, double *ms, v1_err *e);
/* The preparation is over (from the llm_done doneq): the sequence joins, or the refusal goes out. */
void v1_on_prepared(lreq *r);

/* v1_reply.c */
/* Did the router ask for the request's accounting (Tierserve-Accounting: 1)? */
bool v1_wants_accounting(const lreq *r);
/* A chunk with text (role: chat's first, the assistant's role; finish: the last). */
void v1_sse_chunk(lreq *r, const char *text, size_t len, bool role, const char *finish);
/* One token from the engine: decoded, matched against the stops, sent when safe. */
void v1_take_token(lreq *r, int32_t tok, const llm_logprobs *lp, bool last, bool eos);
/* The answer, whole (non-stream) or its last chunks; reason: OpenAI's finish_reason. */
void v1_finish_reply(lreq *r, const char *reason);
/* A failure after admission: an error object, or inside a stream an error event and the end. */
void v1_fail_reply(lreq *r, int status, const char *code, const char *msg, req_outcome o);

#endif
