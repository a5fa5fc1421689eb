#include "loadbody.h"
#include "err.h"

#include <errno.h>
#include <event2/event.h>
#include <jansson.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "h1cli.h"
#include "route.h"

#define LB_META_MAX (1u << 20) /* a metadata reply larger than this is refused */

static bool name_ok(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n >= 64) return false;
    for (size_t i = 0; i < n; i++)
        if (s[i] <= ' ' || s[i] > '~' || s[i] == '"' || s[i] == '\\') return false;
    return true;
}

static int add_input(lb_model *m, const char *name, ts_dtype dt, const int64_t *dims, size_t nd, char *err,
                     size_t errlen)
{
    if (m->n_in == LB_MAX_INPUTS) return ts_fail(err, errlen, "more than %d inputs", LB_MAX_INPUTS);
    if (!name_ok(name)) return ts_fail(err, errlen, "input name '%.40s' is not 1..63 visible characters", name);
    if (dt == DT_INVALID) return ts_fail(err, errlen, "input %s: unknown datatype", name);
    if (nd == 0 || nd > LB_MAX_DIMS) return ts_fail(err, errlen, "input %s: 1..%d dimensions, not %zu", name, LB_MAX_DIMS, nd);
    lb_input *in = &m->in[m->n_in];
    snprintf(in->name, sizeof in->name, "%s", name);
    in->dt = dt;
    in->n_dims = nd;
    for (size_t i = 0; i < nd; i++) {
        /* a variable dimension past the first is not a batch: one element there */
        int64_t d = dims[i] < 0 ? (i == 0 ? -1 : 1) : dims[i];
        if (d == 0 || d > 1000000) return ts_fail(err, errlen, "input %s: dimension %zu is %lld", name, i, (long long)d);
        in->dims[i] = d;
    }
    m->n_in++;
    return 0;
}

int lb_input_parse(lb_model *m, const char *spec, char *err, size_t errlen)
{
    char buf[256];
    snprintf(buf, sizeof buf, "%s", spec);
    char *c1 = strchr(buf, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
    if (!c1 || !c2) return ts_fail(err, errlen, "--input: '%.80s' is not NAME:DTYPE:D0,D1,...", spec);
    *c1 = *c2 = '\0';
    int64_t dims[LB_MAX_DIMS];
    size_t nd = 0;
    char *save = NULL;
    for (char *t = strtok_r(c2 + 1, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        char *end;
        errno = 0;
        long long v = strtoll(t, &end, 10);
        if (end == t || *end || errno || (v < 1 && !(v == -1 && nd == 0)) || nd == LB_MAX_DIMS)
            return ts_fail(err, errlen, "--input: '%.80s': dimensions are integers >= 1 (-1 first: the batch)", spec);
        dims[nd++] = v;
    }
    if (add_input(m, buf, dtype_parse(c1 + 1), dims, nd, err, errlen) != 0) {
        char msg[200];
        snprintf(msg, sizeof msg, "%s", err);
        return ts_fail(err, errlen, "--input: %s", msg);
    }
    return 0;
}

/* Reads the inputs from a metadata reply body (JSON). 0 or -1 with a message. */
static int lb_from_metadata(lb_model *m, const char *text, size_t len, char *err, size_t errlen)
{
    json_error_t je;
    json_t *root = json_loadb(text, len, 0, &je);
    int rc = -1;
    json_t *inputs = root ? json_object_get(root, "inputs") : NULL;
    if (!json_is_array(inputs) || json_array_size(inputs) == 0) {
        ts_fail(err, errlen, "the metadata has no \"inputs\" list");
        goto out;
    }
    size_t i;
    json_t *in;
    json_array_foreach(inputs, i, in) {
        const char *name = json_string_value(json_object_get(in, "name"));
        const char *dt = json_string_value(json_object_get(in, "datatype"));
        json_t *shape = json_object_get(in, "shape");
        if (!name || !dt || !json_is_array(shape)) {
            ts_fail(err, errlen, "metadata input %zu lacks name, datatype or shape", i);
            goto out;
        }
        int64_t dims[LB_MAX_DIMS];
        size_t nd = json_array_size(shape), k;
        if (nd > LB_MAX_DIMS) {
            ts_fail(err, errlen, "metadata input %.40s: more than %d dimensions", name, LB_MAX_DIMS);
            goto out;
        }
        json_t *d;
        json_array_foreach(shape, k, d) {
            if (!json_is_integer(d)) {
                ts_fail(err, errlen, "metadata input %.40s: a dimension is not an integer", name);
                goto out;
            }
            dims[k] = json_integer_value(d);
        }
        if (add_input(m, name, dtype_parse(dt), dims, nd, err, errlen) != 0) goto out;
    }
    rc = 0;
out:
    json_decref(root);
    return rc;
}

int lb_parse_url(const char *v, char *host_out, size_t host_cap, char *port_out, size_t port_cap, char *err,
                 size_t errlen)
{
    if (strncmp(v, "http://", 7) != 0)
        return ts_fail(err, errlen, "--url: '%.80s' is not http://HOST:PORT (no TLS: aim at the plain port)", v);
    const char *h = v + 7;
    size_t n = strcspn(h, "/");
    if (h[n] && strcmp(h + n, "/") != 0)
        return ts_fail(err, errlen, "--url: '%.80s' has a path; the paths are KServe's, give http://HOST:PORT", v);
    char hp[300];
    if (n == 0 || n >= sizeof hp) goto bad;
    memcpy(hp, h, n);
    hp[n] = '\0';
    char *colon = strrchr(hp, ':');
    char *close = strrchr(hp, ']');
    if (colon && close && colon < close) colon = NULL; /* [v6] without a port */
    const char *port = "80";
    if (colon) {
        *colon = '\0';
        port = colon + 1;
        char *end;
        long p = strtol(port, &end, 10);
        if (end == port || *end || p < 1 || p > 65535) goto bad;
    }
    char *host = hp;
    if (host[0] == '[') {
        size_t l = strlen(host);
        if (l < 3 || host[l - 1] != ']') goto bad;
        host[l - 1] = '\0';
        host++;
    }
    if (!*host || strlen(host) >= host_cap || strlen(port) >= port_cap) goto bad;
    memcpy(host_out, host, strlen(host) + 1); /* length checked above */
    memcpy(port_out, port, strlen(port) + 1);
    return 0;
bad:
    return ts_fail(err, errlen, "--url: '%.80s' is not http://HOST:PORT", v);
}

/* What lb_http collects of one exchange: the head re-written as lines, then the body. */
typedef struct {
    struct event_base *base;
    char *buf;
    size_t len, cap, max; /* max: reply_max; the bytes must stay below it */
    size_t body_off;
    bool over;
    int status;
    h1cli_outcome outcome;
    bool ended;
} lb_xfer;

static int xfer_put(lb_xfer *x, const void *p, size_t n)
{
    if (x->len + n + 1 >= x->max) {
        x->over = true;
        return -1;
    }
    if (x->len + n + 1 > x->cap) {
        size_t cap = x->cap ? x->cap : 4096;
        while (cap < x->len + n + 1) cap *= 2;
        if (cap > x->max) cap = x->max;
        char *nb = realloc(x->buf, cap);
        if (!nb) {
            x->over = true;
            return -1;
        }
        x->buf = nb;
        x->cap = cap;
    }
    memcpy(x->buf + x->len, p, n);
    x->len += n;
    x->buf[x->len] = '\0';
    return 0;
}

/* The head as "HTTP/1.1 NNN\r\n" and "Name: value\r\n" lines, NUL-ended (lb_reply_header
 * reads it), then the body after the NUL. */
static int xfer_head(h1cli_req *q, void *arg)
{
    lb_xfer *x = arg;
    char line[64];
    x->status = h1cli_resp_status(q);
    int n = snprintf(line, sizeof line, "HTTP/1.1 %d\r\n", x->status);
    if (xfer_put(x, line, (size_t)n) != 0) return -1;
    for (size_t i = 0; i < h1cli_resp_nheaders(q); i++) {
        const char *name, *value;
        h1cli_resp_header_at(q, i, &name, &value);
        if (xfer_put(x, name, strlen(name)) || xfer_put(x, ": ", 2) || xfer_put(x, value, strlen(value)) ||
            xfer_put(x, "\r\n", 2))
            return -1;
    }
    if (xfer_put(x, "", 1) != 0) return -1; /* the NUL that ends the head */
    x->body_off = x->len;
    return 0;
}

static void xfer_body(h1cli_req *q, const uint8_t *data, size_t len, void *arg)
{
    lb_xfer *x = arg;
    if (xfer_put(x, data, len) == 0) return;
    h1cli_cancel(q); /* over reply_max: nothing more is read */
    x->ended = true;
    event_base_loopbreak(x->base);
}

static void xfer_end(h1cli_req *q, h1cli_outcome o, void *arg)
{
    (void)q;
    lb_xfer *x = arg;
    x->outcome = o;
    x->ended = true;
    event_base_loopbreak(x->base);
}

int lb_http(const char *host, const char *port, const char *method, const char *path, const char *headers,
            const void *body, size_t body_len, size_t reply_max, double timeout_s, lb_reply *out, char *err,
            size_t errlen)
{
    memset(out, 0, sizeof *out);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *ai = NULL;
    int g = getaddrinfo(host, port, &hints, &ai);
    if (g != 0) return ts_fail(err, errlen, "%s: %s", host, gai_strerror(g));
    char addr[INET6_ADDRSTRLEN];
    g = getnameinfo(ai->ai_addr, ai->ai_addrlen, addr, sizeof addr, NULL, 0, NI_NUMERICHOST);
    freeaddrinfo(ai);
    if (g != 0) return ts_fail(err, errlen, "%s: %s", host, gai_strerror(g));
    lb_xfer x = {.max = reply_max, .outcome = H1CLI_ECLOSED};
    h1cli_pool *pool = NULL;
    int rc = -1;
    /* the caller's header lines ("Name: value\r\n" each), split for h1cli */
    char hbuf[4096];
    h1cli_header hd[128]; /* lines of at least 4 bytes in under 4 KiB: room for any real head */
    size_t nh = 0;
    if (headers && strlen(headers) >= sizeof hbuf) return ts_fail(err, errlen, "the request head is over %zu bytes", sizeof hbuf);
    snprintf(hbuf, sizeof hbuf, "%s", headers ? headers : "");
    for (char *l = hbuf; *l;) {
        char *eol = strstr(l, "\r\n"), *colon = strchr(l, ':');
        if (!eol || !colon || colon > eol || nh == sizeof hd / sizeof hd[0])
            return ts_fail(err, errlen, "a request header line is not 'Name: value' CRLF");
        *eol = '\0';
        *colon = '\0';
        char *v = colon + 1;
        while (*v == ' ') v++;
        hd[nh++] = (h1cli_header){l, v};
        l = eol + 2;
    }
    x.base = event_base_new();
    h1cli_limits lim = {.idle_cap = 0, .max_header_bytes = 64 * 1024, .max_headers = 200};
    pool = x.base ? h1cli_pool_create(x.base, addr, (unsigned)strtoul(port, NULL, 10), &lim) : NULL;
    if (!pool) {
        ts_fail(err, errlen, "out of memory");
        goto out;
    }
    h1cli_request rq = {.method = method, .target = path, .headers = hd, .nheaders = nh, .body = body,
                        .body_len = body ? body_len : 0, .timeout_s = timeout_s};
    static const h1cli_callbacks cb = {.on_head = xfer_head, .on_body = xfer_body, .on_end = xfer_end};
    h1cli_req *q;
    if (h1cli_send(pool, &rq, &cb, &x, &q, err, errlen) != 0) goto out;
    while (!x.ended)
        if (event_base_loop(x.base, EVLOOP_ONCE) < 0) break;
    if (x.over) {
        ts_fail(err, errlen, "the reply is over %zu bytes", reply_max);
        goto out;
    }
    if (x.outcome == H1CLI_ECONNECT) {
        ts_fail(err, errlen, "connect to %s:%s: %s", host, port, h1cli_outcome_name(x.outcome));
        goto out;
    }
    if (x.outcome == H1CLI_ETIMEOUT) {
        ts_fail(err, errlen, "no complete reply within %g s", timeout_s);
        goto out;
    }
    if (x.outcome != H1CLI_COMPLETE) {
        ts_fail(err, errlen, "no HTTP reply (%s)", h1cli_outcome_name(x.outcome));
        goto out;
    }
    out->status = x.status;
    out->raw = x.buf;
    out->body = x.buf + x.body_off;
    out->len = x.len - x.body_off;
    x.buf = NULL;
    rc = 0;
out:
    if (pool) h1cli_pool_free(pool);
    if (x.base) event_base_free(x.base);
    free(x.buf);
    return rc;
}

bool lb_reply_header(const lb_reply *r, const char *name, char *buf, size_t cap)
{
    size_t nl = strlen(name);
    for (const char *l = r->raw ? strstr(r->raw, "\r\n") : NULL; l; l = strstr(l + 2, "\r\n")) {
        if (strncasecmp(l + 2, name, nl) != 0 || l[2 + nl] != ':') continue;
        const char *v = l + 3 + nl;
        while (*v == ' ' || *v == '\t') v++;
        size_t vl = strcspn(v, "\r");
        if (vl >= cap) vl = cap - 1;
        memcpy(buf, v, vl);
        buf[vl] = '\0';
        return true;
    }
    return false;
}

void lb_reply_free(lb_reply *r)
{
    free(r->raw);
    r->raw = NULL;
    r->body = NULL;
}

int lb_fetch(lb_model *m, const char *host, const char *port, const char *model, double timeout_s, char *err,
             size_t errlen)
{
    char path[160], msg[300];
    snprintf(path, sizeof path, "/v2/models/%s", model);
    lb_reply r;
    if (lb_http(host, port, "GET", path, NULL, NULL, 0, LB_META_MAX, timeout_s, &r, msg, sizeof msg) != 0)
        return ts_fail(err, errlen, "GET %s: %s", path, msg);
    int rc = -1;
    if (r.status != 200) {
        ts_fail(err, errlen, "GET %s: status %d: %.200s", path, r.status, r.body);
        goto out;
    }
    /* chunked metadata is not expected from a KServe server; jansson refuses it loudly */
    if (lb_from_metadata(m, r.body, r.len, msg, sizeof msg) != 0) {
        ts_fail(err, errlen, "GET %s: %s", path, msg);
        goto out;
    }
    rc = 0;
out:
    lb_reply_free(&r);
    return rc;
}

static size_t row_elems(const lb_input *in)
{
    size_t e = 1;
    for (size_t d = in->dims[0] < 0 ? 1 : 0; d < in->n_dims; d++) e *= (size_t)in->dims[d];
    return e;
}

static bool batched(const lb_model *m) { return m->n_in > 0 && m->in[0].dims[0] < 0; }

/* The rows a request of this size sends (size for a batch model, else 1). */
static uint32_t lb_rows(const lb_model *m, uint32_t size)
{
    uint32_t r = batched(m) ? size : 1;
    return r > m->rows_max ? m->rows_max : r;
}

/* One element: its binary bytes into b (returns how many) and its JSON text into t. */
static size_t element(ts_dtype dt, route_rng *rng, uint8_t *b, char *t, size_t tcap)
{
    double u = route_rng_uniform(rng);
    int64_t iv = (int64_t)(u * 10); /* small integers: valid ids, indexes and counts */
    size_t sz = dtype_size(dt);
    switch (dt) {
    case DT_FP32: {
        float f = (float)u;
        memcpy(b, &f, 4);
        snprintf(t, tcap, "%.9g", (double)f);
        return 4;
    }
    case DT_FP64:
        memcpy(b, &u, 8);
        snprintf(t, tcap, "%.17g", u);
        return 8;
    case DT_FP16: {
        uint16_t h = dtype_f32_to_f16((float)u);
        memcpy(b, &h, 2);
        snprintf(t, tcap, "%.9g", (double)dtype_f16_to_f32(h));
        return 2;
    }
    case DT_BF16: {
        uint16_t h = dtype_f32_to_bf16((float)u);
        memcpy(b, &h, 2);
        snprintf(t, tcap, "%.9g", (double)dtype_bf16_to_f32(h));
        return 2;
    }
    case DT_BOOL:
        b[0] = (uint8_t)(iv & 1);
        snprintf(t, tcap, "%s", b[0] ? "true" : "false");
        return 1;
    case DT_BYTES: /* one letter, behind its 4-byte length */
        b[0] = 1, b[1] = b[2] = b[3] = 0, b[4] = (uint8_t)('a' + iv);
        snprintf(t, tcap, "\"%c\"", (char)b[4]);
        return 5;
    default: /* the integer types, little-endian */
        for (size_t k = 0; k < sz; k++) b[k] = k == 0 ? (uint8_t)iv : 0;
        snprintf(t, tcap, "%lld", (long long)iv);
        return sz;
    }
}

int lb_build(lb_model *m, uint32_t rows_max, uint64_t seed, char *err, size_t errlen)
{
    route_rng rng;
    route_rng_seed(&rng, seed);
    m->rows_max = batched(m) ? rows_max : 1;
    double total = 0;
    for (size_t i = 0; i < m->n_in; i++) /* a JSON element is at most ~26 bytes */
        total += (double)row_elems(&m->in[i]) * (double)m->rows_max * (8.0 + 26.0);
    if (total > LB_MAX_DATA_BYTES)
        return ts_fail(err, errlen, "the inputs for %u rows would take over %u MiB: lower --size-max or the trace's sizes",
                    m->rows_max, LB_MAX_DATA_BYTES >> 20);
    for (size_t i = 0; i < m->n_in; i++) {
        const lb_input *in = &m->in[i];
        size_t per_row = row_elems(in), n = per_row * m->rows_max;
        size_t esz = in->dt == DT_BYTES ? 5 : dtype_size(in->dt);
        m->row_bytes[i] = per_row * esz;
        m->bin[i] = malloc(n * esz + 1);
        m->json[i] = malloc(n * 27 + 1);
        m->json_off[i] = malloc((m->rows_max + 1) * sizeof(size_t));
        if (!m->bin[i] || !m->json[i] || !m->json_off[i]) return ts_fail(err, errlen, "out of memory for the inputs");
        size_t bo = 0, jo = 0;
        m->json_off[i][0] = 0;
        for (uint32_t r = 0; r < m->rows_max; r++) {
            for (size_t e = 0; e < per_row; e++) {
                char t[32];
                bo += element(in->dt, &rng, m->bin[i] + bo, t, sizeof t);
                size_t tl = strlen(t);
                memcpy(m->json[i] + jo, t, tl);
                jo += tl;
                m->json[i][jo++] = ',';
            }
            m->json_off[i][r + 1] = jo;
        }
    }
    return 0;
}

void lb_free(lb_model *m)
{
    for (size_t i = 0; i < LB_MAX_INPUTS; i++) {
        free(m->bin[i]);
        free(m->json[i]);
        free(m->json_off[i]);
        m->bin[i] = NULL;
        m->json[i] = NULL;
        m->json_off[i] = NULL;
    }
}

/* Appends text to the head and a part that points at it. */
static int text_part(lb_body *b, size_t *used, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int text_part(lb_body *b, size_t *used, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(b->head + *used, sizeof b->head - *used, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof b->head - *used || b->n_part == LB_MAX_PARTS) return -1;
    b->part[b->n_part++] = (lb_ref){b->head + *used, (size_t)n};
    *used += (size_t)n;
    b->total += (size_t)n;
    return 0;
}

static void data_part(lb_body *b, const void *p, size_t n)
{
    b->part[b->n_part++] = (lb_ref){p, n};
    b->total += n;
}

/* "[rows,d1,d2]" */
static void shape_text(const lb_input *in, uint32_t rows, char *out, size_t cap)
{
    size_t o = 0;
    for (size_t d = 0; d < in->n_dims && o < cap; d++)
        o += (size_t)snprintf(out + o, cap - o, "%s%lld", d ? "," : "[",
                              (long long)(in->dims[d] < 0 ? (int64_t)rows : in->dims[d]));
    if (o < cap) snprintf(out + o, cap - o, "]");
}

int lb_body_make(const lb_model *m, uint32_t size, bool binary, lb_body *b)
{
    uint32_t rows = lb_rows(m, size);
    size_t used = 0;
    b->n_part = 0;
    b->total = 0;
    char shape[200];
    if (binary) {
        /* the JSON header is one part, the tensors follow in inputs order */
        size_t start = used;
        for (size_t i = 0; i < m->n_in; i++) {
            shape_text(&m->in[i], rows, shape, sizeof shape);
            int n = snprintf(b->head + used, sizeof b->head - used,
                             "%s{\"name\":\"%s\",\"datatype\":\"%s\",\"shape\":%s,\"parameters\":{\"binary_data_size\":%zu}}",
                             i ? "," : "{\"inputs\":[", m->in[i].name, dtype_name(m->in[i].dt), shape,
                             m->row_bytes[i] * rows);
            if (n < 0 || (size_t)n >= sizeof b->head - used) return -1;
            used += (size_t)n;
        }
        int n = snprintf(b->head + used, sizeof b->head - used, "],\"parameters\":{\"binary_data_output\":true}}");
        if (n < 0 || (size_t)n >= sizeof b->head - used) return -1;
        used += (size_t)n;
        b->header_len = (long)(used - start);
        data_part(b, b->head + start, used - start);
        for (size_t i = 0; i < m->n_in; i++) data_part(b, m->bin[i], m->row_bytes[i] * rows);
        return 0;
    }
    b->header_len = -1;
    for (size_t i = 0; i < m->n_in; i++) {
        shape_text(&m->in[i], rows, shape, sizeof shape);
        if (text_part(b, &used, "%s{\"name\":\"%s\",\"datatype\":\"%s\",\"shape\":%s,\"data\":[", i ? "]}," : "{\"inputs\":[",
                      m->in[i].name, dtype_name(m->in[i].dt), shape) != 0)
            return -1;
        data_part(b, m->json[i], m->json_off[i][rows] - 1); /* without the last comma */
    }
    return text_part(b, &used, "]}]}");
}
