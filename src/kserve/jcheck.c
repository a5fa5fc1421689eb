#include "jcheck.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

typedef struct {
    const unsigned char *base, *p, *end;
    char *err;
    size_t errlen;
    bool bad_shape; /* a shape error is in err; the scan goes on, a syntax error overrides it */
} jc;

/* ---- errors -------------------------------------------------------------------------- */

static size_t off(const jc *c, const unsigned char *at)
{
    return (size_t)(at - c->base);
}

static void syntax_err(jc *c, const unsigned char *at, const char *what)
{
    if (c->err && c->errlen) snprintf(c->err, c->errlen, "invalid JSON at byte %zu: %s", off(c, at), what);
}

__attribute__((format(printf, 2, 3))) static void shape_err(jc *c, const char *fmt, ...)
{
    if (c->bad_shape) return; /* the first one is reported */
    c->bad_shape = true;
    if (!c->err || !c->errlen) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->err, c->errlen, fmt, ap);
    va_end(ap);
}

/* ---- tokens (each returns the byte after the token, or NULL after a syntax_err) ------ */

#if defined(__GNUC__) && defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define JC_SWAR 1 /* eight bytes at a time; the lowest flagged byte is always exact */
#define ONES 0x0101010101010101u
#define HIGH 0x8080808080808080u
#endif

static inline bool is_digit(unsigned char b)
{
    return (unsigned)(b - '0') < 10;
}

static inline const unsigned char *ws(const unsigned char *p, const unsigned char *end)
{
    const uint64_t set = 1ull << ' ' | 1ull << '\t' | 1ull << '\n' | 1ull << '\r';
    while (p < end && *p <= ' ' && (set >> *p & 1)) p++;
    return p;
}

static inline const unsigned char *digits(const unsigned char *p, const unsigned char *end)
{
#ifdef JC_SWAR
    while (end - p >= 8) {
        uint64_t x;
        memcpy(&x, p, 8);
        /* below '0': the subtraction wraps; above '9': the addition passes 0x7f */
        uint64_t m = ((x - ONES * '0') | (x + ONES * (0x7f - '9')) | x) & HIGH;
        if (m) return p + (__builtin_ctzll(m) >> 3);
        p += 8;
    }
#endif
    while (p < end && is_digit(*p)) p++;
    return p;
}

/* String bytes that need no attention: not '"', '\\', a control character or non-ASCII. */
static inline const unsigned char *plain(const unsigned char *p, const unsigned char *end)
{
#ifdef JC_SWAR
    while (end - p >= 8) {
        uint64_t x, q, b;
        memcpy(&x, p, 8);
        q = x ^ ONES * '"';
        b = x ^ ONES * '\\';
        uint64_t m = (x | ((x - ONES * 0x20) & ~x) | ((q - ONES) & ~q) | ((b - ONES) & ~b)) & HIGH;
        if (m) return p + (__builtin_ctzll(m) >> 3);
        p += 8;
    }
#endif
    while (p < end && *p >= 0x20 && *p < 0x80 && *p != '"' && *p != '\\') p++;
    return p;
}

static const unsigned char *truncated(jc *c)
{
    syntax_err(c, c->end, "unexpected end of input");
    return NULL;
}

static const unsigned char *literal(jc *c, const unsigned char *p, const char *word, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (p + i == c->end) return truncated(c);
        if (p[i] != (unsigned char)word[i]) {
            syntax_err(c, p, "invalid literal");
            return NULL;
        }
    }
    return p + n;
}

static inline const unsigned char *number(jc *c, const unsigned char *p)
{
    const unsigned char *end = c->end;
    p += *p == '-'; /* without a branch: signs are random in real data */
    if (p == end) return truncated(c);
    if (*p == 'I') return literal(c, p, "Infinity", 8); /* after a '-' */
    if (*p == '0') {
        p++;
        if (p < end && is_digit(*p)) {
            syntax_err(c, p - 1, "leading zero in a number");
            return NULL;
        }
    } else if (is_digit(*p)) {
        p = digits(p + 1, end);
    } else {
        syntax_err(c, p, "expected a digit");
        return NULL;
    }
    if (p < end && *p == '.') {
        if (++p == end) return truncated(c);
        if (!is_digit(*p)) {
            syntax_err(c, p, "expected a digit after '.'");
            return NULL;
        }
        p = digits(p + 1, end);
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < end && (*p == '+' || *p == '-')) p++;
        if (p == end) return truncated(c);
        if (!is_digit(*p)) {
            syntax_err(c, p, "expected a digit in the exponent");
            return NULL;
        }
        p = digits(p + 1, end);
    }
    return p;
}

/* The value of the 4 hex digits at p, -1 if one is not a hex digit, -2 if the text ends. */
static long hex4(const unsigned char *p, const unsigned char *end)
{
    long v = 0;
    for (int i = 0; i < 4; i++, p++) {
        if (p == end) return -2;
        unsigned char b = *p;
        int d = is_digit(b) ? b - '0' : (b | 0x20) >= 'a' && (b | 0x20) <= 'f' ? (b | 0x20) - 'a' + 10 : -1;
        if (d < 0) return -1;
        v = v << 4 | d;
    }
    return v;
}

/* p at the backslash. */
static const unsigned char *escape(jc *c, const unsigned char *p, bool *nul)
{
    const unsigned char *end = c->end;
    if (end - p < 2) return truncated(c);
    switch (p[1]) {
    case '"': case '\\': case '/': case 'b': case 'f': case 'n': case 'r': case 't':
        return p + 2;
    case 'u':
        break;
    default:
        syntax_err(c, p, "invalid escape in a string");
        return NULL;
    }
    long u = hex4(p + 2, end);
    if (u == -2) return truncated(c);
    if (u < 0) {
        syntax_err(c, p, "invalid \\u escape (four hex digits expected)");
        return NULL;
    }
    if (u == 0) *nul = true;
    if (u < 0xD800 || u > 0xDFFF) return p + 6;
    if (u <= 0xDBFF) { /* a high surrogate: a low one must follow */
        const unsigned char *q = p + 6;
        if (end - q < 2) {
            if (q == end || *q == '\\') return truncated(c);
        } else if (q[0] == '\\' && q[1] == 'u') {
            long lo = hex4(q + 2, end);
            if (lo == -2) return truncated(c);
            if (lo >= 0xDC00 && lo <= 0xDFFF) return q + 6;
        }
    }
    syntax_err(c, p, "unpaired UTF-16 surrogate in a \\u escape");
    return NULL;
}

/* p at a byte >= 0x80 (RFC 3629's table of well-formed sequences). */
static const unsigned char *utf8(jc *c, const unsigned char *p)
{
    unsigned char b = *p, lo = 0x80, hi = 0xBF;
    int n;
    if (b >= 0xC2 && b <= 0xDF) {
        n = 1;
    } else if (b >= 0xE0 && b <= 0xEF) {
        n = 2;
        if (b == 0xE0) lo = 0xA0;      /* overlong */
        else if (b == 0xED) hi = 0x9F; /* a surrogate */
    } else if (b >= 0xF0 && b <= 0xF4) {
        n = 3;
        if (b == 0xF0) lo = 0x90;      /* overlong */
        else if (b == 0xF4) hi = 0x8F; /* past U+10FFFF */
    } else {
        syntax_err(c, p, "invalid UTF-8");
        return NULL;
    }
    for (int i = 1; i <= n; i++) {
        if (p + i == c->end) return truncated(c);
        if (p[i] < lo || p[i] > hi) {
            syntax_err(c, p, "invalid UTF-8");
            return NULL;
        }
        lo = 0x80;
        hi = 0xBF;
    }
    return p + n + 1;
}

/* p at the opening quote; *nul is set if the string holds a \u0000. */
static const unsigned char *string(jc *c, const unsigned char *p, bool *nul)
{
    const unsigned char *end = c->end;
    p++;
    for (;;) {
        p = plain(p, end);
        if (p == end) return truncated(c);
        if (*p == '"') return p + 1;
        if (*p == '\\') p = escape(c, p, nul);
        else if (*p < 0x20) {
            syntax_err(c, p, "control character in a string");
            return NULL;
        } else p = utf8(c, p);
        if (!p) return NULL;
    }
}

/* An object key and its ':' (p after whitespace); [*k, *k + *kn) is the key's raw text. */
static const unsigned char *key(jc *c, const unsigned char *p, const unsigned char **k, size_t *kn)
{
    if (p == c->end) return truncated(c);
    if (*p != '"') {
        syntax_err(c, p, "expected a string (an object key)");
        return NULL;
    }
    bool nul = false;
    const unsigned char *q = string(c, p, &nul);
    if (!q) return NULL;
    if (k) {
        *k = p + 1;
        *kn = (size_t)(q - 1 - (p + 1));
    }
    q = ws(q, c->end);
    if (q == c->end) return truncated(c);
    if (*q != ':') {
        syntax_err(c, q, "expected ':' after an object key");
        return NULL;
    }
    return q + 1;
}

/* ---- any value ----------------------------------------------------------------------- */

/* Scans one value at c->p (whitespace before it is skipped) inside depth open containers
 * and leaves c->p just past it. Containers are tracked on a bounded stack, not recursion. */
static int value(jc *c, unsigned depth)
{
    unsigned char close[JCHECK_MAX_DEPTH]; /* ']' or '}' for each container opened here */
    unsigned n = 0;
    const unsigned char *p = c->p, *end = c->end;
    bool nul;
    for (;;) {
        p = ws(p, end);
        if (p == end) {
            truncated(c);
            return -1;
        }
        switch (*p) {
        case '[':
        case '{':
            if (depth + n >= JCHECK_MAX_DEPTH) {
                syntax_err(c, p, "nested deeper than 64");
                return -1;
            }
            close[n++] = *p == '[' ? ']' : '}';
            p = ws(p + 1, end);
            if (p < end && *p == close[n - 1]) {
                p++;
                n--;
                break;
            }
            if (close[n - 1] == '}' && !(p = key(c, p, NULL, NULL))) return -1;
            continue; /* to the first element */
        case '"':
            p = string(c, p, &nul);
            break;
        case '-': case '0': case '1': case '2': case '3': case '4':
        case '5': case '6': case '7': case '8': case '9':
            p = number(c, p);
            break;
        case 't': p = literal(c, p, "true", 4); break;
        case 'f': p = literal(c, p, "false", 5); break;
        case 'n': p = literal(c, p, "null", 4); break;
        case 'N': p = literal(c, p, "NaN", 3); break;
        case 'I': p = literal(c, p, "Infinity", 8); break;
        default:
            syntax_err(c, p, "expected a value");
            return -1;
        }
        if (!p) return -1;
        /* after a value: close containers until a ',' */
        for (;;) {
            if (n == 0) {
                c->p = p;
                return 0;
            }
            p = ws(p, end);
            if (p == end) {
                truncated(c);
                return -1;
            }
            if (*p == ',') {
                p = ws(p + 1, end);
                if (close[n - 1] == '}' && !(p = key(c, p, NULL, NULL))) return -1;
                break;
            }
            if (*p != close[n - 1]) {
                syntax_err(c, p, close[n - 1] == ']' ? "expected ',' or ']' after an array element"
                                                     : "expected ',' or '}' after an object member");
                return -1;
            }
            p++;
            n--;
        }
    }
}

static int finish(jc *c)
{
    c->p = ws(c->p, c->end);
    if (c->p == c->end) return 0;
    syntax_err(c, c->p, "unexpected data after the JSON value");
    return -1;
}

int jcheck_syntax(const char *json, size_t len, char *err, size_t errlen)
{
    if (!json) json = "", len = 0;
    const unsigned char *b = (const unsigned char *)json;
    jc c = {b, b, b + len, err, errlen, false};
    if (value(&c, 0) || finish(&c)) return -1;
    return 0;
}

/* ---- the request's shape -------------------------------------------------------------- */

/* The schema walk moves c->p over containers whose bytes it must see; everything below
 * them goes through value(). Container helpers: enter() consumes the opening bracket and
 * step() what follows an element; both return 1 (an element follows, c->p at it), 0 (the
 * container closed) or -1 (a syntax error). */
static int enter(jc *c, unsigned char close)
{
    c->p = ws(c->p + 1, c->end);
    if (c->p == c->end || *c->p != close) return 1;
    c->p++;
    return 0;
}

static int step(jc *c, unsigned char close)
{
    const unsigned char *p = ws(c->p, c->end);
    if (p == c->end) {
        truncated(c);
        return -1;
    }
    if (*p == close) {
        c->p = p + 1;
        return 0;
    }
    if (*p != ',') {
        syntax_err(c, p, close == ']' ? "expected ',' or ']' after an array element"
                                      : "expected ',' or '}' after an object member");
        return -1;
    }
    c->p = ws(p + 1, c->end);
    return 1;
}

/* An object member's key; c->p goes to its value. */
static int member(jc *c, const unsigned char **k, size_t *kn)
{
    const unsigned char *p = key(c, c->p, k, kn);
    if (!p) return -1;
    c->p = ws(p, c->end);
    return 0;
}

static bool key_is(const unsigned char *k, size_t kn, const char *name)
{
    return kn == strlen(name) && memcmp(k, name, kn) == 0;
}

static bool at(const jc *c, unsigned char b)
{
    return c->p < c->end && *c->p == b;
}

/* "inputs[2].name", or "\"id\"" at the top level. */
/* Where a member is, for a message: inputs[i] / outputs[i] (list set), or the top level
 * (list NULL). Written out only when there is a message to write: a router checks every
 * request's body with this, and a valid one should cost no formatting. */
typedef struct {
    const char *list;
    size_t i;
} jpath;

static void io_path(char *out, size_t n, const jpath *jp) { snprintf(out, n, "%s[%zu]", jp->list, jp->i); }

static void member_path(char *out, size_t n, const jpath *jp, const char *name)
{
    if (jp->list) snprintf(out, n, "%s[%zu].%s", jp->list, jp->i, name);
    else snprintf(out, n, "\"%s\"", name);
}

static int string_member(jc *c, unsigned depth, const jpath *jp, const char *name)
{
    char what[64];
    const unsigned char *start = c->p;
    if (!at(c, '"')) {
        member_path(what, sizeof what, jp, name);
        shape_err(c, "%s must be a string (byte %zu)", what, off(c, start));
        return value(c, depth);
    }
    bool nul = false;
    if (!(c->p = string(c, c->p, &nul))) return -1;
    if (nul) {
        member_path(what, sizeof what, jp, name);
        shape_err(c, "%s must not contain \\u0000 (byte %zu)", what, off(c, start));
    }
    return 0;
}

static int object_member(jc *c, unsigned depth, const jpath *jp, const char *name)
{
    if (!at(c, '{')) {
        char what[64];
        member_path(what, sizeof what, jp, name);
        shape_err(c, "%s must be an object (byte %zu)", what, off(c, c->p));
    }
    return value(c, depth);
}

/* Whether [p, end) (a valid JSON value) is an integer in 0..INT64_MAX; "-0" is one. */
static bool nonneg_int(const unsigned char *p, const unsigned char *end)
{
    size_t n = (size_t)(end - p);
    if (n == 2 && p[0] == '-' && p[1] == '0') return true;
    for (size_t i = 0; i < n; i++)
        if (!is_digit(p[i])) return false;
    return n > 0 && (n < 19 || (n == 19 && memcmp(p, "9223372036854775807", 19) <= 0));
}

static int shape_member(jc *c, const jpath *jp)
{
    char path[48];
    const unsigned char *start = c->p;
    if (!at(c, '[')) {
        io_path(path, sizeof path, jp);
        shape_err(c, "%s.shape must be an array of non-negative integers (byte %zu)", path, off(c, start));
        return value(c, 3);
    }
    int more = enter(c, ']');
    for (size_t j = 0; more == 1; j++) {
        const unsigned char *v = c->p;
        if (value(c, 4)) return -1;
        if (!nonneg_int(v, c->p)) {
            io_path(path, sizeof path, jp);
            shape_err(c, "%s.shape[%zu] must be a non-negative integer (byte %zu)", path, j, off(c, v));
        }
        more = step(c, ']');
    }
    return more;
}

/* inputs[i] (input) or outputs[i]; c->p at it, inside two containers. */
static int io_object(jc *c, const char *list, size_t i)
{
    bool input = list[0] == 'i';
    const jpath jp = {list, i};
    char path[48];
    const unsigned char *start = c->p;
    if (!at(c, '{')) {
        io_path(path, sizeof path, &jp);
        shape_err(c, "%s must be an object (byte %zu)", path, off(c, start));
        return value(c, 2);
    }
    bool name = false, datatype = false, shape = false;
    int more = enter(c, '}');
    while (more == 1) {
        const unsigned char *k;
        size_t kn;
        if (member(c, &k, &kn)) return -1;
        int rc;
        if (key_is(k, kn, "name")) {
            name = true;
            rc = string_member(c, 3, &jp, "name");
        } else if (input && key_is(k, kn, "datatype")) {
            datatype = true;
            rc = string_member(c, 3, &jp, "datatype");
        } else if (input && key_is(k, kn, "shape")) {
            shape = true;
            rc = shape_member(c, &jp);
        } else if (key_is(k, kn, "parameters")) {
            rc = object_member(c, 3, &jp, "parameters");
        } else {
            rc = value(c, 3);
        }
        if (rc) return -1;
        more = step(c, '}');
    }
    if (more < 0) return -1;
    const char *missing = !name ? "name" : !input ? NULL : !datatype ? "datatype" : !shape ? "shape" : NULL;
    if (missing) {
        io_path(path, sizeof path, &jp);
        shape_err(c, "%s: missing \"%s\" (object at byte %zu)", path, missing, off(c, start));
    }
    return 0;
}

/* "inputs" or "outputs"; c->p at the value, inside the top-level object. */
static int io_list(jc *c, const char *list)
{
    bool input = list[0] == 'i';
    const unsigned char *start = c->p;
    if (!at(c, '[')) {
        shape_err(c, input ? "\"%s\" must be a non-empty array (byte %zu)" : "\"%s\" must be an array (byte %zu)",
                  list, off(c, start));
        return value(c, 1);
    }
    int more = enter(c, ']');
    if (more == 0 && input) shape_err(c, "\"inputs\" must be a non-empty array (byte %zu)", off(c, start));
    for (size_t i = 0; more == 1; i++) {
        if (io_object(c, list, i)) return -1;
        more = step(c, ']');
    }
    return more < 0 ? -1 : 0;
}

static int request(jc *c)
{
    const jpath top = {NULL, 0};
    const unsigned char *start = c->p;
    bool inputs = false;
    int more = enter(c, '}');
    while (more == 1) {
        const unsigned char *k;
        size_t kn;
        if (member(c, &k, &kn)) return -1;
        int rc;
        if (key_is(k, kn, "inputs")) {
            inputs = true;
            rc = io_list(c, "inputs");
        } else if (key_is(k, kn, "outputs")) {
            rc = io_list(c, "outputs");
        } else if (key_is(k, kn, "id")) {
            rc = string_member(c, 1, &top, "id");
        } else if (key_is(k, kn, "parameters")) {
            rc = object_member(c, 1, &top, "parameters");
        } else {
            rc = value(c, 1);
        }
        if (rc) return -1;
        more = step(c, '}');
    }
    if (more < 0) return -1;
    if (!inputs) shape_err(c, "missing \"inputs\" (object at byte %zu)", off(c, start));
    return 0;
}

int jcheck_infer_request(const char *json, size_t len, char *err, size_t errlen)
{
    if (!json) json = "", len = 0;
    const unsigned char *b = (const unsigned char *)json;
    jc c = {b, b, b + len, err, errlen, false};
    c.p = ws(c.p, c.end);
    int rc;
    if (at(&c, '{')) {
        rc = request(&c);
    } else {
        if (c.p < c.end) shape_err(&c, "the request must be a JSON object (byte %zu)", off(&c, c.p));
        rc = value(&c, 0);
    }
    if (rc || finish(&c)) return -1;
    return c.bad_shape ? -1 : 0;
}
