/* The KV tier C ABI used from a C program (compiled as C99 with -pedantic: the header is valid
 * C). Walks the whole API once: keys from tokens and from engine hashes, fingerprints, opening
 * clients with a per-layer and a cross-layer layout, prepare/store/complete with outcomes,
 * query and wait, events, lookup, prepare/load/complete with every byte checked, touch, remove,
 * cancel, stats, closing a client before its handles, and freeing in any order. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "deltakv/deltakv.h" /* includes deltakv/deltakv_kv.h */
#include "kv_test_pool.h"

static int g_failures = 0;

#define CHECK(cond)                                                                              \
  do {                                                                                           \
    if (!(cond)) {                                                                               \
      fprintf(stderr, "%s:%d: CHECK(%s) failed (last error: '%s')\n", __FILE__, __LINE__, #cond, \
              deltakv_last_error());                                                             \
      ++g_failures;                                                                              \
    }                                                                                            \
  } while (0)

#define CHECK_RC(call, want)                                                                       \
  do {                                                                                             \
    int rc_ = (call);                                                                              \
    if (rc_ != (want)) {                                                                           \
      fprintf(stderr, "%s:%d: %s returned %d %s, want %s: '%s'\n", __FILE__, __LINE__, #call, rc_, \
              deltakv_status_name(rc_), deltakv_status_name(want), deltakv_last_error());          \
      ++g_failures;                                                                                \
    }                                                                                              \
  } while (0)

#define CHECK_OK(call) CHECK_RC(call, DELTAKV_OK)

enum {
  kLayers = 4,
  kTensorBytes = 1024,
  kPad = 64,
  kEngineBlocks = 16,
  kBlockTokens = 16,
  kPromptBlocks = 6,
  kSlots = 12
};
#define kBlockBytes ((uint64_t)kLayers * 2 * kTensorBytes)

/* Byte j of the block stored under `key` (a function of the key only). */
static uint8_t ImageByte(deltakv_kv_key key, uint64_t j) {
  uint64_t x = key.lo ^ (key.hi * 31u) ^ ((j + 1) * 0x9E3779B97F4A7C15ull);
  x ^= x >> 29;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 32;
  return (uint8_t)x;
}

/* Engine memory with separate K and V tensors per layer, rows padded. */
typedef struct PerLayerKv {
  uint8_t* tensors[kLayers * 2];
  deltakv_kv_layer layers[kLayers];
} PerLayerKv;

static const uint64_t kRowStride = kTensorBytes + kPad;

static void PerLayerInit(PerLayerKv* m) {
  int t;
  for (t = 0; t < kLayers * 2; ++t) {
    m->tensors[t] = (uint8_t*)malloc(kEngineBlocks * kRowStride);
    memset(m->tensors[t], 0xCD, kEngineBlocks * kRowStride);
  }
  for (t = 0; t < kLayers; ++t) {
    m->layers[t].k = m->tensors[2 * t];
    m->layers[t].v = m->tensors[2 * t + 1];
    m->layers[t].stride = kRowStride;
  }
}

static void PerLayerFree(PerLayerKv* m) {
  int t;
  for (t = 0; t < kLayers * 2; ++t) free(m->tensors[t]);
}

/* Slot image order: layer 0 K, layer 0 V, layer 1 K, ... */
static void PerLayerWrite(PerLayerKv* m, uint64_t block, deltakv_kv_key key) {
  int t;
  uint64_t i;
  for (t = 0; t < kLayers * 2; ++t) {
    for (i = 0; i < kTensorBytes; ++i) {
      m->tensors[t][block * kRowStride + i] = ImageByte(key, (uint64_t)t * kTensorBytes + i);
    }
  }
}

static deltakv_kv_client_params PerLayerParams(const char* pool, PerLayerKv* m) {
  deltakv_kv_client_params p = deltakv_kv_client_default_params();
  p.pool_name = pool;
  p.layout.kind = DELTAKV_KV_LAYOUT_PER_LAYER;
  p.layout.num_blocks = kEngineBlocks;
  p.layout.layers = m->layers;
  p.layout.num_layers = kLayers;
  p.layout.bytes_per_tensor = kTensorBytes;
  p.copy_threads = 2;
  return p;
}

/* Bytes of cross-layer block b that differ from the image of `key`. */
static uint64_t CrossLayerMismatches(const uint8_t* base, uint64_t stride, uint64_t b,
                                     deltakv_kv_key key) {
  uint64_t j, bad = 0;
  for (j = 0; j < kBlockBytes; ++j) bad += base[b * stride + j] != ImageByte(key, j);
  return bad;
}

int main(void) {
  char pool_name[128];
  kvtest_pool* pool;
  deltakv_kv_key_context ctx = deltakv_kv_default_key_context();
  uint32_t tokens[kPromptBlocks * kBlockTokens + 5];
  deltakv_kv_key keys[kPromptBlocks + 1];
  deltakv_kv_key tail_keys[kPromptBlocks];
  deltakv_kv_key engine_keys[kPromptBlocks];
  uint8_t engine_hashes[kPromptBlocks][32];
  uint64_t fingerprints[kPromptBlocks];
  size_t num_keys = 0, i, n = 0;
  char hex[33];
  PerLayerKv mem;
  deltakv_kv_client* writer = NULL;
  deltakv_kv_client* reader = NULL;
  deltakv_kv_client_params params;
  deltakv_kv_store_handle* store = NULL;
  deltakv_kv_load_handle* load = NULL;
  uint8_t outcomes[kPromptBlocks];
  uint64_t blocks[kPromptBlocks];
  uint64_t block_bytes = 0, capacity = 0;
  size_t allocated = 0, already = 0, in_flight = 0, refused = 0, hits = 0, found = 0;
  int done = 0, outcome = -1;
  deltakv_kv_event events[4];
  deltakv_kv_stats stats;
  uint8_t* cross;
  const uint64_t cross_stride = kBlockBytes + 256;

  kvtest_unique_pool_name("c", pool_name, sizeof pool_name);
  pool = kvtest_pool_create(pool_name, kBlockBytes, kSlots);
  if (pool == NULL) return 2;

  /* Keys: a prompt of 6 full blocks and a partial one. */
  ctx.model_fingerprint = "test/model@1";
  ctx.kv_dtype = "bfloat16";
  ctx.kv_layout = "per-layer-kv";
  ctx.tp_rank = 0;
  ctx.tp_size = 1;
  ctx.salt = "tenant-a";
  for (i = 0; i < sizeof tokens / sizeof tokens[0]; ++i) tokens[i] = (uint32_t)(1000 + i * 7);
  CHECK_OK(deltakv_kv_chain_keys(&ctx, tokens, sizeof tokens / sizeof tokens[0], kBlockTokens, NULL,
                                 keys, kPromptBlocks + 1, &num_keys));
  CHECK(num_keys == kPromptBlocks);
  /* Continuing the chain from key 2 gives keys 3..5. */
  CHECK_OK(deltakv_kv_chain_keys(&ctx, tokens + 3 * kBlockTokens, 3 * kBlockTokens, kBlockTokens,
                                 &keys[2], tail_keys, kPromptBlocks, &num_keys));
  CHECK(num_keys == 3);
  CHECK(memcmp(tail_keys, &keys[3], 3 * sizeof(deltakv_kv_key)) == 0);
  /* Another tenant's salt gives other keys. */
  ctx.salt = "tenant-b";
  CHECK_OK(deltakv_kv_chain_keys(&ctx, tokens, kBlockTokens, kBlockTokens, NULL, tail_keys, 1,
                                 &num_keys));
  CHECK(num_keys == 1 && memcmp(&tail_keys[0], &keys[0], sizeof(deltakv_kv_key)) != 0);
  ctx.salt = "tenant-a";
  /* Engine-provided hashes (e.g. 32-byte vLLM block hashes). */
  for (i = 0; i < kPromptBlocks; ++i) memset(engine_hashes[i], (int)(0xA0 + i), 32);
  CHECK_OK(deltakv_kv_engine_hash_keys(&ctx, engine_hashes, 32, kPromptBlocks, engine_keys));
  CHECK(memcmp(&engine_keys[0], &keys[0], sizeof(deltakv_kv_key)) != 0);
  CHECK(memcmp(&engine_keys[0], &engine_keys[1], sizeof(deltakv_kv_key)) != 0);
  for (i = 0; i < kPromptBlocks; ++i) {
    CHECK_OK(
        deltakv_kv_token_fingerprint(tokens + i * kBlockTokens, kBlockTokens, &fingerprints[i]));
  }
  CHECK(fingerprints[0] != fingerprints[1]);
  CHECK_OK(deltakv_kv_key_to_hex(keys[0], hex, sizeof hex));
  CHECK(strlen(hex) == 32);

  /* The writer: per-layer K and V tensors. */
  PerLayerInit(&mem);
  params = PerLayerParams(pool_name, &mem);
  CHECK_OK(deltakv_kv_client_open(&params, &writer));
  if (writer == NULL) return 3;
  CHECK_OK(deltakv_kv_client_info(writer, &block_bytes, &capacity));
  CHECK(block_bytes == kBlockBytes && capacity == kSlots);
  for (i = 0; i < kPromptBlocks; ++i) {
    blocks[i] = kEngineBlocks - 1 - i; /* any engine blocks, here in reverse */
    PerLayerWrite(&mem, blocks[i], keys[i]);
  }
  CHECK_OK(deltakv_kv_prepare_store(writer, keys, fingerprints, kPromptBlocks, outcomes, &store));
  for (i = 0; i < kPromptBlocks; ++i) CHECK(outcomes[i] == DELTAKV_KV_STORE_ALLOCATED);
  CHECK_OK(deltakv_kv_store_info(store, &n, &allocated, &already, &in_flight, &refused));
  CHECK(n == kPromptBlocks && allocated == kPromptBlocks && already == 0 && in_flight == 0 &&
        refused == 0);
  CHECK_OK(deltakv_kv_store(writer, store, blocks, kPromptBlocks));
  CHECK_OK(deltakv_kv_store_wait(store, -1, &done));
  CHECK(done == 1);
  CHECK_OK(deltakv_kv_store_query(store, &done));
  CHECK(done == 1);
  CHECK_OK(deltakv_kv_complete_store(writer, store));
  CHECK_RC(deltakv_kv_complete_store(writer, store), DELTAKV_ERR_FAILED_PRECONDITION);
  CHECK(strstr(deltakv_last_error(), "completed") != NULL);
  CHECK_OK(deltakv_kv_store_free(store));
  store = NULL;
  CHECK(deltakv_last_error()[0] == '\0');

  /* Six stored events, drained four at a time. */
  CHECK_OK(deltakv_kv_drain_events(writer, events, 4, &n));
  CHECK(n == 4);
  for (i = 0; i < n; ++i) {
    CHECK(events[i].kind == DELTAKV_KV_EVENT_STORED);
    CHECK(memcmp(&events[i].key, &keys[i], sizeof(deltakv_kv_key)) == 0);
  }
  CHECK_OK(deltakv_kv_drain_events(writer, events, 4, &n));
  CHECK(n == 2 && memcmp(&events[1].key, &keys[5], sizeof(deltakv_kv_key)) == 0);
  CHECK_OK(deltakv_kv_drain_events(writer, events, 4, &n));
  CHECK(n == 0);

  /* The reader: cross-layer blocks (the same slot image), synchronous copies. */
  cross = (uint8_t*)malloc(kEngineBlocks * cross_stride);
  memset(cross, 0xCD, kEngineBlocks * cross_stride);
  params = deltakv_kv_client_default_params();
  params.pool_name = pool_name;
  params.layout.kind = DELTAKV_KV_LAYOUT_CROSS_LAYER;
  params.layout.num_blocks = kEngineBlocks;
  params.layout.base = cross;
  params.layout.block_bytes = kBlockBytes;
  params.layout.block_stride = cross_stride;
  params.copy_threads = 0;
  CHECK_OK(deltakv_kv_client_open(&params, &reader));
  if (reader == NULL) return 4;
  keys[kPromptBlocks].lo = 1; /* one block past what is stored */
  keys[kPromptBlocks].hi = 2;
  CHECK_OK(deltakv_kv_lookup(reader, keys, kPromptBlocks + 1, &hits));
  CHECK(hits == kPromptBlocks);
  CHECK_OK(deltakv_kv_prepare_load(reader, keys, hits, &load));
  CHECK_OK(deltakv_kv_load_size(load, &n));
  CHECK(n == kPromptBlocks);
  CHECK_RC(deltakv_kv_load_query(load, &done), DELTAKV_ERR_FAILED_PRECONDITION); /* not yet */
  for (i = 0; i < kPromptBlocks; ++i) blocks[i] = (i + 3) % kPromptBlocks;
  CHECK_OK(deltakv_kv_load(reader, load, blocks, kPromptBlocks));
  CHECK_OK(deltakv_kv_load_query(load, &done));
  CHECK(done == 1); /* copy_threads 0: done on return */
  CHECK_OK(deltakv_kv_load_wait(load, 0, &done));
  CHECK(done == 1);
  CHECK_OK(deltakv_kv_complete_load(reader, load));
  CHECK_OK(deltakv_kv_load_size(load, &n));
  CHECK(n == 0);
  CHECK_OK(deltakv_kv_load_free(load));
  load = NULL;
  for (i = 0; i < kPromptBlocks; ++i) {
    CHECK(CrossLayerMismatches(cross, cross_stride, blocks[i], keys[i]) == 0);
  }
  CHECK(kvtest_pool_pinned_slots(pool) == 0);

  /* A store of one stored and one new key, cancelled: nothing is published. */
  tail_keys[0] = keys[0];
  tail_keys[1] = engine_keys[0];
  CHECK_OK(deltakv_kv_prepare_store(reader, tail_keys, NULL, 2, outcomes, &store));
  CHECK(outcomes[0] == DELTAKV_KV_STORE_ALREADY_STORED);
  CHECK(outcomes[1] == DELTAKV_KV_STORE_ALLOCATED);
  CHECK_OK(deltakv_kv_store_outcome_at(store, 1, &outcome));
  CHECK(outcome == DELTAKV_KV_STORE_ALLOCATED);
  CHECK_OK(deltakv_kv_complete_store(reader, store)); /* no store started: a cancel */
  CHECK_OK(deltakv_kv_store_free(store));
  store = NULL;
  CHECK_OK(deltakv_kv_lookup(reader, &engine_keys[0], 1, &hits));
  CHECK(hits == 0);

  /* Touch, remove, events of the remover. */
  CHECK_OK(deltakv_kv_touch(reader, keys, kPromptBlocks, &found));
  CHECK(found == kPromptBlocks);
  CHECK_OK(deltakv_kv_remove(reader, keys[5]));
  CHECK_RC(deltakv_kv_remove(reader, keys[5]), DELTAKV_ERR_NOT_FOUND);
  CHECK_OK(deltakv_kv_lookup(reader, keys, kPromptBlocks, &hits));
  CHECK(hits == 5);
  CHECK_OK(deltakv_kv_drain_events(reader, events, 4, &n));
  CHECK(n == 1 && events[0].kind == DELTAKV_KV_EVENT_REMOVED && events[0].raw_kind == 2);
  CHECK(events[0].origin_pid != 0);

  /* Stats. */
  memset(&stats, 0xFF, sizeof stats);
  stats.struct_size = sizeof stats;
  CHECK_OK(deltakv_kv_get_stats(writer, &stats));
  CHECK(stats.struct_size == sizeof stats && stats.version == DELTAKV_KV_STATS_VERSION);
  CHECK(stats.stores_allocated == kPromptBlocks && stats.stores_committed == kPromptBlocks);
  CHECK(stats.store_blocks == kPromptBlocks && stats.store_bytes == kPromptBlocks * kBlockBytes);
  CHECK(stats.pool_ready_slots == 5 && stats.pool_capacity_slots == kSlots);
  CHECK(stats.occupancy > 0.4 && stats.occupancy < 0.42);
  stats.struct_size = sizeof stats;
  CHECK_OK(deltakv_kv_get_stats(reader, &stats));
  CHECK(stats.lookups == 3 && stats.hit_blocks == 11 && stats.loads_prepared == 1);
  CHECK(stats.load_blocks == kPromptBlocks && stats.stores_aborted == 1 && stats.removals == 1);

  /* Handles may outlive their client: closing finishes them (unpins), freeing comes later. */
  CHECK_OK(deltakv_kv_prepare_load(reader, keys, 2, &load));
  CHECK(kvtest_pool_pinned_slots(pool) == 2);
  CHECK_OK(deltakv_kv_client_close(reader));
  reader = NULL;
  CHECK(kvtest_pool_pinned_slots(pool) == 0);
  CHECK_RC(deltakv_kv_load(reader, load, blocks, 2), DELTAKV_ERR_INVALID_ARGUMENT);
  CHECK_RC(deltakv_kv_load_query(load, &done), DELTAKV_ERR_FAILED_PRECONDITION);
  CHECK(strstr(deltakv_last_error(), "closed") != NULL);
  CHECK_OK(deltakv_kv_load_free(load));
  CHECK_OK(deltakv_kv_load_free(NULL));
  CHECK_OK(deltakv_kv_client_close(NULL));

  CHECK_OK(deltakv_kv_client_close(writer));
  CHECK(kvtest_pool_writing_slots(pool) == 0 && kvtest_pool_ready_slots(pool) == 5);
  CHECK(strcmp(deltakv_status_name(DELTAKV_ERR_NOT_FOUND), "NOT_FOUND") == 0);
  kvtest_pool_destroy(pool);
  PerLayerFree(&mem);
  free(cross);
  if (g_failures != 0) {
    fprintf(stderr, "kv_c_api_c_test: %d failures\n", g_failures);
    return 1;
  }
  printf("kv_c_api_c_test: OK\n");
  return 0;
}
