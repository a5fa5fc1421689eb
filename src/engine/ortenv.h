/* ortenv: the process-wide ONNX Runtime API table and environment.
 *
 * ORT's own log goes through a custom logger into our JSON lines (never its ANSI text).
 * While a capture is open, ERROR-level ORT messages are also kept so that ep.c can quote
 * ORT's real reason for a failed provider ("Failed to load library ... cannot open shared
 * object file"), which the C API status alone does not carry.
 */
#ifndef TS_ORTENV_H
#define TS_ORTENV_H

#include <stdbool.h>
#include <stddef.h>

#include <onnxruntime_c_api.h>

#include "dtype.h"
#include "log.h"

extern const OrtApi *g_ort;

/* ONNX Runtime's own switch for its telemetry (1: off). ortenv_init sets it to 1 unless the
 * environment already has it (the operator's choice wins, and is logged when not 1). */
#define ORTENV_TELEMETRY_VAR "ORT_DISABLE_TELEMETRY"

/* Creates the API table and the env, ONNX Runtime's telemetry off (ORTENV_TELEMETRY_VAR).
 * Returns 0, or -1 with a message in err. */
int ortenv_init(log_level ort_min_level, char *err, size_t errlen);
OrtEnv *ortenv_env(void);
/* CPU memory info for tensors that wrap our own buffers (created by ortenv_init). */
const OrtMemoryInfo *ortenv_cpu_meminfo(void);
void ortenv_shutdown(void);
const char *ortenv_version(void);

/* ORT's reason in a message: the text after "FAIL : " (or all of it), trimmed. */
void ortenv_fail_reason(const char *msg, char *out, size_t outlen);

/* Starts keeping ERROR messages from ORT's logger (process-wide; callers are serial). */
void ortenv_capture_begin(void);
/* Stops and copies the text after "FAIL : " of the last captured message (or the whole
 * last message) into out. Returns true if something was captured. */
bool ortenv_capture_end(char *out, size_t outlen);

/* KServe datatypes <-> ORT element types. */
ONNXTensorElementDataType dtype_to_onnx(ts_dtype dt);
ts_dtype dtype_from_onnx(ONNXTensorElementDataType t); /* DT_INVALID if not shared */

/* If st is an error: copies its message into out (may be NULL), releases it, returns -1.
 * Returns 0 for success (st == NULL). */
int ort_check(OrtStatus *st, char *out, size_t outlen);

#endif
