/* affinity: prefix-aware backend choice inside a pool (docs/router.md "Prefix affinity").
 *
 * Workers keep the KV of prompts they computed (the prefix cache, docs/llm.md); a turn of a
 * conversation re-sends the whole history, so it is cheap only on the backend that served
 * the turns before it. The router does not tokenize: it hashes the request's leading bytes
 * into a prefix key (affinity_key_chat, affinity_key_prompt) and picks the backend by
 * consistent hashing with bounded loads (Mirrokni, Thorup, Zadimoghaddam, "Consistent
 * Hashing with Bounded Loads", 2018): a ring of AFF_VNODES points per backend, the key picks
 * a start point, the walk goes clockwise to the first usable backend whose in-flight count
 * stays within ceil(load_factor x (the pool's in flight + 1) / healthy backends).
 *
 * Adding or removing one of N backends moves about 1/N of the keys (only those whose points
 * it took or gave back); a backend identifies itself by affinity_id() of its address, so
 * every router replica, and the router after a restart, sends a key to the same backend.
 *
 * What it never overrides: which pool (route_plan_request: sensitivity, stages, health,
 * priorities, spills) and whether the pool may take the request (route_pool_can_take) are
 * decided before; the walk skips unhealthy backends, the one a retry avoids and full ones.
 * Pure: no clock, no globals; the ring is the caller's (one per pool).
 */
#ifndef TS_AFFINITY_H
#define TS_AFFINITY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "route.h"

#define AFF_VNODES 64         /* ring points per backend: the key spread stays within ~±15 % */
#define AFF_MAX_BACKENDS 256  /* a pool's backends (RT_MAX_BACKENDS, SIM_MAX_BACKENDS) */
#define AFF_SPAN_MAX (64u << 10) /* a prefix longer than this is hashed by its first and last 32 KiB */

/* Where a request went, against its key's home: the first backend on the ring's walk. */
typedef enum {
    AFF_HIT = 0,  /* the home backend */
    AFF_MISS,     /* the home was not usable: unhealthy, ejected, or the one a retry avoids */
    AFF_OVERFLOW, /* the home was healthy but over the load bound (or full): the walk went on */
    AFF_RESULTS
} affinity_result;

const char *affinity_result_name(affinity_result r); /* "hit", "miss", "overflow" */

/* The ring of one pool. Owned by the caller: affinity_ring_free. */
typedef struct affinity_ring affinity_ring;

affinity_ring *affinity_ring_new(void);
void affinity_ring_free(affinity_ring *r);
/* Makes the ring that of n backends with these ids, in this order (the indices affinity_pick
 * returns): rebuilt only when the ids differ from the ones it holds. 0, or -1 when n is over
 * AFF_MAX_BACKENDS or memory runs out (the ring is then empty: affinity_pick returns -1). */
int affinity_ring_set(affinity_ring *r, const uint64_t *ids, size_t n);

/* The backend of pool p (whose backends are the ring's, in its order) for a request with this
 * prefix key: the first on the ring's walk from the key that is healthy, not avoid (-1: none),
 * under the pool's max_in_flight and within the load bound (load_factor >= 1: 1 is as even as
 * whole requests allow; larger keeps more keys home at a more uneven load). *res says how it
 * went against the key's home. -1 when none qualifies (the caller falls back to
 * route_pick_backend, which then finds nothing either unless the ring is stale). */
int affinity_pick(const affinity_ring *r, const route_pool *p, uint64_t key, double load_factor, int avoid,
                  affinity_result *res);

/* A backend's identity on the ring: a hash of its address ("host:port"). */
uint64_t affinity_id(const char *addr);

/* Prefix keys. Each hashes the model name, the tenant when tenant is not NULL (the workers'
 * prefix cache keeps tenants apart under prefix_cache_scope tenant, so a key across tenants
 * would promise a hit that cannot happen), and the canonical bytes of the request's leading
 * part: its JSON text with the whitespace outside strings dropped (a client that re-indents
 * still hits). The JSON must have passed jcheck (well-formed); a value of another type gives
 * false (no key: the pool's ordinary choice).
 *
 * Chat (messages: the text of the body's "messages" array): the messages up to and including
 * the first one whose "role" is "user" (all of them when none is). That part is what every
 * turn of one conversation starts with (system prompt, first question), and it differs
 * between conversations that share only a system prompt. The messages before the last user
 * turn (what the backend holds from the previous turn) would be a longer match, but it is a
 * different key each turn: a hash cannot follow it, only a per-backend index could. */
bool affinity_key_chat(const char *messages, size_t n, const char *model, const char *tenant, uint64_t *key);
/* Completions (prompt: the text of "prompt": a string, or an array of strings or token ids):
 * its first prompt_bytes canonical bytes. A completions conversation appends to its prompt,
 * so the first block is what its turns share; prompts shorter than that are keyed whole
 * (their turns may land apart, but a short prompt is cheap to recompute). */
bool affinity_key_prompt(const char *prompt, size_t n, size_t prompt_bytes, const char *model, const char *tenant,
                         uint64_t *key);

#endif
