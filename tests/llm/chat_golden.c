/* chat_golden: holds src/llm's chat.h (on src/jinja) to the golden file chat_golden.mjs
 * wrote with @huggingface/jinja: every real template, every re-spaced and altered copy of
 * it, must render every conversation of chat_cases.json byte for byte as Jinja did, or fail
 * with the very error the template raised; a real template's exact text gets its familiar
 * name; a mutant (whitespace edited at random) is refused exactly when Jinja cannot parse
 * it and otherwise renders as Jinja renders it; chat_load finds the template in each
 * package's model folder.
 *
 *   chat_golden <chat_golden.json>   check; exit 1 on any difference
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat.h"
#include "golden_show.h"

#define MAX_MSGS 64

static void show(const char *what, const char *s, size_t n)
{
    golden_show(what, s, n, 600);
}

static const char *str_or_null(json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);
    return json_is_string(v) ? json_string_value(v) : NULL;
}

/* One conversation with one template; false on a difference (printed). */
static bool check_case(const chat_tmpl *t, const char *label, json_t *c, json_t *result)
{
    chat_msg msgs[MAX_MSGS];
    json_t *jm = json_object_get(c, "messages");
    size_t n = json_array_size(jm);
    const char *name = json_string_value(json_object_get(c, "name"));
    if (n > MAX_MSGS) {
        printf("%s / %s: over %d messages\n", label, name, MAX_MSGS);
        return false;
    }
    for (size_t i = 0; i < n; i++) {
        json_t *m = json_array_get(jm, i), *content = json_object_get(m, "content");
        const char *role = json_string_value(json_object_get(m, "role"));
        int r = chat_role_parse(role, strlen(role));
        if (r < 0) {
            printf("%s / %s: role '%s' is not one chat.h knows\n", label, name, role);
            return false;
        }
        msgs[i] = (chat_msg){.role = (chat_role)r, .content = json_string_value(content), .len = json_string_length(content)};
    }
    json_t *think = json_object_get(c, "enable_thinking");
    chat_opts o = {.add_generation_prompt = json_is_true(json_object_get(c, "add_generation_prompt")),
                   .enable_thinking = !think ? CHAT_THINK_DEFAULT : json_is_true(think) ? CHAT_THINK_ON : CHAT_THINK_OFF};
    buf out;
    buf_init(&out, 1 << 20);
    ts_err err = {0};
    int rc = chat_render_opts(t, msgs, n, &o, &out, &err);
    bool ok = true;
    const char *want_err = str_or_null(result, "error");
    if (want_err) {
        /* raise_exception's words exactly; another failure (a type error) must be one too,
         * after chat.c's lead-in, in words that need not be the JavaScript engine's */
        static const char lead[] = "the chat template cannot render these messages: ";
        bool same = strcmp(err.msg, want_err) == 0 || strncmp(err.msg, lead, sizeof lead - 1) == 0;
        if (rc == 0 || err.http != 400 || !same) {
            printf("%s / %s: want the template's error '%s' (400)\n", label, name, want_err);
            if (rc)
                printf("    got error %d '%s'\n", err.http, err.msg);
            else
                show("got text", (const char *)out.data, out.len);
            ok = false;
        }
    } else {
        json_t *want = json_object_get(result, "text");
        if (rc != 0) {
            printf("%s / %s: want text, got error %d '%s'\n", label, name, err.http, err.msg);
            show("want", json_string_value(want), json_string_length(want));
            ok = false;
        } else if (out.len != json_string_length(want) ||
                   (out.len && memcmp(out.data, json_string_value(want), out.len) != 0)) {
            size_t i = 0;
            while (i < out.len && i < json_string_length(want) && out.data[i] == (uint8_t)json_string_value(want)[i])
                i++;
            printf("%s / %s: rendering differs at byte %zu\n", label, name, i);
            show("got ", (const char *)out.data, out.len);
            show("want", json_string_value(want), json_string_length(want));
            ok = false;
        }
    }
    buf_free(&out);
    return ok;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: chat_golden <chat_golden.json>\n");
        return 64;
    }
    json_error_t je;
    json_t *g = json_load_file(argv[1], JSON_ALLOW_NUL, &je);
    if (!g) {
        fprintf(stderr, "%s: %s (line %d)\n", argv[1], je.text, je.line);
        return 1;
    }
    json_t *cases = json_object_get(g, "cases");
    size_t failed = 0, renders = 0, templates = 0, i;
    json_t *tj;
    json_array_foreach(json_object_get(g, "templates"), i, tj) {
        const char *label = str_or_null(tj, "label"), *variant = str_or_null(tj, "variant");
        ts_err err = {0};
        chat_tmpl *t = chat_compile(str_or_null(tj, "template"), str_or_null(tj, "bos"),
                                    str_or_null(tj, "eos"), &err);
        templates++;
        if (!t) {
            printf("%s: refused: %s\n", label, err.msg);
            failed++;
            continue;
        }
        /* the exact text has its name; a re-spaced copy is just a template */
        const char *want_name = strcmp(label, variant) == 0 ? variant : "custom";
        if (strcmp(chat_variant(t), want_name) != 0) {
            printf("%s: named %s, want %s\n", label, chat_variant(t), want_name);
            failed++;
        }
        json_t *results = json_object_get(tj, "results");
        if (json_array_size(results) != json_array_size(cases)) {
            printf("%s: %zu results for %zu cases\n", label, json_array_size(results), json_array_size(cases));
            failed++;
        }
        for (size_t k = 0; k < json_array_size(cases) && k < json_array_size(results); k++) {
            renders++;
            if (!check_case(t, label, json_array_get(cases, k), json_array_get(results, k)))
                failed++;
        }
        chat_tmpl_free(t);
    }
    json_array_foreach(json_object_get(g, "altered"), i, tj) {
        ts_err err = {0};
        const char *label = str_or_null(tj, "label");
        chat_tmpl *t = chat_compile(str_or_null(tj, "template"), "<s>", "</s>", &err);
        if (!t) {
            printf("altered '%s': refused: %s\n", label, err.msg);
            failed++;
            continue;
        }
        json_t *results = json_object_get(tj, "results");
        for (size_t k = 0; k < json_array_size(cases); k++) {
            renders++;
            if (!check_case(t, label, json_array_get(cases, k), json_array_get(results, k)))
                failed++;
        }
        chat_tmpl_free(t);
    }
    size_t accepted = 0, same = 0;
    json_array_foreach(json_object_get(g, "mutants"), i, tj) {
        const char *label = str_or_null(tj, "label");
        ts_err err = {0};
        chat_tmpl *t = chat_compile(str_or_null(tj, "template"), str_or_null(tj, "bos"),
                                    str_or_null(tj, "eos"), &err);
        json_t *results = json_object_get(tj, "results");
        if (!t) {
            if (json_is_array(results)) {
                printf("%s: refused (%s), but @huggingface/jinja parses it\n", label, err.msg);
                failed++;
            }
            continue;
        }
        accepted++;
        if (!json_is_array(results)) {
            printf("%s: accepted, but @huggingface/jinja cannot parse it\n", label);
            failed++;
        } else {
            size_t before = failed;
            for (size_t k = 0; k < json_array_size(cases); k++)
                if (!check_case(t, label, json_array_get(cases, k), json_array_get(results, k)))
                    failed++;
            same += failed == before;
        }
        chat_tmpl_free(t);
    }
    printf("mutants: %zu of %zu accepted (%zu render as Jinja does)\n", accepted,
           json_array_size(json_object_get(g, "mutants")), same);
    json_array_foreach(json_object_get(g, "loads"), i, tj) {
        ts_err err = {0};
        const char *dir = str_or_null(tj, "dir"), *variant = str_or_null(tj, "variant");
        chat_tmpl *t = chat_load(dir, &err);
        if (variant && (!t || strcmp(chat_variant(t), variant) != 0)) {
            printf("chat_load %s: want %s, got %s\n", dir, variant, t ? chat_variant(t) : err.msg);
            failed++;
        } else if (!variant && (t || !strstr(err.msg, str_or_null(tj, "error")))) {
            printf("chat_load %s: want an error with '%s', got %s\n", dir, str_or_null(tj, "error"),
                   t ? chat_variant(t) : err.msg);
            failed++;
        }
        chat_tmpl_free(t);
    }
    printf("chat_golden: %zu templates, %zu renderings, %zu altered, %zu loads: %zu failed\n",
           templates, renders, json_array_size(json_object_get(g, "altered")),
           json_array_size(json_object_get(g, "loads")), failed);
    json_decref(g);
    return failed || templates == 0 || renders == 0 ? 1 : 0;
}
