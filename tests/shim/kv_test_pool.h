/* kv_test_pool.h: the sidecar's side of the KV pool for tests written in C: creates the pool
 * segment an engine's deltakv_kv_client opens (as `deltakv sidecar --kv-block-bytes` does),
 * and reclaims the slots and pins of dead processes (as the sidecar's reclaim loop does).
 * Ownership: the caller destroys what it creates; destroying unlinks the segment. */
#ifndef DELTAKV_TESTS_SHIM_KV_TEST_POOL_H_
#define DELTAKV_TESTS_SHIM_KV_TEST_POOL_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kvtest_pool kvtest_pool;

/* Writes a pool name unique to this process and call ("dkv-kvctest-<tag>-<pid>-<n>"). */
void kvtest_unique_pool_name(const char* tag, char* out, size_t out_size);

/* Creates pool `name` with poison-on-free on. Returns NULL (and prints why) on failure. */
kvtest_pool* kvtest_pool_create(const char* name, uint64_t block_bytes, uint64_t capacity_slots);
void kvtest_pool_destroy(kvtest_pool* pool);

/* ReclaimDead; *writes receives the dead writers' slots freed. 0 on success. */
int kvtest_pool_reclaim_dead(kvtest_pool* pool, uint64_t* writes, uint64_t* pins);

/* Slots in state READY / WRITING and slots pinned now. */
uint64_t kvtest_pool_ready_slots(const kvtest_pool* pool);
uint64_t kvtest_pool_writing_slots(const kvtest_pool* pool);
uint64_t kvtest_pool_pinned_slots(const kvtest_pool* pool);

#ifdef __cplusplus
}
#endif

#endif /* DELTAKV_TESTS_SHIM_KV_TEST_POOL_H_ */
