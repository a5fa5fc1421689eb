/* cudart: the few CUDA runtime calls the LLM KV cache needs (strided device-to-device
 * copies, a memset, a synchronize), loaded with dlopen("libcudart.so.*") at run time, the
 * way nvml.c loads NVML: no CUDA headers at build time, no CUDA library needed on CPU boxes.
 *
 * Every call runs on the calling thread's current device after cudaSetDevice(device), on
 * the legacy default stream, and cudart_sync waits for the whole device: ONNX Runtime's CUDA
 * provider runs on a stream of its own that does not order itself against ours, so a copy
 * brackets itself with cudart_sync on both sides. Thread-safe (the library is loaded once). */
#ifndef TS_CUDART_H
#define TS_CUDART_H

#include <stdbool.h>
#include <stddef.h>

/* Loads the library once: the libcudart.so.* already in the process if there is one (ORT's
 * CUDA provider's), else the first of .13, .12, .11.0, unversioned that opens. Returns 0, or
 * -1 with why it cannot be used ("libcudart.so.13 ... cannot open shared object file", a
 * missing entry point). */
int cudart_load(char *why, size_t whylen);
/* Which file was loaded ("" before a successful cudart_load). */
const char *cudart_name(void);

/* height rows of width bytes, row i from src + i*spitch to dst + i*dpitch, device to device,
 * asynchronous on the default stream. Returns 0, or -1 with the CUDA error's text. */
int cudart_copy2d(int device, void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                  size_t height, char *err, size_t errlen);
/* bytes zero bytes at dst (device memory), asynchronous on the default stream. */
int cudart_zero(int device, void *dst, size_t bytes, char *err, size_t errlen);
/* Waits for everything queued on the device (ours and ORT's). */
int cudart_sync(int device, char *err, size_t errlen);
/* The device's free and total memory (cudaMemGetInfo). 0, or -1 with err. */
int cudart_mem_free(int device, size_t *free_bytes, size_t *total_bytes, char *err, size_t errlen);

#endif
