/* tok_pretok: the normalizers and pre-tokenizers, and the translation of tokenizer.json's
 * regexes (written for Oniguruma) into PCRE2 with the meaning @huggingface/tokenizers gives
 * them: \s is White_Space, \d is Nd, (?i:...) folds ASCII letters only, '.' stops at \n. */
#include <stdlib.h>
#include <string.h>

#include "tok_int.h"

/* ---- ByteLevel's byte <-> char table (GPT-2's bytes_to_unicode) ---- */

static bool bl_printable(int b)
{
    return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

static uint32_t bl_cp(int b)
{
    if (bl_printable(b))
        return (uint32_t)b;
    uint32_t n = 0;
    for (int k = 0; k < b; k++)
        n += !bl_printable(k);
    return 256 + n;
}

static char bl_chars[256][3];
static int8_t bl_ready;

static void bl_init(void)
{
    if (__atomic_load_n(&bl_ready, __ATOMIC_ACQUIRE))
        return;
    char tmp[256][3];
    for (int b = 0; b < 256; b++) {
        uint32_t cp = bl_cp(b);
        if (cp < 0x80) {
            tmp[b][0] = (char)cp;
            tmp[b][1] = 0;
        } else {
            tmp[b][0] = (char)(0xC0 | (cp >> 6));
            tmp[b][1] = (char)(0x80 | (cp & 0x3F));
            tmp[b][2] = 0;
        }
    }
    memcpy(bl_chars, tmp, sizeof tmp); /* the same bytes from every thread: a benign race */
    __atomic_store_n(&bl_ready, 1, __ATOMIC_RELEASE);
}

int tok_bytelevel_byte(uint32_t cp)
{
    if (cp < 256 && bl_printable((int)cp))
        return (int)cp;
    if (cp < 256 || cp >= 256 + 68)
        return -1;
    uint32_t n = 256;
    for (int b = 0; b < 256; b++)
        if (!bl_printable(b) && n++ == cp)
            return b;
    return -1;
}

/* ---- pieces ---- */

static void tok_pieces_init(tok_pieces *p, size_t limit)
{
    memset(p, 0, sizeof *p);
    buf_init(&p->data, limit);
}

static void tok_pieces_reset(tok_pieces *p)
{
    p->data.len = 0;
    p->n = 0;
}

static void tok_pieces_free(tok_pieces *p)
{
    buf_free(&p->data);
    free(p->off);
    free(p->len);
    memset(p, 0, sizeof *p);
}

static int tok_pieces_add(tok_pieces *p, const void *s, size_t n)
{
    if (p->n == p->cap) {
        size_t cap = p->cap ? p->cap * 2 : 64;
        size_t *o = realloc(p->off, cap * sizeof *o);
        if (!o)
            return -1;
        p->off = o;
        size_t *l = realloc(p->len, cap * sizeof *l);
        if (!l)
            return -1;
        p->len = l;
        p->cap = cap;
    }
    p->off[p->n] = p->data.len;
    p->len[p->n] = n;
    buf_put(&p->data, s, n);
    if (buf_failed(&p->data))
        return -1;
    p->n++;
    return 0;
}

/* ---- regex translation ---- */

#define WORD_IN_CLASS "\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}"
#define WORD_CLASS "[" WORD_IN_CLASS "\\x{B2}\\x{B3}\\x{B9}\\x{BC}-\\x{BE}]"
#define NONWORD_CLASS "[^" WORD_IN_CLASS "\\x{B2}\\x{B3}\\x{B9}\\x{BC}-\\x{BE}]"

static bool is_alpha(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

static bool is_alnum(char c)
{
    return is_alpha(c) || (c >= '0' && c <= '9');
}

/* One escape at p[0] == '\\'; writes its translation; returns the bytes consumed, or 0
 * when unsupported. in_class: inside [...]. */
static size_t tr_escape(const char *p, size_t n, bool in_class, buf *o)
{
    if (n < 2)
        return 0;
    char c = p[1];
    if ((c == 'p' || c == 'P' || c == 'x') && n > 2 && p[2] == '{') {
        const char *e = memchr(p + 3, '}', n - 3);
        if (!e)
            return 0;
        size_t len = (size_t)(e - p) + 1;
        if (c != 'x' && len == 9 && memcmp(p + 3, "Word", 4) == 0) {
            if (in_class)
                return 0;
            buf_puts(o, c == 'p' ? WORD_CLASS : NONWORD_CLASS);
        } else {
            buf_put(o, p, len);
        }
        return len;
    }
    switch (c) {
    case 's': buf_puts(o, "\\p{White_Space}"); return 2;
    case 'S': buf_puts(o, "\\P{White_Space}"); return 2;
    case 'd': buf_puts(o, "\\p{Nd}"); return 2;
    case 'D': buf_puts(o, "\\P{Nd}"); return 2;
    case 'w': buf_puts(o, in_class ? WORD_IN_CLASS : WORD_CLASS); return 2;
    case 'W':
        if (in_class)
            return 0;
        buf_puts(o, NONWORD_CLASS);
        return 2;
    case 'r': case 'n': case 't': case 'f': case 'v':
        buf_put(o, p, 2);
        return 2;
    default:
        if (is_alnum(c) || (unsigned char)c >= 0x80)
            return 0; /* \A \z \b \G \h \k backreferences...: not translated */
        buf_put(o, p, 2);
        return 2;
    }
}

pcre2_code *tok_regex_compile(const char *re, size_t n, bool literal, char *msg, size_t msglen)
{
    buf o;
    pcre2_code *code = NULL;
    bool fold_stack[64];
    size_t depth = 0;
    bool fold = false, after_quant = false, ok = true;
    buf_init(&o, 1 << 20);
    if (literal) {
        buf_put(&o, re, n);
    } else {
        for (size_t i = 0; i < n && ok;) {
            char c = re[i];
            if (c == '\\') {
                size_t k = tr_escape(re + i, n - i, false, &o);
                if (!k) {
                    ok = false;
                    ts_fail(msg, msglen, "regex escape '\\%c' is not supported",
                            i + 1 < n ? re[i + 1] : ' ');
                    break;
                }
                i += k;
                after_quant = false;
            } else if (c == '[') {
                buf_putc(&o, '[');
                i++;
                if (i < n && re[i] == '^')
                    buf_putc(&o, re[i++]);
                if (i < n && re[i] == ']')
                    buf_puts(&o, "\\]"), i++;
                while (i < n && re[i] != ']') {
                    if (re[i] == '\\') {
                        size_t k = tr_escape(re + i, n - i, true, &o);
                        if (!k)
                            break;
                        i += k;
                    } else if (re[i] == '[' || (re[i] == '&' && i + 1 < n && re[i + 1] == '&') ||
                               (fold && is_alpha(re[i]))) {
                        break; /* nested classes, intersections, folded classes */
                    } else {
                        buf_putc(&o, re[i++]);
                    }
                }
                if (i >= n || re[i] != ']') {
                    ok = false;
                    ts_fail(msg, msglen, "regex character class at offset %zu is not supported", i);
                    break;
                }
                buf_putc(&o, ']');
                i++;
                after_quant = false;
            } else if (c == '(') {
                size_t k = 1;
                bool ci = false;
                if (i + 1 < n && re[i + 1] == '?') {
                    if (i + 3 < n && re[i + 2] == 'i' && re[i + 3] == ':') {
                        ci = true;
                        k = 4;
                        buf_puts(&o, "(?:");
                    } else if (i + 2 < n && (re[i + 2] == ':' || re[i + 2] == '=' || re[i + 2] == '!')) {
                        k = 3;
                        buf_put(&o, re + i, 3);
                    } else if (i + 2 < n && re[i + 2] == '>') {
                        k = 3; /* an atomic group is an ordinary one in JavaScript */
                        buf_puts(&o, "(?:");
                    } else if (i + 3 < n && re[i + 2] == '<' && (re[i + 3] == '=' || re[i + 3] == '!')) {
                        k = 4;
                        buf_put(&o, re + i, 4);
                    } else {
                        ok = false;
                        ts_fail(msg, msglen, "regex group '(?%c' is not supported",
                                i + 2 < n ? re[i + 2] : ' ');
                        break;
                    }
                } else {
                    buf_putc(&o, '(');
                }
                if (depth == sizeof fold_stack / sizeof fold_stack[0]) {
                    ok = false;
                    ts_fail(msg, msglen, "regex groups nest too deep");
                    break;
                }
                fold_stack[depth++] = fold;
                if (ci)
                    fold = true;
                i += k;
                after_quant = false;
            } else if (c == ')') {
                buf_putc(&o, ')');
                if (depth)
                    fold = fold_stack[--depth];
                i++;
                after_quant = false;
            } else if (c == '.') {
                buf_puts(&o, "[^\\n]");
                i++;
                after_quant = false;
            } else if (c == '^') {
                buf_puts(&o, "(?:(?<![\\s\\S])|(?<=\\n))");
                i++;
                after_quant = false;
            } else if (c == '$') {
                buf_puts(&o, "(?:(?=\\n)|(?![\\s\\S]))");
                i++;
                after_quant = false;
            } else if (c == '{') {
                size_t j = i + 1;
                bool digits = false;
                while (j < n && ((re[j] >= '0' && re[j] <= '9') || re[j] == ',')) {
                    digits |= re[j] != ',';
                    j++;
                }
                if (digits && j < n && re[j] == '}' && re[i + 1] != ',') {
                    buf_put(&o, re + i, j + 1 - i);
                    i = j + 1;
                    if (i < n && (re[i] == '+' || re[i] == '*')) {
                        ok = false;
                        ts_fail(msg, msglen, "stacked regex quantifier at offset %zu is not supported", i);
                        break;
                    }
                    after_quant = true;
                } else {
                    buf_puts(&o, "\\{");
                    i++;
                    after_quant = false;
                }
            } else if (c == '}' || c == ']') {
                buf_putc(&o, '\\');
                buf_putc(&o, c);
                i++;
                after_quant = false;
            } else if (c == '+') {
                if (!after_quant) /* a possessive '+' is dropped, as JavaScript does */
                    buf_putc(&o, '+');
                after_quant = !after_quant;
                i++;
            } else if (c == '*' || c == '?') {
                buf_putc(&o, c);
                after_quant = true;
                i++;
            } else if (fold && is_alpha(c)) {
                char lo = (char)(c | 0x20), up = (char)(c & ~0x20);
                char cls[5] = {'[', lo, up, ']', 0};
                buf_puts(&o, cls);
                i++;
                after_quant = false;
            } else {
                buf_putc(&o, c);
                i++;
                after_quant = false;
            }
        }
    }
    if (ok && buf_failed(&o)) {
        ok = false;
        ts_fail(msg, msglen, "regex too long");
    }
    if (ok) {
        int ecode;
        PCRE2_SIZE eoff;
        code = pcre2_compile((PCRE2_SPTR)o.data, o.len,
                             literal ? PCRE2_UTF | PCRE2_LITERAL : PCRE2_UTF | PCRE2_UCP, &ecode, &eoff, NULL);
        if (!code) {
            PCRE2_UCHAR m[160];
            pcre2_get_error_message(ecode, m, sizeof m);
            ts_fail(msg, msglen, "regex does not compile (%s at offset %zu)", (char *)m, (size_t)eoff);
        } else {
            pcre2_jit_compile(code, PCRE2_JIT_COMPLETE); /* the interpreter is the fallback */
        }
    }
    buf_free(&o);
    return code;
}

/* ByteLevel's own split (use_regex): a JavaScript regex literal in @huggingface/tokenizers,
 * so \s is JavaScript's (with U+FEFF, without U+0085), spelled out here. */
#define JS_SPACE "\\t\\n\\x{0B}\\f\\r \\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}\\x{FEFF}"

pcre2_code *tok_regex_gpt2(char *msg, size_t msglen)
{
    static const char re[] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^" JS_SPACE
                             "\\p{L}\\p{N}]+|[" JS_SPACE "]+(?![^" JS_SPACE "])|[" JS_SPACE "]+";
    int ecode;
    PCRE2_SIZE eoff;
    pcre2_code *code = pcre2_compile((PCRE2_SPTR)re, sizeof re - 1, PCRE2_UTF | PCRE2_UCP, &ecode,
                                     &eoff, NULL);
    if (!code)
        ts_fail(msg, msglen, "the ByteLevel regex does not compile");
    else
        pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
    return code;
}

/* @huggingface/tokenizers' own patterns for the pre-tokenizers that are a regex. Its
 * PUNCTUATION_REGEX is \p{P} plus ASCII's symbols; \s and \d are JavaScript's (every Unicode
 * space; ASCII digits only), and \w without the u flag is ASCII. */
#define JS_PUNCT "\\p{P}\\x{21}-\\x{2F}\\x{3A}-\\x{40}\\x{5B}-\\x{60}\\x{7B}-\\x{7E}"

pcre2_code *tok_regex_builtin(const char *type, bool digits1)
{
    const char *re;
    if (strcmp(type, "Whitespace") == 0)
        re = "[A-Za-z0-9_]+|[^A-Za-z0-9_" JS_SPACE "]+";
    else if (strcmp(type, "WhitespaceSplit") == 0)
        re = "[^" JS_SPACE "]+";
    else if (strcmp(type, "BertPreTokenizer") == 0)
        re = "[^" JS_SPACE JS_PUNCT "]+|[" JS_PUNCT "]";
    else if (strcmp(type, "Punctuation") == 0)
        re = "[^" JS_PUNCT "]+|[" JS_PUNCT "]+";
    else if (strcmp(type, "Digits") == 0)
        re = digits1 ? "[^0-9]+|[0-9]" : "[^0-9]+|[0-9]+";
    else
        return NULL;
    int ecode;
    PCRE2_SIZE eoff;
    pcre2_code *code = pcre2_compile((PCRE2_SPTR)re, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP,
                                     &ecode, &eoff, NULL);
    if (code)
        pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
    return code;
}

/* ---- normalizers ---- */

/* Appends s without the code points whose tok_uprop has any of mask. */
static void drop_props(const char *s, size_t n, uint32_t mask, buf *out)
{
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t l = tok_utf8_next(u + i, n - i, &cp);
        if (cp < 0x300 || !(tok_uprop(cp) & mask))
            buf_put(out, s + i, l);
        i += l;
    }
}

/* JavaScript's trim / trimStart / trimEnd */
static void strip(const char *s, size_t n, unsigned sides, buf *out)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t a = 0, b = n;
    while ((sides & TOK_STRIP_LEFT) && a < n) {
        uint32_t cp;
        size_t l = tok_utf8_next(u + a, n - a, &cp);
        if (!tok_js_space(cp))
            break;
        a += l;
    }
    while ((sides & TOK_STRIP_RIGHT) && b > a) {
        size_t p = b - 1;
        while (p > a && (u[p] & 0xC0) == 0x80)
            p--;
        uint32_t cp;
        tok_utf8_next(u + p, b - p, &cp);
        if (!tok_js_space(cp))
            break;
        b = p;
    }
    buf_put(out, s + a, b - a);
}

/* BertNormalizer, step by step as @huggingface/tokenizers runs it. Its CJK test reads
 * UTF-16 code units, so only the BMP's ideographs get spaces around them. */
static int bert(const tok_norm *nm, buf *cur, buf *tmp)
{
    if (nm->flags & TOK_BERT_CLEAN) {
        const unsigned char *u = cur->data;
        tmp->len = 0;
        for (size_t i = 0; i < cur->len;) {
            uint32_t cp;
            size_t l = tok_utf8_next(u + i, cur->len - i, &cp);
            bool control = cp != '\t' && cp != '\n' && cp != '\r' && (tok_uprop(cp) & TOK_UP_CONTROL);
            if (cp == 0 || cp == 0xFFFD || control)
                ;
            else if (tok_js_space(cp))
                buf_putc(tmp, ' ');
            else
                buf_put(tmp, u + i, l);
            i += l;
        }
        buf x = *cur; *cur = *tmp; *tmp = x;
    }
    if (nm->flags & TOK_BERT_CHINESE) {
        const unsigned char *u = cur->data;
        tmp->len = 0;
        for (size_t i = 0; i < cur->len;) {
            uint32_t cp;
            size_t l = tok_utf8_next(u + i, cur->len - i, &cp);
            bool cjk = (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) ||
                       (cp >= 0xF900 && cp <= 0xFAFF);
            if (cjk)
                buf_putc(tmp, ' ');
            buf_put(tmp, u + i, l);
            if (cjk)
                buf_putc(tmp, ' ');
            i += l;
        }
        buf x = *cur; *cur = *tmp; *tmp = x;
    }
    if (nm->flags & TOK_BERT_LOWER) {
        tmp->len = 0;
        tok_lower((const char *)cur->data, cur->len, tmp);
        buf x = *cur; *cur = *tmp; *tmp = x;
    }
    if (nm->flags & TOK_BERT_ACCENTS) {
        tmp->len = 0;
        tok_unorm((const char *)cur->data, cur->len, false, false, tmp);
        buf x = *cur; *cur = *tmp; *tmp = x;
        tmp->len = 0;
        drop_props((const char *)cur->data, cur->len, TOK_UP_MN, tmp);
        x = *cur; *cur = *tmp; *tmp = x;
    }
    /* the caller swaps once more: hand the result back in tmp */
    buf x = *cur; *cur = *tmp; *tmp = x;
    return buf_failed(cur) || buf_failed(tmp) ? -1 : 0;
}

int tok_normalize(const tokenizer *t, const char *s, size_t n, buf *out, ts_err *err)
{
    buf tmp;
    int rc = -1;
    buf_init(&tmp, out->limit);
    out->len = 0;
    buf_put(out, s, n);
    for (size_t k = 0; k < t->nnorm; k++) {
        const tok_norm *nm = &t->norm[k];
        tmp.len = 0;
        switch (nm->kind) {
        case TOK_NORM_PREPEND:
            buf_put(&tmp, nm->a, nm->alen);
            buf_put(&tmp, out->data, out->len);
            break;
        case TOK_NORM_REPLACE: {
            size_t i = 0, run = 0;
            while (i + nm->alen <= out->len) {
                if (memcmp(out->data + i, nm->a, nm->alen) == 0) {
                    buf_put(&tmp, out->data + run, i - run);
                    buf_put(&tmp, nm->b, nm->blen);
                    i += nm->alen;
                    run = i;
                } else {
                    i++;
                }
            }
            buf_put(&tmp, out->data + run, out->len - run);
            break;
        }
        case TOK_NORM_NFC:
            tok_nfc((const char *)out->data, out->len, &tmp);
            break;
        case TOK_NORM_NFD:
        case TOK_NORM_NFKC:
        case TOK_NORM_NFKD:
            tok_unorm((const char *)out->data, out->len, nm->kind != TOK_NORM_NFD,
                      nm->kind == TOK_NORM_NFKC, &tmp);
            break;
        case TOK_NORM_LOWER:
            tok_lower((const char *)out->data, out->len, &tmp);
            break;
        case TOK_NORM_STRIP:
            strip((const char *)out->data, out->len, nm->flags, &tmp);
            break;
        case TOK_NORM_STRIP_ACCENTS: /* JavaScript's replace(/\p{M}/gu, "") */
            drop_props((const char *)out->data, out->len, TOK_UP_MN | TOK_UP_MC_ME, &tmp);
            break;
        case TOK_NORM_BERT:
            if (bert(nm, out, &tmp) < 0)
                tmp.failed = true;
            break;
        }
        if (buf_failed(&tmp)) {
            ts_err_set(err, TS_PAYLOAD_TOO_LARGE, "text too long after normalization");
            goto out;
        }
        buf b = *out;
        *out = tmp;
        tmp = b;
    }
    rc = 0;
out:
    buf_free(&tmp);
    return rc;
}

/* ---- pre-tokenizers ---- */

static int matcher_init(tok_matcher *m, const pcre2_code *re)
{
    if (m->md)
        return 0;
    m->md = pcre2_match_data_create_from_pattern(re, NULL);
    m->mc = pcre2_match_context_create(NULL);
    m->js = pcre2_jit_stack_create(32 * 1024, 4 * 1024 * 1024, NULL);
    if (!m->md || !m->mc || !m->js)
        return -1;
    pcre2_jit_stack_assign(m->mc, NULL, m->js);
    pcre2_set_match_limit(m->mc, 50 * 1000 * 1000);
    pcre2_set_depth_limit(m->mc, 100 * 1000);
    return 0;
}

void tok_scratch_init(tok_scratch *sc, size_t limit)
{
    memset(sc, 0, sizeof *sc);
    tok_pieces_init(&sc->a, limit);
    tok_pieces_init(&sc->b, limit);
    tok_pieces_init(&sc->parts, limit);
    buf_init(&sc->tmp, limit);
}

void tok_scratch_free(tok_scratch *sc)
{
    tok_pieces_free(&sc->a);
    tok_pieces_free(&sc->b);
    tok_pieces_free(&sc->parts);
    buf_free(&sc->tmp);
    for (size_t i = 0; i < TOK_MAX_STEPS; i++) {
        pcre2_match_data_free(sc->m[i].md);
        pcre2_match_context_free(sc->m[i].mc);
        pcre2_jit_stack_free(sc->m[i].js);
    }
}

/* Splits s by re (JavaScript's matchAll: after an empty match the search moves on by one
 * character) and adds the pieces mode keeps to dst. */
static int split_piece(const pcre2_code *re, tok_matcher *m, enum tok_split_mode mode,
                       const char *s, size_t n, const _Atomic bool *stop, tok_pieces *dst, ts_err *err)
{
    size_t pos = 0, prev = 0;
    for (size_t steps = 1; pos <= n; steps++) {
        if ((steps % TOK_STOP_EVERY) == 0 && tok_check_stop(stop, err) < 0)
            return -1;
        int rc = pcre2_match(re, (PCRE2_SPTR)s, n, pos, PCRE2_NO_UTF_CHECK, m->md, m->mc);
        if (rc == PCRE2_ERROR_NOMATCH)
            break;
        if (rc < 0) {
            PCRE2_UCHAR msg[120];
            pcre2_get_error_message(rc, msg, sizeof msg);
            ts_err_set(err, TS_BAD_REQUEST, "text defeats the pre-tokenizer regex (%s)", (char *)msg);
            return -1;
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(m->md);
        size_t ms = ov[0], me = ov[1];
        /* ISOLATED is regex_split (gaps and matches; an empty match still ends a gap),
         * REMOVED the gaps between non-empty matches, MATCHES the non-empty matches */
        bool ends_gap = mode == TOK_SPLIT_ISOLATED || (mode == TOK_SPLIT_REMOVED && me > ms);
        if (ends_gap) {
            if (prev < ms && tok_pieces_add(dst, s + prev, ms - prev) < 0)
                goto full;
            prev = me;
        }
        if (me > ms && mode != TOK_SPLIT_REMOVED && tok_pieces_add(dst, s + ms, me - ms) < 0)
            goto full;
        if (me == ms) {
            if (me >= n)
                break;
            uint32_t cp;
            pos = me + tok_utf8_next((const unsigned char *)s + me, n - me, &cp);
        } else {
            pos = me;
        }
    }
    if (mode != TOK_SPLIT_MATCHES && prev < n && tok_pieces_add(dst, s + prev, n - prev) < 0)
        goto full;
    return 0;
full:
    ts_err_set(err, TS_PAYLOAD_TOO_LARGE, "text too long to pre-tokenize");
    return -1;
}

static int bytelevel_piece(const tok_pre *p, tok_matcher *m, tok_scratch *sc, const char *s,
                           size_t n, tok_pieces *dst, ts_err *err)
{
    buf *tmp = &sc->tmp;
    tok_pieces *parts = &sc->parts;
    tmp->len = 0;
    tok_pieces_reset(parts);
    if (p->add_prefix_space && (n == 0 || s[0] != ' '))
        buf_putc(tmp, ' ');
    buf_put(tmp, s, n);
    if (buf_failed(tmp))
        goto full;
    if (p->re) {
        if (split_piece(p->re, m, TOK_SPLIT_MATCHES, (const char *)tmp->data, tmp->len, sc->stop, parts, err) < 0)
            return -1;
    } else if (tok_pieces_add(parts, tmp->data, tmp->len) < 0) {
        goto full;
    }
    for (size_t k = 0; k < parts->n; k++) {
        const unsigned char *q = parts->data.data + parts->off[k];
        tmp->len = 0;
        for (size_t i = 0; i < parts->len[k]; i++)
            buf_puts(tmp, bl_chars[q[i]]);
        if (buf_failed(tmp) || tok_pieces_add(dst, tmp->data, tmp->len) < 0)
            goto full;
    }
    return 0;
full:
    ts_err_set(err, TS_PAYLOAD_TOO_LARGE, "text too long to pre-tokenize");
    return -1;
}

/* Metaspace: every ' ' becomes str_rep, and str_rep goes in front unless the text starts
 * with the replacement already (prepend_scheme "first": in the text's first section only).
 * One piece: @huggingface/tokenizers does not split here. */
static int metaspace_piece(const tok_pre *p, const tok_scratch *sc, const char *s, size_t n,
                           tok_pieces *dst, buf *tmp, ts_err *err)
{
    tmp->len = 0;
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] != ' ')
            continue;
        buf_put(tmp, s + run, i - run);
        buf_put(tmp, p->str_rep, p->str_rep_len);
        run = i + 1;
    }
    buf_put(tmp, s + run, n - run);
    bool starts = tmp->len >= p->rep_len && memcmp(tmp->data, p->rep, p->rep_len) == 0;
    bool prepend = !starts && (p->prepend == TOK_PREPEND_ALWAYS ||
                               (p->prepend == TOK_PREPEND_FIRST && sc->section == 0));
    size_t at = dst->data.len;
    if (tok_pieces_add(dst, NULL, 0) < 0)
        goto full;
    if (prepend)
        buf_put(&dst->data, p->str_rep, p->str_rep_len);
    buf_put(&dst->data, tmp->data, tmp->len);
    if (buf_failed(tmp) || buf_failed(&dst->data))
        goto full;
    dst->len[dst->n - 1] = dst->data.len - at;
    return 0;
full:
    ts_err_set(err, TS_PAYLOAD_TOO_LARGE, "text too long to pre-tokenize");
    return -1;
}

int tok_pretokenize(const tokenizer *t, const char *s, size_t n, tok_scratch *sc,
                    tok_pieces **res, ts_err *err)
{
    tok_pieces *cur = &sc->a, *nxt = &sc->b;
    bl_init();
    tok_pieces_reset(cur);
    if (tok_pieces_add(cur, s, n) < 0) {
        ts_err_set(err, TS_PAYLOAD_TOO_LARGE, "text too long to pre-tokenize");
        return -1;
    }
    for (size_t k = 0; k < t->npre; k++) {
        const tok_pre *p = &t->pre[k];
        int rc = 0;
        if (p->re && matcher_init(&sc->m[k], p->re) < 0) {
            ts_err_set(err, TS_INTERNAL_ERROR, "out of memory");
            return -1;
        }
        tok_pieces_reset(nxt);
        for (size_t i = 0; i < cur->n && rc == 0; i++) {
            if (i % TOK_STOP_EVERY == TOK_STOP_EVERY - 1 && tok_check_stop(sc->stop, err) < 0)
                return -1;
            const char *q = (const char *)cur->data.data + cur->off[i];
            if (p->kind == TOK_PRE_SPLIT)
                rc = split_piece(p->re, &sc->m[k], p->mode, q, cur->len[i], sc->stop, nxt, err);
            else if (p->kind == TOK_PRE_METASPACE)
                rc = metaspace_piece(p, sc, q, cur->len[i], nxt, &sc->tmp, err);
            else
                rc = bytelevel_piece(p, &sc->m[k], sc, q, cur->len[i], nxt, err);
        }
        if (rc < 0)
            return -1;
        tok_pieces *x = cur;
        cur = nxt;
        nxt = x;
    }
    *res = cur;
    return 0;
}
