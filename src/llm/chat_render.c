/* The renderers: each writes what @huggingface/jinja writes for its template in
 * chat_known.c, step by step in the template's own order (tests/llm/chat_golden checks
 * them byte for byte). Strings are slices of the caller's messages; nothing is copied
 * except into out. */
#include <string.h>

#include "chat_int.h"

typedef struct {
    const char *p;
    size_t n;
} chat_str;

static chat_str chat_s(const char *p, size_t n) { return (chat_str){p, n}; }

/* JavaScript's trimStart / trimEnd / trim (what trim, lstrip, rstrip and strip are in
 * @huggingface/jinja) */
static chat_str chat_lstrip(chat_str s)
{
    size_t w;
    while ((w = chat_space_at(s.p, s.n)) > 0) {
        s.p += w;
        s.n -= w;
    }
    return s;
}

static chat_str chat_rstrip(chat_str s)
{
    size_t w;
    while ((w = chat_space_before(s.p, s.n)) > 0)
        s.n -= w;
    return s;
}

static chat_str chat_strip(chat_str s) { return chat_rstrip(chat_lstrip(s)); }

/* Where needle first / last occurs in s; -1 when it does not. */
static long chat_find(chat_str s, const char *needle, bool last)
{
    size_t k = strlen(needle);
    long at = -1;
    for (size_t i = 0; i + k <= s.n; i++)
        if (memcmp(s.p + i, needle, k) == 0) {
            at = (long)i;
            if (!last)
                break;
        }
    return at;
}

static bool chat_starts(chat_str s, const char *x)
{
    size_t k = strlen(x);
    return s.n >= k && memcmp(s.p, x, k) == 0;
}

static bool chat_ends(chat_str s, const char *x)
{
    size_t k = strlen(x);
    return s.n >= k && memcmp(s.p + s.n - k, x, k) == 0;
}

static void chat_put(buf *out, chat_str s) { buf_put(out, s.p, s.n); }

static chat_str chat_content(const chat_msg *m) { return chat_s(m->content, m->len); }

static const char CHAT_ALTERNATE[] =
    "Conversation roles must alternate user/assistant/user/assistant/...";

static void chat_llama3(const chat_tmpl *t, const chat_msg *m, size_t n, const chat_opts *o,
                        buf *out)
{
    for (size_t i = 0; i < n; i++) {
        if (i == 0)
            buf_puts(out, t->bos);
        buf_puts(out, "<|start_header_id|>");
        buf_puts(out, chat_role_name(m[i].role));
        buf_puts(out, "<|end_header_id|>\n\n");
        chat_put(out, chat_strip(chat_content(&m[i])));
        buf_puts(out, "<|eot_id|>");
    }
    if (t->k->gen_prompt_always || o->add_generation_prompt)
        buf_puts(out, "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

/* The system message joins the first user turn inside <<SYS>>; the template has no
 * generation prompt (a prompt ends with [/INST] anyway). */
static int chat_llama2(const chat_tmpl *t, const chat_msg *m, size_t n, buf *out, ts_err *err)
{
    const chat_msg *sys = m[0].role == CHAT_SYSTEM ? &m[0] : NULL;
    const chat_msg *loop = sys ? m + 1 : m;
    size_t nloop = sys ? n - 1 : n;
    /* {% if ... system_message != false %}: JavaScript's loose != in @huggingface/jinja,
     * so an empty (or "0") system message is dropped, where Python's Jinja would keep it */
    if (sys && chat_js_loose_false(sys->content, sys->len))
        sys = NULL;
    for (size_t i = 0; i < nloop; i++) {
        if ((loop[i].role == CHAT_USER) != (i % 2 == 0)) {
            ts_err_set(err, TS_BAD_REQUEST, "%s", CHAT_ALTERNATE);
            return -1;
        }
    }
    for (size_t i = 0; i < nloop; i++) {
        chat_str c = chat_content(&loop[i]);
        if (loop[i].role == CHAT_USER) {
            buf_puts(out, t->bos);
            buf_puts(out, "[INST] ");
            if (i == 0 && sys) {
                /* '<<SYS>>\n' + system + '\n<</SYS>>\n\n' + content, stripped as a whole:
                 * its start is '<', so only the end can go, into the system part when
                 * the user's content is all whitespace */
                chat_str s = chat_content(sys);
                chat_str u = chat_rstrip(c);
                buf_puts(out, "<<SYS>>\n");
                if (u.n) {
                    chat_put(out, s);
                    buf_puts(out, "\n<</SYS>>\n\n");
                    chat_put(out, u);
                } else {
                    buf tail;
                    buf_init(&tail, s.n + 16);
                    chat_put(&tail, s);
                    buf_puts(&tail, "\n<</SYS>>\n\n");
                    chat_put(out, chat_rstrip(chat_s((const char *)tail.data, tail.len)));
                    if (buf_failed(&tail))
                        out->failed = true;
                    buf_free(&tail);
                }
            } else {
                chat_put(out, chat_strip(c));
            }
            buf_puts(out, " [/INST]");
        } else if (loop[i].role == CHAT_ASSISTANT) {
            /* the first turn is a user turn, so the system part never lands here */
            buf_puts(out, " ");
            chat_put(out, chat_strip(c));
            buf_puts(out, " ");
            buf_puts(out, t->eos);
        }
        /* a system message later in the conversation renders nothing, as in the template */
    }
    return 0;
}

/* The system message is prepended to the first user turn; the assistant is "model". */
static int chat_gemma3(const chat_tmpl *t, const chat_msg *m, size_t n, const chat_opts *o,
                       buf *out, ts_err *err)
{
    const chat_msg *sys = m[0].role == CHAT_SYSTEM ? &m[0] : NULL;
    const chat_msg *loop = sys ? m + 1 : m;
    size_t nloop = sys ? n - 1 : n;
    size_t start = out->len;
    buf_puts(out, t->bos);
    for (size_t i = 0; i < nloop; i++) {
        if ((loop[i].role == CHAT_USER) != (i % 2 == 0)) {
            out->len = start;
            ts_err_set(err, TS_BAD_REQUEST, "%s", CHAT_ALTERNATE);
            return -1;
        }
        buf_puts(out, "<start_of_turn>");
        buf_puts(out, loop[i].role == CHAT_ASSISTANT ? "model" : chat_role_name(loop[i].role));
        buf_puts(out, "\n");
        if (i == 0 && sys) {
            chat_put(out, chat_content(sys));
            buf_puts(out, "\n\n");
        }
        chat_put(out, chat_strip(chat_content(&loop[i])));
        buf_puts(out, "<end_of_turn>\n");
    }
    if (o->add_generation_prompt)
        buf_puts(out, "<start_of_turn>model\n");
    return 0;
}

static bool chat_is_tool_response(const chat_msg *m)
{
    chat_str c = chat_content(m);
    return chat_starts(c, "<tool_response>") && chat_ends(c, "</tool_response>");
}

/* Qwen3: assistant turns after the last real user query keep their reasoning in a
 * <think> block; earlier ones are rendered without it. Tool results are user turns. */
static void chat_qwen3(const chat_msg *m, size_t n, const chat_opts *o, buf *out)
{
    if (m[0].role == CHAT_SYSTEM) {
        buf_puts(out, "<|im_start|>system\n");
        chat_put(out, chat_content(&m[0]));
        buf_puts(out, "<|im_end|>\n");
    }
    size_t last_query = n - 1;
    for (size_t k = n; k-- > 0;)
        if (m[k].role == CHAT_USER && !chat_is_tool_response(&m[k])) {
            last_query = k;
            break;
        }
    for (size_t i = 0; i < n; i++) {
        chat_str c = chat_content(&m[i]);
        switch (m[i].role) {
        case CHAT_USER:
        case CHAT_SYSTEM:
            if (m[i].role == CHAT_SYSTEM && i == 0)
                break;
            buf_puts(out, "<|im_start|>");
            buf_puts(out, chat_role_name(m[i].role));
            buf_puts(out, "\n");
            chat_put(out, c);
            buf_puts(out, "<|im_end|>\n");
            break;
        case CHAT_ASSISTANT: {
            chat_str content = c, reasoning = chat_s("", 0);
            if (chat_find(c, "</think>", false) >= 0) {
                long last_end = chat_find(c, "</think>", true);
                long first_end = chat_find(c, "</think>", false);
                content = chat_lstrip(chat_s(c.p + last_end + 8, c.n - (size_t)last_end - 8));
                reasoning = chat_rstrip(chat_s(c.p, (size_t)first_end));
                long open = chat_find(reasoning, "<think>", true);
                if (open >= 0)
                    reasoning = chat_s(reasoning.p + open + 7, reasoning.n - (size_t)open - 7);
                reasoning = chat_lstrip(reasoning);
            }
            buf_puts(out, "<|im_start|>assistant\n");
            if (i > last_query && (i == n - 1 || reasoning.n > 0)) {
                buf_puts(out, "<think>\n");
                chat_put(out, chat_strip(reasoning));
                buf_puts(out, "\n</think>\n\n");
                chat_put(out, chat_lstrip(content));
            } else {
                chat_put(out, content);
            }
            buf_puts(out, "<|im_end|>\n");
            break;
        }
        case CHAT_TOOL:
            if (i == 0 || m[i - 1].role != CHAT_TOOL)
                buf_puts(out, "<|im_start|>user");
            buf_puts(out, "\n<tool_response>\n");
            chat_put(out, c);
            buf_puts(out, "\n</tool_response>");
            if (i == n - 1 || m[i + 1].role != CHAT_TOOL)
                buf_puts(out, "<|im_end|>\n");
            break;
        }
    }
    if (o->add_generation_prompt) {
        buf_puts(out, "<|im_start|>assistant\n");
        if (!o->enable_thinking)
            buf_puts(out, "<think>\n\n</think>\n\n");
    }
}

int chat_render_opts(const chat_tmpl *t, const chat_msg *msgs, size_t n,
                     const chat_opts *opts, buf *out, ts_err *err)
{
    chat_opts o = opts ? *opts : (chat_opts){.add_generation_prompt = true, .enable_thinking = true};
    size_t start = out->len;
    if (n == 0) {
        ts_err_set(err, TS_BAD_REQUEST, "messages is empty: a chat needs at least one message");
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        if ((unsigned)msgs[i].role > CHAT_TOOL) {
            ts_err_set(err, TS_BAD_REQUEST, "messages[%zu]: unknown role", i);
            return -1;
        }
        /* only Qwen3's template has a place for tool results; the others would render a
         * turn the model was never trained on, or drop it */
        if (msgs[i].role == CHAT_TOOL && t->k->fam != CHAT_F_QWEN3) {
            ts_err_set(err, TS_BAD_REQUEST,
                       "messages[%zu]: role 'tool' is not supported by the %s chat template", i,
                       chat_family(t));
            return -1;
        }
    }
    int rc = 0;
    switch (t->k->fam) {
    case CHAT_F_LLAMA3: chat_llama3(t, msgs, n, &o, out); break;
    case CHAT_F_LLAMA2: rc = chat_llama2(t, msgs, n, out, err); break;
    case CHAT_F_GEMMA3: rc = chat_gemma3(t, msgs, n, &o, out, err); break;
    case CHAT_F_QWEN3: chat_qwen3(msgs, n, &o, out); break;
    }
    if (rc == 0 && buf_failed(out)) {
        ts_err_set(err, TS_PAYLOAD_TOO_LARGE, "the rendered chat prompt is over the limit of %zu bytes",
                   out->limit);
        rc = -1;
    }
    if (rc != 0 && !buf_failed(out))
        out->len = start;
    return rc;
}

int chat_render(const chat_tmpl *t, const chat_msg *msgs, size_t n, bool add_generation_prompt,
                buf *out, ts_err *err)
{
    chat_opts o = {.add_generation_prompt = add_generation_prompt, .enable_thinking = true};
    return chat_render_opts(t, msgs, n, &o, out, err);
}
