/* budget_json: the worker's JSON trees charged to a byte budget (budget.h).
 *
 * budget_hook_jansson() (once, before any other jansson call) routes jansson's allocations
 * through a small header that remembers which budget paid for each. Between
 * budget_json_begin(b) and budget_json_end() a thread's jansson allocations are taken from
 * b, and fail (the parse fails) once b is spent; they go back to b when freed, on whatever
 * thread. A JSON tree costs tens of bytes per number, far more than its text: this is what
 * bounds it. A budget is destroyed only once no tree it paid for is still held.
 */
#ifndef TS_BUDGET_JSON_H
#define TS_BUDGET_JSON_H

#include <stdbool.h>

#include "budget.h"

void budget_hook_jansson(void);
void budget_json_begin(budget *b);
/* Ends the accounting on this thread; true if an allocation was refused since begin. */
bool budget_json_end(void);

#endif
