/* loadbody: the KServe v2 request bodies `tierbench load` sends for one model.
 *
 * The inputs (name, datatype, shape) come from the model's GET /v2/models/{m} metadata, or
 * from --input specs when the target is not a KServe server. A leading -1 dimension is the
 * batch dimension: a request of size N sends N rows there; other -1 dimensions become 1.
 * The data is seeded random, generated once for the largest size the run sends; a request
 * of N rows sends the first N rows, so no body is built or copied per request: the parts
 * are referenced from the blobs kept here (binary layout, or the JSON text of the same
 * values with an offset per row).
 */
#ifndef TS_LOADBODY_H
#define TS_LOADBODY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dtype.h"

#define LB_MAX_INPUTS 16
#define LB_MAX_DIMS 8
#define LB_MAX_DATA_BYTES (256u << 20) /* every blob of a model together, binary + JSON */

typedef struct {
    char name[64];
    ts_dtype dt;
    int64_t dims[LB_MAX_DIMS]; /* -1 only at dims[0] (the batch dimension) */
    size_t n_dims;
} lb_input;

typedef struct {
    lb_input in[LB_MAX_INPUTS];
    size_t n_in;
    uint32_t rows_max;         /* the largest batch the blobs hold */
    uint8_t *bin[LB_MAX_INPUTS]; /* owned: rows_max rows, binary-extension layout */
    size_t row_bytes[LB_MAX_INPUTS];
    char *json[LB_MAX_INPUTS];   /* owned: "v,v,...," text of the same rows */
    size_t *json_off[LB_MAX_INPUTS]; /* owned: rows_max + 1 offsets into json[i] */
} lb_model;

/* Parses one --input spec "NAME:DTYPE:D0,D1,..." (dims are integers >= 1, or -1 first) and
 * appends it. 0, or -1 with a message naming the spec. */
int lb_input_parse(lb_model *m, const char *spec, char *err, size_t errlen);
/* Splits "http://HOST[:PORT][/]" (HOST may be [v6]) into host and port (default 80).
 * 0, or -1 with a message naming the URL. */
int lb_parse_url(const char *url, char *host, size_t host_cap, char *port, size_t port_cap, char *err, size_t errlen);
/* One blocking HTTP/1.1 exchange over a fresh connection, closed after it: src/net/h1cli
 * run on a private event loop until the reply ends (the reply parsed by http-parser, never
 * by hand). Method and path, extra header lines `headers` ("Name: value" each ending CRLF,
 * or NULL), and a body when body is not NULL (its Content-Length is added). The reply, at
 * most reply_max bytes with its head, is read within timeout_s per wait; a chunked body is
 * decoded. On 0, out->raw owns the
 * bytes (free with lb_reply_free) and out->body points at the NUL-terminated body; -1 with
 * a message (no reply, garbage, over the limit). Any status is a reply. */
typedef struct {
    int status;
    char *raw;        /* owned: the head, then the body */
    const char *body; /* into raw, len bytes, NUL-terminated */
    size_t len;
} lb_reply;
int lb_http(const char *host, const char *port, const char *method, const char *path, const char *headers,
            const void *body, size_t body_len, size_t reply_max, double timeout_s, lb_reply *out, char *err,
            size_t errlen);
/* Copies the value of the reply header `name` (case-insensitive) into buf; false if absent. */
bool lb_reply_header(const lb_reply *r, const char *name, char *buf, size_t cap);
void lb_reply_free(lb_reply *r);
/* Fetches GET /v2/models/{model} from host:port (blocking, timeout_s) into m. */
int lb_fetch(lb_model *m, const char *host, const char *port, const char *model, double timeout_s, char *err,
             size_t errlen);
/* Generates the data for up to rows_max rows (seeded). -1 with a message when it would
 * exceed LB_MAX_DATA_BYTES. */
int lb_build(lb_model *m, uint32_t rows_max, uint64_t seed, char *err, size_t errlen);
void lb_free(lb_model *m);


/* A request body is a list of parts: owned text (a few hundred bytes of JSON) and
 * references into the model's blobs. */
typedef struct {
    const void *p;
    size_t n;
} lb_ref;
#define LB_MAX_PARTS (3 * LB_MAX_INPUTS + 2)
typedef struct {
    char head[4096]; /* the JSON text around the data */
    lb_ref part[LB_MAX_PARTS];
    size_t n_part;
    size_t total;
    long header_len; /* Inference-Header-Content-Length, -1 for a JSON body */
} lb_body;

/* Describes the body of a request of `size` for m (binary or JSON). 0, or -1 if the JSON
 * head would not fit (long names: refused at lb_build already, so never in practice). */
int lb_body_make(const lb_model *m, uint32_t size, bool binary, lb_body *b);

#endif
