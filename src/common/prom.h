/* prom: the pieces of Prometheus's text exposition format both programs write. */
#ifndef TS_PROM_H
#define TS_PROM_H

#include "buf.h"

/* Starts a metric family: "# HELP name help\n# TYPE name type\n" (type: counter, gauge,
 * histogram). help is our own text: a newline or backslash in it would break the format and
 * is written escaped as the format asks (\\n, \\\\). */
void prom_family(buf *b, const char *name, const char *type, const char *help);

#endif
