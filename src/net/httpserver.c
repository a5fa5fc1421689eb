#include "httpserver.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

struct evhttp *httpserver_create(struct event_base *base, size_t max_body_bytes, int timeout_s,
                                 void (*cb)(struct evhttp_request *, void *), void *arg)
{
    struct evhttp *http = base ? evhttp_new(base) : NULL;
    if (!http) return NULL;
    evhttp_set_max_body_size(http, (ev_ssize_t)max_body_bytes);
    evhttp_set_max_headers_size(http, HTTP_MAX_HEADER_BYTES);
    evhttp_set_timeout(http, timeout_s);
    evhttp_set_allowed_methods(http, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_HEAD | EVHTTP_REQ_PUT |
                                         EVHTTP_REQ_DELETE | EVHTTP_REQ_OPTIONS | EVHTTP_REQ_PATCH);
    evhttp_set_default_content_type(http, "application/json");
    evhttp_set_gencb(http, cb, arg);
    return http;
}

int httpserver_bind(struct evhttp *http, const char *address, unsigned port, struct evhttp_bound_socket **sock,
                    int *bound_port, char *err, size_t errlen)
{
    *sock = port <= 65535 ? evhttp_bind_socket_with_handle(http, address, (ev_uint16_t)port) : NULL;
    if (!*sock) {
        snprintf(err, errlen, "could not listen on %s:%u: %s", address, port, errno ? strerror(errno) : "bad address");
        return -1;
    }
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    *bound_port = (int)port;
    if (getsockname(evhttp_bound_socket_get_fd(*sock), (struct sockaddr *)&ss, &sl) == 0)
        *bound_port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                                     : ((struct sockaddr_in *)&ss)->sin_port);
    return 0;
}

void http_reply_buf(struct evhttp_request *req, int code, const char *ctype, buf *b)
{
    struct evkeyvalq *h = evhttp_request_get_output_headers(req);
    if (ctype) evhttp_add_header(h, "Content-Type", ctype);
    struct evbuffer *out = evbuffer_new();
    if (out && b && b->len) {
        /* hand the bytes over without a copy; libevent frees them when sent */
        if (evbuffer_add_reference(out, b->data, b->len, (evbuffer_ref_cleanup_cb)(void (*)(void))free, NULL) == 0) {
            b->data = NULL;
            b->len = b->cap = 0;
        }
    }
    evhttp_send_reply(req, code, NULL, out);
    if (out) evbuffer_free(out);
}

void http_reply_error(struct evhttp_request *req, int code, const char *msg)
{
    buf b;
    buf_init(&b, 1 << 16);
    buf_put_error_json(&b, msg);
    struct evkeyvalq *h = evhttp_request_get_output_headers(req);
    if ((code == 503 || code == 429) && !evhttp_find_header(h, "Retry-After")) evhttp_add_header(h, "Retry-After", "1");
    http_reply_buf(req, code, "application/json", &b);
    buf_free(&b);
}

void httpserver_h1_limits(h1srv_limits *lim, size_t max_body_bytes, double timeout_s, size_t max_conns,
                          const char *setting)
{
    *lim = (h1srv_limits){.max_body_bytes = max_body_bytes, .max_header_bytes = HTTP_MAX_HEADER_BYTES,
                          .max_headers = H1_MAX_HEADERS, .timeout_s = timeout_s, .max_conns = max_conns,
                          .max_conns_setting = setting};
}
