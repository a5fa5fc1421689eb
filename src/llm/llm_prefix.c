/* llm_prefix: the prefix cache's index (see llm_prefix.h).
 *
 * A chained hash table of blocks plus one LRU list. Eviction takes the least recently used
 * block that no held block continues (a leaf): a lookup walks a prompt's blocks from the
 * first, so the first block is the least recently touched of its chain, and evicting it
 * would strand every block after it (held, counted, never reachable). */
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "llm_prefix.h"

typedef struct entry {
    llm_pkey key, parent;
    struct entry *next;         /* the bucket's chain */
    struct entry *older, *newer; /* the LRU list */
    struct entry *up;           /* the held block this one continues, or NULL */
    size_t children;            /* held blocks that continue this one */
    void *payload;
    int32_t toks[];             /* the block's tokens */
} entry;

struct llm_prefix {
    size_t block, block_bytes, budget;
    uint64_t k[4];              /* SipHash keys: k[0..1] for key.a, k[2..3] for key.b */
    entry **buckets;
    size_t nbuckets;            /* a power of two */
    entry *lru_old, *lru_new;
    llm_prefix_free_fn free_fn;
    void *ctx;
    llm_prefix_stats st;
};

/* ---- SipHash-2-4 (Aumasson and Bernstein), over 64-bit words ---- */

#define ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))
#define SIPROUND                                                                                             \
    do {                                                                                                     \
        v0 += v1; v1 = ROTL(v1, 13); v1 ^= v0; v0 = ROTL(v0, 32);                                             \
        v2 += v3; v3 = ROTL(v3, 16); v3 ^= v2;                                                                \
        v0 += v3; v3 = ROTL(v3, 21); v3 ^= v0;                                                                \
        v2 += v1; v1 = ROTL(v1, 17); v1 ^= v2; v2 = ROTL(v2, 32);                                             \
    } while (0)

typedef struct {
    uint64_t v0, v1, v2, v3, n;
} sip;

static void sip_init(sip *s, uint64_t k0, uint64_t k1)
{
    s->v0 = 0x736f6d6570736575ULL ^ k0;
    s->v1 = 0x646f72616e646f6dULL ^ k1;
    s->v2 = 0x6c7967656e657261ULL ^ k0;
    s->v3 = 0x7465646279746573ULL ^ k1;
    s->n = 0;
}

static void sip_word(sip *s, uint64_t m)
{
    uint64_t v0 = s->v0, v1 = s->v1, v2 = s->v2, v3 = s->v3;
    v3 ^= m;
    SIPROUND;
    SIPROUND;
    v0 ^= m;
    s->v0 = v0, s->v1 = v1, s->v2 = v2, s->v3 = v3;
    s->n++;
}

static uint64_t sip_final(sip *s)
{
    sip_word(s, s->n); /* the length, so inputs of different lengths never collide by padding */
    uint64_t v0 = s->v0, v1 = s->v1, v2 = s->v2, v3 = s->v3;
    v2 ^= 0xff;
    SIPROUND;
    SIPROUND;
    SIPROUND;
    SIPROUND;
    return v0 ^ v1 ^ v2 ^ v3;
}

/* Both halves of a key over the same words. */
typedef struct {
    sip a, b;
} sip2;

static void two_init(const llm_prefix *p, sip2 *h)
{
    sip_init(&h->a, p->k[0], p->k[1]);
    sip_init(&h->b, p->k[2], p->k[3]);
}

static void two_word(sip2 *h, uint64_t w)
{
    sip_word(&h->a, w);
    sip_word(&h->b, w);
}

static llm_pkey two_final(sip2 *h) { return (llm_pkey){sip_final(&h->a), sip_final(&h->b)}; }

/* A string as words: its length first, then its bytes 8 at a time (zero-padded). */
static void two_str(sip2 *h, const char *s)
{
    size_t n = strlen(s);
    two_word(h, n);
    for (size_t i = 0; i < n; i += 8) {
        uint64_t w = 0;
        size_t c = n - i < 8 ? n - i : 8;
        memcpy(&w, s + i, c);
        two_word(h, w);
    }
}

llm_pkey llm_prefix_root(const llm_prefix *p, const char *model, const char *scope)
{
    sip2 h;
    two_init(p, &h);
    two_word(&h, 0x726f6f74); /* a root is never a block's key: blocks start with a parent */
    two_str(&h, model);
    two_str(&h, scope);
    return two_final(&h);
}

llm_pkey llm_prefix_next(const llm_prefix *p, llm_pkey parent, const int32_t *toks)
{
    sip2 h;
    two_init(p, &h);
    two_word(&h, 0x626c6f636b); /* "block" */
    two_word(&h, parent.a);
    two_word(&h, parent.b);
    for (size_t i = 0; i < p->block; i++) two_word(&h, (uint32_t)toks[i]);
    return two_final(&h);
}

/* ---- the table ---- */

static bool key_eq(llm_pkey x, llm_pkey y) { return x.a == y.a && x.b == y.b; }

static entry **slot_of(const llm_prefix *p, llm_pkey key) { return &p->buckets[key.a & (p->nbuckets - 1)]; }

static entry *find(const llm_prefix *p, llm_pkey key)
{
    for (entry *e = *slot_of(p, key); e; e = e->next)
        if (key_eq(e->key, key)) return e;
    return NULL;
}

static void lru_unlink(llm_prefix *p, entry *e)
{
    if (e->older) e->older->newer = e->newer;
    else p->lru_old = e->newer;
    if (e->newer) e->newer->older = e->older;
    else p->lru_new = e->older;
    e->older = e->newer = NULL;
}

static void lru_push_new(llm_prefix *p, entry *e)
{
    e->older = p->lru_new;
    e->newer = NULL;
    if (p->lru_new) p->lru_new->newer = e;
    else p->lru_old = e;
    p->lru_new = e;
}

static void remove_entry(llm_prefix *p, entry *e)
{
    entry **s = slot_of(p, e->key);
    while (*s != e) s = &(*s)->next;
    *s = e->next;
    lru_unlink(p, e);
    if (e->up) e->up->children--;
    p->free_fn(p->ctx, e->payload);
    p->st.blocks--;
    p->st.bytes -= p->block_bytes;
    p->st.evictions++;
    free(e);
}

/* The least recently used leaf (NULL: none held). */
static entry *victim(const llm_prefix *p)
{
    for (entry *e = p->lru_old; e; e = e->newer)
        if (e->children == 0) return e;
    return NULL;
}

size_t llm_prefix_shrink(llm_prefix *p, size_t keep)
{
    size_t freed = 0;
    while (p->st.bytes > keep) {
        entry *e = victim(p);
        if (!e) break; /* cannot happen: a held chain always ends in a leaf */
        remove_entry(p, e);
        freed += p->block_bytes;
    }
    return freed;
}

llm_prefix *llm_prefix_new(size_t block, size_t block_bytes, size_t budget, llm_prefix_free_fn free_fn,
                           void *ctx)
{
    if (block == 0 || block_bytes == 0 || !free_fn) return NULL;
    llm_prefix *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->block = block;
    p->block_bytes = block_bytes;
    p->budget = budget;
    p->st.budget = budget;
    p->free_fn = free_fn;
    p->ctx = ctx;
    /* about one bucket per block the budget holds, within [64, 2^20] */
    size_t want = budget / block_bytes;
    p->nbuckets = 64;
    while (p->nbuckets < want && p->nbuckets < ((size_t)1 << 20)) p->nbuckets <<= 1;
    p->buckets = calloc(p->nbuckets, sizeof *p->buckets);
    if (!p->buckets) {
        free(p);
        return NULL;
    }
    if (getrandom(p->k, sizeof p->k, 0) != (ssize_t)sizeof p->k) {
        /* no entropy source: the clock and the address, still unknown to a client */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        p->k[0] = (uint64_t)ts.tv_nsec * 0x9e3779b97f4a7c15ULL ^ (uint64_t)(uintptr_t)p;
        p->k[1] = (uint64_t)ts.tv_sec ^ 0x5851f42d4c957f2dULL;
        p->k[2] = p->k[0] * 0xbf58476d1ce4e5b9ULL;
        p->k[3] = p->k[1] * 0x94d049bb133111ebULL;
    }
    return p;
}

void llm_prefix_free(llm_prefix *p)
{
    if (!p) return;
    for (entry *e = p->lru_old, *n; e; e = n) {
        n = e->newer;
        p->free_fn(p->ctx, e->payload);
        free(e);
    }
    free(p->buckets);
    free(p);
}

void *llm_prefix_get(llm_prefix *p, llm_pkey parent, llm_pkey key, const int32_t *toks)
{
    entry *e = find(p, key);
    /* the key names the prefix; the tokens and the parent are checked all the same */
    if (!e || !key_eq(e->parent, parent) || memcmp(e->toks, toks, p->block * sizeof *toks) != 0) return NULL;
    lru_unlink(p, e);
    lru_push_new(p, e);
    return e->payload;
}

void llm_prefix_count(llm_prefix *p, size_t wanted, size_t hit)
{
    p->st.lookups += wanted;
    p->st.hits += hit;
    p->st.hit_tokens += hit * p->block;
}

bool llm_prefix_has(const llm_prefix *p, llm_pkey key) { return find(p, key) != NULL; }

bool llm_prefix_make_room(llm_prefix *p, size_t limit)
{
    size_t cap = p->budget < limit ? p->budget : limit;
    if (cap < p->block_bytes) return false;
    llm_prefix_shrink(p, cap - p->block_bytes);
    return p->st.bytes + p->block_bytes <= cap;
}

bool llm_prefix_put(llm_prefix *p, llm_pkey parent, llm_pkey key, const int32_t *toks, void *payload)
{
    if (find(p, key) || p->st.bytes + p->block_bytes > p->budget) return false;
    entry *e = calloc(1, sizeof *e + p->block * sizeof *toks);
    if (!e) return false;
    e->key = key;
    e->parent = parent;
    memcpy(e->toks, toks, p->block * sizeof *toks);
    e->payload = payload;
    e->up = find(p, parent);
    if (e->up) e->up->children++;
    entry **s = slot_of(p, key);
    e->next = *s;
    *s = e;
    lru_push_new(p, e);
    p->st.blocks++;
    p->st.bytes += p->block_bytes;
    p->st.stores++;
    return true;
}

void llm_prefix_stats_get(const llm_prefix *p, llm_prefix_stats *out) { *out = p->st; }
