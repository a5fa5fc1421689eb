/* tune_cmd: `tierserve tune MODEL_DIR`, the load-time layout measurement without serving. */
#ifndef TS_TUNE_CMD_H
#define TS_TUNE_CMD_H

#include "settings.h"

/* argv[2] is the model folder, argv[3..] settings flags. Returns the exit code. */
int tune_cmd(int argc, char **argv);

#endif
