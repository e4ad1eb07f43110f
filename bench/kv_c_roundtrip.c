/* The C client's store/reload loop over the C ABI (deltakv_kv.h), the baseline of
 * python_bench.py: the same workload as the Python client, on the same pool.
 *
 * Usage: kv_c_roundtrip POOL BLOCK_BYTES BLOCKS ROUNDS SALT
 * Each round stores BLOCKS engine blocks (one cross-layer region each) under fresh keys in one
 * prepare/store/complete call, then reloads them into a second engine memory in one
 * prepare/load/complete call. Round 0 is a warm-up. Prints one JSON line: store and load GB/s
 * over the timed rounds and whether every reloaded byte matched. */
#define _POSIX_C_SOURCE 199309L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "deltakv/deltakv.h"

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int fail(const char* what, deltakv_status s) {
  fprintf(stderr, "kv_c_roundtrip: %s: %s: %s\n", what, deltakv_status_name(s),
          deltakv_last_error());
  return 1;
}

int main(int argc, char** argv) {
  if (argc != 6) {
    fprintf(stderr, "usage: kv_c_roundtrip POOL BLOCK_BYTES BLOCKS ROUNDS SALT\n");
    return 2;
  }
  const char* pool = argv[1];
  const uint64_t block = strtoull(argv[2], NULL, 10);
  const size_t blocks = (size_t)strtoull(argv[3], NULL, 10);
  const int rounds = atoi(argv[4]);
  const char* salt = argv[5];
  uint8_t* src = malloc(block * blocks);
  uint8_t* dst = malloc(block * blocks);
  uint64_t* ids = malloc(sizeof(uint64_t) * blocks);
  uint64_t* hashes = malloc(sizeof(uint64_t) * blocks);
  deltakv_kv_key* keys = malloc(sizeof(deltakv_kv_key) * blocks);
  if (!src || !dst || !ids || !hashes || !keys) return 2;
  for (uint64_t i = 0; i < block * blocks; ++i) src[i] = (uint8_t)(i * 131 + 7);
  memset(dst, 0, block * blocks);
  for (size_t i = 0; i < blocks; ++i) ids[i] = i;

  deltakv_kv_client_params p = deltakv_kv_client_default_params();
  p.pool_name = pool;
  p.layout.kind = DELTAKV_KV_LAYOUT_CROSS_LAYER;
  p.layout.num_blocks = blocks;
  p.layout.block_bytes = block;
  deltakv_kv_client* in = NULL;
  deltakv_kv_client* out = NULL;
  deltakv_status s;
  p.layout.base = src;
  if ((s = deltakv_kv_client_open(&p, &in)) != DELTAKV_OK) return fail("open", s);
  p.layout.base = dst;
  if ((s = deltakv_kv_client_open(&p, &out)) != DELTAKV_OK) return fail("open", s);
  deltakv_kv_key_context ctx = deltakv_kv_default_key_context();
  ctx.salt = salt;

  double store_s = 0, load_s = 0;
  int ok = 1;
  for (int r = 0; r <= rounds; ++r) {
    for (size_t i = 0; i < blocks; ++i) hashes[i] = (uint64_t)r * blocks + i + 1;
    if ((s = deltakv_kv_engine_hash_keys(&ctx, hashes, 8, blocks, keys)) != DELTAKV_OK)
      return fail("keys", s);
    double t0 = now();
    deltakv_kv_store_handle* st = NULL;
    if ((s = deltakv_kv_prepare_store(in, keys, NULL, blocks, NULL, &st)) != DELTAKV_OK ||
        (s = deltakv_kv_store(in, st, ids, blocks)) != DELTAKV_OK ||
        (s = deltakv_kv_complete_store(in, st)) != DELTAKV_OK)
      return fail("store", s);
    deltakv_kv_store_free(st);
    double t1 = now();
    deltakv_kv_load_handle* ld = NULL;
    if ((s = deltakv_kv_prepare_load(out, keys, blocks, &ld)) != DELTAKV_OK ||
        (s = deltakv_kv_load(out, ld, ids, blocks)) != DELTAKV_OK ||
        (s = deltakv_kv_complete_load(out, ld)) != DELTAKV_OK)
      return fail("load", s);
    deltakv_kv_load_free(ld);
    double t2 = now();
    if (r > 0) {
      store_s += t1 - t0;
      load_s += t2 - t1;
    }
    ok = ok && memcmp(src, dst, block * blocks) == 0;
    memset(dst, 0, block * blocks);
  }
  const double bytes = (double)block * (double)blocks * rounds;
  printf("{\"store_gb_per_s\": %.4f, \"load_gb_per_s\": %.4f, \"rounds\": %d, \"bytes_ok\": %s}\n",
         bytes / store_s / 1e9, bytes / load_s / 1e9, rounds, ok ? "true" : "false");
  deltakv_kv_client_close(in);
  deltakv_kv_client_close(out);
  free(src);
  free(dst);
  free(ids);
  free(hashes);
  free(keys);
  return ok ? 0 : 1;
}
