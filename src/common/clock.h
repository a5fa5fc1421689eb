/* clock: the one monotonic clock both programs read (seconds as a double). Pure code takes
 * the time as an argument instead (the policy, the log rate limiter); only the programs'
 * edges call this. */
#ifndef TS_CLOCK_H
#define TS_CLOCK_H

#include <time.h>

static inline double ts_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

#endif
