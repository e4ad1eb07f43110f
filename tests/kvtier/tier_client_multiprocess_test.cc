// KvTierClient across processes: two forked engine processes share the pool (one stores a
// prefix, the other looks it up and loads identical bytes), and an engine SIGKILLed in the
// middle of a Store (or while holding load pins) leaves nothing readable, after which the
// sidecar's ReclaimDead frees its slots.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <numeric>

#include "kvtier/keys.h"
#include "kvtier/tier_client.h"
#include "test_util.h"
#include "tier_test_util.h"

namespace deltakv::kvtier {
namespace {

using testing::FakeEngineKv;
using testing::FakeLayoutKind;
using testing::ImageForKey;
using testing::UniquePoolName;

constexpr uint64_t kLayers = 6;
constexpr uint64_t kTensorBytes = 1024;
constexpr uint64_t kBlockBytes = kLayers * 2 * kTensorBytes;  // per-layer K and V
constexpr uint32_t kBlockTokens = 16;

using deltakv::testing::Spawn;
using deltakv::testing::WaitExit;

// Real keys of docs/KEYS.md for a prompt of `blocks` full blocks.
std::vector<PoolKey> PromptKeys(size_t blocks) {
  KeyContext ctx;
  ctx.model_fingerprint = "test/model@1";
  ctx.kv_dtype = "bfloat16";
  ctx.kv_layout = "per-layer-kv";
  std::vector<uint32_t> tokens(blocks * kBlockTokens + 5);
  std::iota(tokens.begin(), tokens.end(), 1000u);
  StatusOr<std::vector<BlockKey>> keys = ChainKeys(ctx, tokens, kBlockTokens);
  return keys.ok() ? std::move(keys).value() : std::vector<PoolKey>{};
}

std::unique_ptr<CpuCopyEngine> Engine() {
  StatusOr<std::unique_ptr<CpuCopyEngine>> e = CpuCopyEngine::Create({});
  return e.ok() ? std::move(e).value() : nullptr;
}

std::vector<uint64_t> Iota(uint64_t first, uint64_t n) {
  std::vector<uint64_t> v(n);
  std::iota(v.begin(), v.end(), first);
  return v;
}

SlotPool CreatePool(const std::string& name, uint64_t slots) {
  SlotPoolOptions o;
  o.block_bytes = kBlockBytes;
  o.capacity_slots = slots;
  o.poison_freed = true;
  StatusOr<SlotPool> pool = SlotPool::Create(name, o);
  EXPECT_TRUE(pool.ok()) << pool.status().ToString();
  return std::move(pool).value();
}

void WriteByte(int fd) {
  char c = 1;
  (void)!write(fd, &c, 1);
}
bool ReadByte(int fd) {
  char c = 0;
  return read(fd, &c, 1) == 1;
}

TEST(TierClientMultiProcessTest, SecondEngineLoadsThePrefixTheFirstStored) {
  const std::string name = UniquePoolName("tier-mp");
  SlotPool pool = CreatePool(name, 64);
  const std::vector<PoolKey> keys = PromptKeys(24);
  ASSERT_EQ(keys.size(), 24u);
  int stored[2], done[2];
  ASSERT_EQ(pipe(stored), 0);
  ASSERT_EQ(pipe(done), 0);

  pid_t writer = Spawn([&]() -> int {
    auto engine = Engine();
    FakeEngineKv mem(FakeLayoutKind::kPerLayerKV, kLayers, 40, kTensorBytes, 16);
    StatusOr<std::unique_ptr<KvTierClient>> client =
        KvTierClient::Open(name, mem.Layout(), engine.get());
    if (!client.ok()) return 10;
    std::vector<uint64_t> blocks = Iota(10, keys.size());
    for (size_t i = 0; i < keys.size(); ++i) {
      mem.WriteBlock(blocks[i], ImageForKey(keys[i], kBlockBytes));
    }
    StatusOr<StoreHandle> h = (*client)->PrepareStore(keys);
    if (!h.ok() || h->allocated() != keys.size()) return 11;
    if (!(*client)->Store(*h, blocks).ok()) return 12;
    if (!(*client)->CompleteStore(*h).ok()) return 13;
    WriteByte(stored[1]);
    return ReadByte(done[0]) ? 0 : 14;  // stay alive while the reader loads
  });
  pid_t reader = Spawn([&]() -> int {
    if (!ReadByte(stored[0])) return 20;
    auto engine = Engine();
    // A different engine layout with the same slot image (cross-layer blocks).
    FakeEngineKv mem(FakeLayoutKind::kCrossLayer, kLayers * 2, 30, kTensorBytes, 128);
    StatusOr<std::unique_ptr<KvTierClient>> client =
        KvTierClient::Open(name, mem.Layout(), engine.get());
    if (!client.ok()) return 21;
    std::vector<PoolKey> longer = keys;
    longer.push_back(PoolKey{1, 2});  // a request one block longer than what is stored
    const size_t hits = (*client)->Lookup(longer);
    if (hits != keys.size()) return 22;
    StatusOr<LoadHandle> h = (*client)->PrepareLoad(longer, hits);
    if (!h.ok()) return 23;
    std::vector<uint64_t> blocks = Iota(3, hits);
    if (!(*client)->Load(*h, blocks).ok()) return 24;
    if (!(*client)->CompleteLoad(*h).ok()) return 25;
    int bad = 0;
    for (size_t i = 0; i < hits; ++i) {
      if (mem.ReadBlock(blocks[i]) != ImageForKey(keys[i], kBlockBytes)) ++bad;
    }
    WriteByte(done[1]);
    return bad == 0 && mem.CanariesIntact() ? 0 : 26;
  });
  EXPECT_EQ(WaitExit(writer), 0);
  EXPECT_EQ(WaitExit(reader), 0);
  for (int fd : {stored[0], stored[1], done[0], done[1]}) close(fd);
  PoolStats s = pool.Stats();
  EXPECT_EQ(s.ready_slots, keys.size());
  EXPECT_EQ(s.pinned_slots, 0u);
  EXPECT_EQ(s.writing_slots, 0u);
}

TEST(TierClientMultiProcessTest, KilledMidStoreLeavesNoReadableBlockAndReclaimFreesIt) {
  const std::string name = UniquePoolName("tier-kill");
  SlotPool pool = CreatePool(name, 16);
  const std::vector<PoolKey> keys = PromptKeys(6);
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  pid_t child = Spawn([&]() -> int {
    testing::GatedCopyEngine stalled;  // copies half of each block, never finishes
    FakeEngineKv mem(FakeLayoutKind::kPerLayerKV, kLayers, 8, kTensorBytes);
    StatusOr<std::unique_ptr<KvTierClient>> client =
        KvTierClient::Open(name, mem.Layout(), &stalled);
    if (!client.ok()) return 10;
    for (size_t i = 0; i < keys.size(); ++i) {
      mem.WriteBlock(i, ImageForKey(keys[i], kBlockBytes));
    }
    StatusOr<StoreHandle> h = (*client)->PrepareStore(keys);
    if (!h.ok() || h->allocated() != keys.size()) return 11;
    if (!(*client)->Store(*h, Iota(0, keys.size())).ok()) return 12;
    WriteByte(ready[1]);
    (void)(*client)->CompleteStore(*h);  // blocks: the copy never completes
    return 13;
  });
  ASSERT_TRUE(ReadByte(ready[0]));
  kill(child, SIGKILL);
  EXPECT_EQ(WaitExit(child), 128 + SIGKILL);
  close(ready[0]);
  close(ready[1]);

  EXPECT_EQ(pool.Stats().writing_slots, keys.size());
  auto engine = Engine();
  FakeEngineKv mem(FakeLayoutKind::kPerLayerKV, kLayers, 8, kTensorBytes);
  StatusOr<std::unique_ptr<KvTierClient>> opened =
      KvTierClient::Open(name, mem.Layout(), engine.get());
  ASSERT_TRUE(opened.ok());
  KvTierClient& client = **opened;
  // Half-written blocks are invisible: no lookup hit, no pin, and a new store of the keys
  // sees them in flight rather than stored.
  EXPECT_EQ(client.Lookup(keys), 0u);
  EXPECT_EQ(client.PrepareLoad(keys, 1).status().code(), StatusCode::kNotFound);
  {
    StatusOr<StoreHandle> h = client.PrepareStore(keys);
    ASSERT_TRUE(h.ok());
    EXPECT_EQ(h->in_flight(), keys.size());
    EXPECT_TRUE(client.CompleteStore(*h).ok());
  }

  // The sidecar reclaims the dead writer's slots (poisoned on the way out).
  StatusOr<ReclaimReport> report = pool.ReclaimDead();
  ASSERT_TRUE(report.ok());
  EXPECT_EQ(report->writes, keys.size());
  PoolStats s = pool.Stats();
  EXPECT_EQ(s.writing_slots, 0u);
  EXPECT_EQ(s.ready_slots, 0u);
  EXPECT_EQ(s.index_entries, 0u);

  // The keys can be stored and loaded again, with the right bytes.
  for (size_t i = 0; i < keys.size(); ++i) mem.WriteBlock(i, ImageForKey(keys[i], kBlockBytes));
  StatusOr<StoreHandle> h = client.PrepareStore(keys);
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(h->allocated(), keys.size());
  ASSERT_TRUE(client.Store(*h, Iota(0, keys.size())).ok());
  ASSERT_TRUE(client.CompleteStore(*h).ok());
  StatusOr<LoadHandle> l = client.PrepareLoad(keys, keys.size());
  ASSERT_TRUE(l.ok());
  ASSERT_TRUE(client.Load(*l, Iota(0, keys.size())).ok());  // overwrite in place: same bytes
  ASSERT_TRUE(client.CompleteLoad(*l).ok());
  for (size_t i = 0; i < keys.size(); ++i) {
    EXPECT_EQ(mem.ReadBlock(i), ImageForKey(keys[i], kBlockBytes)) << i;
  }
}

TEST(TierClientMultiProcessTest, KilledWhileLoadingLeavesPinsForReclaim) {
  const std::string name = UniquePoolName("tier-killpin");
  SlotPool pool = CreatePool(name, 8);
  const std::vector<PoolKey> keys = PromptKeys(4);
  {
    auto engine = Engine();
    FakeEngineKv mem(FakeLayoutKind::kPerLayerKV, kLayers, 4, kTensorBytes);
    StatusOr<std::unique_ptr<KvTierClient>> client =
        KvTierClient::Open(name, mem.Layout(), engine.get());
    ASSERT_TRUE(client.ok());
    StatusOr<StoreHandle> h = (*client)->PrepareStore(keys);
    ASSERT_TRUE(h.ok());
    ASSERT_TRUE((*client)->Store(*h, Iota(0, 4)).ok());
    ASSERT_TRUE((*client)->CompleteStore(*h).ok());
  }
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  pid_t child = Spawn([&]() -> int {
    testing::GatedCopyEngine stalled;
    FakeEngineKv mem(FakeLayoutKind::kPerLayerKV, kLayers, 4, kTensorBytes);
    StatusOr<std::unique_ptr<KvTierClient>> client =
        KvTierClient::Open(name, mem.Layout(), &stalled);
    if (!client.ok()) return 10;
    StatusOr<LoadHandle> l = (*client)->PrepareLoad(keys, keys.size());
    if (!l.ok()) return 11;
    if (!(*client)->Load(*l, Iota(0, 4)).ok()) return 12;
    WriteByte(ready[1]);
    (void)(*client)->CompleteLoad(*l);  // blocks
    return 13;
  });
  ASSERT_TRUE(ReadByte(ready[0]));
  kill(child, SIGKILL);
  EXPECT_EQ(WaitExit(child), 128 + SIGKILL);
  close(ready[0]);
  close(ready[1]);
  EXPECT_EQ(pool.Stats().pinned_slots, keys.size());
  StatusOr<ReclaimReport> report = pool.ReclaimDead();
  ASSERT_TRUE(report.ok());
  EXPECT_EQ(report->pins, keys.size());
  PoolStats s = pool.Stats();
  EXPECT_EQ(s.pinned_slots, 0u);
  EXPECT_EQ(s.ready_slots, keys.size());
}

}  // namespace
}  // namespace deltakv::kvtier
