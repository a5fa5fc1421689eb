/* httppath: a request path split into percent-decoded segments, bounded (worker and router). */
#ifndef TS_HTTPPATH_H
#define TS_HTTPPATH_H

#include <stdbool.h>
#include <stddef.h>

#define HTTPPATH_MAX_SEGS 8
#define HTTPPATH_SEG_MAX 256

/* Splits path on '/', skipping empty segments, and percent-decodes each. Returns the count,
 * or -1 with a 400 message naming the segment in msg: too many segments, one too long, one
 * that does not decode, or one that decodes to a control character, a space or '/' (never
 * safe to put back into a request line). */
int httppath_split(const char *path, char segs[HTTPPATH_MAX_SEGS][HTTPPATH_SEG_MAX], char *msg, size_t msglen);

struct evhttp_request;
/* The front door the worker and the router share. Refuses framing that two parties could
 * read differently (request smuggling: conflicting Content-Length headers, a Transfer-Encoding
 * other than plain chunked, or both), then splits the path. Returns the segment count, or -1
 * with the 400 message in msg; *close says the connection must be closed too (after bad
 * framing nothing later on it can be trusted). */
int httppath_request(struct evhttp_request *req, char segs[HTTPPATH_MAX_SEGS][HTTPPATH_SEG_MAX], char *msg,
                     size_t msglen, bool *close);

/* The same front door on the h1srv layer, which refuses ambiguous framing itself (400 and a
 * close, before any handler runs): splits the path. *close is always false; it stays so that
 * callers read alike. */
typedef struct h1req h1req;
int httppath_request_h1(h1req *req, char segs[HTTPPATH_MAX_SEGS][HTTPPATH_SEG_MAX], char *msg, size_t msglen,
                        bool *close);

#endif
