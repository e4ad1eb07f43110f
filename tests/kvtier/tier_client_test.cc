// KvTierClient in one process: store from a fake engine memory and reload into another (both
// layouts), longest-prefix lookup, pins against an eviction storm, refusal when everything is
// pinned, evictions the policy did not propose, events, stats, RAII handles, failing and
// stalled copies, bad arguments (repeated engine blocks included).
#include "kvtier/tier_client.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <numeric>
#include <thread>

#include "tier_test_util.h"

namespace deltakv::kvtier {
namespace {

using testing::FakeEngineKv;
using testing::FakeLayoutKind;
using testing::ImageForKey;
using testing::KeyOf;
using testing::ManualClock;
using testing::UniquePoolName;

constexpr uint64_t kLayers = 4;
constexpr uint64_t kTensorBytes = 512;

uint64_t BlockBytes(FakeLayoutKind kind) {
  return kLayers * kTensorBytes * (kind == FakeLayoutKind::kPerLayerKV ? 2 : 1);
}

std::vector<PoolKey> Keys(uint64_t first, uint64_t n) {
  std::vector<PoolKey> keys;
  for (uint64_t i = 0; i < n; ++i) keys.push_back(KeyOf(first + i));
  return keys;
}

std::vector<uint64_t> Iota(uint64_t first, uint64_t n) {
  std::vector<uint64_t> v(n);
  std::iota(v.begin(), v.end(), first);
  return v;
}

class TierClientTest : public ::testing::Test {
 protected:
  void MakePool(uint64_t slots, uint64_t block_bytes) {
    name_ = UniquePoolName("tier");
    SlotPoolOptions o;
    o.block_bytes = block_bytes;
    o.capacity_slots = slots;
    o.poison_freed = true;
    StatusOr<SlotPool> pool = SlotPool::Create(name_, o);
    ASSERT_TRUE(pool.ok()) << pool.status().ToString();
    pool_ = std::make_unique<SlotPool>(std::move(pool).value());
    CpuCopyEngineOptions e;
    e.threads = 3;
    e.min_piece_bytes = 1024;
    engine_ = std::move(CpuCopyEngine::Create(e)).value();
  }

  std::unique_ptr<KvTierClient> OpenClient(FakeEngineKv& mem, CopyEngine* engine = nullptr,
                                           KvTierClientOptions options = {}) {
    options.pool.clock = &clock_;
    StatusOr<std::unique_ptr<KvTierClient>> c = KvTierClient::Open(
        name_, mem.Layout(), engine != nullptr ? engine : engine_.get(), std::move(options));
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return c.ok() ? std::move(c).value() : nullptr;
  }

  // Writes ImageForKey(keys[i]) into engine block blocks[i] and stores it.
  void StoreAll(KvTierClient& client, FakeEngineKv& mem, const std::vector<PoolKey>& keys,
                const std::vector<uint64_t>& blocks) {
    for (size_t i = 0; i < keys.size(); ++i) {
      mem.WriteBlock(blocks[i], ImageForKey(keys[i], mem.block_bytes()));
    }
    StatusOr<StoreHandle> h = client.PrepareStore(keys);
    ASSERT_TRUE(h.ok()) << h.status().ToString();
    StatusOr<CopyCompletion> c = client.Store(*h, blocks);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    ASSERT_TRUE(client.CompleteStore(*h).ok());
  }

  // Loads keys into engine blocks `blocks` and checks every byte. Returns blocks verified.
  size_t LoadAndCheck(KvTierClient& client, FakeEngineKv& mem, const std::vector<PoolKey>& keys,
                      const std::vector<uint64_t>& blocks) {
    StatusOr<LoadHandle> h = client.PrepareLoad(keys, keys.size());
    EXPECT_TRUE(h.ok()) << h.status().ToString();
    if (!h.ok()) return 0;
    StatusOr<CopyCompletion> c = client.Load(*h, blocks);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    EXPECT_TRUE(client.CompleteLoad(*h).ok());
    size_t good = 0;
    for (size_t i = 0; i < keys.size(); ++i) {
      if (mem.ReadBlock(blocks[i]) == ImageForKey(keys[i], mem.block_bytes())) ++good;
    }
    return good;
  }

  std::string name_;
  ManualClock clock_;
  std::unique_ptr<SlotPool> pool_;  // the sidecar's pool
  std::unique_ptr<CpuCopyEngine> engine_;
};

class TierClientLayoutTest : public TierClientTest,
                             public ::testing::WithParamInterface<FakeLayoutKind> {};

TEST_P(TierClientLayoutTest, StoreThenReloadIntoAnotherEngineMemory) {
  const FakeLayoutKind kind = GetParam();
  MakePool(64, BlockBytes(kind));
  FakeEngineKv a(kind, kLayers, 32, kTensorBytes,
                 /*pad=*/kind == FakeLayoutKind::kCrossLayer ? 64 : 8);
  FakeEngineKv b(kind, kLayers, 32, kTensorBytes, 8);
  auto writer = OpenClient(a);
  auto reader = OpenClient(b);
  const std::vector<PoolKey> keys = Keys(0, 20);
  std::vector<uint64_t> src = Iota(5, 20);
  std::reverse(src.begin(), src.end());
  StoreAll(*writer, a, keys, src);

  EXPECT_EQ(reader->Lookup(keys), 20u);
  std::vector<uint64_t> dst = Iota(0, 20);
  std::rotate(dst.begin(), dst.begin() + 7, dst.end());
  EXPECT_EQ(LoadAndCheck(*reader, b, keys, dst), 20u);
  EXPECT_TRUE(b.CanariesIntact());
  EXPECT_EQ(pool_->Stats().pinned_slots, 0u);
}

// A block stored from a cross-layer engine reloads into a per-layer engine (same slot image).
TEST_F(TierClientTest, LayoutsWithEqualPiecesShareBlocks) {
  MakePool(16, BlockBytes(FakeLayoutKind::kPerLayerFused));
  FakeEngineKv cross(FakeLayoutKind::kCrossLayer, kLayers, 8, kTensorBytes, 32);
  FakeEngineKv fused(FakeLayoutKind::kPerLayerFused, kLayers, 8, kTensorBytes, 0);
  auto a = OpenClient(cross);
  auto b = OpenClient(fused);
  const std::vector<PoolKey> keys = Keys(100, 6);
  StoreAll(*a, cross, keys, Iota(1, 6));
  EXPECT_EQ(LoadAndCheck(*b, fused, keys, Iota(2, 6)), 6u);
}

INSTANTIATE_TEST_SUITE_P(Layouts, TierClientLayoutTest,
                         ::testing::Values(FakeLayoutKind::kPerLayerKV,
                                           FakeLayoutKind::kPerLayerFused,
                                           FakeLayoutKind::kCrossLayer));

TEST_F(TierClientTest, LookupReturnsLongestStoredPrefix) {
  MakePool(32, BlockBytes(FakeLayoutKind::kCrossLayer));
  FakeEngineKv mem(FakeLayoutKind::kCrossLayer, kLayers, 16, kTensorBytes);
  auto client = OpenClient(mem);
  const std::vector<PoolKey> chain = Keys(0, 8);
  StoreAll(*client, mem, std::vector<PoolKey>(chain.begin(), chain.begin() + 5), Iota(0, 5));
  EXPECT_EQ(client->Lookup(chain), 5u);
  ASSERT_TRUE(client->Remove(chain[2]).ok());
  EXPECT_EQ(client->Lookup(chain), 2u);
  EXPECT_EQ(client->Lookup(Keys(50, 3)), 0u);
  EXPECT_EQ(client->Lookup({}), 0u);
  // prepare_load refuses a prefix that is no longer whole, pins nothing.
  StatusOr<LoadHandle> too_long = client->PrepareLoad(chain, 3);
  EXPECT_EQ(too_long.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(pool_->Stats().pinned_slots, 0u);
  StatusOr<LoadHandle> ok = client->PrepareLoad(chain, 2);
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->size(), 2u);
  EXPECT_EQ(pool_->Stats().pinned_slots, 2u);
  EXPECT_TRUE(client->CompleteLoad(*ok).ok());  // no Load issued: just unpins
  EXPECT_EQ(pool_->Stats().pinned_slots, 0u);
  EXPECT_EQ(client->PrepareLoad(chain, 9).status().code(), StatusCode::kInvalidArgument);
  StatusOr<LoadHandle> empty = client->PrepareLoad(chain, 0);
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty->size(), 0u);
}

TEST_F(TierClientTest, PinnedBlocksSurviveEvictionStormFromAnotherClient) {
  MakePool(16, BlockBytes(FakeLayoutKind::kPerLayerKV));
  FakeEngineKv a(FakeLayoutKind::kPerLayerKV, kLayers, 16, kTensorBytes);
  FakeEngineKv b(FakeLayoutKind::kPerLayerKV, kLayers, 16, kTensorBytes);
  FakeEngineKv out(FakeLayoutKind::kPerLayerKV, kLayers, 16, kTensorBytes);
  auto holder = OpenClient(a);
  auto stormer = OpenClient(b);
  const std::vector<PoolKey> pinned_keys = Keys(0, 8);
  StoreAll(*holder, a, pinned_keys, Iota(0, 8));
  StatusOr<LoadHandle> pins = holder->PrepareLoad(pinned_keys, 8);
  ASSERT_TRUE(pins.ok());

  // 200 new blocks through the 8 unpinned slots.
  for (uint64_t round = 0; round < 50; ++round) {
    StoreAll(*stormer, b, Keys(1000 + round * 4, 4), Iota(0, 4));
  }
  TierStats storm = stormer->Stats();
  EXPECT_GE(storm.evictions, 190u);
  EXPECT_EQ(storm.stores_refused, 0u);
  std::vector<TierEvent> events;
  stormer->DrainEvents(&events);
  for (const TierEvent& e : events) {
    for (const PoolKey& k : pinned_keys)
      EXPECT_FALSE(e.kind == TierEventKind::kEvicted && e.key == k);
  }
  EXPECT_EQ(holder->Lookup(pinned_keys), 8u);
  // The pinned blocks still hold their bytes (evicted slots would read 0xDB poison).
  StatusOr<CopyCompletion> c = holder->Load(*pins, Iota(8, 8));
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE(holder->CompleteLoad(*pins).ok());
  for (size_t i = 0; i < 8; ++i) {
    EXPECT_EQ(a.ReadBlock(8 + i), ImageForKey(pinned_keys[i], a.block_bytes())) << i;
  }
  // Once unpinned they are evictable again.
  for (uint64_t round = 0; round < 8; ++round) {
    StoreAll(*stormer, b, Keys(5000 + round * 4, 4), Iota(0, 4));
  }
  EXPECT_LT(holder->Lookup(pinned_keys), 8u);
}

TEST_F(TierClientTest, StoreIsRefusedWhenEverythingIsPinned) {
  MakePool(8, BlockBytes(FakeLayoutKind::kCrossLayer));
  FakeEngineKv mem(FakeLayoutKind::kCrossLayer, kLayers, 16, kTensorBytes);
  auto client = OpenClient(mem);
  auto other = OpenClient(mem);
  const std::vector<PoolKey> stored = Keys(0, 8);
  StoreAll(*client, mem, stored, Iota(0, 8));
  StatusOr<LoadHandle> pins = client->PrepareLoad(stored, 8);
  ASSERT_TRUE(pins.ok());

  std::vector<PoolKey> wanted = Keys(100, 4);
  wanted.insert(wanted.begin(), stored[0]);  // already stored
  StatusOr<StoreHandle> refused = other->PrepareStore(wanted);
  ASSERT_TRUE(refused.ok()) << refused.status().ToString();
  EXPECT_EQ(refused->allocated(), 0u);
  EXPECT_EQ(refused->refused(), 4u);
  EXPECT_EQ(refused->already_stored(), 1u);
  EXPECT_EQ(refused->outcome(0), StoreOutcome::kAlreadyStored);
  EXPECT_EQ(refused->outcome(1), StoreOutcome::kRefused);
  EXPECT_EQ(other->Stats().stores_refused, 4u);
  EXPECT_TRUE(other->CompleteStore(*refused).ok());
  EXPECT_EQ(client->Lookup(stored), 8u);

  // With six of eight pinned, two of four get slots.
  *pins = LoadHandle();  // unpins
  StatusOr<LoadHandle> six = client->PrepareLoad(stored, 6);
  ASSERT_TRUE(six.ok());
  StatusOr<StoreHandle> partial = other->PrepareStore(Keys(200, 4));
  ASSERT_TRUE(partial.ok());
  EXPECT_EQ(partial->allocated(), 2u);
  EXPECT_EQ(partial->refused(), 2u);
  StatusOr<CopyCompletion> c = other->Store(*partial, Iota(0, 4));
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(other->CompleteStore(*partial).ok());
  EXPECT_EQ(client->Lookup(std::vector<PoolKey>(stored.begin(), stored.begin() + 6)), 6u);
}

// Proposes nothing: every eviction comes from the pool's own scan of the slot table.
class ProposesNothing final : public EvictionPolicy {
 public:
  void SelectVictims(const SlotTableView&, size_t, std::vector<EvictionCandidate>*) override {}
};

TEST_F(TierClientTest, EvictionsThePolicyDidNotProposeAreStillMadeAndReported) {
  MakePool(4, BlockBytes(FakeLayoutKind::kCrossLayer));
  FakeEngineKv mem(FakeLayoutKind::kCrossLayer, kLayers, 8, kTensorBytes);
  ProposesNothing policy;
  KvTierClientOptions options;
  options.pool.policy = &policy;
  auto client = OpenClient(mem, nullptr, options);
  StoreAll(*client, mem, Keys(0, 4), Iota(0, 4));
  StatusOr<LoadHandle> pins = client->PrepareLoad(Keys(0, 2), 2);
  ASSERT_TRUE(pins.ok());
  std::vector<TierEvent> events;
  client->DrainEvents(&events);
  events.clear();

  StoreAll(*client, mem, Keys(10, 2), Iota(4, 2));  // only keys 2 and 3 are evictable
  TierStats stats = client->Stats();
  EXPECT_EQ(stats.stores_refused, 0u);
  EXPECT_EQ(stats.evictions, 2u);
  client->DrainEvents(&events);
  std::vector<PoolKey> evicted;
  std::vector<PoolKey> stored;
  for (const TierEvent& e : events) {
    (e.kind == TierEventKind::kEvicted ? evicted : stored).push_back(e.key);
    EXPECT_NE(e.kind, TierEventKind::kRemoved);
  }
  auto by_value = [](const PoolKey& a, const PoolKey& b) {
    return a.hi != b.hi ? a.hi < b.hi : a.lo < b.lo;
  };
  std::sort(evicted.begin(), evicted.end(), by_value);
  std::vector<PoolKey> want = {KeyOf(2), KeyOf(3)};
  std::sort(want.begin(), want.end(), by_value);
  EXPECT_EQ(evicted, want);
  EXPECT_EQ(stored, Keys(10, 2));
  EXPECT_EQ(client->Lookup(Keys(0, 2)), 2u);
  EXPECT_EQ(LoadAndCheck(*client, mem, Keys(10, 2), Iota(6, 2)), 2u);

  // Now everything evictable is pinned: refused, nothing evicted.
  StatusOr<LoadHandle> more = client->PrepareLoad(Keys(10, 2), 2);
  ASSERT_TRUE(more.ok());
  StatusOr<StoreHandle> refused = client->PrepareStore(Keys(20, 1));
  ASSERT_TRUE(refused.ok()) << refused.status().ToString();
  EXPECT_EQ(refused->refused(), 1u);
  EXPECT_TRUE(client->CompleteStore(*refused).ok());
  EXPECT_EQ(client->Stats().evictions, 2u);
  EXPECT_TRUE(client->CompleteLoad(*more).ok());
  EXPECT_TRUE(client->CompleteLoad(*pins).ok());
}

TEST_F(TierClientTest, EventsAreQueuedOrDeliveredToTheCallback) {
  MakePool(4, BlockBytes(FakeLayoutKind::kCrossLayer));
  FakeEngineKv mem(FakeLayoutKind::kCrossLayer, kLayers, 8, kTensorBytes);
  auto client = OpenClient(mem);
  StoreAll(*client, mem, Keys(0, 4), Iota(0, 4));
  std::vector<TierEvent> events;
  client->DrainEvents(&events);
  ASSERT_EQ(events.size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(events[i].kind, TierEventKind::kStored);
    EXPECT_EQ(events[i].key, KeyOf(i));
  }
  events.clear();
  client->DrainEvents(&events);
  EXPECT_TRUE(events.empty());

  // Touch keys 0 and 1, so LRU evicts 2 and 3 for two new blocks.
  std::vector<PoolKey> recent = Keys(0, 2);
  EXPECT_EQ(client->Touch(recent), 2u);
  StoreAll(*client, mem, Keys(10, 2), Iota(4, 2));
  ASSERT_TRUE(client->Remove(KeyOf(0)).ok());
  client->DrainEvents(&events);
  std::vector<std::pair<TierEventKind, PoolKey>> got;
  for (const TierEvent& e : events) got.emplace_back(e.kind, e.key);
  std::vector<std::pair<TierEventKind, PoolKey>> want = {{TierEventKind::kEvicted, KeyOf(2)},
                                                         {TierEventKind::kEvicted, KeyOf(3)},
                                                         {TierEventKind::kStored, KeyOf(10)},
                                                         {TierEventKind::kStored, KeyOf(11)},
                                                         {TierEventKind::kRemoved, KeyOf(0)}};
  EXPECT_EQ(got, want);

  // Callback delivery.
  std::vector<TierEvent> seen;
  KvTierClientOptions options;
  options.on_event = [&seen](const TierEvent& e) { seen.push_back(e); };
  auto cb_client = OpenClient(mem, nullptr, options);
  ASSERT_TRUE(cb_client->Remove(KeyOf(10)).ok());
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].kind, TierEventKind::kRemoved);
  EXPECT_EQ(TierEventKindName(seen[0].kind), "removed");

  // A bounded queue drops the oldest.
  KvTierClientOptions small;
  small.max_queued_events = 1;
  auto small_client = OpenClient(mem, nullptr, small);
  ASSERT_TRUE(small_client->Remove(KeyOf(11)).ok());
  ASSERT_TRUE(small_client->Remove(KeyOf(1)).ok());
  events.clear();
  small_client->DrainEvents(&events);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].key, KeyOf(1));
  EXPECT_EQ(small_client->Stats().events_dropped, 1u);
}

TEST_F(TierClientTest, PoolEventsReportWhatOtherClientsDid) {
  MakePool(4, BlockBytes(FakeLayoutKind::kCrossLayer));
  FakeEngineKv mem(FakeLayoutKind::kCrossLayer, kLayers, 8, kTensorBytes);
  KvTierClientOptions watching;
  watching.pool_events = true;
  auto watcher = OpenClient(mem, nullptr, watching);
  auto other = OpenClient(mem);
  const uint32_t me = static_cast<uint32_t>(getpid());
  StoreAll(*other, mem, Keys(0, 4), Iota(0, 4));
  std::vector<PoolKey> recent = Keys(0, 2);
  EXPECT_EQ(other->Touch(recent), 2u);
  StoreAll(*other, mem, Keys(10, 2), Iota(4, 2));  // evicts KeyOf(2) and KeyOf(3)
  ASSERT_TRUE(other->Remove(KeyOf(0)).ok());
  ASSERT_TRUE(watcher->Remove(KeyOf(1)).ok());  // the watcher's own: reported once, at once
  std::vector<TierEvent> events;
  watcher->DrainEvents(&events);
  std::vector<std::pair<TierEventKind, PoolKey>> got;
  for (const TierEvent& e : events) {
    got.emplace_back(e.kind, e.key);
    EXPECT_EQ(e.origin_pid, me);
  }
  std::vector<std::pair<TierEventKind, PoolKey>> want = {
      {TierEventKind::kRemoved, KeyOf(1)},  // local, queued when it happened
      {TierEventKind::kStored, KeyOf(0)},   {TierEventKind::kStored, KeyOf(1)},
      {TierEventKind::kStored, KeyOf(2)},   {TierEventKind::kStored, KeyOf(3)},
      {TierEventKind::kEvicted, KeyOf(2)},  {TierEventKind::kEvicted, KeyOf(3)},
      {TierEventKind::kStored, KeyOf(10)},  {TierEventKind::kStored, KeyOf(11)},
      {TierEventKind::kRemoved, KeyOf(0)}};
  EXPECT_EQ(got, want);
  TierStats ws = watcher->Stats();
  EXPECT_EQ(ws.pool_events, 9u);
  EXPECT_EQ(ws.events_lost, 0u);
  // Without pool_events a client sees only its own.
  events.clear();
  other->DrainEvents(&events);
  EXPECT_EQ(events.size(), 9u);
  EXPECT_EQ(other->PollPoolEvents(), 0u);
  EXPECT_EQ(other->Stats().pool_events, 0u);

  // With a callback, polled events are delivered to it.
  std::vector<TierEvent> seen;
  KvTierClientOptions callback = watching;
  callback.on_event = [&seen](const TierEvent& e) { seen.push_back(e); };
  auto cb = OpenClient(mem, nullptr, callback);
  ASSERT_TRUE(other->Remove(KeyOf(10)).ok());
  EXPECT_TRUE(seen.empty());  // nothing until polled
  EXPECT_EQ(cb->PollPoolEvents(), 1u);
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].kind, TierEventKind::kRemoved);
  EXPECT_EQ(seen[0].key, KeyOf(10));
}

TEST_F(TierClientTest, PoolEventsOverrunIsCountedAsLost) {
  name_ = UniquePoolName("tier-overrun");
  SlotPoolOptions o;
  o.block_bytes = BlockBytes(FakeLayoutKind::kCrossLayer);
  o.capacity_slots = 32;
  o.event_capacity = 8;
  StatusOr<SlotPool> pool = SlotPool::Create(name_, o);
  ASSERT_TRUE(pool.ok());
  engine_ = std::move(CpuCopyEngine::Create({})).value();
  FakeEngineKv mem(FakeLayoutKind::kCrossLayer, kLayers, 32, kTensorBytes);
  KvTierClientOptions watching;
  watching.pool_events = true;
  auto watcher = OpenClient(mem, nullptr, watching);
  auto other = OpenClient(mem);
  StoreAll(*other, mem, Keys(0, 20), Iota(0, 20));
  std::vector<TierEvent> events;
  watcher->DrainEvents(&events);
  ASSERT_EQ(events.size(), 8u);
  EXPECT_EQ(events[0].key, KeyOf(12));
  EXPECT_EQ(watcher->Stats().events_lost, 12u);
}

TEST_F(TierClientTest, PoolCountersAreTheSumOfTheClients) {
  const uint64_t bb = BlockBytes(FakeLayoutKind::kPerLayerKV);
  MakePool(8, bb);
  FakeEngineKv mem(FakeLayoutKind::kPerLayerKV, kLayers, 16, kTensorBytes);
  auto a = OpenClient(mem);
  auto b = OpenClient(mem);
  StoreAll(*a, mem, Keys(0, 6), Iota(0, 6));
  StoreAll(*b, mem, Keys(6, 4), Iota(6, 4));  // two evictions
  EXPECT_EQ(a->Lookup(Keys(0, 10)), 0u);       // the first two were evicted
  EXPECT_EQ(b->Lookup(Keys(4, 6)), 6u);
  EXPECT_EQ(LoadAndCheck(*a, mem, Keys(4, 3), Iota(10, 3)), 3u);
  EXPECT_EQ(LoadAndCheck(*b, mem, Keys(6, 4), Iota(10, 4)), 4u);
  ASSERT_TRUE(b->Remove(KeyOf(9)).ok());
  const TierStats sa = a->Stats(), sb = b->Stats();
  const PoolStats p = pool_->Stats();
  EXPECT_EQ(p.lookups, sa.lookups + sb.lookups);
  EXPECT_EQ(p.hits, sa.hit_blocks + sb.hit_blocks);
  EXPECT_EQ(p.misses, sa.miss_blocks + sb.miss_blocks);
  EXPECT_EQ(p.stores_committed, sa.stores_committed + sb.stores_committed);
  EXPECT_EQ(p.evictions, sa.evictions + sb.evictions);
  EXPECT_EQ(p.evictions, 2u);
  EXPECT_EQ(p.removals, 1u);
  EXPECT_EQ(p.bytes_in, sa.store.bytes + sb.store.bytes);
  EXPECT_EQ(p.bytes_in, 10 * bb);
  EXPECT_EQ(p.bytes_out, sa.load.bytes + sb.load.bytes);
  EXPECT_EQ(p.loads_completed, 7u);
  EXPECT_EQ(p.copy_batches_in, 2u);
  EXPECT_EQ(p.copy_batches_out, 2u);
  EXPECT_NEAR(static_cast<double>(p.copy_busy_ns_in) * 1e-9,
              sa.store.busy_seconds + sb.store.busy_seconds, 1e-9);
  EXPECT_NEAR(static_cast<double>(p.copy_busy_ns_out) * 1e-9,
              sa.load.busy_seconds + sb.load.busy_seconds, 1e-9);
  EXPECT_EQ(sa.pool.hits, p.hits);  // every client's Stats() shows the pool-wide numbers
}

TEST_F(TierClientTest, StatsCountCallsBlocksAndBytes) {
  const uint64_t bb = BlockBytes(FakeLayoutKind::kPerLayerKV);
  MakePool(16, bb);
  FakeEngineKv mem(FakeLayoutKind::kPerLayerKV, kLayers, 16, kTensorBytes);
  auto client = OpenClient(mem);
  StoreAll(*client, mem, Keys(0, 6), Iota(0, 6));
  std::vector<PoolKey> probe = Keys(0, 10);
  EXPECT_EQ(client->Lookup(probe), 6u);
  EXPECT_EQ(LoadAndCheck(*client, mem, Keys(0, 4), Iota(10, 4)), 4u);
  StatusOr<StoreHandle> again = client->PrepareStore(Keys(4, 4));  // 2 stored, 2 new
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->already_stored(), 2u);
  EXPECT_EQ(again->allocated(), 2u);
  *again = StoreHandle();  // dropped: aborted

  TierStats s = client->Stats();
  EXPECT_EQ(s.lookups, 1u);
  EXPECT_EQ(s.hit_blocks, 6u);
  EXPECT_EQ(s.miss_blocks, 4u);
  EXPECT_EQ(s.loads_prepared, 1u);
  EXPECT_EQ(s.stores_allocated, 8u);
  EXPECT_EQ(s.stores_already, 2u);
  EXPECT_EQ(s.stores_committed, 6u);
  EXPECT_EQ(s.stores_aborted, 2u);
  EXPECT_EQ(s.store.blocks, 6u);
  EXPECT_EQ(s.store.bytes, 6 * bb);
  EXPECT_EQ(s.store.batches, 1u);
  EXPECT_EQ(s.load.blocks, 4u);
  EXPECT_EQ(s.load.bytes, 4 * bb);
  EXPECT_EQ(s.load.failed_batches, 0u);
  for (const TierDirectionStats& d : {s.store, s.load}) {
    EXPECT_GE(d.busy_seconds, 0.0);
    if (d.busy_seconds > 0) {
      EXPECT_NEAR(d.gb_per_s, static_cast<double>(d.bytes) / (d.busy_seconds * 1e9),
                  1e-6 * d.gb_per_s);
    }
  }
  EXPECT_EQ(s.pool.ready_slots, 6u);
  EXPECT_EQ(s.pool.writing_slots, 0u);
  EXPECT_DOUBLE_EQ(s.occupancy, 6.0 / 16.0);
}

TEST_F(TierClientTest, DroppedHandlesAbortAndUnpin) {
  MakePool(8, BlockBytes(FakeLayoutKind::kCrossLayer));
  FakeEngineKv mem(FakeLayoutKind::kCrossLayer, kLayers, 8, kTensorBytes);
  auto client = OpenClient(mem);
  {
    StatusOr<StoreHandle> h = client->PrepareStore(Keys(0, 3));
    ASSERT_TRUE(h.ok());
    ASSERT_TRUE(client->Store(*h, Iota(0, 3)).ok());
    EXPECT_EQ(pool_->Stats().writing_slots, 3u);
  }  // issued but never completed: waits for the copy, then aborts
  EXPECT_EQ(pool_->Stats().writing_slots, 0u);
  EXPECT_EQ(client->Lookup(Keys(0, 3)), 0u);
  EXPECT_EQ(client->Stats().stores_aborted, 3u);

  StoreAll(*client, mem, Keys(0, 3), Iota(0, 3));
  {
    StatusOr<LoadHandle> h = client->PrepareLoad(Keys(0, 3), 3);
    ASSERT_TRUE(h.ok());
    ASSERT_TRUE(client->Load(*h, Iota(4, 3)).ok());
    LoadHandle moved = std::move(*h);
    EXPECT_FALSE(h->valid());
    EXPECT_EQ(pool_->Stats().pinned_slots, 3u);
  }
  EXPECT_EQ(pool_->Stats().pinned_slots, 0u);
  // A store cancelled before Store: CompleteStore aborts and says OK.
  StatusOr<StoreHandle> cancel = client->PrepareStore(Keys(20, 2));
  ASSERT_TRUE(cancel.ok());
  EXPECT_TRUE(client->CompleteStore(*cancel).ok());
  EXPECT_EQ(client->Lookup(Keys(20, 2)), 0u);
  EXPECT_EQ(client->CompleteStore(*cancel).code(), StatusCode::kInvalidArgument);  // spent
}

TEST_F(TierClientTest, FailedCopiesPublishNothing) {
  MakePool(8, BlockBytes(FakeLayoutKind::kCrossLayer));
  FakeEngineKv mem(FakeLayoutKind::kCrossLayer, kLayers, 8, kTensorBytes);
  testing::FailingCopyEngine failing;
  auto good = OpenClient(mem);
  auto bad = OpenClient(mem, &failing);
  StatusOr<StoreHandle> h = bad->PrepareStore(Keys(0, 3));
  ASSERT_TRUE(h.ok());
  ASSERT_TRUE(bad->Store(*h, Iota(0, 3)).ok());
  EXPECT_EQ(bad->CompleteStore(*h).code(), StatusCode::kDataLoss);
  EXPECT_EQ(bad->Lookup(Keys(0, 3)), 0u);
  PoolStats p = pool_->Stats();
  EXPECT_EQ(p.writing_slots, 0u);
  EXPECT_EQ(p.ready_slots, 0u);
  EXPECT_EQ(bad->Stats().store.failed_batches, 1u);
  EXPECT_EQ(bad->Stats().stores_committed, 0u);

  StoreAll(*good, mem, Keys(0, 3), Iota(0, 3));
  StatusOr<LoadHandle> l = bad->PrepareLoad(Keys(0, 3), 3);
  ASSERT_TRUE(l.ok());
  ASSERT_TRUE(bad->Load(*l, Iota(4, 3)).ok());
  EXPECT_EQ(bad->CompleteLoad(*l).code(), StatusCode::kDataLoss);
  EXPECT_EQ(pool_->Stats().pinned_slots, 0u);
  EXPECT_EQ(bad->Stats().load.failed_batches, 1u);
}

// ORDERING.md S2 and L4 with a copy that is still running: the block stays unpublished, the
// source stays pinned, until the copy completed.
TEST_F(TierClientTest, CompletionWaitsForTheCopy) {
  MakePool(8, BlockBytes(FakeLayoutKind::kCrossLayer));
  FakeEngineKv mem(FakeLayoutKind::kCrossLayer, kLayers, 8, kTensorBytes);
  testing::GatedCopyEngine gated;
  auto client = OpenClient(mem, &gated);
  for (uint64_t i = 0; i < 2; ++i) mem.WriteBlock(i, ImageForKey(KeyOf(i), mem.block_bytes()));
  StatusOr<StoreHandle> h = client->PrepareStore(Keys(0, 2));
  ASSERT_TRUE(h.ok());
  StatusOr<CopyCompletion> c = client->Store(*h, Iota(0, 2));
  ASSERT_TRUE(c.ok());
  EXPECT_FALSE(c->Done());
  std::thread completer([&] { EXPECT_TRUE(client->CompleteStore(*h).ok()); });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(client->Lookup(Keys(0, 2)), 0u);  // half-written: not visible
  EXPECT_EQ(pool_->Stats().writing_slots, 2u);
  gated.Release();
  completer.join();
  EXPECT_EQ(client->Lookup(Keys(0, 2)), 2u);

  StatusOr<LoadHandle> l = client->PrepareLoad(Keys(0, 2), 2);
  ASSERT_TRUE(l.ok());
  ASSERT_TRUE(client->Load(*l, Iota(4, 2)).ok());
  EXPECT_FALSE(l->completion().Done());
  std::thread dropper([&] { LoadHandle dropped = std::move(*l); });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(pool_->Stats().pinned_slots, 2u);  // the copy still reads the slots
  gated.Release();
  dropper.join();
  EXPECT_EQ(pool_->Stats().pinned_slots, 0u);
  EXPECT_EQ(mem.ReadBlock(4), ImageForKey(KeyOf(0), mem.block_bytes()));
}

TEST_F(TierClientTest, InFlightStoresAreReportedNotDuplicated) {
  MakePool(8, BlockBytes(FakeLayoutKind::kCrossLayer));
  FakeEngineKv mem(FakeLayoutKind::kCrossLayer, kLayers, 8, kTensorBytes);
  auto a = OpenClient(mem);
  auto b = OpenClient(mem);
  StatusOr<StoreHandle> first = a->PrepareStore(Keys(0, 3));
  ASSERT_TRUE(first.ok());
  StatusOr<StoreHandle> second = b->PrepareStore(Keys(0, 3));
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->in_flight(), 3u);
  EXPECT_EQ(second->allocated(), 0u);
  ASSERT_TRUE(b->Store(*second, Iota(0, 3)).ok());  // nothing to copy
  EXPECT_TRUE(second->completion().Done());
  EXPECT_TRUE(b->CompleteStore(*second).ok());
  ASSERT_TRUE(a->Store(*first, Iota(0, 3)).ok());
  EXPECT_TRUE(a->CompleteStore(*first).ok());
  EXPECT_EQ(b->Lookup(Keys(0, 3)), 3u);
}

TEST_F(TierClientTest, RejectsBadArguments) {
  MakePool(8, BlockBytes(FakeLayoutKind::kCrossLayer));
  FakeEngineKv mem(FakeLayoutKind::kCrossLayer, kLayers, 8, kTensorBytes);
  FakeEngineKv wrong(FakeLayoutKind::kPerLayerKV, kLayers, 8, kTensorBytes);
  EXPECT_EQ(KvTierClient::Open(name_, wrong.Layout(), engine_.get()).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(KvTierClient::Open(name_, mem.Layout(), nullptr).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(KvTierClient::Open("dkv-no-such-pool", mem.Layout(), engine_.get()).status().code(),
            StatusCode::kNotFound);
  auto client = OpenClient(mem);
  auto other = OpenClient(mem);

  std::vector<PoolKey> dup = {KeyOf(1), KeyOf(2), KeyOf(1)};
  EXPECT_EQ(client->PrepareStore(dup).status().code(), StatusCode::kInvalidArgument);
  std::vector<uint64_t> fps = {1};
  EXPECT_EQ(client->PrepareStore(Keys(0, 2), fps).status().code(), StatusCode::kInvalidArgument);

  StatusOr<StoreHandle> h = client->PrepareStore(Keys(0, 2));
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(client->Store(*h, Iota(0, 1)).status().code(), StatusCode::kInvalidArgument);
  std::vector<uint64_t> out_of_range = {0, 8};
  EXPECT_EQ(client->Store(*h, out_of_range).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(other->Store(*h, Iota(0, 2)).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(other->CompleteStore(*h).code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(client->Store(*h, Iota(0, 2)).ok());
  EXPECT_EQ(client->Store(*h, Iota(0, 2)).status().code(), StatusCode::kFailedPrecondition);
  ASSERT_TRUE(client->CompleteStore(*h).ok());

  // A repeated engine block among the allocated keys of a store: refused, nothing started, the
  // handle still usable. Entries of keys without a slot are not read: any value will do.
  StatusOr<StoreHandle> rep = client->PrepareStore(Keys(1, 3));  // key 1 is stored already
  ASSERT_TRUE(rep.ok());
  ASSERT_EQ(rep->outcome(0), StoreOutcome::kAlreadyStored);
  ASSERT_EQ(rep->allocated(), 2u);
  for (uint64_t i = 2; i < 4; ++i) mem.WriteBlock(i + 3, ImageForKey(KeyOf(i), mem.block_bytes()));
  const std::vector<uint64_t> repeated = {0, 5, 5};
  StatusOr<CopyCompletion> twice = client->Store(*rep, repeated);
  EXPECT_EQ(twice.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(twice.status().message().find("engine block 5"), std::string::npos)
      << twice.status().ToString();
  EXPECT_FALSE(rep->issued());
  EXPECT_FALSE(rep->completion().valid());
  EXPECT_EQ(rep->allocated(), 2u);
  const std::vector<uint64_t> unread_entry_repeats = {5, 5, 6};
  ASSERT_TRUE(client->Store(*rep, unread_entry_repeats).ok());
  ASSERT_TRUE(client->CompleteStore(*rep).ok());
  StatusOr<StoreHandle> rep2 = client->PrepareStore(Keys(2, 3));  // key 4 is the only new one
  ASSERT_TRUE(rep2.ok());
  ASSERT_EQ(rep2->allocated(), 1u);
  mem.WriteBlock(7, ImageForKey(KeyOf(4), mem.block_bytes()));
  const std::vector<uint64_t> unread_out_of_range = {7, UINT64_MAX, 7};
  ASSERT_TRUE(client->Store(*rep2, unread_out_of_range).ok());
  ASSERT_TRUE(client->CompleteStore(*rep2).ok());
  FakeEngineKv check(FakeLayoutKind::kCrossLayer, kLayers, 8, kTensorBytes);
  auto reader = OpenClient(check);
  EXPECT_EQ(LoadAndCheck(*reader, check, Keys(2, 3), Iota(0, 3)), 3u);

  StatusOr<LoadHandle> l = client->PrepareLoad(Keys(0, 2), 2);
  ASSERT_TRUE(l.ok());
  std::vector<uint64_t> same = {3, 3};
  EXPECT_EQ(client->Load(*l, same).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(client->Load(*l, Iota(0, 3)).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(other->CompleteLoad(*l).code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(client->Load(*l, Iota(0, 2)).ok());
  EXPECT_EQ(client->Load(*l, Iota(0, 2)).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(client->CompleteLoad(*l).ok());
  EXPECT_EQ(client->Remove(KeyOf(77)).code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace deltakv::kvtier
