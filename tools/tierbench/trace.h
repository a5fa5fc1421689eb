/* trace: the arrivals tierbench replays, as read from a CSV file or generated.
 *
 * One line per request, in time order:
 *     t_s,priority,tenant,data_class,model,size[,conversation]
 *     12.5034,normal,acme,public,demo,1
 *     12.6110,normal,acme,public,demo,1,4711
 * conversation (optional): the id (1..4294967295) of the conversation the request is a turn
 * of, in order of its turns (0 or absent: none); the simulator models the workers' prefix
 * caches by it (simprefix.h).
 * t_s: seconds from the start (>= 0, never before the line above); priority: urgent |
 * normal | batch; data_class: public | sensitive; tenant and model: 1..63 characters of
 * [A-Za-z0-9_.:-]; size: input rows, 1..1000000. Backend events share the file:
 *     60.0,event,kill,gpu,all        (or a backend index: 60.0,event,kill,gpu,1)
 *     180.0,event,revive,gpu,all
 * `#` starts a comment line; a header line starting with `t_s,` is skipped. Every limit is
 * a hard one: a file over it is refused with the line and the field named.
 *
 * The generator makes the same structure from a rate profile (Poisson or fixed spacing):
 * a base rate, surges (rate x factor for a while) and square waves (rate x high, then x low,
 * each half a period). Seeded: same spec, same trace.
 */
#ifndef TS_TRACE_H
#define TS_TRACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "policy.h"

#define TRACE_MAX_REQUESTS 1000000 /* arrivals in one trace */
#define TRACE_MAX_NAMES 64         /* distinct tenants, and distinct models */
#define TRACE_NAME_LEN 64
#define TRACE_MAX_EVENTS 256       /* kill/revive lines */
#define TRACE_LINE_MAX 1024
#define TRACE_MAX_SIZE 1000000u    /* input rows of one request */

typedef struct {
    double t;
    uint32_t size;
    uint8_t prio;      /* priority_class */
    bool sensitive;
    uint8_t tenant, model; /* indexes into the trace's name tables */
    uint32_t conv;     /* conversation id, 0: none */
} trace_arrival;

typedef struct {
    double t;
    bool kill;       /* else revive */
    char pool[TRACE_NAME_LEN];
    int backend;     /* -1: every backend of the pool */
} trace_event;

typedef struct {
    trace_arrival *a; /* owned */
    size_t n, cap;
    trace_event ev[TRACE_MAX_EVENTS];
    size_t n_ev;
    char tenants[TRACE_MAX_NAMES][TRACE_NAME_LEN];
    size_t n_tenants;
    char models[TRACE_MAX_NAMES][TRACE_NAME_LEN];
    size_t n_models;
} trace;

#define TRACE_MAX_SHAPES 16
#define TRACE_GEN_MAX_OPEN 100000 /* --conversations */

/* What `tierbench gen` (and `sim --rate`) generates. */
typedef struct {
    double rate_rps, duration_s;
    bool fixed;                      /* evenly spaced instead of Poisson */
    struct { double start, len, factor; } surge[TRACE_MAX_SHAPES];
    size_t n_surge;
    struct { double start, len, period, high, low; } wave[TRACE_MAX_SHAPES];
    size_t n_wave;
    double day_hour_s; /* > 0: a support desk's day (trace_day_factor), one hour = this many seconds */
    double mix[PRIO_COUNT];          /* share of each priority (normalised) */
    double sensitive;                /* share of sensitive requests */
    char tenants[8][TRACE_NAME_LEN];
    double tenant_share[8];          /* each tenant's share of the arrivals (normalised; 1 each) */
    size_t n_tenants;
    char model[TRACE_NAME_LEN];
    unsigned size_max;               /* sizes drawn uniformly from 1..size_max */
    unsigned turns;                  /* > 0: arrivals are turns of conversations of this many
                                      * turns, `conversations` of them open at once: an arrival
                                      * opens one while fewer are open, else a random open one
                                      * takes its next turn (its priority, tenant, data class) */
    unsigned conversations;          /* 1..TRACE_GEN_MAX_OPEN, default 64 */
    trace_event ev[TRACE_MAX_EVENTS];
    size_t n_ev;
    uint64_t seed;
} trace_gen;

/* Defaults: 10 rps for 60 s, Poisson, 10 % urgent / 70 % normal / 20 % batch, no sensitive,
 * tenant "acme", model "demo", size 1, no conversations (64 open at once with --turns), seed 1. */
void trace_gen_defaults(trace_gen *g);
/* Sets one generator option: key is the option name without "--" (rate, duration, fixed,
 * poisson, surge START:LEN:FACTOR, wave START:LEN:PERIOD:HIGH:LOW, day HOUR_S, mix urgent=..,normal=..,
 * batch=.., sensitive SHARE, tenants a[:SHARE],b[:SHARE], model NAME, size-max N, turns N, conversations N, seed N,
 * kill T:POOL[:IDX],
 * revive T:POOL[:IDX]). Returns 1 if the key is not a generator option, 0 when set, -1 with
 * a message naming the option on a bad value. */
int trace_gen_option(trace_gen *g, const char *key, const char *value, char *err, size_t errlen);

/* The daily profile of --day at an hour from midnight (wraps at 24): a share of the peak in
 * (0, 1], linear between the hourly anchors (night 0.08, lunch and evening 1.0). */
double trace_day_factor(double hour);

/* 0 or -1 with a message (the spec would exceed TRACE_MAX_REQUESTS, or a name is bad). */
int trace_generate(const trace_gen *g, trace *out, char *err, size_t errlen);
/* Reads a trace file; -1 with "path:line: what" on any bad line. */
int trace_load(const char *path, trace *out, char *err, size_t errlen);
/* Writes t in the file format (a trace_load of it gives t back, times to 0.1 ms). */
void trace_write(const trace *t, FILE *out);
void trace_free(trace *t);
/* The time of the last arrival or event (0 for an empty trace). */
double trace_span(const trace *t);

const char *trace_prio_name(priority_class p);

/* A tenant, model or pool name a trace may hold: 1..63 of [A-Za-z0-9_.:-]. */
bool trace_name_ok(const char *s);
/* Index of name in a table of *n names, added if new; -1 when the table is full. */
int trace_intern(char tab[][TRACE_NAME_LEN], size_t *n, const char *name);

#endif
