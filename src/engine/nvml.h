/* nvml: the few NVML calls we use, loaded with dlopen("libnvidia-ml.so.1") at run time.
 * Absent library or no GPU means "no GPU metrics", never an error. Thread-safe. */
#ifndef TS_NVML_H
#define TS_NVML_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define NVML_MAX_GPUS 16

typedef struct {
    char name[96];
    uint64_t mem_total, mem_used; /* bytes */
    double util;                  /* 0..1, or -1 if unknown */
    double power_w;               /* or -1 */
} nvml_gpu;

/* Returns the number of GPUs read (0 when NVML is absent). driver may be NULL. */
size_t nvml_read(nvml_gpu *out, size_t max, char *driver, size_t driver_len);
/* Why NVML is not available ("" when it is). */
const char *nvml_absent_reason(void);
/* The newest CUDA version the driver supports, as 1000 * major + 10 * minor (13000 for
 * 13.0), or -1 when NVML or the call is absent. */
int nvml_cuda_driver_version(void);

#endif
