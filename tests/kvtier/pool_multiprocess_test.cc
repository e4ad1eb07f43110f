// Multi-process tests of the slot pool over real POSIX shared memory: forked processes store,
// load and evict at once against a byte oracle (a block's bytes are a function of its key), and
// SIGKILL tests kill a process between PrepareStore and CommitStore or while it holds pins.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <random>
#include <vector>

#include "kvtier/slot_pool.h"
#include "pool_test_util.h"
#include "test_util.h"

namespace deltakv::kvtier {
namespace {

using testing::FillForKey;
using testing::KeyOf;
using testing::MatchesKey;
using testing::UniquePoolName;

SlotPool CreatePool(const std::string& name, uint64_t slots, uint64_t block, bool poison) {
  SlotPoolOptions options;
  options.block_bytes = block;
  options.capacity_slots = slots;
  options.poison_freed = poison;
  StatusOr<SlotPool> pool = SlotPool::Create(name, options);
  EXPECT_TRUE(pool.ok()) << pool.status().ToString();
  return std::move(pool).value();
}

using deltakv::testing::Spawn;
using deltakv::testing::WaitExit;

// Each worker stores, loads (pin, copy out, verify, unpin), touches and removes random keys of a
// universe four times larger than the pool. Returns the number of oracle violations (capped).
int StressWorker(const std::string& name, uint32_t seed, int iterations) {
  StatusOr<SlotPool> opened = SlotPool::Open(name);
  if (!opened.ok()) return 100;
  SlotPool& pool = *opened;
  const size_t block = pool.block_bytes();
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> copy(block);
  int bad = 0;
  for (int it = 0; it < iterations && bad < 50; ++it) {
    const uint64_t first = rng() % 96;
    const size_t run = 1 + rng() % 4;
    std::vector<PoolKey> keys;
    for (size_t i = 0; i < run; ++i) keys.push_back(KeyOf(first + i));
    switch (rng() % 8) {
      case 0:
      case 1:
      case 2: {  // store
        StatusOr<PrepareStoreResult> r = pool.PrepareStore(keys);
        if (!r.ok()) break;
        for (size_t i = 0; i < keys.size(); ++i) {
          const StoreSlot& s = r->slots[i];
          if (s.outcome != StoreOutcome::kAllocated) continue;
          FillForKey(keys[i], s.data, block);
          if (rng() % 16 == 0) {
            if (!pool.AbortStore(s.ref).ok()) ++bad;
          } else if (!pool.CommitStore(s.ref).ok()) {
            ++bad;
          }
        }
        break;
      }
      case 3:
      case 4:
      case 5: {  // load
        PinnedBlocks pinned = pool.PinPrefix(keys);
        for (size_t i = 0; i < pinned.size(); ++i) {
          std::memcpy(copy.data(), pinned.data(i), block);
          if (!MatchesKey(keys[i], copy.data(), block)) ++bad;
        }
        break;
      }
      case 6:
        pool.Touch(keys);
        (void)pool.Lookup(keys);
        break;
      case 7: {
        Status s = pool.Remove(keys[0]);
        if (!s.ok() && s.code() != StatusCode::kNotFound &&
            s.code() != StatusCode::kFailedPrecondition) {
          ++bad;
        }
        break;
      }
    }
  }
  return bad;
}

TEST(PoolMultiProcessTest, ConcurrentStoreLoadEvictMatchesOracle) {
  const std::string name = UniquePoolName("stress");
  SlotPool pool = CreatePool(name, 24, 16384, /*poison=*/true);
  std::vector<pid_t> children;
  for (uint32_t w = 0; w < 4; ++w) {
    children.push_back(Spawn([&name, w] { return StressWorker(name, 1000 + w, 20000); }));
  }
  for (pid_t pid : children) EXPECT_EQ(WaitExit(pid), 0);

  // Every READY block still matches its key; nothing is left WRITING, pinned or EVICTING.
  PoolStats stats = pool.Stats();
  EXPECT_EQ(stats.writing_slots, 0u);
  EXPECT_EQ(stats.evicting_slots, 0u);
  EXPECT_EQ(stats.pinned_slots, 0u);
  EXPECT_GT(stats.evictions, 0u);
  EXPECT_GT(stats.stores_committed, 0u);
  EXPECT_EQ(stats.index_entries, stats.ready_slots);
  size_t ready = 0;
  for (uint64_t k = 0; k < 100; ++k) {
    PoolKey key = KeyOf(k);
    PinnedBlocks p = pool.PinPrefix(std::span<const PoolKey>(&key, 1));
    if (p.size() == 1) {
      ++ready;
      EXPECT_TRUE(MatchesKey(key, p.data(0), pool.block_bytes())) << k;
    }
  }
  EXPECT_EQ(ready, stats.ready_slots);
  StatusOr<ReclaimReport> report = pool.ReclaimDead();
  ASSERT_TRUE(report.ok());
  EXPECT_EQ(report->writes + report->evictions + report->pins + report->index_entries, 0u);
}

TEST(PoolMultiProcessTest, KillMidStoreLeavesNoReadableBlock) {
  const std::string name = UniquePoolName("kill");
  SlotPool pool = CreatePool(name, 8, 65536, /*poison=*/true);
  int ready_pipe[2];
  ASSERT_EQ(pipe(ready_pipe), 0);
  const PoolKey key = KeyOf(42);
  pid_t child = Spawn([&] {
    StatusOr<SlotPool> p = SlotPool::Open(name);
    if (!p.ok()) return 1;
    StatusOr<PrepareStoreResult> r = p->PrepareStore(std::span<const PoolKey>(&key, 1));
    if (!r.ok() || r->slots[0].outcome != StoreOutcome::kAllocated) return 2;
    FillForKey(key, r->slots[0].data, p->block_bytes() / 2);  // half written
    char c = 1;
    if (write(ready_pipe[1], &c, 1) != 1) return 3;
    for (;;) pause();
  });
  char c = 0;
  ASSERT_EQ(read(ready_pipe[0], &c, 1), 1);
  ASSERT_EQ(kill(child, SIGKILL), 0);
  EXPECT_EQ(WaitExit(child), 128 + SIGKILL);
  close(ready_pipe[0]);
  close(ready_pipe[1]);

  EXPECT_EQ(pool.Lookup(std::span<const PoolKey>(&key, 1)), 0u);
  PoolStats before = pool.Stats();
  EXPECT_EQ(before.writing_slots, 1u);
  EXPECT_EQ(before.ready_slots, 0u);
  uint32_t dead_slot = 0;
  while (pool.InspectSlot(dead_slot).state != SlotState::kWriting) ++dead_slot;
  // The dead writer's store is "in flight" until reclaimed: nobody else may take the key.
  StatusOr<PrepareStoreResult> blocked = pool.PrepareStore(std::span<const PoolKey>(&key, 1));
  ASSERT_TRUE(blocked.ok());
  EXPECT_EQ(blocked->slots[0].outcome, StoreOutcome::kInFlight);

  StatusOr<ReclaimReport> report = pool.ReclaimDead();
  ASSERT_TRUE(report.ok());
  EXPECT_EQ(report->writes, 1u);
  PoolStats after = pool.Stats();
  EXPECT_EQ(after.writing_slots, 0u);
  EXPECT_EQ(after.free_slots, 1u);
  EXPECT_EQ(after.index_entries, 0u);
  EXPECT_EQ(after.reclaimed_writes, 1u);
  // The half-written bytes were poisoned, and the key can be stored afresh.
  EXPECT_EQ(pool.InspectSlot(dead_slot).state, SlotState::kFree);
  EXPECT_EQ(pool.SlotData(dead_slot)[0], kPoisonByte);
  StatusOr<PrepareStoreResult> again = pool.PrepareStore(std::span<const PoolKey>(&key, 1));
  ASSERT_TRUE(again.ok());
  ASSERT_EQ(again->slots[0].outcome, StoreOutcome::kAllocated);
  ASSERT_TRUE(pool.AbortStore(again->slots[0].ref).ok());
}

TEST(PoolMultiProcessTest, CommittedBlocksSurviveKillAndPinsAreReclaimed) {
  const std::string name = UniquePoolName("survive");
  SlotPool pool = CreatePool(name, 16, 65536, /*poison=*/true);
  std::vector<PoolKey> keys;
  for (uint64_t i = 0; i < 8; ++i) keys.push_back(KeyOf(500 + i));
  int ready_pipe[2];
  ASSERT_EQ(pipe(ready_pipe), 0);
  pid_t engine = Spawn([&] {
    StatusOr<SlotPool> p = SlotPool::Open(name);
    if (!p.ok()) return 1;
    StatusOr<PrepareStoreResult> r = p->PrepareStore(keys);
    if (!r.ok() || r->allocated != keys.size()) return 2;
    for (size_t i = 0; i < keys.size(); ++i) {
      FillForKey(keys[i], r->slots[i].data, p->block_bytes());
      if (!p->CommitStore(r->slots[i].ref).ok()) return 3;
    }
    PinnedBlocks pinned = p->PinPrefix(keys);  // a load in flight when the engine dies
    if (pinned.size() != keys.size()) return 4;
    char c = 1;
    if (write(ready_pipe[1], &c, 1) != 1) return 5;
    for (;;) pause();
  });
  char c = 0;
  ASSERT_EQ(read(ready_pipe[0], &c, 1), 1);
  ASSERT_EQ(kill(engine, SIGKILL), 0);
  EXPECT_EQ(WaitExit(engine), 128 + SIGKILL);
  close(ready_pipe[0]);
  close(ready_pipe[1]);

  EXPECT_EQ(pool.Stats().pinned_slots, keys.size());
  StatusOr<ReclaimReport> report = pool.ReclaimDead();
  ASSERT_TRUE(report.ok());
  EXPECT_EQ(report->pins, keys.size());
  EXPECT_EQ(report->writes, 0u);
  EXPECT_EQ(pool.Stats().pinned_slots, 0u);
  EXPECT_EQ(pool.Stats().ready_slots, keys.size());

  // A restarted engine (a new process) reads every committed block back intact.
  pid_t restarted = Spawn([&] {
    StatusOr<SlotPool> p = SlotPool::Open(name);
    if (!p.ok()) return 1;
    if (p->Lookup(keys) != keys.size()) return 2;
    PinnedBlocks pinned = p->PinPrefix(keys);
    if (pinned.size() != keys.size()) return 3;
    for (size_t i = 0; i < keys.size(); ++i) {
      if (!MatchesKey(keys[i], pinned.data(i), p->block_bytes())) return 4;
    }
    return 0;
  });
  EXPECT_EQ(WaitExit(restarted), 0);
  EXPECT_TRUE(pool.Remove(keys[0]).ok());  // no pin left behind by the restarted engine
}

TEST(PoolMultiProcessTest, KillDuringStressThenReclaim) {
  const std::string name = UniquePoolName("killstress");
  SlotPool pool = CreatePool(name, 16, 8192, /*poison=*/true);
  std::vector<pid_t> victims;
  for (uint32_t w = 0; w < 3; ++w) {
    victims.push_back(Spawn([&name, w] { return StressWorker(name, 77 + w, 1 << 30); }));
  }
  pid_t survivor = Spawn([&name] { return StressWorker(name, 5, 3000); });
  usleep(200 * 1000);
  for (pid_t pid : victims) kill(pid, SIGKILL);
  for (pid_t pid : victims) WaitExit(pid);
  StatusOr<ReclaimReport> report = pool.ReclaimDead();
  ASSERT_TRUE(report.ok());
  EXPECT_EQ(WaitExit(survivor), 0);
  report = pool.ReclaimDead();
  ASSERT_TRUE(report.ok());
  PoolStats stats = pool.Stats();
  EXPECT_EQ(stats.writing_slots, 0u);
  EXPECT_EQ(stats.pinned_slots, 0u);
  EXPECT_EQ(stats.evicting_slots, 0u);
  EXPECT_EQ(stats.index_entries, stats.ready_slots);
  for (uint64_t k = 0; k < 100; ++k) {
    PoolKey key = KeyOf(k);
    PinnedBlocks p = pool.PinPrefix(std::span<const PoolKey>(&key, 1));
    if (p.size() == 1) {
      EXPECT_TRUE(MatchesKey(key, p.data(0), pool.block_bytes())) << k;
    }
  }
}

}  // namespace
}  // namespace deltakv::kvtier
