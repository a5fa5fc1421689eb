/* Unit tests of src/llm's chat templates: detection (re-spaced copies recognised, altered
 * ones refused with a message naming the template and its family), the errors of
 * chat_render (roles, empty conversations, the templates' own errors, a full buffer) and
 * chat_load's config forms. The real templates are checked against @huggingface/jinja by
 * llm_chat_golden. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "chat.h"

static char dir[64];

/* Meta-Llama-3-8B-Instruct's template (with add_generation_prompt) */
static const char LLAMA3[] =
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
    "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | "
    "trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}"
    "{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ "
    "'<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}";

/* The same, re-spaced: other spaces in tags, other quotes and escapes in its strings, a
 * comment, whitespace control that removes the new lines added between tags. */
static const char LLAMA3_RESPACED[] =
    "{#- Llama 3 -#}\n{%set loop_messages=messages%}\n{%- for message in loop_messages -%}\n"
    "  {%- set content = \"<|start_header_id|>\"+message[\"role\"]+'<|end_header_id|>\\n\\n' + "
    "message['content']|trim + '<|eot_id|>' -%}\n"
    "  {%- if loop.index0==0 %}{%set content = bos_token + content%}{% endif -%}\n"
    "  {{- content -}}\n{%- endfor -%}\n"
    "{%- if add_generation_prompt %}{{'<|start_header_id|>assistant<|end_header_id|>\\x0a\\n'}}{% endif %}\n";

/* meta-llama/Llama-2-7b-chat-hf's template */
static const char LLAMA2[] =
    "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set "
    "system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% "
    "set system_message = false %}{% endif %}{% for message in loop_messages %}{% if "
    "(message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation "
    "roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if loop.index0 == "
    "0 and system_message != false %}{% set content = '<<SYS>>\\n' + system_message + "
    "'\\n<</SYS>>\\n\\n' + message['content'] %}{% else %}{% set content = message['content'] "
    "%}{% endif %}{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() "
    "+ ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' "
    "+ eos_token }}{% endif %}{% endfor %}";

static chat_msg msg(chat_role r, const char *s) { return (chat_msg){r, s, strlen(s)}; }

static const char *detect_error(const char *tmpl, const char *bos)
{
    static ts_err err;
    memset(&err, 0, sizeof err);
    chat_tmpl *t = chat_detect(tmpl, bos, "</s>", &err);
    assert_null(t);
    assert_int_equal(err.http, 500);
    return err.msg;
}

static void render_ok(const chat_tmpl *t, const chat_msg *m, size_t n, const char *want)
{
    buf out;
    buf_init(&out, 4096);
    ts_err err = {0};
    assert_int_equal(chat_render(t, m, n, true, &out, &err), 0);
    buf_putc(&out, '\0');
    assert_string_equal((const char *)out.data, want);
    buf_free(&out);
}

static void test_detect_respaced_copy(void **state)
{
    (void)state;
    ts_err err = {0};
    chat_tmpl *a = chat_detect(LLAMA3, "<|begin_of_text|>", NULL, &err);
    assert_non_null(a);
    chat_tmpl *b = chat_detect(LLAMA3_RESPACED, "<|begin_of_text|>", NULL, &err);
    assert_non_null(b);
    assert_string_equal(chat_family(b), "Llama-3");
    assert_string_equal(chat_variant(b), "llama3-instruct");
    chat_msg m[] = {msg(CHAT_SYSTEM, " Be kind.\n"), msg(CHAT_USER, "Hi\u3000")};
    const char *want = "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe kind."
                       "<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
                       "<|start_header_id|>assistant<|end_header_id|>\n\n";
    render_ok(a, m, 2, want);
    render_ok(b, m, 2, want);
    chat_tmpl_free(a);
    chat_tmpl_free(b);
    ts_err e2 = {0};
    chat_tmpl *l2 = chat_detect(LLAMA2, "<s>", "</s>", &e2);
    assert_non_null(l2);
    assert_string_equal(chat_family(l2), "Llama-2");
    chat_tmpl_free(l2);
}

static void test_detect_refuses_other_structure(void **state)
{
    (void)state;
    /* the same markers, one filter less: not a template we render */
    char altered[sizeof LLAMA3];
    snprintf(altered, sizeof altered, "%s", LLAMA3);
    char *trim = strstr(altered, "| trim");
    memcpy(trim, "      ", 6);
    const char *e = detect_error(altered, "<s>");
    assert_non_null(strstr(e, "chat template '{% set loop_messages = messages %}{% for message in "
                              "loop_mes...' has Llama-3's marker <|start_header_id|> but not the "
                              "structure of a template this server renders"));
    assert_non_null(strstr(e, "(supported: Llama-3 (Meta-Llama-3-Instruct), Llama-2-chat, Qwen3, Gemma-3)"));
    /* whitespace inside a string literal is content, not layout */
    snprintf(altered, sizeof altered, "%s", LLAMA3);
    char *nl = strstr(altered, "_id|>\n\n'");
    nl[5] = ' ';
    assert_non_null(strstr(detect_error(altered, "<s>"), "Llama-3's marker"));
    /* so is text between tags: an added line break is rendered */
    char more[sizeof LLAMA3 + 8];
    snprintf(more, sizeof more, "%s", LLAMA3);
    char *end = strstr(more, "{% endfor %}");
    memmove(end + 1, end, strlen(end) + 1);
    *end = '\n';
    assert_non_null(strstr(detect_error(more, "<s>"), "Llama-3's marker"));
    /* markers of no family: the template's start, new lines shown */
    assert_string_equal(detect_error("{% for m in messages %}\n{{ m.content }}{% endfor %}", NULL),
                        "unknown chat template '{% for m in messages %}\\n{{ m.content }}{% endfor %}' "
                        "(supported: Llama-3 (Meta-Llama-3-Instruct), Llama-2-chat, Qwen3, Gemma-3)");
    assert_non_null(strstr(detect_error("{{ '<start_of_turn>' ", NULL), "Gemma-3's marker"));
    assert_non_null(strstr(detect_error("", NULL), "unknown chat template ''"));
    /* a template that writes bos_token needs one */
    assert_string_equal(detect_error(LLAMA3, NULL),
                        "the Llama-3 chat template writes bos_token but tokenizer_config.json names none");
}

static void test_render_errors(void **state)
{
    (void)state;
    ts_err err = {0};
    chat_tmpl *l3 = chat_detect(LLAMA3, "<|begin_of_text|>", NULL, &err);
    chat_tmpl *l2 = chat_detect(LLAMA2, "<s>", "</s>", &err);
    assert_non_null(l3);
    assert_non_null(l2);
    buf out;
    buf_init(&out, 4096);
    buf_puts(&out, "kept");
    chat_msg tool[] = {msg(CHAT_USER, "q"), msg(CHAT_TOOL, "{}")};
    assert_int_equal(chat_render(l3, tool, 2, true, &out, &err), -1);
    assert_int_equal(err.http, 400);
    assert_string_equal(err.msg, "messages[1]: role 'tool' is not supported by the Llama-3 chat template");
    assert_int_equal(chat_render(l3, tool, 0, true, &out, &err), -1);
    assert_int_equal(err.http, 400);
    assert_string_equal(err.msg, "messages is empty: a chat needs at least one message");
    chat_msg twice[] = {msg(CHAT_SYSTEM, "s"), msg(CHAT_USER, "a"), msg(CHAT_USER, "b")};
    assert_int_equal(chat_render(l2, twice, 3, true, &out, &err), -1);
    assert_int_equal(err.http, 400);
    assert_string_equal(err.msg, "Conversation roles must alternate user/assistant/user/assistant/...");
    /* a failed render leaves the buffer as it was */
    assert_int_equal(out.len, 4);
    /* Llama-2: the system message inside the first [INST], BOS before every [INST] */
    chat_msg conv[] = {msg(CHAT_SYSTEM, "Sys"), msg(CHAT_USER, " a "), msg(CHAT_ASSISTANT, "b\n"),
                       msg(CHAT_USER, "c")};
    render_ok(l2, conv, 4, "<s>[INST] <<SYS>>\nSys\n<</SYS>>\n\n a [/INST] b </s><s>[INST] c [/INST]");
    /* a prompt over the buffer's limit: 413, never cut */
    buf small;
    buf_init(&small, 16);
    assert_int_equal(chat_render(l3, conv, 4, true, &small, &err), -1);
    assert_int_equal(err.http, 413);
    assert_true(buf_failed(&small));
    buf_free(&small);
    buf_free(&out);
    chat_tmpl_free(l3);
    chat_tmpl_free(l2);
}

/* Templates come from model folders, not clients, but a broken one must still only be
 * refused: byte flips of a real template (tag and string characters, truncations) are
 * either refused or, when they only touch layout, recognised as what they were. */
static void test_detect_mangled_templates(void **state)
{
    (void)state;
    static const char alphabet[] = "{}%#-'\"\\ \nxu0";
    unsigned seed = 12345;
    size_t accepted = 0;
    for (int round = 0; round < 3000; round++) {
        char t[sizeof LLAMA3];
        memcpy(t, LLAMA3, sizeof LLAMA3);
        for (int k = 0; k < 1 + round % 3; k++) {
            seed = seed * 1103515245u + 12345u;
            size_t at = (seed >> 8) % (sizeof LLAMA3 - 1);
            seed = seed * 1103515245u + 12345u;
            t[at] = alphabet[(seed >> 8) % (sizeof alphabet - 1)];
        }
        if (round % 7 == 0)
            t[(seed >> 4) % (sizeof LLAMA3 - 1)] = '\0';
        ts_err err = {0};
        chat_tmpl *c = chat_detect(t, "<s>", NULL, &err);
        if (c) {
            accepted++;
            assert_string_equal(chat_variant(c), "llama3-instruct");
            chat_tmpl_free(c);
        } else {
            assert_int_equal(err.http, 500);
            assert_non_null(strstr(err.msg, "supported: "));
        }
    }
    assert_true(accepted < 3000);
}

static void test_roles(void **state)
{
    (void)state;
    assert_int_equal(chat_role_parse("user", 4), CHAT_USER);
    assert_int_equal(chat_role_parse("assistant", 9), CHAT_ASSISTANT);
    assert_int_equal(chat_role_parse("system", 6), CHAT_SYSTEM);
    assert_int_equal(chat_role_parse("tool", 4), CHAT_TOOL);
    assert_int_equal(chat_role_parse("developer", 9), -1);
    assert_int_equal(chat_role_parse("users", 4), CHAT_USER);
    assert_int_equal(chat_role_parse("use", 3), -1);
    assert_string_equal(chat_role_name(CHAT_ASSISTANT), "assistant");
}

static void write_file(const char *name, const char *text)
{
    char path[160];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(text, 1, strlen(text), f), strlen(text));
    fclose(f);
}

static char *json_str(const char *s)
{
    /* the templates above hold no quote needing more than \" \\ and \n */
    static char out[4096];
    size_t o = 0;
    for (; *s && o + 3 < sizeof out; s++) {
        if (*s == '"' || *s == '\\')
            out[o++] = '\\';
        if (*s == '\n') {
            out[o++] = '\\';
            out[o++] = 'n';
        } else {
            out[o++] = *s;
        }
    }
    out[o] = '\0';
    return out;
}

static void test_load_config_forms(void **state)
{
    (void)state;
    char cfg[8192];
    ts_err err = {0};
    /* a list of named templates (the "default" one is used), tokens as AddedToken objects,
     * integers too big for jansson's int (Llama-3's model_max_length) */
    snprintf(cfg, sizeof cfg,
             "{\"model_max_length\": 1000000000000000019884624838656,"
             "\"bos_token\": {\"__type\": \"AddedToken\", \"content\": \"<|begin_of_text|>\"},"
             "\"chat_template\": [{\"name\": \"tool_use\", \"template\": \"{{ tools }}\"},"
             "{\"name\": \"default\", \"template\": \"%s\"}]}", json_str(LLAMA3));
    write_file("tokenizer_config.json", cfg);
    chat_tmpl *t = chat_load(dir, &err);
    assert_non_null(t);
    assert_string_equal(chat_variant(t), "llama3-instruct");
    chat_msg m[] = {msg(CHAT_USER, "x")};
    render_ok(t, m, 1, "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nx<|eot_id|>"
                       "<|start_header_id|>assistant<|end_header_id|>\n\n");
    chat_tmpl_free(t);
    /* no template in the config: chat_template.jinja beside it */
    write_file("tokenizer_config.json", "{\"bos_token\": \"<s>\", \"eos_token\": \"</s>\"}");
    t = chat_load(dir, &err);
    assert_null(t);
    assert_non_null(strstr(err.msg, "has no chat_template and there is no"));
    write_file("chat_template.jinja", LLAMA2);
    char path[160];
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    t = chat_load(path, &err);
    assert_non_null(t);
    assert_string_equal(chat_variant(t), "llama2-chat");
    chat_tmpl_free(t);
    write_file("chat_template.jinja", "{{ messages }}");
    assert_null(chat_load(dir, &err));
    assert_non_null(strstr(err.msg, "chat_template.jinja: unknown chat template '{{ messages }}'"));
    snprintf(path, sizeof path, "%s/chat_template.jinja", dir);
    unlink(path);
    write_file("tokenizer_config.json", "{\"chat_template\": [{\"name\": \"rag\", \"template\": \"x\"}]}");
    assert_null(chat_load(dir, &err));
    assert_non_null(strstr(err.msg, "chat_template is a list without a template named 'default'"));
    write_file("tokenizer_config.json", "{\"chat_template\": 3}");
    assert_null(chat_load(dir, &err));
    assert_non_null(strstr(err.msg, "chat_template is neither a string nor a list"));
    static char longpath[5000];
    memset(longpath, 'a', sizeof longpath - 1);
    assert_null(chat_load(longpath, &err));
    assert_non_null(strstr(err.msg, "...: path too long"));
    write_file("tokenizer_config.json", "{\"chat_template\": ");
    assert_null(chat_load(dir, &err));
    assert_non_null(strstr(err.msg, "not a JSON object"));
}

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/test_chat.XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char path[160];
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/chat_template.jinja", dir);
    unlink(path);
    return rmdir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_detect_respaced_copy),
        cmocka_unit_test(test_detect_refuses_other_structure),
        cmocka_unit_test(test_render_errors),
        cmocka_unit_test(test_detect_mangled_templates),
        cmocka_unit_test(test_roles),
        cmocka_unit_test(test_load_config_forms),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
