/* jinja: values and the JavaScript conversions @huggingface/jinja inherits (toString,
 * ==, ===, sorting, JSON.stringify), reproduced because they decide what a template prints. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jinja_int.h"

jval jv_str(const char *s, size_t len)
{
    return (jval){.t = JT_STR, .len = len, .u.s = s};
}

jval jv_num(jtype t, double n)
{
    return (jval){.t = t, .u.n = n};
}

jval jv_bool(bool b)
{
    return (jval){.t = JT_BOOL, .u.b = b};
}

jval jv_undef(void)
{
    return (jval){.t = JT_UNDEF};
}

jval jv_null(void)
{
    return (jval){.t = JT_NULL};
}

jval jv_arr(jrt *rt, jtype t, size_t n)
{
    jarr *a = jarena_alloc(&rt->arena, sizeof *a + n * sizeof(jval), &rt->f);
    a->n = n;
    a->v = (jval *)(a + 1);
    return (jval){.t = t, .u.a = a};
}

jobj *jobj_new(jrt *rt, size_t cap)
{
    jobj *o = jarena_alloc(&rt->arena, sizeof *o, &rt->f);
    o->n = 0;
    o->cap = cap;
    o->k = cap ? jarena_alloc(&rt->arena, cap * sizeof *o->k, &rt->f) : NULL;
    o->v = cap ? jarena_alloc(&rt->arena, cap * sizeof *o->v, &rt->f) : NULL;
    return o;
}

jval *jobj_get(const jobj *o, const char *k, size_t klen)
{
    for (size_t i = 0; i < o->n; i++)
        if (o->k[i].len == klen && memcmp(o->k[i].s, k, klen) == 0)
            return &o->v[i];
    return NULL;
}

void jobj_set(jrt *rt, jobj *o, const char *k, size_t klen, jval v)
{
    jval *have = jobj_get(o, k, klen);
    if (have) {
        *have = v;
        return;
    }
    if (o->n == o->cap) {
        size_t cap = o->cap ? o->cap * 2 : 4;
        jkey *nk = jarena_alloc(&rt->arena, cap * sizeof *nk, &rt->f);
        jval *nv = jarena_alloc(&rt->arena, cap * sizeof *nv, &rt->f);
        if (o->n) {
            memcpy(nk, o->k, o->n * sizeof *nk);
            memcpy(nv, o->v, o->n * sizeof *nv);
        }
        o->k = nk;
        o->v = nv;
        o->cap = cap;
    }
    o->k[o->n] = (jkey){k, klen};
    o->v[o->n++] = v;
}

jval jv_func(jrt *rt, jfkind k, int id, jval self)
{
    jfunc *f = jarena_alloc(&rt->arena, sizeof *f, &rt->f);
    memset(f, 0, sizeof *f);
    f->kind = k;
    f->id = id;
    f->self = self;
    return (jval){.t = JT_FUNC, .u.f = f};
}

const char *jv_type_name(jval v)
{
    static const char *const N[] = {"UndefinedValue", "NullValue", "BooleanValue", "IntegerValue",
                                    "FloatValue", "StringValue", "ArrayValue", "TupleValue",
                                    "ObjectValue", "KeywordArgumentsValue", "NamespaceValue", "FunctionValue"};
    return N[v.t];
}

bool jv_is_num(jval v)
{
    return v.t == JT_INT || v.t == JT_FLOAT;
}

bool jv_is_arr(jval v)
{
    return v.t == JT_ARRAY || v.t == JT_TUPLE;
}

bool jv_is_obj(jval v)
{
    return v.t == JT_OBJECT || v.t == JT_KWARGS;
}

bool jv_truthy(jval v)
{
    switch (v.t) {
    case JT_UNDEF:
    case JT_NULL: return false;
    case JT_BOOL: return v.u.b;
    case JT_INT:
    case JT_FLOAT: return v.u.n != 0 && !isnan(v.u.n);
    case JT_STR: return v.len > 0;
    case JT_ARRAY:
    case JT_TUPLE: return v.u.a->n > 0;
    case JT_OBJECT:
    case JT_KWARGS: return v.u.o->n > 0;
    default: return true; /* a namespace (a JS Map) and a function are always truthy */
    }
}

void jsb_put(jrt *rt, jsb *b, const char *s, size_t n)
{
    if (n == 0)
        return;
    if (b->cap - b->len < n) {
        size_t cap = b->cap ? b->cap * 2 : 64;
        while (cap - b->len < n)
            cap *= 2;
        char *np = jarena_alloc(&rt->arena, cap, &rt->f);
        if (b->len)
            memcpy(np, b->p, b->len);
        b->p = np;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
}

void jsb_putc(jrt *rt, jsb *b, char c)
{
    jsb_put(rt, b, &c, 1);
}

jval jsb_val(jsb *b)
{
    return jv_str(b->len ? b->p : "", b->len);
}

static void put_num(jrt *rt, double n, jsb *out)
{
    char tmp[40];
    size_t k = js_num_str(n, tmp);
    jsb_put(rt, out, tmp, k);
}

/* FloatValue.toString(): -0 is "-0.0", integral values keep one decimal */
static void put_float(jrt *rt, double n, jsb *out)
{
    if (n == 0 && signbit(n)) {
        jsb_put(rt, out, "-0.0", 4);
    } else if (isfinite(n) && fmod(n, 1.0) == 0 && fabs(n) < 1e21) {
        char tmp[48];
        int k = snprintf(tmp, sizeof tmp, "%.1f", n);
        jsb_put(rt, out, tmp, (size_t)k);
    } else {
        put_num(rt, n, out);
    }
}

static void raw_array(jrt *rt, const jarr *a, jsb *out)
{
    /* String(array of RuntimeValues): join(",") calls each element's toString() */
    for (size_t i = 0; i < a->n; i++) {
        if (i)
            jsb_putc(rt, out, ',');
        js_tostring(rt, a->v[i], out);
    }
}

void js_rawstring(jrt *rt, jval v, jsb *out)
{
    switch (v.t) {
    case JT_UNDEF:
    case JT_NULL: /* a NullValue's value is undefined too in @huggingface/jinja */
        jsb_put(rt, out, "undefined", 9);
        return;
    case JT_BOOL: jsb_put(rt, out, v.u.b ? "true" : "false", v.u.b ? 4 : 5); return;
    case JT_INT:
    case JT_FLOAT: put_num(rt, v.u.n, out); return;
    case JT_STR: jsb_put(rt, out, v.u.s, v.len); return;
    case JT_ARRAY:
    case JT_TUPLE: raw_array(rt, v.u.a, out); return;
    case JT_OBJECT:
    case JT_KWARGS:
    case JT_NS: jsb_put(rt, out, "[object Map]", 12); return;
    case JT_FUNC: JFAIL(rt, "cannot convert a function to a string");
    }
}

void js_tostring(jrt *rt, jval v, jsb *out)
{
    switch (v.t) {
    case JT_FLOAT: put_float(rt, v.u.n, out); return;
    case JT_ARRAY:
    case JT_TUPLE:
    case JT_OBJECT:
    case JT_KWARGS:
    case JT_NS: {
        jjson_opts o = {.item_sep = ", ", .item_sep_len = 2, .key_sep = ": ", .key_sep_len = 2};
        js_tojson(rt, v, &o, 0, out);
        return;
    }
    default: js_rawstring(rt, v, out);
    }
}

size_t js_utf16_len(const char *s, size_t len)
{
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if ((c & 0xC0) != 0x80)
            n += c >= 0xF0 ? 2 : 1;
    }
    return n;
}

static bool is_nullish(jval v)
{
    return v.t == JT_UNDEF || v.t == JT_NULL;
}

static bool is_objlike(jval v)
{
    return v.t >= JT_ARRAY;
}

static const void *identity(jval v)
{
    switch (v.t) {
    case JT_ARRAY:
    case JT_TUPLE: return v.u.a;
    case JT_FUNC: return v.u.f;
    default: return v.u.o;
    }
}

bool js_strict_eq(jval a, jval b)
{
    if (is_nullish(a) || is_nullish(b)) /* none and undefined both hold JavaScript's undefined */
        return is_nullish(a) && is_nullish(b);
    if (jv_is_num(a) && jv_is_num(b))
        return a.u.n == b.u.n;
    if (is_objlike(a) && is_objlike(b))
        return identity(a) == identity(b);
    if (a.t != b.t)
        return false;
    switch (a.t) {
    case JT_BOOL: return a.u.b == b.u.b;
    case JT_STR: return a.len == b.len && memcmp(a.u.s, b.u.s, a.len) == 0;
    default: return true; /* undefined === undefined, null === null */
    }
}

/* ECMAScript StringToNumber */
static double js_str_to_num(const char *s, size_t len)
{
    size_t b = js_trim_start(s, len), e = js_trim_end(s, b, len);
    if (b == e)
        return 0;
    char tmp[128];
    if (e - b >= sizeof tmp)
        return NAN;
    memcpy(tmp, s + b, e - b);
    tmp[e - b] = 0;
    if (tmp[0] == '0' && (tmp[1] == 'x' || tmp[1] == 'X' || tmp[1] == 'o' || tmp[1] == 'O' || tmp[1] == 'b' || tmp[1] == 'B')) {
        int base = tmp[1] == 'x' || tmp[1] == 'X' ? 16 : tmp[1] == 'o' || tmp[1] == 'O' ? 8 : 2;
        if (!tmp[2])
            return NAN;
        double v = 0;
        for (const char *q = tmp + 2; *q; q++) {
            int d = *q >= '0' && *q <= '9' ? *q - '0' : *q >= 'a' && *q <= 'f' ? *q - 'a' + 10 : *q >= 'A' && *q <= 'F' ? *q - 'A' + 10 : 99;
            if (d >= base)
                return NAN;
            v = v * base + d;
        }
        return v;
    }
    const char *q = tmp;
    int sign = 1;
    if (*q == '+' || *q == '-')
        sign = *q++ == '-' ? -1 : 1;
    if (strcmp(q, "Infinity") == 0)
        return sign * INFINITY;
    /* StrDecimalLiteral: digits [. digits] [e[+-]digits], at least one digit in the mantissa */
    const char *r = q;
    bool digit = false;
    while (*r >= '0' && *r <= '9')
        r++, digit = true;
    if (*r == '.') {
        r++;
        while (*r >= '0' && *r <= '9')
            r++, digit = true;
    }
    if (!digit)
        return NAN;
    if (*r == 'e' || *r == 'E') {
        r++;
        if (*r == '+' || *r == '-')
            r++;
        if (!(*r >= '0' && *r <= '9'))
            return NAN;
        while (*r >= '0' && *r <= '9')
            r++;
    }
    if (*r)
        return NAN;
    return strtod(tmp, NULL);
}

bool js_loose_eq(jrt *rt, jval a, jval b)
{
    if (is_nullish(a) || is_nullish(b))
        return is_nullish(a) && is_nullish(b);
    if (is_objlike(a) && is_objlike(b))
        return identity(a) == identity(b);
    jsb tmp = {0};
    if (is_objlike(a)) {
        if (a.t == JT_FUNC)
            return false;
        js_rawstring(rt, a, &tmp);
        a = jsb_val(&tmp);
    }
    if (is_objlike(b)) {
        if (b.t == JT_FUNC)
            return false;
        js_rawstring(rt, b, &tmp);
        b = jsb_val(&tmp);
    }
    if (a.t == JT_STR && b.t == JT_STR)
        return a.len == b.len && memcmp(a.u.s, b.u.s, a.len) == 0;
    double x = a.t == JT_STR ? js_str_to_num(a.u.s, a.len) : a.t == JT_BOOL ? (double)a.u.b : a.u.n;
    double y = b.t == JT_STR ? js_str_to_num(b.u.s, b.len) : b.t == JT_BOOL ? (double)b.u.b : b.u.n;
    return x == y;
}

static bool numeric_like(jval v)
{
    return v.t == JT_INT || v.t == JT_FLOAT || v.t == JT_BOOL;
}

/* byte order, ASCII letters folded when not case-sensitive (js_compare lowers first) */
static int cmp_str(const char *a, size_t an, const char *b, size_t bn, bool cs)
{
    size_t n = an < bn ? an : bn;
    for (size_t i = 0; i < n; i++) {
        unsigned char x = (unsigned char)a[i], y = (unsigned char)b[i];
        if (!cs) {
            if (x >= 'A' && x <= 'Z')
                x += 32;
            if (y >= 'A' && y <= 'Z')
                y += 32;
        }
        if (x != y)
            return x < y ? -1 : 1;
    }
    return an < bn ? -1 : an > bn ? 1 : 0;
}

int js_compare(jrt *rt, jval a, jval b, bool cs)
{
    if (a.t == JT_NULL && b.t == JT_NULL)
        return 0;
    if (a.t == JT_NULL || b.t == JT_NULL)
        JFAIL(rt, "Cannot compare %s with %s", jv_type_name(a), jv_type_name(b));
    if (a.t == JT_UNDEF && b.t == JT_UNDEF)
        return 0;
    if (a.t == JT_UNDEF || b.t == JT_UNDEF)
        JFAIL(rt, "Cannot compare %s with %s", jv_type_name(a), jv_type_name(b));
    if (numeric_like(a) && numeric_like(b)) {
        double x = a.t == JT_BOOL ? a.u.b : a.u.n, y = b.t == JT_BOOL ? b.u.b : b.u.n;
        return x < y ? -1 : x > y ? 1 : 0;
    }
    if (a.t != b.t)
        JFAIL(rt, "Cannot compare different types: %s and %s", jv_type_name(a), jv_type_name(b));
    if (a.t == JT_STR) {
        if (!cs) {
            a = js_case(rt, a, false);
            b = js_case(rt, b, false);
        }
        return cmp_str(a.u.s, a.len, b.u.s, b.len, true);
    }
    JFAIL(rt, "Cannot compare type: %s", jv_type_name(a));
}

static void json_str(jrt *rt, const char *s, size_t n, bool ascii, jsb *out)
{
    jsb_putc(rt, out, '"');
    size_t run = 0;
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        const char *esc = NULL;
        char tmp[16];
        size_t el = 0, adv = 1;
        switch (c) {
        case '"': esc = "\\\""; el = 2; break;
        case '\\': esc = "\\\\"; el = 2; break;
        case '\b': esc = "\\b"; el = 2; break;
        case '\f': esc = "\\f"; el = 2; break;
        case '\n': esc = "\\n"; el = 2; break;
        case '\r': esc = "\\r"; el = 2; break;
        case '\t': esc = "\\t"; el = 2; break;
        default:
            if (c < 0x20) {
                el = (size_t)snprintf(tmp, sizeof tmp, "\\u%04x", c);
                esc = tmp;
            } else if (ascii && c >= 0x7F) {
                uint32_t cp = ju_decode(s + i, n - i, &adv);
                if (cp >= 0x10000) {
                    cp -= 0x10000;
                    el = (size_t)snprintf(tmp, sizeof tmp, "\\u%04x\\u%04x", 0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF));
                } else {
                    el = (size_t)snprintf(tmp, sizeof tmp, "\\u%04x", cp);
                }
                esc = tmp;
            }
        }
        if (esc) {
            jsb_put(rt, out, s + i - run, run);
            run = 0;
            jsb_put(rt, out, esc, el);
            i += adv;
        } else {
            run++;
            i++;
        }
    }
    jsb_put(rt, out, s + n - run, run);
    jsb_putc(rt, out, '"');
}

static void newline_pad(jrt *rt, int indent, unsigned depth, jsb *out)
{
    jsb_putc(rt, out, '\n');
    for (size_t i = 0; i < (size_t)indent * depth; i++)
        jsb_putc(rt, out, ' ');
}

void js_tojson(jrt *rt, jval v, const jjson_opts *o, unsigned depth, jsb *out)
{
    if (depth > rt->t->lim.max_depth)
        jfail_raise(&rt->f, JINJA_ERR_LIMIT, "tojson: the value nests deeper than %u", rt->t->lim.max_depth);
    switch (v.t) {
    case JT_NULL: jsb_put(rt, out, "null", 4); return;
    case JT_UNDEF:
        if (o->undef_to_null)
            jsb_put(rt, out, "null", 4);
        else
            jsb_put(rt, out, "undefined", 9);
        return;
    case JT_INT:
    case JT_FLOAT:
        if (!isfinite(v.u.n))
            jsb_put(rt, out, "null", 4);
        else
            put_num(rt, v.u.n, out);
        return;
    case JT_BOOL: jsb_put(rt, out, v.u.b ? "true" : "false", v.u.b ? 4 : 5); return;
    case JT_STR: json_str(rt, v.u.s, v.len, o->ensure_ascii, out); return;
    case JT_ARRAY: {
        const jarr *a = v.u.a;
        jsb_putc(rt, out, '[');
        for (size_t i = 0; i < a->n; i++) {
            if (i)
                jsb_put(rt, out, o->item_sep, o->item_sep_len);
            if (o->indent)
                newline_pad(rt, o->indent, depth + 1, out);
            js_tojson(rt, a->v[i], o, depth + 1, out);
        }
        if (o->indent && a->n)
            newline_pad(rt, o->indent, depth, out);
        jsb_putc(rt, out, ']');
        return;
    }
    case JT_OBJECT:
    case JT_NS: {
        const jobj *ob = v.u.o;
        size_t *order = NULL;
        if (o->sort_keys && ob->n > 1) {
            order = jarena_alloc(&rt->arena, ob->n * sizeof *order, &rt->f);
            for (size_t i = 0; i < ob->n; i++) {
                size_t j = i; /* insertion sort: stable, and objects are small */
                while (j > 0 && cmp_str(ob->k[order[j - 1]].s, ob->k[order[j - 1]].len, ob->k[i].s, ob->k[i].len, true) > 0) {
                    order[j] = order[j - 1];
                    j--;
                }
                order[j] = i;
            }
        }
        jsb_putc(rt, out, '{');
        for (size_t i = 0; i < ob->n; i++) {
            size_t k = order ? order[i] : i;
            if (i)
                jsb_put(rt, out, o->item_sep, o->item_sep_len);
            if (o->indent)
                newline_pad(rt, o->indent, depth + 1, out);
            json_str(rt, ob->k[k].s, ob->k[k].len, o->ensure_ascii, out);
            jsb_put(rt, out, o->key_sep, o->key_sep_len);
            js_tojson(rt, ob->v[k], o, depth + 1, out);
        }
        if (o->indent && ob->n)
            newline_pad(rt, o->indent, depth, out);
        jsb_putc(rt, out, '}');
        return;
    }
    default: JFAIL(rt, "Cannot convert to JSON: %s", jv_type_name(v));
    }
}
