/* quant_cmd: `tierserve quantize IN.onnx OUT.onnx [options]`, weight-only INT8 / INT4 of an
 * FP32 ONNX model into MatMulNBits (src/quant/quant.h). No ONNX Runtime is started. */
#ifndef TS_QUANT_CMD_H
#define TS_QUANT_CMD_H

/* argv[1] is "quantize". Returns the exit code: 0 written, 64 bad arguments, 1 failed. */
int quant_cmd(int argc, char **argv);

#endif
