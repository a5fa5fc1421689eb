/* The whitespace of JavaScript's trim(), on UTF-8: the templates' trim/strip/lstrip/rstrip
 * in @huggingface/jinja are trim/trimStart/trimEnd, whatever characters the template
 * names (Qwen3's lstrip('\n') strips spaces too there). */
#include <stdlib.h>
#include <string.h>

#include "chat_int.h"

bool chat_js_space(unsigned cp)
{
    switch (cp) {
    case 0x09: case 0x0a: case 0x0b: case 0x0c: case 0x0d: case 0x20: case 0xa0:
    case 0x1680: case 0x2028: case 0x2029: case 0x202f: case 0x205f: case 0x3000:
    case 0xfeff:
        return true;
    default:
        return cp >= 0x2000 && cp <= 0x200a;
    }
}

/* Decodes the valid UTF-8 sequence at s (avail bytes); 0 when there is none. */
static size_t chat_utf8_cp(const char *s, size_t avail, unsigned *cp)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t n = buf_utf8_len(u, avail);
    if (n == 1)
        *cp = u[0];
    else if (n == 2)
        *cp = (unsigned)(u[0] & 0x1f) << 6 | (u[1] & 0x3f);
    else if (n == 3)
        *cp = (unsigned)(u[0] & 0x0f) << 12 | (unsigned)(u[1] & 0x3f) << 6 | (u[2] & 0x3f);
    else if (n == 4)
        *cp = (unsigned)(u[0] & 0x07) << 18 | (unsigned)(u[1] & 0x3f) << 12 |
              (unsigned)(u[2] & 0x3f) << 6 | (u[3] & 0x3f);
    return n;
}

size_t chat_space_at(const char *s, size_t len)
{
    unsigned cp = 0;
    if (len == 0)
        return 0;
    size_t n = chat_utf8_cp(s, len, &cp);
    return n && chat_js_space(cp) ? n : 0;
}

size_t chat_space_before(const char *s, size_t len)
{
    /* every character of the set is at most 3 bytes */
    for (size_t n = 1; n <= 3 && n <= len; n++) {
        unsigned char c = (unsigned char)s[len - n];
        if ((c & 0xc0) == 0x80)
            continue;
        return chat_space_at(s + len - n, n) == n ? n : 0;
    }
    return 0;
}

/* Number(s) === 0 in JavaScript: s without its whitespace is empty, a decimal literal
 * whose value is (or underflows to) zero, or a 0x/0o/0b literal of zeros. */
bool chat_js_loose_false(const char *s, size_t n)
{
    size_t w;
    while ((w = chat_space_at(s, n)) > 0) {
        s += w;
        n -= w;
    }
    while ((w = chat_space_before(s, n)) > 0)
        n -= w;
    if (n == 0)
        return true;
    if (n > 2 && s[0] == '0' && strchr("xXoObB", s[1])) {
        const char *digits = s[1] == 'x' || s[1] == 'X' ? "0123456789abcdefABCDEF"
                             : s[1] == 'o' || s[1] == 'O' ? "01234567" : "01";
        bool zero = true;
        for (size_t i = 2; i < n; i++) {
            if (!strchr(digits, s[i]) || s[i] == '\0')
                return false;
            zero = zero && s[i] == '0';
        }
        return zero;
    }
    /* StrDecimalLiteral: [+-] (digits [. digits] | . digits) [(e|E) [+-] digits] */
    size_t i = 0, mant = 0;
    bool zeros = true;
    if (s[i] == '+' || s[i] == '-')
        i++;
    for (int part = 0; part < 2; part++) {
        while (i < n && s[i] >= '0' && s[i] <= '9') {
            zeros = zeros && s[i] == '0';
            i++, mant++;
        }
        if (part == 0 && !(i < n && s[i] == '.'))
            break;
        i += part == 0;
    }
    if (mant == 0)
        return false; /* also "Infinity" and anything else: not zero */
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        size_t e0 = ++i;
        if (i < n && (s[i] == '+' || s[i] == '-'))
            e0 = ++i;
        while (i < n && s[i] >= '0' && s[i] <= '9')
            i++;
        if (i == e0)
            return false;
    }
    if (i != n)
        return false;
    if (zeros)
        return true;
    /* a non-zero mantissa is zero only when its exponent underflows the double */
    char *tmp = malloc(n + 1);
    if (!tmp)
        return false;
    memcpy(tmp, s, n);
    tmp[n] = '\0';
    bool zero = strtod(tmp, NULL) == 0.0;
    free(tmp);
    return zero;
}
