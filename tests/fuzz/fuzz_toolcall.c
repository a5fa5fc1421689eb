/* libFuzzer harness for the incremental tool-call parser (src/tok/toolcall.c): a model's
 * answer is steered by its prompt, so its text is as hostile as a client's. The first byte
 * picks the format, the second a piece size; the rest is the answer. No crash, nothing read
 * past the input, and the same content and calls whether the answer comes whole or in pieces
 * of that size (the parser's promise: its output is a function of the text alone). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "toolcall.h"

typedef struct {
    buf content, calls; /* the content joined; the calls as name '(' args ')' */
} out;

static void on_text(void *ctx, const char *s, size_t n) { buf_put(&((out *)ctx)->content, s, n); }

static void on_call(void *ctx, const char *name, size_t nl, const char *args, size_t al)
{
    buf *b = &((out *)ctx)->calls;
    buf_put(b, name, nl);
    buf_putc(b, '(');
    buf_put(b, args, al);
    buf_putc(b, ')');
}

/* The parser over text in pieces of `piece` bytes (0: whole) into o. */
static void run(toolcall_format f, const char *text, size_t n, size_t piece, out *o)
{
    buf_init(&o->content, 1 << 20);
    buf_init(&o->calls, 1 << 20);
    toolcall_sink k = {on_text, on_call, o};
    toolcall_parser *p = toolcall_new(f, 1 << 16, &k);
    if (!p) abort();
    for (size_t at = 0; at < n;) {
        size_t m = piece && n - at > piece ? piece : n - at;
        if (toolcall_feed(p, text + at, m)) abort(); /* inputs are far below the bound */
        at += m;
    }
    if (toolcall_finish(p)) abort();
    toolcall_free(p);
}

static int same(const buf *a, const buf *b)
{
    return a->len == b->len && (a->len == 0 || memcmp(a->data, b->data, a->len) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2 || size > 8192) return 0;
    toolcall_format f = (toolcall_format)(data[0] % 5);
    size_t piece = 1 + data[1] % 16;
    /* a copy of exactly the answer's bytes: ASan sees any read past it */
    size_t n = size - 2;
    char *text = malloc(n ? n : 1);
    if (!text) return 0;
    memcpy(text, data + 2, n);
    out whole, cut;
    run(f, text, n, 0, &whole);
    run(f, text, n, piece, &cut);
    if (!same(&whole.content, &cut.content) || !same(&whole.calls, &cut.calls)) abort();
    buf_free(&whole.content);
    buf_free(&whole.calls);
    buf_free(&cut.content);
    buf_free(&cut.calls);
    free(text);
    return 0;
}
