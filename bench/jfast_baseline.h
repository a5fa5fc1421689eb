/* jfast's number routines before the rewrite: bench_jsonrate's baseline, nothing else. */
#ifndef TS_JFAST_BASELINE_H
#define TS_JFAST_BASELINE_H

#include <stddef.h>
#include <stdint.h>

#include "dtype.h"

int base_parse_array(const char *p, const char *end, ts_dtype dt, uint8_t *out, size_t count);
size_t base_fmt_f32(char *out, float f);

#endif
