/* tok_map: the arena and the two open-addressing maps the tokenizer's tables are made of
 * (a vocabulary of 262k strings and half a million merges load in well under a second). */
#include <stdlib.h>
#include <string.h>

#include "tok_int.h"

int64_t tok_arena_put(tok_arena *a, const void *s, size_t n)
{
    if (a->len + n > UINT32_MAX)
        return -1; /* offsets are 32-bit */
    if (a->len + n > a->cap) {
        size_t cap = a->cap ? a->cap : 1 << 16;
        while (cap < a->len + n)
            cap *= 2;
        char *p = realloc(a->p, cap);
        if (!p)
            return -1;
        a->p = p;
        a->cap = cap;
    }
    memcpy(a->p + a->len, s, n);
    a->len += n;
    return (int64_t)(a->len - n);
}

static uint32_t tok_hash(const void *s, size_t n)
{
    /* FNV-1a with a final avalanche: the keys are short and trusted (the tokenizer file) */
    const unsigned char *p = s;
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 16777619u;
    h ^= h >> 16;
    h *= 0x85ebca6bu;
    h ^= h >> 13;
    return h;
}

int64_t tok_strmap_find(const tok_strmap *m, const tok_arena *a, const char *s, size_t n)
{
    if (!m->slot)
        return -1;
    uint32_t h = tok_hash(s, n);
    for (size_t i = h & m->mask;; i = (i + 1) & m->mask) {
        uint32_t x = m->slot[i];
        if (!x)
            return -1;
        const tok_sent *e = &m->e[x - 1];
        if (e->hash == h && e->len == n && memcmp(a->p + e->off, s, n) == 0)
            return x - 1;
    }
}

static int strmap_grow(tok_strmap *m)
{
    size_t nslot = m->slot ? (m->mask + 1) * 2 : 1024;
    uint32_t *slot = calloc(nslot, sizeof *slot);
    if (!slot)
        return -1;
    for (size_t k = 0; k < m->n; k++) {
        size_t i = m->e[k].hash & (nslot - 1);
        while (slot[i])
            i = (i + 1) & (nslot - 1);
        slot[i] = (uint32_t)(k + 1);
    }
    free(m->slot);
    m->slot = slot;
    m->mask = nslot - 1;
    return 0;
}

int64_t tok_strmap_intern(tok_strmap *m, tok_arena *a, const char *s, size_t n, int32_t val,
                          bool *added)
{
    int64_t k = tok_strmap_find(m, a, s, n);
    *added = false;
    if (k >= 0)
        return k;
    if ((!m->slot || (m->n + 1) * 2 > m->mask + 1) && strmap_grow(m) < 0)
        return -1;
    if (m->n == m->cap) {
        size_t cap = m->cap ? m->cap * 2 : 1024;
        tok_sent *e = realloc(m->e, cap * sizeof *e);
        if (!e)
            return -1;
        m->e = e;
        m->cap = cap;
    }
    int64_t off = tok_arena_put(a, s, n);
    if (off < 0 || m->n >= INT32_MAX)
        return -1;
    uint32_t h = tok_hash(s, n);
    m->e[m->n] = (tok_sent){.off = (uint32_t)off, .len = (uint32_t)n, .hash = h, .val = val};
    size_t i = h & m->mask;
    while (m->slot[i])
        i = (i + 1) & m->mask;
    m->slot[i] = (uint32_t)(m->n + 1);
    *added = true;
    return (int64_t)m->n++;
}

void tok_strmap_free(tok_strmap *m)
{
    free(m->slot);
    free(m->e);
    memset(m, 0, sizeof *m);
}

static size_t mix64(uint64_t k)
{
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    return (size_t)k;
}

int tok_u64map_init(tok_u64map *m, size_t expect)
{
    size_t nslot = 64;
    while (nslot < expect * 2)
        nslot *= 2;
    m->key = malloc(nslot * sizeof *m->key);
    m->val = malloc(nslot * sizeof *m->val);
    if (!m->key || !m->val) {
        free(m->key);
        free(m->val);
        m->key = m->val = NULL;
        return -1;
    }
    memset(m->key, 0xFF, nslot * sizeof *m->key);
    m->mask = nslot - 1;
    m->n = 0;
    return 0;
}

int tok_u64map_put(tok_u64map *m, uint64_t k, uint64_t v)
{
    if ((m->n + 1) * 2 > m->mask + 1) {
        tok_u64map big;
        if (tok_u64map_init(&big, (m->mask + 1) * 2) < 0)
            return -1;
        for (size_t i = 0; i <= m->mask; i++)
            if (m->key[i] != UINT64_MAX)
                tok_u64map_put(&big, m->key[i], m->val[i]);
        tok_u64map_free(m);
        *m = big;
    }
    size_t i = mix64(k) & m->mask;
    while (m->key[i] != UINT64_MAX && m->key[i] != k)
        i = (i + 1) & m->mask;
    if (m->key[i] == UINT64_MAX)
        m->n++;
    m->key[i] = k;
    m->val[i] = v;
    return 0;
}

bool tok_u64map_get(const tok_u64map *m, uint64_t k, uint64_t *v)
{
    if (!m->key)
        return false;
    for (size_t i = mix64(k) & m->mask;; i = (i + 1) & m->mask) {
        if (m->key[i] == k) {
            *v = m->val[i];
            return true;
        }
        if (m->key[i] == UINT64_MAX)
            return false;
    }
}

void tok_u64map_free(tok_u64map *m)
{
    free(m->key);
    free(m->val);
    memset(m, 0, sizeof *m);
}
