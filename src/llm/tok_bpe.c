/* tok_bpe: the BPE model on one pre-tokenized piece. Merges apply lowest rank first, the
 * leftmost pair among equal ranks (what @huggingface/tokenizers' priority queue does with
 * its rank + position/length score), in O(n log n) with a heap of candidate pairs; a pair
 * left stale by an earlier merge is recognized when popped and skipped. */
#include <stdlib.h>
#include <string.h>

#include "tok_int.h"

typedef struct {
    int32_t sym; /* -1: a character no merge and no vocabulary entry knows */
    uint32_t start, len;
    int32_t prev, next;
} node;

typedef struct {
    uint32_t rank, pos; /* pos: the left node's start, for the leftmost-first tie break */
    int32_t left, lsym, rsym, result;
} cand;

#define SMALL 64

static bool cand_less(const cand *a, const cand *b)
{
    return a->rank != b->rank ? a->rank < b->rank : a->pos < b->pos;
}

static void heap_push(cand *h, size_t *n, cand c)
{
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!cand_less(&c, &h[p]))
            break;
        h[i] = h[p];
        i = p;
    }
    h[i] = c;
}

static cand heap_pop(cand *h, size_t *n)
{
    cand top = h[0], last = h[--*n];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        const cand *best = &last;
        if (l < *n && cand_less(&h[l], best))
            m = l, best = &h[l];
        if (r < *n && cand_less(&h[r], best))
            m = r;
        if (m == i)
            break;
        h[i] = h[m];
        i = m;
    }
    if (*n)
        h[i] = last;
    return top;
}

static void try_pair(const tokenizer *t, const node *nd, int32_t l, cand *h, size_t *nh)
{
    int32_t r = nd[l].next;
    uint64_t v;
    if (r < 0 || nd[l].sym < 0 || nd[r].sym < 0)
        return;
    if (!tok_u64map_get(&t->merges, ((uint64_t)(uint32_t)nd[l].sym << 32) | (uint32_t)nd[r].sym, &v))
        return;
    heap_push(h, nh, (cand){.rank = (uint32_t)(v >> 32), .pos = nd[l].start, .left = l,
                            .lsym = nd[l].sym, .rsym = nd[r].sym, .result = (int32_t)(uint32_t)v});
}

static int push_id(const tokenizer *t, tok_ids *out, int32_t id, bool *unk_run, ts_err *err)
{
    bool unk = t->unk_id >= 0 && id == t->unk_id;
    if (unk && t->fuse_unk && *unk_run)
        return 0;
    *unk_run = unk;
    return tok_ids_push(out, id, err);
}

/* One final symbol (s[0..n)) to ids: itself when in the vocabulary, else its bytes
 * (byte fallback), else the unknown token, else nothing (as @huggingface/tokenizers). */
static int emit(const tokenizer *t, int32_t sym, const char *s, size_t n, tok_ids *out,
                bool *unk_run, ts_err *err)
{
    if (sym >= 0 && t->sym_vid[sym] >= 0)
        return push_id(t, out, t->sym_fid[sym], unk_run, err);
    if (t->byte_fallback) {
        bool all = true;
        for (size_t i = 0; i < n && all; i++)
            all = t->byte_id[(unsigned char)s[i]] >= 0;
        if (all) {
            for (size_t i = 0; i < n; i++)
                if (push_id(t, out, t->byte_id[(unsigned char)s[i]], unk_run, err) < 0)
                    return -1;
            return 0;
        }
    }
    if (t->unk_id >= 0)
        return push_id(t, out, t->unk_id, unk_run, err);
    return 0;
}

int tok_bpe_piece(const tokenizer *t, const char *s, size_t n, tok_ids *out, bool *unk_run,
                  ts_err *err)
{
    node small_nd[SMALL];
    cand small_h[3 * SMALL];
    node *nd = small_nd;
    cand *h = small_h;
    size_t nh = 0, nn = 0;
    int rc = -1;
    if (n == 0)
        return 0;
    if (t->ignore_merges) {
        int64_t k = tok_strmap_find(&t->sym, &t->arena, s, n);
        if (k >= 0 && t->sym_vid[k] >= 0)
            return push_id(t, out, t->sym_fid[k], unk_run, err);
    }
    if (n > SMALL) { /* at most one node per byte, three candidates per node */
        nd = malloc(n * sizeof *nd);
        h = malloc(3 * n * sizeof *h);
        if (!nd || !h) {
            ts_err_set(err, TS_INTERNAL_ERROR, "out of memory");
            goto out;
        }
    }
    for (size_t i = 0; i < n;) {
        if ((nn % TOK_STOP_EVERY) == 0 && tok_check_stop(out->stop, err) < 0)
            goto out;
        uint32_t cp;
        size_t l = tok_utf8_next((const unsigned char *)s + i, n - i, &cp);
        int64_t k = tok_strmap_find(&t->sym, &t->arena, s + i, l);
        nd[nn] = (node){.sym = (int32_t)k, .start = (uint32_t)i, .len = (uint32_t)l,
                        .prev = (int32_t)nn - 1, .next = (int32_t)nn + 1};
        nn++;
        i += l;
    }
    nd[nn - 1].next = -1;
    for (size_t i = 0; i + 1 < nn; i++) {
        if ((i % TOK_STOP_EVERY) == 0 && tok_check_stop(out->stop, err) < 0)
            goto out;
        try_pair(t, nd, (int32_t)i, h, &nh);
    }
    for (size_t steps = 1; nh; steps++) {
        /* a multi-MB piece (SentencePiece-style text is one piece) takes seconds */
        if ((steps % TOK_STOP_EVERY) == 0 && tok_check_stop(out->stop, err) < 0)
            goto out;
        cand c = heap_pop(h, &nh);
        node *l = &nd[c.left];
        if (l->len == 0 || l->sym != c.lsym || l->next < 0 || nd[l->next].sym != c.rsym)
            continue; /* stale: one side has merged since */
        node *r = &nd[l->next];
        l->sym = c.result;
        l->len += r->len;
        r->len = 0;
        l->next = r->next;
        if (r->next >= 0)
            nd[r->next].prev = c.left;
        if (l->prev >= 0)
            try_pair(t, nd, l->prev, h, &nh);
        try_pair(t, nd, c.left, h, &nh);
    }
    for (int32_t i = 0; i >= 0; i = nd[i].next)
        if (emit(t, nd[i].sym, s + nd[i].start, nd[i].len, out, unk_run, err) < 0)
            goto out;
    rc = 0;
out:
    if (nd != small_nd)
        free(nd);
    if (h != small_h)
        free(h);
    return rc;
}
