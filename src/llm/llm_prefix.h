/* llm_prefix: the index of the automatic prefix cache (which prompt blocks are cached, LRU
 * order, the byte budget). Pure: no ONNX Runtime, no threads. The engine owns one per model
 * and uses it from its generation thread only; what a block's KV is, and where it lives
 * (host or device memory), is the engine's business: here it is an opaque payload freed
 * through a callback.
 *
 * Keys are chained: block i of a prompt (tokens [i*B, (i+1)*B)) has the key
 * H(key of block i-1, its B tokens), block 0's parent being the root H(model identity,
 * scope). So a key names the whole prefix up to the end of its block: two prompts share
 * block i's entry only if they agree on every token before it, on the model and on the
 * scope (the tenant, under prefix_cache_scope tenant). H is SipHash-2-4 twice, under a
 * 256-bit key drawn at random per cache (two independent 64-bit halves: a 128-bit key), so
 * a client cannot craft collisions it could use to read another prompt's KV; on top of
 * that a lookup compares the block's own tokens and its parent's key before it answers. */
#ifndef TS_LLM_PREFIX_H
#define TS_LLM_PREFIX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint64_t a, b;
} llm_pkey;

typedef struct llm_prefix llm_prefix;

/* Frees one block's payload (called on eviction and when the cache is freed). */
typedef void (*llm_prefix_free_fn)(void *ctx, void *payload);

typedef struct {
    uint64_t lookups;      /* blocks looked up (every full block a prompt could reuse) */
    uint64_t hits;         /* of those, found */
    uint64_t hit_tokens;   /* tokens whose KV came from the cache (hits x block) */
    uint64_t stores;       /* blocks put in */
    uint64_t evictions;    /* blocks pushed out by the budget (or by the engine's admission) */
    size_t blocks, bytes;  /* held now */
    size_t budget;         /* bytes at most */
} llm_prefix_stats;

/* block: tokens per block (>= 1); block_bytes: one block's payload size (> 0); budget: bytes
 * the payloads may hold (0: the cache holds nothing). NULL when out of memory. */
llm_prefix *llm_prefix_new(size_t block, size_t block_bytes, size_t budget, llm_prefix_free_fn free_fn,
                           void *ctx);
void llm_prefix_free(llm_prefix *p);

/* The root key of a model and scope (both NUL-terminated, any bytes). */
llm_pkey llm_prefix_root(const llm_prefix *p, const char *model, const char *scope);
/* The key of the block whose tokens are toks[0..block) under parent. */
llm_pkey llm_prefix_next(const llm_prefix *p, llm_pkey parent, const int32_t *toks);

/* The payload of the block (parent, key, toks[0..block)), or NULL; a hit becomes the most
 * recently used. Counts nothing (llm_prefix_count does). */
void *llm_prefix_get(llm_prefix *p, llm_pkey parent, llm_pkey key, const int32_t *toks);
/* A prompt's look-up: `wanted` blocks it could have reused, `hit` of them found (the walk
 * stops at the first miss, so the blocks after it are counted here, not looked up). */
void llm_prefix_count(llm_prefix *p, size_t wanted, size_t hit);
/* Is the block held? (No counting, no LRU change: for the engine's store.) */
bool llm_prefix_has(const llm_prefix *p, llm_pkey key);
/* Room for one more block: evicts least recently used blocks until it fits under both the
 * cache's budget and `limit` (the bytes the caller allows the cache right now, e.g. what the
 * KV budget leaves). False when it cannot fit at all (the budget or limit is below one
 * block). */
bool llm_prefix_make_room(llm_prefix *p, size_t limit);
/* Takes the payload as the block (parent, key, toks). Call llm_prefix_make_room first; false
 * (payload not taken) when the key is already held or the budget has no room. */
bool llm_prefix_put(llm_prefix *p, llm_pkey parent, llm_pkey key, const int32_t *toks, void *payload);
/* Evicts least recently used blocks until at most `keep` bytes are held; returns the bytes
 * freed. */
size_t llm_prefix_shrink(llm_prefix *p, size_t keep);
void llm_prefix_stats_get(const llm_prefix *p, llm_prefix_stats *out);

#endif
