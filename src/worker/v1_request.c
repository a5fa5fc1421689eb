/* v1_request.c: a /v1 generation request's life after admission: the hand-off of its tokens
 * from the generation thread to the loop, its deadline, and its end (freed once both its HTTP
 * request and its sequence are over). */
#include <event2/event.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "clock.h"
#include "log.h"
#include "v1_internal.h"

void v1_record(lreq *r, req_outcome o)
{
    if (r->counted || !r->m) return;
    r->counted = true;
    atomic_fetch_add(&model_stats_of(r->m)->outcomes[o], 1);
    hist_observe(&model_stats_of(r->m)->request, (r->t_end > 0 ? r->t_end : ts_now()) - r->t_arrive);
}

void v1_free_req(lreq *r)
{
    if (r->timer) event_free(r->timer);
    free(r->body);
    budget_give(r->srv->bodies, r->held);
    tok_ids_free(&r->ids);
    for (int k = 0; k < r->n_kids; k++) v1_free_req(r->kids[k]);
    free(r->kids);
    if (!r->parent) llm_gram_unref(r->gp.gram); /* kids borrow the request's reference */
    tok_stream_free(r->ts);
    buf_free(&r->text);
    buf_free(&r->pending);
    buf_free(&r->outq);
    toolcall_free(r->tc);
    free(r->tool_names);
    buf_free(&r->calls);
    free(r->pend);
    free(r->work);
    free(r->lp_pend);
    free(r->lp_work);
    free(r->lp_ents);
    pthread_mutex_destroy(&r->mu);
    free(r);
}

double v1_compute_ms(const lreq *r) { return (double)atomic_load(&r->compute_ns) / 1e6; }

/* Freed once the HTTP side and the sequence are both over. A request the router gave a key
 * leaves it its usage (llm_acct.h), final now: its whole prompt once the prefill began (as a
 * finished request's usage counts it), every token its sequence made, the compute of every
 * Run() it took part in. */
void v1_maybe_free(lreq *r)
{
    if (r->parent) { /* a kid goes with its request */
        v1_maybe_free(r->parent);
        return;
    }
    if (r->busy || r->preparing || r->http || (r->added && !r->engine_done)) return;
    uint64_t made = atomic_load(&r->made);
    for (int k = 0; k < r->n_kids; k++) {
        lreq *c = r->kids[k];
        if (c->busy || (c->added && !c->engine_done)) return;
        made += atomic_load(&c->made);
    }
    server *srv = r->srv;
    /* the prompt once (the choices share it), every choice's tokens */
    llm_acct_usage u = {atomic_load(&r->joined) ? r->n_prompt : 0, made, v1_compute_ms(r)};
    llm_acct_end(srv->llm_acct, &r->acct, &u, ts_now());
    srv->in_flight--;
    v1_free_req(r);
    server_maybe_finish_drain(srv);
}

void v1_settle(lreq *r, req_outcome o)
{
    r->finished = true;
    if (r->timer) evtimer_del(r->timer);
    if (r->added && !r->engine_done) llm_engine_cancel(r->L->engine, r->seq);
    for (int k = 0; k < r->n_kids; k++) { /* all choices end with the request */
        lreq *c = r->kids[k];
        c->finished = true;
        if (c->added && !c->engine_done) llm_engine_cancel(r->L->engine, c->seq);
    }
    hist_observe(&r->L->e2e, ts_now() - r->t_arrive);
    v1_record(r, o);
}

void v1_on_http_end(h1req *req, bool completed, void *arg)
{
    lreq *r = arg;
    server_request_end(req, completed, r->srv); /* the body's bytes, a drain */
    r->http = NULL;
    for (int k = 0; k < r->n_kids; k++) r->kids[k]->http = NULL;
    if (r->preparing) { /* m and L are the decode thread's: on_prepared counts it */
        r->finished = true;
        /* a timed-out request's model is still wanted (its timeout counts there) */
        if (!r->timed_out) atomic_store(&r->gone, true);
        atomic_store(&r->stop, true);
        return;
    }
    if (!r->finished) {
        /* the client left before its answer: free the slot and the cache now */
        LOG_DEBUG_(LOGF({"model", r->L->name}), "client went away; sequence %llu cancelled",
                   (unsigned long long)r->seq);
        v1_settle(r, OUT_CANCELLED);
    }
    v1_maybe_free(r);
}

/* ---- from the generation thread to the loop ---------------------------------------- */

void v1_on_token(void *ud, uint64_t seq, int32_t tok, llm_finish fin, const ts_err *err)
{
    (void)seq;
    lreq *r = ud;
    double now = ts_now();
    if (tok >= 0) {
        atomic_fetch_add(&r->made, 1);
        if (!r->got_first) {
            if (!r->parent) hist_observe(&r->L->ttft, now - r->t_arrive); /* the request's first choice's */
        } else {
            hist_observe(&r->L->itl, now - r->t_last);
        }
        r->got_first = true;
        r->t_last = now;
        atomic_fetch_add(&r->L->gen_tokens, 1);
    }
    pthread_mutex_lock(&r->mu);
    if (tok >= 0 && r->n_pend < r->cap) {
        if (r->lp_pend) r->lp_pend[r->n_pend] = r->lp_cur;
        r->pend[r->n_pend++] = tok;
    }
    if (fin != LLM_FIN_NONE) {
        r->fin = fin;
        if (err) r->fin_err = *err;
    }
    bool push = !r->queued;
    r->queued = true;
    pthread_mutex_unlock(&r->mu);
    if (push) doneq_push(r->srv->llm_done, r); /* after this the loop owns r */
}

/* the next token's entry, stored until its on_token */
void v1_on_logprobs(void *ud, uint64_t seq, const llm_logprobs *lp)
{
    (void)seq;
    lreq *r = ud;
    r->lp_cur = *lp;
}

void v1_on_join(void *ud, uint64_t seq)
{
    (void)seq;
    lreq *r = ud;
    atomic_store(&r->joined, true);
    if (!r->parent) hist_observe(&r->L->queue, ts_now() - r->t_arrive);
}

static void on_tokens(void *item, void *ctx)
{
    lreq *r = item;
    server *srv = ctx;
    if (r->preparing) { /* back from a decode thread, not from the engine */
        r->gp.compute_ns = &r->compute_ns; /* what the accounting reports (see finish_reply) */
        v1_on_prepared(r);
        return;
    }
    pthread_mutex_lock(&r->mu);
    int32_t *t = r->pend;
    size_t n = r->n_pend;
    r->pend = r->work;
    r->work = t;
    llm_logprobs *lps = r->lp_pend;
    r->lp_pend = r->lp_work;
    r->lp_work = lps;
    r->n_pend = 0;
    llm_finish fin = r->fin;
    ts_err ferr = r->fin_err;
    r->queued = false;
    pthread_mutex_unlock(&r->mu);
    if (!srv->http) r->http = NULL; /* shutting down: every connection is gone */
    r->busy++;
    for (size_t i = 0; i < n && !r->finished && !r->choice_done && r->http; i++)
        v1_take_token(r, t[i], lps ? &lps[i] : NULL, fin != LLM_FIN_NONE && i + 1 == n,
                   fin == LLM_FIN_EOS && i + 1 == n);
    if (fin != LLM_FIN_NONE) {
        r->engine_done = true;
        if (!r->finished && !r->choice_done && r->http) {
            if (fin == LLM_FIN_EOS || fin == LLM_FIN_DONE) v1_finish_reply(r, "stop");
            else if (fin == LLM_FIN_LENGTH) v1_finish_reply(r, "length");
            else if (fin == LLM_FIN_ERROR) /* a grammar's limit is the request's (400), a Run()'s failure ours */
                v1_fail_reply(r, ferr.http >= 400 && ferr.http < 500 ? ferr.http : TS_INTERNAL_ERROR, NULL, ferr.msg,
                              ferr.http >= 400 && ferr.http < 500 ? OUT_CLIENT_ERROR : OUT_ERROR);
            else v1_fail_reply(r, TS_UNAVAILABLE, NULL, "the sequence was cancelled: the server is shutting down", OUT_REJECTED);
        }
    }
    r->busy--;
    v1_maybe_free(r);
}

int v1_init(server *srv)
{
    srv->llm_acct = llm_acct_new();
    srv->llm_done = srv->llm_acct ? doneq_create(srv->base, on_tokens, srv) : NULL;
    return srv->llm_done ? 0 : -1;
}

void v1_shutdown(server *srv)
{
    if (srv->llm_done) {
        doneq_flush(srv->llm_done); /* the requests it frees end their tracking first */
        doneq_destroy(srv->llm_done);
        srv->llm_done = NULL;
    }
    llm_acct_free(srv->llm_acct);
    srv->llm_acct = NULL;
}

void v1_on_deadline(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    lreq *r = arg;
    if (r->finished) return;
    char msg[160];
    snprintf(msg, sizeof msg, "request timed out after %.0f ms (%s)", (ts_now() - r->t_arrive) * 1e3,
             r->n_gen ? "while generating" : "before its first token");
    if (r->preparing) {
        /* still on a decode thread (or waiting for one): answer now, never after a long
         * tokenization; no stream has started. The decode thread stops early and
         * on_prepared counts the timeout once it knows the model (m, L are its own now). */
        r->finished = r->timed_out = true;
        r->t_end = ts_now();
        atomic_store(&r->stop, true);
        v1_err e = {.code = "timeout"};
        v1_fail(&e, TS_TIMEOUT, NULL, "%s", msg);
        v1_reply_error(r->http, &e);
        return;
    }
    r->busy++;
    v1_fail_reply(r, TS_TIMEOUT, "timeout", msg, OUT_TIMEOUT);
    r->busy--;
    v1_maybe_free(r);
}

