/* Spike server 1: today's layer, evhttp set up as src/net/httpserver.c does (gencb, the same
 * limits and timeout), the reply body handed over by reference as http_reply_buf does. */
#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <string.h>
#include <unistd.h>

#include "spike_common.h"

static void on_request(struct evhttp_request *req, void *arg)
{
    (void)arg;
    const spike_reply *r = spike_reply_get();
    const char *path = evhttp_uri_get_path(evhttp_request_get_evhttp_uri(req));
    if (evhttp_request_get_command(req) != EVHTTP_REQ_POST || !path || strcmp(path, SPIKE_PATH) != 0) {
        evhttp_send_error(req, 404, NULL);
        return;
    }
    const char *h = evhttp_find_header(evhttp_request_get_input_headers(req), "Inference-Header-Content-Length");
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    size_t len = evbuffer_get_length(in);
    /* the worker decodes from one contiguous body */
    if (!evbuffer_pullup(in, -1) || spike_check_body(h, h ? strlen(h) : 0, len) != 0) {
        evhttp_send_error(req, 400, NULL);
        return;
    }
    struct evkeyvalq *oh = evhttp_request_get_output_headers(req);
    evhttp_add_header(oh, "Content-Type", "application/octet-stream");
    evhttp_add_header(oh, "Inference-Header-Content-Length", r->json_len_str);
    struct evbuffer *out = evbuffer_new();
    evbuffer_add_reference(out, r->body, r->body_len, NULL, NULL);
    evhttp_send_reply(req, 200, "OK", out);
    evbuffer_free(out);
}

int main(int argc, char **argv)
{
    if (argc != 2) return 64;
    int fd = spike_listen(argv[1], 1);
    struct event_base *base = event_base_new();
    struct evhttp *http = base ? evhttp_new(base) : NULL;
    if (fd < 0 || !http) return 1;
    evhttp_set_max_body_size(http, SPIKE_MAX_BODY);
    evhttp_set_max_headers_size(http, 64 * 1024);
    evhttp_set_timeout(http, 60);
    evhttp_set_allowed_methods(http, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_HEAD | EVHTTP_REQ_PUT |
                                         EVHTTP_REQ_DELETE | EVHTTP_REQ_OPTIONS | EVHTTP_REQ_PATCH);
    evhttp_set_default_content_type(http, "application/json");
    evhttp_set_gencb(http, on_request, NULL);
    if (!evhttp_accept_socket_with_handle(http, fd)) return 1;
    event_base_dispatch(base);
    evhttp_free(http);
    event_base_free(base);
    return 0;
}
