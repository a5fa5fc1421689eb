/* The canonical form detection compares: the template after @huggingface/jinja's
 * whitespace control, each tag re-spelled token by token (see chat_int.h). It follows
 * that lexer (src/lexer.ts of @huggingface/jinja 0.5.11) step by step, so that two
 * templates with one canonical form are rendered the same by it. */
#include <string.h>

#include "chat_int.h"

/* Item markers: text items carry their length, tag contents hold no byte below 0x20
 * (string literals escape them), so the form cannot be read two ways. */
enum { CANON_TEXT = 1, CANON_STMT = 2, CANON_EXPR = 3 };

typedef struct {
    buf *out;
    buf txt;    /* text since the last tag (comments render nothing, so texts merge) */
    size_t seg; /* start of the current text token in txt: {%- strips only that one */
} canon;

static void canon_flush(canon *c)
{
    if (c->txt.len) {
        buf_printf(c->out, "%c%zu:", CANON_TEXT, c->txt.len);
        buf_put(c->out, c->txt.data, c->txt.len);
    }
    c->txt.len = 0;
    c->seg = 0;
}

/* the lexer's stripTrailingWhitespace: trimEnd of the last token when it is text */
static void canon_trim_end(canon *c)
{
    size_t n;
    while (c->txt.len > c->seg &&
           (n = chat_space_before((const char *)c->txt.data + c->seg, c->txt.len - c->seg)) > 0)
        c->txt.len -= n;
}

static size_t canon_skip_space(const char *p, size_t n, size_t i)
{
    size_t w;
    while (i < n && (w = chat_space_at(p + i, n - i)) > 0)
        i += w;
    return i;
}

/* preprocess(): one trailing newline dropped; lstrip_blocks (spaces and tabs from a
 * line's start to a {% or {# ... the regex is /^[ \t]*({[#%-])/gm); trim_blocks (the
 * newline right after %}, #} or -}). */
static void canon_pre(const char *src, size_t len, buf *pre)
{
    buf l;
    buf_init(&l, len + 1);
    if (len && src[len - 1] == '\n')
        len--;
    bool bol = true;
    for (size_t i = 0; i < len; i++) {
        if (bol) {
            size_t j = i;
            while (j < len && (src[j] == ' ' || src[j] == '\t'))
                j++;
            if (j + 1 < len && src[j] == '{' && memchr("#%-", src[j + 1], 3))
                i = j;
        }
        buf_putc(&l, src[i]);
        bol = src[i] == '\n' || src[i] == '\r';
    }
    const char *p = (const char *)l.data;
    for (size_t i = 0; i < l.len; i++) {
        buf_putc(pre, p[i]);
        if (p[i] == '}' && i > 0 && memchr("#%-", p[i - 1], 3) && i + 1 < l.len &&
            p[i + 1] == '\n')
            i++;
    }
    if (buf_failed(&l))
        pre->failed = true;
    buf_free(&l);
}

static int canon_hex(const char *p, size_t n, size_t i, size_t digits, unsigned *v)
{
    *v = 0;
    if (i + digits > n)
        return -1;
    for (size_t k = 0; k < digits; k++) {
        char c = p[i + k];
        unsigned d;
        if (c >= '0' && c <= '9')
            d = (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f')
            d = (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            d = (unsigned)(c - 'A' + 10);
        else
            return -1;
        *v = *v << 4 | d;
    }
    return 0;
}

static void canon_str_byte(buf *out, unsigned char b)
{
    if (b < 0x20)
        buf_printf(out, "\\x%02x", b);
    else {
        if (b == '\'' || b == '\\')
            buf_putc(out, '\\');
        buf_putc(out, (char)b);
    }
}

/* A string literal from its opening quote at p[i]: decoded as the lexer does, written
 * back in one spelling. Returns the index after the closing quote, or 0 on error. */
static size_t canon_string(const char *p, size_t n, size_t i, buf *out)
{
    char q = p[i++];
    buf_putc(out, '\'');
    for (;;) {
        if (i >= n)
            return 0;
        char c = p[i];
        if (c == q)
            break;
        if (c != '\\') {
            canon_str_byte(out, (unsigned char)c);
            i++;
            continue;
        }
        if (++i >= n)
            return 0;
        char e = p[i++];
        unsigned v;
        switch (e) {
        case 'n': canon_str_byte(out, '\n'); break;
        case 't': canon_str_byte(out, '\t'); break;
        case 'r': canon_str_byte(out, '\r'); break;
        case 'b': canon_str_byte(out, '\b'); break;
        case 'f': canon_str_byte(out, '\f'); break;
        case 'v': canon_str_byte(out, '\v'); break;
        case '\'': case '"': case '\\': canon_str_byte(out, (unsigned char)e); break;
        case 'x': case 'u': {
            size_t digits = e == 'x' ? 2 : 4;
            /* a UTF-16 unit: a surrogate alone has no UTF-8 spelling; no template we
             * render has one, so such a template simply stays unknown */
            if (canon_hex(p, n, i, digits, &v) || (v >= 0xd800 && v <= 0xdfff))
                return 0;
            i += digits;
            if (v < 0x80)
                canon_str_byte(out, (unsigned char)v);
            else if (v < 0x800) {
                buf_putc(out, (char)(0xc0 | v >> 6));
                buf_putc(out, (char)(0x80 | (v & 0x3f)));
            } else {
                buf_putc(out, (char)(0xe0 | v >> 12));
                buf_putc(out, (char)(0x80 | (v >> 6 & 0x3f)));
                buf_putc(out, (char)(0x80 | (v & 0x3f)));
            }
            break;
        }
        default:
            return 0;
        }
    }
    buf_putc(out, '\'');
    return i + 1;
}

static bool canon_word(unsigned char c)
{
    return c >= 0x80 || c == '_' || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') ||
           (c >= 'A' && c <= 'Z');
}

/* A tag from the character after {% or {{ (and its '-'); returns the index after the
 * closing %} or }}, or 0 on error. *strip_after: it closed with -%} or -}}. */
static size_t canon_tag(const char *p, size_t n, size_t i, bool stmt, buf *out,
                        bool *strip_after)
{
    int depth = 0;
    bool prev_word = false, gap = false;
    for (;;) {
        if (i >= n)
            return 0;
        size_t w = chat_space_at(p + i, n - i);
        if (w) {
            i += w;
            gap = true;
            continue;
        }
        if (i + 2 < n && p[i] == '-' && p[i + 2] == '}' &&
            ((stmt && p[i + 1] == '%') || (!stmt && p[i + 1] == '}'))) {
            *strip_after = true;
            return i + 3;
        }
        if (i + 1 < n && ((stmt && p[i] == '%' && p[i + 1] == '}') ||
                          (!stmt && depth == 0 && p[i] == '}' && p[i + 1] == '}'))) {
            *strip_after = false;
            return i + 2;
        }
        unsigned char c = (unsigned char)p[i];
        if (c == '\'' || c == '"') {
            i = canon_string(p, n, i, out);
            if (i == 0)
                return 0;
            prev_word = false;
        } else if (canon_word(c)) {
            if (prev_word && gap)
                buf_putc(out, ' ');
            buf_putc(out, (char)c);
            prev_word = true;
            i++;
        } else {
            if (c < 0x20)
                return 0;
            depth += c == '{' ? 1 : c == '}' ? -1 : 0;
            buf_putc(out, (char)c);
            prev_word = false;
            i++;
        }
        gap = false;
    }
}

int chat_canon(const char *src, size_t len, buf *out)
{
    int rc = -1;
    buf pre;
    buf_init(&pre, len + 1);
    canon c = {.out = out, .seg = 0};
    buf_init(&c.txt, len + 1);
    canon_pre(src, len, &pre);
    if (buf_failed(&pre))
        goto out;
    const char *p = (const char *)pre.data;
    size_t n = pre.len;
    for (size_t i = 0; i < n;) {
        if (!(p[i] == '{' && i + 1 < n && memchr("%{#", p[i + 1], 3))) {
            buf_putc(&c.txt, p[i++]);
            continue;
        }
        bool strip_after = false;
        if (p[i + 1] == '#') {
            i += 2;
            if (i < n && p[i] == '-') {
                canon_trim_end(&c);
                i++;
            }
            size_t k = i;
            while (k + 1 < n && !(p[k] == '#' && p[k + 1] == '}'))
                k++;
            if (k + 1 >= n)
                goto out;
            strip_after = k > i && p[k - 1] == '-';
            c.seg = c.txt.len;
            i = k + 2;
        } else {
            bool stmt = p[i + 1] == '%';
            i += 2;
            if (i < n && p[i] == '-') {
                canon_trim_end(&c);
                i++;
            }
            canon_flush(&c);
            buf_putc(out, stmt ? CANON_STMT : CANON_EXPR);
            i = canon_tag(p, n, i, stmt, out, &strip_after);
            if (i == 0)
                goto out;
        }
        if (strip_after)
            i = canon_skip_space(p, n, i);
    }
    canon_flush(&c);
    rc = buf_failed(out) || buf_failed(&c.txt) ? -1 : 0;
out:
    buf_free(&pre);
    buf_free(&c.txt);
    return rc;
}
