// The sidecar's KvPoolOwner: its /metrics text reports the pool-wide counters that engine
// clients add up (hits, misses, evictions, bytes each way, copy throughput, occupancy), and it
// places the pool's memory (NUMA binding through hwloc, huge-page mode from sysfs).
#include "kv/kv_pool_owner.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cctype>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <sstream>

#include "kvtier/tier_client.h"
#include "test_util.h"
#include "tier_test_util.h"

namespace deltakv::sidecar {
namespace {

using kvtier::testing::FakeEngineKv;
using kvtier::testing::FakeLayoutKind;
using kvtier::testing::ImageForKey;
using kvtier::testing::KeyOf;
using kvtier::testing::UniquePoolName;

constexpr uint64_t kLayers = 2, kTensorBytes = 2048;

std::vector<kvtier::PoolKey> Keys(uint64_t first, uint64_t n) {
  std::vector<kvtier::PoolKey> keys;
  for (uint64_t i = 0; i < n; ++i) keys.push_back(KeyOf(first + i));
  return keys;
}

std::vector<uint64_t> Iota(uint64_t first, uint64_t n) {
  std::vector<uint64_t> v(n);
  std::iota(v.begin(), v.end(), first);
  return v;
}

// The value of the series `name` (with its labels, e.g. name{direction="in"}), or -1.
double Value(const std::string& metrics, const std::string& series) {
  std::istringstream in(metrics);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(series + " ", 0) == 0) return std::stod(line.substr(series.size() + 1));
  }
  return -1;
}

TEST(KvPoolOwnerTest, MetricsReportThePoolWideCounters) {
  KvPoolConfig config;
  config.name = UniquePoolName("owner");
  config.block_bytes = kLayers * kTensorBytes;  // cross-layer blocks
  config.capacity_slots = 8;
  StatusOr<std::unique_ptr<KvPoolOwner>> owner = KvPoolOwner::Create(config);
  ASSERT_TRUE(owner.ok()) << owner.status().ToString();
  std::string m = (*owner)->Metrics();
  EXPECT_EQ(Value(m, "deltakv_kv_capacity_slots"), 8);
  EXPECT_EQ(Value(m, "deltakv_kv_hits_total"), 0);
  EXPECT_EQ(Value(m, "deltakv_kv_throughput_gbps{direction=\"in\"}"), 0);  // first scrape

  StatusOr<std::unique_ptr<kvtier::CpuCopyEngine>> engine = kvtier::CpuCopyEngine::Create({});
  ASSERT_TRUE(engine.ok());
  FakeEngineKv mem(FakeLayoutKind::kCrossLayer, kLayers, 16, kTensorBytes);
  StatusOr<std::unique_ptr<kvtier::KvTierClient>> opened =
      kvtier::KvTierClient::Open(config.name, mem.Layout(), engine->get());
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  kvtier::KvTierClient& client = **opened;
  const uint64_t bb = config.block_bytes;
  auto store = [&](const std::vector<kvtier::PoolKey>& keys, uint64_t first_block) {
    for (size_t i = 0; i < keys.size(); ++i) {
      mem.WriteBlock(first_block + i, ImageForKey(keys[i], bb));
    }
    StatusOr<kvtier::StoreHandle> h = client.PrepareStore(keys);
    ASSERT_TRUE(h.ok());
    ASSERT_TRUE(client.Store(*h, Iota(first_block, keys.size())).ok());
    ASSERT_TRUE(client.CompleteStore(*h).ok());
  };
  store(Keys(0, 8), 0);
  store(Keys(8, 2), 8);                          // evicts two
  EXPECT_EQ(client.Lookup(Keys(2, 10)), 8u);     // 8 hits, 2 misses
  StatusOr<kvtier::LoadHandle> l = client.PrepareLoad(Keys(2, 10), 5);
  ASSERT_TRUE(l.ok());
  ASSERT_TRUE(client.Load(*l, Iota(10, 5)).ok());
  ASSERT_TRUE(client.CompleteLoad(*l).ok());
  ASSERT_TRUE(client.Remove(KeyOf(9)).ok());

  m = (*owner)->Metrics();
  EXPECT_EQ(Value(m, "deltakv_kv_lookups_total"), 1);
  EXPECT_EQ(Value(m, "deltakv_kv_hits_total"), 8);
  EXPECT_EQ(Value(m, "deltakv_kv_misses_total"), 2);
  EXPECT_EQ(Value(m, "deltakv_kv_stores_total"), 10);
  EXPECT_EQ(Value(m, "deltakv_kv_loads_total"), 5);
  EXPECT_EQ(Value(m, "deltakv_kv_evictions_total"), 2);
  EXPECT_EQ(Value(m, "deltakv_kv_removals_total"), 1);
  EXPECT_EQ(Value(m, "deltakv_kv_bytes_in_total"), 10.0 * bb);
  EXPECT_EQ(Value(m, "deltakv_kv_bytes_out_total"), 5.0 * bb);
  EXPECT_EQ(Value(m, "deltakv_kv_occupancy"), 7.0 / 8);
  EXPECT_EQ(Value(m, "deltakv_kv_events_total"), 10 + 2 + 1);
  EXPECT_EQ(Value(m, "deltakv_kv_numa_node"), -1);
  EXPECT_EQ(Value(m, "deltakv_kv_hugepages_effective"), 0);
  const kvtier::TierStats t = client.Stats();
  for (const char* dir : {"in", "out"}) {
    const std::string label = std::string("{direction=\"") + dir + "\"}";
    const kvtier::TierDirectionStats& d = dir[0] == 'i' ? t.store : t.load;
    EXPECT_NEAR(Value(m, "deltakv_kv_copy_busy_seconds_total" + label), d.busy_seconds, 1e-6);
    EXPECT_NEAR(Value(m, "deltakv_kv_copy_gbps" + label), d.gb_per_s, 1e-3 * d.gb_per_s + 1e-6);
    EXPECT_GT(Value(m, "deltakv_kv_throughput_gbps" + label), 0) << dir;
  }
  EXPECT_NE(m.find("# TYPE deltakv_kv_bytes_out_total counter"), std::string::npos);
  EXPECT_NE(m.find("# TYPE deltakv_kv_copy_gbps gauge"), std::string::npos);
  // Nothing moved since the last scrape.
  m = (*owner)->Metrics();
  EXPECT_EQ(Value(m, "deltakv_kv_throughput_gbps{direction=\"out\"}"), 0);
}

TEST(KvPoolOwnerTest, BindsThePoolToANumaNode) {
  KvPoolConfig config;
  config.name = UniquePoolName("numa");
  config.block_bytes = 4096;
  config.capacity_slots = 64;
  config.numa_node = 0;  // every Linux machine has node 0
  StatusOr<std::unique_ptr<KvPoolOwner>> owner = KvPoolOwner::Create(config);
  ASSERT_TRUE(owner.ok()) << owner.status().ToString();
  EXPECT_EQ((*owner)->placement().numa_node, 0);
  EXPECT_EQ(Value((*owner)->Metrics(), "deltakv_kv_numa_node"), 0);
  EXPECT_NE((*owner)->placement().Describe().find("NUMA node 0"), std::string::npos);
  // The kernel's view of the mappings of the segment: on a machine with several nodes, policy
  // bind:0 for the owner's mapping and an engine's (for shared memory the policy is the
  // segment's). With a single node hwloc binds "to every node", which Linux shows as the
  // local-allocation policy ("prefer" with no node).
  size_t nodes = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/sys/devices/system/node", ec)) {
    const std::string n = e.path().filename().string();
    if (n.rfind("node", 0) == 0 && n.size() > 4 && std::isdigit(static_cast<unsigned char>(n[4]))) {
      ++nodes;
    }
  }
  StatusOr<kvtier::SlotPool> engine = kvtier::SlotPool::Open(config.name);
  ASSERT_TRUE(engine.ok());
  std::ifstream maps("/proc/self/numa_maps");
  std::vector<std::string> policies;
  std::string line;
  while (std::getline(maps, line)) {
    if (line.find("/dev/shm/" + config.name) == std::string::npos) continue;
    const std::string rest = line.substr(line.find(' ') + 1);
    policies.push_back(rest.substr(0, rest.find(' ')));
  }
  if (maps.is_open()) {
    ASSERT_EQ(policies.size(), 2u);  // the owner's mapping and the engine's
    for (const std::string& policy : policies) {
      if (nodes > 1) {
        EXPECT_EQ(policy, "bind:0");
      } else {
        EXPECT_TRUE(policy == "bind:0" || policy == "prefer" || policy == "default") << policy;
      }
    }
  }

  config.name = UniquePoolName("numa-bad");
  config.numa_node = 4095;
  StatusOr<std::unique_ptr<KvPoolOwner>> bad = KvPoolOwner::Create(config);
  ASSERT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("NUMA node 4095 does not exist"), std::string::npos)
      << bad.status().ToString();
  EXPECT_NE(bad.status().message().find("nodes: 0"), std::string::npos) << bad.status().ToString();
  EXPECT_FALSE(shm::Segment::Exists(config.name));  // nothing left behind
}

TEST(KvPoolOwnerTest, AutoNumaNodeFollowsThePciDevice) {
  KvPoolConfig config;
  config.name = UniquePoolName("numa-auto");
  config.block_bytes = 4096;
  config.capacity_slots = 16;
  config.numa_auto = true;
  config.gpu_pci_bus_id = "0000:ff:1f.7";  // no such device
  StatusOr<std::unique_ptr<KvPoolOwner>> missing = KvPoolOwner::Create(config);
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("0000:ff:1f.7"), std::string::npos);
  config.gpu_pci_bus_id = "";
  EXPECT_EQ(KvPoolOwner::Create(config).status().code(), StatusCode::kInvalidArgument);
  // Any PCI device of this machine resolves to one of its nodes.
  std::error_code ec;
  for (const auto& dev : std::filesystem::directory_iterator("/sys/bus/pci/devices", ec)) {
    StatusOr<int> node = NumaNodeNearPciDevice(dev.path().filename().string());
    ASSERT_TRUE(node.ok()) << dev.path() << ": " << node.status().ToString();
    EXPECT_GE(*node, 0);
    config.gpu_pci_bus_id = dev.path().filename().string();
    StatusOr<std::unique_ptr<KvPoolOwner>> owner = KvPoolOwner::Create(config);
    ASSERT_TRUE(owner.ok()) << owner.status().ToString();
    EXPECT_EQ((*owner)->placement().numa_node, *node);
    break;
  }
}

TEST(KvPoolOwnerTest, HugePageModeComesFromSysfs) {
  deltakv::testing::TempDir root;
  std::filesystem::create_directories(root / "sys/kernel/mm/transparent_hugepage");
  const std::string file = root / "sys/kernel/mm/transparent_hugepage/shmem_enabled";
  deltakv::testing::WriteAll(file, "always within_size advise [never] deny force\n");
  EXPECT_EQ(ShmemHugePageMode(root.path()), "never");
  EXPECT_FALSE(ShmemHugePagesHonorAdvice("never"));
  deltakv::testing::WriteAll(file, "always within_size [advise] never deny force\n");
  EXPECT_EQ(ShmemHugePageMode(root.path()), "advise");
  EXPECT_TRUE(ShmemHugePagesHonorAdvice("advise"));
  EXPECT_TRUE(ShmemHugePagesHonorAdvice("always"));
  EXPECT_FALSE(ShmemHugePagesHonorAdvice("deny"));
  EXPECT_EQ(ShmemHugePageMode(root / "nowhere"), "");

  KvPoolConfig config;
  config.name = UniquePoolName("huge");
  config.block_bytes = 4096;
  config.capacity_slots = 16;
  config.hugepages = true;
  StatusOr<std::unique_ptr<KvPoolOwner>> owner = KvPoolOwner::Create(config);
  ASSERT_TRUE(owner.ok()) << owner.status().ToString();
  const KvPoolPlacement& p = (*owner)->placement();
  EXPECT_TRUE(p.hugepages_requested);
  EXPECT_EQ(p.shmem_thp, ShmemHugePageMode());
  EXPECT_EQ(p.hugepages_effective, ShmemHugePagesHonorAdvice(p.shmem_thp));
  EXPECT_NE(p.Describe().find("huge pages requested, shmem THP '"), std::string::npos);
}

}  // namespace
}  // namespace deltakv::sidecar
