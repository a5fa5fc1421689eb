#include "httpserver.h"

void httpserver_h1_limits(h1srv_limits *lim, size_t max_body_bytes, double timeout_s, size_t max_conns,
                          const char *setting)
{
    *lim = (h1srv_limits){.max_body_bytes = max_body_bytes, .max_header_bytes = HTTP_MAX_HEADER_BYTES,
                          .max_headers = H1_MAX_HEADERS, .timeout_s = timeout_s, .max_conns = max_conns,
                          .max_conns_setting = setting};
}
