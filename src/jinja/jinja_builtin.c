/* jinja: filters, tests, string and dict methods and the globals, each as
 * @huggingface/jinja defines it (the same names, the same types accepted, the same
 * results), so a template renders the same here as there. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jinja_int.h"

enum {
    M_UPPER, M_LOWER, M_STRIP, M_TITLE, M_CAPITALIZE, M_RSTRIP, M_LSTRIP, M_STARTSWITH, M_ENDSWITH,
    M_SPLIT, M_REPLACE, M_STR_END,
    M_GET = M_STR_END, M_ITEMS, M_KEYS, M_VALUES, M_DICTSORT, M_END
};
static const char *const METHOD[] = {"upper", "lower", "strip", "title", "capitalize", "rstrip", "lstrip",
                                     "startswith", "endswith", "split", "replace",
                                     "get", "items", "keys", "values", "dictsort"};

/* w is a literal: its length is known at compile time (names are compared on every call) */
#define name_is(s, len, w) ((len) == sizeof(w) - 1 && memcmp((s), (w), sizeof(w) - 1) == 0)

static bool name_eq(const char *s, size_t len, const char *w)
{
    return len == strlen(w) && memcmp(s, w, len) == 0;
}

jval jb_member_builtin(jrt *rt, jval obj, const char *name, size_t len)
{
    if (obj.t == JT_STR) {
        if (name_is(name, len, "length"))
            return jv_num(JT_INT, (double)js_utf16_len(obj.u.s, obj.len));
        for (int m = 0; m < M_STR_END; m++)
            if (name_eq(name, len, METHOD[m]))
                return jv_func(rt, F_METHOD, m, obj);
    } else if (jv_is_arr(obj)) {
        if (name_is(name, len, "length"))
            return jv_num(JT_INT, (double)obj.u.a->n);
    } else if (jv_is_obj(obj)) {
        for (int m = M_GET; m < M_END; m++)
            if (name_eq(name, len, METHOD[m]))
                return jv_func(rt, F_METHOD, m, obj);
    }
    return jv_undef();
}

/* ---- strings ---- */
static char *str_copy(jrt *rt, jval s)
{
    char *p = jarena_alloc(&rt->arena, s.len + 1, &rt->f);
    memcpy(p, s.u.s, s.len);
    return p;
}

static jval str_case(jrt *rt, jval s, bool upper)
{
    return js_case(rt, s, upper);
}

static jval str_trim(jval s, bool start, bool end)
{
    size_t b = start ? js_trim_start(s.u.s, s.len) : 0;
    size_t e = end ? js_trim_end(s.u.s, b, s.len) : s.len;
    return jv_str(s.u.s + b, e - b);
}

static bool is_word(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

static jval str_title(jrt *rt, jval s)
{
    char *p = str_copy(rt, s);
    jval r = jv_str(p, s.len);
    for (size_t i = 0; i < r.len; i++)
        if (p[i] >= 'a' && p[i] <= 'z' && (i == 0 || !is_word(p[i - 1])))
            p[i] -= 32;
    return r;
}

/* charAt(0).toUpperCase() + the rest: the first UTF-16 unit (half of a character outside
 * the BMP stays as it is) */
static jval str_capitalize(jrt *rt, jval s)
{
    if (s.len == 0 || (unsigned char)s.u.s[0] >= 0xF0)
        return s;
    size_t n;
    (void)ju_decode(s.u.s, s.len, &n);
    jval first = js_case(rt, jv_str(s.u.s, n), true);
    jsb out = {0};
    jsb_put(rt, &out, first.u.s, first.len);
    jsb_put(rt, &out, s.u.s + n, s.len - n);
    return jsb_val(&out);
}

static bool has_prefix(jval s, jval p)
{
    return p.len <= s.len && memcmp(s.u.s, p.u.s, p.len) == 0;
}

static bool has_suffix(jval s, jval p)
{
    return p.len <= s.len && memcmp(s.u.s + s.len - p.len, p.u.s, p.len) == 0;
}

static const char *find(const char *h, size_t hl, const char *n, size_t nl)
{
    if (nl > hl)
        return NULL;
    for (size_t i = 0; i + nl <= hl; i++)
        if (h[i] == n[0] && memcmp(h + i, n, nl) == 0)
            return h + i;
    return NULL;
}

/* utils.ts replace(): count null or negative replaces all; an empty needle matches
 * before every code point and at the end */
static jval str_replace(jrt *rt, jval s, jval from, jval to, double count, bool has_count)
{
    if (has_count && count == 0)
        return s;
    double remaining = !has_count || count < 0 ? INFINITY : count;
    jsb out = {0};
    if (from.len == 0) {
        size_t i = 0;
        while (true) {
            if (remaining > 0) {
                jsb_put(rt, &out, to.u.s, to.len);
                remaining--;
            }
            if (i >= s.len)
                break;
            size_t n;
            (void)ju_decode(s.u.s + i, s.len - i, &n);
            jsb_put(rt, &out, s.u.s + i, n);
            i += n;
        }
        return jsb_val(&out);
    }
    size_t i = 0;
    while (i <= s.len) {
        const char *hit = find(s.u.s + i, s.len - i, from.u.s, from.len);
        if (!hit)
            break;
        size_t at = (size_t)(hit - s.u.s);
        jsb_put(rt, &out, s.u.s + i, at - i);
        if (remaining > 0) {
            jsb_put(rt, &out, to.u.s, to.len);
            remaining--;
        } else {
            jsb_put(rt, &out, from.u.s, from.len);
        }
        i = at + from.len;
    }
    jsb_put(rt, &out, s.u.s + i, s.len - i);
    return jsb_val(&out);
}

typedef struct {
    jval *v;
    size_t n, cap;
} vlist;

static void vl_push(jrt *rt, vlist *l, jval v)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 8;
        jval *nv = jarena_alloc(&rt->arena, cap * sizeof *nv, &rt->f);
        if (l->n)
            memcpy(nv, l->v, l->n * sizeof *nv);
        l->v = nv;
        l->cap = cap;
    }
    l->v[l->n++] = v;
}

static jval vl_val(jrt *rt, vlist *l)
{
    jval a = jv_arr(rt, JT_ARRAY, l->n);
    if (l->n)
        memcpy(a.u.a->v, l->v, l->n * sizeof(jval));
    return a;
}

static jval str_split(jrt *rt, jval s, const jval *args, size_t nargs)
{
    jval sep = nargs > 0 ? args[0] : jv_null();
    if (!(sep.t == JT_STR || sep.t == JT_NULL))
        JFAIL(rt, "sep argument must be a string or null");
    jval maxv = nargs > 1 ? args[1] : jv_num(JT_INT, -1);
    if (maxv.t != JT_INT)
        JFAIL(rt, "maxsplit argument must be a number");
    double maxsplit = maxv.u.n;
    vlist out = {0};
    if (sep.t == JT_NULL) {
        size_t b = js_trim_start(s.u.s, s.len);
        const char *t = s.u.s + b;
        size_t tl = s.len - b, i = 0;
        while (i < tl) {
            size_t k;
            while (i < tl && (k = js_space_len(t + i, tl - i)) > 0)
                i += k;
            if (i >= tl)
                break;
            size_t start = i;
            while (i < tl && js_space_len(t + i, tl - i) == 0)
                i++;
            if (maxsplit != -1 && (double)out.n >= maxsplit) {
                vl_push(rt, &out, jv_str(t + start, tl - start));
                break;
            }
            vl_push(rt, &out, jv_str(t + start, i - start));
        }
        return vl_val(rt, &out);
    }
    if (sep.len == 0)
        JFAIL(rt, "empty separator");
    size_t i = 0;
    while (true) {
        const char *hit = find(s.u.s + i, s.len - i, sep.u.s, sep.len);
        if (!hit) {
            vl_push(rt, &out, jv_str(s.u.s + i, s.len - i));
            break;
        }
        vl_push(rt, &out, jv_str(s.u.s + i, (size_t)(hit - s.u.s) - i));
        i = (size_t)(hit - s.u.s) + sep.len;
    }
    if (maxsplit != -1 && (double)out.n > maxsplit) {
        size_t keep = maxsplit < 0 ? (out.n + (size_t)(-maxsplit) > out.n ? 0 : 0) : (size_t)maxsplit;
        if (maxsplit < 0) { /* splice(negative) counts from the end */
            double k = (double)out.n + maxsplit;
            keep = k < 0 ? 0 : (size_t)k;
        }
        jsb rest = {0};
        for (size_t j = keep; j < out.n; j++) {
            if (j > keep)
                jsb_put(rt, &rest, sep.u.s, sep.len);
            jsb_put(rt, &rest, out.v[j].u.s, out.v[j].len);
        }
        out.n = keep;
        vl_push(rt, &out, jsb_val(&rest));
    }
    return vl_val(rt, &out);
}

static jval prefix_test(jrt *rt, jval s, const jval *args, size_t nargs, bool start)
{
    const char *name = start ? "startswith" : "endswith";
    if (nargs == 0)
        JFAIL(rt, "%s() requires at least one argument", name);
    jval p = args[0];
    if (p.t == JT_STR)
        return jv_bool(start ? has_prefix(s, p) : has_suffix(s, p));
    if (jv_is_arr(p)) {
        for (size_t i = 0; i < p.u.a->n; i++) {
            jval it = p.u.a->v[i];
            if (it.t != JT_STR)
                JFAIL(rt, "%s() tuple elements must be strings", name);
            if (start ? has_prefix(s, it) : has_suffix(s, it))
                return jv_bool(true);
        }
        return jv_bool(false);
    }
    JFAIL(rt, "%s() argument must be a string or tuple of strings", name);
}

static jval obj_items(jrt *rt, const jobj *o, int which)
{
    jval a = jv_arr(rt, JT_ARRAY, o->n);
    for (size_t i = 0; i < o->n; i++) {
        jval k = jv_str(o->k[i].s, o->k[i].len);
        if (which == M_KEYS) {
            a.u.a->v[i] = k;
        } else if (which == M_VALUES) {
            a.u.a->v[i] = o->v[i];
        } else {
            jval pair = jv_arr(rt, JT_ARRAY, 2);
            pair.u.a->v[0] = k;
            pair.u.a->v[1] = o->v[i];
            a.u.a->v[i] = pair;
        }
    }
    return a;
}

/* a stable merge sort whose comparator may unwind (js_compare on mixed types) */
typedef struct {
    jrt *rt;
    bool cs, reverse;
    int mode;          /* 0: the values, 1: pair[0], 2: pair[1], 3: an attribute path */
    jval attr;
} sortctx;

static jval attr_value(jval item, const char *path, size_t len);

static jval sort_key(const sortctx *c, jval v)
{
    if (c->mode == 1 || c->mode == 2)
        return v.u.a->v[c->mode - 1];
    if (c->mode == 3)
        return attr_value(v, c->attr.u.s, c->attr.len);
    return v;
}

static int sort_cmp(const sortctx *c, jval a, jval b)
{
    int r = js_compare(c->rt, sort_key(c, a), sort_key(c, b), c->cs);
    return c->reverse ? -r : r;
}

static void merge_sort(const sortctx *c, jval *v, jval *tmp, size_t n)
{
    if (n < 2)
        return;
    size_t h = n / 2;
    merge_sort(c, v, tmp, h);
    merge_sort(c, v + h, tmp, n - h);
    size_t i = 0, j = h, k = 0;
    while (i < h && j < n)
        tmp[k++] = sort_cmp(c, v[j], v[i]) < 0 ? v[j++] : v[i++];
    while (i < h)
        tmp[k++] = v[i++];
    while (j < n)
        tmp[k++] = v[j++];
    memcpy(v, tmp, n * sizeof *v);
}

static jval sorted(jrt *rt, jval arr, const sortctx *c)
{
    size_t n = arr.u.a->n;
    jval r = jv_arr(rt, JT_ARRAY, n);
    if (n)
        memcpy(r.u.a->v, arr.u.a->v, n * sizeof(jval));
    jval *tmp = jarena_alloc(&rt->arena, (n ? n : 1) * sizeof *tmp, &rt->f);
    merge_sort(c, r.u.a->v, tmp, n);
    return r;
}

/* positional args without a trailing KWARGS, and that KWARGS (or NULL) */
static size_t split_kwargs(const jval *args, size_t nargs, const jobj **kw)
{
    *kw = NULL;
    if (nargs && args[nargs - 1].t == JT_KWARGS) {
        *kw = args[nargs - 1].u.o;
        return nargs - 1;
    }
    return nargs;
}

static jval opt_arg(const jval *pos, size_t npos, size_t i, const jobj *kw, const char *name, jval def)
{
    if (i < npos)
        return pos[i];
    jval *k = kw ? jobj_get(kw, name, strlen(name)) : NULL;
    return k ? *k : def;
}

static jval dictsort(jrt *rt, jval self, const jval *args, size_t nargs)
{
    const jobj *kw;
    size_t np = 0;
    /* the original filters KWARGS out wherever it sits */
    jval *pos = jarena_alloc(&rt->arena, (nargs ? nargs : 1) * sizeof *pos, &rt->f);
    kw = NULL;
    for (size_t i = 0; i < nargs; i++) {
        if (args[i].t == JT_KWARGS)
            kw = args[i].u.o;
        else
            pos[np++] = args[i];
    }
    jval cs = opt_arg(pos, np, 0, kw, "case_sensitive", jv_bool(false));
    if (cs.t != JT_BOOL)
        JFAIL(rt, "case_sensitive must be a boolean");
    jval by = opt_arg(pos, np, 1, kw, "by", jv_str("key", 3));
    if (by.t != JT_STR)
        JFAIL(rt, "by must be a string");
    if (!name_is(by.u.s, by.len, "key") && !name_is(by.u.s, by.len, "value"))
        JFAIL(rt, "by must be either 'key' or 'value'");
    jval rev = opt_arg(pos, np, 2, kw, "reverse", jv_bool(false));
    if (rev.t != JT_BOOL)
        JFAIL(rt, "reverse must be a boolean");
    sortctx c = {rt, cs.u.b, rev.u.b, name_is(by.u.s, by.len, "key") ? 1 : 2, jv_undef()};
    return sorted(rt, obj_items(rt, self.u.o, M_ITEMS), &c);
}

jval jb_call_method(jrt *rt, const jfunc *f, const jval *args, size_t nargs)
{
    jval s = f->self;
    switch (f->id) {
    case M_UPPER: return str_case(rt, s, true);
    case M_LOWER: return str_case(rt, s, false);
    case M_STRIP: return str_trim(s, true, true);
    case M_LSTRIP: return str_trim(s, true, false);
    case M_RSTRIP: return str_trim(s, false, true);
    case M_TITLE: return str_title(rt, s);
    case M_CAPITALIZE: return str_capitalize(rt, s);
    case M_STARTSWITH: return prefix_test(rt, s, args, nargs, true);
    case M_ENDSWITH: return prefix_test(rt, s, args, nargs, false);
    case M_SPLIT: return str_split(rt, s, args, nargs);
    case M_REPLACE: {
        if (nargs < 2)
            JFAIL(rt, "replace() requires at least two arguments");
        if (args[0].t != JT_STR || args[1].t != JT_STR)
            JFAIL(rt, "replace() arguments must be strings");
        jval count = jv_null();
        if (nargs > 2) {
            if (args[2].t == JT_KWARGS) {
                jval *c = jobj_get(args[2].u.o, "count", 5);
                count = c ? *c : jv_null();
            } else {
                count = args[2];
            }
        }
        if (count.t != JT_INT && count.t != JT_NULL)
            JFAIL(rt, "replace() count argument must be a number or null");
        return str_replace(rt, s, args[0], args[1], count.t == JT_INT ? count.u.n : 0, count.t == JT_INT);
    }
    case M_GET: {
        jval key = nargs > 0 ? args[0] : jv_undef();
        if (key.t != JT_STR)
            JFAIL(rt, "Object key must be a string: got %s", jv_type_name(key));
        jval *v = jobj_get(s.u.o, key.u.s, key.len);
        if (v)
            return *v;
        return nargs > 1 ? args[1] : jv_null();
    }
    case M_ITEMS:
    case M_KEYS:
    case M_VALUES: return obj_items(rt, s.u.o, f->id);
    case M_DICTSORT: return dictsort(rt, s, args, nargs);
    }
    JFAIL(rt, "unknown method");
}

/* ---- globals ---- */
static jval fn_namespace(jrt *rt, const jval *args, size_t nargs)
{
    const jobj *kw;
    size_t np = split_kwargs(args, nargs, &kw);
    if (np > 1)
        JFAIL(rt, "namespace expected at most 1 argument, got %zu", np);
    jobj *o = jobj_new(rt, 4);
    if (np == 1) {
        jval src = args[0];
        if (jv_is_obj(src)) {
            for (size_t i = 0; i < src.u.o->n; i++)
                jobj_set(rt, o, src.u.o->k[i].s, src.u.o->k[i].len, src.u.o->v[i]);
        } else if (jv_is_arr(src)) {
            for (size_t i = 0; i < src.u.a->n; i++) {
                jval pair = src.u.a->v[i];
                jval k, v;
                if (jv_is_arr(pair) && pair.u.a->n == 2) {
                    k = pair.u.a->v[0];
                    v = pair.u.a->v[1];
                } else if (pair.t == JT_STR && js_utf16_len(pair.u.s, pair.len) == 2 &&
                           ((unsigned char)pair.u.s[0] < 0xF0)) {
                    size_t n1;
                    (void)ju_decode(pair.u.s, pair.len, &n1);
                    k = jv_str(pair.u.s, n1);
                    v = jv_str(pair.u.s + n1, pair.len - n1);
                } else {
                    JFAIL(rt, "namespace expected an object or an iterable of [key, value] pairs");
                }
                if (k.t != JT_STR)
                    JFAIL(rt, "namespace keys must be strings");
                jobj_set(rt, o, k.u.s, k.len, v);
            }
        } else {
            JFAIL(rt, "'%s' object is not iterable", jv_type_name(src));
        }
    }
    if (kw)
        for (size_t i = 0; i < kw->n; i++)
            jobj_set(rt, o, kw->k[i].s, kw->k[i].len, kw->v[i]);
    return (jval){.t = JT_NS, .u.o = o};
}

static jval fn_range(jrt *rt, const jval *args, size_t nargs)
{
    for (size_t i = 0; i < nargs; i++)
        if (!jv_is_num(args[i]))
            JFAIL(rt, "range() arguments must be numbers, got %s", jv_type_name(args[i]));
    if (nargs == 0 || nargs > 3)
        JFAIL(rt, "range() takes 1 to 3 numbers");
    double start = 0, stop, stepv = 1;
    if (nargs == 1) {
        stop = args[0].u.n;
    } else {
        start = args[0].u.n;
        stop = args[1].u.n;
        if (nargs == 3)
            stepv = args[2].u.n;
    }
    if (stepv == 0)
        JFAIL(rt, "range() step must not be zero");
    vlist out = {0};
    for (double i = start; stepv > 0 ? i < stop : i > stop; i += stepv) {
        if (++rt->steps > rt->t->lim.max_steps)
            jfail_raise(&rt->f, JINJA_ERR_LIMIT, "the template ran past %llu steps",
                        (unsigned long long)rt->t->lim.max_steps);
        vl_push(rt, &out, jv_num(floor(i) == i ? JT_INT : JT_FLOAT, i));
    }
    return vl_val(rt, &out);
}

static jval fn_strftime(jrt *rt, const jval *args, size_t nargs)
{
    static const char *const MON[] = {"January", "February", "March", "April", "May", "June", "July",
                                      "August", "September", "October", "November", "December"};
    if (nargs < 1 || args[0].t != JT_STR)
        JFAIL(rt, "strftime_now() needs a format string");
    struct tm tm;
    time_t now = rt->now;
    localtime_r(&now, &tm);
    jval f = args[0];
    jsb out = {0};
    for (size_t i = 0; i < f.len; i++) {
        if (f.u.s[i] != '%' || i + 1 >= f.len) {
            jsb_putc(rt, &out, f.u.s[i]);
            continue;
        }
        char c = f.u.s[i + 1], tmp[32];
        int n = -1;
        switch (c) {
        case 'Y': n = snprintf(tmp, sizeof tmp, "%d", tm.tm_year + 1900); break;
        case 'm': n = snprintf(tmp, sizeof tmp, "%02d", tm.tm_mon + 1); break;
        case 'd': n = snprintf(tmp, sizeof tmp, "%02d", tm.tm_mday); break;
        case 'H': n = snprintf(tmp, sizeof tmp, "%02d", tm.tm_hour); break;
        case 'M': n = snprintf(tmp, sizeof tmp, "%02d", tm.tm_min); break;
        case 'b': n = snprintf(tmp, sizeof tmp, "%.3s", MON[tm.tm_mon]); break;
        case 'B': n = snprintf(tmp, sizeof tmp, "%s", MON[tm.tm_mon]); break;
        case '%': n = snprintf(tmp, sizeof tmp, "%%"); break;
        }
        if (n < 0) {
            jsb_putc(rt, &out, '%');
            continue;
        }
        jsb_put(rt, &out, tmp, (size_t)n);
        i++;
    }
    return jsb_val(&out);
}

jval jb_call_global(jrt *rt, const jfunc *f, const jval *args, size_t nargs)
{
    switch (f->kind) {
    case F_NAMESPACE: return fn_namespace(rt, args, nargs);
    case F_RANGE: return fn_range(rt, args, nargs);
    case F_STRFTIME: return fn_strftime(rt, args, nargs);
    case F_RAISE: {
        jsb msg = {0};
        if (nargs > 0 && args[0].t != JT_UNDEF && args[0].t != JT_NULL) /* new Error(undefined): "" */
            js_rawstring(rt, args[0], &msg);
        size_t n = msg.len < sizeof rt->f.err->msg - 1 ? msg.len : sizeof rt->f.err->msg - 1;
        rt->f.err->kind = JINJA_ERR_RAISED;
        if (n)
            memcpy(rt->f.err->msg, msg.p, n);
        rt->f.err->msg[n] = 0;
        longjmp(rt->f.jb, 1);
    }
    default: JFAIL(rt, "not a function");
    }
}

/* ---- tests ---- */
static bool test_known(const char *name, size_t len)
{
    static const char *const T[] = {"boolean", "callable", "odd", "even", "false", "true", "none", "string",
                                    "number", "integer", "iterable", "mapping", "sequence", "lower", "upper",
                                    "defined", "undefined", "equalto", "eq"};
    for (size_t i = 0; i < sizeof T / sizeof T[0]; i++)
        if (name_eq(name, len, T[i]))
            return true;
    return false;
}

bool jb_test(jrt *rt, const char *name, size_t len, jval v, jval arg, bool has_arg)
{
#define T(w) name_is(name, len, w)
    if (T("boolean"))
        return v.t == JT_BOOL;
    if (T("callable"))
        return v.t == JT_FUNC;
    if (T("odd") || T("even")) {
        if (v.t != JT_INT)
            JFAIL(rt, "cannot %s on %s", T("odd") ? "odd" : "even", jv_type_name(v));
        double r = fmod(v.u.n, 2);
        return T("odd") ? r != 0 : r == 0;
    }
    if (T("false"))
        return v.t == JT_BOOL && !v.u.b;
    if (T("true"))
        return v.t == JT_BOOL && v.u.b;
    if (T("none"))
        return v.t == JT_NULL;
    if (T("string"))
        return v.t == JT_STR;
    if (T("number"))
        return jv_is_num(v);
    if (T("integer"))
        return v.t == JT_INT;
    if (T("iterable"))
        return v.t == JT_ARRAY || v.t == JT_STR;
    if (T("mapping"))
        return jv_is_obj(v);
    if (T("sequence"))
        return jv_is_arr(v) || jv_is_obj(v) || v.t == JT_STR;
    if (T("lower") || T("upper")) {
        if (v.t != JT_STR)
            return false;
        jval c = js_case(rt, v, T("upper"));
        return c.len == v.len && memcmp(c.u.s, v.u.s, v.len) == 0;
    }
    if (T("defined"))
        return v.t != JT_UNDEF;
    if (T("undefined"))
        return v.t == JT_UNDEF;
    if (T("equalto") || T("eq")) {
        if (!has_arg)
            JFAIL(rt, "the test %.*s needs a value to compare with", (int)len, name);
        return js_strict_eq(v, arg);
    }
#undef T
    JFAIL(rt, "Unknown test: %.*s", (int)(len > 60 ? 60 : len), name);
}

/* ---- filters ---- */
static double js_parse_int(const char *s, size_t len)
{
    size_t i = js_trim_start(s, len);
    int sign = 1;
    if (i < len && (s[i] == '+' || s[i] == '-'))
        sign = s[i++] == '-' ? -1 : 1;
    if (i + 1 < len && s[i] == '0' && (s[i + 1] == 'x' || s[i + 1] == 'X'))
        return NAN; /* radix 10: "0x" stops at the x: 0 */
    double v = 0;
    bool any = false;
    for (; i < len && s[i] >= '0' && s[i] <= '9'; i++) {
        v = v * 10 + (s[i] - '0');
        any = true;
    }
    return any ? sign * v : NAN;
}

static double js_parse_float(const char *s, size_t len)
{
    size_t i = js_trim_start(s, len);
    char tmp[128];
    size_t n = 0;
    if (i < len && (s[i] == '+' || s[i] == '-') && n < sizeof tmp - 1)
        tmp[n++] = s[i++];
    if (len - i >= 8 && memcmp(s + i, "Infinity", 8) == 0)
        return tmp[0] == '-' && n ? -INFINITY : INFINITY;
    bool digit = false;
    while (i < len && s[i] >= '0' && s[i] <= '9' && n < sizeof tmp - 8)
        tmp[n++] = s[i++], digit = true;
    if (i < len && s[i] == '.' && n < sizeof tmp - 8) {
        tmp[n++] = s[i++];
        while (i < len && s[i] >= '0' && s[i] <= '9' && n < sizeof tmp - 8)
            tmp[n++] = s[i++], digit = true;
    }
    if (!digit)
        return NAN;
    if (i < len && (s[i] == 'e' || s[i] == 'E')) {
        size_t j = i + 1;
        if (j < len && (s[j] == '+' || s[j] == '-'))
            j++;
        if (j < len && s[j] >= '0' && s[j] <= '9') {
            while (i < j)
                tmp[n++] = s[i++];
            while (i < len && s[i] >= '0' && s[i] <= '9' && n < sizeof tmp - 1)
                tmp[n++] = s[i++];
        }
    }
    tmp[n] = 0;
    return strtod(tmp, NULL);
}

static jval do_indent(jrt *rt, jval s, double width, bool first, bool blank)
{
    if (width < 0)
        JFAIL(rt, "Invalid count value: %g", width);
    jsb out = {0};
    size_t b = 0, line = 0;
    while (true) {
        const char *nl = memchr(s.u.s + b, '\n', s.len - b);
        size_t e = nl ? (size_t)(nl - s.u.s) : s.len;
        if (line)
            jsb_putc(rt, &out, '\n');
        if (!((!first && line == 0) || (!blank && e == b)))
            for (double i = 0; i < width; i++)
                jsb_putc(rt, &out, ' ');
        jsb_put(rt, &out, s.u.s + b, e - b);
        if (!nl)
            break;
        b = e + 1;
        line++;
    }
    return jsb_val(&out);
}

/* Array.prototype.join over the raw values */
static jval js_join(jrt *rt, const jarr *a, jval sep)
{
    jsb out = {0};
    for (size_t i = 0; i < a->n; i++) {
        if (i)
            jsb_put(rt, &out, sep.u.s, sep.len);
        if (a->v[i].t != JT_UNDEF && a->v[i].t != JT_NULL)
            js_rawstring(rt, a->v[i], &out);
    }
    return jsb_val(&out);
}

static jval attr_value(jval item, const char *path, size_t len)
{
    jval v = item;
    size_t b = 0;
    while (true) {
        const char *dot = memchr(path + b, '.', len - b);
        size_t e = dot ? (size_t)(dot - path) : len;
        if (jv_is_obj(v) || v.t == JT_NS) {
            jval *g = jobj_get(v.u.o, path + b, e - b);
            v = g ? *g : jv_undef();
        } else if (jv_is_arr(v)) {
            /* parseInt(part, 10) */
            double idx = js_parse_int(path + b, e - b);
            if (!isnan(idx) && idx >= 0 && idx < (double)v.u.a->n)
                v = v.u.a->v[(size_t)idx];
            else
                return jv_undef();
        } else {
            return jv_undef();
        }
        if (!dot)
            break;
        b = e + 1;
    }
    return v;
}

static bool is_container(jval v)
{
    return jv_is_obj(v) || v.t == JT_NS;
}

static jval tojson_plain(jrt *rt, jval v, bool undef_to_null)
{
    jjson_opts o = {.item_sep = ", ", .item_sep_len = 2, .key_sep = ": ", .key_sep_len = 2, .undef_to_null = undef_to_null};
    jsb out = {0};
    js_tojson(rt, v, &o, 0, &out);
    return jsb_val(&out);
}

static jval filter_ident(jrt *rt, jval v, const char *name, size_t len)
{
#define F(w) name_is(name, len, w)
    if (F("safe"))
        return v;
    if (F("tojson"))
        return tojson_plain(rt, v, true);
    if (jv_is_arr(v)) {
        const jarr *a = v.u.a;
        if (F("list"))
            return v;
        if (F("first") || F("last")) {
            if (a->n == 0)
                JFAIL(rt, "%s of an empty array", F("first") ? "first" : "last");
            return F("first") ? a->v[0] : a->v[a->n - 1];
        }
        if (F("length"))
            return jv_num(JT_INT, (double)a->n);
        if (F("reverse")) {
            jval r = jv_arr(rt, JT_ARRAY, a->n);
            for (size_t i = 0; i < a->n; i++)
                r.u.a->v[i] = a->v[a->n - 1 - i];
            return r;
        }
        if (F("sort")) {
            sortctx c = {rt, false, false, 0, jv_undef()};
            return sorted(rt, v, &c);
        }
        if (F("join"))
            return js_join(rt, a, jv_str("", 0));
        if (F("string"))
            return tojson_plain(rt, v, false);
        if (F("unique")) {
            vlist out = {0};
            for (size_t i = 0; i < a->n; i++) {
                bool seen = false;
                for (size_t j = 0; j < out.n && !seen; j++)
                    seen = js_strict_eq(out.v[j], a->v[i]) ||
                           (jv_is_num(out.v[j]) && jv_is_num(a->v[i]) && isnan(out.v[j].u.n) && isnan(a->v[i].u.n));
                if (!seen)
                    vl_push(rt, &out, a->v[i]);
            }
            return vl_val(rt, &out);
        }
        JFAIL(rt, "Unknown ArrayValue filter: %.*s", (int)len, name);
    }
    if (v.t == JT_STR) {
        if (F("length"))
            return jv_num(JT_INT, (double)js_utf16_len(v.u.s, v.len));
        if (F("upper") || F("lower"))
            return str_case(rt, v, F("upper"));
        if (F("title"))
            return str_title(rt, v);
        if (F("capitalize"))
            return str_capitalize(rt, v);
        if (F("trim"))
            return str_trim(v, true, true);
        if (F("indent"))
            return do_indent(rt, v, 4, false, false);
        if (F("join") || F("string"))
            return v;
        if (F("int")) {
            double x = js_parse_int(v.u.s, v.len);
            return jv_num(JT_INT, isnan(x) ? 0 : x);
        }
        if (F("float")) {
            double x = js_parse_float(v.u.s, v.len);
            return jv_num(JT_FLOAT, isnan(x) ? 0 : x);
        }
        JFAIL(rt, "Unknown StringValue filter: %.*s", (int)len, name);
    }
    if (jv_is_num(v)) {
        if (F("abs"))
            return jv_num(v.t, fabs(v.u.n));
        if (F("int"))
            return jv_num(JT_INT, floor(v.u.n));
        if (F("float"))
            return jv_num(JT_FLOAT, v.u.n);
        if (F("string")) {
            jsb out = {0};
            js_tostring(rt, v, &out);
            return jsb_val(&out);
        }
        JFAIL(rt, "Unknown NumericValue filter: %.*s", (int)len, name);
    }
    if (jv_is_obj(v)) {
        if (F("items"))
            return obj_items(rt, v.u.o, M_ITEMS);
        if (F("length"))
            return jv_num(JT_INT, (double)v.u.o->n);
        jval m = jb_member_builtin(rt, v, name, len);
        if (m.t == JT_FUNC)
            return jb_call_method(rt, m.u.f, NULL, 0);
        JFAIL(rt, "Unknown ObjectValue filter: %.*s", (int)len, name);
    }
    if (v.t == JT_BOOL) {
        if (F("bool"))
            return v;
        if (F("int"))
            return jv_num(JT_INT, v.u.b);
        if (F("float"))
            return jv_num(JT_FLOAT, v.u.b);
        if (F("string"))
            return jv_str(v.u.b ? "true" : "false", v.u.b ? 4 : 5);
        JFAIL(rt, "Unknown BooleanValue filter: %.*s", (int)len, name);
    }
#undef F
    JFAIL(rt, "Cannot apply filter \"%.*s\" to type: %s", (int)len, name, jv_type_name(v));
}

static jval kwarg(const jobj *kw, const char *name, jval def)
{
    jval *v = kw ? jobj_get(kw, name, strlen(name)) : NULL;
    return v ? *v : def;
}

static jval filter_call(jrt *rt, jval v, const jnode *call, jscope *scope)
{
    const jnode *callee = call->a;
    if (callee->kind != N_IDENT)
        JFAIL(rt, "Unknown filter: a computed name");
    const char *name = callee->lit.u.s;
    size_t len = callee->lit.len;
    jval *pos;
    size_t np;
    jobj *kw;
#define F(w) name_is(name, len, w)
#define ARGS() je_args(rt, call->list, call->nlist, scope, &pos, &np, &kw)
    if (F("tojson")) {
        ARGS();
        jval indent = kwarg(kw, "indent", jv_null());
        if (indent.t != JT_INT && indent.t != JT_NULL)
            JFAIL(rt, "If set, indent must be a number");
        jval ea = kwarg(kw, "ensure_ascii", jv_bool(false));
        if (ea.t != JT_BOOL)
            JFAIL(rt, "If set, ensure_ascii must be a boolean");
        jval sk = kwarg(kw, "sort_keys", jv_bool(false));
        if (sk.t != JT_BOOL)
            JFAIL(rt, "If set, sort_keys must be a boolean");
        jval seps = kwarg(kw, "separators", jv_null());
        jjson_opts o = {.ensure_ascii = ea.u.b, .sort_keys = sk.u.b, .undef_to_null = true};
        double ind = indent.t == JT_INT ? indent.u.n : 0;
        if (ind != 0 && !isnan(ind)) {
            if (ind < 0 || ind > 1000)
                JFAIL(rt, "Invalid count value: %g", ind);
            o.indent = (int)ind;
        }
        if (jv_is_arr(seps)) {
            if (seps.u.a->n != 2 || seps.u.a->v[0].t != JT_STR || seps.u.a->v[1].t != JT_STR)
                JFAIL(rt, "separators must be a tuple of two strings");
            o.item_sep = seps.u.a->v[0].u.s;
            o.item_sep_len = seps.u.a->v[0].len;
            o.key_sep = seps.u.a->v[1].u.s;
            o.key_sep_len = seps.u.a->v[1].len;
        } else if (seps.t != JT_NULL) {
            JFAIL(rt, "If set, separators must be a tuple of two strings");
        } else {
            o.item_sep = o.indent ? "," : ", ";
            o.item_sep_len = o.indent ? 1 : 2;
            o.key_sep = ": ";
            o.key_sep_len = 2;
        }
        jsb out = {0};
        js_tojson(rt, v, &o, 0, &out);
        return jsb_val(&out);
    }
    if (F("join")) {
        if (v.t != JT_STR && !jv_is_arr(v))
            JFAIL(rt, "Cannot apply filter \"join\" to type: %s", jv_type_name(v));
        ARGS();
        jval sep = np > 0 ? pos[0] : kwarg(kw, "separator", jv_str("", 0));
        if (sep.t != JT_STR)
            JFAIL(rt, "separator must be a string");
        if (jv_is_arr(v))
            return js_join(rt, v.u.a, sep);
        jsb out = {0};
        for (size_t i = 0; i < v.len;) {
            size_t n;
            (void)ju_decode(v.u.s + i, v.len - i, &n);
            if (i)
                jsb_put(rt, &out, sep.u.s, sep.len);
            jsb_put(rt, &out, v.u.s + i, n);
            i += n;
        }
        return jsb_val(&out);
    }
    if (F("int") || F("float")) {
        ARGS();
        bool is_int = F("int");
        jval def = np > 0 ? pos[0] : kwarg(kw, "default", jv_num(is_int ? JT_INT : JT_FLOAT, 0));
        if (v.t == JT_STR) {
            double x = is_int ? js_parse_int(v.u.s, v.len) : js_parse_float(v.u.s, v.len);
            return isnan(x) ? def : jv_num(is_int ? JT_INT : JT_FLOAT, x);
        }
        if (jv_is_num(v))
            return v;
        if (v.t == JT_BOOL)
            return jv_num(is_int ? JT_INT : JT_FLOAT, v.u.b);
        JFAIL(rt, "Cannot apply filter \"%s\" to type: %s", is_int ? "int" : "float", jv_type_name(v));
    }
    if (F("default")) {
        ARGS();
        jval def = np > 0 ? pos[0] : jv_str("", 0);
        jval boolean = np > 1 ? pos[1] : kwarg(kw, "boolean", jv_bool(false));
        if (boolean.t != JT_BOOL)
            JFAIL(rt, "`default` filter flag must be a boolean");
        if (v.t == JT_UNDEF || (boolean.u.b && !jv_truthy(v)))
            return def;
        return v;
    }
    if (jv_is_arr(v)) {
        if (F("sort")) {
            ARGS();
            jval rev = opt_arg(pos, np, 0, kw, "reverse", jv_bool(false));
            if (rev.t != JT_BOOL)
                JFAIL(rt, "reverse must be a boolean");
            jval cs = opt_arg(pos, np, 1, kw, "case_sensitive", jv_bool(false));
            if (cs.t != JT_BOOL)
                JFAIL(rt, "case_sensitive must be a boolean");
            jval attr = opt_arg(pos, np, 2, kw, "attribute", jv_null());
            if (!(attr.t == JT_STR || attr.t == JT_INT || attr.t == JT_NULL))
                JFAIL(rt, "attribute must be a string, integer, or null");
            sortctx c = {rt, cs.u.b, rev.u.b, attr.t == JT_NULL ? 0 : 3, attr};
            if (attr.t == JT_INT) {
                jsb s = {0};
                js_rawstring(rt, attr, &s);
                c.attr = jsb_val(&s);
            }
            return sorted(rt, v, &c);
        }
        if (F("selectattr") || F("rejectattr")) {
            bool sel = F("selectattr");
            for (size_t i = 0; i < v.u.a->n; i++)
                if (!is_container(v.u.a->v[i]))
                    JFAIL(rt, "`%s` can only be applied to array of objects", sel ? "selectattr" : "rejectattr");
            for (size_t i = 0; i < call->nlist; i++)
                if (call->list[i]->kind != N_STR)
                    JFAIL(rt, "arguments of `%s` must be strings", sel ? "selectattr" : "rejectattr");
            if (call->nlist < 1)
                JFAIL(rt, "`%s` needs an attribute name", sel ? "selectattr" : "rejectattr");
            jval attr = call->list[0]->lit;
            bool has_test = call->nlist > 1, has_val = call->nlist > 2;
            jval tname = has_test ? call->list[1]->lit : jv_undef();
            jval tval = has_val ? call->list[2]->lit : jv_undef();
            if (has_test && !test_known(tname.u.s, tname.len)) /* fails before any item is looked at */
                JFAIL(rt, "Unknown test: %.*s", (int)(tname.len > 60 ? 60 : tname.len), tname.u.s);
            vlist out = {0};
            for (size_t i = 0; i < v.u.a->n; i++) {
                jval *a = jobj_get(v.u.a->v[i].u.o, attr.u.s, attr.len);
                bool r = false;
                if (a)
                    r = has_test ? jb_test(rt, tname.u.s, tname.len, *a, tval, has_val) : jv_truthy(*a);
                if (r == sel)
                    vl_push(rt, &out, v.u.a->v[i]);
            }
            return vl_val(rt, &out);
        }
        if (F("map")) {
            ARGS();
            jval *attr = kw ? jobj_get(kw, "attribute", 9) : NULL;
            if (!attr)
                JFAIL(rt, "`map` expressions without `attribute` set are not currently supported.");
            if (attr->t != JT_STR)
                JFAIL(rt, "attribute must be a string");
            jval *def = jobj_get(kw, "default", 7);
            jval r = jv_arr(rt, JT_ARRAY, v.u.a->n);
            for (size_t i = 0; i < v.u.a->n; i++) {
                if (!is_container(v.u.a->v[i]))
                    JFAIL(rt, "items in map must be an object");
                jval x = attr_value(v.u.a->v[i], attr->u.s, attr->len);
                r.u.a->v[i] = x.t == JT_UNDEF ? (def ? *def : jv_undef()) : x;
            }
            return r;
        }
        JFAIL(rt, "Unknown ArrayValue filter: %.*s", (int)len, name);
    }
    if (v.t == JT_STR) {
        if (F("indent")) {
            ARGS();
            jval width = opt_arg(pos, np, 0, kw, "width", jv_num(JT_INT, 4));
            if (width.t != JT_INT)
                JFAIL(rt, "width must be a number");
            jval first = opt_arg(pos, np, 1, kw, "first", jv_bool(false));
            jval blank = opt_arg(pos, np, 2, kw, "blank", jv_bool(false));
            /* `first.value` is tested as JavaScript tests it: any array or map is true */
            bool ft = first.t >= JT_ARRAY || jv_truthy(first), bt = blank.t >= JT_ARRAY || jv_truthy(blank);
            return do_indent(rt, v, width.u.n, ft, bt);
        }
        if (F("replace")) {
            ARGS();
            jval *args = jarena_alloc(&rt->arena, (np + 1) * sizeof *args, &rt->f);
            if (np)
                memcpy(args, pos, np * sizeof *args);
            args[np] = (jval){.t = JT_KWARGS, .u.o = kw ? kw : jobj_new(rt, 0)};
            jfunc f = {.kind = F_METHOD, .id = M_REPLACE, .self = v};
            return jb_call_method(rt, &f, args, np + 1);
        }
        JFAIL(rt, "Unknown StringValue filter: %.*s", (int)len, name);
    }
    if (jv_is_obj(v)) {
        jval m = jb_member_builtin(rt, v, name, len);
        if (m.t == JT_FUNC) {
            ARGS();
            jval *args = jarena_alloc(&rt->arena, (np + 1) * sizeof *args, &rt->f);
            if (np)
                memcpy(args, pos, np * sizeof *args);
            size_t n = np;
            if (kw && kw->n)
                args[n++] = (jval){.t = JT_KWARGS, .u.o = kw};
            return jb_call_method(rt, m.u.f, args, n);
        }
        JFAIL(rt, "Unknown ObjectValue filter: %.*s", (int)len, name);
    }
#undef F
#undef ARGS
    JFAIL(rt, "Cannot apply filter \"%.*s\" to type: %s", (int)len, name, jv_type_name(v));
}

jval jb_filter(jrt *rt, jval operand, const jnode *filter, jscope *scope)
{
    if (filter->kind == N_IDENT)
        return filter_ident(rt, operand, filter->lit.u.s, filter->lit.len);
    if (filter->kind == N_CALL)
        return filter_call(rt, operand, filter, scope);
    JFAIL(rt, "Unknown filter: a %s expression", filter->kind == N_MEMBER ? "member" : "computed");
}
