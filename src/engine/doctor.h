/* doctor: can this box run the execution tier it asks for, and if not, the exact fix.
 *
 * `tierserve doctor` runs the worker's own provider probe (ep_resolve() on throwaway
 * session options, so the verdict is the one a worker started with the same settings
 * reaches), then explains it: every provider library the requested tier needs, found next
 * to libonnxruntime.so.1, and each of their DT_NEEDED libraries resolved through the
 * dynamic loader one at a time, so every missing library is named (ORT's own reason names
 * only the first). Adds the CUDA runtime / cuDNN / TensorRT versions found, the NVIDIA
 * driver and the CUDA version it supports (NVML), and one fix per problem.
 *
 * Needs ortenv_init() first. The report is owned by the caller (doctor_destroy()).
 */
#ifndef TS_DOCTOR_H
#define TS_DOCTOR_H

#include <stdio.h>

#include "ep.h"

/* Exit codes of `tierserve doctor`: the requested tier works; it cannot (the worker would
 * be degraded, or its GPU tier would fail for a reason ORT does not check at start). The
 * second is 78 because that is what STRICT_EP=1 would do with the same settings. */
enum { DOCTOR_EXIT_OK = 0, DOCTOR_EXIT_CANNOT = 78 };

typedef struct doctor_report doctor_report;

/* Probes and checks. Returns NULL only when out of memory. */
doctor_report *doctor_run(const ep_config *cfg);
void doctor_destroy(doctor_report *r);

/* DOCTOR_EXIT_OK or DOCTOR_EXIT_CANNOT. */
int doctor_exit_code(const doctor_report *r);

/* Human-readable lines. */
void doctor_print_text(const doctor_report *r, FILE *out);
/* One JSON object and a newline. Returns 0, or -1 when out of memory. */
int doctor_print_json(const doctor_report *r, FILE *out);

#endif
