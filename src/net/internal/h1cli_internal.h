/* h1cli_internal.h: the socketless entry the response fuzz harness uses. Not a public
 * header. Loop thread only. */
#ifndef TS_H1CLI_INTERNAL_H
#define TS_H1CLI_INTERNAL_H

#include "h1cli.h"

/* Adds a connected socket (one end of a socketpair: a fake backend) to the pool as an idle
 * keep-alive connection, so that the next h1cli_send uses it. Returns 0, or -1 (the socket
 * is closed). */
int h1cli_pool_adopt(h1cli_pool *p, int fd);

#endif
