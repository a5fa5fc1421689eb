/* libFuzzer harness for the worker's /v1 request parser (src/worker/v1_parse.c) and the chat
 * render it feeds (src/tok/chat.c on src/jinja): a body's bytes through v1_parse_body,
 * v1_parse_args and v1_parse_messages (chat) or v1_parse_prompt, then, for a chat that
 * parsed, every string the template may print walked (v1_json_strings) and the messages,
 * tools, tool calls, kwargs and documents rendered by a template that prints them all. No
 * crash, nothing read past the input, a status and a message on every refusal, and a render
 * that either succeeds or says why with a 400 or 413. */
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "v1_parse.h"

static const char TEMPLATE[] =
    "{{ bos_token }}{% for m in messages %}<{{ m.role }}{% if m.name is defined %} {{ m.name }}{% endif %}>"
    "{{ m.content }}{% if m.tool_calls is defined %}{% for c in m.tool_calls %}[{{ c.function.name }} "
    "{{ c.function.arguments | tojson }}]{% endfor %}{% endif %}{% if m.tool_call_id is defined %}"
    "({{ m.tool_call_id }}){% endif %}{% endfor %}{% if tools is defined %}{{ tools | tojson(indent=2) }}{% endif %}"
    "{% if documents is defined %}{{ documents | tojson }}{% endif %}{{ enable_thinking | default('-') }}"
    "{% if add_generation_prompt %}<assistant>{% endif %}";

static int count(const char *s, size_t len, void *ctx)
{
    (void)s;
    *(size_t *)ctx += len;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static chat_tmpl *tmpl;
    static gen_config gen = {.bos = -1, .do_sample = true, .temperature = 0.7, .top_p = 0.9, .max_new_tokens = 16};
    static const v1_model model = {.name = "m", .gen = &gen, .has_chat = true, .chat_note = ""};
    if (!tmpl) {
        ts_err err = {0};
        if (!(tmpl = chat_compile(TEMPLATE, "<s>", "</s>", &err))) abort();
    }
    /* the first byte picks the endpoint; the rest is the body */
    if (size == 0) return 0;
    bool chat = (data[0] & 1) == 0;
    json_t *body = NULL;
    const char *name = NULL;
    v1_err e = {0};
    v1_args a;
    int rc = v1_parse_body(data + 1, size - 1, &body, &name, &e);
    if (rc == 0) rc = v1_parse_args(body, chat, &model, &a, &e);
    if (rc == 0 && chat) {
        v1_messages ms;
        rc = v1_parse_messages(body, &model, (size_t)1 << 20, &ms, &e);
        if (rc == 0) {
            size_t n = 0;
            for (size_t i = 0; i < ms.n; i++) {
                json_t *x[] = {ms.v[i].tool_calls, ms.v[i].tool_call_id, ms.v[i].name, ms.v[i].reasoning_content};
                for (size_t k = 0; k < 4; k++)
                    if (x[k] && v1_json_strings(x[k], V1_MAX_JSON_DEPTH + 4, count, &n)) abort(); /* checked: bounded */
            }
            buf out;
            buf_init(&out, (size_t)1 << 20);
            ts_err err = {0};
            if (chat_render_opts(tmpl, ms.v, ms.n, &ms.opts, &out, &err) != 0 &&
                ((err.http != 400 && err.http != 413) || !err.msg[0]))
                abort();
            buf_free(&out);
        }
        v1_messages_free(&ms);
    } else if (rc == 0) {
        buf prompt;
        buf_init(&prompt, (size_t)1 << 20);
        rc = v1_parse_prompt(body, &prompt, &e);
        buf_free(&prompt);
    }
    if (rc != 0 && (e.err.http < 400 || !e.err.msg[0])) abort();
    json_decref(body);
    return 0;
}
