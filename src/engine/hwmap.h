/* hwmap: what this box is: CPU topology (hwloc), GPUs (NVML), NICs, and the image profile
 * it should run (cpu / tensorrt / jetson). Printed by `tierserve hwmap`, embedded in
 * /v2/status. */
#ifndef TS_HWMAP_H
#define TS_HWMAP_H

/* A malloc'd JSON object; never NULL unless out of memory. */
char *hwmap_json(void);

#endif
