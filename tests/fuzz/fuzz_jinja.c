/* libFuzzer harness for the Jinja engine (src/jinja): the input is a template. It must
 * compile or be refused with a message; one that compiles must render a small conversation
 * within tight limits or stop with a message, never crash, read out of bounds or hang, and a
 * failed render must leave the output buffer as it was. */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "jinja.h"

static json_t *vars;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!vars)
        vars = json_loads("{\"messages\": [{\"role\": \"system\", \"content\": \"be brief\"},"
                          "{\"role\": \"user\", \"content\": \"h\\u00e9llo \\ud83c\\udf27\"},"
                          "{\"role\": \"assistant\", \"content\": \"\", \"tool_calls\": [{\"type\": \"function\","
                          "\"function\": {\"name\": \"f\", \"arguments\": {\"a\": [1, 2.5, null]}}}]},"
                          "{\"role\": \"tool\", \"content\": \"42\"}],"
                          "\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\"}}],"
                          "\"add_generation_prompt\": true, \"bos_token\": \"<s>\", \"eos_token\": \"</s>\"}",
                          0, NULL);
    jinja_limits lim = {.max_steps = 20000, .max_output = 1 << 16, .max_memory = 8 << 20, .max_depth = 64};
    jinja_tpl *t = NULL;
    jinja_error err;
    if (jinja_compile((const char *)data, size, &lim, &t, &err) != 0) {
        if (t || err.kind != JINJA_ERR_SYNTAX || !err.msg[0])
            abort();
        return 0;
    }
    buf out;
    buf_init(&out, 1 << 20);
    buf_put(&out, "keep", 4);
    if (jinja_render(t, vars, NULL, &out, &err) != 0) {
        if (!(err.kind == JINJA_ERR_RENDER || err.kind == JINJA_ERR_RAISED || err.kind == JINJA_ERR_LIMIT ||
              err.kind == JINJA_ERR_FULL))
            abort();
        if (err.kind != JINJA_ERR_RAISED && !err.msg[0])
            abort();
        if (out.len != 4 || memcmp(out.data, "keep", 4) != 0)
            abort();
    } else if (out.len < 4 || out.len - 4 > lim.max_output) {
        abort();
    }
    buf_free(&out);
    jinja_free(t);
    return 0;
}
