/* quant_io (private to src/quant): the ONNX file reader quant_onnx.c and quant_trunk.c share. */
#ifndef TS_QUANT_IO_H
#define TS_QUANT_IO_H

#include <stddef.h>
#include <stdint.h>

/* The whole file at path (a regular file under 2 GiB, protobuf's limit), malloc'd; NULL
 * with err set. */
uint8_t *quant_read_file(const char *path, size_t *len, char *err, size_t errlen);

#endif
