#include "affinity.h"
#include "jscan.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- hashing: FNV-1a over the bytes, then splitmix64's finaliser (FNV alone leaves the high
 * bits of short inputs poorly mixed, and the ring compares whole 64-bit values) ---------- */

#define FNV_BASIS 0xcbf29ce484222325ULL
#define FNV_PRIME 0x100000001b3ULL

static uint64_t mix(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static uint64_t feed(uint64_t h, const void *data, size_t n)
{
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * FNV_PRIME;
    return h;
}

static uint64_t feed_u64(uint64_t h, uint64_t v)
{
    unsigned char b[8];
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)(v >> (8 * i));
    return feed(h, b, sizeof b);
}

/* A name, length first, so that ("ab", "c") and ("a", "bc") differ. */
static uint64_t feed_name(uint64_t h, const char *s)
{
    size_t n = s ? strlen(s) : 0;
    h = feed_u64(h, s ? n + 1 : 0); /* NULL (no tenant) differs from "" */
    return feed(h, s, n);
}

/* JSON text with the whitespace outside strings dropped, at most limit bytes of it. */
static uint64_t feed_canonical(uint64_t h, const char *s, size_t n, size_t limit)
{
    bool in_str = false, esc = false;
    size_t out = 0;
    for (size_t i = 0; i < n && out < limit; i++) {
        char c = s[i];
        if (in_str) {
            if (esc) esc = false;
            else if (c == '\\') esc = true;
            else if (c == '"') in_str = false;
        } else if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
            continue;
        } else if (c == '"') {
            in_str = true;
        }
        h = (h ^ (unsigned char)c) * FNV_PRIME;
        out++;
    }
    return h;
}

/* A span as its key part: canonical whole, or past AFF_SPAN_MAX its first half-span canonical
 * and its last half-span raw, with its length (a bounded cost for a megabyte first message;
 * two conversations that differ only in the middle of one share a key and a backend). */
static uint64_t feed_span(uint64_t h, const char *s, size_t n)
{
    if (n <= AFF_SPAN_MAX) return feed_canonical(h, s, n, SIZE_MAX);
    size_t half = AFF_SPAN_MAX / 2;
    h = feed_canonical(h, s, half, SIZE_MAX);
    h = feed_u64(h, n);
    return feed(h, s + n - half, half);
}

uint64_t affinity_id(const char *addr) { return mix(feed(FNV_BASIS, addr, strlen(addr))); }

/* ---- the prefix keys ----------------------------------------------------------------------
 * A scan over JSON that jcheck has passed: well-formed, so only bounds are checked (jscan.h). */

static bool raw_is(const char *s, size_t a, size_t b, const char *word)
{
    return b - a == strlen(word) && memcmp(s + a, word, b - a) == 0;
}

/* Is the object s[i..end) a message whose top-level "role" is "user"? (A key or value written
 * with escapes is not recognised: the prefix then runs on to the next user message.) */
static bool is_user_message(const char *s, size_t i, size_t end)
{
    if (i >= end || s[i] != '{') return false;
    for (i = jscan_ws(s, end, i + 1); i < end && s[i] == '"';) {
        size_t k = i;
        i = jscan_string(s, end, i);
        bool role = raw_is(s, k, i, "\"role\"");
        i = jscan_ws(s, end, jscan_ws(s, end, i) + 1); /* past the ':' */
        size_t v = i;
        i = jscan_value(s, end, i);
        if (role) return raw_is(s, v, i, "\"user\"");
        i = jscan_ws(s, end, i);
        if (i < end && s[i] == ',') i = jscan_ws(s, end, i + 1);
    }
    return false;
}

static uint64_t key_head(const char *kind, const char *model, const char *tenant)
{
    uint64_t h = feed_name(FNV_BASIS, kind);
    h = feed_name(h, model);
    return feed_name(h, tenant);
}

bool affinity_key_chat(const char *messages, size_t n, const char *model, const char *tenant, uint64_t *key)
{
    size_t i = jscan_ws(messages, n, 0);
    if (i >= n || messages[i] != '[') return false;
    size_t start = i, end = n, count = 0;
    for (i = jscan_ws(messages, n, i + 1); i < n && messages[i] != ']';) {
        size_t e = i;
        i = jscan_value(messages, n, i);
        count++;
        if (is_user_message(messages, e, i)) {
            end = i;
            break;
        }
        i = jscan_ws(messages, n, i);
        if (i < n && messages[i] == ',') i = jscan_ws(messages, n, i + 1);
    }
    if (!count) return false;
    *key = mix(feed_span(key_head("chat", model, tenant), messages + start, end - start));
    return true;
}

bool affinity_key_prompt(const char *prompt, size_t n, size_t prompt_bytes, const char *model, const char *tenant,
                         uint64_t *key)
{
    size_t i = jscan_ws(prompt, n, 0);
    if (i >= n || (prompt[i] != '"' && prompt[i] != '[') || prompt_bytes == 0) return false;
    size_t end = jscan_value(prompt, n, i);
    if (end - i <= 2) return false; /* "" or []: nothing to share */
    *key = mix(feed_canonical(key_head("prompt", model, tenant), prompt + i, end - i, prompt_bytes));
    return true;
}

/* ---- the ring ------------------------------------------------------------------------------ */

typedef struct {
    uint64_t h;
    uint32_t k; /* the backend's index */
} aff_point;

struct affinity_ring {
    aff_point *pts; /* sorted by h */
    size_t n_pts;
    uint64_t *ids;  /* the backends it was built for, in order */
    size_t nb;
};

static const char *const k_results[AFF_RESULTS] = {"hit", "miss", "overflow"};
const char *affinity_result_name(affinity_result r) { return r < AFF_RESULTS ? k_results[r] : "?"; }

affinity_ring *affinity_ring_new(void) { return calloc(1, sizeof(affinity_ring)); }

void affinity_ring_free(affinity_ring *r)
{
    if (!r) return;
    free(r->pts);
    free(r->ids);
    free(r);
}

static int cmp_point(const void *a, const void *b)
{
    const aff_point *x = a, *y = b;
    if (x->h != y->h) return x->h < y->h ? -1 : 1;
    return x->k < y->k ? -1 : x->k > y->k; /* equal hashes: a fixed order all the same */
}

int affinity_ring_set(affinity_ring *r, const uint64_t *ids, size_t n)
{
    if (n == r->nb && (n == 0 || memcmp(ids, r->ids, n * sizeof *ids) == 0)) return r->pts || n == 0 ? 0 : -1;
    free(r->pts);
    free(r->ids);
    r->pts = NULL;
    r->ids = NULL;
    r->n_pts = r->nb = 0;
    if (n == 0) return 0;
    if (n > AFF_MAX_BACKENDS) return -1;
    r->pts = malloc(n * AFF_VNODES * sizeof *r->pts);
    r->ids = malloc(n * sizeof *r->ids);
    if (!r->pts || !r->ids) {
        free(r->pts);
        free(r->ids);
        r->pts = NULL;
        r->ids = NULL;
        return -1;
    }
    memcpy(r->ids, ids, n * sizeof *ids);
    for (size_t k = 0; k < n; k++)
        for (size_t v = 0; v < AFF_VNODES; v++)
            r->pts[k * AFF_VNODES + v] = (aff_point){mix(ids[k] + (v + 1) * 0x9e3779b97f4a7c15ULL), (uint32_t)k};
    r->n_pts = n * AFF_VNODES;
    r->nb = n;
    qsort(r->pts, r->n_pts, sizeof *r->pts, cmp_point);
    return 0;
}

int affinity_pick(const affinity_ring *r, const route_pool *p, uint64_t key, double load_factor, int avoid,
                  affinity_result *res)
{
    *res = AFF_MISS;
    if (!r->n_pts || r->nb != p->n) return -1;
    unsigned total = 0, healthy = 0;
    for (size_t k = 0; k < p->n; k++)
        if (p->backends[k].healthy) total += p->backends[k].in_flight, healthy++;
    if (!healthy) return -1;
    if (!(load_factor >= 1)) load_factor = 1;
    /* the bound counts the request being placed; a whole request more than the even share */
    double bound = ceil(load_factor * (double)(total + 1) / (double)healthy - 1e-9);
    /* the first point at or after the key, wrapping */
    size_t lo = 0, hi = r->n_pts;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (r->pts[mid].h < key) lo = mid + 1;
        else hi = mid;
    }
    uint64_t seen[AFF_MAX_BACKENDS / 64] = {0};
    size_t distinct = 0;
    for (size_t j = 0; j < r->n_pts && distinct < r->nb; j++) {
        uint32_t k = r->pts[(lo + j) % r->n_pts].k;
        if ((seen[k / 64] >> (k % 64)) & 1) continue;
        seen[k / 64] |= 1ULL << (k % 64);
        const route_backend *b = &p->backends[k];
        bool usable = b->healthy && (int)k != avoid;
        bool fits = b->in_flight < p->max_in_flight && (double)b->in_flight + 1 <= bound;
        if (distinct++ == 0) *res = !usable ? AFF_MISS : fits ? AFF_HIT : AFF_OVERFLOW;
        if (usable && fits) return (int)k;
    }
    return -1;
}
