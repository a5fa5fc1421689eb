/* toolcall.c: the incremental tool-call parser (see toolcall.h). */
#include "toolcall.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"

#define DS_CALLS_BEGIN "<\xef\xbd\x9ctool\xe2\x96\x81" "calls\xe2\x96\x81" "begin\xef\xbd\x9c>"
#define DS_CALLS_END "<\xef\xbd\x9ctool\xe2\x96\x81" "calls\xe2\x96\x81" "end\xef\xbd\x9c>"
#define DS_CALL_BEGIN "<\xef\xbd\x9ctool\xe2\x96\x81" "call\xe2\x96\x81" "begin\xef\xbd\x9c>"
#define DS_CALL_END "<\xef\xbd\x9ctool\xe2\x96\x81" "call\xe2\x96\x81" "end\xef\xbd\x9c>"
#define DS_SEP "<\xef\xbd\x9ctool\xe2\x96\x81" "sep\xef\xbd\x9c>"

toolcall_format toolcall_detect(const char *t, size_t len)
{
    if (!t) return TOOLCALL_NONE;
    /* the most specific markers first: a Qwen template mentions no other family's */
    if (memmem(t, len, DS_CALLS_BEGIN, strlen(DS_CALLS_BEGIN))) return TOOLCALL_DEEPSEEK3;
    if (memmem(t, len, "<tool_call>", 11)) return TOOLCALL_HERMES;
    if (memmem(t, len, "[TOOL_CALLS]", 12)) return TOOLCALL_MISTRAL;
    /* Llama-3.1/3.2: the tool-call turn ends in <|eom_id|> or the template shows the JSON
     * shape {"name": ..., "parameters": ...} beside <|python_tag|> */
    if (memmem(t, len, "<|python_tag|>", 14) ||
        (memmem(t, len, "<|start_header_id|>", 19) && memmem(t, len, "\"parameters\"", 12)))
        return TOOLCALL_LLAMA3;
    return TOOLCALL_NONE;
}

const char *toolcall_format_name(toolcall_format f)
{
    switch (f) {
    case TOOLCALL_HERMES: return "hermes";
    case TOOLCALL_LLAMA3: return "llama3_json";
    case TOOLCALL_MISTRAL: return "mistral";
    case TOOLCALL_DEEPSEEK3: return "deepseek_v3";
    default: return "none";
    }
}

struct toolcall_parser {
    toolcall_format f;
    toolcall_sink k;
    buf hold;          /* TEXT: a tail that may begin a marker; BODY: the call's body so far */
    bool body;         /* inside a call's body */
    bool seen_text;    /* llama3: content other than white space came (a '{' after it is text) */
    bool after_call;   /* llama3: a call just ended: ';' and white space between calls are dropped */
    /* the JSON scanner of the families whose body ends with its value (mistral, llama3) */
    size_t scan;       /* bytes of hold scanned */
    int depth;
    bool in_str, esc, started;
    size_t calls;
    bool failed;
};

static const char *open_marker(toolcall_format f)
{
    return f == TOOLCALL_HERMES ? "<tool_call>" : f == TOOLCALL_MISTRAL ? "[TOOL_CALLS]"
           : f == TOOLCALL_DEEPSEEK3 ? DS_CALLS_BEGIN : NULL;
}

static const char *close_marker(toolcall_format f)
{
    return f == TOOLCALL_HERMES ? "</tool_call>" : f == TOOLCALL_DEEPSEEK3 ? DS_CALLS_END : NULL;
}

toolcall_parser *toolcall_new(toolcall_format f, size_t limit, const toolcall_sink *sink)
{
    toolcall_parser *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->f = f;
    p->k = *sink;
    buf_init(&p->hold, limit);
    return p;
}

void toolcall_free(toolcall_parser *p)
{
    if (!p) return;
    buf_free(&p->hold);
    free(p);
}

static void text(toolcall_parser *p, const char *s, size_t n)
{
    if (n) p->k.text(p->k.ctx, s, n);
}

static bool is_ws(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

/* A call object {"name": "...", "arguments" | "parameters": {...} or its text} into out
 * (name and compact arguments text, owned by the caller). */
typedef struct {
    char *name, *args;
} one_call;

static bool call_of(json_t *o, one_call *out)
{
    json_t *name = json_object_get(o, "name"), *a = json_object_get(o, "arguments");
    if (!a) a = json_object_get(o, "parameters");
    if (!json_is_object(o) || !json_is_string(name) || json_string_length(name) == 0) return false;
    json_t *parsed = NULL;
    if (json_is_string(a)) { /* some models write the arguments as a JSON text */
        parsed = json_loadb(json_string_value(a), json_string_length(a), 0, NULL);
        if (!json_is_object(parsed)) {
            json_decref(parsed);
            return false;
        }
        a = parsed;
    } else if (!a) {
        a = parsed = json_object();
    } else if (!json_is_object(a)) {
        return false;
    }
    /* json_dumpb into our own malloc: the worker may give jansson its own allocator
     * (budget_json.c), so a json_dumps result must not reach free() */
    size_t need = json_dumpb(a, NULL, 0, JSON_COMPACT | JSON_PRESERVE_ORDER);
    out->args = need ? malloc(need + 1) : NULL;
    if (out->args) {
        json_dumpb(a, out->args, need, JSON_COMPACT | JSON_PRESERVE_ORDER);
        out->args[need] = '\0';
    }
    out->name = strdup(json_string_value(name));
    json_decref(parsed);
    if (!out->args || !out->name) {
        free(out->args);
        free(out->name);
        return false;
    }
    return true;
}

static void free_calls(one_call *c, int n)
{
    for (int k = 0; k < n; k++) {
        free(c[k].name);
        free(c[k].args);
    }
}

static int deepseek_parse(const char *s, size_t n, one_call *out, int max, int *made);

/* DeepSeek-V3's calls between its calls markers: each
 *   <｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\nARGS\n```<｜tool▁call▁end｜>
 * with white space between. Fills out[] (at most max); returns the count, or -1 with nothing
 * held (all or none: a body that breaks after its first call is text). */
static int deepseek_calls(const char *s, size_t n, one_call *out, int max)
{
    int made = 0, rc = deepseek_parse(s, n, out, max, &made);
    if (rc < 0) free_calls(out, made);
    return rc;
}

static int deepseek_parse(const char *s, size_t n, one_call *out, int max, int *made)
{
    int c = 0;
    size_t i = 0;
    const size_t lb = strlen(DS_CALL_BEGIN), le = strlen(DS_CALL_END), ls = strlen(DS_SEP);
    for (;;) {
        while (i < n && is_ws(s[i])) i++;
        if (i == n) return c;
        if (c == max || n - i < lb || memcmp(s + i, DS_CALL_BEGIN, lb) != 0) return -1;
        i += lb;
        const char *sep = memmem(s + i, n - i, DS_SEP, ls);
        if (!sep) return -1;
        i = (size_t)(sep - s) + ls;
        const char *nl = memchr(s + i, '\n', n - i);
        if (!nl) return -1;
        size_t name_at = i, name_len = (size_t)(nl - s) - i;
        i = (size_t)(nl - s) + 1;
        if (n - i < 8 || memcmp(s + i, "```json\n", 8) != 0) return -1;
        i += 8;
        const char *end = memmem(s + i, n - i, DS_CALL_END, le);
        if (!end) return -1;
        size_t j = (size_t)(end - s);
        while (j > i && is_ws(s[j - 1])) j--;
        if (j - i < 3 || memcmp(s + j - 3, "```", 3) != 0) return -1;
        json_t *args = json_loadb(s + i, j - 3 - i, 0, NULL);
        json_t *o = json_object();
        /* set_new takes nm whether it succeeds or not */
        bool ok = o && json_is_object(args) && !json_object_set_new(o, "name", json_stringn(s + name_at, name_len)) &&
                  !json_object_set(o, "arguments", args) && call_of(o, &out[c]);
        json_decref(o);
        json_decref(args);
        if (!ok) return -1;
        *made = ++c;
        i = (size_t)(end - s) + le; /* past the call's end marker */
    }
}

#define MAX_CALLS_PER_BODY 128

/* A whole body: its calls out, or (it does not parse) its text as content. */
static void take_body(toolcall_parser *p, const char *s, size_t n)
{
    one_call c[MAX_CALLS_PER_BODY];
    int nc = -1;
    if (p->f == TOOLCALL_DEEPSEEK3) {
        nc = deepseek_calls(s, n, c, MAX_CALLS_PER_BODY);
    } else {
        json_t *v = json_loadb(s, n, JSON_DECODE_ANY, NULL);
        if (p->f == TOOLCALL_MISTRAL && json_is_array(v) && json_array_size(v) >= 1 &&
            json_array_size(v) <= MAX_CALLS_PER_BODY) {
            nc = 0;
            for (size_t i = 0; i < json_array_size(v) && nc >= 0; i++) {
                if (call_of(json_array_get(v, i), &c[nc])) nc++;
                else {
                    free_calls(c, nc);
                    nc = -1;
                }
            }
        } else if (v && call_of(v, &c[0])) {
            nc = 1;
        }
        json_decref(v);
    }
    if (nc < 0) {
        text(p, s, n);
        return;
    }
    for (int i = 0; i < nc; i++) {
        p->k.call(p->k.ctx, c[i].name, strlen(c[i].name), c[i].args, strlen(c[i].args));
        p->calls++;
        free(c[i].name);
        free(c[i].args);
    }
}

/* Drops the first n bytes of hold. */
static void consume(toolcall_parser *p, size_t n)
{
    if (!n) return; /* hold.data may be NULL while nothing is held */
    memmove(p->hold.data, p->hold.data + n, p->hold.len - n);
    p->hold.len -= n;
}

static void start_body(toolcall_parser *p)
{
    p->body = true;
    p->scan = 0;
    p->depth = 0;
    p->in_str = p->esc = p->started = false;
}

/* The JSON scanner: the length of the body once its value is whole, 0 while it may still
 * grow, SIZE_MAX when it does not begin a JSON object or list. */
static size_t json_end(toolcall_parser *p)
{
    const char *s = (const char *)p->hold.data;
    for (; p->scan < p->hold.len; p->scan++) {
        char c = s[p->scan];
        if (!p->started) {
            if (is_ws(c)) continue;
            if (c != '{' && c != '[') return SIZE_MAX;
            p->started = true;
        }
        if (p->in_str) {
            if (p->esc) p->esc = false;
            else if (c == '\\') p->esc = true;
            else if (c == '"') p->in_str = false;
            continue;
        }
        if (c == '"') p->in_str = true;
        else if (c == '{' || c == '[') p->depth++;
        else if ((c == '}' || c == ']') && --p->depth == 0) return ++p->scan;
    }
    return 0;
}

/* Works through hold as far as it can. */
static void run(toolcall_parser *p)
{
    for (;;) {
        const char *s = (const char *)p->hold.data;
        size_t n = p->hold.len;
        if (n == 0) return;
        if (!p->body) {
            if (p->f == TOOLCALL_LLAMA3) {
                size_t i = 0;
                while (i < n && !p->seen_text && (is_ws(s[i]) || (p->after_call && s[i] == ';'))) i++;
                if (p->after_call) consume(p, i), s = (const char *)p->hold.data, n = p->hold.len, i = 0;
                if (!p->seen_text && i == n) return; /* only white space yet: a call may follow */
                if (!p->seen_text && s[i] == '{') {
                    text(p, s, i);
                    consume(p, i);
                    start_body(p);
                    continue;
                }
                p->seen_text = true;
                p->after_call = false;
                text(p, s, n);
                p->hold.len = 0;
                return;
            }
            const char *m = open_marker(p->f);
            size_t ml = strlen(m);
            const char *at = memmem(s, n, m, ml);
            if (at) {
                text(p, s, (size_t)(at - s));
                consume(p, (size_t)(at - s) + ml);
                start_body(p);
                continue;
            }
            /* hold back the longest tail that is a start of the marker */
            size_t keep = 0;
            for (size_t k = n < ml - 1 ? n : ml - 1; k > 0 && !keep; k--)
                if (memcmp(s + n - k, m, k) == 0) keep = k;
            text(p, s, n - keep);
            consume(p, n - keep);
            return;
        }
        const char *cm = close_marker(p->f);
        size_t end, skip;
        if (cm) {
            const char *at = memmem(s, n, cm, strlen(cm));
            if (!at) return;
            end = (size_t)(at - s);
            skip = end + strlen(cm);
        } else {
            end = json_end(p);
            if (end == 0) return;
            if (end == SIZE_MAX) { /* not JSON after all: content */
                p->body = false;
                if (p->f == TOOLCALL_LLAMA3) p->seen_text = true;
                continue;
            }
            skip = end;
        }
        size_t before = p->calls;
        take_body(p, s, end);
        consume(p, skip);
        p->body = false;
        if (p->f == TOOLCALL_LLAMA3) {
            if (p->calls == before) p->seen_text = true; /* JSON that is no call is the answer's text */
            else p->after_call = true;
        }
    }
}

int toolcall_feed(toolcall_parser *p, const char *s, size_t n)
{
    if (p->failed) return -1;
    if (p->f == TOOLCALL_NONE) {
        text(p, s, n);
        return 0;
    }
    buf_put(&p->hold, s, n);
    if (buf_failed(&p->hold)) {
        p->failed = true;
        return -1;
    }
    run(p);
    return 0;
}

int toolcall_finish(toolcall_parser *p)
{
    if (p->failed) return -1;
    const char *s = p->hold.data ? (const char *)p->hold.data : "";
    if (p->body) take_body(p, s, p->hold.len); /* cut short: a call if it is whole, else text */
    else if (!(p->f == TOOLCALL_LLAMA3 && p->after_call)) text(p, s, p->hold.len);
    p->hold.len = 0;
    p->body = false;
    return 0;
}
