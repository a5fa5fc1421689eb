/* jinja: the lexer. A port of @huggingface/jinja's preprocess() and tokenize(), rule for
 * rule, because whitespace handling is where renderings differ: the golden test holds it
 * to the original. Work is linear in the source; every token points into the arena. */
#include <string.h>

#include "jinja_int.h"

typedef struct {
    const char *p;
    size_t len;
} sbuf;

static bool is_line_start(const char *s, size_t i)
{
    if (i == 0)
        return true;
    unsigned char c = (unsigned char)s[i - 1];
    if (c == '\n' || c == '\r')
        return true;
    /* U+2028 and U+2029 end a line for JavaScript's ^ too (E2 80 A8 / E2 80 A9) */
    return i >= 3 && (unsigned char)s[i - 3] == 0xE2 && (unsigned char)s[i - 2] == 0x80 &&
           (c == 0xA8 || c == 0xA9);
}

/* JavaScript's /\s/ at s[i], as a length (0: not whitespace). */
static size_t space_at(const char *s, size_t len, size_t i)
{
    return i < len ? js_space_len(s + i, len - i) : 0;
}

static size_t space_before(const char *s, size_t lo, size_t i)
{
    if (i <= lo)
        return 0;
    if ((unsigned char)s[i - 1] < 0x80)
        return js_space_len(s + i - 1, 1);
    size_t k = i - 1;
    while (k > lo && ((unsigned char)s[k] & 0xC0) == 0x80)
        k--;
    size_t n = js_space_len(s + k, i - k);
    return n == i - k ? n : 0;
}

/* {%-? \s* (end)?generation \s* -?%} at s[i]: its length, and whether each side strips. */
static size_t generation_tag(const char *s, size_t len, size_t i, bool *lstrip, bool *rstrip)
{
    size_t j = i;
    if (j + 2 > len || s[j] != '{' || s[j + 1] != '%')
        return 0;
    j += 2;
    *lstrip = j < len && s[j] == '-';
    if (*lstrip)
        j++;
    for (size_t n; (n = space_at(s, len, j)) > 0;)
        j += n;
    if (j + 3 <= len && memcmp(s + j, "end", 3) == 0 && j + 13 <= len && memcmp(s + j + 3, "generation", 10) == 0)
        j += 3;
    if (j + 10 > len || memcmp(s + j, "generation", 10) != 0)
        return 0;
    j += 10;
    size_t before_ws = j;
    for (size_t n; (n = space_at(s, len, j)) > 0;)
        j += n;
    (void)before_ws;
    *rstrip = j < len && s[j] == '-';
    if (*rstrip)
        j++;
    if (j + 2 > len || s[j] != '%' || s[j + 1] != '}')
        return 0;
    return j + 2 - i;
}

static sbuf preprocess(const char *src, size_t len, jarena *a, jfail *f)
{
    if (len > 0 && src[len - 1] == '\n')
        len--;
    /* lstrip_blocks: /^[ \t]*({[#%-])/gm -> "$1" */
    char *p1 = jarena_alloc(a, len + 1, f);
    size_t n1 = 0;
    for (size_t i = 0; i < len;) {
        if (is_line_start(src, i)) {
            size_t j = i;
            while (j < len && (src[j] == ' ' || src[j] == '\t'))
                j++;
            if (j + 1 < len && src[j] == '{' && (src[j + 1] == '#' || src[j + 1] == '%' || src[j + 1] == '-')) {
                p1[n1++] = src[j];
                p1[n1++] = src[j + 1];
                i = j + 2;
                continue;
            }
        }
        p1[n1++] = src[i++];
    }
    /* trim_blocks: /([#%-]})\n/g -> "$1" */
    char *p2 = jarena_alloc(a, n1 + 1, f);
    size_t n2 = 0;
    for (size_t i = 0; i < n1;) {
        if (i + 2 < n1 && (p1[i] == '#' || p1[i] == '%' || p1[i] == '-') && p1[i + 1] == '}' && p1[i + 2] == '\n') {
            p2[n2++] = p1[i];
            p2[n2++] = '}';
            i += 3;
            continue;
        }
        p2[n2++] = p1[i++];
    }
    /* /(\s*){%(-?)\s*(?:end)?generation\s*(-?)%}(\s*)/gs -> (lstrip ? "" : before) + (rstrip ? "" : after) */
    char *p3 = jarena_alloc(a, n2 + 1, f);
    size_t n3 = 0, done = 0; /* p2[done..] is not yet matched or copied */
    for (size_t i = 0; i < n2;) {
        bool ls, rs;
        size_t tag = p2[i] == '{' ? generation_tag(p2, n2, i, &ls, &rs) : 0;
        if (!tag) {
            i++;
            continue;
        }
        size_t b = i;
        for (size_t n; (n = space_before(p2, done, b)) > 0;)
            b -= n;
        size_t e = i + tag;
        size_t after = e;
        for (size_t n; (n = space_at(p2, n2, e)) > 0;)
            e += n;
        memcpy(p3 + n3, p2 + done, b - done);
        n3 += b - done;
        if (!ls) {
            memcpy(p3 + n3, p2 + b, i - b);
            n3 += i - b;
        }
        if (!rs) {
            memcpy(p3 + n3, p2 + after, e - after);
            n3 += e - after;
        }
        done = i = e;
    }
    memcpy(p3 + n3, p2 + done, n2 - done);
    n3 += n2 - done;
    p3[n3] = 0;
    return (sbuf){p3, n3};
}

typedef struct {
    const char *src;
    size_t len, cur;
    jtok *t;
    size_t n, cap;
    unsigned line;
    jarena *a;
    jfail *f;
} lexer;

static void push(lexer *lx, jtok_type type, const char *s, size_t len)
{
    if (lx->n == lx->cap) {
        size_t cap = lx->cap ? lx->cap * 2 : 256;
        jtok *nt = jarena_alloc(lx->a, cap * sizeof *nt, lx->f);
        if (lx->n)
            memcpy(nt, lx->t, lx->n * sizeof *nt);
        lx->t = nt;
        lx->cap = cap;
    }
    lx->t[lx->n++] = (jtok){type, s, len, lx->line};
}

static int last_type(const lexer *lx)
{
    return lx->n ? (int)lx->t[lx->n - 1].type : -1;
}

static bool is_word(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

static bool is_digit(char c)
{
    return c >= '0' && c <= '9';
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

enum { CW_SPACE, CW_DIGIT, CW_WORD, CW_QUOTE1, CW_QUOTE2 };

static bool cw_pred(const lexer *lx, int kind)
{
    if (lx->cur >= lx->len)
        return kind == CW_QUOTE1 || kind == CW_QUOTE2; /* JS: undefined !== quote */
    char c = lx->src[lx->cur];
    switch (kind) {
    case CW_SPACE: return js_space_len(lx->src + lx->cur, lx->len - lx->cur) > 0;
    case CW_DIGIT: return is_digit(c);
    case CW_WORD: return is_word(c);
    case CW_QUOTE1: return c != '\'';
    default: return c != '"';
    }
}

/* consumeWhile(): escapes are decoded, and reaching the end of the source after a
 * consumed character is an error, exactly as in the original. */
static sbuf consume_while(lexer *lx, int kind)
{
    size_t start = lx->cur;
    char *out = NULL;
    size_t n = 0;
    while (cw_pred(lx, kind)) {
        if (lx->cur < lx->len && lx->src[lx->cur] == '\\') {
            if (!out) {
                out = jarena_alloc(lx->a, lx->len - start + 8, lx->f);
                memcpy(out, lx->src + start, lx->cur - start);
                n = lx->cur - start;
            }
            if (++lx->cur >= lx->len)
                jfail_raise(lx->f, JINJA_ERR_SYNTAX, "line %u: unexpected end of input", lx->line);
            char e = lx->src[lx->cur++];
            if (e == 'x' || e == 'u') {
                size_t hl = e == 'x' ? 2 : 4;
                uint32_t cp = 0;
                for (size_t i = 0; i < hl; i++) {
                    int h = lx->cur + i < lx->len ? hexval(lx->src[lx->cur + i]) : -1;
                    if (h < 0)
                        jfail_raise(lx->f, JINJA_ERR_SYNTAX, "line %u: invalid hexadecimal escape sequence", lx->line);
                    cp = cp * 16 + (uint32_t)h;
                }
                lx->cur += hl;
                if (cp >= 0xD800 && cp <= 0xDBFF && lx->cur + 6 <= lx->len && lx->src[lx->cur] == '\\' &&
                    lx->src[lx->cur + 1] == 'u') {
                    uint32_t lo = 0;
                    bool ok = true;
                    for (size_t i = 0; i < 4; i++) {
                        int h = hexval(lx->src[lx->cur + 2 + i]);
                        ok = ok && h >= 0;
                        lo = lo * 16 + (uint32_t)(h < 0 ? 0 : h);
                    }
                    if (ok && lo >= 0xDC00 && lo <= 0xDFFF) {
                        cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                        lx->cur += 6;
                    }
                }
                if (cp >= 0xD800 && cp <= 0xDFFF)
                    jfail_raise(lx->f, JINJA_ERR_SYNTAX, "line %u: a \\u escape names half a surrogate pair", lx->line);
                n += ju_encode(cp, out + n);
                continue;
            }
            char u;
            switch (e) {
            case 'n': u = '\n'; break;
            case 't': u = '\t'; break;
            case 'r': u = '\r'; break;
            case 'b': u = '\b'; break;
            case 'f': u = '\f'; break;
            case 'v': u = '\v'; break;
            case '\'': u = '\''; break;
            case '"': u = '"'; break;
            case '\\': u = '\\'; break;
            default:
                jfail_raise(lx->f, JINJA_ERR_SYNTAX, "line %u: unexpected escaped character: %c", lx->line, e);
            }
            out[n++] = u;
            continue;
        }
        if (lx->cur >= lx->len)
            jfail_raise(lx->f, JINJA_ERR_SYNTAX, "line %u: unexpected end of input", lx->line);
        if (lx->src[lx->cur] == '\n')
            lx->line++;
        if (out)
            out[n++] = lx->src[lx->cur];
        lx->cur++;
        if (lx->cur >= lx->len)
            jfail_raise(lx->f, JINJA_ERR_SYNTAX, "line %u: unexpected end of input", lx->line);
    }
    if (!out)
        return (sbuf){lx->src + start, lx->cur - start};
    return (sbuf){out, n};
}

static void strip_trailing_ws(lexer *lx)
{
    if (lx->n == 0 || lx->t[lx->n - 1].type != TK_TEXT)
        return;
    jtok *t = &lx->t[lx->n - 1];
    size_t n;
    while ((n = space_before(t->s, 0, t->len)) > 0)
        t->len -= n;
    if (t->len == 0)
        lx->n--;
}

static void skip_leading_ws(lexer *lx)
{
    for (size_t n; (n = space_at(lx->src, lx->len, lx->cur)) > 0;) {
        if (lx->src[lx->cur] == '\n')
            lx->line++;
        lx->cur += n;
    }
}

static bool at(const lexer *lx, const char *s)
{
    size_t k = strlen(s);
    return lx->cur + k <= lx->len && memcmp(lx->src + lx->cur, s, k) == 0;
}

static const struct {
    const char *seq;
    jtok_type type;
} TABLE[] = {
    {"{%", TK_OPEN_STMT}, {"%}", TK_CLOSE_STMT}, {"{{", TK_OPEN_EXPR}, {"}}", TK_CLOSE_EXPR},
    {"(", TK_LPAREN}, {")", TK_RPAREN}, {"{", TK_LBRACE}, {"}", TK_RBRACE}, {"[", TK_LBRACKET},
    {"]", TK_RBRACKET}, {",", TK_COMMA}, {".", TK_DOT}, {":", TK_COLON}, {"|", TK_PIPE},
    {"<=", TK_CMP}, {">=", TK_CMP}, {"==", TK_CMP}, {"!=", TK_CMP}, {"<", TK_CMP}, {">", TK_CMP},
    {"+", TK_ADD}, {"-", TK_ADD}, {"~", TK_ADD}, {"**", TK_POW}, {"*", TK_MUL}, {"//", TK_MUL},
    {"/", TK_MUL}, {"%", TK_MUL}, {"=", TK_EQUALS},
};

void jinja_lex(const char *source, size_t srclen, jarena *a, jfail *f, jtok **toks, size_t *ntoks)
{
    sbuf pre = preprocess(source, srclen, a, f);
    lexer lx = {.src = pre.p, .len = pre.len, .line = 1, .a = a, .f = f};
    int curly = 0;
    while (lx.cur < lx.len) {
        int lt = last_type(&lx);
        if (lt < 0 || lt == TK_CLOSE_STMT || lt == TK_CLOSE_EXPR || lt == TK_COMMENT) {
            size_t s = lx.cur;
            unsigned line = lx.line;
            while (lx.cur < lx.len && !(lx.src[lx.cur] == '{' && lx.cur + 1 < lx.len &&
                                        (lx.src[lx.cur + 1] == '%' || lx.src[lx.cur + 1] == '{' ||
                                         lx.src[lx.cur + 1] == '#'))) {
                if (lx.src[lx.cur] == '\n')
                    lx.line++;
                lx.cur++;
            }
            if (lx.cur > s) {
                unsigned keep = lx.line;
                lx.line = line;
                push(&lx, TK_TEXT, lx.src + s, lx.cur - s);
                lx.line = keep;
                continue;
            }
        }
        if (at(&lx, "{#")) {
            lx.cur += 2;
            bool strip_before = lx.cur < lx.len && lx.src[lx.cur] == '-';
            if (strip_before)
                lx.cur++;
            size_t s = lx.cur;
            while (!(lx.cur + 1 < lx.len && lx.src[lx.cur] == '#' && lx.src[lx.cur + 1] == '}')) {
                if (lx.cur + 2 >= lx.len)
                    jfail_raise(f, JINJA_ERR_SYNTAX, "line %u: missing end of comment tag", lx.line);
                if (lx.src[lx.cur] == '\n')
                    lx.line++;
                lx.cur++;
            }
            size_t clen = lx.cur - s;
            bool strip_after = clen > 0 && lx.src[s + clen - 1] == '-';
            if (strip_after)
                clen--;
            if (strip_before)
                strip_trailing_ws(&lx);
            push(&lx, TK_COMMENT, lx.src + s, clen);
            lx.cur += 2;
            if (strip_after)
                skip_leading_ws(&lx);
            continue;
        }
        if (at(&lx, "{%-")) {
            strip_trailing_ws(&lx);
            push(&lx, TK_OPEN_STMT, "{%", 2);
            lx.cur += 3;
            continue;
        }
        if (at(&lx, "{{-")) {
            strip_trailing_ws(&lx);
            push(&lx, TK_OPEN_EXPR, "{{", 2);
            curly = 0;
            lx.cur += 3;
            continue;
        }
        (void)consume_while(&lx, CW_SPACE);
        if (at(&lx, "-%}")) {
            push(&lx, TK_CLOSE_STMT, "%}", 2);
            lx.cur += 3;
            skip_leading_ws(&lx);
            continue;
        }
        if (at(&lx, "-}}")) {
            push(&lx, TK_CLOSE_EXPR, "}}", 2);
            lx.cur += 3;
            skip_leading_ws(&lx);
            continue;
        }
        if (lx.cur >= lx.len)
            break; /* JS: the loop condition ends it (a char of undefined matches nothing) */
        char c = lx.src[lx.cur];
        if (c == '-' || c == '+') {
            int lt2 = last_type(&lx);
            if (lt2 == TK_TEXT || lt2 < 0)
                jfail_raise(f, JINJA_ERR_SYNTAX, "line %u: unexpected character: %c", lx.line, c);
            if (!(lt2 == TK_IDENT || lt2 == TK_NUM || lt2 == TK_STR || lt2 == TK_RPAREN || lt2 == TK_RBRACKET)) {
                size_t s = lx.cur++;
                sbuf num = consume_while(&lx, CW_DIGIT);
                if (num.len > 0 && lx.cur + 1 < lx.len && lx.src[lx.cur] == '.' && is_digit(lx.src[lx.cur + 1])) {
                    lx.cur++;
                    (void)consume_while(&lx, CW_DIGIT);
                }
                if (num.len > 0)
                    push(&lx, TK_NUM, lx.src + s, lx.cur - s);
                else
                    push(&lx, TK_UNARY, lx.src + s, 1);
                continue;
            }
        }
        bool matched = false;
        for (size_t i = 0; i < sizeof TABLE / sizeof TABLE[0]; i++) {
            if (TABLE[i].type == TK_CLOSE_EXPR && curly > 0)
                continue;
            if (at(&lx, TABLE[i].seq)) {
                size_t k = strlen(TABLE[i].seq);
                push(&lx, TABLE[i].type, lx.src + lx.cur, k);
                if (TABLE[i].type == TK_OPEN_EXPR)
                    curly = 0;
                else if (TABLE[i].type == TK_LBRACE)
                    curly++;
                else if (TABLE[i].type == TK_RBRACE)
                    curly--;
                lx.cur += k;
                matched = true;
                break;
            }
        }
        if (matched)
            continue;
        if (c == '\'' || c == '"') {
            lx.cur++;
            sbuf s = consume_while(&lx, c == '\'' ? CW_QUOTE1 : CW_QUOTE2);
            push(&lx, TK_STR, s.p, s.len);
            lx.cur++;
            continue;
        }
        if (is_digit(c)) {
            size_t s = lx.cur;
            (void)consume_while(&lx, CW_DIGIT);
            if (last_type(&lx) != TK_DOT && lx.cur + 1 < lx.len && lx.src[lx.cur] == '.' &&
                is_digit(lx.src[lx.cur + 1])) {
                lx.cur++;
                (void)consume_while(&lx, CW_DIGIT);
            }
            push(&lx, TK_NUM, lx.src + s, lx.cur - s);
            continue;
        }
        if (is_word(c)) {
            sbuf w = consume_while(&lx, CW_WORD);
            push(&lx, TK_IDENT, w.p, w.len);
            continue;
        }
        size_t cl;
        uint32_t cp = ju_decode(lx.src + lx.cur, lx.len - lx.cur, &cl);
        char u8[8];
        u8[ju_encode(cp, u8)] = 0;
        jfail_raise(f, JINJA_ERR_SYNTAX, "line %u: unexpected character: %s", lx.line, u8);
    }
    *toks = lx.t;
    *ntoks = lx.n;
}
