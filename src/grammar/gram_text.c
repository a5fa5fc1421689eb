/* The two text front ends: the plain grammar form (GBNF-like, docs/llm.md) and the regex
 * subset of JSON Schema's `pattern` and the formats. Both share one recursive-descent parser
 * of alternatives, sequences and quantified atoms; they differ in their atoms (a regex's
 * characters are JSON string content: '"' becomes \", a control character its escape). */
#include <stdio.h>
#include <string.h>

#include "buf.h"
#include "gram_int.h"

typedef struct {
    gb *b;
    const char *base, *p, *end;
    bool regex;
    unsigned depth;
    const char *where;
    /* GBNF: rule names */
    struct {
        const char *name;
        size_t len;
        int32_t rule;
        bool defined;
    } names[512];
    size_t n_names;
} tp;

static bool tp_fail(tp *t, const char *what)
{
    return gb_fail(t->b, "%s: %s at offset %zu", t->where, what, (size_t)(t->p - t->base));
}

static void skip_ws(tp *t)
{
    if (t->regex)
        return;
    while (t->p < t->end) {
        if (*t->p == '#')
            while (t->p < t->end && *t->p != '\n')
                t->p++;
        else if (*t->p == ' ' || *t->p == '\t' || *t->p == '\n' || *t->p == '\r')
            t->p++;
        else
            break;
    }
}

static bool is_name(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
}

static int32_t name_rule(tp *t, const char *s, size_t n, bool define)
{
    for (size_t i = 0; i < t->n_names; i++)
        if (t->names[i].len == n && !memcmp(t->names[i].name, s, n)) {
            if (define && t->names[i].defined) {
                gb_fail(t->b, "%s: rule '%.*s' is defined twice", t->where, (int)n, s);
                return -1;
            }
            t->names[i].defined |= define;
            return t->names[i].rule;
        }
    if (t->n_names == sizeof t->names / sizeof t->names[0]) {
        gb_fail(t->b, "%s: more than 512 rule names", t->where);
        return -1;
    }
    char nm[80];
    snprintf(nm, sizeof nm, "%.*s", (int)(n < 64 ? n : 64), s);
    int32_t r = gb_rule(t->b, nm);
    t->names[t->n_names].name = s, t->names[t->n_names].len = n;
    t->names[t->n_names].rule = r, t->names[t->n_names++].defined = define;
    return r;
}

/* one character as JSON string content (regex mode): its bytes, escaped where JSON needs */
static uint32_t content_char(tp *t, unsigned c)
{
    gb *b = t->b;
    gram_set s = {{0}};
    if (c >= 0x20 && c != '"' && c != '\\' && c < 0x80) {
        gram_set_add(&s, c);
        return gb_elem_class(b, &s);
    }
    char esc[8];
    switch (c) {
    case '"': strcpy(esc, "\\\""); break;
    case '\\': strcpy(esc, "\\\\"); break;
    case '\n': strcpy(esc, "\\n"); break;
    case '\t': strcpy(esc, "\\t"); break;
    case '\r': strcpy(esc, "\\r"); break;
    default: snprintf(esc, sizeof esc, "\\u%04x", c & 0xff);
    }
    int32_t r = gb_rule(b, "escape");
    gb_add_lit(b, gb_alt_new(b, r), esc, strlen(esc));
    return gb_elem_ref(r);
}

/* a class as an element: ASCII members (bytes in GBNF mode), plus every multi-byte UTF-8
 * character when multi */
static uint32_t class_elem(tp *t, const gram_set *ascii, bool multi)
{
    gb *b = t->b;
    gram_set plain = *ascii;
    bool quote = false, bslash = false;
    if (t->regex) {
        quote = gram_set_has(ascii, '"'), bslash = gram_set_has(ascii, '\\');
        for (unsigned c = 0; c < 0x20; c++)
            plain.w[0] &= ~(1ull << c); /* controls: dropped (a subset is still valid) */
        plain.w['"' >> 6] &= ~(1ull << ('"' & 63));
        plain.w['\\' >> 6] &= ~(1ull << ('\\' & 63));
    }
    bool any = plain.w[0] | plain.w[1] | plain.w[2] | plain.w[3];
    if (!quote && !bslash && !multi) {
        if (!any) {
            gb_fail(b, "%s: a character class that matches nothing", t->where);
            return GE_MAKE(GE_CLASS, 0);
        }
        return gb_elem_class(b, &plain);
    }
    int32_t r = gb_rule(b, "class");
    if (any)
        gb_add_class(b, gb_alt_new(b, r), &plain);
    if (quote)
        gb_add_lit(b, gb_alt_new(b, r), "\\\"", 2);
    if (bslash)
        gb_add_lit(b, gb_alt_new(b, r), "\\\\", 2);
    if (multi)
        gb_add_ref(b, gb_alt_new(b, r), gram_utf8_multi(b));
    return gb_elem_ref(r);
}

static void set_range(gram_set *s, unsigned lo, unsigned hi)
{
    for (unsigned c = lo; c <= hi; c++)
        gram_set_add(s, c);
}

/* the class escapes \d \w \s (and their negations, which complement within ASCII) */
static bool class_escape(char c, gram_set *s)
{
    gram_set x = {{0}};
    switch (c | 0x20) {
    case 'd': set_range(&x, '0', '9'); break;
    case 'w': set_range(&x, '0', '9'), set_range(&x, 'a', 'z'), set_range(&x, 'A', 'Z'), gram_set_add(&x, '_'); break;
    case 's': gram_set_add(&x, ' '), gram_set_add(&x, '\t'), gram_set_add(&x, '\n'), gram_set_add(&x, '\r'); break;
    default: return false;
    }
    if (c >= 'A' && c <= 'Z')
    {
        for (unsigned k = 0; k < 0x80; k++)
            if (!gram_set_has(&x, k))
                gram_set_add(s, k);
    } else
        for (int w = 0; w < 4; w++)
            s->w[w] |= x.w[w];
    return true;
}

static int hexv(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : (c | 0x20) >= 'a' && (c | 0x20) <= 'f' ? (c | 0x20) - 'a' + 10 : -1;
}

/* an escaped character after '\\' (p at the letter); -1 when unknown */
static int esc_char(tp *t)
{
    char c = *t->p++;
    switch (c) {
    case 'n': return '\n';
    case 't': return '\t';
    case 'r': return '\r';
    case 'f': return '\f';
    case 'v': return '\v';
    case 'x':
        if (t->end - t->p >= 2 && hexv(t->p[0]) >= 0 && hexv(t->p[1]) >= 0) {
            int v = hexv(t->p[0]) * 16 + hexv(t->p[1]);
            t->p += 2;
            return v;
        }
        return -1;
    default:
        /* a regex takes JavaScript's "u" mode rules (ajv's): only syntax characters may be
         * escaped ('-' also inside a class) */
        if (t->regex ? !strchr("^$\\.*+?()[]{}|/-", c) || !c
                     : (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))
            return -1;
        return (unsigned char)c;
    }
}

/* [...] with p after '[' */
static uint32_t parse_class(tp *t)
{
    gram_set s = {{0}};
    bool neg = false;
    if (t->p < t->end && *t->p == '^')
        neg = true, t->p++;
    bool first = true;
    while (t->p < t->end && (*t->p != ']' || first)) {
        first = false;
        int lo;
        if (*t->p == '\\' && t->p + 1 < t->end) {
            t->p++;
            if (t->regex && class_escape(*t->p, &s)) {
                t->p++;
                continue;
            }
            lo = esc_char(t);
        } else
            lo = (unsigned char)*t->p++;
        if (lo < 0 || (lo >= 0x80 && t->regex)) {
            tp_fail(t, lo < 0 ? "unknown escape in a class" : "non-ASCII characters in a class are not supported");
            return GE_MAKE(GE_CLASS, 0);
        }
        int hi = lo;
        if (t->p + 1 < t->end && *t->p == '-' && t->p[1] != ']') {
            t->p++;
            if (*t->p == '\\' && t->p + 1 < t->end) {
                t->p++;
                hi = esc_char(t);
            } else
                hi = (unsigned char)*t->p++;
            if (hi < lo || (hi >= 0x80 && t->regex)) {
                tp_fail(t, "a bad range in a class");
                return GE_MAKE(GE_CLASS, 0);
            }
        }
        set_range(&s, (unsigned)lo, (unsigned)hi);
    }
    if (t->p >= t->end) {
        tp_fail(t, "an unclosed '['");
        return GE_MAKE(GE_CLASS, 0);
    }
    t->p++;
    if (!neg)
        return class_elem(t, &s, false);
    gram_set c = {{0}};
    for (unsigned k = 0; k < 0x80; k++)
        if (!gram_set_has(&s, k))
            gram_set_add(&c, k);
    /* GBNF: [^...] is any character but those; a regex's negation stays ASCII (JavaScript
     * counts characters like U+00A0 as \s, so a wider set could break the pattern) */
    return class_elem(t, &c, !t->regex);
}

static int32_t parse_alt(tp *t);

/* one atom as an element; false at the end of a sequence */
static bool parse_atom(tp *t, uint32_t *out)
{
    gb *b = t->b;
    skip_ws(t);
    if (t->p >= t->end)
        return false;
    char c = *t->p;
    if (c == '|' || c == ')')
        return false;
    if (t->regex) {
        if (c == '$' && t->p + 1 == t->end) {
            t->p++;
            return false;
        }
        if (c == '^' || c == '$') {
            tp_fail(t, "'^' and '$' are supported only at the pattern's ends");
            return false;
        }
        if (c == '*' || c == '+' || c == '?' || c == '{') {
            tp_fail(t, "a quantifier with nothing before it");
            return false;
        }
    }
    if (c == '(') {
        t->p++;
        if (t->regex && t->p < t->end && *t->p == '?') {
            if (t->end - t->p >= 2 && t->p[1] == ':')
                t->p += 2;
            else {
                tp_fail(t, "lookarounds and named groups are not supported");
                return false;
            }
        }
        if (++t->depth > b->lim.max_nesting) {
            tp_fail(t, "groups nest too deep");
            return false;
        }
        int32_t r = parse_alt(t);
        t->depth--;
        skip_ws(t);
        if (t->p >= t->end || *t->p != ')') {
            tp_fail(t, "an unclosed '('");
            return false;
        }
        t->p++;
        *out = gb_elem_ref(r);
        return gb_ok(b);
    }
    if (c == '[') {
        t->p++;
        *out = parse_class(t);
        return gb_ok(b);
    }
    if (c == '.') {
        t->p++;
        gram_set s = {{0}};
        set_range(&s, 0, 0x7f);
        if (t->regex)
            s.w[0] &= ~(1ull << '\n') & ~(1ull << '\r');
        *out = class_elem(t, &s, !t->regex);
        return gb_ok(b);
    }
    if (!t->regex && c == '<' && t->end - t->p >= 2 && t->p[1] == '[') { /* <[TEXT]>: one whole token */
        const char *s = t->p + 2, *q = s;
        while (q + 1 < t->end && !(q[0] == ']' && q[1] == '>'))
            q++;
        if (q + 1 >= t->end || q == s || memchr(s, 0, (size_t)(q - s))) {
            tp_fail(t, "a token element is written <[TEXT]> with a non-empty TEXT");
            return false;
        }
        t->p = q + 2;
        *out = gb_elem_tok(b, s, (size_t)(q - s));
        return gb_ok(b);
    }
    if (!t->regex && c == '"') { /* a literal */
        t->p++;
        int32_t r = gb_rule(b, "literal");
        gb_alt *a = gb_alt_new(b, r);
        while (t->p < t->end && *t->p != '"') {
            int ch;
            if (*t->p == '\\' && t->p + 1 < t->end) {
                t->p++;
                ch = esc_char(t);
            } else
                ch = (unsigned char)*t->p++;
            if (ch < 0) {
                tp_fail(t, "unknown escape in a literal");
                return false;
            }
            gb_add_byte(b, a, (unsigned char)ch);
        }
        if (t->p >= t->end) {
            tp_fail(t, "an unclosed '\"'");
            return false;
        }
        t->p++;
        if (!a->n) {
            tp_fail(t, "an empty literal");
            return false;
        }
        *out = gb_elem_ref(r);
        return gb_ok(b);
    }
    if (!t->regex) { /* a rule name, unless it starts the next rule */
        const char *s = t->p;
        while (t->p < t->end && is_name(*t->p))
            t->p++;
        if (t->p == s) {
            tp_fail(t, "an unexpected character");
            return false;
        }
        size_t n = (size_t)(t->p - s);
        const char *q = t->p;
        while (q < t->end && (*q == ' ' || *q == '\t' || *q == '\n' || *q == '\r'))
            q++;
        if (t->end - q >= 3 && !memcmp(q, "::=", 3)) {
            t->p = s;
            return false;
        }
        *out = gb_elem_ref(name_rule(t, s, n, false));
        return gb_ok(b);
    }
    /* a regex character */
    if (c == '\\') {
        t->p++;
        if (t->p >= t->end) {
            tp_fail(t, "a trailing '\\'");
            return false;
        }
        gram_set s = {{0}};
        if (class_escape(*t->p, &s)) {
            t->p++;
            *out = class_elem(t, &s, false);
            return gb_ok(b);
        }
        int ch = esc_char(t);
        if (ch < 0) {
            tp_fail(t, "an unsupported escape (backreferences, \\b, \\p are not supported)");
            return false;
        }
        *out = content_char(t, (unsigned)ch);
        return gb_ok(b);
    }
    size_t n = buf_utf8_len((const unsigned char *)t->p, (size_t)(t->end - t->p));
    if (!n) {
        tp_fail(t, "invalid UTF-8");
        return false;
    }
    if (n == 1) {
        t->p++;
        *out = content_char(t, (unsigned char)c);
        return gb_ok(b);
    }
    int32_t r = gb_rule(b, "char");
    gb_add_lit(b, gb_alt_new(b, r), t->p, n);
    t->p += n;
    *out = gb_elem_ref(r);
    return gb_ok(b);
}

static bool parse_int(tp *t, int *v)
{
    if (t->p >= t->end || *t->p < '0' || *t->p > '9')
        return false;
    long x = 0;
    while (t->p < t->end && *t->p >= '0' && *t->p <= '9' && x < 100000)
        x = x * 10 + (*t->p++ - '0');
    *v = (int)x;
    return true;
}

/* a quantifier after an atom: the element for the repeated atom */
static uint32_t quantify(tp *t, uint32_t e)
{
    gb *b = t->b;
    if (t->p >= t->end)
        return e;
    int min, max;
    switch (*t->p) {
    case '*': min = 0, max = -1; break;
    case '+': min = 1, max = -1; break;
    case '?': min = 0, max = 1; break;
    case '{': {
        const char *save = t->p++;
        if (!parse_int(t, &min)) {
            t->p = save;
            tp_fail(t, "a bad '{m,n}'");
            return e;
        }
        max = min;
        if (t->p < t->end && *t->p == ',') {
            t->p++;
            if (!parse_int(t, &max))
                max = -1;
        }
        if (t->p >= t->end || *t->p != '}' || (max >= 0 && max < min) || min > 256 || max > 256) {
            tp_fail(t, "a bad '{m,n}' (at most 256)");
            return e;
        }
        break;
    }
    default: return e;
    }
    t->p++;
    if (t->regex && t->p < t->end && (*t->p == '?' || *t->p == '+'))
        t->p++; /* lazy / possessive: the same language */
    return gb_elem_ref(gb_repeat(b, e, min, max));
}

static int32_t parse_alt(tp *t)
{
    gb *b = t->b;
    int32_t r = gb_rule(b, "group");
    for (;;) {
        gb_alt *a = gb_alt_new(b, r);
        uint32_t e;
        while (gb_ok(b) && parse_atom(t, &e))
            gb_add_elem(b, a, quantify(t, e));
        if (!gb_ok(b))
            return -1;
        skip_ws(t);
        if (t->p < t->end && *t->p == '|') {
            t->p++;
            continue;
        }
        return r;
    }
}

int32_t gram_regex(gb *b, const char *re, size_t n, const char *where)
{
    char w[300];
    snprintf(w, sizeof w, "pattern at %s", where);
    tp t = {.b = b, .base = re, .p = re, .end = re + n, .regex = true, .where = w};
    if (t.p < t.end && *t.p == '^')
        t.p++; /* anchored or not, the output matches the whole pattern */
    int32_t r = parse_alt(&t);
    if (r >= 0 && t.p < t.end)
        tp_fail(&t, "an unmatched ')'");
    return gb_ok(b) ? r : -1;
}

gram_grammar *gram_compile_gbnf(const char *text, size_t len, const gram_limits *lim, ts_err *err)
{
    return gram_compile_gbnf_refs(text, len, NULL, 0, lim, err);
}

gram_grammar *gram_compile_gbnf_refs(const char *text, size_t len, const gram_ref *refs, size_t n_refs,
                                     const gram_limits *lim, ts_err *err)
{
    gb b;
    gb_init(&b, lim, err);
    if (len > b.lim.max_input_bytes) {
        ts_err_set(err, TS_BAD_REQUEST, "the grammar is larger than %zu bytes", b.lim.max_input_bytes);
        return NULL;
    }
    tp t = {.b = &b, .base = text, .p = text, .end = text + len, .where = "grammar"};
    for (size_t i = 0; i < n_refs && gb_ok(&b); i++) { /* rules a JSON Schema defines */
        size_t nl = refs[i].name ? strlen(refs[i].name) : 0;
        bool okname = nl > 0 && nl <= 64;
        for (size_t k = 0; k < nl; k++)
            okname = okname && is_name(refs[i].name[k]);
        if (!okname) {
            gb_fail(&b, "grammar: schema rule %zu needs a name of 1-64 letters, digits, '_' or '-'", i);
            break;
        }
        char where[96];
        snprintf(where, sizeof where, "schema of rule '%s'", refs[i].name);
        int32_t body = gram_schema_rule(&b, refs[i].schema, refs[i].len, where);
        int32_t r = name_rule(&t, refs[i].name, nl, true);
        gb_add_ref(&b, gb_alt_new(&b, r), body);
    }
    for (;;) {
        skip_ws(&t);
        if (t.p >= t.end || !gb_ok(&b))
            break;
        const char *s = t.p;
        while (t.p < t.end && is_name(*t.p))
            t.p++;
        size_t n = (size_t)(t.p - s);
        skip_ws(&t);
        if (!n || t.end - t.p < 3 || memcmp(t.p, "::=", 3)) {
            tp_fail(&t, "expected 'name ::= ...'");
            break;
        }
        t.p += 3;
        int32_t r = name_rule(&t, s, n, true);
        int32_t body = parse_alt(&t);
        gb_add_ref(&b, gb_alt_new(&b, r), body);
        skip_ws(&t);
        if (gb_ok(&b) && t.p < t.end && *t.p == ')')
            tp_fail(&t, "an unmatched ')'");
    }
    int32_t root = -1;
    for (size_t i = 0; i < t.n_names && gb_ok(&b); i++) {
        if (!t.names[i].defined)
            gb_fail(&b, "grammar: rule '%.*s' is used but never defined", (int)t.names[i].len, t.names[i].name);
        if (t.names[i].len == 4 && !memcmp(t.names[i].name, "root", 4))
            root = t.names[i].rule;
    }
    if (gb_ok(&b) && root < 0)
        gb_fail(&b, "grammar: no 'root' rule");
    gram_grammar *g = gb_finish(&b, root);
    gb_free(&b);
    return g;
}
