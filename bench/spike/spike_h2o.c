/* Spike server 3: h2o 2.2 on its own loop (libh2o-evloop): h2o buffers the whole request
 * entity before calling the handler registered on the path; the reply goes out with
 * h2o_send() from a static buffer. */
#include <h2o.h>
#include <limits.h>
#include <string.h>

#include "spike_common.h"

static h2o_globalconf_t g_config;
static h2o_context_t g_ctx;
static h2o_accept_ctx_t g_accept_ctx;

static int on_req(h2o_handler_t *self, h2o_req_t *req)
{
    (void)self;
    static h2o_generator_t gen; /* nothing to proceed or stop: the body goes out in one h2o_send */
    const spike_reply *r = spike_reply_get();
    if (!h2o_memis(req->method.base, req->method.len, H2O_STRLIT("POST")) ||
        !h2o_memis(req->path_normalized.base, req->path_normalized.len, H2O_STRLIT(SPIKE_PATH)))
        return -1; /* h2o answers 404 */
    ssize_t i = h2o_find_header_by_str(&req->headers, H2O_STRLIT("inference-header-content-length"), -1);
    const h2o_iovec_t *v = i >= 0 ? &req->headers.entries[i].value : NULL;
    if (spike_check_body(v ? v->base : NULL, v ? v->len : 0, req->entity.len) != 0) {
        h2o_send_error_400(req, "Bad Request", "bad Inference-Header-Content-Length", 0);
        return 0;
    }
    req->res.status = 200;
    req->res.reason = "OK";
    req->res.content_length = r->body_len;
    h2o_add_header(&req->pool, &req->res.headers, H2O_TOKEN_CONTENT_TYPE, NULL, H2O_STRLIT("application/octet-stream"));
    h2o_add_header_by_str(&req->pool, &req->res.headers, H2O_STRLIT("inference-header-content-length"), 0, NULL,
                          r->json_len_str, strlen(r->json_len_str));
    h2o_start_response(req, &gen);
    h2o_iovec_t body = h2o_iovec_init(r->body, r->body_len);
    h2o_send(req, &body, 1, H2O_SEND_STATE_FINAL);
    return 0;
}

static void on_accept(h2o_socket_t *listener, const char *err)
{
    h2o_socket_t *sock;
    if (err || !(sock = h2o_evloop_socket_accept(listener))) return;
    h2o_accept(&g_accept_ctx, sock);
}

int main(int argc, char **argv)
{
    if (argc != 2) return 64;
    int fd = spike_listen(argv[1], 1);
    if (fd < 0) return 1;
    h2o_config_init(&g_config);
    g_config.max_request_entity_size = SPIKE_MAX_BODY;
    h2o_hostconf_t *host = h2o_config_register_host(&g_config, h2o_iovec_init(H2O_STRLIT("default")), 65535);
    h2o_pathconf_t *path = h2o_config_register_path(host, "/", 0);
    h2o_handler_t *handler = h2o_create_handler(path, sizeof *handler);
    handler->on_req = on_req;
    h2o_context_init(&g_ctx, h2o_evloop_create(), &g_config);
    g_accept_ctx.ctx = &g_ctx;
    g_accept_ctx.hosts = g_config.hosts;
    h2o_socket_t *ls = h2o_evloop_socket_create(g_ctx.loop, fd, H2O_SOCKET_FLAG_DONT_READ);
    h2o_socket_read_start(ls, on_accept);
    while (h2o_evloop_run(g_ctx.loop, INT32_MAX) == 0)
        ;
    return 0;
}
