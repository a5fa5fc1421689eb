#include "buf.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void buf_init(buf *b, size_t limit)
{
    memset(b, 0, sizeof *b);
    b->limit = limit;
}

void buf_free(buf *b)
{
    free(b->data);
    memset(b, 0, sizeof *b);
}

bool buf_failed(const buf *b) { return b->failed; }

static bool reserve(buf *b, size_t n)
{
    if (b->failed) return false;
    if (n > b->limit || b->len > b->limit - n) {
        b->failed = true;
        return false;
    }
    if (b->len + n <= b->cap) return true;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + n) cap = cap > SIZE_MAX / 2 ? SIZE_MAX : cap * 2;
    if (cap > b->limit) cap = b->limit;
    uint8_t *p = realloc(b->data, cap);
    if (!p) {
        b->failed = true;
        return false;
    }
    b->data = p;
    b->cap = cap;
    return true;
}

void buf_put(buf *b, const void *p, size_t n)
{
    if (n == 0 || !reserve(b, n)) return;
    memcpy(b->data + b->len, p, n);
    b->len += n;
}

void buf_puts(buf *b, const char *s) { buf_put(b, s, strlen(s)); }

void buf_putc(buf *b, char c) { buf_put(b, &c, 1); }

void buf_printf(buf *b, const char *fmt, ...)
{
    char tmp[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n < sizeof tmp) {
        buf_put(b, tmp, (size_t)n);
        return;
    }
    if (!reserve(b, (size_t)n + 1)) return;
    va_start(ap, fmt);
    vsnprintf((char *)b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

size_t buf_utf8_len(const unsigned char *s, size_t avail)
{
    unsigned char c = s[0];
    size_t n;
    if (c < 0x80) return 1;
    if (c >= 0xc2 && c <= 0xdf) n = 2;
    else if (c >= 0xe0 && c <= 0xef) n = 3;
    else if (c >= 0xf0 && c <= 0xf4) n = 4;
    else return 0;
    if (n > avail) return 0;
    for (size_t i = 1; i < n; i++)
        if ((s[i] & 0xc0) != 0x80) return 0;
    if (n == 3 && c == 0xe0 && s[1] < 0xa0) return 0;
    if (n == 3 && c == 0xed && s[1] >= 0xa0) return 0;
    if (n == 4 && c == 0xf0 && s[1] < 0x90) return 0;
    if (n == 4 && c == 0xf4 && s[1] >= 0x90) return 0;
    return n;
}

void buf_put_json_str(buf *b, const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    buf_putc(b, '"');
    size_t run = 0; /* bytes copied verbatim in one go */
    for (size_t i = 0; i < n;) {
        unsigned char c = p[i];
        size_t k = c < 0x80 ? 1 : buf_utf8_len(p + i, n - i);
        if (c >= 0x20 && c != '"' && c != '\\' && k > 0) {
            i += k;
            run += k;
            continue;
        }
        buf_put(b, p + i - run, run);
        run = 0;
        if (c == '"' || c == '\\') {
            char e[2] = {'\\', (char)c};
            buf_put(b, e, 2);
        } else if (c < 0x20) {
            char e[8];
            snprintf(e, sizeof e, "\\u%04x", c);
            buf_put(b, e, 6);
        } else {
            buf_put(b, "\xef\xbf\xbd", 3);
        }
        i++;
    }
    buf_put(b, p + n - run, run);
    buf_putc(b, '"');
}

void buf_put_double(buf *b, double v, bool float_precision)
{
    if (isnan(v)) {
        buf_puts(b, "NaN");
        return;
    }
    if (isinf(v)) {
        buf_puts(b, v > 0 ? "Infinity" : "-Infinity");
        return;
    }
    char tmp[48];
    int n = snprintf(tmp, sizeof tmp, float_precision ? "%.9g" : "%.17g", v);
    /* "-0" or "3" would read back as integers (and -0 as 0): keep it a float */
    if (!strpbrk(tmp, ".e")) {
        memcpy(tmp + n, ".0", 3);
        n += 2;
    }
    buf_put(b, tmp, (size_t)n);
}

void buf_put_error_json(buf *b, const char *msg)
{
    buf_puts(b, "{\"error\":");
    buf_put_json_str(b, msg, strlen(msg));
    buf_putc(b, '}');
}

void buf_put_label(buf *b, const char *s)
{
    buf_putc(b, '"');
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') buf_putc(b, '\\'), buf_putc(b, *s);
        else if (*s == '\n') buf_puts(b, "\\n");
        else buf_putc(b, *s);
    }
    buf_putc(b, '"');
}
