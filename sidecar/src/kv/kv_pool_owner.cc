#include "kv/kv_pool_owner.h"

#include <sstream>

#include "kvtier/host_memory.h"

namespace deltakv::sidecar {

StatusOr<std::unique_ptr<KvPoolOwner>> KvPoolOwner::Create(const KvPoolConfig& config) {
  KvPoolConfig c = config;
  if (c.capacity_slots == 0) {
    if (c.host_fraction <= 0) {
      return InvalidArgument("KV pool: give a slot capacity or a fraction of host memory");
    }
    ASSIGN_OR_RETURN(kvtier::HostMemoryInfo info, kvtier::ProbeHostMemory());
    ASSIGN_OR_RETURN(c.capacity_slots,
                     kvtier::SlotsForHostMemory(info, c.block_bytes, c.host_fraction));
  }
  kvtier::SlotPoolOptions o;
  o.block_bytes = c.block_bytes;
  o.capacity_slots = c.capacity_slots;
  o.hugepages = c.hugepages;
  o.if_exists = shm::IfExists::kReplace;
  o.unlink_on_destroy = true;
  ASSIGN_OR_RETURN(kvtier::SlotPool pool, kvtier::SlotPool::Create(c.name, o));
  return std::unique_ptr<KvPoolOwner>(new KvPoolOwner(c, std::move(pool)));
}

KvPoolOwner::KvPoolOwner(KvPoolConfig config, kvtier::SlotPool pool)
    : config_(std::move(config)), pool_(std::move(pool)), reclaimer_([this] { ReclaimLoop(); }) {}

KvPoolOwner::~KvPoolOwner() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  reclaimer_.join();
}

void KvPoolOwner::ReclaimLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!cv_.wait_for(lock, config_.reclaim_period, [&] { return stop_; })) {
    lock.unlock();
    (void)pool_.ReclaimDead();
    reclaim_runs_.fetch_add(1, std::memory_order_relaxed);
    lock.lock();
  }
}

std::string KvPoolOwner::Metrics() const {
  kvtier::PoolStats s = pool_.Stats();
  std::ostringstream o;
  auto gauge = [&](const char* name, const char* help, uint64_t v) {
    o << "# HELP " << name << " " << help << "\n# TYPE " << name << " gauge\n"
      << name << " " << v << "\n";
  };
  auto counter = [&](const char* name, const char* help, uint64_t v) {
    o << "# HELP " << name << " " << help << "\n# TYPE " << name << " counter\n"
      << name << " " << v << "\n";
  };
  gauge("deltakv_kv_capacity_slots", "Slots in the host KV pool.", s.capacity_slots);
  gauge("deltakv_kv_block_bytes", "Bytes per KV block slot.", s.block_bytes);
  gauge("deltakv_kv_ready_slots", "Slots holding a stored block.", s.ready_slots);
  gauge("deltakv_kv_writing_slots", "Slots being written.", s.writing_slots);
  gauge("deltakv_kv_pinned_slots", "Slots pinned by loads in flight.", s.pinned_slots);
  gauge("deltakv_kv_ready_bytes", "Bytes of stored blocks.", s.ready_bytes);
  counter("deltakv_kv_lookups_total", "Lookups (all engine processes).", s.lookups);
  counter("deltakv_kv_hits_total", "Blocks found by lookups.", s.hits);
  counter("deltakv_kv_misses_total", "Lookups that stopped before their last key.", s.misses);
  counter("deltakv_kv_stores_total", "Blocks stored (committed).", s.stores_committed);
  counter("deltakv_kv_stores_refused_total", "Stores refused rather than evicting pinned blocks.",
          s.stores_refused);
  counter("deltakv_kv_evictions_total", "Blocks evicted to make room.", s.evictions);
  counter("deltakv_kv_bytes_in_total", "Bytes stored into the pool.",
          s.stores_committed * s.block_bytes);
  counter("deltakv_kv_reclaimed_total", "Slots and pins of dead processes reclaimed.",
          s.reclaimed_writes + s.reclaimed_pins + s.reclaimed_evictions);
  return o.str();
}

}  // namespace deltakv::sidecar
