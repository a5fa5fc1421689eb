/* jinja: a sandboxed Jinja engine for chat templates, in C, without Python.
 *
 * It renders the subset of Jinja that Hugging Face chat templates use, and it renders it
 * the way npm's @huggingface/jinja (the JavaScript engine transformers.js uses) does, byte
 * for byte: the same lexer rules (trim_blocks and lstrip_blocks on, as transformers sets
 * them; one trailing newline dropped; {% generation %} tags removed), the same operators,
 * filters, tests and methods, the same quirks (`{{ none }}` prints nothing, `true` prints
 * "true", 1.0 prints "1.0" but `1.0 ~ ''` is "1", `tojson` separators as Python's
 * json.dumps). tests/llm holds the golden test against it on real templates.
 * What it refuses (a clear error, never a guess): anything @huggingface/jinja refuses, and
 * printing a function. Known differences: upper/lower use glibc's Unicode tables (the
 * C.UTF-8 locale; ASCII only where it is missing) plus JavaScript's length-changing
 * mappings (ß -> SS, ligatures, İ, final sigma), so a character Unicode versions disagree on
 * may differ; indexing a string by a position that falls inside a character outside the BMP
 * gives U+FFFD where JavaScript would give half a surrogate pair; tojson(sort_keys=true)
 * sorts keys by bytes, not by JavaScript's localeCompare.
 *
 * Sandbox: a template reaches only the variables it is given and a few globals
 * (namespace, range, raise_exception, strftime_now, true/false/none); no file, no
 * attribute of a host object, no import. Every render is bounded by the limits: steps
 * (each expression and statement evaluated, each loop iteration), output bytes, memory for
 * intermediate values, and nesting depth (recursion). Past a limit the render stops with
 * JINJA_ERR_LIMIT; a hostile template or hostile variables cost a bounded amount.
 *
 * Ownership: jinja_compile returns a template the caller frees with jinja_free. A compiled
 * template is read-only: any number of threads may render it at once. jinja_render borrows
 * vars for the call and appends to the caller's buf; on error the buf is cut back to the
 * length it had, so a failed render adds nothing. */
#ifndef TS_JINJA_H
#define TS_JINJA_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "buf.h"

typedef struct jinja_tpl jinja_tpl;

/* A zero field takes the default named beside it. */
typedef struct {
    uint64_t max_steps;  /* evaluations per render (default 2,000,000) */
    size_t max_output;   /* bytes a render may append (default 8 MiB) */
    size_t max_memory;   /* bytes of intermediate values per render (default 64 MiB) */
    unsigned max_depth;  /* nesting of expressions, blocks and macro calls (default 200) */
} jinja_limits;

typedef enum {
    JINJA_OK = 0,
    JINJA_ERR_SYNTAX,  /* the template does not parse (jinja_compile) */
    JINJA_ERR_RENDER,  /* an operation the template asked for failed (a type error, ...) */
    JINJA_ERR_RAISED,  /* the template called raise_exception(msg): msg is its own words */
    JINJA_ERR_LIMIT,   /* a limit of jinja_limits was reached */
    JINJA_ERR_FULL,    /* the caller's buf reached its own limit */
    JINJA_ERR_NOMEM,   /* the process is out of memory */
} jinja_errkind;

typedef struct {
    jinja_errkind kind;
    char msg[512]; /* NUL-terminated; for JINJA_ERR_RAISED exactly the template's message
                      (cut at 511 bytes) */
} jinja_error;

/* Compiles len bytes of template source (UTF-8; NUL bytes allowed). limits may be NULL
 * (all defaults); they are copied into the template and bound every render of it.
 * Returns 0 and *out, or -1 with err filled (JINJA_ERR_SYNTAX naming the problem). */
int jinja_compile(const char *text, size_t len, const jinja_limits *limits, jinja_tpl **out,
                  jinja_error *err);
void jinja_free(jinja_tpl *t);

/* Optional inputs of a render. */
typedef struct {
    time_t now; /* what strftime_now formats (local time); 0: the current time */
} jinja_render_opts;

/* Renders with the top-level keys of vars (a JSON object, or NULL for none) as variables:
 * strings, numbers (an integral real counts as an integer, as in JavaScript), booleans,
 * null, arrays and objects (keys in insertion order, integer-like keys first as
 * JavaScript orders them). A key that names a global (namespace, range, raise_exception,
 * strftime_now, true, false, none, True, False, None) is an error, as it is in
 * @huggingface/jinja. Returns 0, or -1 with err filled and out unchanged. */
int jinja_render(const jinja_tpl *t, const json_t *vars, const jinja_render_opts *opts, buf *out,
                 jinja_error *err);

#endif
