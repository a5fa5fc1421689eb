/* classify.c: a request's class from its header values (classify.h). */
#include "classify.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "err.h"

static priority_class parse_priority(const char *v)
{
    if (!v) return PRIO_NORMAL;
    if (strcasecmp(v, "urgent") == 0) return PRIO_URGENT;
    if (strcasecmp(v, "batch") == 0) return PRIO_BATCH;
    if (strcasecmp(v, "normal") == 0) return PRIO_NORMAL;
    return PRIO_COUNT;
}

/* The words the data class header may hold besides "sensitive". Anything else is refused:
 * a misspelt or combined value ("public, sensitive") read as "not sensitive" would send
 * sensitive data where it must not go. */
static const char *const k_plain_classes[] = {"public", "internal", "normal"};

static bool parse_data_class(const char *v, bool *sensitive)
{
    *sensitive = false;
    if (!v) return true;
    if (strcasecmp(v, "sensitive") == 0) {
        *sensitive = true;
        return true;
    }
    for (size_t i = 0; i < sizeof k_plain_classes / sizeof k_plain_classes[0]; i++)
        if (strcasecmp(v, k_plain_classes[i]) == 0) return true;
    return false;
}

bool rt_classify(const router_config *c, const rt_class_in *in, const rc_tenant *keyed, rt_class *out, ts_err *e)
{
    out->prio = parse_priority(in->priority);
    if (out->prio == PRIO_COUNT) {
        ts_err_set(e, TS_BAD_REQUEST, "%s must be urgent, normal or batch", c->priority_header);
        return false;
    }
    if (!parse_data_class(in->data_class, &out->sensitive)) {
        ts_err_set(e, TS_BAD_REQUEST, "%s must be one value: sensitive, or public, internal or normal (not sensitive)",
                   c->data_class_header);
        return false;
    }
    if (in->version && strlen(in->version) >= 32) {
        ts_err_set(e, TS_BAD_REQUEST, "model version is longer than 31 characters");
        return false;
    }
    /* tenant: the one its API key names when tenants have keys (the gate checked it), else
     * from the tenant header; a tenant may be marked sensitive as a whole */
    out->tenant = keyed;
    if (!rconfig_tenant_keys(c))
        for (unsigned i = 0; in->tenant && i < c->tenants_count; i++)
            if (strcmp(c->tenants[i].name, in->tenant) == 0) out->tenant = &c->tenants[i];
    out->sensitive |= out->tenant && out->tenant->sensitive;
    /* a request may shorten its priority's deadline, never extend it */
    out->deadline_ms = out->prio == PRIO_URGENT ? c->deadline_ms.urgent
                       : out->prio == PRIO_BATCH ? c->deadline_ms.batch
                                                 : c->deadline_ms.normal;
    if (in->deadline) {
        char *end = NULL;
        long ms = strtol(in->deadline, &end, 10);
        if (end == in->deadline || *end || ms <= 0) {
            ts_err_set(e, TS_BAD_REQUEST, "%s must be a positive number of milliseconds", c->deadline_header);
            return false;
        }
        if ((unsigned long)ms < out->deadline_ms) out->deadline_ms = (unsigned)ms;
    }
    return true;
}

const rc_tenant *rt_tenant_by_key(const router_config *c, const secret_digest *digests, const char *key)
{
    secret_digest given;
    if (key && strlen(key) <= RT_SECRET_MAX) secret_hash(key, &given);
    else given.ok = false;
    const rc_tenant *found = NULL;
    for (unsigned i = 0; i < c->tenants_count; i++)
        if (secret_digest_equal(&given, &digests[i])) found = &c->tenants[i];
    return found;
}
