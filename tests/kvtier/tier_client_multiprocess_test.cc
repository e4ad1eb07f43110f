// KvTierClient across processes: two forked engine processes share the pool (one stores a
// prefix, the other looks it up and loads identical bytes), and an engine SIGKILLed in the
// middle of a Store (or while holding load pins) leaves nothing readable, after which the
// sidecar's ReclaimDead frees its slots. An engine sees the blocks another engine evicted or
// removed (pool events), and the pool-wide counters are the sums of the engines' own.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <numeric>
#include <set>

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

TEST(TierClientMultiProcessTest, EngineSeesBlocksEvictedAndRemovedByAnotherEngine) {
  const std::string name = UniquePoolName("tier-events");
  SlotPool pool = CreatePool(name, 8);
  const std::vector<PoolKey> mine = PromptKeys(8);
  std::vector<PoolKey> theirs;
  for (uint64_t i = 0; i < 5; ++i) theirs.push_back(PoolKey{0xA000 + i, i});
  int stored[2], done[2];
  ASSERT_EQ(pipe(stored), 0);
  ASSERT_EQ(pipe(done), 0);
  // Engine A removes one of B's blocks and stores five of its own, evicting four more of B's.
  pid_t a = Spawn([&]() -> int {
    if (!ReadByte(stored[0])) return 10;
    auto engine = Engine();
    FakeEngineKv mem(FakeLayoutKind::kPerLayerKV, kLayers, 8, kTensorBytes);
    StatusOr<std::unique_ptr<KvTierClient>> client =
        KvTierClient::Open(name, mem.Layout(), engine.get());
    if (!client.ok()) return 11;
    if (!(*client)->Remove(mine[0]).ok()) return 12;
    StatusOr<StoreHandle> h = (*client)->PrepareStore(theirs);
    if (!h.ok() || h->allocated() != theirs.size()) return 13;
    if (!(*client)->Store(*h, Iota(0, theirs.size())).ok()) return 14;
    if (!(*client)->CompleteStore(*h).ok()) return 15;
    WriteByte(done[1]);
    return 0;
  });
  pid_t b = Spawn([&]() -> int {
    auto engine = Engine();
    FakeEngineKv mem(FakeLayoutKind::kPerLayerKV, kLayers, 8, kTensorBytes);
    KvTierClientOptions options;
    options.pool_events = true;
    StatusOr<std::unique_ptr<KvTierClient>> client =
        KvTierClient::Open(name, mem.Layout(), engine.get(), options);
    if (!client.ok()) return 20;
    StatusOr<StoreHandle> h = (*client)->PrepareStore(mine);
    if (!h.ok() || h->allocated() != mine.size()) return 21;
    if (!(*client)->Store(*h, Iota(0, mine.size())).ok()) return 22;
    if (!(*client)->CompleteStore(*h).ok()) return 23;
    WriteByte(stored[1]);
    if (!ReadByte(done[0])) return 24;
    std::vector<TierEvent> events;
    (*client)->DrainEvents(&events);
    // Its own 8 stores (reported when they happened), then A's removal, evictions and stores.
    if (events.size() != 8 + 1 + 4 + 5) return 25;
    const uint32_t me = static_cast<uint32_t>(getpid());
    for (size_t i = 0; i < 8; ++i) {
      if (events[i].kind != TierEventKind::kStored || events[i].key != mine[i] ||
          events[i].origin_pid != me) {
        return 26;
      }
    }
    if (events[8].kind != TierEventKind::kRemoved || events[8].key != mine[0]) return 27;
    std::set<size_t> evicted;
    size_t stores = 0;
    for (size_t i = 8; i < events.size(); ++i) {
      if (events[i].origin_pid != static_cast<uint32_t>(a)) return 28;
      if (events[i].kind == TierEventKind::kEvicted) {
        auto it = std::find(mine.begin() + 1, mine.end(), events[i].key);
        if (it == mine.end()) return 29;
        evicted.insert(static_cast<size_t>(it - mine.begin()));
      } else if (events[i].kind == TierEventKind::kStored) {
        if (events[i].key != theirs[stores++]) return 30;
      }
    }
    if (evicted.size() != 4 || stores != theirs.size()) return 31;
    // What the events say is what the pool holds: the evicted and removed keys are gone.
    for (size_t i = 0; i < mine.size(); ++i) {
      const bool gone = i == 0 || evicted.count(i) > 0;
      if ((*client)->Lookup(std::span<const PoolKey>(&mine[i], 1)) != (gone ? 0u : 1u)) return 32;
    }
    TierStats s = (*client)->Stats();
    return s.events_lost == 0 && s.pool_events == 10 ? 0 : 33;
  });
  EXPECT_EQ(WaitExit(a), 0);
  EXPECT_EQ(WaitExit(b), 0);
  for (int fd : {stored[0], stored[1], done[0], done[1]}) close(fd);
}

TEST(TierClientMultiProcessTest, PoolCountersAreTheSumOfTheEngines) {
  const std::string name = UniquePoolName("tier-counters");
  SlotPool pool = CreatePool(name, 48);
  const std::vector<PoolKey> keys = PromptKeys(32);
  constexpr size_t kFields = 9;
  int report[2];
  ASSERT_EQ(pipe(report), 0);
  std::vector<pid_t> engines;
  for (uint64_t e = 0; e < 2; ++e) {
    engines.push_back(Spawn([&, e]() -> int {
      auto engine = Engine();
      FakeEngineKv mem(FakeLayoutKind::kPerLayerKV, kLayers, 32, kTensorBytes);
      StatusOr<std::unique_ptr<KvTierClient>> opened =
          KvTierClient::Open(name, mem.Layout(), engine.get());
      if (!opened.ok()) return 10;
      KvTierClient& client = **opened;
      // Each engine stores its half of the prompt in rounds, then looks up and loads prefixes
      // of the whole prompt, racing the other engine.
      for (size_t round = 0; round < 50; ++round) {
        const size_t first = e * 16 + (round % 4) * 4;
        std::vector<PoolKey> part(keys.begin() + first, keys.begin() + first + 4);
        StatusOr<StoreHandle> h = client.PrepareStore(part);
        if (!h.ok()) return 11;
        if (!client.Store(*h, Iota(0, 4)).ok() || !client.CompleteStore(*h).ok()) return 12;
        const size_t hits = client.Lookup(keys);
        StatusOr<LoadHandle> l = client.PrepareLoad(keys, hits);
        if (!l.ok()) continue;  // evicted in between
        if (!client.Load(*l, Iota(0, hits)).ok() || !client.CompleteLoad(*l).ok()) return 13;
      }
      TierStats s = client.Stats();
      std::array<uint64_t, kFields> out = {s.lookups,        s.hit_blocks,       s.miss_blocks,
                                           s.store.bytes,    s.load.bytes,       s.load.blocks,
                                           s.stores_committed, s.evictions, s.removals};
      return write(report[1], out.data(), sizeof(out)) == sizeof(out) ? 0 : 14;
    }));
  }
  std::array<uint64_t, kFields> sum{};
  for (size_t i = 0; i < engines.size(); ++i) {
    std::array<uint64_t, kFields> got{};
    ASSERT_EQ(read(report[0], got.data(), sizeof(got)), static_cast<ssize_t>(sizeof(got)));
    for (size_t f = 0; f < kFields; ++f) sum[f] += got[f];
  }
  for (pid_t pid : engines) EXPECT_EQ(WaitExit(pid), 0);
  close(report[0]);
  close(report[1]);
  const PoolStats p = pool.Stats();
  EXPECT_EQ(p.lookups, sum[0]);
  EXPECT_EQ(p.hits, sum[1]);
  EXPECT_EQ(p.misses, sum[2]);
  EXPECT_EQ(p.bytes_in, sum[3]);
  EXPECT_EQ(p.bytes_out, sum[4]);
  EXPECT_EQ(p.loads_completed, sum[5]);
  EXPECT_EQ(p.stores_committed, sum[6]);
  EXPECT_EQ(p.evictions, sum[7]);
  EXPECT_EQ(p.removals, sum[8]);
  EXPECT_GT(p.bytes_out, 0u);
  EXPECT_EQ(p.bytes_in, p.stores_committed * kBlockBytes);
  EXPECT_EQ(p.counter_shards_owned, 0u);  // both engines closed their clients
}

}  // namespace
}  // namespace deltakv::kvtier
