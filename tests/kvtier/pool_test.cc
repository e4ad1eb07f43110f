// Unit tests of the slot pool: index insert/lookup/remove, store state machine, LRU eviction
// order, pins, refusal (and the scan that backs up the eviction policy), generations, poison
// fill, header validation, host memory sizing.
#include <gtest/gtest.h>

#include <atomic>
#include <barrier>
#include <chrono>
#include <cstring>
#include <mutex>
#include <random>
#include <thread>
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

// Proposes the candidates it was given, on every call, whatever the slots hold now; counts its
// calls.
class ScriptedPolicy final : public EvictionPolicy {
 public:
  void Propose(std::vector<EvictionCandidate> candidates) {
    std::lock_guard<std::mutex> lock(mu_);
    candidates_ = std::move(candidates);
  }
  void SelectVictims(const SlotTableView& /*view*/, size_t /*wanted*/,
                     std::vector<EvictionCandidate>* out) override {
    calls_.fetch_add(1);
    std::lock_guard<std::mutex> lock(mu_);
    out->insert(out->end(), candidates_.begin(), candidates_.end());
  }
  int calls() const { return calls_.load(); }

 private:
  std::mutex mu_;
  std::vector<EvictionCandidate> candidates_;  // GUARDED_BY(mu_)
  std::atomic<int> calls_{0};
};

class PoolTest : public ::testing::Test {
 protected:
  SlotPool MakePool(uint64_t slots, uint64_t block = 4096, bool poison = false,
                    SlotPoolClientOptions client = {}) {
    SlotPoolOptions options;
    options.block_bytes = block;
    options.capacity_slots = slots;
    options.poison_freed = poison;
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

// The policy proposes only a pinned block, a stale generation and a slot that does not exist,
// while two blocks are evictable: PrepareStore must still get a slot (by its scan of the slot
// table once the policy's rounds are spent), and evicts an unpinned block, never the pinned one.
TEST_F(PoolTest, StoreEvictsAnUnpinnedBlockWhenThePolicyProposesOnlyUnusableOnes) {
  ScriptedPolicy policy;
  SlotPoolClientOptions client;
  client.policy = &policy;
  SlotPool pool = MakePool(4, 4096, /*poison=*/true, client);
  StoreAll(pool, {KeyOf(0), KeyOf(1), KeyOf(2), KeyOf(3)});
  PinnedBlocks pinned = pool.PinPrefix(std::vector<PoolKey>{KeyOf(0), KeyOf(1)});
  ASSERT_EQ(pinned.size(), 2u);
  const SlotRef p0 = pinned.refs()[0];
  const SlotRef p1 = pinned.refs()[1];
  PinnedBlocks probe = pool.PinPrefix(std::vector<PoolKey>{KeyOf(2)});
  ASSERT_EQ(probe.size(), 1u);
  const SlotRef ready = probe.refs()[0];  // unpinned once probe is released
  probe.Release();
  policy.Propose({{p0.slot, p0.generation, 0},
                  {p1.slot, p1.generation, 0},
                  {ready.slot, ready.generation + 7, 0},  // a generation the slot no longer has
                  {1000, 0, 0}});                         // no such slot
  PoolEventCursor cursor = pool.OpenEventCursor();

  StatusOr<PrepareStoreResult> r = pool.PrepareStore(std::vector<PoolKey>{KeyOf(10)});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->slots[0].outcome, StoreOutcome::kAllocated);
  EXPECT_EQ(r->allocated, 1u);
  EXPECT_EQ(r->refused, 0u);
  EXPECT_EQ(r->evicted, 1u);
  EXPECT_EQ(policy.calls(), 4);  // SlotPoolClientOptions::evict_rounds, then the scan
  const SlotRef got = r->slots[0].ref;
  EXPECT_NE(got.slot, p0.slot);
  EXPECT_NE(got.slot, p1.slot);
  FillForKey(KeyOf(10), r->slots[0].data, 4096);
  ASSERT_TRUE(pool.CommitStore(got).ok());

  // The evicted block was key 2 or 3, and the event ring says which.
  std::vector<PoolEvent> events;
  pool.ReadEvents(&cursor, &events);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].kind, PoolEventKind::kEvicted);
  EXPECT_TRUE(events[0].key == KeyOf(2) || events[0].key == KeyOf(3));
  EXPECT_EQ(events[0].ref.slot, got.slot);
  EXPECT_EQ(events[1].kind, PoolEventKind::kStored);
  EXPECT_EQ(r->evicted_keys, std::vector<PoolKey>{events[0].key});
  const uint64_t kept = events[0].key == KeyOf(2) ? 3 : 2;
  auto present = [&](uint64_t i) { return pool.Lookup(std::vector<PoolKey>{KeyOf(i)}) == 1; };
  EXPECT_TRUE(present(0) && present(1) && present(10) && present(kept));
  EXPECT_FALSE(present(5 - kept));
  EXPECT_TRUE(MatchesKey(KeyOf(0), pinned.data(0), 4096));
  EXPECT_TRUE(MatchesKey(KeyOf(1), pinned.data(1), 4096));
  PoolStats stats = pool.Stats();
  EXPECT_EQ(stats.evictions, 1u);
  EXPECT_EQ(stats.stores_refused, 0u);
  EXPECT_EQ(stats.evicting_slots, 0u);
  EXPECT_EQ(stats.pinned_slots, 2u);

  // A batch of three while the policy still proposes nothing usable: the two unpinned blocks
  // (`kept` and key 10) go to the first two keys, the third is refused (only pinned blocks are
  // left), and the pinned blocks stay.
  StatusOr<PrepareStoreResult> three =
      pool.PrepareStore(std::vector<PoolKey>{KeyOf(20), KeyOf(21), KeyOf(22)});
  ASSERT_TRUE(three.ok()) << three.status().ToString();
  EXPECT_EQ(three->slots[0].outcome, StoreOutcome::kAllocated);
  EXPECT_EQ(three->slots[1].outcome, StoreOutcome::kAllocated);
  EXPECT_EQ(three->slots[2].outcome, StoreOutcome::kRefused);
  EXPECT_EQ(three->evicted, 2u);
  ASSERT_EQ(three->evicted_keys.size(), 2u);
  EXPECT_TRUE(three->evicted_keys[0] == KeyOf(kept) || three->evicted_keys[0] == KeyOf(10));
  EXPECT_TRUE(three->evicted_keys[1] == KeyOf(kept) || three->evicted_keys[1] == KeyOf(10));
  EXPECT_FALSE(three->evicted_keys[0] == three->evicted_keys[1]);
  for (size_t i = 0; i < 2; ++i) ASSERT_TRUE(pool.AbortStore(three->slots[i].ref).ok());
  EXPECT_TRUE(present(0) && present(1));
  EXPECT_FALSE(present(10) || present(kept));
  EXPECT_EQ(pool.Stats().evicting_slots, 0u);
}

// Every slot is pinned or being written: PrepareStore refuses, even with a policy that proposes
// every one of them, and leaves every slot, pin and index entry as it was.
TEST_F(PoolTest, StoreIsRefusedWhenEverySlotIsPinnedOrBeingWritten) {
  ScriptedPolicy policy;
  SlotPoolClientOptions client;
  client.policy = &policy;
  SlotPool pool = MakePool(4, 4096, /*poison=*/true, client);
  StoreAll(pool, {KeyOf(0), KeyOf(1), KeyOf(2)});
  PinnedBlocks pinned = pool.PinPrefix(std::vector<PoolKey>{KeyOf(0), KeyOf(1), KeyOf(2)});
  ASSERT_EQ(pinned.size(), 3u);
  StatusOr<PrepareStoreResult> writing = pool.PrepareStore(std::vector<PoolKey>{KeyOf(3)});
  ASSERT_TRUE(writing.ok());
  ASSERT_EQ(writing->slots[0].outcome, StoreOutcome::kAllocated);
  std::vector<EvictionCandidate> all;
  for (const SlotRef& ref : pinned.refs()) all.push_back({ref.slot, ref.generation, 0});
  all.push_back({writing->slots[0].ref.slot, writing->slots[0].ref.generation, 0});
  policy.Propose(all);
  std::vector<SlotWord> before;
  for (uint32_t s = 0; s < 4; ++s) before.push_back(pool.InspectSlot(s));

  StatusOr<PrepareStoreResult> r = pool.PrepareStore(std::vector<PoolKey>{KeyOf(8), KeyOf(9)});
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);
  for (uint32_t s = 0; s < 4; ++s) {
    EXPECT_EQ(pool.InspectSlot(s).Encode(), before[s].Encode()) << s;
  }
  PoolStats stats = pool.Stats();
  EXPECT_EQ(stats.ready_slots, 3u);
  EXPECT_EQ(stats.writing_slots, 1u);
  EXPECT_EQ(stats.pinned_slots, 3u);
  EXPECT_EQ(stats.index_entries, 4u);
  EXPECT_EQ(stats.evictions, 0u);
  EXPECT_EQ(stats.stores_refused, 2u);
  for (size_t i = 0; i < 3; ++i) EXPECT_TRUE(MatchesKey(KeyOf(i), pinned.data(i), 4096));

  // A batch's own stored prefix is pinned for the call, so it is not evicted for the batch even
  // when it is the only unpinned block.
  policy.Propose({});
  ASSERT_TRUE(pool.CommitStore(writing->slots[0].ref).ok());
  StatusOr<PrepareStoreResult> own = pool.PrepareStore(std::vector<PoolKey>{KeyOf(3), KeyOf(7)});
  EXPECT_EQ(own.status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(pool.Lookup(std::vector<PoolKey>{KeyOf(3)}), 1u);
  EXPECT_EQ(pool.Stats().evictions, 0u);
  EXPECT_EQ(pool.PinsHeldByThisProcess(writing->slots[0].ref.slot), 0u);

  // Once unpinned, the blocks are evictable again although the policy proposes nothing.
  pinned.Release();
  StatusOr<PrepareStoreResult> after = pool.PrepareStore(std::vector<PoolKey>{KeyOf(8), KeyOf(9)});
  ASSERT_TRUE(after.ok()) << after.status().ToString();
  EXPECT_EQ(after->allocated, 2u);
  EXPECT_EQ(after->evicted, 2u);
  for (const StoreSlot& s : after->slots) ASSERT_TRUE(pool.CommitStore(s.ref).ok());
}

// Threads store, reload and pin through a small pool with a sampled LRU policy whose windows
// (four slots) are often all pinned. Each thread keeps a lease of pins on up to kLease of its
// newest blocks (as an engine does for its running requests), renewed now and then (released,
// then taken again), and pins nothing else but the one slot it is storing into or checking. So
// a thread holds at most kLease + 1 slots unevictable at any moment, and at least
// kSlots - kThreads * (kLease + 1) slots are FREE or unpinned READY at every moment: no store
// may be refused. The policy's candidates are often pinned by the time they are tried, or
// taken by another thread.
void StoreLoadPinStress(uint32_t evict_rounds) {
  constexpr int kThreads = 4;
  constexpr size_t kLease = 5;
  constexpr uint64_t kSlots = 32;
  static_assert(kSlots >= kThreads * (kLease + 1) + 8);
  constexpr uint64_t kBlock = 256;
  constexpr int kMaxOpsPerThread = 100'000;
  LruEvictionPolicy policy(/*sample_window=*/1);
  SlotPoolOptions options;
  options.block_bytes = kBlock;
  options.capacity_slots = kSlots;
  options.poison_freed = true;
  SlotPoolClientOptions client;
  client.policy = &policy;
  client.evict_rounds = evict_rounds;
  StatusOr<SlotPool> created = SlotPool::Create(UniquePoolName("stress"), options, client);
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  SlotPool& pool = *created;
  std::atomic<uint64_t> refused{0}, allocated{0}, loaded{0}, bad_bytes{0}, errors{0};
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(1500);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(0x5EED + t);
      std::vector<PoolKey> recent;  // this thread's last stored keys, newest first
      std::vector<SlotRef> recent_refs;
      PinnedBlocks lease;
      uint64_t next_key = static_cast<uint64_t>(t + 1) << 40;
      for (int op = 0; op < kMaxOpsPerThread; ++op) {
        if (op % 64 == 0 && std::chrono::steady_clock::now() > deadline) break;
        const uint64_t pick = rng() % 8;
        if (pick < 4 || recent.size() < kLease) {  // store one new block
          const PoolKey key = KeyOf(next_key++);
          StatusOr<PrepareStoreResult> r = pool.PrepareStore(std::span<const PoolKey>(&key, 1));
          if (!r.ok()) {
            (r.status().code() == StatusCode::kResourceExhausted ? refused : errors)++;
            continue;
          }
          const StoreSlot& s = r->slots[0];
          if (s.outcome != StoreOutcome::kAllocated) {
            ++errors;
            continue;
          }
          ++allocated;
          FillForKey(key, s.data, kBlock);
          if (rng() % 16 == 0) {
            if (!pool.AbortStore(s.ref).ok()) ++errors;
            continue;
          }
          if (!pool.CommitStore(s.ref).ok()) ++errors;
          recent.insert(recent.begin(), key);
          recent_refs.insert(recent_refs.begin(), s.ref);
          if (recent.size() > kLease + 2) {
            recent.pop_back();
            recent_refs.pop_back();
          }
        } else if (pick < 6) {  // renew the lease on the newest blocks, check their bytes
          lease.Release();
          lease = pool.PinPrefix(std::span<const PoolKey>(recent.data(), kLease));
          for (size_t i = 0; i < lease.size(); ++i) {
            if (!MatchesKey(recent[i], lease.data(i), kBlock)) ++bad_bytes;
          }
          loaded += lease.size();
        } else {  // pin one recent block by its ref, check it, unpin
          const size_t i = rng() % recent_refs.size();
          if (pool.Pin(recent_refs[i]).ok()) {
            if (!MatchesKey(recent[i], pool.SlotData(recent_refs[i].slot), kBlock)) ++bad_bytes;
            std::this_thread::yield();
            if (!pool.Unpin(recent_refs[i]).ok()) ++errors;
          }
        }
      }
      lease.Release();
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(refused.load(), 0u) << "of " << refused.load() + allocated.load() << " stores";
  EXPECT_EQ(errors.load(), 0u);
  EXPECT_EQ(bad_bytes.load(), 0u);
  EXPECT_GT(allocated.load(), 0u);
  EXPECT_GT(loaded.load(), 0u);
  PoolStats stats = pool.Stats();
  EXPECT_EQ(stats.stores_refused, 0u);
  EXPECT_GT(stats.evictions, 0u);
  EXPECT_EQ(stats.pinned_slots, 0u);
  EXPECT_EQ(stats.writing_slots, 0u);
  EXPECT_EQ(stats.evicting_slots, 0u);
}

TEST_F(PoolTest, ConcurrentStoresAreNeverRefusedWhileABlockIsEvictable) {
  StoreLoadPinStress(/*evict_rounds=*/4);
}

TEST_F(PoolTest, ConcurrentStoresAreNeverRefusedWithOnePolicyRound) {
  StoreLoadPinStress(/*evict_rounds=*/1);
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
  // A stale ref drops no pin the process holds on the slot's new block.
  EXPECT_EQ(pool.Unpin(old).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(pool.PinsHeldByThisProcess(old.slot), 1u);
  EXPECT_TRUE(pool.Unpin(SlotRef{old.slot, w.generation}).ok());
  EXPECT_EQ(pool.PinsHeldByThisProcess(old.slot), 0u);
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

// A store that evicted a block for its slot but then found every index bucket within reach of
// its key full: the key is refused, and the result (not an error) reports the eviction, which
// already happened.
TEST_F(PoolTest, StoreRefusedByAFullIndexStillReportsItsEviction) {
  const uint64_t slots = 256;
  SlotPool pool = MakePool(slots, 64);
  const uint64_t buckets = pool.index().bucket_count();
  ASSERT_EQ(buckets, 64u);
  const uint64_t reach = uint64_t{kProbeBuckets + 1} * kEntriesPerBucket;  // entries home 0 reaches
  // Keys whose home is bucket 0 (they fill buckets 0..16 exactly), and keys whose home is in
  // the upper half (they never spill into buckets 0..16).
  std::vector<PoolKey> home0, others;
  for (uint64_t i = 0; home0.size() < reach + 1 || others.size() < slots - reach; ++i) {
    const PoolKey k = KeyOf(i);
    const uint64_t home = MixKey(k) & (buckets - 1);
    if (home == 0 && home0.size() < reach + 1) home0.push_back(k);
    if (home >= buckets / 2 && others.size() < slots - reach) others.push_back(k);
  }
  const PoolKey extra = home0.back();
  home0.pop_back();
  StoreAll(pool, others);  // stored first: the least recently used
  StoreAll(pool, home0);
  ASSERT_EQ(pool.Stats().ready_slots, slots);

  StatusOr<PrepareStoreResult> r = pool.PrepareStore(std::vector<PoolKey>{extra});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->slots[0].outcome, StoreOutcome::kRefused);
  EXPECT_EQ(r->allocated, 0u);
  EXPECT_EQ(r->refused, 1u);
  ASSERT_EQ(r->evicted, 1u);
  ASSERT_EQ(r->evicted_keys.size(), 1u);
  EXPECT_TRUE(SameKey(r->evicted_keys[0], others[0]));  // the oldest block
  EXPECT_EQ(pool.Lookup(std::vector<PoolKey>{others[0]}), 0u);
  EXPECT_EQ(pool.Lookup(std::vector<PoolKey>{extra}), 0u);
  EXPECT_EQ(pool.Lookup(home0), home0.size());
  // The evicted block's slot went back to the pool: the next store elsewhere takes it without
  // evicting anything.
  EXPECT_EQ(pool.Stats().ready_slots, slots - 1);
  StatusOr<PrepareStoreResult> again = pool.PrepareStore(std::vector<PoolKey>{others[0]});
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->slots[0].outcome, StoreOutcome::kAllocated);
  EXPECT_EQ(again->evicted, 0u);
  ASSERT_TRUE(pool.AbortStore(again->slots[0].ref).ok());
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
  header->events_offset += 64;
  EXPECT_EQ(SlotPool::Open(name).status().code(), StatusCode::kDataLoss);
  header->events_offset -= 64;
  header->event_capacity = 3;
  EXPECT_EQ(SlotPool::Open(name).status().code(), StatusCode::kDataLoss);
  header->event_capacity = kDefaultEventCapacity;
  header->counter_shard_size = 128;
  EXPECT_EQ(SlotPool::Open(name).status().code(), StatusCode::kDataLoss);
  header->counter_shard_size = sizeof(PoolCounterShard);
  EXPECT_TRUE(SlotPool::Open(name).ok());
}

TEST_F(PoolTest, CountersAreSummedOverAttachmentsAndThreads) {
  SlotPoolOptions options;
  options.block_bytes = 4096;
  options.capacity_slots = 16;
  const std::string name = UniquePoolName("counters");
  StatusOr<SlotPool> owner = SlotPool::Create(name, options);
  ASSERT_TRUE(owner.ok());
  StoreAll(*owner, {KeyOf(0), KeyOf(1), KeyOf(2)});
  StatusOr<SlotPool> a = SlotPool::Open(name);
  StatusOr<SlotPool> b = SlotPool::Open(name);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(a->attachment_id(), b->attachment_id());
  const std::vector<PoolKey> probe = {KeyOf(0), KeyOf(1), KeyOf(9), KeyOf(2)};  // 2 hits, 2 misses
  constexpr int kThreads = 4, kCalls = 5000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      SlotPool& pool = t % 2 == 0 ? *a : *b;
      for (int i = 0; i < kCalls; ++i) ASSERT_EQ(pool.Lookup(probe), 2u);
      PinnedBlocks pinned = pool.PinPrefix(probe);
      ASSERT_EQ(pinned.size(), 2u);
    });
  }
  for (auto& t : threads) t.join();
  PoolStats s = owner->Stats();
  EXPECT_EQ(s.lookups, uint64_t{kThreads} * kCalls);
  EXPECT_EQ(s.hits, 2ull * kThreads * kCalls);
  EXPECT_EQ(s.misses, 2ull * kThreads * kCalls);
  EXPECT_EQ(s.prefix_pins, uint64_t{kThreads});
  EXPECT_EQ(s.pins, 2ull * kThreads);
  EXPECT_EQ(s.stores_committed, 3u);
  EXPECT_EQ(owner->Counter(PoolCounter::kHitBlocks), s.hits);
  // One shard per (attachment, thread) that counted: the owner's thread and four workers.
  EXPECT_EQ(s.counter_shards_owned, 5u);
  a = Status(StatusCode::kNotFound, "closed");  // gives its shards back; the counts stay
  EXPECT_EQ(owner->Stats().counter_shards_owned, 3u);
  EXPECT_EQ(owner->Stats().lookups, uint64_t{kThreads} * kCalls);

  owner->RecordCopy(/*into_pool=*/true, /*ok=*/true, 3, 3 * 4096, 1000);
  owner->RecordCopy(/*into_pool=*/false, /*ok=*/true, 2, 2 * 4096, 500);
  owner->RecordCopy(/*into_pool=*/false, /*ok=*/false, 2, 2 * 4096, 70);
  s = owner->Stats();
  EXPECT_EQ(s.bytes_in, 3u * 4096);
  EXPECT_EQ(s.bytes_out, 2u * 4096);
  EXPECT_EQ(s.loads_completed, 2u);
  EXPECT_EQ(s.copy_busy_ns_in, 1000u);
  EXPECT_EQ(s.copy_busy_ns_out, 570u);
  EXPECT_EQ(s.copy_batches_in, 1u);
  EXPECT_EQ(s.copy_batches_out, 2u);
  EXPECT_EQ(s.failed_copies, 1u);
}

TEST_F(PoolTest, CountersStayExactWhenShardsRunOut) {
  SlotPool pool = MakePool(4);
  StoreAll(pool, {KeyOf(0)});
  const std::vector<PoolKey> probe = {KeyOf(0)};
  constexpr int kThreads = kCounterShards + 12;  // more threads than shards: some share shard 0
  std::barrier all_counted(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 100; ++i) (void)pool.Lookup(probe);
      all_counted.arrive_and_wait();  // every thread holds its shard at once
    });
  }
  for (auto& t : threads) t.join();
  PoolStats s = pool.Stats();
  EXPECT_EQ(s.counter_shards_owned, kCounterShards - 1);
  EXPECT_EQ(s.lookups, 100u * kThreads);
  EXPECT_EQ(s.hits, 100u * kThreads);
}

TEST_F(PoolTest, LookupAnswersFromCommittedIndexEntries) {
  SlotPool pool = MakePool(4);
  StatusOr<PrepareStoreResult> r = pool.PrepareStore(std::vector<PoolKey>{KeyOf(1)});
  ASSERT_TRUE(r.ok());
  const SlotRef ref = r->slots[0].ref;
  EXPECT_FALSE(pool.index().FindCommitted(KeyOf(1)));  // WRITING: indexed, not committed
  ASSERT_TRUE(pool.CommitStore(ref).ok());
  EXPECT_TRUE(pool.index().FindCommitted(KeyOf(1)));
  // A committer that died between its READY CAS and its mark: Lookup misses the block until
  // ReclaimDead's sweep marks it.
  StatusOr<PrepareStoreResult> r2 = pool.PrepareStore(std::vector<PoolKey>{KeyOf(2)});
  ASSERT_TRUE(r2.ok());
  const SlotRef ref2 = r2->slots[0].ref;
  uint8_t* base = pool.segment().data();
  const auto* header = reinterpret_cast<const PoolHeader*>(base + kPoolHeaderOffset);
  SlotMeta& meta = reinterpret_cast<SlotMeta*>(base + header->slots_offset)[ref2.slot];
  uint64_t writing =
      SlotWord{static_cast<uint32_t>(getpid()), SlotState::kWriting, ref2.generation}.Encode();
  ASSERT_TRUE(meta.state.compare_exchange_strong(
      writing, SlotWord{0, SlotState::kReady, ref2.generation}.Encode()));  // the READY CAS only
  EXPECT_EQ(pool.Lookup(std::vector<PoolKey>{KeyOf(2)}), 0u);
  EXPECT_EQ(pool.PinPrefix(std::vector<PoolKey>{KeyOf(2)}).size(), 1u);  // the slot is READY
  ASSERT_TRUE(pool.ReclaimDead().ok());
  EXPECT_EQ(pool.Lookup(std::vector<PoolKey>{KeyOf(2)}), 1u);
  // Removal and eviction erase the entry before they return.
  ASSERT_TRUE(pool.Remove(KeyOf(1)).ok());
  EXPECT_EQ(pool.Lookup(std::vector<PoolKey>{KeyOf(1)}), 0u);
  EXPECT_TRUE(pool.Remove(KeyOf(2)).ok());
}

TEST_F(PoolTest, EventRingRecordsStoresEvictionsAndRemovals) {
  SlotPool pool = MakePool(2);
  StatusOr<SlotPool> reader = SlotPool::Open(pool.segment().name());
  ASSERT_TRUE(reader.ok());
  PoolEventCursor cursor = reader->OpenEventCursor();
  StoreAll(pool, {KeyOf(0), KeyOf(1)});
  StoreAll(pool, {KeyOf(2)});  // evicts KeyOf(0), the oldest
  ASSERT_TRUE(pool.Remove(KeyOf(1)).ok());
  std::vector<PoolEvent> events;
  PoolEventRead r = reader->ReadEvents(&cursor, &events);
  EXPECT_EQ(r.lost, 0u);
  EXPECT_FALSE(r.waiting);
  ASSERT_EQ(r.read, 5u);
  std::vector<std::pair<PoolEventKind, PoolKey>> got;
  for (const PoolEvent& e : events) got.emplace_back(e.kind, e.key);
  std::vector<std::pair<PoolEventKind, PoolKey>> want = {{PoolEventKind::kStored, KeyOf(0)},
                                                         {PoolEventKind::kStored, KeyOf(1)},
                                                         {PoolEventKind::kEvicted, KeyOf(0)},
                                                         {PoolEventKind::kStored, KeyOf(2)},
                                                         {PoolEventKind::kRemoved, KeyOf(1)}};
  EXPECT_EQ(got, want);
  for (size_t i = 0; i < events.size(); ++i) {
    EXPECT_EQ(events[i].sequence, i);
    EXPECT_EQ(events[i].pid, static_cast<uint32_t>(getpid()));
    EXPECT_EQ(events[i].attachment, pool.attachment_id());
    EXPECT_GT(events[i].time_ns, 0u);
  }
  EXPECT_EQ(events[2].ref, events[0].ref);  // evicted where it was stored
  EXPECT_EQ(events[3].ref.slot, events[0].ref.slot);  // and the slot reused at once
  EXPECT_EQ(events[3].ref.generation, NextGeneration(events[0].ref.generation));
  events.clear();
  EXPECT_EQ(reader->ReadEvents(&cursor, &events).read, 0u);
  PoolStats s = pool.Stats();
  EXPECT_EQ(s.events_published, 5u);
  EXPECT_EQ(s.event_sequence, 5u);
  EXPECT_EQ(s.events_dropped, 0u);
}

TEST_F(PoolTest, EventRingOverrunIsReportedAsLost) {
  SlotPoolOptions options;
  options.block_bytes = 64;
  options.capacity_slots = 64;
  options.event_capacity = 8;
  StatusOr<SlotPool> pool = SlotPool::Create(UniquePoolName("overrun"), options);
  ASSERT_TRUE(pool.ok());
  PoolEventCursor cursor = pool->OpenEventCursor();
  std::vector<PoolKey> keys;
  for (uint64_t i = 0; i < 20; ++i) keys.push_back(KeyOf(i));
  StoreAll(*pool, keys);
  std::vector<PoolEvent> events;
  PoolEventRead r = pool->ReadEvents(&cursor, &events);
  EXPECT_EQ(r.lost, 12u);
  ASSERT_EQ(r.read, 8u);
  for (size_t i = 0; i < 8; ++i) {  // the newest eight survive
    EXPECT_EQ(events[i].key, KeyOf(12 + i));
    EXPECT_EQ(events[i].sequence, 12 + i);
  }
  // A bounded read resumes where it stopped.
  StoreAll(*pool, {KeyOf(100), KeyOf(101), KeyOf(102)});
  events.clear();
  r = pool->ReadEvents(&cursor, &events, 2);
  EXPECT_EQ(r.read, 2u);
  r = pool->ReadEvents(&cursor, &events, 2);
  EXPECT_EQ(r.read, 1u);
  EXPECT_EQ(r.lost, 0u);
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[2].key, KeyOf(102));
}

TEST_F(PoolTest, EventReaderSkipsAnEventThatIsNeverWritten) {
  SlotPoolOptions options;
  options.block_bytes = 64;
  options.capacity_slots = 8;
  options.event_capacity = 16;
  StatusOr<SlotPool> pool = SlotPool::Create(UniquePoolName("stuck"), options);
  ASSERT_TRUE(pool.ok());
  PoolEventCursor cursor = pool->OpenEventCursor();
  StoreAll(*pool, {KeyOf(0)});
  // A writer that took a sequence number and never wrote its entry (stalled or dead).
  auto* header = reinterpret_cast<PoolHeader*>(pool->segment().data() + kPoolHeaderOffset);
  header->event_tail.fetch_add(1);
  StoreAll(*pool, {KeyOf(1)});
  std::vector<PoolEvent> events;
  PoolEventRead r = pool->ReadEvents(&cursor, &events, SIZE_MAX, std::chrono::milliseconds(30));
  EXPECT_EQ(r.read, 1u);  // stops at the unwritten one
  EXPECT_TRUE(r.waiting);
  EXPECT_EQ(r.lost, 0u);
  std::this_thread::sleep_for(std::chrono::milliseconds(40));
  r = pool->ReadEvents(&cursor, &events, SIZE_MAX, std::chrono::milliseconds(30));
  EXPECT_EQ(r.lost, 1u);
  EXPECT_EQ(r.read, 1u);
  EXPECT_FALSE(r.waiting);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[1].key, KeyOf(1));
  EXPECT_EQ(events[1].sequence, 2u);
}

TEST_F(PoolTest, EventCapacityIsValidated) {
  SlotPoolOptions options;
  options.block_bytes = 64;
  options.capacity_slots = 8;
  options.event_capacity = 12;
  EXPECT_EQ(SlotPool::Create(UniquePoolName("evcap"), options).status().code(),
            StatusCode::kInvalidArgument);
  options.event_capacity = 0;  // no ring: nothing is published, readers read nothing
  StatusOr<SlotPool> pool = SlotPool::Create(UniquePoolName("evcap"), options);
  ASSERT_TRUE(pool.ok());
  PoolEventCursor cursor = pool->OpenEventCursor();
  StoreAll(*pool, {KeyOf(0)});
  std::vector<PoolEvent> events;
  EXPECT_EQ(pool->ReadEvents(&cursor, &events).read, 0u);
  EXPECT_EQ(pool->Stats().events_published, 0u);
  EXPECT_TRUE(SlotPool::Open(pool->segment().name()).ok());
}

// A Create that fails leaves no segment, also when the pool is to outlive its creator.
TEST_F(PoolTest, FailedCreateLeavesNothingBehind) {
  SlotPoolOptions options;
  options.block_bytes = 4096;
  options.capacity_slots = 8;
  options.unlink_on_destroy = false;
  options.place_memory = [](std::span<uint8_t>) { return IoError("no such node"); };
  const std::string name = UniquePoolName("failed");
  EXPECT_EQ(SlotPool::Create(name, options).status().code(), StatusCode::kIoError);
  EXPECT_EQ(SlotPool::Open(name).status().code(), StatusCode::kNotFound);
  options.place_memory = nullptr;  // the name is free for a later Create
  StatusOr<SlotPool> pool = SlotPool::Create(name, options);
  ASSERT_TRUE(pool.ok()) << pool.status().ToString();
  EXPECT_TRUE(shm::Segment::Unlink(name).ok());
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
