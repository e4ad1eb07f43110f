#include "kv/kv_pool_owner.h"

#include <hwloc.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "kvtier/host_memory.h"
#include "shm/liveness.h"

namespace deltakv::sidecar {
namespace {

// An hwloc topology for the duration of a call.
class Topology {
 public:
  Topology() = default;
  ~Topology() {
    if (loaded_) hwloc_topology_destroy(topo_);
  }
  Topology(const Topology&) = delete;
  Topology& operator=(const Topology&) = delete;

  // Loads the machine's topology, with PCI devices when `with_io`.
  Status Load(bool with_io) {
    if (hwloc_topology_init(&topo_) != 0) return IoError("hwloc: cannot initialize a topology");
    loaded_ = true;
    if (with_io) {
      (void)hwloc_topology_set_io_types_filter(topo_, HWLOC_TYPE_FILTER_KEEP_ALL);
    }
    if (hwloc_topology_load(topo_) != 0) {
      return IoError(std::string("hwloc: cannot load the topology: ") + std::strerror(errno));
    }
    return Status::Ok();
  }
  hwloc_topology_t get() const { return topo_; }

 private:
  hwloc_topology_t topo_{};
  bool loaded_ = false;
};

std::string NodeList(hwloc_topology_t topo) {
  std::string list;
  hwloc_obj_t node = nullptr;
  while ((node = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_NUMANODE, node)) != nullptr) {
    list += (list.empty() ? "" : ", ") + std::to_string(node->os_index);
  }
  return list.empty() ? "none" : list;
}

}  // namespace

std::string ShmemHugePageMode(const std::string& root) {
  std::string base = root.empty() || root.back() != '/' ? root + "/" : root;
  std::ifstream in(base + "sys/kernel/mm/transparent_hugepage/shmem_enabled");
  std::string line;
  if (!std::getline(in, line)) return "";
  const size_t open = line.find('[');
  const size_t close = line.find(']', open);
  if (open == std::string::npos || close == std::string::npos) return "";
  return line.substr(open + 1, close - open - 1);
}

bool ShmemHugePagesHonorAdvice(const std::string& mode) {
  return mode == "advise" || mode == "always" || mode == "within_size" || mode == "force";
}

std::string KvPoolPlacement::Describe() const {
  std::string text = numa_node >= 0 ? "NUMA node " + std::to_string(numa_node) : "no NUMA binding";
  if (hugepages_requested) {
    text += "; huge pages requested, shmem THP '" + (shmem_thp.empty() ? "absent" : shmem_thp) +
            "': " + (hugepages_effective ? "in effect" : "not in effect");
  }
  return text;
}

StatusOr<int> NumaNodeNearPciDevice(const std::string& bus_id) {
  if (bus_id.empty()) {
    return InvalidArgument("NUMA node 'auto' needs the GPU's PCI bus id");
  }
  Topology topo;
  RETURN_IF_ERROR(topo.Load(/*with_io=*/true));
  hwloc_obj_t device = hwloc_get_pcidev_by_busidstring(topo.get(), bus_id.c_str());
  if (device == nullptr) {
    return NotFound("no PCI device '" + bus_id + "' on this machine");
  }
  hwloc_obj_t anchor = hwloc_get_non_io_ancestor_obj(topo.get(), device);
  const int node = anchor == nullptr || anchor->nodeset == nullptr
                       ? -1
                       : hwloc_bitmap_first(anchor->nodeset);
  if (node < 0) {
    return FailedPrecondition("hwloc places PCI device '" + bus_id +
                              "' on no NUMA node");
  }
  return node;
}

Status BindToNumaNode(void* addr, uint64_t bytes, int node) {
  Topology topo;
  RETURN_IF_ERROR(topo.Load(/*with_io=*/false));
  hwloc_obj_t obj =
      node < 0 ? nullptr
               : hwloc_get_numanode_obj_by_os_index(topo.get(), static_cast<unsigned>(node));
  if (obj == nullptr) {
    return InvalidArgument("NUMA node " + std::to_string(node) +
                           " does not exist on this machine (nodes: " + NodeList(topo.get()) +
                           ")");
  }
  if (hwloc_set_area_membind(topo.get(), addr, bytes, obj->nodeset, HWLOC_MEMBIND_BIND,
                             HWLOC_MEMBIND_BYNODESET | HWLOC_MEMBIND_MIGRATE) != 0) {
    return IoError("cannot bind the pool's memory to NUMA node " +
                   std::to_string(node) + ": " + std::strerror(errno));
  }
  return Status::Ok();
}

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
  KvPoolPlacement placement;
  if (c.numa_auto) {
    ASSIGN_OR_RETURN(c.numa_node, NumaNodeNearPciDevice(c.gpu_pci_bus_id));
  }
  placement.hugepages_requested = c.hugepages;
  placement.shmem_thp = ShmemHugePageMode();
  placement.hugepages_effective = c.hugepages && ShmemHugePagesHonorAdvice(placement.shmem_thp);
  kvtier::SlotPoolOptions o;
  o.block_bytes = c.block_bytes;
  o.capacity_slots = c.capacity_slots;
  o.hugepages = c.hugepages;
  o.if_exists = shm::IfExists::kReplace;
  o.unlink_on_destroy = true;
  if (c.numa_node >= 0) {
    const int node = c.numa_node;
    o.place_memory = [node](std::span<uint8_t> segment) {
      return BindToNumaNode(segment.data(), segment.size(), node);
    };
  }
  ASSIGN_OR_RETURN(kvtier::SlotPool pool, kvtier::SlotPool::Create(c.name, o));
  placement.numa_node = c.numa_node;
  return std::unique_ptr<KvPoolOwner>(new KvPoolOwner(c, placement, std::move(pool)));
}

KvPoolOwner::KvPoolOwner(KvPoolConfig config, KvPoolPlacement placement, kvtier::SlotPool pool)
    : config_(std::move(config)),
      placement_(std::move(placement)),
      pool_(std::move(pool)),
      reclaimer_([this] { ReclaimLoop(); }) {}

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
  const uint64_t now_ns = shm::MonotonicNowNs();
  double throughput_in = 0, throughput_out = 0;
  {
    std::lock_guard<std::mutex> lock(scrape_mu_);
    if (last_scrape_.time_ns != 0 && now_ns > last_scrape_.time_ns) {
      const double dt = static_cast<double>(now_ns - last_scrape_.time_ns);
      throughput_in = static_cast<double>(s.bytes_in - last_scrape_.bytes_in) / dt;
      throughput_out = static_cast<double>(s.bytes_out - last_scrape_.bytes_out) / dt;
    }
    last_scrape_ = Scrape{now_ns, s.bytes_in, s.bytes_out};
  }
  std::ostringstream o;
  auto head = [&](const char* name, const char* help, const char* type) {
    o << "# HELP " << name << " " << help << "\n# TYPE " << name << " " << type << "\n";
  };
  auto gauge = [&](const char* name, const char* help, auto v) {
    head(name, help, "gauge");
    o << name << " " << v << "\n";
  };
  auto counter = [&](const char* name, const char* help, uint64_t v) {
    head(name, help, "counter");
    o << name << " " << v << "\n";
  };
  // One series per copy direction: in = engine -> host (stores), out = host -> engine (loads).
  auto directions = [&](const char* name, const char* help, const char* type, auto in, auto out) {
    head(name, help, type);
    o << name << "{direction=\"in\"} " << in << "\n"
      << name << "{direction=\"out\"} " << out << "\n";
  };
  auto gbps = [](uint64_t bytes, uint64_t busy_ns) {
    return busy_ns == 0 ? 0.0 : static_cast<double>(bytes) / static_cast<double>(busy_ns);
  };
  gauge("deltakv_kv_capacity_slots", "Slots in the host KV pool.", s.capacity_slots);
  gauge("deltakv_kv_block_bytes", "Bytes per KV block slot.", s.block_bytes);
  gauge("deltakv_kv_ready_slots", "Slots holding a stored block.", s.ready_slots);
  gauge("deltakv_kv_writing_slots", "Slots being written.", s.writing_slots);
  gauge("deltakv_kv_pinned_slots", "Slots pinned by loads in flight.", s.pinned_slots);
  gauge("deltakv_kv_ready_bytes", "Bytes of stored blocks.", s.ready_bytes);
  gauge("deltakv_kv_occupancy", "Fraction of the slots holding a stored block.",
        s.capacity_slots == 0
            ? 0.0
            : static_cast<double>(s.ready_slots) / static_cast<double>(s.capacity_slots));
  counter("deltakv_kv_lookups_total", "Lookup calls (all engine processes).", s.lookups);
  counter("deltakv_kv_hits_total", "Blocks found by lookups.", s.hits);
  counter("deltakv_kv_misses_total",
          "Blocks not found by lookups (the first miss of a lookup and every key after it).",
          s.misses);
  counter("deltakv_kv_stores_total", "Blocks stored (committed).", s.stores_committed);
  counter("deltakv_kv_stores_refused_total", "Stores refused rather than evicting pinned blocks.",
          s.stores_refused);
  counter("deltakv_kv_loads_total", "Blocks loaded back into engines.", s.loads_completed);
  counter("deltakv_kv_evictions_total", "Blocks evicted to make room.", s.evictions);
  counter("deltakv_kv_removals_total", "Blocks removed by engines.", s.removals);
  counter("deltakv_kv_bytes_in_total", "Bytes copied into the pool (engine -> host).",
          s.bytes_in);
  counter("deltakv_kv_bytes_out_total", "Bytes copied out of the pool (host -> engine).",
          s.bytes_out);
  directions("deltakv_kv_copy_busy_seconds_total",
             "Time engines had a copy in flight, summed over engines.", "counter",
             static_cast<double>(s.copy_busy_ns_in) * 1e-9,
             static_cast<double>(s.copy_busy_ns_out) * 1e-9);
  directions("deltakv_kv_copy_gbps",
             "Bytes copied / copy busy time since the pool was created (1e9 bytes/s while "
             "copying).",
             "gauge", gbps(s.bytes_in, s.copy_busy_ns_in), gbps(s.bytes_out, s.copy_busy_ns_out));
  directions("deltakv_kv_throughput_gbps",
             "Bytes copied since the previous scrape / wall time since it (1e9 bytes/s).", "gauge",
             throughput_in, throughput_out);
  counter("deltakv_kv_copy_failures_total", "Copy batches that reported an error.",
          s.failed_copies);
  counter("deltakv_kv_events_total",
          "Events (stored, evicted, removed) written to the pool's feed.", s.events_published);
  counter("deltakv_kv_events_dropped_total",
          "Events not written because their feed entry was held by a stalled writer.",
          s.events_dropped);
  counter("deltakv_kv_reclaimed_total", "Slots and pins of dead processes reclaimed.",
          s.reclaimed_writes + s.reclaimed_pins + s.reclaimed_evictions);
  gauge("deltakv_kv_numa_node", "NUMA node the pool's memory is bound to (-1: not bound).",
        placement_.numa_node);
  gauge("deltakv_kv_hugepages_effective",
        "1 if huge pages were requested and the kernel's shmem THP mode honours the advice.",
        placement_.hugepages_effective ? 1 : 0);
  return o.str();
}

}  // namespace deltakv::sidecar
