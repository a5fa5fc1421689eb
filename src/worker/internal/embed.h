/* embed.h: embedding models of the repository and POST /v1/embeddings (docs/llm.md,
 * "Embeddings"). Not a public header.
 *
 *   embed_model.c  an encoder folder (Optimum feature-extraction + sentence-transformers'
 *                  modules.json / 1_Pooling / Normalize), opened on the loader thread, and
 *                  its runner: rows of any number of requests, sorted by length, padded to
 *                  each Run()'s longest with the attention mask, pooled, normalised
 *   v1_embed.c     the endpoint: admission on the loop, parsing and tokenizing on a decode
 *                  thread, the model's scheduler (the worker's dynamic batcher), the reply
 *
 * A request's life: loop (admission) -> decode thread (parse, tokenize) -> sched_submit ->
 * a runner thread (Run(), pooling, the reply's bytes) -> embed_done doneq -> loop (reply).
 * A refusal found on the decode thread goes straight to the doneq. The loop frees a request
 * once it is back from the doneq and its HTTP side is over. */
#ifndef TS_EMBED_H
#define TS_EMBED_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "hist.h"
#include "scheduler.h"
#include "server_internal.h"
#include "tokenizer.h"
#include "v1_internal.h"

#define EMB_MAX_INPUTS 2048              /* inputs per request: OpenAI's limit */
#define EMB_MAX_TOTAL_TOKENS 300000      /* tokens per request: OpenAI's limit */
#define EMB_RUN_TOKENS 16384             /* rows x padded length of one Run() */
#define EMB_MAX_BATCH_ROWS 64            /* rows the scheduler gathers for one runner turn */
#define EMB_BATCH_DELAY_US 1000          /* how long a batch may wait to fill */

typedef enum { EMB_POOL_MEAN, EMB_POOL_CLS, EMB_POOL_LAST, EMB_POOL_GIVEN } emb_pool;

/* One embedding model (the repository's handle: model_llm() of its ts_model). */
typedef struct emb_served {
    v1_kind kind;             /* V1_EMBED; first, as llm_served's */
    char name[TS_NAME_MAX];
    server *srv;
    OrtSession *session;
    tokenizer *tok;
    bool token_type_ids;      /* the graph takes them (all zeros: one segment) */
    char out_name[64];        /* last_hidden_state / token_embeddings, or a pooled [batch, hidden] */
    size_t hidden;
    int64_t max_len;          /* tokens per input, specials included */
    char max_len_from[64];    /* where max_len came from (status) */
    emb_pool pool;
    bool normalize;
    size_t vocab;
    sched *s;
    hist e2e;
    _Atomic uint64_t prompt_tokens, runs;
} emb_served;

/* embed_model.c: the repository's hook after the LLM one said "not a decoder". 1: an
 * encoder (*out set), 0: not one (the folder serves as KServe), -1: an encoder folder that
 * cannot load (err names what is missing or refused). Loader thread. */
int embed_open(server *srv, const char *dir, const char *name, const ep_config *cfg, const ep_result *ep,
               emb_served **out, char *err, size_t errlen);
void embed_free(emb_served *E);
const char *embed_pool_name(emb_pool p);

/* v1_embed.c: POST /v1/embeddings (loop). */
void v1_handle_embeddings(server *srv, h1req *req);
/* /v2/status: ,"embedding":{...} for an embedding model (nothing for another). */
void v1_embed_status(const ts_model *m, buf *b);
/* Requests queued or running on an embedding model (0 for another). */
size_t v1_embed_depth(const ts_model *m);

/* One input's ids. */
typedef struct {
    int32_t *ids;
    size_t n;
} emb_row;

/* One /v1/embeddings request (v1_embed.c builds it; the runner fills vec and reply). */
typedef struct ereq {
    void *link;               /* the doneq's; must be first */
    sched_item item;          /* in E->s while queued; rows = n_rows */
    server *srv;
    ts_model *m;
    emb_served *E;
    h1req *http;              /* NULL once its HTTP side is over */
    bool back;                /* returned through the doneq: the loop owns it */
    _Atomic bool gone;        /* the client left, or its deadline passed: the runner skips it */
    struct event *timer;      /* the deadline (X-Request-Timeout-Ms), armed at arrival */
    bool timed_out;           /* the deadline's 504 went out; the doneq's return only counts it */
    uint8_t *body;
    size_t body_len, held;
    bool base64, failed;
    v1_err err;
    emb_row *rows;
    size_t n_rows, n_tokens;
    float *vec;               /* n_rows x hidden */
    buf reply;                /* the answer's bytes (runner) */
    double t_arrive, compute_ms;
} ereq;

/* The reply body of a request whose vectors are in (runner thread). */
void embed_reply_body(ereq *r);

#endif
