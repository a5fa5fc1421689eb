/* classify: what the router reads from a request's headers to decide where it may go and
 * how soon (docs/router.md "Classification"): its priority, its data class (sensitive data
 * is pinned to pools marked sensitive), its tenant and its deadline. Pure: no sockets, no
 * clock, no allocation; front.c feeds it the header values, the unit tests feed it strings. */
#ifndef TS_ROUTER_CLASSIFY_H
#define TS_ROUTER_CLASSIFY_H

#include <stdbool.h>
#include <stddef.h>

#include "err.h"
#include "policy.h"
#include "rconfig.h"
#include "secret.h"

/* The values a request sent (each one header at most: front.c refuses repeats first), NULL
 * when absent. */
typedef struct {
    const char *priority;   /* cfg->priority_header: urgent, normal (the default) or batch */
    const char *data_class; /* cfg->data_class_header: sensitive, or public, internal, normal */
    const char *tenant;     /* cfg->tenant_header: a tenant's name, read only without API keys */
    const char *deadline;   /* cfg->deadline_header: milliseconds, which may only shorten */
    const char *version;    /* the model version in the path (at most 31 bytes), or NULL */
} rt_class_in;

typedef struct {
    priority_class prio;
    bool sensitive;          /* the data class said so, or its tenant is marked sensitive */
    const rc_tenant *tenant; /* NULL: "unknown" */
    unsigned deadline_ms;    /* its priority's deadline, or the request's own when shorter */
} rt_class;

/* Classifies a request. keyed: the tenant its API key named when tenants have keys (then
 * the tenant header is not read), else NULL. True, or false with a 400 in *e whose message
 * names the header and what it may hold. */
bool rt_classify(const router_config *c, const rt_class_in *in, const rc_tenant *keyed, rt_class *out, ts_err *e);

/* The tenant whose API key this is (NULL: none, or no key), comparing the key's digest with
 * every tenant's (digests[i]: cfg->tenants[i].api_key's, secret_hash), so the time taken
 * does not tell which tenant's key came close. A key longer than RT_SECRET_MAX is not
 * hashed and matches nothing. */
#define RT_SECRET_MAX 255 /* the config's longest key or token */
const rc_tenant *rt_tenant_by_key(const router_config *c, const secret_digest *digests, const char *key);

#endif
