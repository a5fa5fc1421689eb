/* chat internals shared by chat_*.c: the known templates, the canonical form that
 * detection compares, and the string operations of @huggingface/jinja that the renderers
 * reproduce. Not part of the module's contract (chat.h is). */
#ifndef TS_CHAT_INT_H
#define TS_CHAT_INT_H

#include <stdbool.h>
#include <stddef.h>

#include "buf.h"
#include "chat.h"

typedef enum { CHAT_F_LLAMA3, CHAT_F_LLAMA2, CHAT_F_QWEN3, CHAT_F_GEMMA3 } chat_fam;

/* One template we render: its Jinja source as lines (joined with "\n"; C's string
 * literals have a length limit), where it comes from, and how its renderer differs. */
typedef struct {
    const char *variant;
    chat_fam fam;
    bool gen_prompt_always; /* Llama-3's first release writes the assistant header always */
    const char *const *lines;
    size_t nlines;
} chat_known;

extern const chat_known chat_known_tmpls[];
extern const size_t chat_known_count;

struct chat_tmpl {
    const chat_known *k;
    char *bos, *eos; /* owned; NULL when the config names none */
};

/* The template as @huggingface/jinja's lexer sees it once whitespace control is applied
 * (trailing newline, lstrip_blocks, trim_blocks, {%- -%}, comments dropped), written as a
 * string in which text and tags are delimited and each tag's tokens are re-spelled
 * without insignificant whitespace: two templates with the same canonical form render the
 * same. -1 for a template the lexer would reject (unterminated tag or string, unknown
 * escape) or when out is full. */
int chat_canon(const char *src, size_t len, buf *out);

/* JavaScript's String.prototype.trim set (WhiteSpace and LineTerminator): what the
 * templates' trim, strip, lstrip and rstrip remove in @huggingface/jinja. */
bool chat_js_space(unsigned cp);
/* Length of the whitespace character at the start of s[0..len) / at its end, or 0. */
size_t chat_space_at(const char *s, size_t len);
size_t chat_space_before(const char *s, size_t len);
/* s == false in @huggingface/jinja, which compares with JavaScript's loose ==: true when
 * Number(s) is 0 ("", "  ", "0", "0.0e5", "0x0"). Llama-2's template drops a system
 * message that compares equal to false. */
bool chat_js_loose_false(const char *s, size_t n);

#endif
