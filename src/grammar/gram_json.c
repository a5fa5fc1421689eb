/* JSON as grammar rules (compact: no whitespace outside strings) and the JSON Schema
 * compiler (OpenAI strict mode's subset, docs/llm.md). Every generated document is valid
 * for the schema: where a constraint cannot be expressed exactly, the grammar takes a
 * subset of the valid documents (numbers without exponents, at most 15 digits; a pattern's
 * anchored language; no Feb 29), never a superset. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gram_int.h"

static void set_range(gram_set *s, unsigned lo, unsigned hi)
{
    for (unsigned c = lo; c <= hi; c++)
        gram_set_add(s, c);
}

static void alt_range(gb *b, gb_alt *a, unsigned lo, unsigned hi)
{
    gram_set s = {{0}};
    set_range(&s, lo, hi);
    gb_add_class(b, a, &s);
}

int32_t gram_utf8_multi(gb *b)
{
    if (b->memo[GB_MEMO_UTF8MB] >= 0)
        return b->memo[GB_MEMO_UTF8MB];
    int32_t r = gb_rule(b, "utf8");
    /* {lead lo, lead hi, second lo, second hi, continuation bytes after the second} */
    static const unsigned char f[][5] = {{0xc2, 0xdf, 0x80, 0xbf, 0}, {0xe0, 0xe0, 0xa0, 0xbf, 1},
                                         {0xe1, 0xec, 0x80, 0xbf, 1}, {0xed, 0xed, 0x80, 0x9f, 1},
                                         {0xee, 0xef, 0x80, 0xbf, 1}, {0xf0, 0xf0, 0x90, 0xbf, 2},
                                         {0xf1, 0xf3, 0x80, 0xbf, 2}, {0xf4, 0xf4, 0x80, 0x8f, 2}};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
        gb_alt *a = gb_alt_new(b, r);
        alt_range(b, a, f[i][0], f[i][1]);
        alt_range(b, a, f[i][2], f[i][3]);
        for (int k = 0; k < f[i][4]; k++)
            alt_range(b, a, 0x80, 0xbf);
    }
    return b->memo[GB_MEMO_UTF8MB] = r;
}

static int32_t gram_json_char(gb *b)
{
    if (b->memo[GB_MEMO_CHAR] >= 0)
        return b->memo[GB_MEMO_CHAR];
    int32_t r = gb_rule(b, "char");
    gram_set s = {{0}};
    set_range(&s, 0x20, 0x7f);
    s.w['"' >> 6] &= ~(1ull << ('"' & 63));
    s.w['\\' >> 6] &= ~(1ull << ('\\' & 63));
    gb_add_class(b, gb_alt_new(b, r), &s);
    gb_add_ref(b, gb_alt_new(b, r), gram_utf8_multi(b));
    gb_alt *a = gb_alt_new(b, r);
    gb_add_byte(b, a, '\\');
    gram_set e = {{0}};
    for (const char *p = "\"\\/bfnrt"; *p; p++)
        gram_set_add(&e, (unsigned char)*p);
    gb_add_class(b, a, &e);
    /* \uXXXX other than a surrogate (D800-DFFF): a lone one is not a character */
    gram_set hex = {{0}}, hex_nod = {{0}}, oct = {{0}};
    set_range(&hex, '0', '9'), set_range(&hex, 'a', 'f'), set_range(&hex, 'A', 'F');
    hex_nod = hex;
    hex_nod.w['d' >> 6] &= ~(1ull << ('d' & 63));
    hex_nod.w['D' >> 6] &= ~(1ull << ('D' & 63));
    set_range(&oct, '0', '7');
    a = gb_alt_new(b, r);
    gb_add_lit(b, a, "\\u", 2);
    gb_add_class(b, a, &hex_nod), gb_add_class(b, a, &hex), gb_add_class(b, a, &hex), gb_add_class(b, a, &hex);
    a = gb_alt_new(b, r);
    gb_add_lit(b, a, "\\u", 2);
    gram_set d = {{0}};
    gram_set_add(&d, 'd'), gram_set_add(&d, 'D');
    gb_add_class(b, a, &d), gb_add_class(b, a, &oct), gb_add_class(b, a, &hex), gb_add_class(b, a, &hex);
    return b->memo[GB_MEMO_CHAR] = r;
}

/* '"' char{min,max} '"' (max < 0: unbounded) */
static int32_t string_len(gb *b, int min, int max)
{
    int32_t r = gb_rule(b, "string");
    gb_alt *a = gb_alt_new(b, r);
    gb_add_byte(b, a, '"');
    gb_add_ref(b, a, gb_repeat(b, gb_elem_ref(gram_json_char(b)), min, max));
    gb_add_byte(b, a, '"');
    return r;
}

static int32_t gram_json_string(gb *b)
{
    if (b->memo[GB_MEMO_STRING] < 0)
        b->memo[GB_MEMO_STRING] = string_len(b, 0, -1);
    return b->memo[GB_MEMO_STRING];
}

static void digits(gb *b, gb_alt *a, int min, int max)
{
    gram_set d = {{0}};
    set_range(&d, '0', '9');
    gb_add_ref(b, a, gb_repeat(b, gb_elem_class(b, &d), min, max));
}

static int32_t gram_json_integer(gb *b)
{
    if (b->memo[GB_MEMO_INTEGER] >= 0)
        return b->memo[GB_MEMO_INTEGER];
    int32_t mag = gb_rule(b, "digits");
    gb_add_byte(b, gb_alt_new(b, mag), '0');
    gb_alt *a = gb_alt_new(b, mag);
    alt_range(b, a, '1', '9');
    digits(b, a, 0, 14);
    int32_t r = gb_rule(b, "integer");
    gb_add_ref(b, gb_alt_new(b, r), mag);
    a = gb_alt_new(b, r);
    gb_add_byte(b, a, '-');
    gb_add_ref(b, a, mag);
    return b->memo[GB_MEMO_INTEGER] = r;
}

static int32_t fraction(gb *b)
{
    int32_t r = gb_rule(b, "fraction");
    gb_alt *a = gb_alt_new(b, r);
    gb_add_byte(b, a, '.');
    digits(b, a, 1, 15);
    return r;
}

static int32_t gram_json_number(gb *b)
{
    if (b->memo[GB_MEMO_NUMBER] >= 0)
        return b->memo[GB_MEMO_NUMBER];
    int32_t r = gb_rule(b, "number");
    int32_t f = fraction(b);
    gb_alt *a = gb_alt_new(b, r);
    gb_add_ref(b, a, gram_json_integer(b));
    a = gb_alt_new(b, r);
    gb_add_ref(b, a, gram_json_integer(b));
    gb_add_ref(b, a, f);
    return b->memo[GB_MEMO_NUMBER] = r;
}

/* open '{' or '[', then (item (',' item)*)?, then close */
static int32_t json_list(gb *b, const char *name, char open, char close, int32_t item)
{
    int32_t more = gb_rule(b, "more");
    gb_alt *a = gb_alt_new(b, more);
    gb_add_byte(b, a, ',');
    gb_add_ref(b, a, item);
    gb_add_ref(b, a, more);
    gb_alt_new(b, more);
    int32_t r = gb_rule(b, name);
    a = gb_alt_new(b, r);
    gb_add_byte(b, a, (unsigned char)open), gb_add_byte(b, a, (unsigned char)close);
    a = gb_alt_new(b, r);
    gb_add_byte(b, a, (unsigned char)open);
    gb_add_ref(b, a, item);
    gb_add_ref(b, a, more);
    gb_add_byte(b, a, (unsigned char)close);
    return r;
}

static int32_t gram_json_value(gb *b)
{
    if (b->memo[GB_MEMO_VALUE] >= 0)
        return b->memo[GB_MEMO_VALUE];
    int32_t v = b->memo[GB_MEMO_VALUE] = gb_rule(b, "value");
    int32_t member = gb_rule(b, "member");
    gb_alt *a = gb_alt_new(b, member);
    gb_add_ref(b, a, gram_json_string(b));
    gb_add_byte(b, a, ':');
    gb_add_ref(b, a, v);
    gb_add_ref(b, gb_alt_new(b, v), json_list(b, "object", '{', '}', member));
    gb_add_ref(b, gb_alt_new(b, v), json_list(b, "array", '[', ']', v));
    gb_add_ref(b, gb_alt_new(b, v), gram_json_string(b));
    gb_add_ref(b, gb_alt_new(b, v), gram_json_number(b));
    static const char *const lit[] = {"true", "false", "null"};
    for (int i = 0; i < 3; i++)
        gb_add_lit(b, gb_alt_new(b, v), lit[i], strlen(lit[i]));
    return v;
}

gram_grammar *gram_compile_any_json(const gram_limits *lim, ts_err *err)
{
    gb b;
    gb_init(&b, lim, err);
    int32_t root = gb_rule(&b, "root");
    gram_json_value(&b);
    /* json_object: the document is an object (the member rule is made with the value) */
    int32_t member = -1;
    for (size_t i = 0; i < b.n_rules; i++)
        if (!strcmp(b.names[i], "member"))
            member = (int32_t)i;
    gb_add_ref(&b, gb_alt_new(&b, root), json_list(&b, "object", '{', '}', member));
    gram_grammar *g = gb_finish(&b, root);
    gb_free(&b);
    return g;
}

/* ------------------------------------------------------------------ JSON Schema */

typedef struct {
    gb *b;
    json_t *doc;
    struct {
        char *ptr;
        int32_t rule;
    } ref[256];
    size_t n_ref;
    unsigned depth;
} sc;

static int32_t schema(sc *c, json_t *s, const char *path);

/* v's compact text in memory of our own (malloc: the caller frees it with free()). Not
 * json_dumps: its text comes from jansson's allocator, which a program may replace (the worker
 * charges jansson's allocations to a request's budget behind a header), so free() on it is
 * wrong there. NULL when out of memory. */
static char *dump_text(const json_t *v)
{
    size_t n = json_dumpb(v, NULL, 0, JSON_COMPACT | JSON_ENCODE_ANY);
    char *t = n ? malloc(n + 1) : NULL;
    if (!t) return NULL;
    if (json_dumpb(v, t, n, JSON_COMPACT | JSON_ENCODE_ANY) != n) {
        free(t);
        return NULL;
    }
    t[n] = '\0';
    return t;
}

static int32_t literal(gb *b, json_t *v)
{
    char *txt = dump_text(v);
    if (!txt) {
        gb_fail(b, "out of memory compiling the schema");
        return -1;
    }
    int32_t r = gb_rule(b, "literal");
    gb_add_lit(b, gb_alt_new(b, r), txt, strlen(txt));
    free(txt);
    return r;
}

static int32_t lit_rule(gb *b, const char *s)
{
    int32_t r = gb_rule(b, s);
    gb_add_lit(b, gb_alt_new(b, r), s, strlen(s));
    return r;
}

/* digits of x (0 <= x < 10^18) into out, returns the count */
static int dec(long long x, char *out)
{
    return snprintf(out, 24, "%lld", x);
}

/* appends to rule r alternatives for the decimal strings of [lo, hi] of the same length n */
static void same_len(gb *b, int32_t r, const char *lo, const char *hi, int n)
{
    gram_set d09 = {{0}};
    set_range(&d09, '0', '9');
    if (n == 1) {
        alt_range(b, gb_alt_new(b, r), (unsigned char)lo[0], (unsigned char)hi[0]);
        return;
    }
    bool lo_zero = true, hi_nine = true;
    for (int i = 1; i < n; i++)
        lo_zero = lo_zero && lo[i] == '0', hi_nine = hi_nine && hi[i] == '9';
    if (lo_zero && hi_nine) {
        gb_alt *a = gb_alt_new(b, r);
        alt_range(b, a, (unsigned char)lo[0], (unsigned char)hi[0]);
        for (int i = 1; i < n; i++)
            gb_add_class(b, a, &d09);
        return;
    }
    if (lo[0] == hi[0]) {
        int32_t sub = gb_rule(b, "range");
        same_len(b, sub, lo + 1, hi + 1, n - 1);
        gb_alt *a = gb_alt_new(b, r);
        gb_add_byte(b, a, (unsigned char)lo[0]);
        gb_add_ref(b, a, sub);
        return;
    }
    char nines[24], zeros[24];
    memset(nines, '9', (size_t)n), memset(zeros, '0', (size_t)n);
    int32_t s1 = gb_rule(b, "range");
    same_len(b, s1, lo + 1, nines, n - 1);
    gb_alt *a = gb_alt_new(b, r);
    gb_add_byte(b, a, (unsigned char)lo[0]);
    gb_add_ref(b, a, s1);
    if (lo[0] + 1 <= hi[0] - 1) {
        a = gb_alt_new(b, r);
        alt_range(b, a, (unsigned char)(lo[0] + 1), (unsigned char)(hi[0] - 1));
        for (int i = 1; i < n; i++)
            gb_add_class(b, a, &d09);
    }
    int32_t s2 = gb_rule(b, "range");
    same_len(b, s2, zeros, hi + 1, n - 1);
    a = gb_alt_new(b, r);
    gb_add_byte(b, a, (unsigned char)hi[0]);
    gb_add_ref(b, a, s2);
}

#define INT_CAP 999999999999999LL /* 15 digits: exact in a double */

/* a rule for the decimal integers in [lo, hi] (lo <= hi, no leading zeros, "-" for negatives) */
static int32_t int_range(gb *b, long long lo, long long hi)
{
    int32_t r = gb_rule(b, "irange");
    if (lo < 0) { /* -(max(1,-hi) .. -lo) */
        long long a = hi < 0 ? -hi : 1, z = -lo;
        int32_t mag = int_range(b, a, z);
        gb_alt *al = gb_alt_new(b, r);
        gb_add_byte(b, al, '-');
        gb_add_ref(b, al, mag);
        if (hi < 0)
            return r;
        lo = 0;
    }
    char l[24], h[24];
    for (int n = dec(lo, l); n <= dec(hi, h) && gb_ok(b); n++) {
        long long pl = 1;
        for (int i = 1; i < n; i++)
            pl *= 10;
        long long a = lo > (n == 1 ? 0 : pl) ? lo : (n == 1 ? 0 : pl), z = hi < pl * 10 - 1 ? hi : pl * 10 - 1;
        if (a > z)
            continue;
        dec(a, l), dec(z, h);
        same_len(b, r, l, h, n);
    }
    return r;
}

static bool get_bound(sc *c, json_t *s, const char *key, const char *path, bool integer, long long def,
                      bool is_min, long long *out)
{
    json_t *v = json_object_get(s, key);
    *out = def;
    if (!v)
        return true;
    if (!json_is_number(v))
        return gb_fail(c->b, "'%s' at %s must be a number", key, path);
    double d = json_number_value(v);
    if (integer)
        d = is_min ? ceil(d) : floor(d);
    else if (d != floor(d))
        return gb_fail(c->b, "a non-integer '%s' for type number is not supported (at %s)", key, path);
    if (d < (double)-INT_CAP || d > (double)INT_CAP)
        return gb_fail(c->b, "'%s' at %s is outside +-%lld", key, path, INT_CAP);
    *out = (long long)d;
    return true;
}

static int32_t number_type(sc *c, json_t *s, const char *path, bool integer)
{
    gb *b = c->b;
    if (!json_object_get(s, "minimum") && !json_object_get(s, "maximum"))
        return integer ? gram_json_integer(b) : gram_json_number(b);
    long long lo, hi;
    if (!get_bound(c, s, "minimum", path, integer, -INT_CAP, true, &lo) ||
        !get_bound(c, s, "maximum", path, integer, INT_CAP, false, &hi))
        return -1;
    if (lo > hi) {
        gb_fail(b, "'minimum' is above 'maximum' at %s", path);
        return -1;
    }
    int32_t r = gb_rule(b, "bounded");
    gb_add_ref(b, gb_alt_new(b, r), int_range(b, lo, hi));
    if (!integer) { /* k.ddd stays inside when k in [max(lo,0), hi-1], -k.ddd when k in [max(1,-hi), -lo-1] */
        int32_t f = fraction(b);
        long long a = lo > 0 ? lo : 0;
        if (a <= hi - 1) {
            gb_alt *al = gb_alt_new(b, r);
            gb_add_ref(b, al, int_range(b, a, hi - 1));
            gb_add_ref(b, al, f);
        }
        long long na = hi < 0 ? -hi : 1;
        if (na <= -lo - 1) {
            gb_alt *al = gb_alt_new(b, r);
            gb_add_ref(b, al, int_range(b, -(-lo - 1), -na));
            gb_add_ref(b, al, f);
        }
        if (lo <= -1 && hi >= 0) {
            gb_alt *al = gb_alt_new(b, r);
            gb_add_lit(b, al, "-0", 2);
            gb_add_ref(b, al, f);
        }
    }
    return r;
}

static const char *const FORMATS[][2] = {
    {"date", "\\d{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12]\\d|3[01])|(?:0[469]|11)-(?:0[1-9]|[12]\\d|30)|"
             "02-(?:0[1-9]|1\\d|2[0-8]))"},
    {"date-time", "\\d{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12]\\d|3[01])|(?:0[469]|11)-(?:0[1-9]|[12]\\d|30)|"
                  "02-(?:0[1-9]|1\\d|2[0-8]))T(?:[01]\\d|2[0-3]):[0-5]\\d:[0-5]\\d(?:\\.\\d{1,6})?"
                  "(?:Z|[+-](?:[01]\\d|2[0-3]):[0-5]\\d)"},
    {"uuid", "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"},
    {"email", "[a-z0-9]+(?:\\.[a-z0-9]+)*@(?:[a-z0-9]+\\.)+[a-z]{2,6}"},
};

static bool get_count(sc *c, json_t *s, const char *key, const char *path, int def, int cap, int *out)
{
    json_t *v = json_object_get(s, key);
    *out = def;
    if (!v)
        return true;
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return gb_fail(c->b, "'%s' at %s must be a non-negative integer", key, path);
    if (json_integer_value(v) > cap)
        return gb_fail(c->b, "'%s' at %s is above the supported %d", key, path, cap);
    *out = (int)json_integer_value(v);
    return true;
}

static int32_t string_type(sc *c, json_t *s, const char *path)
{
    gb *b = c->b;
    json_t *pat = json_object_get(s, "pattern"), *fmt = json_object_get(s, "format");
    bool lens = json_object_get(s, "minLength") || json_object_get(s, "maxLength");
    if ((pat || fmt) && lens) {
        gb_fail(b, "'%s' together with minLength/maxLength is not supported (at %s)", pat ? "pattern" : "format",
                path);
        return -1;
    }
    if (pat && fmt) {
        gb_fail(b, "'pattern' together with 'format' is not supported (at %s)", path);
        return -1;
    }
    const char *re = NULL;
    if (fmt) {
        if (!json_is_string(fmt)) {
            gb_fail(b, "'format' at %s must be a string", path);
            return -1;
        }
        for (size_t i = 0; i < sizeof FORMATS / sizeof FORMATS[0]; i++)
            if (!strcmp(json_string_value(fmt), FORMATS[i][0]))
                re = FORMATS[i][1];
        if (!re) {
            gb_fail(b, "unsupported string format '%.64s' at %s (date, date-time, uuid, email)",
                    json_string_value(fmt), path);
            return -1;
        }
    } else if (pat) {
        if (!json_is_string(pat)) {
            gb_fail(b, "'pattern' at %s must be a string", path);
            return -1;
        }
        re = json_string_value(pat);
    }
    if (re) {
        int32_t body = gram_regex(b, re, strlen(re), path);
        int32_t r = gb_rule(b, "pstring");
        gb_alt *a = gb_alt_new(b, r);
        gb_add_byte(b, a, '"');
        gb_add_ref(b, a, body);
        gb_add_byte(b, a, '"');
        return r;
    }
    if (!lens)
        return gram_json_string(b);
    int min, max;
    if (!get_count(c, s, "minLength", path, 0, 4096, &min) || !get_count(c, s, "maxLength", path, -1, 4096, &max))
        return -1;
    if (max >= 0 && min > max) {
        gb_fail(b, "'minLength' is above 'maxLength' at %s", path);
        return -1;
    }
    return string_len(b, min, max);
}

static void member(gb *b, gb_alt *a, const char *key, int32_t value)
{
    json_t *k = json_string(key);
    char *txt = k ? dump_text(k) : NULL;
    json_decref(k);
    if (!txt) {
        gb_fail(b, "out of memory compiling the schema");
        return;
    }
    gb_add_lit(b, a, txt, strlen(txt));
    gb_add_byte(b, a, ':');
    gb_add_ref(b, a, value);
    free(txt);
}

static int32_t object_type(sc *c, json_t *s, const char *path)
{
    gb *b = c->b;
    json_t *props = json_object_get(s, "properties"), *req = json_object_get(s, "required");
    json_t *addl = json_object_get(s, "additionalProperties");
    if (addl && !json_is_false(addl)) {
        gb_fail(b, "'additionalProperties' other than false is not supported (at %s)", path);
        return -1;
    }
    if (props && !json_is_object(props)) {
        gb_fail(b, "'properties' at %s must be an object", path);
        return -1;
    }
    if (req && !json_is_array(req)) {
        gb_fail(b, "'required' at %s must be an array", path);
        return -1;
    }
    size_t n = props ? json_object_size(props) : 0, i = 0;
    if (n > 256) {
        gb_fail(b, "more than 256 properties at %s", path);
        return -1;
    }
    size_t ri;
    json_t *rv;
    json_array_foreach(req, ri, rv)
    {
        if (!json_is_string(rv) || !json_object_get(props, json_string_value(rv))) {
            gb_fail(b, "'required' at %s names a property that 'properties' does not define", path);
            return -1;
        }
    }
    /* O_i: members from i on, none written yet; A_i: some written (each starts with ',') */
    const char *keys[256];
    int32_t vals[256];
    bool required[256];
    const char *k;
    json_t *v;
    json_object_foreach(props, k, v)
    {
        char sub[512];
        snprintf(sub, sizeof sub, "%s/properties/%s", path, k);
        keys[i] = k;
        vals[i] = schema(c, v, sub);
        required[i] = false;
        json_array_foreach(req, ri, rv) required[i] = required[i] || !strcmp(json_string_value(rv), k);
        i++;
        if (!gb_ok(b))
            return -1;
    }
    int32_t O = gb_rule(b, "members"), A = gb_rule(b, "members,");
    gb_alt_new(b, O), gb_alt_new(b, A); /* O_n = A_n = "" */
    for (size_t j = n; j-- > 0;) {
        int32_t o = gb_rule(b, "members"), an = gb_rule(b, "members,");
        gb_alt *a = gb_alt_new(b, an);
        gb_add_byte(b, a, ',');
        member(b, a, keys[j], vals[j]);
        gb_add_ref(b, a, A);
        a = gb_alt_new(b, o);
        member(b, a, keys[j], vals[j]);
        gb_add_ref(b, a, A);
        if (!required[j]) {
            gb_add_ref(b, gb_alt_new(b, an), A);
            gb_add_ref(b, gb_alt_new(b, o), O);
        }
        O = o, A = an;
    }
    int32_t r = gb_rule(b, "object");
    gb_alt *a = gb_alt_new(b, r);
    gb_add_byte(b, a, '{');
    gb_add_ref(b, a, O);
    gb_add_byte(b, a, '}');
    return r;
}

static int32_t array_type(sc *c, json_t *s, const char *path)
{
    gb *b = c->b;
    json_t *items = json_object_get(s, "items"), *prefix = json_object_get(s, "prefixItems");
    if (prefix && !json_is_array(prefix)) {
        gb_fail(b, "'prefixItems' at %s must be an array", path);
        return -1;
    }
    int min, max;
    if (!get_count(c, s, "minItems", path, 0, 1024, &min) || !get_count(c, s, "maxItems", path, -1, 1024, &max))
        return -1;
    size_t np = prefix ? json_array_size(prefix) : 0;
    if (np > 256) {
        gb_fail(b, "more than 256 prefixItems at %s", path);
        return -1;
    }
    int32_t pre[256], item = -1;
    char sub[512];
    for (size_t i = 0; i < np && gb_ok(b); i++) {
        snprintf(sub, sizeof sub, "%s/prefixItems/%zu", path, i);
        pre[i] = schema(c, json_array_get(prefix, i), sub);
    }
    if (json_is_false(items)) {
        if (max < 0 || max > (int)np)
            max = (int)np;
    } else {
        snprintf(sub, sizeof sub, "%s/items", path);
        item = items ? schema(c, items, sub) : gram_json_value(b);
    }
    if (max >= 0 && min > max) {
        gb_fail(b, "the array at %s can hold no item count its minItems/maxItems/prefixItems allow", path);
        return -1;
    }
    if (!gb_ok(b))
        return -1;
    if (np == 0 && item >= 0) {
        /* '[' item (',' item){min-1,max-1} ']': a counted repetition, so the masker folds its
         * count (gram_mask.c fold_key) instead of walking the trie once per item index */
        int32_t more = gb_rule(b, "array-more");
        gb_alt *m = gb_alt_new(b, more);
        gb_add_byte(b, m, ',');
        gb_add_ref(b, m, item);
        int32_t r = gb_rule(b, "array");
        if (min == 0)
            gb_add_lit(b, gb_alt_new(b, r), "[]", 2);
        if (max != 0) {
            gb_alt *a = gb_alt_new(b, r);
            gb_add_byte(b, a, '[');
            gb_add_ref(b, a, item);
            gb_add_ref(b, a, gb_repeat(b, gb_elem_ref(more), min > 1 ? min - 1 : 0, max < 0 ? -1 : max - 1));
            gb_add_byte(b, a, ']');
        }
        return gb_ok(b) ? r : -1;
    }
    /* T_i: i items written; the next needs a ',' */
    int fixed = (int)np > min ? (int)np : min; /* past it, items repeat alike */
    int top = max >= 0 ? max : fixed;
    int32_t T = gb_rule(b, "items");
    if (max < 0) { /* T_fixed ::= ',' item T_fixed | "" */
        gb_alt *a = gb_alt_new(b, T);
        gb_add_byte(b, a, ',');
        gb_add_ref(b, a, item);
        gb_add_ref(b, a, T);
    }
    gb_alt_new(b, T);
    for (int i = top - 1; i >= 1 && gb_ok(b); i--) {
        int32_t t = gb_rule(b, "items");
        gb_alt *a = gb_alt_new(b, t);
        gb_add_byte(b, a, ',');
        gb_add_ref(b, a, i < (int)np ? pre[i] : item);
        gb_add_ref(b, a, T);
        if (i >= min)
            gb_alt_new(b, t);
        T = t;
    }
    int32_t r = gb_rule(b, "array");
    if (min == 0)
        gb_add_lit(b, gb_alt_new(b, r), "[]", 2);
    if (top >= 1 || max < 0) {
        gb_alt *a = gb_alt_new(b, r);
        gb_add_byte(b, a, '[');
        gb_add_ref(b, a, np ? pre[0] : item);
        gb_add_ref(b, a, T);
        gb_add_byte(b, a, ']');
    }
    return r;
}

static int32_t one_type(sc *c, json_t *s, const char *t, const char *path)
{
    gb *b = c->b;
    if (!strcmp(t, "string"))
        return string_type(c, s, path);
    if (!strcmp(t, "integer"))
        return number_type(c, s, path, true);
    if (!strcmp(t, "number"))
        return number_type(c, s, path, false);
    if (!strcmp(t, "boolean")) {
        int32_t r = gb_rule(b, "boolean");
        gb_add_lit(b, gb_alt_new(b, r), "true", 4);
        gb_add_lit(b, gb_alt_new(b, r), "false", 5);
        return r;
    }
    if (!strcmp(t, "null"))
        return lit_rule(b, "null");
    if (!strcmp(t, "object"))
        return object_type(c, s, path);
    if (!strcmp(t, "array"))
        return array_type(c, s, path);
    gb_fail(b, "unknown type '%.64s' at %s", t, path);
    return -1;
}

static const char *const KNOWN[] = {
    "type", "properties", "required", "additionalProperties", "enum", "const", "anyOf", "items",
    "prefixItems", "minItems", "maxItems", "$defs", "definitions", "$ref", "nullable", "minLength",
    "maxLength", "pattern", "format", "minimum", "maximum",
    /* annotations: no effect on what is valid */
    "description", "title", "default", "examples", "$schema", "$id", "$comment", "strict", "name",
};

static int32_t resolve_ref(sc *c, const char *ref, const char *path)
{
    gb *b = c->b;
    for (size_t i = 0; i < c->n_ref; i++)
        if (!strcmp(c->ref[i].ptr, ref))
            return c->ref[i].rule;
    json_t *target = NULL;
    if (!strcmp(ref, "#"))
        target = c->doc;
    else if (!strncmp(ref, "#/$defs/", 8))
        target = json_object_get(json_object_get(c->doc, "$defs"), ref + 8);
    else if (!strncmp(ref, "#/definitions/", 14))
        target = json_object_get(json_object_get(c->doc, "definitions"), ref + 14);
    else {
        gb_fail(b, "'$ref' '%.128s' at %s: only '#', '#/$defs/NAME' and '#/definitions/NAME' are supported", ref,
                path);
        return -1;
    }
    if (!target) {
        gb_fail(b, "'$ref' '%.128s' at %s points at nothing", ref, path);
        return -1;
    }
    if (c->n_ref == sizeof c->ref / sizeof c->ref[0]) {
        gb_fail(b, "more than 256 distinct '$ref' targets");
        return -1;
    }
    /* registered before it is compiled: a recursive reference finds this rule */
    int32_t r = gb_rule(b, ref);
    c->ref[c->n_ref].ptr = strdup(ref);
    c->ref[c->n_ref++].rule = r;
    int32_t body = schema(c, target, ref);
    gb_add_ref(b, gb_alt_new(b, r), body);
    return r;
}

static int32_t schema_body(sc *c, json_t *s, const char *path)
{
    gb *b = c->b;
    if (json_is_true(s))
        return gram_json_value(b);
    if (!json_is_object(s)) {
        gb_fail(b, "the schema at %s is not an object", path);
        return -1;
    }
    const char *k;
    json_t *v;
    json_object_foreach(s, k, v)
    {
        bool ok = false;
        for (size_t i = 0; i < sizeof KNOWN / sizeof KNOWN[0] && !ok; i++)
            ok = !strcmp(k, KNOWN[i]);
        if (!ok) {
            gb_fail(b, "unsupported JSON Schema keyword '%.64s' at %s", k, path);
            return -1;
        }
    }
    json_t *ref = json_object_get(s, "$ref");
    if (ref) {
        if (!json_is_string(ref)) {
            gb_fail(b, "'$ref' at %s must be a string", path);
            return -1;
        }
        return resolve_ref(c, json_string_value(ref), path);
    }
    if ((v = json_object_get(s, "const"))) {
        return literal(b, v);
    }
    if ((v = json_object_get(s, "enum"))) {
        if (!json_is_array(v) || !json_array_size(v)) {
            gb_fail(b, "'enum' at %s must be a non-empty array", path);
            return -1;
        }
        int32_t r = gb_rule(b, "enum");
        size_t i;
        json_t *e;
        json_array_foreach(v, i, e) gb_add_ref(b, gb_alt_new(b, r), literal(b, e));
        return r;
    }
    if ((v = json_object_get(s, "anyOf"))) {
        if (!json_is_array(v) || !json_array_size(v)) {
            gb_fail(b, "'anyOf' at %s must be a non-empty array", path);
            return -1;
        }
        int32_t r = gb_rule(b, "anyOf");
        size_t i;
        json_t *e;
        json_array_foreach(v, i, e)
        {
            char sub[512];
            snprintf(sub, sizeof sub, "%s/anyOf/%zu", path, i);
            gb_add_ref(b, gb_alt_new(b, r), schema(c, e, sub));
        }
        return r;
    }
    json_t *type = json_object_get(s, "type");
    if (!type) { /* the type the keywords imply, or any value */
        if (json_object_get(s, "properties") || json_object_get(s, "required"))
            return one_type(c, s, "object", path);
        if (json_object_get(s, "items") || json_object_get(s, "prefixItems"))
            return one_type(c, s, "array", path);
        if (json_object_get(s, "minLength") || json_object_get(s, "maxLength") || json_object_get(s, "pattern") ||
            json_object_get(s, "format"))
            return one_type(c, s, "string", path);
        if (json_object_get(s, "minimum") || json_object_get(s, "maximum"))
            return one_type(c, s, "number", path);
        return gram_json_value(b);
    }
    if (json_is_string(type))
        return one_type(c, s, json_string_value(type), path);
    if (!json_is_array(type) || !json_array_size(type)) {
        gb_fail(b, "'type' at %s must be a string or a non-empty array", path);
        return -1;
    }
    int32_t r = gb_rule(b, "types");
    size_t i;
    json_t *t;
    json_array_foreach(type, i, t)
    {
        if (!json_is_string(t)) {
            gb_fail(b, "'type' at %s must hold strings", path);
            return -1;
        }
        gb_add_ref(b, gb_alt_new(b, r), one_type(c, s, json_string_value(t), path));
    }
    return r;
}

static int32_t schema(sc *c, json_t *s, const char *path)
{
    if (!gb_ok(c->b))
        return -1;
    if (++c->depth > c->b->lim.max_nesting) {
        gb_fail(c->b, "the schema nests deeper than %u levels (at %s)", c->b->lim.max_nesting, path);
        return -1;
    }
    int32_t r = schema_body(c, s, path);
    json_t *nul = json_is_object(s) ? json_object_get(s, "nullable") : NULL;
    if (r >= 0 && json_is_true(nul)) {
        int32_t n = gb_rule(c->b, "nullable");
        gb_add_ref(c->b, gb_alt_new(c->b, n), r);
        gb_add_lit(c->b, gb_alt_new(c->b, n), "null", 4);
        r = n;
    }
    c->depth--;
    return gb_ok(c->b) ? r : -1;
}

int32_t gram_schema_rule(gb *b, const char *text, size_t len, const char *where)
{
    if (!gb_ok(b))
        return -1;
    if (len > b->lim.max_input_bytes) {
        gb_fail(b, "%s: the schema is larger than %zu bytes", where, b->lim.max_input_bytes);
        return -1;
    }
    json_error_t je;
    json_t *doc = json_loadb(text, len, JSON_DECODE_ANY, &je);
    if (!doc) {
        gb_fail(b, "%s: the schema is not JSON: %s at line %d", where, je.text, je.line);
        return -1;
    }
    sc c = {.b = b, .doc = doc};
    int32_t root = schema(&c, doc, "#");
    for (size_t i = 0; i < c.n_ref; i++)
        free(c.ref[i].ptr);
    json_decref(doc);
    return gb_ok(b) ? root : -1;
}

gram_grammar *gram_compile_schema(const char *text, size_t len, const gram_limits *lim, ts_err *err)
{
    gb b;
    gb_init(&b, lim, err);
    if (len > b.lim.max_input_bytes) {
        ts_err_set(err, TS_BAD_REQUEST, "the schema is larger than %zu bytes", b.lim.max_input_bytes);
        return NULL;
    }
    json_error_t je;
    json_t *doc = json_loadb(text, len, JSON_DECODE_ANY, &je);
    if (!doc) {
        ts_err_set(err, TS_BAD_REQUEST, "the schema is not JSON: %s at line %d", je.text, je.line);
        return NULL;
    }
    json_decref(doc);
    int32_t root = gram_schema_rule(&b, text, len, "schema");
    gram_grammar *g = gb_finish(&b, root);
    gb_free(&b);
    return g;
}
