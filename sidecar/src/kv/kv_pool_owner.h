// KvPoolOwner: the sidecar owns the host KV tier's slot pool segment. It creates the pool at
// start (sized explicitly or from free host RAM, within the cgroup limit), places its memory
// (NUMA node, huge pages), keeps it across engine restarts, returns slots, pins and counter
// shards held by dead engine processes every `reclaim_period`, and reports the pool-wide
// counters as Prometheus metrics.
//
// NUMA: with a node (or `numa_auto` and a GPU's PCI bus id, resolved with hwloc to the node
// nearest that device) the whole segment is bound to that node's memory (MPOL_BIND through
// hwloc) before the pool writes to it. For shared memory the policy belongs to the segment, so
// pages that engine processes fault in later are placed there too.
//
// Huge pages: `hugepages` advises MADV_HUGEPAGE on the segment in every process that maps it.
// Whether that takes effect is the kernel's shmem THP setting
// (/sys/kernel/mm/transparent_hugepage/shmem_enabled), reported by placement().
//
// Thread-safety: Metrics() and placement() may be called from any thread; the reclaimer runs
// on its own.
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
  // Bind the pool's memory to this NUMA node (OS index); -1 = no binding (first touch).
  int numa_node = -1;
  // Bind to the node nearest the PCI device `gpu_pci_bus_id` (e.g. "0000:3b:00.0") instead.
  bool numa_auto = false;
  std::string gpu_pci_bus_id;
  std::chrono::milliseconds reclaim_period{500};
};

// Where the pool's memory went.
struct KvPoolPlacement {
  int numa_node = -1;  // the node it is bound to; -1 = not bound
  bool hugepages_requested = false;
  std::string shmem_thp;  // the selected mode of shmem_enabled ("advise", "never", ...); "" if
                          // the file is unreadable (no THP in this kernel)
  bool hugepages_effective = false;  // requested and the mode lets advised mappings use them
  // One line for the log, e.g. "NUMA node 0; huge pages requested, shmem THP 'never': not in
  // effect".
  std::string Describe() const;
};

// The selected (bracketed) mode in `<root>/sys/kernel/mm/transparent_hugepage/shmem_enabled`,
// or "" if unreadable.
std::string ShmemHugePageMode(const std::string& root = "/");
// True for the modes in which a mapping advised with MADV_HUGEPAGE gets huge pages.
bool ShmemHugePagesHonorAdvice(const std::string& mode);
// The NUMA node (OS index) nearest the PCI device `bus_id` ("[domain:]bus:dev.fn"), via hwloc.
// InvalidArgument for an empty id; NotFound if there is no such device; FailedPrecondition if
// hwloc gives it no NUMA node.
StatusOr<int> NumaNodeNearPciDevice(const std::string& bus_id);
// Binds [addr, addr + bytes) to NUMA node `node` (MPOL_BIND, moving pages already there).
// InvalidArgument naming the existing nodes for a node this machine does not have; IoError if
// the system refuses.
Status BindToNumaNode(void* addr, uint64_t bytes, int node);

class KvPoolOwner {
 public:
  // Creates the pool (replacing a stale segment of the same name). InvalidArgument for a
  // config with neither a capacity nor a fraction; errors of SlotPool::Create otherwise.
  static StatusOr<std::unique_ptr<KvPoolOwner>> Create(const KvPoolConfig& config);
  ~KvPoolOwner();

  // Prometheus text for the pool: capacity, occupancy, pool-wide counters of every engine
  // process (lookups, hit and missed blocks, stores, loads, evictions, removals, bytes in and
  // out, copy busy time, events), reclaimed slots and pins, and copy throughput per direction:
  //   deltakv_kv_copy_gbps{direction}        bytes / copy busy time since the pool was created:
  //                                          how fast engines copy while they copy (1e9 B/s)
  //   deltakv_kv_throughput_gbps{direction}  bytes moved between the previous scrape and this
  //                                          one / the wall time between them (1e9 B/s; 0 on
  //                                          the first scrape)
  // "in" is engine -> host (stores), "out" is host -> engine (loads).
  std::string Metrics() const;
  const KvPoolConfig& config() const { return config_; }
  const KvPoolPlacement& placement() const { return placement_; }
  const kvtier::SlotPool& pool() const { return pool_; }

 private:
  KvPoolOwner(KvPoolConfig config, KvPoolPlacement placement, kvtier::SlotPool pool);
  void ReclaimLoop();

  KvPoolConfig config_;
  KvPoolPlacement placement_;
  mutable kvtier::SlotPool pool_;
  // The previous scrape, for deltakv_kv_throughput_gbps.
  struct Scrape {
    uint64_t time_ns = 0;
    uint64_t bytes_in = 0;
    uint64_t bytes_out = 0;
  };
  mutable std::mutex scrape_mu_;
  mutable Scrape last_scrape_;  // GUARDED_BY(scrape_mu_)
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;  // GUARDED_BY(mu_)
  std::atomic<uint64_t> reclaim_runs_{0};
  std::thread reclaimer_;
};

}  // namespace deltakv::sidecar
