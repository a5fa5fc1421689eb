/* tok_nfc: the Unicode the normalizers need, on the tables that gen_nfc_data.py writes:
 * the four normalization forms (UAX #15), JavaScript's toLowerCase (full mappings and the
 * Final_Sigma rule) and a few character properties. For NFC most text has no code point it
 * could touch and is copied as is; the rest is decomposed, put in canonical order and
 * recomposed. */
#include <stdlib.h>

#include "tok_int.h"
#include "tok_nfc_data.h"

enum { SBASE = 0xAC00, LBASE = 0x1100, VBASE = 0x1161, TBASE = 0x11A7,
       LCOUNT = 19, VCOUNT = 21, TCOUNT = 28, NCOUNT = VCOUNT * TCOUNT, SCOUNT = LCOUNT * NCOUNT };

/* The run of tab[0..n) (sorted, disjoint) holding cp, or NULL. */
static const tok_nfc_range *range_find(const tok_nfc_range *tab, size_t n, uint32_t cp)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (cp < tab[mid].first)
            hi = mid;
        else if (cp > tab[mid].last)
            lo = mid + 1;
        else
            return &tab[mid];
    }
    return NULL;
}

static bool unsafe(uint32_t cp)
{
    if (cp < 0x10000)
        return (tok_nfc_unsafe_bmp[cp >> 5] >> (cp & 31)) & 1;
    return range_find(tok_nfc_unsafe_astral, tok_nfc_unsafe_astral_n, cp) != NULL;
}

static uint32_t ccc(uint32_t cp)
{
    const tok_nfc_range *r = cp < 0x300 ? NULL : range_find(tok_nfc_ccc, tok_nfc_ccc_n, cp);
    return r ? r->value : 0;
}

static const tok_nfc_decomp *find(const tok_nfc_decomp *tab, size_t n, uint32_t cp)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (cp < tab[mid].cp)
            hi = mid;
        else if (cp > tab[mid].cp)
            lo = mid + 1;
        else
            return &tab[mid];
    }
    return NULL;
}

uint32_t tok_uprop(uint32_t cp)
{
    const tok_nfc_range *r = range_find(tok_uprops, tok_uprops_n, cp);
    return r ? r->value : 0;
}

static uint32_t compose(uint32_t a, uint32_t b)
{
    if (a >= LBASE && a < LBASE + LCOUNT && b >= VBASE && b < VBASE + VCOUNT)
        return SBASE + ((a - LBASE) * VCOUNT + (b - VBASE)) * TCOUNT;
    if (a >= SBASE && a < SBASE + SCOUNT && (a - SBASE) % TCOUNT == 0 && b > TBASE &&
        b < TBASE + TCOUNT)
        return a + (b - TBASE);
    uint64_t key = ((uint64_t)a << 21) | b;
    size_t lo = 0, hi = tok_nfc_pairs_n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (key < tok_nfc_pairs[mid].key)
            hi = mid;
        else if (key > tok_nfc_pairs[mid].key)
            lo = mid + 1;
        else
            return tok_nfc_pairs[mid].composite;
    }
    return 0;
}

/* Writes cp's full canonical (or, compat, compatibility) decomposition to v (NULL: only
 * counts it). */
static size_t decompose(uint32_t cp, bool compat, uint32_t *v)
{
    if (cp >= SBASE && cp < SBASE + SCOUNT) {
        uint32_t s = cp - SBASE;
        if (v) {
            v[0] = LBASE + s / NCOUNT;
            v[1] = VBASE + (s % NCOUNT) / TCOUNT;
            if (s % TCOUNT)
                v[2] = TBASE + s % TCOUNT;
        }
        return s % TCOUNT ? 3 : 2;
    }
    const tok_nfc_decomp *d = compat ? find(tok_nfc_kdecomp_tab, tok_nfc_kdecomp_n, cp) : NULL;
    const uint32_t *seq = tok_nfc_kdecomp_seq;
    if (!d) {
        d = find(tok_nfc_decomp_tab, tok_nfc_decomp_n, cp);
        seq = tok_nfc_decomp_seq;
    }
    if (!d) {
        if (v)
            v[0] = cp;
        return 1;
    }
    for (size_t i = 0; v && i < d->n; i++)
        v[i] = seq[d->off + i];
    return d->n;
}

/* Normalizes u[start..n) (start at a starter) into out. */
static void unorm(const unsigned char *u, size_t start, size_t n, bool compat, bool compose_it, buf *out)
{
    size_t total = 0, i;
    for (i = start; i < n;) {
        uint32_t cp;
        i += tok_utf8_next(u + i, n - i, &cp);
        total += decompose(cp, compat, NULL);
    }
    if (total == 0)
        return;
    uint32_t *v = malloc(total * sizeof *v);
    if (!v) {
        out->failed = true;
        return;
    }
    size_t m = 0;
    for (i = start; i < n;) {
        uint32_t cp;
        i += tok_utf8_next(u + i, n - i, &cp);
        m += decompose(cp, compat, v + m);
    }
    /* canonical ordering: a stable insertion sort of each run of non-starters */
    for (size_t k = 1; k < m; k++) {
        uint32_t c = ccc(v[k]);
        if (c == 0)
            continue;
        size_t j = k;
        uint32_t x = v[k];
        while (j > 0 && ccc(v[j - 1]) > c) {
            v[j] = v[j - 1];
            j--;
        }
        v[j] = x;
    }
    size_t w = m;
    if (compose_it) { /* canonical composition (the UAX #15 sample algorithm) */
        size_t starter = 0;
        uint32_t last = ccc(v[0]) ? 256 : 0;
        w = 1;
        for (size_t k = 1; k < m; k++) {
            uint32_t c = ccc(v[k]);
            uint32_t comp = compose(v[starter], v[k]);
            if (comp && (last < c || last == 0)) {
                v[starter] = comp;
                continue;
            }
            if (c == 0)
                starter = w;
            last = c;
            v[w++] = v[k];
        }
    }
    for (size_t k = 0; k < w; k++)
        tok_utf8_put(out, v[k]);
    free(v);
}

void tok_nfc(const char *s, size_t n, buf *out)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        uint32_t cp;
        size_t l = tok_utf8_next(u + i, n - i, &cp);
        if (cp >= 0x300 && unsafe(cp))
            break;
        i += l;
    }
    if (i == n) {
        buf_put(out, s, n);
        return;
    }
    /* Normalize everything from the last starter before the first unsafe code point
     * (what precedes it cannot change). */
    size_t start = i;
    while (start > 0) {
        size_t p = start - 1;
        while (p > 0 && (u[p] & 0xC0) == 0x80)
            p--;
        uint32_t cp;
        tok_utf8_next(u + p, n - p, &cp);
        start = p;
        if (ccc(cp) == 0)
            break;
    }
    buf_put(out, s, start);
    unorm(u, start, n, false, true, out);
}

void tok_unorm(const char *s, size_t n, bool compat, bool compose_it, buf *out)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t ascii = 0;
    while (ascii < n && u[ascii] < 0x80)
        ascii++;
    if (!compat && compose_it) {
        tok_nfc(s, n, out);
        return;
    }
    if (ascii == n) { /* ASCII is the same in every form */
        buf_put(out, s, n);
        return;
    }
    /* the last ASCII byte before the first other one is a starter: keep what precedes it */
    size_t start = ascii ? ascii - 1 : 0;
    buf_put(out, s, start);
    unorm(u, start, n, compat, compose_it, out);
}

/* Final_Sigma (Unicode 3.13, as toLowerCase applies it): a capital sigma after a cased
 * letter (case-ignorable ones between) and not before one becomes the final form. */
static bool final_sigma(const unsigned char *u, size_t n, size_t at, size_t len)
{
    size_t p = at;
    bool before = false;
    while (p > 0) {
        size_t q = p - 1;
        while (q > 0 && (u[q] & 0xC0) == 0x80)
            q--;
        uint32_t cp;
        tok_utf8_next(u + q, n - q, &cp);
        uint32_t f = tok_uprop(cp);
        p = q;
        if (f & TOK_UP_CASE_IGNORABLE)
            continue;
        before = (f & TOK_UP_CASED) != 0;
        break;
    }
    if (!before)
        return false;
    for (size_t q = at + len; q < n;) {
        uint32_t cp;
        q += tok_utf8_next(u + q, n - q, &cp);
        uint32_t f = tok_uprop(cp);
        if (f & TOK_UP_CASE_IGNORABLE)
            continue;
        return (f & TOK_UP_CASED) == 0;
    }
    return true;
}

void tok_lower(const char *s, size_t n, buf *out)
{
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        size_t run = i;
        while (i < n && u[i] < 0x80 && !(u[i] >= 'A' && u[i] <= 'Z'))
            i++;
        buf_put(out, s + run, i - run);
        if (i == n)
            break;
        uint32_t cp;
        size_t l = tok_utf8_next(u + i, n - i, &cp);
        const tok_nfc_decomp *d;
        if (cp == 0x3A3)
            tok_utf8_put(out, final_sigma(u, n, i, l) ? 0x3C2 : 0x3C3);
        else if ((d = find(tok_lower_tab, tok_lower_n, cp)) != NULL)
            for (size_t k = 0; k < d->n; k++)
                tok_utf8_put(out, tok_lower_seq[d->off + k]);
        else
            buf_put(out, s + i, l);
        i += l;
    }
}
