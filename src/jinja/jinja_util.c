/* jinja: the arena, the unwinding error, UTF-8 and JavaScript's number and whitespace rules. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jinja_int.h"

_Noreturn void jfail_raise(jfail *f, jinja_errkind kind, const char *fmt, ...)
{
    f->err->kind = kind;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(f->err->msg, sizeof f->err->msg, fmt, ap);
    va_end(ap);
    longjmp(f->jb, 1);
}

void *jarena_alloc(jarena *a, size_t n, jfail *f)
{
    n = (n + sizeof(max_align_t) - 1) & ~(sizeof(max_align_t) - 1);
    if (n == 0)
        n = sizeof(max_align_t);
    jchunk *c = a->head;
    if (!c || c->cap - c->used < n) {
        size_t want = n > 16384 ? n : 16384;
        if (c && c->cap * 2 > want && c->cap * 2 <= ((size_t)1 << 24))
            want = c->cap * 2; /* fewer, larger chunks as a render grows */
        if (n > a->cap || a->total + want > a->cap) {
            if (a->total + n > a->cap)
                jfail_raise(f, JINJA_ERR_LIMIT, "the template needs more than %zu bytes of memory", a->cap);
            want = n;
        }
        c = malloc(sizeof *c + want);
        if (!c)
            jfail_raise(f, JINJA_ERR_NOMEM, "out of memory");
        c->next = a->head;
        c->used = 0;
        c->cap = want;
        a->head = c;
        a->total += want;
    }
    void *p = (char *)c->data + c->used;
    c->used += n;
    return p;
}

void jarena_free(jarena *a)
{
    jchunk *c = a->head;
    while (c) {
        jchunk *next = c->next;
        free(c);
        c = next;
    }
    a->head = NULL;
    a->total = 0;
}

uint32_t ju_decode(const char *s, size_t avail, size_t *n)
{
    const unsigned char *u = (const unsigned char *)s;
    if (u[0] < 0x80 || avail < 2) {
        *n = 1;
        return u[0];
    }
    if (u[0] < 0xE0) {
        *n = 2;
        return ((uint32_t)(u[0] & 0x1F) << 6) | (u[1] & 0x3F);
    }
    if (u[0] < 0xF0 || avail < 4) {
        *n = avail < 3 ? avail : 3;
        return *n < 3 ? 0xFFFD : ((uint32_t)(u[0] & 0x0F) << 12) | ((uint32_t)(u[1] & 0x3F) << 6) | (u[2] & 0x3F);
    }
    *n = 4;
    return ((uint32_t)(u[0] & 0x07) << 18) | ((uint32_t)(u[1] & 0x3F) << 12) | ((uint32_t)(u[2] & 0x3F) << 6) |
           (u[3] & 0x3F);
}

size_t ju_encode(uint32_t cp, char *out)
{
    unsigned char *o = (unsigned char *)out;
    if (cp < 0x80) {
        o[0] = (unsigned char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (unsigned char)(0xC0 | (cp >> 6));
        o[1] = (unsigned char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (unsigned char)(0xE0 | (cp >> 12));
        o[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (unsigned char)(0xF0 | (cp >> 18));
    o[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}

size_t js_space_len(const char *s, size_t avail)
{
    unsigned char c = (unsigned char)s[0];
    if (c == ' ' || (c >= '\t' && c <= '\r'))
        return 1;
    if (c < 0xC2)
        return 0;
    size_t n;
    uint32_t cp = ju_decode(s, avail, &n);
    bool sp = cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
              cp == 0x202F || cp == 0x205F || cp == 0x3000 || cp == 0xFEFF;
    return sp ? n : 0;
}

size_t js_trim_start(const char *s, size_t len)
{
    size_t b = 0, k;
    while (b < len && (k = js_space_len(s + b, len - b)) > 0)
        b += k;
    return b;
}

size_t js_trim_end(const char *s, size_t b, size_t e)
{
    while (e > b) {
        size_t j = e - 1;
        while (j > b && ((unsigned char)s[j] & 0xC0) == 0x80)
            j--;
        if (js_space_len(s + j, e - j) != e - j)
            break;
        e = j;
    }
    return e;
}

size_t js_num_str(double v, char *out)
{
    if (isnan(v))
        return (size_t)sprintf(out, "NaN");
    if (isinf(v))
        return (size_t)sprintf(out, v < 0 ? "-Infinity" : "Infinity");
    if (v == 0)
        return (size_t)sprintf(out, "0");
    /* the shortest digits that read back as v (ECMA-262 Number::toString) */
    char tmp[40];
    int p;
    for (p = 1; p <= 17; p++) {
        snprintf(tmp, sizeof tmp, "%.*e", p - 1, v);
        if (strtod(tmp, NULL) == v)
            break;
    }
    char digits[24];
    int k = 0;
    const char *q = tmp;
    bool neg = *q == '-';
    if (neg)
        q++;
    for (; *q && *q != 'e'; q++)
        if (*q >= '0' && *q <= '9')
            digits[k++] = *q;
    while (k > 1 && digits[k - 1] == '0')
        k--;
    int n = atoi(q + 1) + 1; /* the decimal point sits after n digits */
    char *o = out;
    if (neg)
        *o++ = '-';
    if (k <= n && n <= 21) {
        memcpy(o, digits, (size_t)k);
        o += k;
        for (int i = k; i < n; i++)
            *o++ = '0';
    } else if (0 < n && n <= 21) {
        memcpy(o, digits, (size_t)n);
        o += n;
        *o++ = '.';
        memcpy(o, digits + n, (size_t)(k - n));
        o += k - n;
    } else if (-6 < n && n <= 0) {
        *o++ = '0';
        *o++ = '.';
        for (int i = 0; i < -n; i++)
            *o++ = '0';
        memcpy(o, digits, (size_t)k);
        o += k;
    } else {
        *o++ = digits[0];
        if (k > 1) {
            *o++ = '.';
            memcpy(o, digits + 1, (size_t)(k - 1));
            o += k - 1;
        }
        o += sprintf(o, "e%c%d", n - 1 < 0 ? '-' : '+', abs(n - 1));
    }
    *o = 0;
    return (size_t)(o - out);
}
