/* v1ask.c: a cancelled /v1 try's usage, asked of its worker (v1.h, rt_v1_ask_cancelled).
 *
 * Why asking: the router cancels a try by closing its connection (that is what stops the
 * worker's generation), so nothing can come back on it, and HTTP/1.1 trailers are not used
 * anywhere (both parsers drop them). The worker keeps what a try whose reply did not go out
 * whole spent, under the key the router gave the try, and answers
 *   GET /v1/accounting/{key}
 * with the worker token like every other worker request: 200 {"state":"done",
 * "prompt_tokens","completion_tokens","compute_ms"}, 202 while the request still winds down
 * (the worker has not seen the close yet, or the engine has not let the sequence go), 404
 * when it knows nothing. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "log.h"
#include "drain.h"
#include "proxy_int.h"

#define ASK_BODY_MAX 4096
#define ASK_TIMEOUT_S 1.0
/* when to ask, after the cancel: the first soon (the close and the engine's next step take
 * milliseconds), then backing off while the worker says it is still winding down */
static const unsigned k_delay_ms[] = {25, 50, 100, 200, 400, 800, 1600};
#define ASK_TRIES (sizeof k_delay_ms / sizeof k_delay_ms[0])

typedef struct rt_v1_ask {
    router *r;
    struct rt_v1_ask *prev, *next; /* router.v1_asks */
    rt_backend *b;           /* kept alive by b->v1_asks */
    h1cli_req *q;            /* the question in flight, or NULL */
    struct event *timer;
    unsigned tries;
    size_t pool, tenant;
    priority_class prio;
    uint64_t seen_prompt, seen_completion; /* the fallback: what the router counted */
    char key[RT_V1_KEY_MAX];
    char request_id[80];
    char target[32 + RT_V1_KEY_MAX];
    buf body;
} ask;

static void ask_free(ask *a)
{
    router *r = a->r;
    if (a->prev) a->prev->next = a->next;
    else r->v1_asks = a->next;
    if (a->next) a->next->prev = a->prev;
    r->n_v1_asks--;
    a->b->v1_asks--;
    if (a->q) h1cli_cancel(a->q);
    if (a->timer) event_free(a->timer);
    buf_free(&a->body);
    free(a);
    rt_drain_poke(r); /* a drain waits for the asks too */
}

/* Bills the worker's report (worker) or the router's own count, and forgets the ask. */
static void settle(ask *a, bool worker, uint64_t prompt, uint64_t completion, double compute_ms)
{
    router *r = a->r;
    double now = ts_now();
    if (!worker) {
        prompt = a->seen_prompt;
        completion = a->seen_completion;
        compute_ms = 0;
    }
    cost_compute(r->cost, a->pool, a->tenant, a->prio, compute_ms / 1e3, now);
    cost_tokens(r->cost, a->pool, a->tenant, a->prio, prompt, completion, now);
    r->v1_reports[worker ? 0 : 1]++;
    LOG_DEBUG_(LOGF({"request_id", a->request_id}, {"backend", a->b->addr}),
               "cancelled /v1 try billed %llu prompt and %llu completion tokens, %.3f ms (%s)",
               (unsigned long long)prompt, (unsigned long long)completion, compute_ms,
               worker ? "the worker's report" : "no report: what the router saw");
    ask_free(a);
}

static void arm(ask *a)
{
    unsigned ms = k_delay_ms[a->tries];
    struct timeval tv = {(time_t)(ms / 1000), (suseconds_t)(ms % 1000) * 1000};
    evtimer_add(a->timer, &tv);
}

static void on_body(h1cli_req *q, const uint8_t *data, size_t len, void *arg)
{
    (void)q;
    ask *a = arg;
    buf_put(&a->body, data, len); /* past ASK_BODY_MAX it fails: no report */
}

static void on_end(h1cli_req *q, h1cli_outcome o, void *arg)
{
    ask *a = arg;
    a->q = NULL; /* freed when this returns */
    int code = o == H1CLI_COMPLETE ? h1cli_resp_status(q) : 0;
    if (code == 200) {
        /* the worker's 200: a done report with counts and a time it may claim */
        rt_v1_usage u = {0, 0, 0, false, 0};
        bool ok = !buf_failed(&a->body) && rt_v1_usage_report((const char *)a->body.data, a->body.len, &u);
        settle(a, ok, u.prompt, u.completion, u.compute_ms);
        return;
    }
    /* still winding down (202), or the worker may not have read the try yet when first
     * asked (404 once): again later, while tries are left */
    bool again = code == 202 || (code == 404 && a->tries == 1) || code == 0;
    if (again && a->tries < ASK_TRIES) {
        arm(a);
        return;
    }
    settle(a, false, 0, 0, 0);
}

static const h1cli_callbacks k_ask_cb = {NULL, on_body, on_end};

static void on_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    ask *a = arg;
    router *r = a->r;
    a->tries++;
    buf_free(&a->body);
    buf_init(&a->body, ASK_BODY_MAX);
    h1cli_header h[3];
    size_t n = 0;
    h[n++] = (h1cli_header){RT_BACKEND_ID_HEADER, a->request_id};
    if (r->cfg->worker_authorization[0]) h[n++] = (h1cli_header){"Authorization", r->cfg->worker_authorization};
    h1cli_request rq = {.method = "GET", .target = a->target, .headers = h, .nheaders = n, .timeout_s = ASK_TIMEOUT_S};
    char err[200];
    if (h1cli_send(a->b->conns, &rq, &k_ask_cb, a, &a->q, err, sizeof err) != 0) {
        LOG_DEBUG_(LOGF({"request_id", a->request_id}, {"backend", a->b->addr}), "usage of a cancelled try not "
                   "asked: %s", err);
        settle(a, false, 0, 0, 0);
    }
}

void rt_v1_ask_cancelled(proxy_req *pr)
{
    router *r = pr->r;
    size_t pool = rt_pool_index(pr->pool), tenant = cost_tenant_index(r->cfg, pr->tenant);
    uint64_t seen_p, seen_c;
    rt_v1_seen(pr, &seen_p, &seen_c);
    ask *a = r->n_v1_asks < RT_V1_ASKS_MAX ? calloc(1, sizeof *a) : NULL;
    if (a) a->timer = evtimer_new(r->base, on_timer, a);
    if (!a || !a->timer) { /* too many waiting (or no memory): what the router saw, now */
        if (a) free(a);
        cost_tokens(r->cost, pool, tenant, pr->prio, seen_p, seen_c, ts_now());
        r->v1_reports[1]++;
        return;
    }
    a->r = r;
    a->b = pr->backend;
    a->pool = pool;
    a->tenant = tenant;
    a->prio = pr->prio;
    a->seen_prompt = seen_p;
    a->seen_completion = seen_c;
    memcpy(a->key, pr->v1.key, sizeof a->key);
    snprintf(a->request_id, sizeof a->request_id, "%s", pr->request_id);
    snprintf(a->target, sizeof a->target, "/v1/accounting/%s", a->key); /* hex and '-': nothing to encode */
    buf_init(&a->body, ASK_BODY_MAX);
    a->next = r->v1_asks;
    if (a->next) a->next->prev = a;
    r->v1_asks = a;
    r->n_v1_asks++;
    a->b->v1_asks++;
    arm(a);
}

void rt_v1_asks_end(router *r)
{
    while (r->v1_asks) settle(r->v1_asks, false, 0, 0, 0);
}
