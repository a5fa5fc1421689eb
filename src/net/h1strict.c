/* h1strict.c: the line and chunk framing http-parser lets through when built non-strict (as
 * Debian builds it): a bare LF ending a line of the request head, a bare LF or a control byte
 * inside a chunk extension, any two bytes where the CRLF after chunk data belongs, a bare LF in
 * the trailer section. A front proxy that frames such bytes differently would see another
 * request than this server does, so they are refused (400), as nginx refuses them. */
#include "h1srv_internal.h"

#include <string.h>

enum { ST_SIZE0, ST_SIZE, ST_EXT, ST_SIZE_LF, ST_DATA, ST_DATA_CR, ST_DATA_LF, ST_TRAILER, ST_TRAILER_LF, ST_DONE };

void h1strict_reset(h1strict *s) { *s = (h1strict){.in_head = true, .line_start = true}; }

static bool is_hex(uint8_t b) { return (b >= '0' && b <= '9') || (b >= 'a' && b <= 'f') || (b >= 'A' && b <= 'F'); }

/* Visible bytes, space and tab: what a chunk extension (tokens, quoted strings) may hold. */
static bool is_ext_byte(uint8_t b) { return b == '\t' || (b >= 0x20 && b != 0x7f); }

const char *h1strict_head(h1strict *s, const uint8_t *p, size_t n, size_t *head_end)
{
    /* the state in locals (p may alias *s as far as the compiler knows), and the bytes inside
     * a line skipped with memchr: only CR and LF move the state */
    bool cr = s->cr, line_start = s->line_start, any_line = s->any_line;
    const char *why = NULL;
    *head_end = n;
    for (size_t i = 0; i < n; i++) {
        uint8_t b = p[i];
        if (cr && b != '\n') {
            why = "a CR not followed by LF in the request head";
            break;
        }
        if (b == '\r') {
            cr = true;
            continue;
        }
        if (b != '\n') {
            line_start = false;
            any_line = true;
            const uint8_t *cr_at = memchr(p + i + 1, '\r', n - i - 1);
            size_t stop = cr_at ? (size_t)(cr_at - p) : n;
            const uint8_t *lf_at = memchr(p + i + 1, '\n', stop - i - 1);
            i = (lf_at ? (size_t)(lf_at - p) : stop) - 1; /* the loop's i++ lands on the CR or LF */
            continue;
        }
        if (!cr) {
            why = "a line of the request head ends in a bare LF (HTTP/1.1 lines end in CRLF)";
            break;
        }
        cr = false;
        if (line_start && any_line) { /* the empty line: the head ends here */
            s->in_head = false;
            *head_end = i + 1;
            break;
        }
        line_start = true; /* empty lines before the request line are skipped, as allowed */
    }
    s->cr = cr;
    s->line_start = line_start;
    s->any_line = any_line;
    return why;
}

const char *h1strict_chunks(h1strict *s, const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        uint8_t b = p[i];
        switch (s->st) {
        case ST_SIZE0:
        case ST_SIZE:
            if (is_hex(b)) {
                s->left = s->left * 16 + (uint64_t)(b <= '9' ? b - '0' : (b | 0x20) - 'a' + 10);
                if (s->left > ((uint64_t)1 << 48)) return "a chunk size too large";
                s->st = ST_SIZE;
            } else if (s->st == ST_SIZE && (b == ';' || b == ' ' || b == '\t')) {
                s->st = ST_EXT;
            } else if (s->st == ST_SIZE && b == '\r') {
                s->st = ST_SIZE_LF;
            } else {
                return "malformed chunk size in a chunked request body";
            }
            break;
        case ST_EXT:
            if (b == '\r') s->st = ST_SIZE_LF;
            else if (!is_ext_byte(b)) return "a chunk extension holds a bare LF or a control byte";
            break;
        case ST_SIZE_LF:
            if (b != '\n') return "a chunk size line does not end in CRLF";
            s->st = s->left ? ST_DATA : ST_TRAILER;
            s->line_start = true;
            break;
        case ST_DATA: {
            size_t take = n - i < s->left ? n - i : (size_t)s->left;
            s->left -= take;
            i += take - 1;
            if (s->left == 0) s->st = ST_DATA_CR;
            break;
        }
        case ST_DATA_CR:
            if (b != '\r') return "chunk data is not followed by CRLF";
            s->st = ST_DATA_LF;
            break;
        case ST_DATA_LF:
            if (b != '\n') return "chunk data is not followed by CRLF";
            s->st = ST_SIZE0;
            break;
        case ST_TRAILER:
            if (b == '\r') s->st = ST_TRAILER_LF;
            else if (b == '\n') return "a trailer line ends in a bare LF";
            else s->line_start = false;
            break;
        case ST_TRAILER_LF:
            if (b != '\n') return "a CR not followed by LF in the trailer section";
            if (s->line_start) s->st = ST_DONE;
            else s->st = ST_TRAILER;
            s->line_start = true;
            break;
        default:
            return "bytes after the end of a chunked body"; /* the parser stops at its end */
        }
    }
    return NULL;
}
