/* httppath: a request path split into percent-decoded segments, bounded (worker and router). */
#ifndef TS_HTTPPATH_H
#define TS_HTTPPATH_H

#include <stddef.h>

#define HTTPPATH_MAX_SEGS 8
#define HTTPPATH_SEG_MAX 256

/* Splits path on '/', skipping empty segments, and percent-decodes each ('%' and two hex
 * digits; any other '%' stays as sent). Returns the count, or -1 with a 400 message naming the
 * segment in msg: too many segments, one too long, or one that decodes to a control character
 * (%00 included), a space or '/' (never safe to put back into a request line). */
int httppath_split(const char *path, char segs[HTTPPATH_MAX_SEGS][HTTPPATH_SEG_MAX], char *msg, size_t msglen);

/* The decoded segments joined again into one path ("/a/b"; "/" for none): what both programs'
 * route tables match, so empty segments and percent-escapes route as they always did (a
 * decoded segment never holds a '/'). out holds HTTPPATH_JOINED_MAX bytes; returns its length. */
#define HTTPPATH_JOINED_MAX (HTTPPATH_MAX_SEGS * HTTPPATH_SEG_MAX + 2)
size_t httppath_join(char segs[HTTPPATH_MAX_SEGS][HTTPPATH_SEG_MAX], size_t n, char out[HTTPPATH_JOINED_MAX]);

/* The front door the worker and the router share. h1srv refuses framing that two parties
 * could read differently (request smuggling) itself, with 400 and a close, before any
 * handler runs; this splits the request's path as httppath_split does. */
typedef struct h1req h1req;
int httppath_request_h1(h1req *req, char segs[HTTPPATH_MAX_SEGS][HTTPPATH_SEG_MAX], char *msg, size_t msglen);

#endif
