/* Forced tool calls (tool_choice "required" or a named function): a grammar in the model
 * family's own call syntax around each tool's parameters schema, built as grammar text with
 * schema rules (gram_compile_gbnf_refs). The syntax per family is what src/tok/toolcall.c
 * parses; markers that are special tokens in the family's vocabulary are token elements. */
#include <stdio.h>
#include <string.h>

#include "buf.h"
#include "gram_int.h"

#define DS_CALLS_BEGIN "<\xef\xbd\x9ctool\xe2\x96\x81" "calls\xe2\x96\x81" "begin\xef\xbd\x9c>"
#define DS_CALLS_END "<\xef\xbd\x9ctool\xe2\x96\x81" "calls\xe2\x96\x81" "end\xef\xbd\x9c>"
#define DS_CALL_BEGIN "<\xef\xbd\x9ctool\xe2\x96\x81" "call\xe2\x96\x81" "begin\xef\xbd\x9c>"
#define DS_CALL_END "<\xef\xbd\x9ctool\xe2\x96\x81" "call\xe2\x96\x81" "end\xef\xbd\x9c>"
#define DS_SEP "<\xef\xbd\x9ctool\xe2\x96\x81sep\xef\xbd\x9c>"

int gram_tools_format_of(const char *name)
{
    static const char *const N[] = {NULL, "hermes", "llama3_json", "mistral", "deepseek_v3"};
    for (int i = 1; i < 5; i++)
        if (name && !strcmp(name, N[i]))
            return i;
    return -1;
}

static bool good_name(const char *s)
{
    size_t n = s ? strlen(s) : 0;
    if (!n || n > 64)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-'))
            return false;
    }
    return true;
}

gram_grammar *gram_compile_tools(gram_tools_format f, const gram_tool *tools, size_t n_tools, const char *forced,
                                 bool parallel, const gram_limits *lim, ts_err *err)
{
    if (f < GRAM_TOOLS_HERMES || f > GRAM_TOOLS_DEEPSEEK3 || !n_tools || n_tools > 128 || !tools) {
        ts_err_set(err, TS_BAD_REQUEST, "tool grammar: a known call format and 1-128 tools");
        return NULL;
    }
    gram_ref refs[128];
    char names[128][16];
    buf g;
    buf_init(&g, 1 << 20);
    /* call ::= one alternative per tool (only the forced one when named) */
    buf_puts(&g, "call ::= ");
    size_t n_alt = 0;
    for (size_t i = 0; i < n_tools; i++) {
        if (!good_name(tools[i].name)) {
            buf_free(&g);
            ts_err_set(err, TS_BAD_REQUEST, "tool grammar: tool %zu needs a name of 1-64 of a-zA-Z0-9_-", i);
            return NULL;
        }
        snprintf(names[i], sizeof names[i], "args%zu", i);
        refs[i].name = names[i];
        refs[i].schema = tools[i].schema && tools[i].len ? tools[i].schema : "{\"type\":\"object\"}";
        refs[i].len = tools[i].schema && tools[i].len ? tools[i].len : strlen(refs[i].schema);
        if (forced && strcmp(forced, tools[i].name))
            continue;
        const char *nm = tools[i].name;
        buf_puts(&g, n_alt++ ? " | " : "");
        if (f == GRAM_TOOLS_DEEPSEEK3)
            buf_printf(&g, "<[" DS_CALL_BEGIN "]> \"function\" <[" DS_SEP "]> \"%s\\n```json\\n\" %s \"\\n```\" <["
                       DS_CALL_END "]>", nm, names[i]);
        else
            buf_printf(&g, "\"{\\\"name\\\":\\\"%s\\\",\\\"%s\\\":\" %s \"}\"", nm,
                       f == GRAM_TOOLS_LLAMA3 ? "parameters" : "arguments", names[i]);
    }
    if (!n_alt) {
        buf_free(&g);
        ts_err_set(err, TS_BAD_REQUEST, "tool grammar: the forced function '%.64s' is not among the tools",
                   forced ? forced : "");
        return NULL;
    }
    buf_puts(&g, "\n");
    /* more: the separator and the rest of one-or-more calls, or nothing for one call */
    char more[160] = "";
    const char *sep = f == GRAM_TOOLS_HERMES ? "\"\\n\" one" : f == GRAM_TOOLS_LLAMA3 ? "\";\" call"
                      : f == GRAM_TOOLS_MISTRAL ? "\",\" call" : "\"\\n\" call";
    if (parallel)
        snprintf(more, sizeof more, "(%s)*", sep);
    switch (f) {
    case GRAM_TOOLS_HERMES:
        buf_printf(&g, "one ::= \"<tool_call>\\n\" call \"\\n</tool_call>\"\nroot ::= one %s\n", more);
        break;
    case GRAM_TOOLS_LLAMA3:
        buf_printf(&g, "root ::= <[<|python_tag|>]>? call %s\n", more);
        break;
    case GRAM_TOOLS_MISTRAL:
        buf_printf(&g, "root ::= <[[TOOL_CALLS]]> \"[\" call %s \"]\"\n", more);
        break;
    default:
        buf_printf(&g, "root ::= <[" DS_CALLS_BEGIN "]> call %s <[" DS_CALLS_END "]>\n", more);
        break;
    }
    if (buf_failed(&g)) {
        buf_free(&g);
        ts_err_set(err, TS_INTERNAL_ERROR, "tool grammar: out of memory");
        return NULL;
    }
    gram_grammar *gr = gram_compile_gbnf_refs((const char *)g.data, g.len, refs, n_tools, lim, err);
    buf_free(&g);
    return gr;
}
