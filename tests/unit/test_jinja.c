/* Unit tests of src/jinja: the contract of jinja.h (errors by kind, the template's own
 * raise_exception words, a failed render leaving the buffer as it was, globals that
 * variables may not replace) and the limits a hostile template meets (steps, output,
 * memory, depth at compile and at render). What it renders is held to @huggingface/jinja
 * by llm_jinja_golden and llm_jinja_fuzz; a few of its JavaScript quirks are pinned here. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "jinja.h"

/* renders src with vars (JSON text, may be NULL); returns rc, the text in out (NUL-ended) */
static int render(const char *src, const char *vars, const jinja_limits *lim, char *out, size_t cap,
                  jinja_error *err)
{
    jinja_tpl *t = NULL;
    if (jinja_compile(src, strlen(src), lim, &t, err) != 0)
        return -2;
    json_t *v = vars ? json_loads(vars, 0, NULL) : NULL;
    if (vars)
        assert_non_null(v);
    buf b;
    buf_init(&b, (size_t)256 << 20);
    jinja_render_opts o = {.now = 1753533296}; /* 2025-07-26 12:34:56 UTC */
    int rc = jinja_render(t, v, &o, &b, err);
    size_t n = b.len < cap - 1 ? b.len : cap - 1;
    if (n)
        memcpy(out, b.data, n);
    out[n] = 0;
    buf_free(&b);
    json_decref(v);
    jinja_free(t);
    return rc;
}

static void expect_text(const char *src, const char *vars, const char *want)
{
    char out[4096];
    jinja_error err;
    int rc = render(src, vars, NULL, out, sizeof out, &err);
    if (rc != 0)
        fail_msg("%s: %s", src, err.msg);
    assert_string_equal(out, want);
}

static void renders_and_javascript_quirks(void **state)
{
    (void)state;
    const char *msgs = "{\"messages\": [{\"role\": \"system\", \"content\": \" hi \"}, {\"role\": \"user\", \"content\": \"q\"}],"
                       "\"add_generation_prompt\": true}";
    expect_text("{% for m in messages %}<{{ m.role }}>{{ m['content'] | trim }}{% if not loop.last %}|{% endif %}{% endfor %}"
                "{% if add_generation_prompt %}<assistant>{% endif %}",
                msgs, "<system>hi|<user>q<assistant>");
    expect_text("{{ none }}|{{ true }}|{{ 1.0 }}|{{ 1.0 ~ '' }}|{{ 7 // 2 }}|{{ 7 / 2 }}|{{ -7 % 3 }}", NULL,
                "|true|1.0|1|3|3.5|-1");
    expect_text("{{ {'a': [1, 'x'], 'b': none} | tojson(indent=2) }}", NULL,
                "{\n  \"a\": [\n    1,\n    \"x\"\n  ],\n  \"b\": null\n}");
    expect_text("{{ [1, 2] }}{{ 'x' + [1, 'a'] }}{{ messages[1:] | length }}{{ 'abc'[::-1] }}", msgs, "[1, 2]x1,a1cba");
    /* as in @huggingface/jinja, an iteration that ends in break writes nothing */
    expect_text("{% for i in range(5) %}{{ i }}{% if i == 2 %}{% break %}{% endif %}{% endfor %}", NULL, "01");
    expect_text("{% set ns = namespace(n=0) %}{% for i in [1, 2, 3] %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}",
                NULL, "6");
    expect_text("{% macro m(a, b='d') %}{{ a }}{{ b }}{% endmacro %}{{ m(1) }}{{ m(1, b=2) }}", NULL, "1d12");
    expect_text("  {% if true %}\nx{% endif %}\n", NULL, "x"); /* lstrip_blocks, trim_blocks, last \n */
    expect_text("{{ strftime_now('%d %b %Y %H:%M') }}", NULL, "26 Jul 2025 12:34");
    /* JavaScript's case mappings, beyond ASCII and beyond one code point */
    expect_text("{{ 'straße ﬁn é' | upper }} {{ 'ΟΔΟΣ ΟΔΟΣ.' | lower }} {{ 'émile'.capitalize() }}", NULL,
                "STRASSE FIN É οδος οδος. Émile");
}

static void raise_exception_keeps_the_templates_words(void **state)
{
    (void)state;
    jinja_tpl *t;
    jinja_error err;
    const char *src = "before{% if messages[0].role != 'user' %}{{ raise_exception('Conversation roles must alternate "
                      "user/assistant/user/assistant/...') }}{% endif %}";
    assert_int_equal(jinja_compile(src, strlen(src), NULL, &t, &err), 0);
    json_t *v = json_loads("{\"messages\": [{\"role\": \"assistant\", \"content\": \"x\"}]}", 0, NULL);
    buf b;
    buf_init(&b, 1 << 20);
    buf_put(&b, "kept", 4);
    assert_int_equal(jinja_render(t, v, NULL, &b, &err), -1);
    assert_int_equal(err.kind, JINJA_ERR_RAISED);
    assert_string_equal(err.msg, "Conversation roles must alternate user/assistant/user/assistant/...");
    /* the failed render added nothing ("before" was written first) */
    assert_int_equal(b.len, 4);
    assert_memory_equal(b.data, "kept", 4);
    buf_free(&b);
    json_decref(v);
    jinja_free(t);
}

static void errors_by_kind(void **state)
{
    (void)state;
    char out[256];
    jinja_error err;
    const char *syntax[] = {"{% if x %}never closed", "{% raw %}{% endraw %}", "{{ x ", "{# open", "{{ 'é' | x | }}",
                            "{{ a b }}", "{% for %}{% endfor %}", "\xff\xfe"};
    for (size_t i = 0; i < sizeof syntax / sizeof syntax[0]; i++) {
        assert_int_equal(render(syntax[i], NULL, NULL, out, sizeof out, &err), -2);
        assert_int_equal(err.kind, JINJA_ERR_SYNTAX);
        assert_true(err.msg[0] != 0);
    }
    assert_int_equal(render("{{ x + 1 }}", NULL, NULL, out, sizeof out, &err), -1);
    assert_int_equal(err.kind, JINJA_ERR_RENDER);
    assert_string_equal(err.msg, "Cannot perform operation + on undefined values");
    assert_int_equal(render("{{ 1 }}", "{\"raise_exception\": 1}", NULL, out, sizeof out, &err), -1);
    assert_string_equal(err.msg, "Variable already declared: raise_exception");
    assert_int_equal(render("{{ 'a' | e }}", NULL, NULL, out, sizeof out, &err), -1);
    assert_string_equal(err.msg, "Unknown StringValue filter: e");
    assert_int_equal(render("{% break %}", NULL, NULL, out, sizeof out, &err), -1);
    assert_int_equal(err.kind, JINJA_ERR_RENDER);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void limits_stop_hostile_templates(void **state)
{
    (void)state;
    char out[64];
    jinja_error err;
    jinja_limits lim = {.max_steps = 100000, .max_output = 1000, .max_memory = 4 << 20, .max_depth = 50};
    /* a billion iterations stop at the step limit, quickly; a huge range() at a limit too */
    double t0 = now_s();
    jinja_limits roomy = lim;
    roomy.max_memory = 64 << 20;
    assert_int_equal(render("{% for i in range(30000) %}{% for j in range(30000) %}{% endfor %}{% endfor %}",
                            NULL, &roomy, out, sizeof out, &err), -1);
    assert_int_equal(err.kind, JINJA_ERR_LIMIT);
    assert_non_null(strstr(err.msg, "steps"));
    assert_int_equal(render("{{ range(100000000000) | length }}", NULL, &lim, out, sizeof out, &err), -1);
    assert_int_equal(err.kind, JINJA_ERR_LIMIT);
    assert_true(now_s() - t0 < 10);
    /* output */
    assert_int_equal(render("{% for i in range(500) %}abc{% endfor %}", NULL, &lim, out, sizeof out, &err), -1);
    assert_int_equal(err.kind, JINJA_ERR_LIMIT);
    assert_non_null(strstr(err.msg, "output"));
    /* memory: a string doubled 40 times */
    assert_int_equal(render("{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}"
                            "{% endfor %}{{ ns.s | length }}", NULL, &lim, out, sizeof out, &err), -1);
    assert_int_equal(err.kind, JINJA_ERR_LIMIT);
    assert_non_null(strstr(err.msg, "memory"));
    /* recursion through a macro */
    assert_int_equal(render("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", NULL, &lim, out, sizeof out, &err), -1);
    assert_int_equal(err.kind, JINJA_ERR_LIMIT);
    assert_non_null(strstr(err.msg, "deeper"));
    /* nesting at compile time: 100000 parentheses refused, not a stack overflow */
    size_t n = 100000;
    char *deep = malloc(2 * n + 8);
    memcpy(deep, "{{", 2);
    memset(deep + 2, '(', n);
    memcpy(deep + 2 + n, "1", 1);
    memset(deep + 3 + n, ')', n);
    memcpy(deep + 3 + 2 * n, "}}", 3);
    jinja_tpl *t;
    assert_int_equal(jinja_compile(deep, strlen(deep), NULL, &t, &err), -1);
    assert_int_equal(err.kind, JINJA_ERR_SYNTAX);
    assert_non_null(strstr(err.msg, "deeper"));
    free(deep);
    /* a self-containing namespace printed as JSON */
    assert_int_equal(render("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns | tojson }}", NULL, &lim, out, sizeof out, &err), -1);
    assert_int_equal(err.kind, JINJA_ERR_LIMIT);
    /* the caller's buffer limit is a limit too */
    const char *src = "{% for i in range(100) %}0123456789{% endfor %}";
    assert_int_equal(jinja_compile(src, strlen(src), NULL, &t, &err), 0);
    buf b;
    buf_init(&b, 100);
    assert_int_equal(jinja_render(t, NULL, NULL, &b, &err), -1);
    assert_int_equal(err.kind, JINJA_ERR_FULL);
    assert_int_equal(b.len, 0);
    assert_false(buf_failed(&b));
    buf_free(&b);
    jinja_free(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(renders_and_javascript_quirks),
        cmocka_unit_test(raise_exception_keeps_the_templates_words),
        cmocka_unit_test(errors_by_kind),
        cmocka_unit_test(limits_stop_hostile_templates),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
