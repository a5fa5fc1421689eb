/* openai_err: see openai_err.h. */
#include "openai_err.h"

#include <string.h>

const char *openai_err_type(int status)
{
    switch (status) {
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 409: return "conflict_error";
    case 429: return "rate_limit_error";
    default: return status >= 500 ? "server_error" : "invalid_request_error";
    }
}

static void put_str_or_null(buf *b, const char *s)
{
    if (s) buf_put_json_str(b, s, strlen(s));
    else buf_puts(b, "null");
}

void openai_err_json(buf *b, int status, const char *type, const char *msg, const char *param, const char *code)
{
    buf_puts(b, "{\"error\":{\"message\":");
    put_str_or_null(b, msg ? msg : "error");
    buf_puts(b, ",\"type\":");
    put_str_or_null(b, type ? type : openai_err_type(status));
    buf_puts(b, ",\"param\":");
    put_str_or_null(b, param);
    buf_puts(b, ",\"code\":");
    put_str_or_null(b, code);
    buf_puts(b, "}}");
}

bool openai_path(const char *path, size_t len)
{
    return path && len >= 3 && memcmp(path, "/v1", 3) == 0 && (len == 3 || path[3] == '/');
}
