/* drain.c: the shutdown drain (drain.h, docs/router.md "Shutdown"). */
#include <stdio.h>

#include "drain.h"
#include "log.h"
#include "proxy_int.h"

#define DRAIN_CHECK_MS 100        /* also notices replies whose client vanished mid-write */

/* The drain ends once no request is in flight (retries and the admission queue included)
 * and every reply has been handed to the kernel: exiting with a reply still in a buffer
 * would cut it as surely as exiting mid-request. */
static void on_drain_check(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    router *r = arg;
    /* connections whose reply went out before the drain marked it "Connection: close" (a
     * stream already under way) are idle now: closed like the others */
    h1srv_close_idle(r->http);
    /* (cancelled /v1 tries whose usage is being asked of their workers too: seconds at most) */
    if (r->active || r->n_v1_asks || h1srv_unflushed(r->http)) return;
    LOG_INFO_(NULL, "drained: no request in flight; exiting");
    event_del(r->drain_check);
    event_del(r->drain_timer);
    event_base_loopexit(r->base, NULL);
}

void rt_drain_poke(router *r)
{
    if (r->draining && event_pending(r->drain_check, EV_TIMEOUT, NULL))
        event_active(r->drain_check, EV_TIMEOUT, 0);
}

/* Same exit code as a clean drain (as the worker): after SIGTERM Kubernetes treats every
 * exit alike, and the warning says what was lost. */
static void on_drain_timeout(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    router *r = arg;
    size_t unwritten = h1srv_unflushed(r->http);
    unsigned cut = rt_proxy_cut_all(r);
    char n[16];
    snprintf(n, sizeof n, "%u", cut);
    LOG_WARN_(LOGF({"cut", n}), "drain timeout: exiting with %u request(s) still in flight after %u s; they are cut%s",
              cut, r->cfg->drain_timeout_s, unwritten > cut ? " (and replies not yet written out)" : "");
    event_del(r->drain_check);
    event_base_loopexit(r->base, NULL);
}

void rt_drain_mark(router *r, h1req *req)
{
    if (r->draining) h1req_close_after(req);
}

int rt_drain_init(router *r)
{
    r->drain_check = event_new(r->base, -1, EV_PERSIST, on_drain_check, r);
    r->drain_timer = evtimer_new(r->base, on_drain_timeout, r);
    return r->drain_check && r->drain_timer ? 0 : -1;
}

void rt_drain_free(router *r)
{
    if (r->drain_check) event_free(r->drain_check);
    if (r->drain_timer) event_free(r->drain_timer);
    r->drain_check = r->drain_timer = NULL;
}

void rt_drain_start(router *r, const char *why)
{
    if (r->draining) return; /* the first signal's drain has its bound already */
    r->draining = true;
    /* no new connection: the port refuses them from now on, so a Service or client moves on
     * to another router; ready answers 503 on connections already open */
    h1srv_stop_listening(r->http);
    LOG_INFO_(NULL, "%s received: not ready; draining %u request(s) in flight", why, r->active);
    struct timeval bound = {(time_t)r->cfg->drain_timeout_s, 0};
    struct timeval every = {0, DRAIN_CHECK_MS * 1000};
    evtimer_add(r->drain_timer, &bound);
    event_add(r->drain_check, &every);
    event_active(r->drain_check, EV_TIMEOUT, 0); /* idle connections close now */
}
