/* quant_weights: see quant_weights.h. Every length and offset comes from the file, so each one is
 * checked against the bytes left before it is used. */
#include "quant_weights.h"
#include "err.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define QW_FILE_MAX ((size_t)2 << 30) /* protobuf's limit */
#define QW_MAX ((size_t)1 << 20)      /* initializers listed at most */

struct quant_weights {
    uint8_t *map;
    size_t len;
    quant_weight *w;
    size_t n, cap, bytes;
};

typedef struct {
    const uint8_t *p, *end;
} rd;

static bool varint(rd *r, uint64_t *v)
{
    *v = 0;
    for (int s = 0; s < 64 && r->p < r->end; s += 7) {
        uint8_t b = *r->p++;
        *v |= (uint64_t)(b & 0x7f) << s;
        if (!(b & 0x80)) return true;
    }
    return false;
}

/* The next field: its number, wire type, and for wire type 2 its bytes in *sub, for 0 its value. */
static bool field(rd *r, uint32_t *num, int *wt, rd *sub, uint64_t *val)
{
    uint64_t key, n;
    if (!varint(r, &key) || key >> 32) return false;
    *num = (uint32_t)(key >> 3);
    *wt = (int)(key & 7);
    switch (*wt) {
    case 0: return varint(r, val);
    case 1: n = 8; break;
    case 5: n = 4; break;
    case 2:
        if (!varint(r, &n)) return false;
        break;
    default: return false; /* groups: not in ONNX */
    }
    if (n > (uint64_t)(r->end - r->p)) return false;
    sub->p = r->p;
    sub->end = r->p + n;
    r->p += n;
    return true;
}

static size_t elem_size(int32_t t)
{
    switch (t) {
    case 2: case 3: case 9: return 1;      /* uint8, int8, bool */
    case 4: case 5: case 10: case 16: return 2; /* uint16, int16, float16, bfloat16 */
    case 1: case 6: case 12: return 4;     /* float, int32, uint32 */
    case 7: case 11: case 13: return 8;    /* int64, double, uint64 */
    default: return 0;
    }
}

static int tensor(quant_weights *w, rd t, size_t min_bytes)
{
    quant_weight q = {0};
    rd raw = {0}, name = {0}, sub;
    bool has_raw = false, external = false;
    uint32_t num;
    int wt;
    uint64_t v;
    while (t.p < t.end) {
        if (!field(&t, &num, &wt, &sub, &v)) return -1;
        if (num == 1 && wt == 0) {
            if (q.ndim == QUANT_W_MAX_DIMS) return 0;
            q.dims[q.ndim++] = (int64_t)v;
        } else if (num == 1 && wt == 2) { /* packed dims */
            while (sub.p < sub.end) {
                if (!varint(&sub, &v)) return -1;
                if (q.ndim == QUANT_W_MAX_DIMS) return 0;
                q.dims[q.ndim++] = (int64_t)v;
            }
        } else if (num == 2 && wt == 0) {
            q.data_type = (int32_t)v;
        } else if (num == 8 && wt == 2) {
            name = sub;
        } else if (num == 9 && wt == 2) {
            raw = sub;
            has_raw = true;
        } else if (num == 14 && wt == 0) {
            external = v != 0;
        } else if (num == 3) {
            return 0; /* a segment of a tensor: left to the session */
        }
    }
    size_t es = elem_size(q.data_type), len = (size_t)(raw.end - raw.p), nl = (size_t)(name.end - name.p);
    if (!has_raw || external || !es || len < min_bytes || !nl || memchr(name.p, 0, nl)) return 0;
    size_t count = 1;
    for (size_t i = 0; i < q.ndim; i++) {
        if (q.dims[i] < 0 || (q.dims[i] && count > SIZE_MAX / (size_t)q.dims[i])) return 0;
        count *= (size_t)q.dims[i];
    }
    if (count > SIZE_MAX / es || count * es != len) return 0;
    if (w->n == w->cap) {
        if (w->cap == QW_MAX) return 0;
        size_t cap = w->cap ? 2 * w->cap : 64;
        quant_weight *nw = realloc(w->w, cap * sizeof *nw);
        if (!nw) return -2;
        w->w = nw;
        w->cap = cap;
    }
    char *s = malloc(nl + 1);
    if (!s) return -2;
    memcpy(s, name.p, nl);
    s[nl] = 0;
    q.name = s;
    q.data = raw.p;
    q.bytes = len;
    w->w[w->n++] = q;
    w->bytes += len;
    return 0;
}

static int walk(quant_weights *w, size_t min_bytes)
{
    rd m = {w->map, w->map + w->len}, sub, g = {0};
    uint32_t num;
    int wt;
    uint64_t v;
    bool graph = false;
    while (m.p < m.end) {
        if (!field(&m, &num, &wt, &sub, &v)) return -1;
        if (num == 7 && wt == 2) {
            g = sub;
            graph = true;
        }
    }
    if (!graph) return -1;
    while (g.p < g.end) {
        if (!field(&g, &num, &wt, &sub, &v)) return -1;
        if (num == 5 && wt == 2) {
            int rc = tensor(w, sub, min_bytes);
            if (rc) return rc;
        }
    }
    return 0;
}

int quant_weights_map(const char *path, size_t min_bytes, quant_weights **out, char *err, size_t errlen)
{
    *out = NULL;
    struct stat st;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || fstat(fd, &st) != 0) {
        ts_fail(err, errlen, "%s: %s", path, strerror(errno));
        if (fd >= 0) close(fd);
        return -1;
    }
    if (!S_ISREG(st.st_mode) || st.st_size <= 0 || (size_t)st.st_size >= QW_FILE_MAX) {
        close(fd);
        return ts_fail(err, errlen, "%s: not a regular file under 2 GiB", path);
    }
    quant_weights *w = calloc(1, sizeof *w);
    if (!w) {
        close(fd);
        return ts_fail(err, errlen, "out of memory");
    }
    w->len = (size_t)st.st_size;
    w->map = mmap(NULL, w->len, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (w->map == MAP_FAILED) {
        w->map = NULL;
        ts_fail(err, errlen, "%s: mmap: %s", path, strerror(errno));
        quant_weights_free(w);
        return -1;
    }
    int rc = walk(w, min_bytes);
    if (rc) {
        ts_fail(err, errlen, rc == -2 ? "out of memory" : "%s: not an ONNX model (its protobuf does not walk)", path);
        quant_weights_free(w);
        return -1;
    }
    *out = w;
    return 0;
}

size_t quant_weights_count(const quant_weights *w) { return w->n; }
const quant_weight *quant_weights_at(const quant_weights *w, size_t i) { return i < w->n ? &w->w[i] : NULL; }
size_t quant_weights_bytes(const quant_weights *w) { return w->bytes; }

void quant_weights_drop_pages(quant_weights *w)
{
    if (w && w->map) (void)madvise(w->map, w->len, MADV_DONTNEED);
}

void quant_weights_free(quant_weights *w)
{
    if (!w) return;
    for (size_t i = 0; i < w->n; i++) free((void *)(uintptr_t)w->w[i].name);
    free(w->w);
    if (w->map) munmap(w->map, w->len);
    free(w);
}
