/* openai_err: the OpenAI error object, written in one place for both programs (the worker's
 * /v1 API and the router's /v1 front), with one table from HTTP status to OpenAI's error type.
 *
 *   {"error":{"message":"...","type":"...","param":null,"code":null}}
 *
 * OpenAI's SDKs choose their exception class from the status alone (400 BadRequestError, 401
 * AuthenticationError, 403 PermissionDeniedError, 404 NotFoundError, 409 ConflictError, 422
 * UnprocessableEntityError, 429 RateLimitError, 5xx InternalServerError); the type and code are
 * for people and for programs that branch on a condition (code "context_length_exceeded"). */
#ifndef TS_OPENAI_ERR_H
#define TS_OPENAI_ERR_H

#include <stdbool.h>
#include <stddef.h>

#include "buf.h"

/* OpenAI's type for an HTTP status: 401 authentication_error, 403 permission_error, 404
 * not_found_error, 409 conflict_error, 429 rate_limit_error, 5xx server_error, any other 4xx
 * invalid_request_error. A 429 for a spent budget passes "insufficient_quota" itself. */
const char *openai_err_type(int status);

/* Appends the error object for status onto b. type NULL: openai_err_type(status); param and
 * code NULL: JSON null. msg is escaped (invalid UTF-8 becomes U+FFFD). */
void openai_err_json(buf *b, int status, const char *type, const char *msg, const char *param, const char *code);

/* Whether a request target (its path, len bytes, no NUL needed) is on the /v1 API: "/v1" or
 * "/v1/...", where clients are OpenAI SDKs and every error takes OpenAI's shape. */
bool openai_path(const char *path, size_t len);

#endif
