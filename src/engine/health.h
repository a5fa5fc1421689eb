/* health: the worker's liveness and readiness, shared by every thread.
 *
 * A GPU fault latches: once a Run() reports a CUDA error the process is not live until it
 * restarts (Kubernetes does that when /v2/health/live answers 503). Draining (SIGTERM)
 * makes the worker not ready while in-flight work finishes.
 */
#ifndef TS_HEALTH_H
#define TS_HEALTH_H

#include <stdbool.h>
#include <stddef.h>

bool health_live(void);
void health_set_draining(void);
bool health_gpu_faulted(void);
/* Copies the latched fault message ("" if none). */
void health_gpu_fault_message(char *out, size_t len);

/* Latches a GPU fault if msg looks like a CUDA/cuDNN/cuBLAS/TensorRT device error, and logs
 * `GPU fault: <msg>; marking not live` once. Returns true if msg is such an error. */
bool health_check_gpu_error(const char *msg, const char *model);

/* Pure: does this ORT error message describe a device (sticky CUDA) error? */
bool health_is_gpu_error(const char *msg);

#endif
