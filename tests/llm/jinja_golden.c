/* jinja_golden: holds src/jinja to what @huggingface/jinja rendered (jinja_golden.mjs):
 * for every (template, variables) pair, a template Jinja cannot parse must not compile
 * here either; one that renders must render byte for byte the same; one whose render
 * fails must fail here too, and when ours fails because the template called
 * raise_exception, with exactly the template's message.
 *
 *   jinja_golden <pairs.json>            check; exit 1 on any difference
 *   jinja_golden --summary <pairs.json>  also print counts per outcome
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "golden_show.h"
#include "jinja.h"

static void show(const char *what, const char *s, size_t n)
{
    golden_show(what, s, n, 400);
}

int main(int argc, char **argv)
{
    bool summary = argc == 3 && strcmp(argv[1], "--summary") == 0;
    if (argc != 2 && !summary) {
        fprintf(stderr, "usage: jinja_golden [--summary] <pairs.json>\n");
        return 64;
    }
    json_error_t je;
    json_t *g = json_load_file(argv[argc - 1], JSON_ALLOW_NUL, &je);
    if (!g) {
        fprintf(stderr, "%s: %s (line %d)\n", argv[argc - 1], je.text, je.line);
        return 1;
    }
    jinja_render_opts opts = {.now = (time_t)json_number_value(json_object_get(g, "now"))};
    size_t n = 0, failed = 0, unpaired = 0, texts = 0, raised = 0, errors = 0, parse = 0, shown = 0, i;
    json_t *p;
    const char *last_src = NULL;
    jinja_tpl *t = NULL;
    jinja_error cerr = {0};
    int crc = 0;
    json_array_foreach(json_object_get(g, "pairs"), i, p) {
        n++;
        const char *label = json_string_value(json_object_get(p, "label"));
        json_t *src = json_object_get(p, "template");
        if (!last_src || strcmp(last_src, json_string_value(src)) != 0) { /* pairs come grouped */
            jinja_free(t);
            t = NULL;
            crc = jinja_compile(json_string_value(src), json_string_length(src), NULL, &t, &cerr);
            last_src = json_string_value(src);
        }
        bool bad = false;
        json_t *want_text = json_object_get(p, "text"), *want_err = json_object_get(p, "error");
        if (json_object_get(p, "unpaired")) {
            unpaired++;
        } else if (json_object_get(p, "parse_error")) {
            parse++;
            if (crc == 0) {
                printf("%s: compiles here, but @huggingface/jinja cannot parse it: %s\n", label,
                       json_string_value(json_object_get(p, "parse_error")));
                bad = true;
            }
        } else if (crc != 0) {
            printf("%s: does not compile here: %s\n", label, cerr.msg);
            bad = true;
        } else {
            buf out;
            buf_init(&out, (size_t)64 << 20);
            jinja_error err = {0};
            int rc = jinja_render(t, json_object_get(p, "vars"), &opts, &out, &err);
            if (want_text) {
                texts++;
                if (rc != 0) {
                    printf("%s: want text, got error: %s\n", label, err.msg);
                    show("want", json_string_value(want_text), json_string_length(want_text));
                    bad = true;
                } else if (out.len != json_string_length(want_text) ||
                           (out.len && memcmp(out.data, json_string_value(want_text), out.len) != 0)) {
                    size_t k = 0;
                    const char *w = json_string_value(want_text);
                    while (k < out.len && k < json_string_length(want_text) && out.data[k] == (uint8_t)w[k])
                        k++;
                    printf("%s: rendering differs at byte %zu\n", label, k);
                    size_t from = k > 60 ? k - 60 : 0;
                    show("got ", (const char *)out.data + from, out.len - from);
                    show("want", w + from, json_string_length(want_text) - from);
                    bad = true;
                }
            } else {
                const char *msg = json_string_value(want_err);
                if (rc == 0) {
                    printf("%s: renders here, but @huggingface/jinja fails: %s\n", label, msg);
                    show("got ", (const char *)out.data, out.len);
                    bad = true;
                } else if (err.kind == JINJA_ERR_RAISED) {
                    raised++;
                    if (strncmp(err.msg, msg, sizeof err.msg - 1) != 0) {
                        printf("%s: raised '%s', want '%s'\n", label, err.msg, msg);
                        bad = true;
                    }
                } else {
                    errors++;
                }
            }
            buf_free(&out);
        }
        if (bad && ++shown > 40) {
            failed++;
            continue;
        }
        failed += bad;
    }
    jinja_free(t);
    printf("jinja_golden: %zu pairs (%zu templates Jinja cannot parse), %zu texts, %zu raised, %zu other "
           "errors, %zu not compared (half a surrogate pair): %zu differ\n", n, parse, texts, raised,
           errors, unpaired, failed);
    json_decref(g);
    return failed || n == 0 ? 1 : 0;
}
