/* budget: a byte budget that several threads draw on at once; each program's bound on the
 * request bytes it holds (the worker: bodies as read, inflated and parsed; the router: bodies
 * from their head's admission until the request ends).
 *
 * budget_take() succeeds only while the total stays within the limit; budget_give() returns
 * bytes. Lock-free: the event loop and the worker's decode threads draw on one budget. The
 * holder keeps count of what it took and gives it back when done. (The worker's jansson
 * accounting on top of it: src/worker/budget_json.h.)
 */
#ifndef TS_BUDGET_H
#define TS_BUDGET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct budget budget;

budget *budget_create(size_t limit);
/* Call once nothing taken from b is still held. */
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

#endif
