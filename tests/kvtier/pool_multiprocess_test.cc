// Multi-process tests of the slot pool over real POSIX shared memory: forked processes store,
// load and evict at once against a byte oracle (a block's bytes are a function of its key), and
// SIGKILL tests kill a process between PrepareStore and CommitStore or while it holds pins.
// Pool-wide counters add up exactly over processes and threads (a killed process's counts
// included); the event ring survives writers killed mid-entry.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <random>
#include <set>
#include <thread>
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

// A stored block pinned by as many other processes as can pin it is kAlreadyStored: a store of
// its key takes no slot and evicts nothing.
TEST(PoolMultiProcessTest, StoredKeyPinnedByEveryHolderEvictsNothing) {
  SlotPoolOptions o;
  o.block_bytes = 256;
  o.capacity_slots = 2;
  const std::string name = UniquePoolName("pinned");
  StatusOr<SlotPool> pool = SlotPool::Create(name, o);
  ASSERT_TRUE(pool.ok()) << pool.status().ToString();
  const PoolKey k1 = KeyOf(1), k2 = KeyOf(2);
  SlotRef ref;
  for (const PoolKey& k : {k1, k2}) {
    StatusOr<PrepareStoreResult> r = pool->PrepareStore(std::span(&k, 1));
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    if (k == k1) ref = r->slots[0].ref;
    ASSERT_TRUE(pool->CommitStore(r->slots[0].ref).ok());
  }
  int pinned[2], release[2];
  ASSERT_EQ(pipe(pinned), 0);
  ASSERT_EQ(pipe(release), 0);
  std::vector<pid_t> children;
  for (uint32_t i = 0; i < kMaxPinHolders; ++i) {
    const pid_t c = fork();
    if (c == 0) {
      StatusOr<SlotPool> q = SlotPool::Open(name);
      char b = q.ok() && q->Pin(ref).ok() ? 'y' : 'n';
      if (write(pinned[1], &b, 1) != 1) _exit(2);
      if (read(release[0], &b, 1) != 1) _exit(3);
      _exit(0);
    }
    ASSERT_GT(c, 0);
    children.push_back(c);
  }
  int ok = 0;
  for (uint32_t i = 0; i < kMaxPinHolders; ++i) {
    char b = 0;
    ASSERT_EQ(read(pinned[0], &b, 1), 1);
    ok += b == 'y';
  }
  ASSERT_EQ(ok, static_cast<int>(kMaxPinHolders));
  ASSERT_EQ(pool->Pin(ref).code(), StatusCode::kResourceExhausted);
  StatusOr<PrepareStoreResult> r = pool->PrepareStore(std::span(&k1, 1));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->slots[0].outcome, StoreOutcome::kAlreadyStored);
  EXPECT_EQ(r->evicted, 0u);
  EXPECT_EQ(pool->Lookup(std::span(&k2, 1)), 1u) << "another block was evicted for a stored key";
  for (size_t i = 0; i < children.size(); ++i) {
    const char b = 'g';
    ASSERT_EQ(write(release[1], &b, 1), 1);
  }
  for (pid_t c : children) {
    int status = 0;
    waitpid(c, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  for (int fd : {pinned[0], pinned[1], release[0], release[1]}) close(fd);
  (void)pool->ReclaimDead();
  (void)shm::Segment::Unlink(name);
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

void StoreKeys(SlotPool& pool, const std::vector<PoolKey>& keys) {
  StatusOr<PrepareStoreResult> r = pool.PrepareStore(keys);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  for (size_t i = 0; i < keys.size(); ++i) {
    ASSERT_EQ(r->slots[i].outcome, StoreOutcome::kAllocated);
    FillForKey(keys[i], r->slots[i].data, pool.block_bytes());
    ASSERT_TRUE(pool.CommitStore(r->slots[i].ref).ok());
  }
}

PoolHeader* HeaderOf(const SlotPool& pool) {
  return reinterpret_cast<PoolHeader*>(pool.segment().data() + kPoolHeaderOffset);
}

TEST(PoolMultiProcessTest, CountersFromSeveralProcessesAddUpExactly) {
  const std::string name = UniquePoolName("counters");
  SlotPool pool = CreatePool(name, 64, 4096, /*poison=*/false);
  StoreKeys(pool, {KeyOf(0), KeyOf(1)});
  const PoolStats base = pool.Stats();
  constexpr int kProcesses = 3, kThreads = 2, kLookups = 20000, kLoads = 100;
  std::vector<pid_t> children;
  for (int p = 0; p < kProcesses; ++p) {
    children.push_back(Spawn([&name] {
      StatusOr<SlotPool> opened = SlotPool::Open(name);
      if (!opened.ok()) return 1;
      SlotPool& mine = *opened;
      const std::vector<PoolKey> probe = {KeyOf(0), KeyOf(1), KeyOf(99)};  // 2 hits, 1 miss
      std::atomic<int> bad{0};
      std::vector<std::thread> threads;
      for (int t = 0; t < kThreads; ++t) {
        threads.emplace_back([&] {
          for (int i = 0; i < kLookups; ++i) {
            if (mine.Lookup(probe) != 2) ++bad;
          }
          for (int i = 0; i < kLoads; ++i) {
            if (mine.PinPrefix(probe).size() != 2) ++bad;
            mine.RecordCopy(/*into_pool=*/false, /*ok=*/true, 2, 2 * 4096, 7);
          }
        });
      }
      for (auto& t : threads) t.join();
      return bad.load() == 0 ? 0 : 2;
    }));
  }
  // One more process counts and is killed without closing anything.
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  pid_t killed = Spawn([&] {
    StatusOr<SlotPool> p = SlotPool::Open(name);
    if (!p.ok()) return 1;
    const std::vector<PoolKey> probe = {KeyOf(0)};
    for (int i = 0; i < 1000; ++i) (void)p->Lookup(probe);
    char c = 1;
    if (write(ready[1], &c, 1) != 1) return 3;
    for (;;) pause();
  });
  for (pid_t pid : children) EXPECT_EQ(WaitExit(pid), 0);
  char c = 0;
  ASSERT_EQ(read(ready[0], &c, 1), 1);
  kill(killed, SIGKILL);
  EXPECT_EQ(WaitExit(killed), 128 + SIGKILL);
  close(ready[0]);
  close(ready[1]);

  const uint64_t calls = uint64_t{kProcesses} * kThreads;
  PoolStats s = pool.Stats();
  EXPECT_EQ(s.lookups - base.lookups, calls * kLookups + 1000);
  EXPECT_EQ(s.hits - base.hits, 2 * calls * kLookups + 1000);
  EXPECT_EQ(s.misses - base.misses, calls * kLookups);
  EXPECT_EQ(s.prefix_pins - base.prefix_pins, calls * kLoads);
  EXPECT_EQ(s.pins - base.pins, 2 * calls * kLoads);
  EXPECT_EQ(s.loads_completed, 2 * calls * kLoads);
  EXPECT_EQ(s.bytes_out, 2 * 4096 * calls * kLoads);
  EXPECT_EQ(s.copy_busy_ns_out, 7 * calls * kLoads);
  EXPECT_EQ(s.copy_batches_out, calls * kLoads);
  // The exited processes gave their shards back; the killed one's is returned by ReclaimDead.
  const uint64_t owned = s.counter_shards_owned;
  EXPECT_GE(owned, 1u);
  StatusOr<ReclaimReport> report = pool.ReclaimDead();
  ASSERT_TRUE(report.ok());
  s = pool.Stats();
  EXPECT_EQ(s.reclaimed_shards, 1u);
  EXPECT_EQ(s.counter_shards_owned, owned - 1);
  EXPECT_EQ(s.lookups - base.lookups, calls * kLookups + 1000);  // its counts stay
}

// A writer SIGKILLed between locking an event entry and publishing it: readers skip its event
// after the bounded wait and read everything after it, and the next writer whose sequence
// number lands on the entry takes the dead writer's lock over.
TEST(PoolMultiProcessTest, EventWriterKilledMidEntryWedgesNobody) {
  const std::string name = UniquePoolName("evkill");
  SlotPoolOptions options;
  options.block_bytes = 64;
  options.capacity_slots = 64;
  options.event_capacity = 8;
  StatusOr<SlotPool> created = SlotPool::Create(name, options);
  ASSERT_TRUE(created.ok());
  SlotPool& pool = *created;
  PoolEventCursor cursor = pool.OpenEventCursor();
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  pid_t writer = Spawn([&] {
    StatusOr<SlotPool> p = SlotPool::Open(name);
    if (!p.ok()) return 1;
    PoolHeader* h = HeaderOf(*p);
    auto* ring = reinterpret_cast<PoolEventEntry*>(p->segment().data() + h->events_offset);
    // The first steps of a publication (pool_layout.h, Event ring), then death.
    const uint64_t ticket = h->event_tail.fetch_add(1);
    PoolEventEntry& e = ring[ticket % h->event_capacity];
    uint64_t unlocked = 0;
    if (!e.lock.compare_exchange_strong(unlocked, static_cast<uint64_t>(getpid()))) return 2;
    e.seq.store(2 * ticket + 1);
    e.key_lo.store(0xDEAD);
    char c = 1;
    if (write(ready[1], &c, 1) != 1) return 3;
    for (;;) pause();
  });
  char c = 0;
  ASSERT_EQ(read(ready[0], &c, 1), 1);
  kill(writer, SIGKILL);
  EXPECT_EQ(WaitExit(writer), 128 + SIGKILL);
  close(ready[0]);
  close(ready[1]);

  StoreKeys(pool, {KeyOf(1), KeyOf(2), KeyOf(3)});  // sequence numbers 1-3
  const auto skip_after = std::chrono::milliseconds(20);
  std::vector<PoolEvent> events;
  PoolEventRead r = pool.ReadEvents(&cursor, &events, SIZE_MAX, skip_after);
  EXPECT_TRUE(r.waiting);
  EXPECT_EQ(r.read, 0u);
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  r = pool.ReadEvents(&cursor, &events, SIZE_MAX, skip_after);
  EXPECT_EQ(r.lost, 1u);
  ASSERT_EQ(r.read, 3u);
  EXPECT_EQ(events[0].key, KeyOf(1));
  EXPECT_EQ(events[0].sequence, 1u);

  // Sequence number 8 lands on the dead writer's entry.
  std::vector<PoolKey> more;
  for (uint64_t i = 10; i < 18; ++i) more.push_back(KeyOf(i));
  StoreKeys(pool, more);
  events.clear();
  r = pool.ReadEvents(&cursor, &events, SIZE_MAX, skip_after);
  EXPECT_EQ(r.lost, 0u);
  ASSERT_EQ(r.read, 8u);
  for (size_t i = 0; i < 8; ++i) {
    EXPECT_EQ(events[i].key, more[i]);
    EXPECT_EQ(events[i].sequence, 4 + i);
  }
  EXPECT_EQ(pool.Stats().events_dropped, 0u);
  auto* ring =
      reinterpret_cast<PoolEventEntry*>(pool.segment().data() + HeaderOf(pool)->events_offset);
  EXPECT_EQ(ring[0].lock.load(), 0u);
  EXPECT_EQ(ring[0].seq.load(), 2u * 8 + 2);
}

// Writers storing and removing at full speed are SIGKILLed at random points while a reader
// follows the ring: every event it accepts is whole (key words, slot and kind of one event),
// and after the kills the ring still carries every new event to the reader.
TEST(PoolMultiProcessTest, EventsStayWholeWhenWritersAreKilled) {
  const std::string name = UniquePoolName("evstress");
  SlotPoolOptions options;
  options.block_bytes = 256;
  options.capacity_slots = 16;
  options.event_capacity = 32;
  StatusOr<SlotPool> created = SlotPool::Create(name, options);
  ASSERT_TRUE(created.ok());
  SlotPool& pool = *created;
  PoolEventCursor cursor = pool.OpenEventCursor();
  constexpr uint64_t kUniverse = 48;
  // Both key words of one of the keys used, a slot of the pool, a known kind.
  auto valid = [&](const PoolEvent& e) {
    bool key_ok = false;
    for (uint64_t i = 0; i < kUniverse + 10 && !key_ok; ++i) key_ok = e.key == KeyOf(i);
    return key_ok && e.ref.slot < 16 && static_cast<uint8_t>(e.kind) <= 2 && e.pid != 0;
  };
  std::vector<pid_t> writers;
  for (uint32_t w = 0; w < 3; ++w) {
    writers.push_back(Spawn([&name, w] {
      StatusOr<SlotPool> p = SlotPool::Open(name);
      if (!p.ok()) return 1;
      std::mt19937_64 rng(w);
      for (;;) {
        PoolKey key = KeyOf(rng() % kUniverse);
        if (rng() % 3 == 0) {
          (void)p->Remove(key);
          continue;
        }
        StatusOr<PrepareStoreResult> r = p->PrepareStore(std::span<const PoolKey>(&key, 1));
        if (r.ok() && r->slots[0].outcome == StoreOutcome::kAllocated) {
          (void)p->CommitStore(r->slots[0].ref);
        }
      }
    }));
  }
  uint64_t seen = 0, lost = 0, bad = 0;
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(300);
  std::vector<PoolEvent> events;
  while (std::chrono::steady_clock::now() < until) {
    events.clear();
    PoolEventRead r = pool.ReadEvents(&cursor, &events, SIZE_MAX, std::chrono::milliseconds(20));
    seen += r.read;
    lost += r.lost;
    for (const PoolEvent& e : events) bad += valid(e) ? 0 : 1;
  }
  for (pid_t pid : writers) kill(pid, SIGKILL);
  for (pid_t pid : writers) WaitExit(pid);
  EXPECT_GT(seen, 100u);
  EXPECT_EQ(bad, 0u);
  ASSERT_TRUE(pool.ReclaimDead().ok());

  // Whatever the writers left half done, new events reach the reader.
  std::vector<PoolKey> fresh;
  for (uint64_t i = 0; i < 10; ++i) fresh.push_back(KeyOf(kUniverse + i));
  for (const PoolKey& k : fresh) {
    StatusOr<PrepareStoreResult> r = pool.PrepareStore(std::span<const PoolKey>(&k, 1));
    ASSERT_TRUE(r.ok());
    if (r->slots[0].outcome == StoreOutcome::kAllocated) {
      ASSERT_TRUE(pool.CommitStore(r->slots[0].ref).ok());
    }
  }
  std::set<uint64_t> fresh_stored;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (fresh_stored.size() < fresh.size() && std::chrono::steady_clock::now() < deadline) {
    events.clear();
    (void)pool.ReadEvents(&cursor, &events, SIZE_MAX, std::chrono::milliseconds(20));
    for (const PoolEvent& e : events) {
      EXPECT_TRUE(valid(e));
      for (size_t i = 0; i < fresh.size(); ++i) {
        if (e.kind == PoolEventKind::kStored && e.key == fresh[i] &&
            e.pid == static_cast<uint32_t>(getpid())) {
          fresh_stored.insert(i);
        }
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(fresh_stored.size(), fresh.size());
  EXPECT_EQ(pool.ReadEvents(&cursor, &events).waiting, false);
}

}  // namespace
}  // namespace deltakv::kvtier
