/* toolcall: the tool calls in a model's answer, found in its text as it streams.
 *
 * Each model family writes a call in its own syntax, which its chat template shows it; the
 * format is chosen from the template's text (toolcall_detect), by the markers it emits:
 *   hermes       <tool_call>{"name": "f", "arguments": {...}}</tool_call>      (Hermes, Qwen2.5, Qwen3)
 *   llama3_json  {"name": "f", "parameters": {...}} as the whole answer, several joined by ';'
 *                (Llama-3.1/3.2; <|python_tag|> before it is a special token, gone from the text)
 *   mistral      [TOOL_CALLS][{"name": "f", "arguments": {...}}, ...]
 *   deepseek_v3  <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{...}\n```<｜tool▁call▁end｜>...<｜tool▁calls▁end｜>
 *   none         any other template: the answer is text only ("auto: text only")
 *
 * The parser takes the answer's text in pieces of any size and hands back, in order, the
 * text that is the answer's content and each whole call (name, arguments as a JSON text).
 * Text that may be the start of a marker is held back until it is known not to be one, so a
 * marker never reaches the content, whatever the pieces' boundaries. A call whose body does
 * not parse (the model wrote a marker, then no valid JSON) becomes content without its
 * markers; so does a body cut short by the end of the answer.
 *
 * Ownership: a parser belongs to one answer (one thread); its buffer is bounded (limit bytes
 * held at once: a body past it ends the parser with -1). */
#ifndef TS_TOOLCALL_H
#define TS_TOOLCALL_H

#include <stdbool.h>
#include <stddef.h>

typedef enum {
    TOOLCALL_NONE = 0,
    TOOLCALL_HERMES,
    TOOLCALL_LLAMA3,
    TOOLCALL_MISTRAL,
    TOOLCALL_DEEPSEEK3,
} toolcall_format;

/* The format whose markers the template text emits (TOOLCALL_NONE when none). */
toolcall_format toolcall_detect(const char *tmpl, size_t len);
/* "hermes", "llama3_json", "mistral", "deepseek_v3", "none". */
const char *toolcall_format_name(toolcall_format f);

typedef struct {
    void (*text)(void *ctx, const char *s, size_t n);
    /* args: a JSON object's text (compact), name: the function's name */
    void (*call)(void *ctx, const char *name, size_t name_len, const char *args, size_t args_len);
    void *ctx;
} toolcall_sink;

typedef struct toolcall_parser toolcall_parser;

/* NULL when out of memory. */
toolcall_parser *toolcall_new(toolcall_format f, size_t limit, const toolcall_sink *sink);
void toolcall_free(toolcall_parser *p);
/* More of the answer's text. Returns 0, or -1 when a call's body passes the limit or memory
 * runs out (nothing more is taken). */
int toolcall_feed(toolcall_parser *p, const char *s, size_t n);
/* The answer is over: what is held goes out (as a call if it is a whole one, else as text). */
int toolcall_finish(toolcall_parser *p);

#endif
