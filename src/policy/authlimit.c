#include "authlimit.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PROBES 8 /* slots an address may sit in: where it is looked for and evicts */

typedef struct {
    uint8_t key[AUTHLIMIT_KEY];
    bool used;
    unsigned failures;
    double first_failure, blocked_until, last_seen;
} slot;

struct authlimit {
    unsigned max_failures;
    double window_s, block_s;
    uint64_t seed;
    slot slots[AUTHLIMIT_SLOTS];
};

authlimit *authlimit_create(unsigned max_failures, double window_s, double block_s, uint64_t seed)
{
    authlimit *a = calloc(1, sizeof *a);
    if (!a) return NULL;
    a->max_failures = max_failures ? max_failures : 1;
    a->window_s = window_s;
    a->block_s = block_s;
    a->seed = seed;
    return a;
}

void authlimit_destroy(authlimit *a) { free(a); }

void authlimit_key(const char *host, uint8_t key[AUTHLIMIT_KEY])
{
    memset(key, 0, AUTHLIMIT_KEY);
    if (!host) return;
    if (strncmp(host, "::ffff:", 7) == 0 && strchr(host + 7, '.')) host += 7;
    if (inet_pton(AF_INET, host, key + 1) == 1) {
        key[0] = 4;
    } else if (inet_pton(AF_INET6, host, key + 1) == 1) {
        key[0] = 6;
        memset(key + 9, 0, 8);
    } else {
        snprintf((char *)key + 1, AUTHLIMIT_KEY - 1, "%s", host); /* unusual peers share by prefix */
    }
}

/* FNV-1a over the key from the table's random basis. */
static size_t hash(const authlimit *a, const uint8_t key[AUTHLIMIT_KEY])
{
    uint64_t x = 0xcbf29ce484222325ull ^ a->seed;
    for (size_t i = 0; i < AUTHLIMIT_KEY; i++) x = (x ^ key[i]) * 0x100000001b3ull;
    x ^= x >> 31;
    return (size_t)(x % AUTHLIMIT_SLOTS);
}

/* An entry that neither blocks nor counts failures any more is as good as empty. */
static bool idle(const authlimit *a, const slot *e, double now)
{
    return !e->used || (now >= e->blocked_until && now - e->first_failure >= a->window_s);
}

/* The index of the address's slot, or -1. */
static long find(const authlimit *a, const uint8_t key[AUTHLIMIT_KEY])
{
    size_t h = hash(a, key);
    for (size_t i = 0; i < PROBES; i++) {
        size_t k = (h + i) % AUTHLIMIT_SLOTS;
        if (a->slots[k].used && memcmp(a->slots[k].key, key, AUTHLIMIT_KEY) == 0) return (long)k;
    }
    return -1;
}

/* The address's entry, made if need be: a full neighbourhood forgets the least recently
 * seen entry that blocks nothing, else the one whose block ends first. */
static slot *find_or_make(authlimit *a, const uint8_t key[AUTHLIMIT_KEY], double now)
{
    long found = find(a, key);
    if (found >= 0) return &a->slots[found];
    size_t h = hash(a, key);
    slot *e, *victim = NULL;
    for (size_t i = 0; i < PROBES; i++) {
        e = &a->slots[(h + i) % AUTHLIMIT_SLOTS];
        bool ie = idle(a, e, now);
        if (!victim) victim = e;
        else if (ie != idle(a, victim, now)) victim = ie ? e : victim;
        else if (ie ? e->last_seen < victim->last_seen : e->blocked_until < victim->blocked_until) victim = e;
    }
    memset(victim, 0, sizeof *victim);
    memcpy(victim->key, key, AUTHLIMIT_KEY);
    victim->used = true;
    return victim;
}

bool authlimit_blocked(const authlimit *a, const uint8_t key[AUTHLIMIT_KEY], double now, double *retry_after_s)
{
    long k = find(a, key);
    if (k < 0 || now >= a->slots[k].blocked_until) return false;
    *retry_after_s = a->slots[k].blocked_until - now;
    return true;
}

bool authlimit_failed(authlimit *a, const uint8_t key[AUTHLIMIT_KEY], double now)
{
    slot *e = find_or_make(a, key, now);
    if (now - e->first_failure >= a->window_s || e->failures == 0) {
        e->first_failure = now;
        e->failures = 0;
    }
    e->last_seen = now;
    if (++e->failures < a->max_failures) return false;
    e->blocked_until = now + a->block_s;
    e->failures = 0;
    return true;
}
