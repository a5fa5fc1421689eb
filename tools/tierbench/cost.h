/* cost: `tierbench cost`, the cost report of a live router.
 *
 * It reads the router's /admin/cost (cost and requests by pool, tenant and priority over a
 * window of at most an hour) and /admin/status (each pool's price model, usd_per_hour and
 * backends; p50/p95/p99 per priority over the last 60 s) and writes them as Markdown and
 * CSV. Hours are derived from cost only where that is exact: a fixed pool's cost over
 * usd_per_hour is backend-hours reserved, a usage pool's is compute-hours used; the other
 * half of each pair is something the router does not measure, and the report says so.
 *
 * The router keeps one hour. `--append FILE` adds this run's rows to a history CSV, so a
 * cron job builds the week; `--weekly FILE` renders the last 7 days of such a file (cost
 * per day and pool, the hours each day covers, the worst p95/p99 per day and priority).
 * Exit codes: 0 done, 64 bad arguments or a history file that is not one, 1 anything else
 * (the router unreachable or refusing, a reply without the fields, a file not written). */
#ifndef TS_TB_COST_H
#define TS_TB_COST_H

/* argv[1] is "cost". */
int cost_main(int argc, char **argv);

#endif
