#include "kv_test_pool.h"

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <string>

#include "kvtier/slot_pool.h"

struct kvtest_pool {
  deltakv::kvtier::SlotPool pool;
};

extern "C" {

void kvtest_unique_pool_name(const char* tag, char* out, size_t out_size) {
  static std::atomic<int> counter{0};
  std::snprintf(out, out_size, "dkv-kvctest-%s-%d-%d", tag, static_cast<int>(getpid()),
                counter.fetch_add(1));
}

kvtest_pool* kvtest_pool_create(const char* name, uint64_t block_bytes, uint64_t capacity_slots) {
  deltakv::kvtier::SlotPoolOptions o;
  o.block_bytes = block_bytes;
  o.capacity_slots = capacity_slots;
  o.poison_freed = true;
  deltakv::StatusOr<deltakv::kvtier::SlotPool> pool = deltakv::kvtier::SlotPool::Create(name, o);
  if (!pool.ok()) {
    std::fprintf(stderr, "kvtest_pool_create(%s): %s\n", name, pool.status().ToString().c_str());
    return nullptr;
  }
  return new kvtest_pool{std::move(pool).value()};
}

void kvtest_pool_destroy(kvtest_pool* pool) { delete pool; }

int kvtest_pool_reclaim_dead(kvtest_pool* pool, uint64_t* writes, uint64_t* pins) {
  deltakv::StatusOr<deltakv::kvtier::ReclaimReport> r = pool->pool.ReclaimDead();
  if (!r.ok()) return -1;
  if (writes != nullptr) *writes = r->writes;
  if (pins != nullptr) *pins = r->pins;
  return 0;
}

uint64_t kvtest_pool_ready_slots(const kvtest_pool* pool) { return pool->pool.Stats().ready_slots; }
uint64_t kvtest_pool_writing_slots(const kvtest_pool* pool) {
  return pool->pool.Stats().writing_slots;
}
uint64_t kvtest_pool_pinned_slots(const kvtest_pool* pool) {
  return pool->pool.Stats().pinned_slots;
}

}  // extern "C"
