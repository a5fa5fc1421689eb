/* The HTTP-layer spike (issue 10): three throwaway single-threaded servers with the worker's
 * hot-path shape, so that only the HTTP layer differs between them. Each answers
 * POST /v2/models/mlp/infer carrying a binary KServe v2 body (JSON header + 2 KiB FP32,
 * Inference-Header-Content-Length) with 200, a JSON header + 2 KiB of fixed FP32 bytes and
 * Inference-Header-Content-Length, keep-alive; anything else gets 404. No ORT: the spike
 * measures the layer, not the model. Not for production, not for tests.
 *
 *   spike_<layer> PORT        (listens on 127.0.0.1; prints "listening on 127.0.0.1:P")
 */
#ifndef SPIKE_COMMON_H
#define SPIKE_COMMON_H

#include <stddef.h>

#define SPIKE_PATH "/v2/models/mlp/infer"
#define SPIKE_MAX_BODY (1u << 20) /* request bodies beyond this get 413 */
#define SPIKE_OUT_BYTES 2048      /* 512 FP32 */

/* The reply's body (JSON header then the fixed output tensor), built once; the JSON header's
 * length goes in Inference-Header-Content-Length. Owned by spike_common, never freed. */
typedef struct {
    const char *body;
    size_t body_len;
    size_t json_len;
    char json_len_str[24];
} spike_reply;

const spike_reply *spike_reply_get(void);

/* A non-blocking listening socket on 127.0.0.1:port (0: any); prints the bound port. -1 on error. */
int spike_listen(const char *port_arg, int nonblocking);

/* 0 when a request body of len bytes with Inference-Header-Content-Length hdr (NULL: absent)
 * has the hot path's shape (header length within the body); the server then replies 200. */
int spike_check_body(const char *hdr, size_t hdr_len, size_t len);

#endif
