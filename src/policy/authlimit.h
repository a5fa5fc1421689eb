/* authlimit: failed authentication attempts per client address, and the blocks they earn.
 *
 * After max_failures wrong credentials from one address within window_s, the address is
 * blocked for block_s. A fixed table of AUTHLIMIT_SLOTS addresses (no allocation after
 * create, nothing growing with what clients send); an address may sit in one of a few slots
 * after its hash, and when they are full the one seen longest ago that blocks nothing is
 * forgotten first. The hash has a per-table random basis (the seed), so no client can pick
 * addresses that crowd one neighbourhood. Pure: the time is the caller's, no I/O.
 */
#ifndef TS_AUTHLIMIT_H
#define TS_AUTHLIMIT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define AUTHLIMIT_SLOTS 4096
#define AUTHLIMIT_KEY 17 /* address family, then the address (IPv6: its /64) */

typedef struct authlimit authlimit;

authlimit *authlimit_create(unsigned max_failures, double window_s, double block_s, uint64_t seed);
void authlimit_destroy(authlimit *a);

/* Is the address blocked at now? *retry_after_s: the seconds left when it is. */
bool authlimit_blocked(const authlimit *a, const uint8_t key[AUTHLIMIT_KEY], double now, double *retry_after_s);
/* Counts a wrong credential from the address. Returns true when this one starts a block. */
bool authlimit_failed(authlimit *a, const uint8_t key[AUTHLIMIT_KEY], double now);

/* The key of an address in text form ("1.2.3.4", "::ffff:1.2.3.4", an IPv6 address): IPv4
 * as itself, IPv6 by its /64 (one host usually holds all of it), anything else by its
 * first bytes. */
void authlimit_key(const char *host, uint8_t key[AUTHLIMIT_KEY]);

#endif
