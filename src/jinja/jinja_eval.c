/* jinja: the tree-walking interpreter, the entry points, and variables from JSON.
 * Scoping follows @huggingface/jinja: `for` opens one scope for the whole loop, `set`
 * writes the current scope, a macro body runs in a child of the *calling* scope, `if`
 * opens none. Output of an iteration that ends in break/continue is dropped, as there. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jinja_int.h"

static jval je_eval(jrt *rt, const jnode *n, jscope *scope); /* recursive: the tree walk */

#define DEF_STEPS 2000000u
#define DEF_OUTPUT ((size_t)8 << 20)
#define DEF_MEMORY ((size_t)64 << 20)
#define DEF_DEPTH 200u

static void step(jrt *rt)
{
    if (++rt->steps > rt->t->lim.max_steps)
        jfail_raise(&rt->f, JINJA_ERR_LIMIT, "the template ran past %llu steps",
                    (unsigned long long)rt->t->lim.max_steps);
}

static void enter(jrt *rt)
{
    if (++rt->depth > rt->t->lim.max_depth)
        jfail_raise(&rt->f, JINJA_ERR_LIMIT, "the template nests deeper than %u", rt->t->lim.max_depth);
}

/* ---- scopes ---- */
static jscope *scope_new(jrt *rt, jscope *parent)
{
    jscope *s = jarena_alloc(&rt->arena, sizeof *s, &rt->f);
    memset(s, 0, sizeof *s);
    s->parent = parent;
    return s;
}

static void scope_set(jrt *rt, jscope *s, int sym, jval v)
{
    if (!s) {
        rt->root[sym] = v;
        return;
    }
    for (size_t i = 0; i < s->n; i++)
        if (s->sym[i] == sym) {
            s->val[i] = v;
            return;
        }
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 4;
        int *ns = jarena_alloc(&rt->arena, cap * sizeof *ns, &rt->f);
        jval *nv = jarena_alloc(&rt->arena, cap * sizeof *nv, &rt->f);
        if (s->n) {
            memcpy(ns, s->sym, s->n * sizeof *ns);
            memcpy(nv, s->val, s->n * sizeof *nv);
        }
        s->sym = ns;
        s->val = nv;
        s->cap = cap;
    }
    s->sym[s->n] = sym;
    s->val[s->n++] = v;
}

static jval lookup(const jrt *rt, const jscope *s, int sym)
{
    for (; s; s = s->parent)
        for (size_t i = 0; i < s->n; i++)
            if (s->sym[i] == sym)
                return s->val[i];
    return rt->root[sym];
}

static int sym_of(const jinja_tpl *t, const char *name, size_t len)
{
    for (size_t i = 0; i < t->nsyms; i++)
        if (t->syms[i].len == len && memcmp(t->syms[i].s, name, len) == 0)
            return (int)i;
    return -1;
}

/* ---- sinks ---- */
static void sink_put(jrt *rt, jsink *k, const char *s, size_t n)
{
    if (!k->top) {
        jsb_put(rt, &k->sb, s, n);
        return;
    }
    if (k->top->len - rt->out_start + n > rt->t->lim.max_output)
        jfail_raise(&rt->f, JINJA_ERR_LIMIT, "the output is larger than %zu bytes", rt->t->lim.max_output);
    buf_put(k->top, s, n);
    if (buf_failed(k->top))
        jfail_raise(&rt->f, JINJA_ERR_FULL, "the output is larger than the buffer allows (%zu bytes)", k->top->limit);
}

static size_t sink_mark(const jsink *k)
{
    return k->top ? k->top->len : k->sb.len;
}

static void sink_cut(jsink *k, size_t mark)
{
    if (k->top)
        k->top->len = mark;
    else
        k->sb.len = mark;
}

static void sink_value(jrt *rt, jsink *k, jval v)
{
    if (v.t == JT_UNDEF || v.t == JT_NULL)
        return;
    if (v.t == JT_STR) {
        sink_put(rt, k, v.u.s, v.len);
        return;
    }
    jsb tmp = {0};
    js_tostring(rt, v, &tmp);
    sink_put(rt, k, tmp.p, tmp.len);
}

/* ---- expressions ---- */
static void exec_block(jrt *rt, jnode *const *body, size_t n, jscope *scope, jsink *k);

void je_args(jrt *rt, jnode *const *args, size_t n, jscope *scope, jval **pos, size_t *npos, jobj **kw)
{
    size_t cap = 0;
    for (size_t i = 0; i < n; i++)
        if (args[i]->kind != N_KWARG && args[i]->kind != N_KWSPREAD)
            cap++;
    jval *p = NULL;
    size_t np = 0;
    for (size_t i = 0; i < n; i++) {
        const jnode *a = args[i];
        if (a->kind == N_KWARG || a->kind == N_KWSPREAD)
            continue;
        jval v = je_eval(rt, a->kind == N_SPREAD ? a->a : a, scope);
        if (a->kind == N_SPREAD) {
            if (!jv_is_arr(v))
                JFAIL(rt, "Cannot unpack non-iterable type: %s", jv_type_name(v));
            jval *np2 = jarena_alloc(&rt->arena, (cap + v.u.a->n) * sizeof *np2, &rt->f);
            if (np)
                memcpy(np2, p, np * sizeof *np2);
            memcpy(np2 + np, v.u.a->v, v.u.a->n * sizeof *np2);
            p = np2;
            np += v.u.a->n;
            cap += v.u.a->n;
            continue;
        }
        if (!p)
            p = jarena_alloc(&rt->arena, (cap ? cap : 1) * sizeof *p, &rt->f);
        p[np++] = v;
    }
    jobj *o = NULL;
    for (size_t i = 0; i < n; i++) {
        const jnode *a = args[i];
        if (a->kind == N_KWARG) {
            if (!o)
                o = jobj_new(rt, 4);
            if (jobj_get(o, a->lit.u.s, a->lit.len))
                JFAIL(rt, "Got multiple values for keyword argument '%.*s'", (int)a->lit.len, a->lit.u.s);
            jobj_set(rt, o, a->lit.u.s, a->lit.len, je_eval(rt, a->a, scope));
        } else if (a->kind == N_KWSPREAD) {
            jval v = je_eval(rt, a->a, scope);
            if (!jv_is_obj(v))
                JFAIL(rt, "Argument after ** must be a mapping, not %s", jv_type_name(v));
            if (!o)
                o = jobj_new(rt, 4);
            for (size_t j = 0; j < v.u.o->n; j++) {
                if (jobj_get(o, v.u.o->k[j].s, v.u.o->k[j].len))
                    JFAIL(rt, "Got multiple values for keyword argument '%.*s'", (int)v.u.o->k[j].len, v.u.o->k[j].s);
                jobj_set(rt, o, v.u.o->k[j].s, v.u.o->k[j].len, v.u.o->v[j]);
            }
        }
    }
    *pos = p;
    *npos = np;
    *kw = o;
}

/* bindMacroArguments(): every parameter is bound (undefined if not given) before the
 * defaults are evaluated in the macro's own scope */
static void bind_args(jrt *rt, const char *name, jnode *const *params, size_t nparams, bool varargs, bool kwargs,
                      const jval *args, size_t nargs, jscope *scope)
{
    const jobj *kwin = NULL;
    if (nargs && args[nargs - 1].t == JT_KWARGS)
        kwin = args[--nargs].u.o;
    jobj *kw = jobj_new(rt, kwin ? kwin->n : 0);
    if (kwin)
        for (size_t i = 0; i < kwin->n; i++)
            jobj_set(rt, kw, kwin->k[i].s, kwin->k[i].len, kwin->v[i]);
    const jnode **pending = nparams ? jarena_alloc(&rt->arena, nparams * sizeof *pending, &rt->f) : NULL;
    size_t npend = 0;
    for (size_t i = 0; i < nparams; i++) {
        const jnode *p = params[i];
        jval v = jv_undef();
        bool given = false;
        if (i < nargs) {
            v = args[i];
            given = true;
        } else {
            jval *k = jobj_get(kw, p->lit.u.s, p->lit.len);
            if (k) {
                v = *k;
                given = true;
                /* delete it from kw */
                size_t at = (size_t)(k - kw->v);
                memmove(kw->k + at, kw->k + at + 1, (kw->n - at - 1) * sizeof *kw->k);
                memmove(kw->v + at, kw->v + at + 1, (kw->n - at - 1) * sizeof *kw->v);
                kw->n--;
            }
        }
        if (!given && p->kind == N_KWARG)
            pending[npend++] = p;
        scope_set(rt, scope, p->sym, v);
    }
    const jinja_tpl *t = rt->t;
    if (kwargs) {
        int s = sym_of(t, "kwargs", 6);
        if (s >= 0) {
            jval o = {.t = JT_OBJECT, .u.o = kw};
            scope_set(rt, scope, s, o);
        }
    } else if (kw->n > 0) {
        JFAIL(rt, "macro %s takes no keyword argument '%.*s'", name, (int)kw->k[0].len, kw->k[0].s);
    }
    if (varargs) {
        int s = sym_of(t, "varargs", 7);
        size_t extra = nargs > nparams ? nargs - nparams : 0;
        jval a = jv_arr(rt, JT_ARRAY, extra);
        if (extra)
            memcpy(a.u.a->v, args + nparams, extra * sizeof(jval));
        if (s >= 0)
            scope_set(rt, scope, s, a);
    } else if (nargs > nparams) {
        JFAIL(rt, "macro %s takes not more than %zu argument(s)", name, nparams);
    }
    for (size_t i = 0; i < npend; i++)
        scope_set(rt, scope, pending[i]->sym, je_eval(rt, pending[i]->a, scope));
}

static jval call_macro(jrt *rt, const jnode *m, const jval *args, size_t nargs, jscope *caller_scope)
{
    enter(rt);
    jscope *s = scope_new(rt, caller_scope);
    char name[80];
    snprintf(name, sizeof name, "'%.*s'", (int)(m->lit.len > 60 ? 60 : m->lit.len), m->lit.u.s);
    bind_args(rt, name, m->list, m->nlist, m->flag, m->flag2, args, nargs, s);
    jsink k = {0};
    exec_block(rt, m->list2, m->nlist2, s, &k);
    rt->depth--;
    return jsb_val(&k.sb);
}

static jval call_value(jrt *rt, jval fn, const jval *args, size_t nargs, jscope *scope)
{
    if (fn.t != JT_FUNC)
        JFAIL(rt, "Cannot call something that is not a function: got %s", jv_type_name(fn));
    const jfunc *f = fn.u.f;
    switch (f->kind) {
    case F_MACRO: return call_macro(rt, f->node, args, nargs, scope);
    case F_CALLER: {
        enter(rt);
        jscope *s = scope_new(rt, f->env);
        const jnode *cs = f->node;
        bind_args(rt, "None", cs->list, cs->nlist, cs->flag, cs->flag2, args, nargs, s);
        jsink k = {0};
        exec_block(rt, cs->list2, cs->nlist2, s, &k);
        rt->depth--;
        return jsb_val(&k.sb);
    }
    case F_METHOD: return jb_call_method(rt, f, args, nargs);
    default: return jb_call_global(rt, f, args, nargs);
    }
}

static jval eval_call(jrt *rt, const jnode *n, jscope *scope)
{
    jval *pos;
    size_t np;
    jobj *kw;
    je_args(rt, n->list, n->nlist, scope, &pos, &np, &kw);
    if (kw && kw->n > 0) {
        jval *p2 = jarena_alloc(&rt->arena, (np + 1) * sizeof *p2, &rt->f);
        if (np)
            memcpy(p2, pos, np * sizeof *p2);
        p2[np++] = (jval){.t = JT_KWARGS, .u.o = kw};
        pos = p2;
    }
    jval fn = je_eval(rt, n->a, scope);
    return call_value(rt, fn, pos, np, scope);
}

/* utils.ts slice() on n elements: the picked indices go to idx */
static size_t slice_indices(jrt *rt, size_t n, jval start, jval stop, jval stepv, size_t **idx)
{
    double len = (double)n;
    double st = stepv.t == JT_UNDEF ? 1 : stepv.u.n;
    int dir = st > 0 ? 1 : st < 0 ? -1 : 0;
    double s, e;
    if (dir >= 0) {
        s = start.t == JT_UNDEF ? 0 : start.u.n;
        s = s < 0 ? fmax(len + s, 0) : fmin(s, len);
        e = stop.t == JT_UNDEF ? len : stop.u.n;
        e = e < 0 ? fmax(len + e, 0) : fmin(e, len);
    } else {
        s = start.t == JT_UNDEF ? len - 1 : start.u.n;
        s = s < 0 ? fmax(len + s, -1) : fmin(s, len - 1);
        e = stop.t == JT_UNDEF ? -1 : stop.u.n;
        e = e < -1 ? fmax(len + e, -1) : fmin(e, len - 1);
    }
    size_t cnt = 0;
    *idx = jarena_alloc(&rt->arena, (n + 1) * sizeof **idx, &rt->f);
    if (dir == 0 || isnan(s) || isnan(e))
        return 0;
    for (double i = s; dir * i < dir * e; i += st) {
        step(rt);
        /* a fractional start reads array[1.5]: undefined in JavaScript */
        (*idx)[cnt++] = (i >= 0 && i < len && floor(i) == i) ? (size_t)i : (size_t)-1;
        if (cnt > n)
            break;
    }
    return cnt;
}

static size_t cp_count(const char *s, size_t len)
{
    size_t n = 0;
    for (size_t i = 0; i < len; i++)
        n += ((unsigned char)s[i] & 0xC0) != 0x80;
    return n;
}

static jval eval_slice(jrt *rt, jval obj, const jnode *sl, jscope *scope)
{
    if (!jv_is_arr(obj) && obj.t != JT_STR)
        JFAIL(rt, "Slice object must be an array or string");
    jval a = je_eval(rt, sl->a, scope), b = je_eval(rt, sl->b, scope), c = je_eval(rt, sl->c, scope);
    if (!(a.t == JT_INT || a.t == JT_UNDEF))
        JFAIL(rt, "Slice start must be numeric or undefined");
    if (!(b.t == JT_INT || b.t == JT_UNDEF))
        JFAIL(rt, "Slice stop must be numeric or undefined");
    if (!(c.t == JT_INT || c.t == JT_UNDEF))
        JFAIL(rt, "Slice step must be numeric or undefined");
    size_t *idx;
    if (jv_is_arr(obj)) {
        size_t cnt = slice_indices(rt, obj.u.a->n, a, b, c, &idx);
        jval r = jv_arr(rt, JT_ARRAY, cnt);
        for (size_t i = 0; i < cnt; i++)
            r.u.a->v[i] = idx[i] == (size_t)-1 ? jv_undef() : obj.u.a->v[idx[i]];
        return r;
    }
    /* strings slice by code point (Array.from) */
    size_t ncp = cp_count(obj.u.s, obj.len);
    size_t *off = jarena_alloc(&rt->arena, (ncp + 1) * sizeof *off, &rt->f);
    for (size_t i = 0, k = 0; i < obj.len; i++)
        if (((unsigned char)obj.u.s[i] & 0xC0) != 0x80)
            off[k++] = i;
    off[ncp] = obj.len;
    size_t cnt = slice_indices(rt, ncp, a, b, c, &idx);
    jsb out = {0};
    for (size_t i = 0; i < cnt; i++)
        if (idx[i] != (size_t)-1) /* join("") writes nothing for undefined */
            jsb_put(rt, &out, obj.u.s + off[idx[i]], off[idx[i] + 1] - off[idx[i]]);
    return jsb_val(&out);
}

/* String.prototype.at(i) in UTF-16 units */
static jval string_at(jrt *rt, jval s, double i)
{
    size_t u16 = js_utf16_len(s.u.s, s.len);
    if (isnan(i))
        i = 0;
    i = trunc(i);
    if (i < 0)
        i += (double)u16;
    if (i < 0 || i >= (double)u16)
        return jv_undef();
    size_t want = (size_t)i, pos = 0;
    for (size_t b = 0; b < s.len;) {
        size_t n;
        uint32_t cp = ju_decode(s.u.s + b, s.len - b, &n);
        size_t units = cp >= 0x10000 ? 2 : 1;
        if (want < pos + units) {
            if (units == 2) {
                char *r = jarena_alloc(&rt->arena, 3, &rt->f);
                memcpy(r, "\xEF\xBF\xBD", 3);
                return jv_str(r, 3);
            }
            return jv_str(s.u.s + b, n);
        }
        pos += units;
        b += n;
    }
    return jv_undef();
}

static jval eval_member(jrt *rt, const jnode *n, jscope *scope)
{
    jval obj = je_eval(rt, n->a, scope);
    jval prop;
    if (n->flag) {
        if (n->b->kind == N_SLICE)
            return eval_slice(rt, obj, n->b, scope);
        prop = je_eval(rt, n->b, scope);
    } else if (n->b->kind == N_INT) {
        prop = n->b->lit;
    } else {
        prop = n->b->lit;
    }
    if (jv_is_obj(obj) || obj.t == JT_NS) {
        if (prop.t != JT_STR)
            JFAIL(rt, "Cannot access property with non-string: got %s", jv_type_name(prop));
        jval *v = jobj_get(obj.u.o, prop.u.s, prop.len);
        if (v)
            return *v;
        return obj.t == JT_NS ? jv_undef() : jb_member_builtin(rt, obj, prop.u.s, prop.len);
    }
    if (jv_is_arr(obj) || obj.t == JT_STR) {
        if (prop.t == JT_INT) {
            if (obj.t == JT_STR)
                return string_at(rt, obj, prop.u.n);
            double i = isnan(prop.u.n) ? 0 : trunc(prop.u.n);
            if (i < 0)
                i += (double)obj.u.a->n;
            return i >= 0 && i < (double)obj.u.a->n ? obj.u.a->v[(size_t)i] : jv_undef();
        }
        if (prop.t == JT_STR)
            return jb_member_builtin(rt, obj, prop.u.s, prop.len);
        JFAIL(rt, "Cannot access property with non-string/non-number: got %s", jv_type_name(prop));
    }
    if (prop.t != JT_STR)
        JFAIL(rt, "Cannot access property with non-string: got %s", jv_type_name(prop));
    return jv_undef();
}

static jval arith(jop op, jval l, jval r)
{
    bool fl = l.t == JT_FLOAT || r.t == JT_FLOAT;
    double a = l.u.n, b = r.u.n, v;
    switch (op) {
    case OP_ADD: v = a + b; break;
    case OP_SUB: v = a - b; break;
    case OP_MUL: v = a * b; break;
    case OP_DIV: return jv_num(JT_FLOAT, a / b);
    case OP_FLOORDIV: v = floor(a / b); break;
    case OP_MOD: v = fmod(a, b); break;
    case OP_LT: return jv_bool(a < b);
    case OP_GT: return jv_bool(a > b);
    case OP_GE: return jv_bool(a >= b);
    case OP_LE: return jv_bool(a <= b);
    default: return jv_undef(); /* not numeric: the caller reports it */
    }
    return jv_num(fl ? JT_FLOAT : JT_INT, v);
}

static bool str_contains(jval hay, jval needle)
{
    if (needle.len == 0)
        return true;
    if (needle.len > hay.len)
        return false;
    for (size_t i = 0; i + needle.len <= hay.len; i++)
        if (hay.u.s[i] == needle.u.s[0] && memcmp(hay.u.s + i, needle.u.s, needle.len) == 0)
            return true;
    return false;
}

static const char *op_name(jop op)
{
    static const char *const N[] = {"+", "-", "~", "*", "/", "//", "%", "**", "==", "!=", "<", ">", "<=",
                                    ">=", "in", "not in", "and", "or", "not", "-", "+"};
    return N[op];
}

static jval eval_binary(jrt *rt, const jnode *n, jscope *scope)
{
    jval l = je_eval(rt, n->a, scope);
    if (n->op == OP_AND)
        return jv_truthy(l) ? je_eval(rt, n->b, scope) : l;
    if (n->op == OP_OR)
        return jv_truthy(l) ? l : je_eval(rt, n->b, scope);
    jval r = je_eval(rt, n->b, scope);
    jop op = n->op;
    if (op == OP_EQ)
        return jv_bool(js_loose_eq(rt, l, r));
    if (op == OP_NE)
        return jv_bool(!js_loose_eq(rt, l, r));
    if (l.t == JT_UNDEF || r.t == JT_UNDEF) {
        if (r.t == JT_UNDEF && (op == OP_IN || op == OP_NOTIN))
            return jv_bool(op == OP_NOTIN);
        JFAIL(rt, "Cannot perform operation %s on undefined values", op_name(op));
    }
    if (l.t == JT_NULL || r.t == JT_NULL)
        JFAIL(rt, "Cannot perform operation on null values");
    if (op == OP_CAT) {
        jsb out = {0};
        js_rawstring(rt, l, &out);
        js_rawstring(rt, r, &out);
        return jsb_val(&out);
    }
    bool lnum = l.t == JT_INT || l.t == JT_FLOAT || l.t == JT_BOOL;
    bool rnum = r.t == JT_INT || r.t == JT_FLOAT || r.t == JT_BOOL;
    if (op == OP_POW && lnum && rnum) {
        double a = l.t == JT_BOOL ? l.u.b : l.u.n, b = r.t == JT_BOOL ? r.u.b : r.u.n;
        if (a == 0 && b < 0)
            JFAIL(rt, "0.0 cannot be raised to a negative power");
        double v = pow(a, b);
        if (!isfinite(v))
            JFAIL(rt, "Exponentiation result is not a finite real number");
        return jv_num(l.t == JT_FLOAT || r.t == JT_FLOAT || b < 0 ? JT_FLOAT : JT_INT, v);
    }
    if (jv_is_num(l) && jv_is_num(r)) {
        jval v = arith(op, l, r);
        if (v.t != JT_UNDEF)
            return v;
    } else if (jv_is_arr(l) && jv_is_arr(r)) {
        if (op == OP_ADD) {
            jval v = jv_arr(rt, JT_ARRAY, l.u.a->n + r.u.a->n);
            memcpy(v.u.a->v, l.u.a->v, l.u.a->n * sizeof(jval));
            memcpy(v.u.a->v + l.u.a->n, r.u.a->v, r.u.a->n * sizeof(jval));
            return v;
        }
    } else if (jv_is_arr(r)) {
        bool member = false;
        for (size_t i = 0; i < r.u.a->n && !member; i++)
            member = js_strict_eq(r.u.a->v[i], l);
        if (op == OP_IN)
            return jv_bool(member);
        if (op == OP_NOTIN)
            return jv_bool(!member);
    }
    if ((l.t == JT_STR || r.t == JT_STR) && op == OP_ADD) {
        jsb out = {0};
        js_rawstring(rt, l, &out);
        js_rawstring(rt, r, &out);
        return jsb_val(&out);
    }
    if (l.t == JT_STR && r.t == JT_STR && (op == OP_IN || op == OP_NOTIN))
        return jv_bool(str_contains(r, l) == (op == OP_IN));
    if (l.t == JT_STR && jv_is_obj(r) && (op == OP_IN || op == OP_NOTIN))
        return jv_bool((jobj_get(r.u.o, l.u.s, l.len) != NULL) == (op == OP_IN));
    JFAIL(rt, "Unknown operator \"%s\" between %s and %s", op_name(op), jv_type_name(l), jv_type_name(r));
}

static jval je_eval(jrt *rt, const jnode *n, jscope *scope)
{
    if (!n)
        return jv_undef();
    step(rt);
    switch (n->kind) {
    case N_INT:
    case N_FLOAT:
    case N_STR:
    case N_TEXT: return n->lit;
    case N_IDENT: return lookup(rt, scope, n->sym);
    case N_ARRAY:
    case N_TUPLE: {
        enter(rt);
        jval v = jv_arr(rt, n->kind == N_ARRAY ? JT_ARRAY : JT_TUPLE, n->nlist);
        for (size_t i = 0; i < n->nlist; i++)
            v.u.a->v[i] = je_eval(rt, n->list[i], scope);
        rt->depth--;
        return v;
    }
    case N_OBJECT: {
        enter(rt);
        jobj *o = jobj_new(rt, n->nlist);
        for (size_t i = 0; i < n->nlist; i++) {
            jval k = je_eval(rt, n->list[i], scope);
            if (k.t != JT_STR)
                JFAIL(rt, "Object keys must be strings: got %s", jv_type_name(k));
            jobj_set(rt, o, k.u.s, k.len, je_eval(rt, n->list2[i], scope));
        }
        rt->depth--;
        return (jval){.t = JT_OBJECT, .u.o = o};
    }
    case N_MEMBER: {
        enter(rt);
        jval v = eval_member(rt, n, scope);
        rt->depth--;
        return v;
    }
    case N_CALL: {
        enter(rt);
        jval v = eval_call(rt, n, scope);
        rt->depth--;
        return v;
    }
    case N_UNARY: {
        enter(rt);
        jval a = je_eval(rt, n->a, scope);
        rt->depth--;
        if (n->op == OP_NOT)
            return jv_bool(!jv_truthy(a));
        if (!(jv_is_num(a) || a.t == JT_BOOL))
            JFAIL(rt, "Unknown operator \"%s\" for %s", op_name(n->op), jv_type_name(a));
        double v = a.t == JT_BOOL ? a.u.b : a.u.n;
        return jv_num(a.t == JT_FLOAT ? JT_FLOAT : JT_INT, n->op == OP_NEG ? -v : v);
    }
    case N_BINARY: {
        enter(rt);
        jval v = eval_binary(rt, n, scope);
        rt->depth--;
        return v;
    }
    case N_FILTER: {
        enter(rt);
        jval operand = je_eval(rt, n->a, scope);
        jval v = jb_filter(rt, operand, n->b, scope);
        rt->depth--;
        return v;
    }
    case N_TEST: {
        enter(rt);
        jval operand = je_eval(rt, n->a, scope);
        bool r = jb_test(rt, n->lit.u.s, n->lit.len, operand, jv_undef(), false);
        rt->depth--;
        return jv_bool(n->flag ? !r : r);
    }
    case N_SELECT: {
        enter(rt);
        jval v = jv_truthy(je_eval(rt, n->b, scope)) ? je_eval(rt, n->a, scope) : jv_undef();
        rt->depth--;
        return v;
    }
    case N_TERNARY: {
        enter(rt);
        jval v = jv_truthy(je_eval(rt, n->a, scope)) ? je_eval(rt, n->b, scope) : je_eval(rt, n->c, scope);
        rt->depth--;
        return v;
    }
    default: JFAIL(rt, "line %u: unknown node type", n->line);
    }
}

/* ---- statements ---- */
static void exec_set(jrt *rt, const jnode *n, jscope *scope)
{
    jval rhs;
    if (n->b) {
        rhs = je_eval(rt, n->b, scope);
    } else {
        jsink k = {0};
        exec_block(rt, n->list, n->nlist, scope, &k);
        rhs = jsb_val(&k.sb);
    }
    const jnode *as = n->a;
    if (as->kind == N_IDENT) {
        scope_set(rt, scope, as->sym, rhs);
    } else if (as->kind == N_TUPLE) {
        if (!jv_is_arr(rhs))
            JFAIL(rt, "Cannot unpack non-iterable type in set: %s", jv_type_name(rhs));
        if (rhs.u.a->n != as->nlist)
            JFAIL(rt, "Too %s items to unpack in set", as->nlist > rhs.u.a->n ? "few" : "many");
        for (size_t i = 0; i < as->nlist; i++) {
            if (as->list[i]->kind != N_IDENT)
                JFAIL(rt, "Cannot unpack to non-identifier in set");
            scope_set(rt, scope, as->list[i]->sym, rhs.u.a->v[i]);
        }
    } else if (as->kind == N_MEMBER) {
        jval obj = je_eval(rt, as->a, scope);
        if (obj.t != JT_NS)
            JFAIL(rt, "cannot assign attribute on non-namespace object");
        if (as->b->kind != N_IDENT)
            JFAIL(rt, "Cannot assign to member with non-identifier property");
        jobj_set(rt, obj.u.o, as->b->lit.u.s, as->b->lit.len, rhs);
    } else {
        JFAIL(rt, "line %u: invalid left-hand side of an assignment", n->line);
    }
}

static void set_loopvar(jrt *rt, const jnode *lv, jval cur, jscope *s)
{
    if (lv->kind == N_IDENT) {
        scope_set(rt, s, lv->sym, cur);
        return;
    }
    if (cur.t != JT_ARRAY)
        JFAIL(rt, "Cannot unpack non-iterable type: %s", jv_type_name(cur));
    if (lv->nlist != cur.u.a->n)
        JFAIL(rt, "Too %s items to unpack", lv->nlist > cur.u.a->n ? "few" : "many");
    for (size_t j = 0; j < lv->nlist; j++) {
        if (lv->list[j]->kind != N_IDENT)
            JFAIL(rt, "Cannot unpack non-identifier type");
        scope_set(rt, s, lv->list[j]->sym, cur.u.a->v[j]);
    }
}

static void exec_for(jrt *rt, const jnode *n, jscope *scope, jsink *k)
{
    jscope *s = scope_new(rt, scope);
    jval it = je_eval(rt, n->b, s);
    if (!(jv_is_arr(it) || jv_is_obj(it)))
        JFAIL(rt, "Expected iterable or object type in for loop: got %s", jv_type_name(it));
    size_t total = jv_is_arr(it) ? it.u.a->n : it.u.o->n;
    jval *items = jarena_alloc(&rt->arena, (total ? total : 1) * sizeof *items, &rt->f);
    size_t n_items = 0;
    for (size_t i = 0; i < total; i++) {
        step(rt);
        jval cur = jv_is_arr(it) ? it.u.a->v[i] : jv_str(it.u.o->k[i].s, it.u.o->k[i].len);
        if (n->c) {
            jscope *ls = scope_new(rt, s);
            set_loopvar(rt, n->a, cur, ls);
            if (!jv_truthy(je_eval(rt, n->c, ls)))
                continue;
        } else if (n->a->kind == N_TUPLE && cur.t != JT_ARRAY) {
            JFAIL(rt, "Cannot unpack non-iterable type: %s", jv_type_name(cur));
        }
        items[n_items++] = cur;
    }
    int sym_loop = sym_of(rt->t, "loop", 4);
    bool none = true;
    rt->loops++;
    for (size_t i = 0; i < n_items; i++) {
        step(rt);
        if (sym_loop >= 0) {
            jobj *lo = jobj_new(rt, 9);
            jobj_set(rt, lo, "index", 5, jv_num(JT_INT, (double)(i + 1)));
            jobj_set(rt, lo, "index0", 6, jv_num(JT_INT, (double)i));
            jobj_set(rt, lo, "revindex", 8, jv_num(JT_INT, (double)(n_items - i)));
            jobj_set(rt, lo, "revindex0", 9, jv_num(JT_INT, (double)(n_items - i - 1)));
            jobj_set(rt, lo, "first", 5, jv_bool(i == 0));
            jobj_set(rt, lo, "last", 4, jv_bool(i == n_items - 1));
            jobj_set(rt, lo, "length", 6, jv_num(JT_INT, (double)n_items));
            jobj_set(rt, lo, "previtem", 8, i > 0 ? items[i - 1] : jv_undef());
            jobj_set(rt, lo, "nextitem", 8, i + 1 < n_items ? items[i + 1] : jv_undef());
            scope_set(rt, s, sym_loop, (jval){.t = JT_OBJECT, .u.o = lo});
        }
        set_loopvar(rt, n->a, items[i], s);
        size_t mark = sink_mark(k);
        exec_block(rt, n->list, n->nlist, s, k);
        if (rt->ctl) {
            int c = rt->ctl;
            rt->ctl = 0;
            sink_cut(k, mark); /* the original drops the partial iteration */
            if (c == 1)
                break;
            continue;
        }
        none = false;
    }
    rt->loops--;
    if (none)
        exec_block(rt, n->list2, n->nlist2, s, k);
}

static void exec_stmt(jrt *rt, const jnode *n, jscope *scope, jsink *k)
{
    step(rt);
    switch (n->kind) {
    case N_TEXT: sink_put(rt, k, n->lit.u.s, n->lit.len); return;
    case N_COMMENT: return;
    case N_SET: exec_set(rt, n, scope); return;
    case N_IF:
        enter(rt);
        if (jv_truthy(je_eval(rt, n->a, scope)))
            exec_block(rt, n->list, n->nlist, scope, k);
        else
            exec_block(rt, n->list2, n->nlist2, scope, k);
        rt->depth--;
        return;
    case N_FOR:
        enter(rt);
        exec_for(rt, n, scope, k);
        rt->depth--;
        return;
    case N_MACRO: {
        jval f = jv_func(rt, F_MACRO, 0, jv_undef());
        f.u.f->node = n;
        scope_set(rt, scope, n->sym, f);
        return;
    }
    case N_CALLSTMT: {
        enter(rt);
        jval caller = jv_func(rt, F_CALLER, 0, jv_undef());
        caller.u.f->node = n;
        caller.u.f->env = scope;
        const jnode *call = n->a;
        jval *pos;
        size_t np;
        jobj *kw;
        je_args(rt, call->list, call->nlist, scope, &pos, &np, &kw);
        jval *args = jarena_alloc(&rt->arena, (np + 1) * sizeof *args, &rt->f);
        if (np)
            memcpy(args, pos, np * sizeof *args);
        args[np] = (jval){.t = JT_KWARGS, .u.o = kw ? kw : jobj_new(rt, 0)};
        jval fn = je_eval(rt, call->a, scope);
        if (fn.t != JT_FUNC)
            JFAIL(rt, "Cannot call something that is not a function: got %s", jv_type_name(fn));
        jscope *ns = scope_new(rt, scope);
        int sym_caller = sym_of(rt->t, "caller", 6);
        if (sym_caller >= 0)
            scope_set(rt, ns, sym_caller, caller);
        sink_value(rt, k, call_value(rt, fn, args, np + 1, ns));
        rt->depth--;
        return;
    }
    case N_FILTERSTMT: {
        enter(rt);
        jsink body = {0};
        exec_block(rt, n->list, n->nlist, scope, &body);
        sink_value(rt, k, jb_filter(rt, jsb_val(&body.sb), n->a, scope));
        rt->depth--;
        return;
    }
    case N_BREAK:
    case N_CONTINUE:
        if (rt->loops == 0)
            JFAIL(rt, "line %u: %s outside a loop", n->line, n->kind == N_BREAK ? "break" : "continue");
        rt->ctl = n->kind == N_BREAK ? 1 : 2;
        return;
    default: {
        jval v = je_eval(rt, n, scope);
        sink_value(rt, k, v);
    }
    }
}

static void exec_block(jrt *rt, jnode *const *body, size_t n, jscope *scope, jsink *k)
{
    for (size_t i = 0; i < n && !rt->ctl; i++)
        exec_stmt(rt, body[i], scope, k);
}

/* ---- variables from JSON ---- */
/* jansson's iterators take a non-const object; the walk only reads it */
static json_t *unconst(const json_t *j)
{
    union {
        const json_t *c;
        json_t *m;
    } u = {.c = j};
    return u.m;
}

static bool array_index_key(const char *k, size_t len, double *v)
{
    if (len == 0 || len > 10 || (len > 1 && k[0] == '0'))
        return false;
    double x = 0;
    for (size_t i = 0; i < len; i++) {
        if (k[i] < '0' || k[i] > '9')
            return false;
        x = x * 10 + (k[i] - '0');
    }
    *v = x;
    return x < 4294967295.0;
}

static jval from_json(jrt *rt, const json_t *j, unsigned depth)
{
    if (depth > rt->t->lim.max_depth)
        jfail_raise(&rt->f, JINJA_ERR_LIMIT, "the variables nest deeper than %u", rt->t->lim.max_depth);
    step(rt);
    switch (json_typeof(j)) {
    case JSON_STRING: return jv_str(json_string_value(j), json_string_length(j));
    case JSON_INTEGER: return jv_num(JT_INT, (double)json_integer_value(j));
    case JSON_REAL: {
        double d = json_real_value(j);
        return jv_num(isfinite(d) && floor(d) == d ? JT_INT : JT_FLOAT, d);
    }
    case JSON_TRUE: return jv_bool(true);
    case JSON_FALSE: return jv_bool(false);
    case JSON_NULL: return jv_null();
    case JSON_ARRAY: {
        size_t n = json_array_size(j);
        jval a = jv_arr(rt, JT_ARRAY, n);
        for (size_t i = 0; i < n; i++)
            a.u.a->v[i] = from_json(rt, json_array_get(j, i), depth + 1);
        return a;
    }
    case JSON_OBJECT: {
        size_t n = json_object_size(j);
        jobj *o = jobj_new(rt, n);
        const char *key;
        json_t *v;
        /* JavaScript lists integer-like keys first, ascending */
        size_t nint = 0;
        json_object_foreach(unconst(j), key, v) {
            double x;
            if (key[0] >= '0' && key[0] <= '9' && array_index_key(key, strlen(key), &x))
                nint++;
        }
        if (nint) {
            double *xs = jarena_alloc(&rt->arena, nint * sizeof *xs, &rt->f);
            const char **ks = jarena_alloc(&rt->arena, nint * sizeof *ks, &rt->f);
            size_t m = 0;
            json_object_foreach(unconst(j), key, v) {
                double x;
                if (!array_index_key(key, strlen(key), &x))
                    continue;
                size_t at = m++;
                while (at > 0 && xs[at - 1] > x) {
                    xs[at] = xs[at - 1];
                    ks[at] = ks[at - 1];
                    at--;
                }
                xs[at] = x;
                ks[at] = key;
            }
            for (size_t i = 0; i < nint; i++)
                jobj_set(rt, o, ks[i], strlen(ks[i]), from_json(rt, json_object_get(j, ks[i]), depth + 1));
        }
        json_object_foreach(unconst(j), key, v) {
            double x;
            size_t kl = json_object_iter_key_len(json_object_key_to_iter(key));
            if (!nint || !array_index_key(key, kl, &x))
                jobj_set(rt, o, key, kl, from_json(rt, v, depth + 1));
        }
        return (jval){.t = JT_OBJECT, .u.o = o};
    }
    }
    return jv_undef();
}

/* ---- entry points ---- */
static int compile_run(jinja_tpl *t, const char *text, size_t len, jfail *f)
{
    if (setjmp(f->jb))
        return -1;
    for (size_t i = 0; i < len;) {
        size_t n = buf_utf8_len((const unsigned char *)text + i, len - i);
        if (n == 0)
            jfail_raise(f, JINJA_ERR_SYNTAX, "the template is not valid UTF-8 (byte %zu)", i);
        i += n;
    }
    jtok *toks;
    size_t ntoks;
    jinja_lex(text, len, &t->arena, f, &toks, &ntoks);
    jinja_parse(t, toks, ntoks, f);
    return 0;
}

int jinja_compile(const char *text, size_t len, const jinja_limits *limits, jinja_tpl **out, jinja_error *err)
{
    jinja_error scratch;
    if (!err)
        err = &scratch;
    err->kind = JINJA_OK;
    err->msg[0] = 0;
    *out = NULL;
    jinja_tpl *t = calloc(1, sizeof *t);
    if (!t) {
        err->kind = JINJA_ERR_NOMEM;
        snprintf(err->msg, sizeof err->msg, "out of memory");
        return -1;
    }
    if (limits)
        t->lim = *limits;
    if (!t->lim.max_steps)
        t->lim.max_steps = DEF_STEPS;
    if (!t->lim.max_output)
        t->lim.max_output = DEF_OUTPUT;
    if (!t->lim.max_memory)
        t->lim.max_memory = DEF_MEMORY;
    if (!t->lim.max_depth)
        t->lim.max_depth = DEF_DEPTH;
    t->arena.cap = t->lim.max_memory + len * 8;
    jfail f = {.err = err};
    if (compile_run(t, text, len, &f) != 0) {
        jinja_free(t);
        return -1;
    }
    *out = t;
    return 0;
}

void jinja_free(jinja_tpl *t)
{
    if (!t)
        return;
    jarena_free(&t->arena);
    free(t);
}

static const char *const GLOBALS[] = {"false", "true", "none", "raise_exception", "range", "strftime_now",
                                      "True", "False", "None", "namespace"};

/* The guarded part of a render: returns -1 when the template unwound. Nothing here is
 * used after a longjmp but the jrt, which lives in the caller's frame. */
static int render_run(jrt *rt, const json_t *vars, buf *out)
{
    if (setjmp(rt->f.jb))
        return -1;
    const jinja_tpl *t = rt->t;
    rt->root = jarena_alloc(&rt->arena, (t->nsyms ? t->nsyms : 1) * sizeof(jval), &rt->f);
    for (size_t i = 0; i < t->nsyms; i++)
        rt->root[i] = jv_undef();
    static const jfkind GK[] = {0, 0, 0, F_RAISE, F_RANGE, F_STRFTIME, 0, 0, 0, F_NAMESPACE};
    for (size_t g = 0; g < sizeof GLOBALS / sizeof GLOBALS[0]; g++) {
        int s = sym_of(t, GLOBALS[g], strlen(GLOBALS[g]));
        if (s < 0)
            continue;
        jval v;
        if (g == 0 || g == 7)
            v = jv_bool(false);
        else if (g == 1 || g == 6)
            v = jv_bool(true);
        else if (g == 2 || g == 8)
            v = jv_null();
        else
            v = jv_func(rt, GK[g], 0, jv_undef());
        rt->root[s] = v;
    }
    if (vars && !json_is_object(vars))
        JFAIL(rt, "the variables must be a JSON object");
    if (vars) {
        const char *key;
        json_t *v;
        json_object_foreach(unconst(vars), key, v) {
            for (size_t g = 0; g < sizeof GLOBALS / sizeof GLOBALS[0]; g++)
                if (strcmp(key, GLOBALS[g]) == 0)
                    JFAIL(rt, "Variable already declared: %s", key);
            int s = sym_of(t, key, strlen(key));
            if (s >= 0)
                rt->root[s] = from_json(rt, v, 0);
        }
    }
    jsink k = {.top = out};
    exec_block(rt, t->body, t->nbody, NULL, &k);
    return 0;
}

int jinja_render(const jinja_tpl *t, const json_t *vars, const jinja_render_opts *opts, buf *out,
                 jinja_error *err)
{
    jinja_error scratch;
    if (!err)
        err = &scratch;
    err->kind = JINJA_OK;
    err->msg[0] = 0;
    jrt rt;
    memset(&rt, 0, sizeof rt);
    rt.t = t;
    rt.arena.cap = t->lim.max_memory;
    rt.f.err = err;
    rt.now = opts && opts->now ? opts->now : time(NULL);
    rt.out_start = out->len;
    int rc = render_run(&rt, vars, out);
    if (rc != 0) {
        out->len = rt.out_start;
        out->failed = false;
    }
    jarena_free(&rt.arena);
    return rc;
}
