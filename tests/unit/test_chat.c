/* Unit tests of src/llm's chat templates on src/jinja: any template renders (a re-spaced
 * copy as its original), the errors of chat_render (empty conversations, the templates' own
 * errors, a full buffer), the variables beyond the messages, and chat_load's config forms.
 * The real templates are checked against @huggingface/jinja by llm_chat_golden and
 * llm_jinja_golden. */
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
#include "test_util.h"

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

static chat_msg msg(chat_role r, const char *s) { return (chat_msg){.role = r, .content = s, .len = strlen(s)}; }

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

/* One implementation for every template: a re-spaced copy renders exactly as the original
 * (only the name in logs differs), and so does a template no hand-written code knew. */
static void test_any_template_renders(void **state)
{
    (void)state;
    ts_err err = {0};
    chat_tmpl *a = chat_compile(LLAMA3, "<|begin_of_text|>", NULL, &err);
    chat_tmpl *b = chat_compile(LLAMA3_RESPACED, "<|begin_of_text|>", NULL, &err);
    assert_non_null(a);
    assert_non_null(b);
    assert_string_equal(chat_variant(a), "llama3-instruct");
    assert_string_equal(chat_variant(b), "custom");
    const char *want = "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nS<|eot_id|>"
                       "<|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>"
                       "<|start_header_id|>assistant<|end_header_id|>\n\n";
    chat_msg m[] = {msg(CHAT_SYSTEM, " S\n"), msg(CHAT_USER, "hi")};
    render_ok(a, m, 2, want);
    render_ok(b, m, 2, want);
    chat_tmpl_free(a);
    chat_tmpl_free(b);
    /* ChatML, which the hand-written renderers refused */
    chat_tmpl *c = chat_compile("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
                                "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}"
                                "{{ '<|im_start|>assistant\\n' }}{% endif %}", NULL, NULL, &err);
    assert_non_null(c);
    chat_msg t[] = {msg(CHAT_USER, "q"), msg(CHAT_ASSISTANT, "a"), msg(CHAT_TOOL, "{\"r\": 1}")};
    render_ok(c, t, 3, "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\na<|im_end|>\n"
                       "<|im_start|>tool\n{\"r\": 1}<|im_end|>\n<|im_start|>assistant\n");
    chat_tmpl_free(c);
    /* a template that does not parse is refused with the parser's words */
    assert_null(chat_compile("{% for m in messages %}{{ m.content }}", NULL, NULL, &err));
    assert_int_equal(err.http, 500);
    assert_non_null(strstr(err.msg, "chat template does not parse: line 1: "));
}

static void test_render_errors(void **state)
{
    (void)state;
    ts_err err = {0};
    chat_tmpl *l3 = chat_compile(LLAMA3, "<|begin_of_text|>", NULL, &err);
    chat_tmpl *l2 = chat_compile(LLAMA2, "<s>", "</s>", &err);
    assert_non_null(l3);
    assert_non_null(l2);
    buf out;
    buf_init(&out, 4096);
    buf_puts(&out, "kept");
    chat_msg none[] = {msg(CHAT_USER, "q")};
    assert_int_equal(chat_render(l3, none, 0, true, &out, &err), -1);
    assert_int_equal(err.http, 400);
    assert_string_equal(err.msg, "messages must not be empty");
    chat_msg twice[] = {msg(CHAT_SYSTEM, "s"), msg(CHAT_USER, "a"), msg(CHAT_USER, "b")};
    assert_int_equal(chat_render(l2, twice, 3, true, &out, &err), -1);
    assert_int_equal(err.http, 400);
    assert_string_equal(err.msg, "Conversation roles must alternate user/assistant/user/assistant/...");
    /* a template that fails on the messages: 400 naming the failure */
    chat_tmpl *bad = chat_compile("{{ messages[0].content + messages[5].content }}", NULL, NULL, &err);
    assert_non_null(bad);
    assert_int_equal(chat_render(bad, none, 1, true, &out, &err), -1);
    assert_int_equal(err.http, 400);
    assert_string_equal(err.msg, "the chat template cannot render these messages: Cannot perform operation + on "
                                 "undefined values");
    chat_tmpl_free(bad);
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
    assert_int_equal(small.len, 0);
    buf_free(&small);
    buf_free(&out);
    chat_tmpl_free(l3);
    chat_tmpl_free(l2);
}

/* The variables beyond the messages: enable_thinking only when set, tools, and the
 * request's chat_template_kwargs (which may not replace the messages) */
static void test_options(void **state)
{
    (void)state;
    ts_err err = {0};
    chat_tmpl *t = chat_compile("{{ enable_thinking is defined }}/{{ enable_thinking }}/{{ tools | length if tools "
                                "is defined else '-' }}/{{ style | default('plain') }}", NULL, NULL, &err);
    assert_non_null(t);
    chat_msg m[] = {msg(CHAT_USER, "q")};
    buf out;
    buf_init(&out, 4096);
    chat_opts o = {.add_generation_prompt = true};
    assert_int_equal(chat_render_opts(t, m, 1, &o, &out, &err), 0);
    o.enable_thinking = CHAT_THINK_OFF;
    o.tools = json_loads("[{\"type\": \"function\"}, {\"type\": \"function\"}]", 0, NULL);
    o.template_kwargs = json_loads("{\"style\": \"terse\"}", 0, NULL);
    assert_int_equal(chat_render_opts(t, m, 1, &o, &out, &err), 0);
    buf_putc(&out, '\0');
    assert_string_equal((const char *)out.data, "false//-/plaintrue/false/2/terse");
    json_decref(o.template_kwargs);
    o.template_kwargs = json_loads("{\"messages\": []}", 0, NULL);
    assert_int_equal(chat_render_opts(t, m, 1, &o, &out, &err), -1);
    assert_int_equal(err.http, 400);
    assert_string_equal(err.msg, "chat_template_kwargs may not set 'messages'");
    json_decref(o.template_kwargs);
    o.template_kwargs = json_loads("{\"raise_exception\": \"x\"}", 0, NULL); /* a function the template calls */
    assert_int_equal(chat_render_opts(t, m, 1, &o, &out, &err), -1);
    assert_string_equal(err.msg, "chat_template_kwargs may not set 'raise_exception'");
    json_decref(o.template_kwargs);
    json_decref(o.tools);
    buf_free(&out);
    chat_tmpl_free(t);
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
             "\"chat_template\": [{\"name\": \"tool_use\", \"template\": \"{{ tools | length }} tools\"},"
             "{\"name\": \"default\", \"template\": \"%s\"}]}", json_str(LLAMA3));
    test_write_text(dir, "tokenizer_config.json", cfg);
    chat_tmpl *t = chat_load(dir, &err);
    assert_non_null(t);
    assert_string_equal(chat_variant(t), "llama3-instruct");
    chat_msg m[] = {msg(CHAT_USER, "x")};
    render_ok(t, m, 1, "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nx<|eot_id|>"
                       "<|start_header_id|>assistant<|end_header_id|>\n\n");
    /* with tools, the one named "tool_use" */
    chat_opts o = {.add_generation_prompt = true, .tools = json_loads("[1, 2, 3]", 0, NULL)};
    buf out;
    buf_init(&out, 4096);
    assert_int_equal(chat_render_opts(t, m, 1, &o, &out, &err), 0);
    assert_int_equal(out.len, 7);
    assert_memory_equal(out.data, "3 tools", 7);
    buf_free(&out);
    json_decref(o.tools);
    chat_tmpl_free(t);
    /* no template in the config: chat_template.jinja beside it */
    test_write_text(dir, "tokenizer_config.json", "{\"bos_token\": \"<s>\", \"eos_token\": \"</s>\"}");
    t = chat_load(dir, &err);
    assert_null(t);
    assert_non_null(strstr(err.msg, "has no chat_template and there is no"));
    test_write_text(dir, "chat_template.jinja", LLAMA2);
    char path[160];
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    t = chat_load(path, &err);
    assert_non_null(t);
    assert_string_equal(chat_variant(t), "llama2-chat");
    chat_tmpl_free(t);
    test_write_text(dir, "chat_template.jinja", "{{ messages }}");
    t = chat_load(dir, &err);
    assert_non_null(t);
    assert_string_equal(chat_variant(t), "chat_template.jinja");
    chat_tmpl_free(t);
    test_write_text(dir, "chat_template.jinja", "{% if messages %}");
    assert_null(chat_load(dir, &err));
    assert_non_null(strstr(err.msg, "chat_template.jinja: chat template does not parse: line 1: "));
    snprintf(path, sizeof path, "%s/chat_template.jinja", dir);
    unlink(path);
    test_write_text(dir, "tokenizer_config.json", "{\"chat_template\": [{\"name\": \"rag\", \"template\": \"x\"}]}");
    assert_null(chat_load(dir, &err));
    assert_non_null(strstr(err.msg, "chat_template is a list without a template named 'default'"));
    test_write_text(dir, "tokenizer_config.json", "{\"chat_template\": 3}");
    assert_null(chat_load(dir, &err));
    assert_non_null(strstr(err.msg, "chat_template is neither a string nor a list"));
    static char longpath[5000];
    memset(longpath, 'a', sizeof longpath - 1);
    assert_null(chat_load(longpath, &err));
    assert_non_null(strstr(err.msg, "...: path too long"));
    test_write_text(dir, "tokenizer_config.json", "{\"chat_template\": ");
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

/* An assistant's tool_calls, a tool result's tool_call_id and name, reasoning_content and
 * documents reach the template as transformers passes them: after role and content, in that
 * order, absent where the message has none. */
static void test_message_fields(void **state)
{
    (void)state;
    ts_err err = {0};
    chat_tmpl *t = chat_compile("{{ messages | tojson }}|{{ documents | tojson if documents is defined else '-' }}",
                                NULL, NULL, &err);
    assert_non_null(t);
    json_t *calls = json_loads("[{\"id\": \"c1\", \"type\": \"function\", \"function\": {\"name\": \"f\", "
                               "\"arguments\": {\"x\": 1}}}]", 0, NULL);
    json_t *id = json_string("c1"), *name = json_string("f"), *why = json_string("think");
    chat_msg m[] = {msg(CHAT_USER, "q"), msg(CHAT_ASSISTANT, ""), msg(CHAT_TOOL, "42")};
    m[1].tool_calls = calls;
    m[1].reasoning_content = why;
    m[2].tool_call_id = id;
    m[2].name = name;
    chat_opts o = {.add_generation_prompt = true, .documents = json_loads("[{\"text\": \"d\"}]", 0, NULL)};
    buf out;
    buf_init(&out, 4096);
    assert_int_equal(chat_render_opts(t, m, 3, &o, &out, &err), 0);
    buf_putc(&out, '\0');
    assert_string_equal((const char *)out.data,
                        "[{\"role\": \"user\", \"content\": \"q\"}, {\"role\": \"assistant\", \"content\": \"\", "
                        "\"tool_calls\": [{\"id\": \"c1\", \"type\": \"function\", \"function\": {\"name\": \"f\", "
                        "\"arguments\": {\"x\": 1}}}], \"reasoning_content\": \"think\"}, {\"role\": \"tool\", "
                        "\"content\": \"42\", \"tool_call_id\": \"c1\", \"name\": \"f\"}]|[{\"text\": \"d\"}]");
    buf_free(&out);
    json_decref(o.documents);
    json_decref(calls);
    json_decref(id);
    json_decref(name);
    json_decref(why);
    chat_tmpl_free(t);
}

/* TIERSERVE_CHAT_TEMPLATE: FILE for every model, MODEL=FILE pairs, an entry without '=' for
 * the rest; a file that is missing or does not parse is named; bos/eos from the folder. */
static void test_override(void **state)
{
    (void)state;
    char out[64];
    assert_int_equal(chat_override_for("", "m", out, sizeof out), 0);
    assert_int_equal(chat_override_for("/t.jinja", "m", out, sizeof out), 1);
    assert_string_equal(out, "/t.jinja");
    assert_int_equal(chat_override_for("a=/a.jinja,b=/b.jinja", "b", out, sizeof out), 1);
    assert_string_equal(out, "/b.jinja");
    assert_int_equal(chat_override_for("a=/a.jinja,b=/b.jinja", "c", out, sizeof out), 0);
    assert_int_equal(chat_override_for("a=/a.jinja,/rest.jinja", "c", out, sizeof out), 1);
    assert_string_equal(out, "/rest.jinja");
    assert_int_equal(chat_override_for("ab=/x,a=/a", "a", out, sizeof out), 1); /* a name, not a prefix */
    assert_string_equal(out, "/a");
    assert_int_equal(chat_override_for("a=,b=/b", "b", out, sizeof out), -1);
    assert_non_null(strstr(out, "TIERSERVE_CHAT_TEMPLATE"));
    assert_int_equal(chat_override_for("=/x", "m", out, sizeof out), -1);
    assert_int_equal(chat_override_for("a=/a,,b=/b", "b", out, sizeof out), -1);
    char longv[200];
    snprintf(longv, sizeof longv, "m=/%0100d", 0);
    assert_int_equal(chat_override_for(longv, "m", out, sizeof out), -1);

    ts_err err = {0};
    test_write_text(dir, "tokenizer_config.json", "{\"bos_token\": \"<s>\", \"chat_template\": \"folder's\"}");
    const char *file = test_write_text(dir, "mine.jinja", "{{ bos_token }}mine:{{ messages[0].content }}");
    chat_tmpl *t = chat_load_override(dir, file, &err);
    assert_non_null(t);
    assert_string_equal(chat_source(t), file);
    assert_string_equal(chat_variant(t), "TIERSERVE_CHAT_TEMPLATE");
    assert_false(chat_has_tool_use(t));
    chat_msg m[] = {msg(CHAT_USER, "x")};
    render_ok(t, m, 1, "<s>mine:x");
    chat_tmpl_free(t);
    test_write_text(dir, "bad.jinja", "{% for m in messages %}");
    char bad[160];
    snprintf(bad, sizeof bad, "%s/bad.jinja", dir);
    assert_null(chat_load_override(dir, bad, &err));
    assert_int_equal(err.http, 500);
    char want[256];
    snprintf(want, sizeof want, "TIERSERVE_CHAT_TEMPLATE %s: chat template does not parse: ", bad);
    assert_true(strncmp(err.msg, want, strlen(want)) == 0);
    snprintf(bad, sizeof bad, "%s/none.jinja", dir);
    assert_null(chat_load_override(dir, bad, &err));
    assert_non_null(strstr(err.msg, bad));
    assert_non_null(strstr(err.msg, "No such file"));
    assert_null(chat_load_override(dir, dir, &err)); /* a folder */
    assert_non_null(strstr(err.msg, "not a regular file"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_any_template_renders),
        cmocka_unit_test(test_render_errors),
        cmocka_unit_test(test_options),
        cmocka_unit_test(test_roles),
        cmocka_unit_test(test_load_config_forms),
        cmocka_unit_test(test_message_fields),
        cmocka_unit_test(test_override),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
