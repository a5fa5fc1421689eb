/* chat: the chat templates of the supported model families, rendered in C.
 *
 * A model's tokenizer_config.json carries its chat template as Jinja source. We do not run
 * Jinja: chat_detect recognises the template (its family by distinctive markers such as
 * <|start_header_id|> or <|im_start|>, then its exact structure, compared after the
 * whitespace handling Jinja itself applies, so a re-indented copy is still recognised) and
 * picks a built-in renderer that writes what @huggingface/jinja writes for that template
 * (golden-tested in tests/llm on the real templates). A template whose structure we do not
 * reproduce is refused with a message naming it, never rendered approximately.
 *
 * Prompt and BOS: every supported template writes the BOS token itself where the model
 * expects it (Llama-2 before every [INST]; Qwen3 has none), so the rendered prompt is
 * encoded with tok_encode(..., add_special=false): a second BOS would change the model's
 * input.
 *
 * Ownership: chat_detect and chat_load return a template the caller frees with
 * chat_tmpl_free; it is read-only afterwards, so any number of threads may render with it.
 * chat_render appends to the caller's bounded buf: a full buf is a 413, never a silent
 * truncation. Messages are borrowed for the call only. */
#ifndef TS_CHAT_H
#define TS_CHAT_H

#include <stdbool.h>
#include <stddef.h>

#include "buf.h"
#include "err.h"

/* tokenizer_config.json files larger than this are refused (Gemma-3's is 1.1 MB). */
#define CHAT_MAX_CONFIG_BYTES ((size_t)16 << 20)
/* Chat templates longer than this are refused (Qwen3's is 4 kB). */
#define CHAT_MAX_TEMPLATE_BYTES ((size_t)256 << 10)

typedef enum { CHAT_SYSTEM, CHAT_USER, CHAT_ASSISTANT, CHAT_TOOL } chat_role;

/* One message; content is UTF-8 of len bytes (it may hold NUL bytes). */
typedef struct {
    chat_role role;
    const char *content;
    size_t len;
} chat_msg;

typedef struct {
    bool add_generation_prompt; /* end with the assistant's header (templates that honour it) */
    bool enable_thinking;       /* Qwen3: false closes an empty <think> block after the header */
} chat_opts;

typedef struct chat_tmpl chat_tmpl;

/* "system", "user", "assistant", "tool" (len bytes); -1 for any other name. */
int chat_role_parse(const char *name, size_t len);
const char *chat_role_name(chat_role r);

/* chat_template: the Jinja source; bos / eos: tokenizer_config.json's bos_token and
 * eos_token (NULL when it names none; a template that writes one needs it). NULL with err
 * set (500) for an unknown template: the message quotes its first 60 characters and lists
 * the supported families. */
chat_tmpl *chat_detect(const char *chat_template, const char *bos, const char *eos,
                       ts_err *err);

/* path: a model folder, or its tokenizer_config.json. chat_template is a string, or a list
 * of {name, template} where the one named "default" is used; a chat_template.jinja beside
 * the config is read when the config has none. bos_token / eos_token are strings or
 * {"content": ...} objects. NULL with err set (500) naming the file and the problem. */
chat_tmpl *chat_load(const char *path, ts_err *err);
void chat_tmpl_free(chat_tmpl *t);

/* "Llama-3", "Llama-2", "Qwen3", "Gemma-3": the family, for logs and errors. */
const char *chat_family(const chat_tmpl *t);
/* Which of the known templates matched ("llama3-instruct", ...): tests and logs. */
const char *chat_variant(const chat_tmpl *t);

/* Appends the prompt for msgs[0..n) to out. Returns 0, or -1 with err set: 400 for no
 * messages, a role the family's template does not handle ("tool" outside Qwen3), or an
 * error the template raises itself (its own text, e.g. "Conversation roles must alternate
 * user/assistant/user/assistant/..."); 413 when out is full. opts NULL: a generation
 * prompt, thinking left to the template's default. */
int chat_render_opts(const chat_tmpl *t, const chat_msg *msgs, size_t n,
                     const chat_opts *opts, buf *out, ts_err *err);
/* chat_render_opts with add_generation_prompt as given and the template's other defaults. */
int chat_render(const chat_tmpl *t, const chat_msg *msgs, size_t n, bool add_generation_prompt,
                buf *out, ts_err *err);

#endif
