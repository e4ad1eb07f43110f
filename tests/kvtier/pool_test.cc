// Unit tests of the slot pool: index insert/lookup/remove, store state machine, LRU eviction
// order, pins, refusal, generations, poison fill, header validation, host memory sizing.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "kvtier/host_memory.h"
#include "kvtier/slot_pool.h"
#include "pool_test_util.h"
#include "test_util.h"

namespace deltakv::kvtier {
namespace {

using testing::FillForKey;
using testing::KeyOf;
using testing::ManualClock;
using testing::MatchesKey;
using testing::UniquePoolName;

class PoolTest : public ::testing::Test {
 protected:
  SlotPool MakePool(uint64_t slots, uint64_t block = 4096, bool poison = false) {
    SlotPoolOptions options;
    options.block_bytes = block;
    options.capacity_slots = slots;
    options.poison_freed = poison;
    SlotPoolClientOptions client;
    client.clock = &clock_;
    StatusOr<SlotPool> pool = SlotPool::Create(UniquePoolName("unit"), options, client);
    EXPECT_TRUE(pool.ok()) << pool.status().ToString();
    return std::move(pool).value();
  }

  // Prepares, fills and commits `keys`; expects every one allocated.
  void StoreAll(SlotPool& pool, const std::vector<PoolKey>& keys) {
    StatusOr<PrepareStoreResult> r = pool.PrepareStore(keys);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    for (size_t i = 0; i < keys.size(); ++i) {
      ASSERT_EQ(r->slots[i].outcome, StoreOutcome::kAllocated) << i;
      FillForKey(keys[i], r->slots[i].data, pool.block_bytes());
      ASSERT_TRUE(pool.CommitStore(r->slots[i].ref).ok());
    }
  }

  ManualClock clock_;
};

TEST_F(PoolTest, StoreLookupRemove) {
  SlotPool pool = MakePool(16);
  std::vector<PoolKey> keys = {KeyOf(1), KeyOf(2), KeyOf(3)};
  EXPECT_EQ(pool.Lookup(keys), 0u);
  StoreAll(pool, keys);
  EXPECT_EQ(pool.Lookup(keys), 3u);
  std::vector<PoolKey> gap = {KeyOf(1), KeyOf(9), KeyOf(3)};
  EXPECT_EQ(pool.Lookup(gap), 1u);
  ASSERT_TRUE(pool.Remove(KeyOf(2)).ok());
  EXPECT_EQ(pool.Lookup(keys), 1u);
  EXPECT_EQ(pool.Remove(KeyOf(2)).code(), StatusCode::kNotFound);
  PinnedBlocks pinned = pool.PinPrefix(keys);
  ASSERT_EQ(pinned.size(), 1u);
  EXPECT_TRUE(MatchesKey(KeyOf(1), pinned.data(0), pool.block_bytes()));
  PoolStats stats = pool.Stats();
  EXPECT_EQ(stats.ready_slots, 2u);
  EXPECT_EQ(stats.index_entries, 2u);
  EXPECT_EQ(stats.stores_committed, 3u);
  EXPECT_EQ(stats.removals, 1u);
  EXPECT_EQ(stats.pinned_slots, 1u);
  EXPECT_EQ(stats.ready_bytes, 2u * 4096);
}

TEST_F(PoolTest, WritingIsInvisibleUntilCommit) {
  SlotPool pool = MakePool(4);
  std::vector<PoolKey> k = {KeyOf(7)};
  StatusOr<PrepareStoreResult> first = pool.PrepareStore(k);
  ASSERT_TRUE(first.ok());
  ASSERT_EQ(first->slots[0].outcome, StoreOutcome::kAllocated);
  SlotRef ref = first->slots[0].ref;
  EXPECT_EQ(pool.InspectSlot(ref.slot).state, SlotState::kWriting);
  EXPECT_EQ(pool.Lookup(k), 0u);
  EXPECT_EQ(pool.Pin(ref).code(), StatusCode::kNotFound);
  StatusOr<PrepareStoreResult> second = pool.PrepareStore(k);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->slots[0].outcome, StoreOutcome::kInFlight);
  ASSERT_TRUE(pool.CommitStore(ref).ok());
  EXPECT_EQ(pool.CommitStore(ref).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(pool.Lookup(k), 1u);
  StatusOr<PrepareStoreResult> third = pool.PrepareStore(k);
  ASSERT_TRUE(third.ok());
  EXPECT_EQ(third->slots[0].outcome, StoreOutcome::kAlreadyStored);
}

TEST_F(PoolTest, AbortFreesSlotAndKey) {
  SlotPool pool = MakePool(2);
  std::vector<PoolKey> k = {KeyOf(1)};
  StatusOr<PrepareStoreResult> r = pool.PrepareStore(k);
  ASSERT_TRUE(r.ok());
  SlotRef ref = r->slots[0].ref;
  ASSERT_TRUE(pool.AbortStore(ref).ok());
  EXPECT_EQ(pool.InspectSlot(ref.slot).state, SlotState::kFree);
  EXPECT_EQ(pool.AbortStore(ref).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(pool.index().CountEntries(), 0u);
  StoreAll(pool, k);  // the key can be stored again
  EXPECT_EQ(pool.Lookup(k), 1u);
}

TEST_F(PoolTest, LruEvictsOldestFirst) {
  SlotPool pool = MakePool(4);
  StoreAll(pool, {KeyOf(0), KeyOf(1), KeyOf(2), KeyOf(3)});
  std::vector<PoolKey> touch = {KeyOf(0)};
  EXPECT_EQ(pool.Touch(touch), 1u);  // order by recency now: 1, 2, 3, 0
  StatusOr<PrepareStoreResult> r = pool.PrepareStore(std::vector<PoolKey>{KeyOf(10)});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->evicted, 1u);
  ASSERT_TRUE(pool.CommitStore(r->slots[0].ref).ok());
  auto present = [&](uint64_t i) { return pool.Lookup(std::vector<PoolKey>{KeyOf(i)}) == 1; };
  EXPECT_FALSE(present(1));
  EXPECT_TRUE(present(0) && present(2) && present(3) && present(10));
  StoreAll(pool, {KeyOf(11), KeyOf(12)});
  EXPECT_FALSE(present(2));
  EXPECT_FALSE(present(3));
  EXPECT_TRUE(present(0) && present(10) && present(11) && present(12));
  EXPECT_EQ(pool.Stats().evictions, 3u);
}

TEST_F(PoolTest, PinsPreventEviction) {
  SlotPool pool = MakePool(4);
  std::vector<PoolKey> old = {KeyOf(0), KeyOf(1), KeyOf(2), KeyOf(3)};
  StoreAll(pool, old);
  PinnedBlocks pinned = pool.PinPrefix(std::vector<PoolKey>{KeyOf(0), KeyOf(1), KeyOf(2)});
  ASSERT_EQ(pinned.size(), 3u);
  // Two new keys, one evictable block: the first is stored, the second refused.
  StatusOr<PrepareStoreResult> r = pool.PrepareStore(std::vector<PoolKey>{KeyOf(20), KeyOf(21)});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->allocated, 1u);
  EXPECT_EQ(r->refused, 1u);
  EXPECT_EQ(r->slots[1].outcome, StoreOutcome::kRefused);
  ASSERT_TRUE(pool.CommitStore(r->slots[0].ref).ok());
  EXPECT_EQ(pool.Lookup(std::vector<PoolKey>{KeyOf(0), KeyOf(1), KeyOf(2)}), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_TRUE(MatchesKey(old[i], pinned.data(i), 4096));
  EXPECT_EQ(pool.Remove(KeyOf(0)).code(), StatusCode::kFailedPrecondition);
  pinned.Release();
  EXPECT_TRUE(pool.Remove(KeyOf(0)).ok());
}

TEST_F(PoolTest, RefusesWhenEverythingPinnedOrWriting) {
  SlotPool pool = MakePool(3);
  StoreAll(pool, {KeyOf(0), KeyOf(1)});
  PinnedBlocks pinned = pool.PinPrefix(std::vector<PoolKey>{KeyOf(0), KeyOf(1)});
  StatusOr<PrepareStoreResult> writing = pool.PrepareStore(std::vector<PoolKey>{KeyOf(2)});
  ASSERT_TRUE(writing.ok());
  PoolStats before = pool.Stats();
  StatusOr<PrepareStoreResult> r = pool.PrepareStore(std::vector<PoolKey>{KeyOf(3), KeyOf(4)});
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);
  PoolStats after = pool.Stats();
  EXPECT_EQ(after.ready_slots, before.ready_slots);
  EXPECT_EQ(after.writing_slots, 1u);
  EXPECT_EQ(after.index_entries, 3u);
  EXPECT_EQ(after.evictions, 0u);
  EXPECT_EQ(pool.Lookup(std::vector<PoolKey>{KeyOf(0), KeyOf(1)}), 2u);
}

TEST_F(PoolTest, BatchNeverEvictsItsOwnPrefix) {
  SlotPool pool = MakePool(3);
  StoreAll(pool, {KeyOf(0), KeyOf(1), KeyOf(2)});
  // KeyOf(0) and KeyOf(1) are the oldest, but they are this batch's prefix.
  StatusOr<PrepareStoreResult> r =
      pool.PrepareStore(std::vector<PoolKey>{KeyOf(0), KeyOf(1), KeyOf(5)});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->slots[0].outcome, StoreOutcome::kAlreadyStored);
  EXPECT_EQ(r->slots[1].outcome, StoreOutcome::kAlreadyStored);
  EXPECT_EQ(r->slots[2].outcome, StoreOutcome::kAllocated);
  ASSERT_TRUE(pool.CommitStore(r->slots[2].ref).ok());
  EXPECT_EQ(pool.Lookup(std::vector<PoolKey>{KeyOf(0), KeyOf(1), KeyOf(5)}), 3u);
  EXPECT_EQ(pool.PinsHeldByThisProcess(r->slots[2].ref.slot), 0u);
}

TEST_F(PoolTest, GenerationChecks) {
  SlotPool pool = MakePool(1);
  StoreAll(pool, {KeyOf(0)});
  PinnedBlocks p = pool.PinPrefix(std::vector<PoolKey>{KeyOf(0)});
  ASSERT_EQ(p.size(), 1u);
  SlotRef old = p.refs()[0];
  p.Release();
  StoreAll(pool, {KeyOf(1)});  // evicts KeyOf(0), reuses the slot at the next generation
  SlotWord w = pool.InspectSlot(old.slot);
  EXPECT_EQ(w.state, SlotState::kReady);
  EXPECT_EQ(w.generation, NextGeneration(old.generation));
  EXPECT_EQ(pool.Pin(old).code(), StatusCode::kNotFound);
  EXPECT_EQ(pool.PinsHeldByThisProcess(old.slot), 0u);
  EXPECT_EQ(pool.CommitStore(old).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(pool.Unpin(old).code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(pool.Pin(SlotRef{old.slot, w.generation}).ok());
  EXPECT_TRUE(pool.Unpin(SlotRef{old.slot, w.generation}).ok());
}

TEST_F(PoolTest, PoisonFillsFreedSlots) {
  SlotPool pool = MakePool(2, 8192, /*poison=*/true);
  StoreAll(pool, {KeyOf(0), KeyOf(1)});
  PinnedBlocks p = pool.PinPrefix(std::vector<PoolKey>{KeyOf(0)});
  const uint32_t slot = p.refs()[0].slot;
  p.Release();
  ASSERT_TRUE(pool.Remove(KeyOf(0)).ok());
  const uint8_t* data = pool.SlotData(slot);
  for (size_t i = 0; i < 8192; ++i) ASSERT_EQ(data[i], kPoisonByte) << i;
  // An aborted store is poisoned too.
  StatusOr<PrepareStoreResult> r = pool.PrepareStore(std::vector<PoolKey>{KeyOf(5)});
  ASSERT_TRUE(r.ok());
  std::memset(r->slots[0].data, 0x11, 8192);
  ASSERT_TRUE(pool.AbortStore(r->slots[0].ref).ok());
  EXPECT_EQ(pool.SlotData(r->slots[0].ref.slot)[100], kPoisonByte);
}

TEST_F(PoolTest, ManyKeysUseOverflowBucketsAndEraseCleanly) {
  const uint64_t n = 4096;
  SlotPool pool = MakePool(n, 64);
  std::vector<PoolKey> keys;
  for (uint64_t i = 0; i < n; ++i) keys.push_back(KeyOf(i));
  StoreAll(pool, keys);
  EXPECT_EQ(pool.Lookup(keys), n);
  for (uint64_t i = 0; i < n; ++i) {
    PinnedBlocks p = pool.PinPrefix(std::span<const PoolKey>(&keys[i], 1));
    ASSERT_EQ(p.size(), 1u);
    ASSERT_TRUE(MatchesKey(keys[i], p.data(0), 64)) << i;
  }
  for (uint64_t i = 0; i < n; i += 2) ASSERT_TRUE(pool.Remove(keys[i]).ok());
  for (uint64_t i = 0; i < n; ++i) {
    EXPECT_EQ(pool.Lookup(std::span<const PoolKey>(&keys[i], 1)), i % 2) << i;
  }
  for (uint64_t i = 1; i < n; i += 2) ASSERT_TRUE(pool.Remove(keys[i]).ok());
  EXPECT_EQ(pool.index().CountEntries(), 0u);
}

TEST_F(PoolTest, OpenValidatesHeader) {
  SlotPoolOptions options;
  options.block_bytes = 4096;
  options.capacity_slots = 8;
  const std::string name = UniquePoolName("hdr");
  StatusOr<SlotPool> created = SlotPool::Create(name, options);
  ASSERT_TRUE(created.ok());
  StoreAll(*created, {KeyOf(3)});
  StatusOr<SlotPool> opened = SlotPool::Open(name);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  EXPECT_EQ(opened->Lookup(std::vector<PoolKey>{KeyOf(3)}), 1u);
  EXPECT_EQ(opened->block_bytes(), 4096u);
  auto* header = reinterpret_cast<PoolHeader*>(created->segment().data() + kPoolHeaderOffset);
  header->slot_count = 9;
  EXPECT_EQ(SlotPool::Open(name).status().code(), StatusCode::kDataLoss);
  header->slot_count = 8;
  header->layout_version = 99;
  EXPECT_EQ(SlotPool::Open(name).status().code(), StatusCode::kFailedPrecondition);
  header->layout_version = kPoolLayoutVersion;
  EXPECT_TRUE(SlotPool::Open(name).ok());
}

TEST_F(PoolTest, CreateRejectsBadSizes) {
  SlotPoolOptions options;
  options.block_bytes = 0;
  options.capacity_slots = 8;
  EXPECT_EQ(SlotPool::Create(UniquePoolName("bad"), options).status().code(),
            StatusCode::kInvalidArgument);
  options.block_bytes = 4096;
  options.capacity_slots = 0;
  EXPECT_EQ(SlotPool::Create(UniquePoolName("bad"), options).status().code(),
            StatusCode::kInvalidArgument);
}

TEST(HostMemoryTest, CgroupLimitAndFraction) {
  deltakv::testing::TempDir root;
  std::filesystem::create_directories(root / "proc");
  std::filesystem::create_directories(root / "sys/fs/cgroup");
  deltakv::testing::WriteAll(root / "proc/meminfo",
                             "MemTotal: 67108864 kB\nMemAvailable: 33554432 kB\n");
  StatusOr<HostMemoryInfo> info = ProbeHostMemory(root.path());
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->usable, 32ull << 30);  // no cgroup files: MemAvailable
  deltakv::testing::WriteAll(root / "sys/fs/cgroup/memory.max", "17179869184\n");
  deltakv::testing::WriteAll(root / "sys/fs/cgroup/memory.current", "1073741824\n");
  info = ProbeHostMemory(root.path());
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->cgroup_limit, 16ull << 30);
  EXPECT_EQ(info->usable, 15ull << 30);
  StatusOr<uint64_t> slots = SlotsForHostMemory(*info, 1 << 20, 0.5);
  ASSERT_TRUE(slots.ok());
  EXPECT_EQ(*slots, 7680u);
  deltakv::testing::WriteAll(root / "sys/fs/cgroup/memory.max", "max\n");
  info = ProbeHostMemory(root.path());
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->cgroup_limit, 0u);
  EXPECT_EQ(info->usable, 32ull << 30);
  EXPECT_EQ(SlotsForHostMemory(*info, 1 << 20, 1.5).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(SlotsForHostMemory(HostMemoryInfo{}, 1 << 20, 0.5).status().code(),
            StatusCode::kResourceExhausted);
  EXPECT_TRUE(ProbeHostMemory("/").ok());
}

}  // namespace
}  // namespace deltakv::kvtier
