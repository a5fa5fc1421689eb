/* The incremental tool-call parser (src/tok/toolcall.c): each family's syntax fed whole, then
 * split at every byte boundary (two pieces) and byte by byte, must give the same content and
 * calls; a marker never reaches the content; a body that does not parse is content. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "buf.h"
#include "toolcall.h"

/* What a parser handed out: the content, and the calls as "name(args);" */
typedef struct {
    buf content, calls;
    size_t text_events;
} out;

static void on_text(void *ctx, const char *s, size_t n)
{
    out *o = ctx;
    buf_put(&o->content, s, n);
    o->text_events++;
}

static void on_call(void *ctx, const char *name, size_t nl, const char *args, size_t al)
{
    out *o = ctx;
    buf_put(&o->calls, name, nl);
    buf_putc(&o->calls, '(');
    buf_put(&o->calls, args, al);
    buf_puts(&o->calls, ");");
}

static const char *str(buf *b)
{
    buf_putc(b, '\0');
    b->len--;
    return (const char *)b->data;
}

/* Feeds text in pieces cut at the offsets cuts[0..nc) and checks the result. */
static void run_cuts(toolcall_format f, const char *text, const size_t *cuts, size_t nc, const char *want_content,
                     const char *want_calls)
{
    out o = {0};
    buf_init(&o.content, 1 << 20);
    buf_init(&o.calls, 1 << 20);
    toolcall_sink k = {on_text, on_call, &o};
    toolcall_parser *p = toolcall_new(f, 1 << 16, &k);
    assert_non_null(p);
    size_t at = 0, n = strlen(text);
    for (size_t i = 0; i <= nc; i++) {
        size_t to = i < nc ? cuts[i] : n;
        assert_int_equal(toolcall_feed(p, text + at, to - at), 0);
        at = to;
    }
    assert_int_equal(toolcall_finish(p), 0);
    if (strcmp(str(&o.content), want_content) != 0 || strcmp(str(&o.calls), want_calls) != 0)
        fail_msg("%s cut at %zu (%zu cuts): content '%s' calls '%s'; want '%s' and '%s'", toolcall_format_name(f),
                 nc ? cuts[0] : 0, nc, str(&o.content), str(&o.calls), want_content, want_calls);
    toolcall_free(p);
    buf_free(&o.content);
    buf_free(&o.calls);
}

/* Whole, at every single boundary, and one byte at a time. */
static void check(toolcall_format f, const char *text, const char *want_content, const char *want_calls)
{
    run_cuts(f, text, NULL, 0, want_content, want_calls);
    size_t n = strlen(text);
    for (size_t c = 0; c <= n; c++) run_cuts(f, text, &c, 1, want_content, want_calls);
    size_t *all = malloc((n + 1) * sizeof *all);
    for (size_t c = 0; c < n; c++) all[c] = c + 1;
    run_cuts(f, text, all, n ? n - 1 : 0, want_content, want_calls);
    free(all);
}

static void test_detect(void **state)
{
    (void)state;
    const char *q = "{% if tools %}<tools>{{ t }}</tools> <tool_call>{\"name\": ...}</tool_call>{% endif %}";
    assert_int_equal(toolcall_detect(q, strlen(q)), TOOLCALL_HERMES);
    const char *l = "<|start_header_id|>assistant<|end_header_id|>{{ '{\"name\": \"' + n + '\", \"parameters\": ' }}";
    assert_int_equal(toolcall_detect(l, strlen(l)), TOOLCALL_LLAMA3);
    const char *l2 = "{{- '<|python_tag|>' + tool_call.name }}";
    assert_int_equal(toolcall_detect(l2, strlen(l2)), TOOLCALL_LLAMA3);
    const char *m = "{{ '[TOOL_CALLS][' }}";
    assert_int_equal(toolcall_detect(m, strlen(m)), TOOLCALL_MISTRAL);
    const char *d = "{{'<\xef\xbd\x9ctool\xe2\x96\x81" "calls\xe2\x96\x81" "begin\xef\xbd\x9c>'}}";
    assert_int_equal(toolcall_detect(d, strlen(d)), TOOLCALL_DEEPSEEK3);
    const char *plain = "{% for m in messages %}[INST] {{ m.content }} [/INST]{% endfor %}";
    assert_int_equal(toolcall_detect(plain, strlen(plain)), TOOLCALL_NONE);
    assert_string_equal(toolcall_format_name(TOOLCALL_NONE), "none");
    assert_string_equal(toolcall_format_name(TOOLCALL_LLAMA3), "llama3_json");
}

static void test_hermes(void **state)
{
    (void)state;
    toolcall_format f = TOOLCALL_HERMES;
    check(f, "Let me look.\n<tool_call>\n{\"name\": \"get_order\", \"arguments\": {\"id\": \"A<1>\"}}\n</tool_call>",
          "Let me look.\n", "get_order({\"id\":\"A<1>\"});");
    check(f, "<tool_call>{\"name\":\"a\",\"arguments\":{}}</tool_call>\n<tool_call>{\"name\":\"b\",\"arguments\":"
          "{\"x\":[1,2]}}</tool_call>", "\n", "a({});b({\"x\":[1,2]});");
    /* a '<' that begins no marker is content, held only while it might */
    check(f, "a < b <tool <tool_cal x", "a < b <tool <tool_cal x", "");
    /* cut short by the end: a whole body is still a call; a broken one is content, without its marker */
    check(f, "<tool_call>{\"name\":\"a\",\"arguments\":{\"k\":1}}", "", "a({\"k\":1});");
    check(f, "<tool_call>{\"name\":\"a\",\"argu", "{\"name\":\"a\",\"argu", "");
    check(f, "<tool_call>not json</tool_call> done", "not json done", "");
    /* arguments given as a JSON text, and no arguments */
    check(f, "<tool_call>{\"name\":\"a\",\"arguments\":\"{\\\"q\\\":\\\"x\\\"}\"}</tool_call>", "", "a({\"q\":\"x\"});");
    check(f, "<tool_call>{\"name\":\"a\"}</tool_call>", "", "a({});");
}

static void test_llama3(void **state)
{
    (void)state;
    toolcall_format f = TOOLCALL_LLAMA3;
    check(f, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}", "",
          "get_weather({\"city\":\"Paris\"});");
    check(f, "  {\"name\":\"a\",\"parameters\":{\"s\":\"}{\"}}; {\"name\":\"b\",\"parameters\":{}}", "  ",
          "a({\"s\":\"}{\"});b({});");
    /* text first: a later '{' is text */
    check(f, "The answer is {\"name\": \"x\"}", "The answer is {\"name\": \"x\"}", "");
    /* JSON that is no call is the answer's text */
    check(f, "{\"a\": 1} and more", "{\"a\": 1} and more", "");
    check(f, "{\"name\": \"a\", \"param", "{\"name\": \"a\", \"param", "");
    check(f, "Hello!", "Hello!", "");
}

static void test_mistral(void **state)
{
    (void)state;
    toolcall_format f = TOOLCALL_MISTRAL;
    check(f, "[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {\"n\": 1}}, {\"name\": \"b\", \"arguments\": {}}]", "",
          "a({\"n\":1});b({});");
    check(f, "Sure. [TOOL_CALLS] [{\"name\":\"a\",\"arguments\":{\"s\":\"]\"}}]", "Sure. ", "a({\"s\":\"]\"});");
    check(f, "[TOOL_ x [TOOL_CALLS]oops", "[TOOL_ x oops", "");
    check(f, "[TOOL_CALLS][{\"name\":\"a\"},{\"nope\":1}]", "[{\"name\":\"a\"},{\"nope\":1}]", "");
}

#define DS(x) "<\xef\xbd\x9ctool\xe2\x96\x81" x "\xef\xbd\x9c>"

static void test_deepseek(void **state)
{
    (void)state;
    toolcall_format f = TOOLCALL_DEEPSEEK3;
    check(f, "Checking." DS("calls\xe2\x96\x81" "begin") DS("call\xe2\x96\x81" "begin") "function" DS("sep")
          "get_order\n```json\n{\"id\": 7}\n```" DS("call\xe2\x96\x81" "end") "\n" DS("call\xe2\x96\x81" "begin")
          "function" DS("sep") "close\n```json\n{}\n```" DS("call\xe2\x96\x81" "end") DS("calls\xe2\x96\x81" "end"),
          "Checking.", "get_order({\"id\":7});close({});");
    check(f, DS("calls\xe2\x96\x81" "begin") "garbage" DS("calls\xe2\x96\x81" "end") "!", "garbage!", "");
}

static void test_none_and_limit(void **state)
{
    (void)state;
    check(TOOLCALL_NONE, "<tool_call>{\"name\":\"a\"}</tool_call>", "<tool_call>{\"name\":\"a\"}</tool_call>", "");
    out o = {0};
    buf_init(&o.content, 1 << 20);
    buf_init(&o.calls, 1 << 20);
    toolcall_sink k = {on_text, on_call, &o};
    toolcall_parser *p = toolcall_new(TOOLCALL_HERMES, 64, &k);
    assert_int_equal(toolcall_feed(p, "<tool_call>", 11), 0);
    char big[100];
    memset(big, 'x', sizeof big);
    assert_int_equal(toolcall_feed(p, big, sizeof big), -1); /* a body past the bound */
    assert_int_equal(toolcall_finish(p), -1);
    toolcall_free(p);
    buf_free(&o.content);
    buf_free(&o.calls);
}

/* jansson's memory as the worker's is (budget_json.c gives it its own allocator): offset, so a
 * jansson-made string that reached free() would abort the test */
static void *offset_alloc(size_t n)
{
    unsigned char *p = malloc(n + 16);
    return p ? p + 16 : NULL;
}

static void offset_free(void *p)
{
    if (p) free((unsigned char *)p - 16);
}

int main(void)
{
    json_set_alloc_funcs(offset_alloc, offset_free);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_detect),  cmocka_unit_test(test_hermes),   cmocka_unit_test(test_llama3),
        cmocka_unit_test(test_mistral), cmocka_unit_test(test_deepseek), cmocka_unit_test(test_none_and_limit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
