// KvPoolOwner: the sidecar owns the host KV tier's slot pool segment. It creates the pool at
// start (sized explicitly or from free host RAM, within the cgroup limit), keeps it across
// engine restarts, returns slots and pins held by dead engine processes every
// `reclaim_period`, and reports the pool's counters as Prometheus metrics.
//
// Thread-safety: Metrics() may be called from any thread; the reclaimer runs on its own.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "base/status.h"
#include "kvtier/slot_pool.h"

namespace deltakv::sidecar {

struct KvPoolConfig {
  std::string name;          // shared-memory segment name
  uint64_t block_bytes = 0;  // 0 = no KV tier
  uint64_t capacity_slots = 0;
  double host_fraction = 0;  // when capacity_slots == 0: this fraction of usable host RAM
  bool hugepages = false;
  std::chrono::milliseconds reclaim_period{500};
};

class KvPoolOwner {
 public:
  // Creates the pool (replacing a stale segment of the same name). InvalidArgument for a
  // config with neither a capacity nor a fraction; errors of SlotPool::Create otherwise.
  static StatusOr<std::unique_ptr<KvPoolOwner>> Create(const KvPoolConfig& config);
  ~KvPoolOwner();

  // Prometheus text for the pool: capacity, occupancy, hits, misses, stores, evictions,
  // reclaimed slots and pins, bytes stored.
  std::string Metrics() const;
  const KvPoolConfig& config() const { return config_; }

 private:
  KvPoolOwner(KvPoolConfig config, kvtier::SlotPool pool);
  void ReclaimLoop();

  KvPoolConfig config_;
  mutable kvtier::SlotPool pool_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;  // GUARDED_BY(mu_)
  std::atomic<uint64_t> reclaim_runs_{0};
  std::thread reclaimer_;
};

}  // namespace deltakv::sidecar
