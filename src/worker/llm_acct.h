/* llm_acct: what the worker spent on the router's /v1 requests, kept for the router to ask
 * about when it cancelled one (GET /v1/accounting/{key}, docs/router.md "Billing a
 * cancelled request").
 *
 * The router bills a /v1 request from the worker's own report: a non-stream reply's
 * Tierserve-Usage header, a stream's `: tierserve-usage` line. A request whose client left
 * gets neither (the router closes the connection to cancel the work, and HTTP/1.1 has no
 * trailer-free way to send something after that), yet its prefill and the tokens made
 * before the cancel were spent. So every request the router tagged with a
 * Tierserve-Accounting-Key is tracked here while it is in flight, and leaves a record when
 * it is over (its sequence finished or cancelled, the compute final): prompt tokens,
 * tokens generated, compute milliseconds. Every one, not only those the worker saw cut:
 * the router may close a try whose whole reply the worker had already written (the two
 * race), and then asks all the same. The key is the router's, unique per try and
 * tenant-free.
 *
 * Bounded: at most LLM_ACCT_KEEP records (the oldest overwritten: the router asks within
 * seconds, so only a worker ending over a thousand requests a second could lose one), each
 * answered for LLM_ACCT_TTL_S seconds. Loop thread only. */
#ifndef TS_LLM_ACCT_H
#define TS_LLM_ACCT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define LLM_ACCT_KEY_MAX 64 /* 1..64 bytes of [A-Za-z0-9._-] */
#define LLM_ACCT_KEEP 4096
#define LLM_ACCT_TTL_S 120.0

typedef struct llm_acct llm_acct;

/* A request in flight, embedded in it (the caller owns the memory; llm_acct links it). */
typedef struct llm_acct_live {
    struct llm_acct_live *prev, *next;
    char key[LLM_ACCT_KEY_MAX + 1];
    bool on; /* linked */
} llm_acct_live;

typedef struct {
    uint64_t prompt_tokens, completion_tokens;
    double compute_ms;
} llm_acct_usage;

typedef enum { LLM_ACCT_UNKNOWN, LLM_ACCT_RUNNING, LLM_ACCT_DONE } llm_acct_state;

llm_acct *llm_acct_new(void);
void llm_acct_free(llm_acct *a);
/* Is key a well-formed key (the header's value)? */
bool llm_acct_key_ok(const char *key);
/* Starts tracking a request under key (checked with llm_acct_key_ok first). */
void llm_acct_begin(llm_acct *a, llm_acct_live *l, const char *key);
/* The request is over: untracked, its usage recorded at time now. Nothing for an l that was
 * never begun. */
void llm_acct_end(llm_acct *a, llm_acct_live *l, const llm_acct_usage *u, double now);
/* What is known of key at now: still in flight, a record (into *u), or nothing (never
 * seen, not recorded, or expired). The newest record wins. */
llm_acct_state llm_acct_find(const llm_acct *a, const char *key, double now, llm_acct_usage *u);

#endif
