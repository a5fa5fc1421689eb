/* jinja internals shared by the lexer, parser and interpreter (not part of the contract).
 * Errors inside a compile or a render unwind with longjmp to the one entry point: every
 * allocation on the way lives in an arena that the entry point frees (or keeps), so an
 * unwind leaks nothing and the deep evaluator needs no error path per call. */
#ifndef TS_JINJA_INT_H
#define TS_JINJA_INT_H

#include <setjmp.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "jinja.h"

/* ---- arena: chunked bump allocation with a byte cap ---- */
typedef struct jchunk {
    struct jchunk *next;
    size_t used, cap;
    max_align_t data[];
} jchunk;

typedef struct {
    jchunk *head;
    size_t total, cap; /* bytes reserved so far, and the most allowed */
} jarena;

/* ---- the error context both phases unwind to ---- */
typedef struct {
    jmp_buf jb;
    jinja_error *err;
} jfail;

_Noreturn void jfail_raise(jfail *f, jinja_errkind kind, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void *jarena_alloc(jarena *a, size_t n, jfail *f);
void jarena_free(jarena *a);

/* ---- values (JavaScript's model: numbers are doubles; `t` says integer or float) ---- */
typedef enum {
    JT_UNDEF, JT_NULL, JT_BOOL, JT_INT, JT_FLOAT, JT_STR,
    JT_ARRAY, JT_TUPLE, JT_OBJECT, JT_KWARGS, JT_NS, JT_FUNC
} jtype;

typedef struct jarr jarr;
typedef struct jobj jobj;
typedef struct jfunc jfunc;

typedef struct {
    jtype t;
    size_t len; /* JT_STR: bytes */
    union {
        double n;
        bool b;
        const char *s;
        jarr *a;
        jobj *o;
        jfunc *f;
    } u;
} jval;

struct jarr {
    size_t n;
    jval *v;
};

typedef struct {
    const char *s;
    size_t len;
} jkey;

struct jobj { /* insertion-ordered; mutable only for namespaces and while being built */
    size_t n, cap;
    jkey *k;
    jval *v;
};

/* ---- AST ---- */
typedef enum {
    N_TEXT, N_COMMENT, N_IF, N_FOR, N_SET, N_MACRO, N_CALLSTMT, N_FILTERSTMT, N_BREAK, N_CONTINUE,
    N_INT, N_FLOAT, N_STR, N_ARRAY, N_TUPLE, N_OBJECT, N_IDENT, N_MEMBER, N_SLICE, N_CALL,
    N_BINARY, N_UNARY, N_FILTER, N_TEST, N_SELECT, N_TERNARY, N_KWARG, N_SPREAD, N_KWSPREAD
} jnkind;

typedef enum {
    OP_ADD, OP_SUB, OP_CAT, OP_MUL, OP_DIV, OP_FLOORDIV, OP_MOD, OP_POW,
    OP_EQ, OP_NE, OP_LT, OP_GT, OP_LE, OP_GE, OP_IN, OP_NOTIN, OP_AND, OP_OR, OP_NOT, OP_NEG, OP_POS
} jop;

typedef struct jnode jnode;
struct jnode {
    jnkind kind;
    jop op;
    bool flag;        /* MEMBER: computed; TEST: negated; MACRO: uses varargs */
    bool flag2;       /* MACRO: uses kwargs */
    int sym;          /* IDENT, KWARG, MACRO name, TEST name: symbol id */
    unsigned line;
    jval lit;         /* literals; IDENT/KWARG/TEST: the name as a string */
    jnode *a, *b, *c;
    jnode **list, **list2;
    size_t nlist, nlist2;
    bool has_list;    /* CALLSTMT: caller parameters were given */
};

struct jinja_tpl {
    jarena arena;     /* the AST, its strings and the symbol names */
    jinja_limits lim;
    jnode **body;
    size_t nbody;
    jkey *syms;       /* symbol id -> name */
    size_t nsyms;
};

/* ---- lexer ---- */
typedef enum {
    TK_TEXT, TK_NUM, TK_STR, TK_IDENT, TK_EQUALS, TK_LPAREN, TK_RPAREN, TK_OPEN_STMT, TK_CLOSE_STMT,
    TK_OPEN_EXPR, TK_CLOSE_EXPR, TK_LBRACKET, TK_RBRACKET, TK_LBRACE, TK_RBRACE, TK_COMMA, TK_DOT,
    TK_COLON, TK_PIPE, TK_ADD, TK_MUL, TK_POW, TK_CMP, TK_UNARY, TK_COMMENT
} jtok_type;

typedef struct {
    jtok_type type;
    const char *s; /* value */
    size_t len;
    unsigned line;
} jtok;

/* Tokenizes src the way @huggingface/jinja does (after its preprocess step). */
void jinja_lex(const char *src, size_t len, jarena *a, jfail *f, jtok **toks, size_t *ntoks);
/* Parses tokens into t->body, interning identifiers into t->syms. */
void jinja_parse(jinja_tpl *t, const jtok *toks, size_t ntoks, jfail *f);

/* ---- helpers shared by the interpreter files ---- */
/* JavaScript's whitespace (String.prototype.trim, /\s/): length of the whitespace
 * character at s (UTF-8), or 0. */
size_t js_space_len(const char *s, size_t avail);
/* trimStart / trimEnd: where s[0..len) starts after leading whitespace; where s[b..e) ends
 * before trailing whitespace */
size_t js_trim_start(const char *s, size_t len);
size_t js_trim_end(const char *s, size_t b, size_t e);
/* Number.prototype.toString for v; out holds at least 32 bytes; returns the length. */
size_t js_num_str(double v, char *out);
/* A decoded UTF-8 code point at s (valid input assumed), its length in *n. */
uint32_t ju_decode(const char *s, size_t avail, size_t *n);
size_t ju_encode(uint32_t cp, char *out);

#endif

/* ---- the interpreter's state (jinja_eval.c, jinja_builtin.c) ---- */
typedef struct jscope {
    struct jscope *parent; /* NULL: the root (globals and the render's variables) */
    size_t n, cap;
    int *sym;
    jval *val;
} jscope;

typedef enum {
    F_NAMESPACE, F_RAISE, F_RANGE, F_STRFTIME, F_METHOD, F_MACRO, F_CALLER
} jfkind;

struct jfunc {
    jfkind kind;
    int id;             /* F_METHOD: which method */
    jval self;          /* F_METHOD: the receiver */
    const jnode *node;  /* F_MACRO, F_CALLER */
    jscope *env;        /* F_CALLER: the scope of the call block */
};

/* growable string in the render arena */
typedef struct {
    char *p;
    size_t len, cap;
} jsb;

/* where a block writes: the caller's buf (top level) or a string being built */
typedef struct {
    buf *top;
    jsb sb;
} jsink;

typedef struct {
    const jinja_tpl *t;
    jarena arena;
    jfail f;
    uint64_t steps;
    unsigned depth, loops;
    int ctl;            /* 1: break, 2: continue pending */
    jval *root;         /* symbol id -> value of the root scope */
    time_t now;
    size_t out_start;
} jrt;

#define JFAIL(rt, ...) jfail_raise(&(rt)->f, JINJA_ERR_RENDER, __VA_ARGS__)

/* values */
jval jv_str(const char *s, size_t len);
jval jv_num(jtype t, double n);
jval jv_bool(bool b);
jval jv_undef(void);
jval jv_null(void);
jval jv_arr(jrt *rt, jtype t, size_t n);  /* n slots, filled by the caller */
jobj *jobj_new(jrt *rt, size_t cap);
void jobj_set(jrt *rt, jobj *o, const char *k, size_t klen, jval v);
jval *jobj_get(const jobj *o, const char *k, size_t klen);
jval jv_func(jrt *rt, jfkind k, int id, jval self);
const char *jv_type_name(jval v);
bool jv_truthy(jval v);
bool jv_is_num(jval v);
bool jv_is_arr(jval v);
bool jv_is_obj(jval v); /* OBJECT or KWARGS (ObjectValue) */

void jsb_put(jrt *rt, jsb *b, const char *s, size_t n);
void jsb_putc(jrt *rt, jsb *b, char c);
jval jsb_val(jsb *b);

/* JavaScript conversions */
void js_tostring(jrt *rt, jval v, jsb *out);     /* RuntimeValue.toString() */
void js_rawstring(jrt *rt, jval v, jsb *out);    /* String(value.value): 1.0 -> "1" */
bool js_loose_eq(jrt *rt, jval a, jval b);       /* a.value == b.value */
bool js_strict_eq(jval a, jval b);               /* a.value === b.value */
int js_compare(jrt *rt, jval a, jval b, bool case_sensitive);
size_t js_utf16_len(const char *s, size_t len);

typedef struct {
    int indent;          /* 0: none */
    bool ensure_ascii, sort_keys, undef_to_null;
    const char *item_sep, *key_sep;
    size_t item_sep_len, key_sep_len;
} jjson_opts;
void js_tojson(jrt *rt, jval v, const jjson_opts *o, unsigned depth, jsb *out);

/* String.prototype.toUpperCase / toLowerCase (jinja_case.c) */
jval js_case(jrt *rt, jval s, bool upper);

/* builtins (jinja_builtin.c) */
jval jb_filter(jrt *rt, jval operand, const jnode *filter, jscope *scope);
bool jb_test(jrt *rt, const char *name, size_t len, jval operand, jval arg, bool has_arg);
jval jb_member_builtin(jrt *rt, jval obj, const char *name, size_t len); /* UNDEF if none */
jval jb_call_method(jrt *rt, const jfunc *f, const jval *args, size_t nargs);
jval jb_call_global(jrt *rt, const jfunc *f, const jval *args, size_t nargs);

/* interpreter entry points the builtins need */
/* evaluates call arguments: positional into *pos, keywords into *kw (NULL when none) */
void je_args(jrt *rt, jnode *const *args, size_t n, jscope *scope, jval **pos, size_t *npos, jobj **kw);
