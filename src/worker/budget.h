/* budget: a byte budget that several threads draw on at once; the worker's bound on the
 * request bytes it holds (bodies as read, inflated and parsed).
 *
 * budget_take() succeeds only while the total stays within the limit; budget_give() returns
 * bytes. Lock-free: the event loop, the decode threads and jansson's allocator all draw on
 * one budget. The holder keeps count of what it took and gives it back when done.
 *
 * jansson: budget_hook_jansson() (once, before any other jansson call) routes jansson's
 * allocations through a small header that remembers which budget paid for each. Between
 * budget_json_begin(b) and budget_json_end() a thread's jansson allocations are taken from
 * b, and fail (the parse fails) once b is spent; they go back to b when freed, on whatever
 * thread. A JSON tree costs tens of bytes per number, far more than its text: this is what
 * bounds it.
 */
#ifndef TS_BUDGET_H
#define TS_BUDGET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct budget budget;

budget *budget_create(size_t limit);
/* Call once nothing taken from b is still held (jansson trees included). */
void budget_destroy(budget *b);

bool budget_take(budget *b, size_t n); /* false: it would pass the limit (nothing taken) */
void budget_give(budget *b, size_t n);
/* Moves a holder's share *held to want, taking or giving the difference. false (and *held
 * unchanged) when the take is refused; shrinking always succeeds. */
bool budget_resize(budget *b, size_t *held, size_t want);

size_t budget_held(const budget *b);
size_t budget_limit(const budget *b);
/* Refused requests, for the metrics (a request may fail several takes: count it once). */
void budget_note_refusal(budget *b);
uint64_t budget_refusals(const budget *b);

void budget_hook_jansson(void);
void budget_json_begin(budget *b);
/* Ends the accounting on this thread; true if an allocation was refused since begin. */
bool budget_json_end(void);

#endif
