/* jinja: the parser, a port of @huggingface/jinja's recursive descent (same precedence,
 * same accepted forms), into the AST of jinja_int.h. Nesting is bounded by the template's
 * max_depth so a hostile template cannot exhaust the stack. */
#include <stdlib.h>
#include <string.h>

#include "jinja_int.h"

typedef struct {
    jinja_tpl *t;
    const jtok *tk;
    size_t n, cur;
    unsigned depth;
    jfail *f;
} parser;

static const char *TOKNAME[] = {
    "Text", "NumericLiteral", "StringLiteral", "Identifier", "Equals", "OpenParen", "CloseParen",
    "OpenStatement", "CloseStatement", "OpenExpression", "CloseExpression", "OpenSquareBracket",
    "CloseSquareBracket", "OpenCurlyBracket", "CloseCurlyBracket", "Comma", "Dot", "Colon", "Pipe",
    "AdditiveBinaryOperator", "MultiplicativeBinaryOperator", "ExponentiationBinaryOperator",
    "ComparisonBinaryOperator", "UnaryOperator", "Comment"};

static unsigned line_here(const parser *p)
{
    if (p->cur < p->n)
        return p->tk[p->cur].line;
    return p->n ? p->tk[p->n - 1].line : 1;
}

#define PFAIL(p, ...) jfail_raise((p)->f, JINJA_ERR_SYNTAX, __VA_ARGS__)

static jnode *node(parser *p, jnkind k)
{
    jnode *nd = jarena_alloc(&p->t->arena, sizeof *nd, p->f);
    memset(nd, 0, sizeof *nd);
    nd->kind = k;
    nd->line = line_here(p);
    return nd;
}

static int intern(parser *p, const char *s, size_t len)
{
    jinja_tpl *t = p->t;
    for (size_t i = 0; i < t->nsyms; i++)
        if (t->syms[i].len == len && memcmp(t->syms[i].s, s, len) == 0)
            return (int)i;
    if ((t->nsyms & (t->nsyms - 1)) == 0) { /* grow at powers of two */
        size_t cap = t->nsyms ? t->nsyms * 2 : 16;
        jkey *ns = jarena_alloc(&t->arena, cap * sizeof *ns, p->f);
        if (t->nsyms)
            memcpy(ns, t->syms, t->nsyms * sizeof *ns);
        t->syms = ns;
    }
    t->syms[t->nsyms] = (jkey){s, len};
    return (int)t->nsyms++;
}

/* a growable list of nodes, copied into the arena when done */
typedef struct {
    jnode **v;
    size_t n, cap;
} nlist;

static void nl_push(parser *p, nlist *l, jnode *nd)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 8;
        jnode **nv = jarena_alloc(&p->t->arena, cap * sizeof *nv, p->f);
        if (l->n)
            memcpy(nv, l->v, l->n * sizeof *nv);
        l->v = nv;
        l->cap = cap;
    }
    l->v[l->n++] = nd;
}

static bool is(const parser *p, jtok_type t)
{
    return p->cur < p->n && p->tk[p->cur].type == t;
}

static bool tok_is_word(const jtok *t, const char *w)
{
    return t->type == TK_IDENT && t->len == strlen(w) && memcmp(t->s, w, t->len) == 0;
}

static bool is_ident(const parser *p, const char *w)
{
    return p->cur < p->n && tok_is_word(&p->tk[p->cur], w);
}

static bool is_statement(const parser *p, const char *const *names)
{
    if (!(p->cur + 1 < p->n && p->tk[p->cur].type == TK_OPEN_STMT))
        return false;
    for (; *names; names++)
        if (tok_is_word(&p->tk[p->cur + 1], *names))
            return true;
    return false;
}

static const jtok *expect(parser *p, jtok_type t, const char *what)
{
    if (p->cur >= p->n)
        PFAIL(p, "line %u: %s, got the end of the template", line_here(p), what);
    const jtok *k = &p->tk[p->cur++];
    if (k->type != t)
        PFAIL(p, "line %u: %s, got %s '%.*s'", k->line, what, TOKNAME[k->type], (int)(k->len > 40 ? 40 : k->len), k->s);
    return k;
}

static void expect_ident(parser *p, const char *w)
{
    if (!is_ident(p, w))
        PFAIL(p, "line %u: expected %s", line_here(p), w);
    p->cur++;
}

static void enter(parser *p)
{
    if (++p->depth > p->t->lim.max_depth)
        PFAIL(p, "line %u: the template nests deeper than %u", line_here(p), p->t->lim.max_depth);
}

static jnode *parse_any(parser *p);
static jnode *parse_expression(parser *p);
static jnode *parse_primary(parser *p);

/* statements until one of names opens the next statement; the end of input is an error */
static void parse_until(parser *p, const char *const *names, nlist *out)
{
    while (!is_statement(p, names)) {
        if (p->cur >= p->n)
            PFAIL(p, "line %u: the template ends inside a block: expected {%% %s %%}", line_here(p), names[0]);
        nl_push(p, out, parse_any(p));
    }
}

static jnode *parse_sequence(parser *p, bool primary)
{
    jnode *first = primary ? parse_primary(p) : parse_expression(p);
    if (!is(p, TK_COMMA))
        return first;
    nlist l = {0};
    nl_push(p, &l, first);
    while (true) {
        p->cur++;
        nl_push(p, &l, primary ? parse_primary(p) : parse_expression(p));
        if (!is(p, TK_COMMA))
            break;
    }
    jnode *t = node(p, N_TUPLE);
    t->list = l.v;
    t->nlist = l.n;
    return t;
}

typedef enum { ARGS_CALL, ARGS_PARAMS } argmode;

static void parse_args_list(parser *p, argmode mode, nlist *out)
{
    bool saw_kw = false, saw_spread = false;
    nlist names = {0};
    while (!is(p, TK_RPAREN)) {
        if (p->cur >= p->n)
            PFAIL(p, "line %u: the template ends inside an argument list", line_here(p));
        bool kwspread = is(p, TK_POW);
        bool spread = is(p, TK_MUL) && p->tk[p->cur].len == 1 && p->tk[p->cur].s[0] == '*';
        if (mode == ARGS_PARAMS && (kwspread || spread))
            PFAIL(p, "line %u: argument unpacking is not allowed in parameter declarations", line_here(p));
        if (kwspread) {
            p->cur++;
            jnode *s = node(p, N_KWSPREAD);
            s->a = parse_expression(p);
            nl_push(p, out, s);
            if (is(p, TK_COMMA))
                p->cur++;
            if (!is(p, TK_RPAREN))
                PFAIL(p, "line %u: expected closing parenthesis: ** must be applied to the final argument", line_here(p));
            break;
        }
        jnode *arg;
        if (spread) {
            if (saw_spread)
                PFAIL(p, "line %u: only one * argument unpacking is allowed", line_here(p));
            saw_spread = true;
            p->cur++;
            arg = node(p, N_SPREAD);
            arg->a = parse_expression(p);
        } else {
            arg = parse_expression(p);
            if (is(p, TK_EQUALS)) {
                p->cur++;
                if (arg->kind != N_IDENT)
                    PFAIL(p, "line %u: expected identifier for %s", line_here(p),
                          mode == ARGS_PARAMS ? "parameter declaration" : "keyword argument");
                jnode *kw = node(p, N_KWARG);
                kw->lit = arg->lit;
                kw->sym = arg->sym;
                kw->a = parse_expression(p);
                arg = kw;
            }
            if (mode == ARGS_PARAMS) {
                if (arg->kind != N_IDENT && arg->kind != N_KWARG)
                    PFAIL(p, "line %u: expected identifier for parameter declaration", line_here(p));
                for (size_t i = 0; i < names.n; i++)
                    if (names.v[i]->sym == arg->sym)
                        PFAIL(p, "line %u: duplicate parameter name: %.*s", line_here(p), (int)arg->lit.len, arg->lit.u.s);
                nl_push(p, &names, arg);
            }
            if (arg->kind == N_KWARG)
                saw_kw = true;
            else if (saw_kw)
                PFAIL(p, "line %u: %s", line_here(p),
                      mode == ARGS_CALL ? "positional arguments must come before keyword arguments"
                                        : "non-default argument follows default argument");
            else if (saw_spread)
                PFAIL(p, "line %u: positional arguments must not follow * argument unpacking", line_here(p));
        }
        nl_push(p, out, arg);
        if (is(p, TK_COMMA))
            p->cur++;
    }
}

static void parse_args(parser *p, argmode mode, jnode *into)
{
    expect(p, TK_LPAREN, "expected opening parenthesis for arguments list");
    nlist l = {0};
    parse_args_list(p, mode, &l);
    expect(p, TK_RPAREN, "expected closing parenthesis for arguments list");
    into->list = l.v;
    into->nlist = l.n;
}

static jnode *parse_member(parser *p, jnode *object)
{
    while (is(p, TK_DOT) || is(p, TK_LBRACKET)) {
        bool computed = is(p, TK_LBRACKET);
        p->cur++;
        jnode *prop;
        if (computed) {
            jnode *sl[3] = {0};
            size_t ns = 0;
            bool slice = false;
            while (!is(p, TK_RBRACKET)) {
                if (p->cur >= p->n)
                    PFAIL(p, "line %u: the template ends inside [...]", line_here(p));
                /* the original collects any number and checks the count of a slice only */
                if (is(p, TK_COLON)) {
                    if (ns < 3)
                        sl[ns] = NULL;
                    ns++;
                    p->cur++;
                    slice = true;
                } else {
                    jnode *e = parse_expression(p);
                    if (ns < 3)
                        sl[ns] = e;
                    ns++;
                    if (is(p, TK_COLON)) {
                        p->cur++;
                        slice = true;
                    }
                }
            }
            if (ns == 0)
                PFAIL(p, "line %u: expected at least one argument for member/slice expression", line_here(p));
            if (slice) {
                if (ns > 3)
                    PFAIL(p, "line %u: expected 0-3 arguments for slice expression", line_here(p));
                prop = node(p, N_SLICE);
                prop->a = sl[0];
                prop->b = sl[1];
                prop->c = sl[2];
            } else {
                prop = sl[0];
            }
            expect(p, TK_RBRACKET, "expected closing square bracket");
        } else {
            prop = parse_primary(p);
            if (prop->kind != N_IDENT && prop->kind != N_INT)
                PFAIL(p, "line %u: expected identifier or integer following dot operator", line_here(p));
        }
        jnode *m = node(p, N_MEMBER);
        m->a = object;
        m->b = prop;
        m->flag = computed;
        object = m;
    }
    return object;
}

static jnode *parse_call(parser *p, jnode *callee)
{
    enter(p);
    jnode *c = node(p, N_CALL);
    c->a = callee;
    parse_args(p, ARGS_CALL, c);
    jnode *e = parse_member(p, c);
    if (is(p, TK_LPAREN))
        e = parse_call(p, e);
    p->depth--;
    return e;
}

static jnode *parse_call_member(parser *p)
{
    jnode *m = parse_member(p, parse_primary(p));
    return is(p, TK_LPAREN) ? parse_call(p, m) : m;
}

static jnode *parse_unary_sign(parser *p)
{
    if (p->cur < p->n && (is(p, TK_UNARY) || is(p, TK_ADD)) && p->tk[p->cur].len == 1 &&
        (p->tk[p->cur].s[0] == '-' || p->tk[p->cur].s[0] == '+')) {
        jnode *u = node(p, N_UNARY);
        u->op = p->tk[p->cur].s[0] == '-' ? OP_NEG : OP_POS;
        p->cur++;
        enter(p);
        u->a = parse_unary_sign(p);
        p->depth--;
        return u;
    }
    return parse_call_member(p);
}

static jnode *parse_filter(parser *p)
{
    jnode *operand = parse_unary_sign(p);
    while (is(p, TK_PIPE)) {
        p->cur++;
        jnode *filter = parse_primary(p);
        if (filter->kind != N_IDENT)
            PFAIL(p, "line %u: expected identifier for the filter", line_here(p));
        if (is(p, TK_LPAREN))
            filter = parse_call(p, filter);
        jnode *fe = node(p, N_FILTER);
        fe->a = operand;
        fe->b = filter;
        operand = fe;
    }
    return operand;
}

static jnode *parse_test(parser *p)
{
    jnode *operand = parse_filter(p);
    while (is_ident(p, "is")) {
        p->cur++;
        bool neg = is_ident(p, "not");
        if (neg)
            p->cur++;
        jnode *name = parse_primary(p);
        if (name->kind != N_IDENT)
            PFAIL(p, "line %u: expected identifier for the test", line_here(p));
        jnode *t = node(p, N_TEST);
        t->a = operand;
        t->flag = neg;
        t->lit = name->lit;
        operand = t;
    }
    return operand;
}

static jnode *binary(parser *p, jop op, jnode *l, jnode *r)
{
    jnode *b = node(p, N_BINARY);
    b->op = op;
    b->a = l;
    b->b = r;
    return b;
}

static jnode *parse_power(parser *p)
{
    jnode *l = parse_test(p);
    while (is(p, TK_POW)) {
        p->cur++;
        l = binary(p, OP_POW, l, parse_test(p));
    }
    return l;
}

static jnode *parse_mul(parser *p)
{
    jnode *l = parse_power(p);
    while (is(p, TK_MUL)) {
        const jtok *t = &p->tk[p->cur++];
        jop op = t->s[0] == '*' ? OP_MUL : t->s[0] == '%' ? OP_MOD : t->len == 2 ? OP_FLOORDIV : OP_DIV;
        l = binary(p, op, l, parse_power(p));
    }
    return l;
}

static jnode *parse_add(parser *p)
{
    jnode *l = parse_mul(p);
    while (is(p, TK_ADD)) {
        char c = p->tk[p->cur++].s[0];
        l = binary(p, c == '+' ? OP_ADD : c == '-' ? OP_SUB : OP_CAT, l, parse_mul(p));
    }
    return l;
}

static jnode *parse_comparison(parser *p)
{
    jnode *l = parse_add(p);
    while (true) {
        jop op;
        if (p->cur + 1 < p->n && tok_is_word(&p->tk[p->cur], "not") && tok_is_word(&p->tk[p->cur + 1], "in")) {
            op = OP_NOTIN;
            p->cur += 2;
        } else if (is_ident(p, "in")) {
            op = OP_IN;
            p->cur++;
        } else if (is(p, TK_CMP)) {
            const jtok *t = &p->tk[p->cur++];
            if (t->len == 2)
                op = t->s[0] == '<' ? OP_LE : t->s[0] == '>' ? OP_GE : t->s[0] == '=' ? OP_EQ : OP_NE;
            else
                op = t->s[0] == '<' ? OP_LT : OP_GT;
        } else {
            break;
        }
        l = binary(p, op, l, parse_add(p));
    }
    return l;
}

static jnode *parse_not(parser *p)
{
    jnode *right = NULL;
    while (is_ident(p, "not")) {
        p->cur++;
        enter(p);
        jnode *arg = parse_not(p);
        p->depth--;
        right = node(p, N_UNARY);
        right->op = OP_NOT;
        right->a = arg;
    }
    return right ? right : parse_comparison(p);
}

static jnode *parse_and(parser *p)
{
    jnode *l = parse_not(p);
    while (is_ident(p, "and")) {
        p->cur++;
        l = binary(p, OP_AND, l, parse_not(p));
    }
    return l;
}

static jnode *parse_or(parser *p)
{
    jnode *l = parse_and(p);
    while (is_ident(p, "or")) {
        p->cur++;
        l = binary(p, OP_OR, l, parse_and(p));
    }
    return l;
}

static jnode *parse_if_expr(parser *p)
{
    jnode *a = parse_or(p);
    if (is_ident(p, "if")) {
        p->cur++;
        jnode *test = parse_or(p);
        if (is_ident(p, "else")) {
            p->cur++;
            enter(p);
            jnode *t = node(p, N_TERNARY);
            t->a = test;
            t->b = a;
            t->c = parse_if_expr(p);
            p->depth--;
            return t;
        }
        jnode *s = node(p, N_SELECT);
        s->a = a;
        s->b = test;
        return s;
    }
    return a;
}

static jnode *parse_expression(parser *p)
{
    enter(p);
    jnode *e = parse_if_expr(p);
    p->depth--;
    return e;
}

static jnode *parse_primary(parser *p)
{
    if (p->cur >= p->n)
        PFAIL(p, "line %u: the template ends inside an expression", line_here(p));
    const jtok *t = &p->tk[p->cur++];
    switch (t->type) {
    case TK_NUM: {
        bool fl = memchr(t->s, '.', t->len) != NULL;
        jnode *n = node(p, fl ? N_FLOAT : N_INT);
        char *tmp = jarena_alloc(&p->t->arena, t->len + 1, p->f);
        memcpy(tmp, t->s, t->len);
        tmp[t->len] = 0;
        n->lit.t = fl ? JT_FLOAT : JT_INT;
        n->lit.u.n = strtod(tmp, NULL); /* JavaScript's Number() of the same digits */
        return n;
    }
    case TK_STR: {
        size_t total = t->len, k = p->cur;
        while (k < p->n && p->tk[k].type == TK_STR)
            total += p->tk[k++].len;
        jnode *n = node(p, N_STR);
        n->lit.t = JT_STR;
        if (k == p->cur) {
            n->lit.u.s = t->s;
            n->lit.len = t->len;
            return n;
        }
        char *s = jarena_alloc(&p->t->arena, total + 1, p->f);
        memcpy(s, t->s, t->len);
        size_t off = t->len;
        for (; p->cur < k; p->cur++) {
            memcpy(s + off, p->tk[p->cur].s, p->tk[p->cur].len);
            off += p->tk[p->cur].len;
        }
        n->lit.u.s = s;
        n->lit.len = total;
        return n;
    }
    case TK_IDENT: {
        jnode *n = node(p, N_IDENT);
        n->lit.t = JT_STR;
        n->lit.u.s = t->s;
        n->lit.len = t->len;
        n->sym = intern(p, t->s, t->len);
        return n;
    }
    case TK_LPAREN: {
        jnode *e = parse_sequence(p, false);
        expect(p, TK_RPAREN, "expected closing parenthesis");
        return e;
    }
    case TK_LBRACKET: {
        nlist l = {0};
        while (!is(p, TK_RBRACKET)) {
            if (p->cur >= p->n)
                PFAIL(p, "line %u: the template ends inside [...]", line_here(p));
            nl_push(p, &l, parse_expression(p));
            if (is(p, TK_COMMA))
                p->cur++;
        }
        p->cur++;
        jnode *n = node(p, N_ARRAY);
        n->list = l.v;
        n->nlist = l.n;
        return n;
    }
    case TK_LBRACE: {
        nlist keys = {0}, vals = {0};
        while (!is(p, TK_RBRACE)) {
            if (p->cur >= p->n)
                PFAIL(p, "line %u: the template ends inside {...}", line_here(p));
            nl_push(p, &keys, parse_expression(p));
            expect(p, TK_COLON, "expected colon between key and value in object literal");
            nl_push(p, &vals, parse_expression(p));
            if (is(p, TK_COMMA))
                p->cur++;
        }
        p->cur++;
        jnode *n = node(p, N_OBJECT);
        n->list = keys.v;
        n->list2 = vals.v;
        n->nlist = n->nlist2 = keys.n;
        return n;
    }
    default:
        PFAIL(p, "line %u: unexpected token: %s", t->line, TOKNAME[t->type]);
    }
}

/* A macro that reads `varargs` or `kwargs` collects the extra arguments there (the
 * original walks the body for such reads; a read anywhere in the body counts here). */
static void scan_special(const jnode *n, bool *varargs, bool *kwargs, unsigned depth)
{
    if (!n || depth > 400)
        return;
    if (n->kind == N_IDENT) {
        if (n->lit.len == 7 && memcmp(n->lit.u.s, "varargs", 7) == 0)
            *varargs = true;
        if (n->lit.len == 6 && memcmp(n->lit.u.s, "kwargs", 6) == 0)
            *kwargs = true;
        return;
    }
    if (n->kind == N_MEMBER && !n->flag) {
        scan_special(n->a, varargs, kwargs, depth + 1);
        return;
    }
    scan_special(n->a, varargs, kwargs, depth + 1);
    scan_special(n->b, varargs, kwargs, depth + 1);
    scan_special(n->c, varargs, kwargs, depth + 1);
    for (size_t i = 0; i < n->nlist; i++)
        scan_special(n->list[i], varargs, kwargs, depth + 1);
    for (size_t i = 0; i < n->nlist2; i++)
        scan_special(n->list2[i], varargs, kwargs, depth + 1);
}

static jnode *parse_if_stmt(parser *p)
{
    static const char *const stop[] = {"elif", "else", "endif", NULL};
    static const char *const endif[] = {"endif", NULL};
    enter(p);
    jnode *n = node(p, N_IF);
    n->a = parse_expression(p);
    expect(p, TK_CLOSE_STMT, "expected closing statement token");
    nlist body = {0}, alt = {0};
    parse_until(p, stop, &body);
    if (is_statement(p, (const char *const[]){"elif", NULL})) {
        p->cur += 2;
        nl_push(p, &alt, parse_if_stmt(p));
    } else if (is_statement(p, (const char *const[]){"else", NULL})) {
        p->cur += 2;
        expect(p, TK_CLOSE_STMT, "expected closing statement token");
        parse_until(p, endif, &alt);
    }
    n->list = body.v;
    n->nlist = body.n;
    n->list2 = alt.v;
    n->nlist2 = alt.n;
    p->depth--;
    return n;
}

static void expect_end(parser *p, const char *word)
{
    expect(p, TK_OPEN_STMT, "expected {% token");
    expect_ident(p, word);
    expect(p, TK_CLOSE_STMT, "expected %} token");
}

static jnode *parse_statement(parser *p)
{
    expect(p, TK_OPEN_STMT, "expected opening statement token");
    if (p->cur >= p->n || p->tk[p->cur].type != TK_IDENT)
        PFAIL(p, "line %u: unknown statement, got %s", line_here(p), p->cur < p->n ? TOKNAME[p->tk[p->cur].type] : "the end");
    const jtok *name = &p->tk[p->cur];
    jnode *n;
    enter(p);
    if (tok_is_word(name, "set")) {
        p->cur++;
        n = node(p, N_SET);
        n->a = parse_sequence(p, false);
        if (is(p, TK_EQUALS)) {
            p->cur++;
            n->b = parse_sequence(p, false);
        } else {
            expect(p, TK_CLOSE_STMT, "expected %} token");
            nlist body = {0};
            parse_until(p, (const char *const[]){"endset", NULL}, &body);
            n->list = body.v;
            n->nlist = body.n;
            expect(p, TK_OPEN_STMT, "expected {% token");
            expect_ident(p, "endset");
        }
        expect(p, TK_CLOSE_STMT, "expected closing statement token");
    } else if (tok_is_word(name, "if")) {
        p->cur++;
        n = parse_if_stmt(p);
        expect_end(p, "endif");
    } else if (tok_is_word(name, "macro")) {
        p->cur++;
        n = node(p, N_MACRO);
        jnode *nm = parse_primary(p);
        if (nm->kind != N_IDENT)
            PFAIL(p, "line %u: expected identifier following macro statement", line_here(p));
        n->sym = nm->sym;
        n->lit = nm->lit;
        parse_args(p, ARGS_PARAMS, n);
        expect(p, TK_CLOSE_STMT, "expected closing statement token");
        nlist body = {0};
        parse_until(p, (const char *const[]){"endmacro", NULL}, &body);
        n->list2 = body.v;
        n->nlist2 = body.n;
        for (size_t i = 0; i < n->nlist; i++) /* defaults may read them too */
            if (n->list[i]->kind == N_KWARG)
                scan_special(n->list[i]->a, &n->flag, &n->flag2, 0);
        for (size_t i = 0; i < n->nlist2; i++)
            scan_special(n->list2[i], &n->flag, &n->flag2, 0);
        expect_end(p, "endmacro");
    } else if (tok_is_word(name, "for")) {
        p->cur++;
        n = node(p, N_FOR);
        n->a = parse_sequence(p, true);
        if (n->a->kind != N_IDENT && n->a->kind != N_TUPLE)
            PFAIL(p, "line %u: expected identifier/tuple for the loop variable", line_here(p));
        if (!is_ident(p, "in"))
            PFAIL(p, "line %u: expected `in` keyword following loop variable", line_here(p));
        p->cur++;
        jnode *it = parse_expression(p);
        if (it->kind == N_SELECT) {
            n->b = it->a;
            n->c = it->b;
        } else {
            n->b = it;
        }
        expect(p, TK_CLOSE_STMT, "expected closing statement token");
        nlist body = {0}, alt = {0};
        parse_until(p, (const char *const[]){"endfor", "else", NULL}, &body);
        if (is_statement(p, (const char *const[]){"else", NULL})) {
            p->cur += 2;
            expect(p, TK_CLOSE_STMT, "expected closing statement token");
            parse_until(p, (const char *const[]){"endfor", NULL}, &alt);
        }
        n->list = body.v;
        n->nlist = body.n;
        n->list2 = alt.v;
        n->nlist2 = alt.n;
        expect_end(p, "endfor");
    } else if (tok_is_word(name, "call")) {
        p->cur++;
        n = node(p, N_CALLSTMT);
        jnode params = {0};
        if (is(p, TK_LPAREN)) {
            parse_args(p, ARGS_PARAMS, &params);
            n->has_list = true;
        }
        jnode *callee = parse_primary(p);
        if (callee->kind != N_IDENT)
            PFAIL(p, "line %u: expected identifier following call statement", line_here(p));
        jnode *call = node(p, N_CALL);
        call->a = callee;
        parse_args(p, ARGS_CALL, call);
        expect(p, TK_CLOSE_STMT, "expected closing statement token");
        nlist body = {0};
        parse_until(p, (const char *const[]){"endcall", NULL}, &body);
        expect_end(p, "endcall");
        n->a = call;
        n->list = params.list;
        n->nlist = params.nlist;
        n->list2 = body.v;
        n->nlist2 = body.n;
        for (size_t i = 0; i < n->nlist; i++)
            if (n->list[i]->kind == N_KWARG)
                scan_special(n->list[i]->a, &n->flag, &n->flag2, 0);
        for (size_t i = 0; i < n->nlist2; i++)
            scan_special(n->list2[i], &n->flag, &n->flag2, 0);
    } else if (tok_is_word(name, "break") || tok_is_word(name, "continue")) {
        p->cur++;
        expect(p, TK_CLOSE_STMT, "expected closing statement token");
        n = node(p, tok_is_word(name, "break") ? N_BREAK : N_CONTINUE);
    } else if (tok_is_word(name, "filter")) {
        p->cur++;
        n = node(p, N_FILTERSTMT);
        jnode *f = parse_primary(p);
        if (f->kind == N_IDENT && is(p, TK_LPAREN))
            f = parse_call(p, f);
        n->a = f;
        expect(p, TK_CLOSE_STMT, "expected closing statement token");
        nlist body = {0};
        parse_until(p, (const char *const[]){"endfilter", NULL}, &body);
        n->list = body.v;
        n->nlist = body.n;
        expect_end(p, "endfilter");
    } else {
        PFAIL(p, "line %u: unknown statement type: %.*s", name->line, (int)(name->len > 40 ? 40 : name->len), name->s);
    }
    p->depth--;
    return n;
}

static jnode *parse_any(parser *p)
{
    const jtok *t = &p->tk[p->cur];
    switch (t->type) {
    case TK_COMMENT:
        p->cur++;
        return node(p, N_COMMENT);
    case TK_TEXT: {
        p->cur++;
        jnode *n = node(p, N_TEXT);
        n->lit.t = JT_STR;
        n->lit.u.s = t->s;
        n->lit.len = t->len;
        return n;
    }
    case TK_OPEN_STMT:
        return parse_statement(p);
    case TK_OPEN_EXPR: {
        p->cur++;
        jnode *e = parse_expression(p);
        expect(p, TK_CLOSE_EXPR, "expected closing expression token");
        return e;
    }
    default:
        PFAIL(p, "line %u: unexpected token type: %s", t->line, TOKNAME[t->type]);
    }
}

void jinja_parse(jinja_tpl *t, const jtok *toks, size_t ntoks, jfail *f)
{
    parser p = {.t = t, .tk = toks, .n = ntoks, .f = f};
    nlist body = {0};
    while (p.cur < p.n)
        nl_push(&p, &body, parse_any(&p));
    t->body = body.v;
    t->nbody = body.n;
}
