/* front: tierrouter's client-facing endpoints (front.c): credentials from a request's head,
 * then the route table's handler: classified requests go to the proxy (proxy_int.h), the
 * router's own answers (/metrics, /admin, /v2 health and index, /v1/models) are written here. */
#ifndef TS_ROUTER_FRONT_H
#define TS_ROUTER_FRONT_H

#include <stdbool.h>
#include <stddef.h>

#include "buf.h"
#include "h1srv.h"
#include "router.h"

/* Hashes the configured keys and tokens (r->key_digests, freed by the caller). -1: out of memory. */
int rt_front_init(router *r);
/* h1srv's request handler (arg: the router). */
void rt_on_request(h1req *req, void *arg);
/* h1srv's body admission (arg: the router): the request's credentials from its head (the
 * status and message its endpoint would answer), then its body's share of r->bodies (503
 * past it), before a byte of the body is read or "100 Continue" sent. */
bool rt_front_admit(h1req *req, size_t len, ts_err *refusal, void *arg);
#endif
