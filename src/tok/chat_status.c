/* chat_status.c: /v2/status' fields of a model's chat template and tokenizer (chat.h). Apart
 * from chat.c, which needs no tokenizer (fuzz_v1_parse builds it without one). */
#include <string.h>

#include "chat.h"
#include "tokenizer.h"

void chat_status_json(const chat_tmpl *t, const tokenizer *tok, buf *b)
{
    buf_puts(b, ",\"chat_template_source\":");
    if (t) buf_put_json_str(b, chat_source(t), strlen(chat_source(t)));
    else buf_puts(b, "null");
    buf_printf(b, ",\"chat_template_tool_use\":%s,\"tokenizer\":{", t && chat_has_tool_use(t) ? "true" : "false");
    for (int k = 0; k < TOK_NPARTS; k++) {
        const char *v = tok_part(tok, (tok_part_kind)k);
        buf_printf(b, "%s\"%s\":", k ? "," : "", tok_part_name((tok_part_kind)k));
        buf_put_json_str(b, v, strlen(v));
    }
    buf_puts(b, "}");
}
