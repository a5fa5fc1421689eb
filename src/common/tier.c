#include "tier.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

static const char *const k_mode_names[] = {"auto", "tensorrt", "cuda", "cpu"};
static const char *const k_tier_names[] = {"tensorrt", "cuda", "cpu", "cpu-fallback"};
static const char *const k_chip_names[] = {"TensorRT", "CUDA", "CPU", "CPU (fallback)"};
static const char *const k_prov_names[] = {"TensorrtExecutionProvider", "CUDAExecutionProvider",
                                           "CPUExecutionProvider"};

int tier_mode_parse(const char *s, exec_mode *out)
{
    for (int i = 0; i <= EXEC_CPU; i++) {
        if (strcasecmp(s, k_mode_names[i]) == 0) {
            *out = (exec_mode)i;
            return 0;
        }
    }
    return -1;
}

const char *tier_mode_name(exec_mode m) { return k_mode_names[m]; }
const char *tier_name(tier_kind t) { return k_tier_names[t]; }
const char *tier_chip_name(tier_kind t) { return k_chip_names[t]; }
const char *tier_provider_name(provider_id p) { return k_prov_names[p]; }

int tier_rank(tier_kind t)
{
    switch (t) {
    case TIER_TENSORRT: return 3;
    case TIER_CUDA: return 2;
    default: return 1;
    }
}

int tier_parse(const char *name, tier_kind *out)
{
    for (int t = TIER_TENSORRT; t <= TIER_CPU_FALLBACK; t++)
        if (strcmp(name, tier_name((tier_kind)t)) == 0) {
            *out = (tier_kind)t;
            return 0;
        }
    return -1;
}

/* The lowest rank that is not degraded for a requested mode. */
static int requested_rank(exec_mode m)
{
    switch (m) {
    case EXEC_TENSORRT: return 3;
    case EXEC_AUTO:
    case EXEC_CUDA: return 2;
    default: return 1;
    }
}

size_t tier_plan(exec_mode mode, provider_id out[PROV_CPU])
{
    switch (mode) {
    case EXEC_AUTO:
    case EXEC_TENSORRT:
        out[0] = PROV_TENSORRT;
        out[1] = PROV_CUDA;
        return 2;
    case EXEC_CUDA:
        out[0] = PROV_CUDA;
        return 1;
    default:
        return 0;
    }
}

static void add_msg(tier_decision *d, tier_msg_level lvl, provider_id p, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void add_msg(tier_decision *d, tier_msg_level lvl, provider_id p, const char *fmt, ...)
{
    if (d->n_msgs >= TIER_MAX_MSGS) return;
    tier_msg *m = &d->msgs[d->n_msgs++];
    m->level = lvl;
    m->provider = p;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m->text, sizeof m->text, fmt, ap);
    va_end(ap);
}

/* The reason of the best tier that failed: what strict mode and the warning cite. */
static const char *first_failure(const tier_attempts *a, provider_id *which)
{
    for (int p = PROV_TENSORRT; p < PROV_CPU; p++) {
        if (a->state[p] == ATTEMPT_FAILED) {
            *which = (provider_id)p;
            return a->reason[p];
        }
    }
    return NULL;
}

void tier_decide(exec_mode mode, bool strict, const tier_attempts *a, tier_decision *d)
{
    d->n_msgs = 0;
    d->refuse = false;

    /* The plan's order is the order the attempts were made in: the first success wins. */
    provider_id plan[PROV_CPU];
    size_t n = tier_plan(mode, plan);
    d->active = PROV_CPU;
    for (size_t i = 0; i < n; i++) {
        provider_id p = plan[i];
        if (a->state[p] == ATTEMPT_FAILED)
            add_msg(d, TIER_MSG_WARN, p, "EP %s unavailable: %s", tier_provider_name(p),
                    a->reason[p][0] ? a->reason[p] : "unknown reason");
        if (a->state[p] == ATTEMPT_OK) {
            d->active = p;
            break;
        }
    }

    if (d->active == PROV_TENSORRT) {
        d->tier = TIER_TENSORRT;
        add_msg(d, TIER_MSG_INFO, PROV_TENSORRT, "TensorRT EP enabled");
    } else if (d->active == PROV_CUDA) {
        d->tier = TIER_CUDA;
        add_msg(d, TIER_MSG_INFO, PROV_CUDA, "CUDA EP enabled");
    } else if (mode == EXEC_CPU) {
        d->tier = TIER_CPU;
    } else {
        d->tier = TIER_CPU_FALLBACK;
        add_msg(d, TIER_MSG_WARN, PROV_CPU, "resolved to CPU only");
    }

    d->degraded = tier_rank(d->tier) < requested_rank(mode);
    add_msg(d, d->degraded ? TIER_MSG_WARN : TIER_MSG_INFO, d->active,
            "Active EP: %s (requested=%s strict=%d tier=%s)", tier_provider_name(d->active),
            tier_mode_name(mode), strict ? 1 : 0, tier_name(d->tier));
    if (!d->degraded) return;

    provider_id failed = PROV_CPU;
    const char *why = first_failure(a, &failed);
    char cause[TIER_REASON_MAX + 64];
    if (why)
        snprintf(cause, sizeof cause, "%s unavailable: %s", tier_provider_name(failed), why);
    else
        snprintf(cause, sizeof cause, "no GPU provider could be registered");

    if (strict) {
        d->refuse = true;
        add_msg(d, TIER_MSG_ERROR, failed,
                "STRICT_EP=1 refusing to start: requested tier %s but would run on %s because %s; "
                "fix: run the tensorrt image profile (it ships the CUDA and TensorRT libraries) "
                "on a host with the NVIDIA driver, or unpin with EXECUTION_MODE=auto|cpu or "
                "STRICT_EP=0",
                tier_mode_name(mode), tier_name(d->tier), cause);
    } else {
        add_msg(d, TIER_MSG_WARN, d->active,
                "execution tier degraded: requested %s, running %s because %s",
                tier_mode_name(mode), tier_name(d->tier), cause);
    }
}

const char *tier_switch_name(ts_switch v)
{
    return v == SWITCH_ON ? "on" : v == SWITCH_OFF ? "off" : "auto";
}
