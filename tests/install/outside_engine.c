/* An engine built outside the deltakv tree against an installed libdeltakv (pkg-config or
 * find_package): attaches one rank to a running sidecar, registers a tensor, and stores, looks
 * up and reloads KV blocks in the sidecar's pool through the C ABI.
 *
 * Usage: outside_engine SHM_NAME KV_BLOCK_BYTES
 * Prints "attached pid=<pid> version=<id>", then "kv stored=<n> hits=<n> reloaded=<n>" (reloaded:
 * the blocks loaded back into other engine blocks whose bytes equal the stored ones), then waits
 * for a line on stdin (the test checks the sidecar meanwhile) and exits 0; any failure exits
 * 1. */
#include <deltakv/deltakv.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int fail(const char* what, const char* msg) {
  fprintf(stderr, "outside_engine: %s: %s\n", what, msg);
  return 1;
}

int main(int argc, char** argv) {
  if (argc != 3) return fail("usage", "outside_engine SHM_NAME KV_BLOCK_BYTES");
  const char* shm = argv[1];
  const uint64_t block_bytes = strtoull(argv[2], NULL, 10);

  if (deltakv_abi_version() != DELTAKV_ABI_VERSION) return fail("abi", deltakv_version());
  static float weights[16];
  deltakv_engine_params p = deltakv_engine_default_params();
  p.shm_name = shm;
  p.rank = 0;
  p.world_size = 1;
  p.initial_version = "v1";
  deltakv_engine* e = NULL;
  if (deltakv_engine_create(&p, &e) != DELTAKV_OK) return fail("create", "failed");
  const int64_t shape[1] = {16};
  if (deltakv_engine_register_tensor(e, "w", weights, "F32", shape, 1, NULL) != DELTAKV_OK ||
      deltakv_engine_start(e) != DELTAKV_OK) {
    return fail("start", deltakv_last_error());
  }
  printf("attached pid=%d version=%s library=%s abi=%u\n", (int)getpid(),
         deltakv_engine_version_id(e), deltakv_version(), (unsigned)deltakv_abi_version());
  fflush(stdout);

  enum { kBlocks = 4, kBlockTokens = 16 };
  /* Engine blocks 0-3 hold the blocks to store; they are reloaded into blocks 4-7. */
  uint8_t* kv = calloc(2 * kBlocks, block_bytes);
  for (uint64_t i = 0; i < kBlocks * block_bytes; ++i) kv[i] = (uint8_t)(i * 7 + 1);
  char pool[256];
  snprintf(pool, sizeof pool, "%s.kv", shm);
  deltakv_kv_client_params kp = deltakv_kv_client_default_params();
  kp.pool_name = pool;
  kp.layout.kind = DELTAKV_KV_LAYOUT_CROSS_LAYER;
  kp.layout.num_blocks = 2 * kBlocks;
  kp.layout.base = kv;
  kp.layout.block_bytes = block_bytes;
  deltakv_kv_client* c = NULL;
  if (deltakv_kv_client_open(&kp, &c) != DELTAKV_OK) return fail("kv open", deltakv_last_error());
  uint32_t tokens[kBlocks * kBlockTokens];
  for (int i = 0; i < kBlocks * kBlockTokens; ++i) tokens[i] = (uint32_t)(1000 + i);
  deltakv_kv_key_context ctx = deltakv_kv_default_key_context();
  ctx.model_fingerprint = "outside/engine@1";
  deltakv_kv_key keys[kBlocks];
  size_t nkeys = 0;
  if (deltakv_kv_chain_keys(&ctx, tokens, kBlocks * kBlockTokens, kBlockTokens, NULL, keys, kBlocks,
                            &nkeys) != DELTAKV_OK) {
    return fail("keys", deltakv_last_error());
  }
  deltakv_kv_store_handle* st = NULL;
  const uint64_t blocks[kBlocks] = {0, 1, 2, 3};
  size_t allocated = 0, hits = 0;
  if (deltakv_kv_prepare_store(c, keys, NULL, nkeys, NULL, &st) != DELTAKV_OK ||
      deltakv_kv_store_info(st, NULL, &allocated, NULL, NULL, NULL) != DELTAKV_OK ||
      deltakv_kv_store(c, st, blocks, nkeys) != DELTAKV_OK ||
      deltakv_kv_complete_store(c, st) != DELTAKV_OK) {
    return fail("store", deltakv_last_error());
  }
  deltakv_kv_store_free(st);
  if (deltakv_kv_lookup(c, keys, nkeys, &hits) != DELTAKV_OK) {
    return fail("lookup", deltakv_last_error());
  }
  /* Reload in reverse order: store block i comes back into engine block 7 - i. */
  const uint64_t back[kBlocks] = {7, 6, 5, 4};
  deltakv_kv_load_handle* ld = NULL;
  if (deltakv_kv_prepare_load(c, keys, nkeys, &ld) != DELTAKV_OK ||
      deltakv_kv_load(c, ld, back, nkeys) != DELTAKV_OK ||
      deltakv_kv_complete_load(c, ld) != DELTAKV_OK) {
    return fail("load", deltakv_last_error());
  }
  deltakv_kv_load_free(ld);
  size_t reloaded = 0;
  for (size_t i = 0; i < kBlocks; ++i) {
    reloaded += memcmp(kv + i * block_bytes, kv + back[i] * block_bytes, block_bytes) == 0;
  }
  printf("kv stored=%zu hits=%zu reloaded=%zu\n", allocated, hits, reloaded);
  fflush(stdout);

  char line[16];
  if (fgets(line, sizeof line, stdin) == NULL) { /* stdin closed: done as well */
  }
  deltakv_kv_client_close(c);
  free(kv);
  deltakv_engine_free(e);
  return hits == kBlocks && reloaded == kBlocks ? 0 : 1;
}
