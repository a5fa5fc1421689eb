/* Token masks. The vocabulary's byte strings go into a trie once per tokenizer; a mask is
 * the set of tokens whose bytes the recogniser can read from the current state, found by
 * walking the trie and the recogniser together (a subtree is cut as soon as no parse
 * survives its prefix).
 *
 * The walk is cached per stack "key": the stack's top GRAM_KEY_DEPTH positions (or the whole
 * stack when it is that short). Walking from a key alone, a parse that pops below the key
 * reaches the SENT element: the rest of the real stack is unknown there. A token is then
 *   - accepted when some parse reads all its bytes (a parse ending on SENT counts: the frames
 *     below always continue, as every rule can finish);
 *   - rejected when every parse dies without having reached SENT before its end;
 *   - uncertain otherwise: it is checked against the whole real stack at each step.
 * This is xgrammar's context-independent / context-dependent split; with four frames of
 * context the uncertain lists are short (a token must close several nested rules at once). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "gram_int.h"

#define GRAM_KEY_DEPTH 4
#define GRAM_KEY_BUDGET 64 /* pushes a walk may make above the key (more: the token is refused) */
#define GRAM_MAX_TOKEN 1024 /* longer tokens are never allowed */

enum { TOK_SPECIAL = 1, TOK_END = 2 };

struct gram_vocab {
    size_t n;
    size_t max_len; /* the longest token's bytes */
    uint8_t *flags;
    int32_t *end_ids;
    size_t n_end;
    uint8_t *bytes;
    uint32_t *boff, *blen;
    uint32_t *slen; /* a special token's bytes (at boff; blen is 0): for `<[TEXT]>` */
    /* trie: node 0 the root; children as a first-child / next-sibling list */
    uint32_t *first, *next;
    uint8_t *byte;
    size_t n_nodes;
    /* tokens in preorder: the tokens ending at node i are order[tok_lo[i] .. tok_hi[i]),
     * those of its subtree order[tok_lo[i] .. sub_hi[i]) */
    int32_t *order;
    uint32_t *tok_lo, *tok_hi, *sub_hi;
};

typedef struct {
    uint32_t key[GRAM_KEY_DEPTH];
    uint8_t klen, whole, budget;
    uint32_t hash;
    uint64_t *acc;     /* bitmap (NULL when acc_ids is used) */
    int32_t *acc_ids;  /* or a list, when few are accepted */
    size_t n_acc;
    int32_t *unc;
    size_t n_unc;
    /* a folded count (see fold_key): key[fold] stood for every index of its chain; need[t]
     * says from which real index on accepted token t fits (NEED_*), need_max from which
     * index on nothing is filtered; need is NULL when no token depends on the index */
    int8_t fold;
    uint8_t *need;
    uint32_t need_max;
} mentry;

/* need[t]: bits 0-6 the least real index at which the token fits without leaving the counted
 * repetition (NEED_INF: none known), bit 7: some parse leaves it inside the token, so below
 * that index the token is checked against the whole stack */
#define NEED_EXIT 0x80u
#define NEED_INF 0x7fu
#define GRAM_NEED_ENTRIES 512 /* cached entries with a need table (128 KiB each for 128k tokens) */

struct gram_masker {
    const gram_grammar *g;
    const gram_vocab *v;
    gram_limits lim;
    pthread_mutex_t mu;
    mentry **slot;
    size_t cap, n, n_need;
    int32_t tok_id[GRAM_MAX_TOK_ELEMS]; /* the grammar's token elements in v (-1: none) */
    size_t hits, misses;
};

/* one depth of the trie walk: the node, the child being tried, whether a parse reached SENT
 * on the way here, the bytes some parse can read next */
typedef struct {
    uint32_t node, child;
    bool sent;
    gram_set u;
} wframe;

struct gram_matcher {
    gram_masker *m;
    wframe *fr; /* GRAM_MAX_TOKEN + 1 of them, made on the first walk */
    gram_sset cur, t1, t2;
    uint32_t *scratch;
    gram_sset *lv; /* the walk's state per trie depth */
    size_t n_lv;
    int32_t *sid;     /* per walk depth: the interned state there, or -1 (then lv[d]) */
    size_t work;      /* trie nodes and bytes tried in this step (gram_limits.max_mask_work) */
    bool over_work;
    bool ended;
};

/* ---------------------------------------------------------------- vocabulary and trie */

static uint32_t trie_child(gram_vocab *v, uint32_t node, uint8_t c, size_t *cap, bool *oom)
{
    for (uint32_t k = v->first[node]; k; k = v->next[k])
        if (v->byte[k] == c)
            return k;
    if (v->n_nodes == *cap) {
        size_t nc = *cap * 2;
        uint32_t *f = realloc(v->first, nc * sizeof *f);
        if (f)
            v->first = f;
        uint32_t *x = realloc(v->next, nc * sizeof *x);
        if (x)
            v->next = x;
        uint8_t *b = realloc(v->byte, nc);
        if (b)
            v->byte = b;
        if (!f || !x || !b) {
            *oom = true;
            return 0;
        }
        *cap = nc;
    }
    uint32_t k = (uint32_t)v->n_nodes++;
    v->first[k] = 0;
    v->byte[k] = c;
    v->next[k] = v->first[node];
    v->first[node] = k;
    return k;
}

static bool renumber(gram_vocab *v, uint32_t *tok_node, size_t n)
{
    size_t nn = v->n_nodes;
    uint32_t *nid = malloc(nn * sizeof *nid), *stack = malloc(nn * sizeof *stack);
    uint32_t *f = malloc(nn * sizeof *f), *x = malloc(nn * sizeof *x);
    uint8_t *by = malloc(nn);
    if (!nid || !stack || !f || !x || !by) {
        free(nid), free(stack), free(f), free(x), free(by);
        return false;
    }
    uint32_t at = 0;
    size_t sp = 0;
    stack[sp++] = 0;
    while (sp) {
        uint32_t k = stack[--sp];
        nid[k] = at++;
        for (uint32_t c = v->first[k]; c; c = v->next[c])
            stack[sp++] = c;
    }
    for (size_t k = 0; k < nn; k++) {
        f[nid[k]] = v->first[k] ? nid[v->first[k]] : 0;
        x[nid[k]] = v->next[k] ? nid[v->next[k]] : 0;
        by[nid[k]] = v->byte[k];
    }
    for (size_t i = 0; i < n; i++)
        if (tok_node[i])
            tok_node[i] = nid[tok_node[i]];
    free(v->first), free(v->next), free(v->byte);
    v->first = f, v->next = x, v->byte = by;
    free(nid), free(stack);
    return true;
}

void gram_vocab_free(gram_vocab *v)
{
    if (!v)
        return;
    free(v->flags), free(v->end_ids), free(v->bytes), free(v->boff), free(v->blen), free(v->slen);
    free(v->first), free(v->next), free(v->byte), free(v->order), free(v->tok_lo), free(v->tok_hi), free(v->sub_hi);
    free(v);
}

gram_vocab *gram_vocab_new(size_t n, const unsigned char *const *bytes, const size_t *lens, const bool *special,
                           const int32_t *end_ids, size_t n_end, ts_err *err)
{
    if (n == 0 || n > (1u << 24) || !bytes || !lens) {
        ts_err_set(err, TS_BAD_REQUEST, "vocabulary: between 1 and 16777216 tokens with their bytes");
        return NULL;
    }
    gram_vocab *v = calloc(1, sizeof *v);
    size_t total = 0, cap = 1024;
    for (size_t i = 0; i < n; i++)
        total += lens[i] <= GRAM_MAX_TOKEN ? lens[i] : 0;
    bool oom = !v;
    if (v) {
        v->n = n;
        v->flags = calloc(n, 1);
        v->end_ids = malloc((n_end ? n_end : 1) * sizeof *v->end_ids);
        v->bytes = malloc(total ? total : 1);
        v->boff = malloc(n * sizeof *v->boff), v->blen = calloc(n, sizeof *v->blen);
        v->slen = calloc(n, sizeof *v->slen);
        v->first = malloc(cap * sizeof *v->first), v->next = malloc(cap * sizeof *v->next), v->byte = malloc(cap);
        oom = !v->flags || !v->end_ids || !v->bytes || !v->boff || !v->blen || !v->slen || !v->first || !v->next || !v->byte;
    }
    if (oom) {
        gram_vocab_free(v);
        ts_err_set(err, TS_INTERNAL_ERROR, "out of memory building the vocabulary trie");
        return NULL;
    }
    for (size_t i = 0; i < n_end; i++) {
        if (end_ids[i] < 0 || (size_t)end_ids[i] >= n) {
            gram_vocab_free(v);
            ts_err_set(err, TS_BAD_REQUEST, "vocabulary: end id %d outside the vocabulary", (int)end_ids[i]);
            return NULL;
        }
        v->end_ids[v->n_end++] = end_ids[i];
        v->flags[end_ids[i]] |= TOK_END;
    }
    v->n_nodes = 1;
    v->first[0] = 0, v->next[0] = 0, v->byte[0] = 0;
    uint32_t *tok_node = calloc(n, sizeof *tok_node);
    if (!tok_node)
        oom = true;
    size_t pos = 0;
    for (size_t i = 0; i < n && !oom; i++) {
        v->boff[i] = (uint32_t)pos;
        if (special && special[i])
            v->flags[i] |= TOK_SPECIAL;
        if (!bytes[i] || lens[i] == 0 || lens[i] > GRAM_MAX_TOKEN)
            continue;
        if (v->flags[i] & (TOK_SPECIAL | TOK_END)) { /* never inside the output but by `<[TEXT]>` */
            memcpy(v->bytes + pos, bytes[i], lens[i]);
            v->slen[i] = (uint32_t)lens[i];
            pos += lens[i];
            continue;
        }
        memcpy(v->bytes + pos, bytes[i], lens[i]);
        v->blen[i] = (uint32_t)lens[i];
        if (lens[i] > v->max_len)
            v->max_len = lens[i];
        pos += lens[i];
        uint32_t node = 0;
        for (size_t k = 0; k < lens[i] && !oom; k++)
            node = trie_child(v, node, bytes[i][k], &cap, &oom);
        tok_node[i] = node;
    }
    /* renumber the nodes in depth-first order: a walk then reads the trie's arrays nearly in
     * order instead of at random (the insertion order), which halves a cold walk */
    if (!oom && !renumber(v, tok_node, n))
        oom = true;
    /* preorder numbering of the tokens: count per node, then an iterative DFS */
    uint32_t *cnt = oom ? NULL : calloc(v->n_nodes, sizeof *cnt);
    uint32_t *stack = oom ? NULL : malloc(v->n_nodes * sizeof *stack);
    v->order = malloc(n * sizeof *v->order);
    v->tok_lo = malloc(v->n_nodes * sizeof *v->tok_lo), v->tok_hi = malloc(v->n_nodes * sizeof *v->tok_hi);
    v->sub_hi = malloc(v->n_nodes * sizeof *v->sub_hi);
    if (oom || !cnt || !stack || !v->order || !v->tok_lo || !v->tok_hi || !v->sub_hi) {
        free(tok_node), free(cnt), free(stack);
        gram_vocab_free(v);
        ts_err_set(err, TS_INTERNAL_ERROR, "out of memory building the vocabulary trie");
        return NULL;
    }
    for (size_t i = 0; i < n; i++)
        if (tok_node[i])
            cnt[tok_node[i]]++;
    /* first pass: tok_lo by preorder; subtree ends after children are done */
    uint32_t at = 0;
    size_t sp = 0;
    stack[sp++] = 0;
    uint32_t *post = calloc(v->n_nodes, sizeof *post); /* 0: enter, 1: leave */
    if (!post) {
        free(tok_node), free(cnt), free(stack);
        gram_vocab_free(v);
        ts_err_set(err, TS_INTERNAL_ERROR, "out of memory building the vocabulary trie");
        return NULL;
    }
    while (sp) {
        uint32_t x = stack[sp - 1];
        if (!post[x]) {
            post[x] = 1;
            v->tok_lo[x] = at;
            at += cnt[x];
            v->tok_hi[x] = at;
            for (uint32_t k = v->first[x]; k; k = v->next[k])
                stack[sp++] = k;
        } else {
            v->sub_hi[x] = at;
            sp--;
        }
    }
    /* sub_hi must be the end of the subtree: a node is left only after every child was left */
    memset(cnt, 0, v->n_nodes * sizeof *cnt);
    for (size_t i = 0; i < n; i++)
        if (tok_node[i])
            v->order[v->tok_lo[tok_node[i]] + cnt[tok_node[i]]++] = (int32_t)i;
    free(post), free(tok_node), free(cnt), free(stack);
    return v;
}

size_t gram_vocab_size(const gram_vocab *v) { return v->n; }

const unsigned char *gram_vocab_token(const gram_vocab *v, int32_t id, size_t *len)
{
    *len = 0;
    if (id < 0 || (size_t)id >= v->n)
        return NULL;
    *len = v->blen[id] ? v->blen[id] : v->slen[id];
    return v->bytes + v->boff[id];
}
size_t gram_mask_words(const gram_vocab *v) { return (v->n + 63) / 64; }

/* ---------------------------------------------------------------- the masker's cache */

gram_masker *gram_masker_new(const gram_grammar *g, const gram_vocab *v, const gram_limits *lim, ts_err *err)
{
    gram_masker *m = calloc(1, sizeof *m);
    if (!m) {
        ts_err_set(err, TS_INTERNAL_ERROR, "out of memory");
        return NULL;
    }
    m->g = g, m->v = v;
    m->lim = lim ? *lim : g->lim;
    /* a token element is the special token of that text, else an ordinary token of those
     * bytes; a vocabulary with neither leaves it matching nothing */
    for (size_t i = 0; i < g->n_tok; i++) {
        m->tok_id[i] = -1;
        for (int pass = 0; pass < 2 && m->tok_id[i] < 0; pass++)
            for (size_t t = 0; t < v->n; t++) {
                uint32_t l = pass ? v->blen[t] : v->slen[t];
                if (l == g->tok_len[i] && !memcmp(v->bytes + v->boff[t], g->tok_text[i], l) &&
                    !(v->flags[t] & TOK_END)) {
                    m->tok_id[i] = (int32_t)t;
                    break;
                }
            }
    }
    pthread_mutex_init(&m->mu, NULL);
    return m;
}

static void entry_free(mentry *e)
{
    if (!e)
        return;
    free(e->acc), free(e->acc_ids), free(e->unc), free(e->need);
    free(e);
}

void gram_masker_free(gram_masker *m)
{
    if (!m)
        return;
    for (size_t i = 0; i < m->cap; i++)
        entry_free(m->slot[i]);
    free(m->slot);
    pthread_mutex_destroy(&m->mu);
    free(m);
}

void gram_masker_stats(gram_masker *m, size_t *hits, size_t *misses, size_t *entries)
{
    pthread_mutex_lock(&m->mu);
    *hits = m->hits, *misses = m->misses, *entries = m->n;
    pthread_mutex_unlock(&m->mu);
}

static bool key_eq(const mentry *a, const mentry *b)
{
    return a->hash == b->hash && a->klen == b->klen && a->whole == b->whole && a->budget == b->budget &&
           !memcmp(a->key, b->key, a->klen * sizeof a->key[0]);
}

static mentry *cache_find(gram_masker *m, const mentry *k)
{
    if (!m->cap)
        return NULL;
    for (size_t i = k->hash & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
        if (!m->slot[i])
            return NULL;
        if (key_eq(m->slot[i], k))
            return m->slot[i];
    }
}

/* false when the cache is full (the caller then owns e) */
static bool cache_put(gram_masker *m, mentry *e)
{
    if (m->n >= m->lim.max_cache || (e->need && m->n_need >= GRAM_NEED_ENTRIES))
        return false;
    if ((m->n + 1) * 2 > m->cap) {
        size_t nc = m->cap ? m->cap * 2 : 256;
        mentry **s = calloc(nc, sizeof *s);
        if (!s)
            return false;
        for (size_t i = 0; i < m->cap; i++)
            if (m->slot[i]) {
                size_t j = m->slot[i]->hash & (nc - 1);
                while (s[j])
                    j = (j + 1) & (nc - 1);
                s[j] = m->slot[i];
            }
        free(m->slot);
        m->slot = s, m->cap = nc;
    }
    size_t j = e->hash & (m->cap - 1);
    while (m->slot[j])
        j = (j + 1) & (m->cap - 1);
    m->slot[j] = e;
    m->n++;
    m->n_need += e->need != NULL;
    return true;
}

/* ---------------------------------------------------------------- matcher */

static size_t scratch_words(unsigned max_stack) { return (size_t)(max_stack + 9) * (max_stack + 1); }

static bool has_sent(const gram_grammar *g, const gram_sset *s)
{
    for (size_t i = 0; i < s->n; i++)
        if (s->len[i] && g->el[s->pool[s->off[i] + s->len[i] - 1]] == GE_MAKE(GE_SENT, 0))
            return true;
    return false;
}

static void top_union(const gram_grammar *g, const gram_sset *s, gram_set *u)
{
    memset(u, 0, sizeof *u);
    for (size_t i = 0; i < s->n; i++) {
        if (!s->len[i])
            continue;
        uint32_t e = g->el[s->pool[s->off[i] + s->len[i] - 1]];
        if (GE_KIND(e) == GE_CLASS)
            for (int w = 0; w < 4; w++)
                u->w[w] |= g->cls[GE_ARG(e)].w[w];
    }
}

typedef struct {
    int32_t *v;
    size_t n, cap;
    bool oom;
} idlist;

static void idl_push(idlist *l, int32_t id)
{
    if (l->n == l->cap) {
        size_t nc = l->cap ? l->cap * 2 : 64;
        int32_t *p = realloc(l->v, nc * sizeof *p);
        if (!p) {
            l->oom = true;
            return;
        }
        l->v = p, l->cap = nc;
    }
    l->v[l->n++] = id;
}

static bool ensure_levels(gram_matcher *s, size_t n)
{
    if (n <= s->n_lv)
        return true;
    gram_sset *p = realloc(s->lv, n * sizeof *p);
    if (!p)
        return false;
    memset(p + s->n_lv, 0, (n - s->n_lv) * sizeof *p);
    s->lv = p, s->n_lv = n;
    return true;
}

/* A walk's states, interned: below the first bytes of a token, many trie nodes reach the
 * same parse state (inside a string every letter leads to the same "next character" state),
 * so a (state, byte) -> state table turns most of a walk's steps into one look-up. Made per
 * walk and freed after it; bounded (past WC_STATES states the walk goes on uncached). */
#define WC_STATES (1u << 14)
#define WC_TRANS (1u << 17)
#define WC_DEAD UINT32_MAX

typedef struct {
    gram_sset *st;
    uint32_t *st_h;
    uint16_t *nd; /* per state: node_need + 1, 0 not yet known */
    gram_set *u;  /* per state: the bytes its parses read next (top_union) */
    uint8_t *sent; /* per state: has_sent */
    size_t n, cap;
    uint32_t *sh; /* content hash table: id + 1, 0 empty */
    size_t sh_cap;
    uint64_t *tk; /* transitions: (from << 8 | byte) + 1, 0 empty */
    uint32_t *tv;
    size_t t_n, t_cap;
    bool failed;
} wcache;

static void wc_free(wcache *w)
{
    for (size_t i = 0; i < w->cap; i++)
        gram_sset_free(&w->st[i]);
    free(w->st), free(w->st_h), free(w->nd), free(w->u), free(w->sent), free(w->sh), free(w->tk), free(w->tv);
    memset(w, 0, sizeof *w);
}

static uint32_t sset_hash(const gram_sset *a)
{
    uint32_t h = 2166136261u ^ (uint32_t)a->n;
    for (size_t i = 0; i < a->n; i++)
        h = (h ^ a->hash[i] ^ (a->len[i] << 24)) * 16777619u;
    return h ^ (h >> 13);
}

static bool sset_same(const gram_sset *a, const gram_sset *b)
{
    if (a->n != b->n || a->pool_n != b->pool_n)
        return false;
    for (size_t i = 0; i < a->n; i++)
        if (a->len[i] != b->len[i] || a->hash[i] != b->hash[i] ||
            (a->len[i] && memcmp(a->pool + a->off[i], b->pool + b->off[i], a->len[i] * sizeof *a->pool)))
            return false;
    return true;
}

static bool sset_copy(gram_sset *d, const gram_sset *a)
{
    if (d->cap < a->n) {
        size_t nc = a->n;
        uint32_t *o = realloc(d->off, nc * sizeof *o), *l = o ? realloc(d->len, nc * sizeof *l) : NULL;
        if (o)
            d->off = o;
        if (l)
            d->len = l;
        uint32_t *h = l ? realloc(d->hash, nc * sizeof *h) : NULL;
        if (h)
            d->hash = h;
        if (!h)
            return false;
        d->cap = nc;
    }
    if (d->pool_cap < a->pool_n) {
        uint32_t *p = realloc(d->pool, a->pool_n * sizeof *p);
        if (!p)
            return false;
        d->pool = p, d->pool_cap = a->pool_n;
    }
    if (a->n) {
        memcpy(d->off, a->off, a->n * sizeof *d->off);
        memcpy(d->len, a->len, a->n * sizeof *d->len);
        memcpy(d->hash, a->hash, a->n * sizeof *d->hash);
    }
    if (a->pool_n)
        memcpy(d->pool, a->pool, a->pool_n * sizeof *d->pool);
    d->n = a->n, d->pool_n = a->pool_n, d->steps = 0, d->overflow = false;
    return true;
}

/* the state's id (made when new), or -1 when the cache is full or out of memory */
static bool has_sent(const gram_grammar *g, const gram_sset *s);
static void top_union(const gram_grammar *g, const gram_sset *s, gram_set *u);

static int32_t wc_intern(wcache *w, const gram_grammar *g, const gram_sset *a)
{
    if (w->failed)
        return -1;
    uint32_t h = sset_hash(a);
    if (w->sh_cap)
        for (size_t i = h & (w->sh_cap - 1); w->sh[i]; i = (i + 1) & (w->sh_cap - 1))
            if (w->st_h[w->sh[i] - 1] == h && sset_same(&w->st[w->sh[i] - 1], a))
                return (int32_t)(w->sh[i] - 1);
    if (w->n >= WC_STATES)
        return -1;
    if (w->n == w->cap) {
        size_t nc = w->cap ? w->cap * 2 : 64;
        gram_sset *st = realloc(w->st, nc * sizeof *st);
        if (st)
            w->st = st;
        uint32_t *sh = st ? realloc(w->st_h, nc * sizeof *sh) : NULL;
        if (sh)
            w->st_h = sh;
        uint16_t *nd = sh ? realloc(w->nd, nc * sizeof *nd) : NULL;
        if (nd)
            w->nd = nd;
        gram_set *u = nd ? realloc(w->u, nc * sizeof *u) : NULL;
        if (u)
            w->u = u;
        uint8_t *se = u ? realloc(w->sent, nc) : NULL;
        if (!se) {
            w->failed = true;
            return -1;
        }
        w->sent = se;
        memset(w->st + w->cap, 0, (nc - w->cap) * sizeof *w->st);
        w->cap = nc;
    }
    if ((w->n + 1) * 2 > w->sh_cap) {
        size_t nc = w->sh_cap ? w->sh_cap * 2 : 128;
        uint32_t *t = calloc(nc, sizeof *t);
        if (!t) {
            w->failed = true;
            return -1;
        }
        for (size_t id = 0; id < w->n; id++) {
            size_t j = w->st_h[id] & (nc - 1);
            while (t[j])
                j = (j + 1) & (nc - 1);
            t[j] = (uint32_t)id + 1;
        }
        free(w->sh);
        w->sh = t, w->sh_cap = nc;
    }
    if (!sset_copy(&w->st[w->n], a)) {
        w->failed = true;
        return -1;
    }
    w->st_h[w->n] = h;
    w->nd[w->n] = 0;
    top_union(g, a, &w->u[w->n]);
    w->sent[w->n] = has_sent(g, a);
    size_t j = h & (w->sh_cap - 1);
    while (w->sh[j])
        j = (j + 1) & (w->sh_cap - 1);
    w->sh[j] = (uint32_t)w->n + 1;
    return (int32_t)w->n++;
}

static uint32_t wc_get(const wcache *w, int32_t from, unsigned byte, bool *found)
{
    *found = false;
    if (!w->t_cap)
        return 0;
    uint64_t key = (((uint64_t)from << 8) | byte) + 1;
    for (size_t i = (size_t)(key * 0x9e3779b97f4a7c15ull >> 40) & (w->t_cap - 1); w->tk[i]; i = (i + 1) & (w->t_cap - 1))
        if (w->tk[i] == key) {
            *found = true;
            return w->tv[i];
        }
    return 0;
}

static void wc_put(wcache *w, int32_t from, unsigned byte, uint32_t to)
{
    if (w->failed || w->t_n >= WC_TRANS)
        return;
    if ((w->t_n + 1) * 2 > w->t_cap) {
        size_t nc = w->t_cap ? w->t_cap * 2 : 512;
        uint64_t *k = calloc(nc, sizeof *k);
        uint32_t *v = malloc(nc * sizeof *v);
        if (!k || !v) {
            free(k), free(v);
            w->failed = true;
            return;
        }
        for (size_t i = 0; i < w->t_cap; i++)
            if (w->tk[i]) {
                size_t j = (size_t)(w->tk[i] * 0x9e3779b97f4a7c15ull >> 40) & (nc - 1);
                while (k[j])
                    j = (j + 1) & (nc - 1);
                k[j] = w->tk[i], v[j] = w->tv[i];
            }
        free(w->tk), free(w->tv);
        w->tk = k, w->tv = v, w->t_cap = nc;
    }
    uint64_t key = (((uint64_t)from << 8) | byte) + 1;
    size_t j = (size_t)(key * 0x9e3779b97f4a7c15ull >> 40) & (w->t_cap - 1);
    while (w->tk[j])
        j = (j + 1) & (w->t_cap - 1);
    w->tk[j] = key, w->tv[j] = to;
    w->t_n++;
}

/* need[] of the tokens ending where the walk's parses are ss (see NEED_*): a parse still in
 * the folded repetition has its frame at depth D above the key's unchanged frames pre[0..D);
 * it moved from the chain's index R down to its rule's index, one per repetition begun.
 * Returns the least such need (NEED_INF: none) | NEED_EXIT when a parse left the repetition
 * inside the token | NODE_ENDS when one left it exactly at the token's end (it stands on
 * the key's own frames) | NODE_ONE when every parse still inside stands at one index. */
#define NODE_ENDS 0x100u
#define NODE_ONE 0x200u
static unsigned node_need(const gram_grammar *g, const gram_sset *ss, const uint32_t *pre, size_t D, int32_t chain,
                          uint32_t R)
{
    unsigned best = NEED_INF, flags = NODE_ONE;
    uint32_t idx = 0;
    for (size_t i = 0; i < ss->n; i++) {
        const uint32_t *p = ss->len[i] ? ss->pool + ss->off[i] : pre; /* (an empty stack has no pool) */
        if (ss->len[i] > D && (!D || !memcmp(p, pre, D * sizeof *p)) && p[D] &&
            g->rule_chain[g->el_rule[p[D]]] == chain) {
            uint32_t j = g->rule_cidx[g->el_rule[p[D]]], n = R - j + 1;
            if (idx && idx != j)
                flags &= ~NODE_ONE;
            idx = j;
            if (n < best)
                best = n;
        } else if (ss->len[i] == D && (!D || !memcmp(p, pre, D * sizeof *p))) {
            flags |= NODE_ENDS;
        } else {
            flags |= NEED_EXIT;
        }
    }
    return best | flags;
}

/* the need[] byte of a token of len bytes at a node (node_need's value nv). A parse that
 * left exactly at the token's end did so by some index's "" alternative; the parse that took
 * the other alternative there (one more repetition begun) stands at that index with need n,
 * and the leaver needs n - 1. When every parse inside stands at one index that is exact;
 * it also needs the chain's last rule (index 1, whose repetition is a tail call and leaves
 * no frame) to be out of reach: fewer bytes than R - 1. Else the token is checked against
 * the real stack below its need. */
static unsigned need_of(unsigned nv, size_t len, uint32_t R)
{
    unsigned best = nv & NEED_INF, exit = nv & NEED_EXIT;
    if (nv & NODE_ENDS) {
        if (best != NEED_INF && (nv & NODE_ONE) && len + 1 < R)
            best--;
        else
            exit = NEED_EXIT;
    }
    return best | exit;
}

/* the trie walk from one key (see the top of this file); fills acc and unc (and *need for a
 * folded key); 0, -1 out of memory, -2 past max_mask_work */
static int walk(gram_matcher *s, const mentry *k, idlist *acc, idlist *unc, uint8_t **need)
{
    const gram_grammar *g = s->m->g;
    const gram_vocab *v = s->m->v;
    uint32_t stk[GRAM_KEY_DEPTH + 1];
    size_t len = 0;
    if (!k->whole)
        stk[len++] = 0; /* SENT */
    for (size_t i = 0; i < k->klen; i++)
        stk[len++] = k->key[i];
    uint32_t pre[GRAM_KEY_DEPTH + 1];
    size_t D = 0;
    int32_t chain = -1;
    uint32_t R = 0;
    if (k->fold >= 0) {
        D = (k->whole ? 0 : 1) + (size_t)k->fold;
        memcpy(pre, stk, len * sizeof *stk);
        chain = g->rule_chain[g->el_rule[stk[D]]];
        R = g->rule_cidx[g->el_rule[stk[D]]];
    }
    unsigned max_stack = k->whole ? s->m->lim.max_stack : (unsigned)(len + k->budget);
    if (max_stack > s->m->lim.max_stack)
        max_stack = s->m->lim.max_stack;
    if (!ensure_levels(s, 2))
        return -1;
    gram_sset_clear(&s->lv[0]);
    /* the key's stack is already expanded: its top is a class */
    gram_expand(g, &s->lv[0], stk, len, max_stack, s->m->lim.max_stacks, s->scratch);
    /* iterative DFS, one frame per depth */
    if (!s->fr && !(s->fr = malloc((GRAM_MAX_TOKEN + 2) * sizeof *s->fr)))
        return -1;
    if (!s->sid && !(s->sid = malloc((GRAM_MAX_TOKEN + 2) * sizeof *s->sid)))
        return -1;
    wcache wc = {0};
    int32_t *sid = s->sid;
    sid[0] = wc_intern(&wc, g, &s->lv[0]);
#define LEVEL(d) (sid[d] >= 0 ? &wc.st[sid[d]] : &s->lv[d])
    wframe *fr = s->fr;
    size_t d = 0;
    fr[0].node = 0, fr[0].child = v->first[0], fr[0].sent = has_sent(g, LEVEL(0));
    top_union(g, LEVEL(0), &fr[0].u);
    for (;;) {
        wframe *f = &fr[d];
        if (!f->child) {
            if (d == 0)
                break;
            d--;
            continue;
        }
        uint32_t c = f->child;
        f->child = v->next[c];
        bool live = false;
        if (gram_set_has(&f->u, v->byte[c])) {
            if (++s->work > s->m->lim.max_mask_work) {
                s->over_work = true;
                wc_free(&wc);
                return -2;
            }
            bool found = false;
            uint32_t to = sid[d] >= 0 ? wc_get(&wc, sid[d], v->byte[c], &found) : 0;
            if (found) {
                live = to != WC_DEAD;
                sid[d + 1] = live ? (int32_t)to : -1;
            } else {
                if (!ensure_levels(s, d + 2)) {
                    wc_free(&wc);
                    return -1;
                }
                gram_advance(g, LEVEL(d), v->byte[c], &s->lv[d + 1], max_stack, s->m->lim.max_stacks, s->scratch);
                live = s->lv[d + 1].n > 0;
                sid[d + 1] = live && sid[d] >= 0 ? wc_intern(&wc, g, &s->lv[d + 1]) : -1;
                if (sid[d] >= 0 && (!live || sid[d + 1] >= 0))
                    wc_put(&wc, sid[d], v->byte[c], live ? (uint32_t)sid[d + 1] : WC_DEAD);
            }
        }
        if (!live) {
            if (f->sent)
                for (uint32_t t = v->tok_lo[c]; t < v->sub_hi[c]; t++)
                    idl_push(unc, v->order[t]);
            continue;
        }
        for (uint32_t t = v->tok_lo[c]; t < v->tok_hi[c]; t++)
            idl_push(acc, v->order[t]);
        if (chain >= 0 && v->tok_hi[c] > v->tok_lo[c]) {
            unsigned nv;
            if (sid[d + 1] >= 0 && wc.nd[sid[d + 1]])
                nv = wc.nd[sid[d + 1]] - 1u;
            else
                nv = node_need(g, LEVEL(d + 1), pre, D, chain, R);
            if (sid[d + 1] >= 0)
                wc.nd[sid[d + 1]] = (uint16_t)(nv + 1);
            unsigned nd = need_of(nv, d + 1, R);
            if (nd > 1 && !*need && !(*need = calloc(v->n, 1))) {
                wc_free(&wc);
                return -1;
            }
            if (nd > 1)
                for (uint32_t t = v->tok_lo[c]; t < v->tok_hi[c]; t++)
                    (*need)[v->order[t]] = (uint8_t)nd;
        }
        if (!v->first[c])
            continue;
        wframe *nf = &fr[d + 1];
        nf->node = c, nf->child = v->first[c];
        if (sid[d + 1] >= 0) {
            nf->sent = f->sent || wc.sent[sid[d + 1]];
            nf->u = wc.u[sid[d + 1]];
        } else {
            nf->sent = f->sent || has_sent(g, LEVEL(d + 1));
            top_union(g, LEVEL(d + 1), &nf->u);
        }
        d++;
    }
#undef LEVEL
    wc_free(&wc);
    return acc->oom || unc->oom ? -1 : 0;
}

/* A position in a counted repetition's rule whose index is above far (no token reaches past
 * far - 1 more repetitions: each takes a byte at least) masks like the same position in the
 * chain's rule of index far: maxLength 1000 costs far trie walks, not 1000. */
static uint32_t canon_to(const gram_grammar *g, uint32_t pos, uint32_t r, uint32_t idx)
{
    uint32_t r2 = g->chain_rules[g->chain_off[g->rule_chain[r]] + idx - 1];
    return g->alt_start[g->rule_alt[r2]] + (pos - g->alt_start[g->rule_alt[r]]);
}

static uint32_t canon(const gram_grammar *g, uint32_t pos, uint32_t far)
{
    if (!pos)
        return pos;
    uint32_t r = g->el_rule[pos];
    if (g->rule_chain[r] < 0 || g->rule_cidx[r] <= far)
        return pos;
    return canon_to(g, pos, r, far);
}

/* The counted repetition nearest the top of a key ("up to k more": maxLength, maxItems, a
 * grammar's x{m,n}) is folded: every index k stands as the chain's top index R, so the key
 * and its trie walk are one for the whole count. The walk records per token the least k it
 * needs (need[]); a step at index k clears the tokens that need more. Exact because the
 * language from index k is the one from R cut to fewer repetitions: a token that fits at k
 * fits at R with the same repetitions, and one whose parse leaves the repetition is checked
 * against the real stack. Returns the key index folded, or -1. */
static int fold_key(const gram_grammar *g, const uint32_t *top, size_t klen, uint32_t *key)
{
    for (size_t i = klen; i-- > 0;) {
        uint32_t pos = top[i];
        if (!pos)
            continue;
        uint32_t r = g->el_rule[pos];
        int32_t c = g->rule_chain[r];
        if (c < 0 || !g->chain_opt[c])
            continue;
        uint32_t R = g->chain_off[c + 1] - g->chain_off[c];
        if (R < 2 || R > 0x7fffffff)
            continue;
        key[i] = canon_to(g, pos, r, R);
        return (int)i;
    }
    return -1;
}

static mentry *entry_for(gram_matcher *s, const uint32_t *stk, size_t len, bool *owned, ts_err *err)
{
    gram_masker *m = s->m;
    mentry k = {0};
    k.whole = len <= GRAM_KEY_DEPTH;
    k.klen = (uint8_t)(k.whole ? len : GRAM_KEY_DEPTH);
    for (size_t i = 0; i < k.klen; i++)
        k.key[i] = canon(m->g, stk[len - k.klen + i], (uint32_t)m->v->max_len + 1);
    k.fold = (int8_t)fold_key(m->g, stk + len - k.klen, k.klen, k.key);
    if (!k.whole) {
        size_t room = m->lim.max_stack > len ? m->lim.max_stack - len : 0;
        k.budget = (uint8_t)(room < GRAM_KEY_BUDGET ? room : GRAM_KEY_BUDGET);
    }
    uint32_t h = 2166136261u ^ k.klen ^ ((uint32_t)k.whole << 8) ^ ((uint32_t)k.budget << 16);
    for (size_t i = 0; i < k.klen; i++)
        h = (h ^ k.key[i]) * 16777619u;
    k.hash = h ^ (h >> 15);
    *owned = false;
    pthread_mutex_lock(&m->mu);
    mentry *e = cache_find(m, &k);
    if (e)
        m->hits++;
    else
        m->misses++;
    pthread_mutex_unlock(&m->mu);
    if (e)
        return e;
    idlist acc = {0}, unc = {0};
    uint8_t *need = NULL;
    e = calloc(1, sizeof *e);
    int rc = e ? walk(s, &k, &acc, &unc, &need) : -1;
    if (rc) {
        free(e), free(acc.v), free(unc.v), free(need);
        if (rc == -2)
            ts_err_set(err, TS_BAD_REQUEST, "grammar: one step's token mask needs more than max_mask_work (%zu trie "
                       "steps); the grammar is too ambiguous for this vocabulary", m->lim.max_mask_work);
        else
            ts_err_set(err, TS_INTERNAL_ERROR, "out of memory computing a token mask");
        return NULL;
    }
    *e = k;
    e->unc = unc.v, e->n_unc = unc.n;
    e->n_acc = acc.n;
    e->need = need;
    for (size_t i = 0; need && i < acc.n; i++) {
        unsigned nd = need[acc.v[i]], n = nd & NEED_INF;
        uint32_t top = (nd & NEED_EXIT) || n == NEED_INF ? (uint32_t)m->v->max_len + 1 : n;
        if (top > e->need_max)
            e->need_max = top;
    }
    if (acc.n < m->v->n / 32) {
        e->acc_ids = acc.v;
    } else {
        e->acc = calloc(gram_mask_words(m->v), sizeof *e->acc);
        if (!e->acc) {
            free(acc.v);
            entry_free(e);
            ts_err_set(err, TS_INTERNAL_ERROR, "out of memory computing a token mask");
            return NULL;
        }
        for (size_t i = 0; i < acc.n; i++)
            e->acc[acc.v[i] >> 6] |= 1ull << (acc.v[i] & 63);
        free(acc.v);
    }
    pthread_mutex_lock(&m->mu);
    mentry *other = cache_find(m, &k);
    bool put = !other && cache_put(m, e);
    pthread_mutex_unlock(&m->mu);
    if (other) { /* another thread got there first */
        entry_free(e);
        return other;
    }
    if (!put)
        *owned = true;
    return e;
}

gram_matcher *gram_matcher_new(gram_masker *m, ts_err *err)
{
    gram_matcher *s = calloc(1, sizeof *s);
    if (s)
        s->scratch = malloc(scratch_words(m->lim.max_stack) * sizeof *s->scratch);
    if (!s || !s->scratch) {
        free(s);
        ts_err_set(err, TS_INTERNAL_ERROR, "out of memory");
        return NULL;
    }
    s->m = m;
    const gram_grammar *g = m->g;
    for (uint32_t a = g->rule_alt[g->root]; a < g->rule_alt[g->root + 1]; a++) {
        uint32_t stk[1] = {g->alt_start[a]};
        gram_expand(g, &s->cur, stk, 1, m->lim.max_stack, m->lim.max_stacks, s->scratch);
    }
    if (s->cur.overflow || !s->cur.n) {
        gram_matcher_free(s);
        ts_err_set(err, TS_BAD_REQUEST, "grammar is too deep or too ambiguous at its start (max_stack %u, max_stacks %u)",
                   m->lim.max_stack, m->lim.max_stacks);
        return NULL;
    }
    return s;
}

void gram_matcher_free(gram_matcher *s)
{
    if (!s)
        return;
    gram_sset_free(&s->cur), gram_sset_free(&s->t1), gram_sset_free(&s->t2);
    for (size_t i = 0; i < s->n_lv; i++)
        gram_sset_free(&s->lv[i]);
    free(s->lv);
    free(s->fr);
    free(s->sid);
    free(s->scratch);
    free(s);
}

bool gram_matcher_copy(gram_matcher *dst, const gram_matcher *src, ts_err *err)
{
    if (dst->m != src->m) {
        ts_err_set(err, TS_INTERNAL_ERROR, "grammar: matchers of different maskers");
        return false;
    }
    gram_sset_clear(&dst->cur);
    for (size_t i = 0; i < src->cur.n; i++) {
        if (src->cur.len[i])
            memcpy(dst->scratch, src->cur.pool + src->cur.off[i], src->cur.len[i] * sizeof *dst->scratch);
        /* already expanded: expand only re-adds it */
        gram_expand(src->m->g, &dst->cur, dst->scratch, src->cur.len[i], src->m->lim.max_stack,
                    src->m->lim.max_stacks, dst->scratch + src->m->lim.max_stack + 1);
    }
    dst->ended = src->ended;
    if (dst->cur.overflow) {
        ts_err_set(err, TS_INTERNAL_ERROR, "grammar: out of memory copying a matcher");
        return false;
    }
    return true;
}

bool gram_can_end(const gram_matcher *s)
{
    if (s->ended)
        return false;
    for (size_t i = 0; i < s->cur.n; i++)
        if (!s->cur.len[i])
            return true;
    return false;
}

bool gram_is_done(const gram_matcher *s) { return s->ended || (s->cur.n == 1 && s->cur.len[0] == 0); }
bool gram_ended(const gram_matcher *s) { return s->ended; }

/* reads bytes from the single stack stk (or from cur when stk is NULL) into *res; res
 * ends up empty when they do not fit */
static const gram_sset *run_bytes(gram_matcher *s, const gram_sset *from, const unsigned char *p, size_t n)
{
    const gram_grammar *g = s->m->g;
    const gram_sset *in = from;
    gram_sset *out = &s->t1;
    for (size_t i = 0; i < n; i++) {
        gram_advance(g, in, p[i], out, s->m->lim.max_stack, s->m->lim.max_stacks, s->scratch);
        if (!out->n || out->overflow)
            return out;
        in = out;
        out = out == &s->t1 ? &s->t2 : &s->t1;
    }
    return in;
}

/* Reads p into the matcher. Where the text of a token element (`<[TEXT]>`) comes next and
 * some parse stands at that element, it is read as the token (the worker feeds a marker it
 * already produced, e.g. Mistral's [TOOL_CALLS], which is one special token); else by bytes. */
bool gram_accept_bytes(gram_matcher *s, const unsigned char *p, size_t n, ts_err *err)
{
    if (s->ended) {
        ts_err_set(err, TS_BAD_REQUEST, "grammar: output already ended");
        return false;
    }
    const gram_grammar *g = s->m->g;
    const gram_sset *cur = &s->cur;
    gram_sset *out = &s->t1;
    for (size_t i = 0; i < n;) {
        bool took = false;
        for (size_t k = 0; k < g->n_tok && !took; k++) {
            if (g->tok_len[k] > n - i || memcmp(p + i, g->tok_text[k], g->tok_len[k]))
                continue;
            gram_sset_clear(out);
            gram_advance_tok(g, cur, GE_MAKE(GE_SENT, k + 1), out, s->m->lim.max_stack, s->m->lim.max_stacks,
                             s->scratch);
            if (out->n && !out->overflow) {
                took = true;
                i += g->tok_len[k];
            }
        }
        if (!took) {
            gram_advance(g, cur, p[i], out, s->m->lim.max_stack, s->m->lim.max_stacks, s->scratch);
            i++;
        }
        if (out->overflow) {
            ts_err_set(err, TS_BAD_REQUEST, "grammar: the output nests deeper or branches wider than the limits "
                       "(max_stack %u, max_stacks %u)", s->m->lim.max_stack, s->m->lim.max_stacks);
            return false;
        }
        if (!out->n) {
            ts_err_set(err, TS_BAD_REQUEST, "grammar: these bytes do not fit the grammar here");
            return false;
        }
        cur = out;
        out = out == &s->t1 ? &s->t2 : &s->t1;
    }
    /* cur is t1 or t2 (or cur itself when n is 0): swap it into cur */
    gram_sset tmp = s->cur;
    if (cur == &s->t1)
        s->cur = s->t1, s->t1 = tmp;
    else if (cur == &s->t2)
        s->cur = s->t2, s->t2 = tmp;
    return true;
}

bool gram_accept_token(gram_matcher *s, int32_t id, ts_err *err)
{
    const gram_vocab *v = s->m->v;
    if (id < 0 || (size_t)id >= v->n) {
        ts_err_set(err, TS_BAD_REQUEST, "grammar: token %d outside the vocabulary", (int)id);
        return false;
    }
    if (v->flags[id] & TOK_END) {
        if (!gram_can_end(s)) {
            ts_err_set(err, TS_BAD_REQUEST, "grammar: the end token is not allowed before the output is complete");
            return false;
        }
        s->ended = true;
        return true;
    }
    if (!v->blen[id]) { /* a special token: only where a token element names it */
        const gram_grammar *g = s->m->g;
        gram_sset_clear(&s->t1);
        for (size_t k = 0; k < g->n_tok; k++)
            if (s->m->tok_id[k] == id)
                gram_advance_tok(g, &s->cur, GE_MAKE(GE_SENT, k + 1), &s->t1, s->m->lim.max_stack,
                                 s->m->lim.max_stacks, s->scratch);
        if (!s->t1.n || s->t1.overflow) {
            ts_err_set(err, TS_BAD_REQUEST, "grammar: token %d is not allowed here", (int)id);
            return false;
        }
        gram_sset tmp = s->cur;
        s->cur = s->t1, s->t1 = tmp;
        return true;
    }
    return gram_accept_bytes(s, v->bytes + v->boff[id], v->blen[id], err);
}

/* one token against the whole stack (expanded into one on first use) */
static bool fits_stack(gram_matcher *s, gram_sset *one, bool *ready, const uint32_t *stk, size_t len, int32_t t)
{
    const gram_grammar *g = s->m->g;
    const gram_vocab *v = s->m->v;
    if (!*ready) {
        gram_sset_clear(one);
        memcpy(s->scratch, stk, len * sizeof *stk);
        gram_expand(g, one, s->scratch, len, s->m->lim.max_stack, s->m->lim.max_stacks,
                    s->scratch + s->m->lim.max_stack + 1);
        *ready = true;
    }
    s->work += v->blen[t];
    const gram_sset *r = run_bytes(s, one, v->bytes + v->boff[t], v->blen[t]);
    return r->n && !r->overflow;
}

/* an accepted token of a folded entry at the real index k (see fold_key) */
static bool need_ok(gram_matcher *s, const mentry *e, uint32_t k, gram_sset *one, bool *ready, const uint32_t *stk,
                    size_t len, int32_t t)
{
    unsigned nd = e->need[t], n = nd & NEED_INF;
    if (n != NEED_INF && n <= k)
        return true;
    return (nd & NEED_EXIT) && fits_stack(s, one, ready, stk, len, t);
}

bool gram_fill_mask(gram_matcher *s, uint64_t *mask, size_t words, ts_err *err)
{
    const gram_vocab *v = s->m->v;
    const gram_grammar *g = s->m->g;
    if (words < gram_mask_words(v)) {
        ts_err_set(err, TS_INTERNAL_ERROR, "grammar: mask of %zu words, the vocabulary needs %zu", words,
                   gram_mask_words(v));
        return false;
    }
    memset(mask, 0, words * sizeof *mask);
    if (s->ended)
        return true;
    s->work = 0, s->over_work = false;
    bool can_end = false;
    gram_sset one = {0};
    for (size_t i = 0; i < s->cur.n; i++) {
        size_t len = s->cur.len[i];
        if (!len) {
            can_end = true;
            continue;
        }
        const uint32_t *stk = s->cur.pool + s->cur.off[i];
        if (GE_IS_TOK(g->el[stk[len - 1]])) { /* one whole token, by id */
            int32_t t = s->m->tok_id[GE_ARG(g->el[stk[len - 1]]) - 1];
            if (t >= 0)
                mask[t >> 6] |= 1ull << (t & 63);
            continue;
        }
        bool owned, ready = false;
        mentry *e = entry_for(s, stk, len, &owned, err);
        if (!e) {
            gram_sset_free(&one);
            return false;
        }
        uint32_t k = UINT32_MAX;
        if (e->need)
            k = g->rule_cidx[g->el_rule[stk[len - e->klen + (size_t)e->fold]]];
        if (k >= e->need_max) {
            if (e->acc)
                for (size_t w = 0; w < gram_mask_words(v); w++)
                    mask[w] |= e->acc[w];
            else
                for (size_t j = 0; j < e->n_acc; j++)
                    mask[e->acc_ids[j] >> 6] |= 1ull << (e->acc_ids[j] & 63);
        } else if (e->acc) {
            for (size_t w = 0; w < gram_mask_words(v); w++)
                for (uint64_t x = e->acc[w] & ~mask[w]; x; x &= x - 1) {
                    int32_t t = (int32_t)(w * 64 + (size_t)__builtin_ctzll(x));
                    if (need_ok(s, e, k, &one, &ready, stk, len, t))
                        mask[w] |= 1ull << (t & 63);
                }
        } else {
            for (size_t j = 0; j < e->n_acc; j++) {
                int32_t t = e->acc_ids[j];
                if (need_ok(s, e, k, &one, &ready, stk, len, t))
                    mask[t >> 6] |= 1ull << (t & 63);
            }
        }
        for (size_t j = 0; j < e->n_unc; j++) {
            /* the uncertain tokens against this whole stack */
            int32_t t = e->unc[j];
            if (!((mask[t >> 6] >> (t & 63)) & 1) && fits_stack(s, &one, &ready, stk, len, t))
                mask[t >> 6] |= 1ull << (t & 63);
        }
        if (owned)
            entry_free(e);
        if (s->work > s->m->lim.max_mask_work) {
            gram_sset_free(&one);
            ts_err_set(err, TS_BAD_REQUEST, "grammar: one step's token mask needs more than max_mask_work (%zu trie "
                       "steps); the grammar is too ambiguous for this vocabulary", s->m->lim.max_mask_work);
            return false;
        }
    }
    gram_sset_free(&one);
    if (can_end)
        for (size_t j = 0; j < v->n_end; j++)
            mask[v->end_ids[j] >> 6] |= 1ull << (v->end_ids[j] & 63);
    return true;
}
