/* tok_utf8: the UTF-8 walking the tokenizer needs, with the replacement rules of the
 * WHATWG decoder that @huggingface/tokenizers' decode goes through (TextDecoder). */
#include "tok_int.h"

size_t tok_utf8_next(const unsigned char *s, size_t n, uint32_t *cp)
{
    unsigned char c = s[0];
    if (c < 0x80 || n < 2) {
        *cp = c;
        return 1;
    }
    if (c < 0xE0) {
        *cp = ((uint32_t)(c & 0x1F) << 6) | (s[1] & 0x3F);
        return 2;
    }
    if (c < 0xF0 || n < 4) {
        *cp = ((uint32_t)(c & 0x0F) << 12) | ((uint32_t)(s[1] & 0x3F) << 6) | (s[2] & 0x3F);
        return 3;
    }
    *cp = ((uint32_t)(c & 0x07) << 18) | ((uint32_t)(s[1] & 0x3F) << 12) |
          ((uint32_t)(s[2] & 0x3F) << 6) | (s[3] & 0x3F);
    return 4;
}

/* The number of bytes of the well-formed prefix of a sequence at s (Unicode table 3-7):
 * need = its full length; the return value is how many of the n bytes fit it so far. */
static size_t seq_prefix(const unsigned char *s, size_t n, size_t *need)
{
    unsigned char c = s[0];
    unsigned char lo = 0x80, hi = 0xBF;
    if (c < 0x80) {
        *need = 1;
        return 1;
    }
    if (c >= 0xC2 && c <= 0xDF)
        *need = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        *need = 3;
        if (c == 0xE0)
            lo = 0xA0;
        else if (c == 0xED)
            hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        *need = 4;
        if (c == 0xF0)
            lo = 0x90;
        else if (c == 0xF4)
            hi = 0x8F;
    } else {
        *need = 1;
        return 0; /* never a lead byte */
    }
    size_t k = 1;
    while (k < *need && k < n) {
        unsigned char lim_lo = k == 1 ? lo : 0x80, lim_hi = k == 1 ? hi : 0xBF;
        if (s[k] < lim_lo || s[k] > lim_hi)
            break;
        k++;
    }
    return k;
}

bool tok_utf8_valid(const unsigned char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        if (s[i] < 0x80) {
            i++;
            continue;
        }
        size_t need, got = seq_prefix(s + i, n - i, &need);
        if (got != need)
            return false;
        i += need;
    }
    return true;
}

void tok_utf8_put(buf *b, uint32_t cp)
{
    char o[4];
    size_t n;
    if (cp < 0x80) {
        o[0] = (char)cp;
        n = 1;
    } else if (cp < 0x800) {
        o[0] = (char)(0xC0 | (cp >> 6));
        o[1] = (char)(0x80 | (cp & 0x3F));
        n = 2;
    } else if (cp < 0x10000) {
        o[0] = (char)(0xE0 | (cp >> 12));
        o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (char)(0x80 | (cp & 0x3F));
        n = 3;
    } else {
        o[0] = (char)(0xF0 | (cp >> 18));
        o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
        o[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[3] = (char)(0x80 | (cp & 0x3F));
        n = 4;
    }
    buf_put(b, o, n);
}

size_t tok_utf8_lossy(buf *out, const unsigned char *s, size_t n, bool stream)
{
    size_t i = 0, run = 0; /* s[run..i) is valid and not yet copied */
    while (i < n) {
        if (s[i] < 0x80) {
            i++;
            continue;
        }
        size_t need, got = seq_prefix(s + i, n - i, &need);
        if (got == need) {
            i += need;
            continue;
        }
        buf_put(out, s + run, i - run);
        if (i + got == n && got > 0 && stream) /* a character still arriving */
            return got;
        buf_put(out, "\xEF\xBF\xBD", 3);
        i += got ? got : 1;
        run = i;
    }
    buf_put(out, s + run, i - run);
    return 0;
}

bool tok_js_space(uint32_t cp)
{
    switch (cp) {
    case 0x09: case 0x0A: case 0x0B: case 0x0C: case 0x0D: case 0x20: case 0xA0:
    case 0x1680: case 0x2028: case 0x2029: case 0x202F: case 0x205F: case 0x3000:
    case 0xFEFF:
        return true;
    default:
        return cp >= 0x2000 && cp <= 0x200A;
    }
}
