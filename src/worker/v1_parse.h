/* v1_parse: a /v1 request's body, checked against the fields OpenAI's API defines, into what
 * a generation needs. Pure: no HTTP, no engine, no clock, no globals; every refusal carries
 * the status, OpenAI's `param` and `code`, and a message that names the problem, so
 * tests/unit/test_v1_parse.c drives it without a server.
 *
 * The steps, in the order a request is refused (docs/llm.md, "The /v1 API"):
 *   v1_parse_body      the bytes into a JSON object with a string "model"
 *   v1_parse_args      every other argument but the text (unknown ones refused by name)
 *   v1_parse_messages  chat: the messages' roles and texts (v1_parse_prompt: a prompt)
 * The caller finds the model between the first two, and reads the request's headers (their
 * refusals come after the arguments') between the last two.
 *
 * Ownership: what a step returns borrows nothing from the JSON tree except the chat_msg
 * texts of a plain-string content (valid while the tree lives). Any thread. */
#ifndef TS_V1_PARSE_H
#define TS_V1_PARSE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "chat.h"
#include "err.h"
#include "gen_config.h"
#include "llm_engine.h"

#define V1_MAX_STOPS 4          /* OpenAI's limit */
#define V1_MAX_N 8              /* choices per request (OpenAI allows 128): each holds an engine slot */
#define V1_MAX_STOP_BYTES 256
#define V1_MAX_MESSAGES 4096
#define V1_MAX_LOGPROBS 5       /* the legacy completions' logprobs */
#define V1_MAX_TOOLS 128        /* OpenAI's limit */
#define V1_MAX_TOOL_CALLS 128   /* an assistant message's tool_calls */
#define V1_MAX_KWARGS 64        /* chat_template_kwargs' keys */
#define V1_MAX_DOCUMENTS 256
#define V1_MAX_JSON_DEPTH 32    /* nesting inside tools, arguments, kwargs, documents */
/* string bytes (keys included) of tools, of chat_template_kwargs, of documents, each */
#define V1_MAX_JSON_BYTES ((size_t)1 << 20)
#define V1_MAX_ID_BYTES 256     /* a tool_call_id, a name */

/* A refusal: err.http is the status (TS_*), err.msg the message; param empty is JSON null,
 * code is static text or NULL (null). The ts_err convention of err.h plus OpenAI's two
 * fields, which its error object carries and clients branch on. */
typedef struct {
    ts_err err;
    char param[96];
    const char *code;
} v1_err;

/* Fills e (param may be NULL) and returns -1: `return v1_fail(e, ...)`. */
int v1_fail(v1_err *e, int status, const char *param, const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* What the parser must know of the model a request names. */
typedef struct {
    const char *name;
    const gen_config *gen;  /* generation_config.json: the sampling defaults and max_new_tokens */
    bool has_chat;          /* a chat template is served */
    const char *chat_note;  /* has_chat false: why the template the model ships is not ("": it ships none) */
    size_t vocab;           /* the logits' ids: logit_bias and stop_token_ids must name one (0: unchecked) */
    /* the model's compiled grammars (llm_gram.h): response_format takes a reference from it
     * into v1_args.gp.gram; NULL: the grammar is only compiled to check it (unit tests) */
    llm_gram_cache *gram;
    const char *tool_format; /* the template's tool-call syntax (toolcall_format_name), "none" or NULL: none */
} v1_model;

/* The stop strings, copied out of the body. */
typedef struct {
    char s[V1_MAX_STOPS][V1_MAX_STOP_BYTES + 1];
    size_t len[V1_MAX_STOPS], n, max;
} v1_stops;

typedef struct {
    bool stream, include_usage;
    int n;                  /* choices: 1..V1_MAX_N sequences of the same prompt */
    int64_t max_tokens;     /* 0: what the context leaves */
    /* sampling, seed, logprobs, logit_bias, min_tokens, ignore_eos, stop_token_ids; the
     * callbacks, priority and max_new_tokens are the caller's */
    llm_gen_params gp;
    v1_stops stops;
    bool tools_on;          /* chat with tools and tool_choice not "none": calls are parsed out of the answer */
    /* tool_choice "required" (1) or naming a function (2, tool_name): the call is forced by
     * the grammar in gp.gram; parallel_tool_calls (default true): one call or more */
    int tool_forced;
    char tool_name[V1_MAX_ID_BYTES + 1];
    bool parallel;
    /* tools on: the tools' names, each NUL-ended (v1_tool_names fills them after
     * v1_parse_args; the caller frees them): every choice's parser gets a copy */
    char *tool_names;
    size_t tool_names_len;
    /* gp.gram: response_format's or a forced tool call's grammar, a reference the caller releases (llm_gram_unref)
     * when v1_parse_args succeeded; none is held after a failure */
} v1_args;

/* Chat's messages: v[i].content points into the JSON tree or into store; v[i].tool_calls
 * into owned (a copy whose arguments strings are parsed into objects, as vLLM hands them to
 * templates); the rest of v[i] and opts' tools, template_kwargs and documents into the tree. */
typedef struct {
    chat_msg *v;
    size_t n;
    buf store;              /* the joined text of contents given as lists of parts */
    json_t *owned;          /* the tool_calls copies (an array), or NULL */
    chat_opts opts;         /* add_generation_prompt, tools, chat_template_kwargs, documents */
} v1_messages;

/* Calls fn on every string (object keys too) in v, depth-first, up to max_depth levels of
 * arrays and objects. Returns 0, what fn returned when it was not 0, or -2 past max_depth.
 * The worker checks every text the template may print for special tokens with it. */
int v1_json_strings(json_t *v, int max_depth, int (*fn)(const char *s, size_t len, void *ctx), void *ctx);

/* The body's bytes (JSON, duplicate keys refused) into an object (the caller's, json_decref)
 * whose "model" is a string (*model points into it). */
int v1_parse_body(const void *data, size_t len, json_t **out, const char **model, v1_err *e);
/* Every argument of a chat (chat true) or completions body but its messages or prompt. */
int v1_parse_args(json_t *body, bool chat, const v1_model *m, v1_args *out, v1_err *e);
/* Chat: the body's messages, roles checked (developer is system), list contents joined
 * (text parts only, up to limit bytes of joined text), an assistant's tool_calls, a tool
 * result's tool_call_id, names; and the options the template renders with (the tools,
 * chat_template_kwargs, documents v1_parse_args checked). v1_messages_free on success or not. */
int v1_parse_messages(json_t *body, const v1_model *m, size_t limit, v1_messages *out, v1_err *e);
void v1_messages_free(v1_messages *ms);
/* Completions: the prompt (a string, or a list of one) appended to prompt (a bounded buf). */
int v1_parse_prompt(json_t *body, buf *prompt, v1_err *e);

#endif
