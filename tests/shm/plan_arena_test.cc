// PlanArena: allocation, publication, the READY + generation checks a rank makes, bounds checks,
// corrupt headers, cross-process consumption and stale-arena cleanup; reuse under a new
// generation, retirement, the sidecar's pool and the rank's cache of mapped arenas.
#include "shm/plan_arena.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <cstring>
#include <thread>

#include "shm_test_util.h"

namespace deltakv::shm {
namespace {

using testing::ForkChild;
using testing::UniqueName;
using testing::WaitChild;

PlanArenaOptions Options(uint64_t capacity = 64 << 10, uint64_t generation = 7) {
  PlanArenaOptions o;
  o.capacity = capacity;
  o.generation = generation;
  o.sync_id = 3;
  o.rank = 1;
  return o;
}

// Writes a 3-block plan and publishes it; returns the offsets.
std::vector<uint64_t> WritePlan(PlanArenaWriter& w) {
  std::vector<uint64_t> offsets;
  for (uint64_t size : {100, 1, 5000}) {
    uint64_t off = w.Allocate(size).value();
    std::span<uint8_t> b = w.Bytes(off, size);
    EXPECT_EQ(b.size(), size);
    for (uint64_t i = 0; i < size; ++i) b[i] = static_cast<uint8_t>(off + i);
    offsets.push_back(off);
  }
  EXPECT_TRUE(w.SetRoot(offsets[0]).ok());
  EXPECT_TRUE(w.Publish().ok());
  return offsets;
}

TEST(PlanArenaTest, WriteReadConsume) {
  const std::string name = UniqueName("arena");
  PlanArenaWriter w = PlanArenaWriter::Create(name, Options()).value();
  EXPECT_EQ(w.state(), ArenaState::kWriting);
  std::vector<uint64_t> offsets = WritePlan(w);
  EXPECT_EQ(w.state(), ArenaState::kReady);
  for (uint64_t off : offsets) EXPECT_EQ(off % 64, 0u);
  EXPECT_EQ(offsets[0], kArenaDataOffset);

  PlanArenaReader r = PlanArenaReader::Open(name, 7).value();
  EXPECT_EQ(r.generation(), 7u);
  EXPECT_EQ(r.sync_id(), 3u);
  EXPECT_EQ(r.rank(), 1u);
  EXPECT_EQ(r.root_offset(), offsets[0]);
  EXPECT_EQ(r.used_bytes(), offsets[2] + 5000);
  std::span<const uint8_t> block = r.Block(offsets[2], 5000).value();
  for (uint64_t i = 0; i < 5000; ++i) ASSERT_EQ(block[i], static_cast<uint8_t>(offsets[2] + i));
  EXPECT_TRUE(r.CheckValid().ok());
  EXPECT_TRUE(r.MarkConsumed().ok());
  EXPECT_EQ(w.state(), ArenaState::kConsumed);
  EXPECT_TRUE(r.CheckValid().ok());
  EXPECT_EQ(r.MarkConsumed().code(), StatusCode::kFailedPrecondition);
  // A consumed arena is not READY any more: nobody opens it again.
  EXPECT_EQ(PlanArenaReader::Open(name, 7).status().code(), StatusCode::kFailedPrecondition);
}

TEST(PlanArenaTest, ReaderRefusesUnfinishedAndWrongGeneration) {
  const std::string name = UniqueName("arena");
  PlanArenaWriter w = PlanArenaWriter::Create(name, Options()).value();
  Status s = PlanArenaReader::Open(name, 7).status();
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("WRITING, not READY"), std::string::npos) << s.message();
  WritePlan(w);
  s = PlanArenaReader::Open(name, 8).status();
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("generation 7, expected 8"), std::string::npos) << s.message();
  EXPECT_TRUE(PlanArenaReader::Open(name, 7).ok());
  EXPECT_EQ(PlanArenaReader::Open(UniqueName("none"), 7).status().code(), StatusCode::kNotFound);
}

TEST(PlanArenaTest, AllocationLimitsAndStateRules) {
  const std::string name = UniqueName("arena");
  PlanArenaWriter w = PlanArenaWriter::Create(name, Options(4096)).value();
  EXPECT_EQ(w.Allocate(10, 3).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(w.Allocate(10, 0).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(w.Allocate(10, 8192).status().code(), StatusCode::kInvalidArgument);
  uint64_t a = w.Allocate(10, 8).value();
  uint64_t b = w.Allocate(10, 1024).value();
  EXPECT_EQ(a, 128u);
  EXPECT_EQ(b, 1024u);
  EXPECT_EQ(w.Allocate(4096 - 1034 + 1, 1).status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(w.used_bytes(), 1034u);  // the failed allocation reserved nothing
  EXPECT_TRUE(w.Allocate(4096 - 1034, 1).ok());
  EXPECT_EQ(w.Allocate(1, 4096).status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(w.Allocate(~uint64_t{0}, 1).status().code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(w.Bytes(64, 8).empty());  // header bytes are not a block
  EXPECT_TRUE(w.Bytes(4000, 200).empty());
  EXPECT_EQ(w.SetRoot(64).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(w.SetRoot(4096).code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(w.Publish().ok());
  EXPECT_EQ(w.Publish().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(w.Allocate(1).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(PlanArenaWriter::Create(UniqueName("arena"), Options(127)).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(PlanArenaWriter::Create(name, Options()).status().code(),
            StatusCode::kFailedPrecondition);  // exists
}

TEST(PlanArenaTest, ReaderBlocksAreBoundsChecked) {
  const std::string name = UniqueName("arena");
  PlanArenaWriter w = PlanArenaWriter::Create(name, Options()).value();
  std::vector<uint64_t> offsets = WritePlan(w);
  PlanArenaReader r = PlanArenaReader::Open(name, 7).value();
  const uint64_t used = r.used_bytes();
  EXPECT_TRUE(r.Block(128, 0).ok());
  EXPECT_TRUE(r.Block(used, 0).ok());
  EXPECT_TRUE(r.Block(128, used - 128).ok());
  EXPECT_EQ(r.Block(127, 1).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.Block(0, 8).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.Block(128, used - 127).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.Block(used + 1, 0).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.Block(~uint64_t{0}, 2).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.Block(offsets[1], ~uint64_t{0}).status().code(), StatusCode::kInvalidArgument);
}

TEST(PlanArenaTest, CorruptHeadersAreRejected) {
  const std::string name = UniqueName("arena");
  PlanArenaWriter w = PlanArenaWriter::Create(name, Options(8192)).value();
  WritePlan(w);
  Segment raw = Segment::Open(name, SegmentKind::kPlanArena).value();
  auto* h = reinterpret_cast<ArenaHeader*>(raw.data() + kArenaHeaderOffset);

  h->used.store(8193);
  EXPECT_EQ(PlanArenaReader::Open(name, 7).status().code(), StatusCode::kDataLoss);
  h->used.store(100);
  EXPECT_EQ(PlanArenaReader::Open(name, 7).status().code(), StatusCode::kDataLoss);
  h->used.store(5000 + 1024);
  h->root_offset = 9000;
  EXPECT_EQ(PlanArenaReader::Open(name, 7).status().code(), StatusCode::kDataLoss);
  h->root_offset = 128;
  h->magic ^= 1;
  EXPECT_EQ(PlanArenaReader::Open(name, 7).status().code(), StatusCode::kDataLoss);
  h->magic ^= 1;
  h->layout_version = kLayoutVersion + 1;
  EXPECT_EQ(PlanArenaReader::Open(name, 7).status().code(), StatusCode::kFailedPrecondition);
  h->layout_version = kLayoutVersion;
  h->state.store(9);
  Status s = PlanArenaReader::Open(name, 7).status();
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("INVALID"), std::string::npos);
  h->state.store(static_cast<uint32_t>(ArenaState::kReady));
  EXPECT_TRUE(PlanArenaReader::Open(name, 7).ok());

  // A reader notices when the arena under it stops being what it opened.
  PlanArenaReader r = PlanArenaReader::Open(name, 7).value();
  h->generation = 8;
  EXPECT_EQ(r.CheckValid().code(), StatusCode::kFailedPrecondition);
  h->generation = 7;
  h->state.store(static_cast<uint32_t>(ArenaState::kWriting));
  EXPECT_EQ(r.CheckValid().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(r.MarkConsumed().code(), StatusCode::kFailedPrecondition);
  // A segment of another kind is not an arena.
  Segment scratch = Segment::Create(UniqueName("arena"), 4096, SegmentKind::kScratch).value();
  scratch.Publish();
  EXPECT_EQ(PlanArenaReader::Open(scratch.name(), 7).status().code(), StatusCode::kDataLoss);
}

TEST(PlanArenaTest, AnotherProcessReadsAndConsumes) {
  const std::string name = UniqueName("arena");
  PlanArenaWriter w = PlanArenaWriter::Create(name, Options()).value();
  std::vector<uint64_t> offsets = WritePlan(w);
  pid_t child = ForkChild([&] {
    StatusOr<PlanArenaReader> r = PlanArenaReader::Open(name, 7);
    if (!r.ok()) return 1;
    StatusOr<std::span<const uint8_t>> b = r->Block(r->root_offset(), 100);
    if (!b.ok()) return 2;
    for (uint64_t i = 0; i < 100; ++i) {
      if ((*b)[i] != static_cast<uint8_t>(offsets[0] + i)) return 3;
    }
    return r->MarkConsumed().ok() ? 0 : 4;
  });
  EXPECT_EQ(WaitChild(child), 0);
  EXPECT_EQ(w.state(), ArenaState::kConsumed);
}

TEST(PlanArenaTest, WriterUnlinksAndStaleArenasAreRemovedByPrefix) {
  const std::string prefix = UniqueName("sidecar");
  {
    PlanArenaWriter w = PlanArenaWriter::Create(PlanArenaName(prefix, 1, 0), Options()).value();
    EXPECT_EQ(w.name(), prefix + "-plan-1-r0-p0");
    EXPECT_EQ(PlanArenaName(prefix, 1, 2, 5), prefix + "-plan-1-r2-p5");
    EXPECT_EQ(w.Ref().arena_name, w.name());
    EXPECT_EQ(w.Ref().generation, 7u);
  }
  EXPECT_FALSE(Segment::Exists(PlanArenaName(prefix, 1, 0)));

  // A "crashed" sidecar leaves arenas behind.
  for (uint32_t rank = 0; rank < 3; ++rank) {
    PlanArenaWriter w =
        PlanArenaWriter::Create(PlanArenaName(prefix, 2, rank, rank), Options()).value();
    w.KeepOnDestroy();
  }
  PlanArenaWriter unrelated = PlanArenaWriter::Create(UniqueName("other"), Options()).value();
  EXPECT_EQ(RemoveStaleArenas(prefix).value(), 3u);
  EXPECT_TRUE(Segment::ListWithPrefix(prefix).empty());
  EXPECT_TRUE(Segment::Exists(unrelated.name()));
  EXPECT_EQ(RemoveStaleArenas("").status().code(), StatusCode::kInvalidArgument);
}

// Fills the plan of WritePlan with bytes derived from `seed` instead of the offsets.
void WriteSeeded(PlanArenaWriter& w, uint8_t seed, uint64_t size = 3000) {
  const uint64_t off = w.Allocate(size).value();
  std::span<uint8_t> b = w.Bytes(off, size);
  for (uint64_t i = 0; i < size; ++i) b[i] = static_cast<uint8_t>(seed + i);
  ASSERT_TRUE(w.SetRoot(off).ok());
  ASSERT_TRUE(w.Publish().ok());
}

bool HoldsSeeded(const PlanArenaReader& r, uint8_t seed, uint64_t size = 3000) {
  auto b = r.Block(r.root_offset(), size);
  if (!b.ok()) return false;
  for (uint64_t i = 0; i < size; ++i) {
    if ((*b)[i] != static_cast<uint8_t>(seed + i)) return false;
  }
  return true;
}

TEST(PlanArenaTest, ConsumedArenaIsRewrittenUnderANewGeneration) {
  const std::string name = UniqueName("arena");
  PlanArenaWriter w = PlanArenaWriter::Create(name, Options()).value();
  // Only a consumed arena may be rewritten: a rank may still read a READY one.
  EXPECT_EQ(w.Reuse(8, 4).code(), StatusCode::kFailedPrecondition);
  WriteSeeded(w, 1);
  EXPECT_EQ(w.Reuse(8, 4).code(), StatusCode::kFailedPrecondition);
  PlanArenaReader r = PlanArenaReader::Open(name, 7).value();
  EXPECT_TRUE(HoldsSeeded(r, 1));
  ASSERT_TRUE(r.MarkConsumed().ok());

  ASSERT_TRUE(w.Reuse(8, 4).ok());
  EXPECT_EQ(w.state(), ArenaState::kWriting);
  EXPECT_EQ(w.used_bytes(), kArenaDataOffset);
  EXPECT_EQ(w.generation(), 8u);
  EXPECT_EQ(w.Reuse(9, 4).code(), StatusCode::kFailedPrecondition);
  // While it is rewritten the kept mapping is refused for any generation.
  EXPECT_EQ(r.Rebind(8).code(), StatusCode::kFailedPrecondition);
  WriteSeeded(w, 50, 2000);

  // A stale PLAN (the old generation) is refused, on the kept mapping and by name.
  Status s = r.Rebind(7);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("generation 8, expected 7"), std::string::npos) << s.message();
  EXPECT_EQ(PlanArenaReader::Open(name, 7).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(r.generation(), 7u);  // a failed Rebind keeps the old snapshot

  ASSERT_TRUE(r.Rebind(8).ok());
  EXPECT_EQ(r.generation(), 8u);
  EXPECT_EQ(r.sync_id(), 4u);
  EXPECT_EQ(r.used_bytes(), kArenaDataOffset + 2000);
  EXPECT_TRUE(HoldsSeeded(r, 50, 2000));
  EXPECT_EQ(r.Block(r.root_offset(), 3000).status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(r.MarkConsumed().ok());
}

TEST(PlanArenaTest, RetiredArenaCannotBeConsumedOrReused) {
  const std::string name = UniqueName("arena");
  PlanArenaWriter w = PlanArenaWriter::Create(name, Options()).value();
  WriteSeeded(w, 3);
  PlanArenaReader r = PlanArenaReader::Open(name, 7).value();
  // The sidecar gives the sync up while the rank copies the part out.
  EXPECT_EQ(w.Retire(), ArenaState::kReady);
  EXPECT_EQ(r.state(), ArenaState::kRetired);
  Status s = r.MarkConsumed();
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("RETIRED"), std::string::npos) << s.message();
  EXPECT_EQ(r.CheckValid().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(r.Rebind(7).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(w.Reuse(8, 4).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(PlanArenaReader::Open(name, 7).status().code(), StatusCode::kFailedPrecondition);
}

TEST(PlanArenaTest, PoolReusesConsumedArenasWithinItsBound) {
  const std::string prefix = UniqueName("sidecar");
  const uint64_t cap = 64 << 10;
  PlanArenaCache rank;
  {
    PlanArenaPool pool(prefix, 2);
    PlanArenaWriter* a = pool.Acquire(cap, 1, 10, 2).value();
    EXPECT_EQ(a->name(), PlanArenaPoolName(prefix, 2, 0));
    EXPECT_EQ(a->name(), prefix + "-plan-r2-a0");
    EXPECT_EQ(a->capacity(), cap);
    WriteSeeded(*a, 1);
    // Slot 0 is READY (not consumed): a second arena.
    PlanArenaWriter* b = pool.Acquire(cap, 2, 10, 2).value();
    EXPECT_EQ(b->name(), PlanArenaPoolName(prefix, 2, 1));
    WriteSeeded(*b, 2);
    // Both in flight: the bound holds.
    EXPECT_EQ(pool.Acquire(cap, 3, 10, 2).status().code(), StatusCode::kResourceExhausted);
    EXPECT_EQ(pool.arenas(), 2u);
    EXPECT_EQ(pool.mapped_bytes(), 2 * cap);

    // The rank consumes part 1; the next part rewrites the same arena, and the next sync too.
    PlanArenaReader* r = rank.Open(a->name(), 1).value();
    EXPECT_TRUE(HoldsSeeded(*r, 1));
    ASSERT_TRUE(r->MarkConsumed().ok());
    EXPECT_EQ(pool.Acquire(cap, 3, 10, 2).value(), a);
    EXPECT_EQ(a->generation(), 3u);
    WriteSeeded(*a, 3);
    EXPECT_EQ(rank.Open(a->name(), 3).value(), r);  // the kept mapping, re-checked
    EXPECT_TRUE(HoldsSeeded(*r, 3));
    ASSERT_TRUE(r->MarkConsumed().ok());
    PlanArenaReader* rb = rank.Open(b->name(), 2).value();
    ASSERT_TRUE(rb->MarkConsumed().ok());
    EXPECT_EQ(rank.size(), 2u);
    EXPECT_EQ(pool.Acquire(cap, 4, 11, 2).value(), a);  // the lowest consumed slot first
    WriteSeeded(*a, 4);
    EXPECT_EQ(rank.Open(a->name(), 4).value(), r);
    ASSERT_TRUE(r->MarkConsumed().ok());

    // A smaller bound and another capacity: consumed arenas that no longer fit are retired.
    PlanArenaWriter* c = pool.Acquire(2 * cap, 5, 12, 1).value();
    EXPECT_EQ(c->capacity(), 2 * cap);
    EXPECT_EQ(c->name(), PlanArenaPoolName(prefix, 2, 0));
    EXPECT_EQ(pool.arenas(), 1u);
    EXPECT_FALSE(Segment::Exists(PlanArenaPoolName(prefix, 2, 1)));
    EXPECT_EQ(rank.Sweep(), 2u);  // both kept mappings were of retired arenas
    WriteSeeded(*c, 5);
    // The name now refers to a new segment: the cache opens it anew.
    r = rank.Open(c->name(), 5).value();
    EXPECT_TRUE(HoldsSeeded(*r, 5));
    EXPECT_EQ(r->MarkConsumed().code(), StatusCode::kOk);

    // A sync that ends with a part sent and not taken: the arena is retired, never reused.
    PlanArenaWriter* d = pool.Acquire(2 * cap, 6, 13, 1).value();
    EXPECT_EQ(d, c);
    WriteSeeded(*d, 6);
    EXPECT_EQ(pool.RetireUnconsumed(), 1u);
    EXPECT_EQ(pool.arenas(), 0u);
    EXPECT_EQ(rank.Sweep(), 1u);
    EXPECT_TRUE(Segment::ListWithPrefix(prefix).empty());
    d = pool.Acquire(2 * cap, 7, 14, 1).value();
    WriteSeeded(*d, 7);
    EXPECT_EQ(rank.Open(d->name(), 6).status().code(), StatusCode::kFailedPrecondition);
    EXPECT_TRUE(HoldsSeeded(*rank.Open(d->name(), 7).value(), 7));
  }
  // The pool retires and unlinks its arenas when destroyed.
  EXPECT_TRUE(Segment::ListWithPrefix(prefix).empty());
  EXPECT_EQ(rank.Sweep(), 1u);
  EXPECT_EQ(rank.size(), 0u);
}

TEST(PlanArenaTest, CacheKeepsAtMostItsBound) {
  const std::string prefix = UniqueName("sidecar");
  std::vector<PlanArenaWriter> arenas;
  PlanArenaCache cache(2);
  for (uint32_t i = 0; i < 3; ++i) {
    arenas.push_back(PlanArenaWriter::Create(PlanArenaPoolName(prefix, 0, i), Options()).value());
    WriteSeeded(arenas.back(), static_cast<uint8_t>(i));
    ASSERT_TRUE(cache.Open(arenas.back().name(), 7).ok());
    EXPECT_LE(cache.size(), 2u);
  }
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_EQ(cache.Open(UniqueName("none"), 7).status().code(), StatusCode::kNotFound);
  cache.Clear();
  EXPECT_EQ(cache.size(), 0u);
}

TEST(PlanArenaTest, RankProcessKeepsArenasMappedAcrossParts) {
  // Another process consumes 40 parts through a pool of two arenas, each part found by its
  // generation in one of the two names, as a rank finds the arena a PLAN names.
  const std::string prefix = UniqueName("sidecar");
  constexpr uint64_t kParts = 40;
  PlanArenaPool pool(prefix, 0);
  pid_t child = ForkChild([&] {
    PlanArenaCache cache;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    for (uint64_t gen = 1; gen <= kParts; ++gen) {
      PlanArenaReader* r = nullptr;
      while (r == nullptr) {
        if (std::chrono::steady_clock::now() > deadline) return 1;
        for (uint32_t slot = 0; slot < 2 && r == nullptr; ++slot) {
          auto got = cache.Open(PlanArenaPoolName(prefix, 0, slot), gen);
          if (got.ok()) r = *got;
        }
        if (r == nullptr) std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
      if (!HoldsSeeded(*r, static_cast<uint8_t>(gen))) return 2;
      if (!r->MarkConsumed().ok()) return 3;
    }
    // Each name was mapped once, however many parts it carried.
    return cache.opens() <= 2 && cache.size() <= 2 ? 0 : 4;
  });
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  for (uint64_t gen = 1; gen <= kParts; ++gen) {
    StatusOr<PlanArenaWriter*> a = pool.Acquire(64 << 10, gen, 1, 2);
    while (!a.ok() && std::chrono::steady_clock::now() < deadline) {
      ASSERT_EQ(a.status().code(), StatusCode::kResourceExhausted);
      std::this_thread::sleep_for(std::chrono::microseconds(200));
      a = pool.Acquire(64 << 10, gen, 1, 2);
    }
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    WriteSeeded(**a, static_cast<uint8_t>(gen));
  }
  EXPECT_EQ(WaitChild(child), 0);
  EXPECT_EQ(pool.arenas(), 2u);
}

TEST(PlanArenaTest, RankKilledMidPartLeavesAnArenaThatIsRetired) {
  const std::string prefix = UniqueName("sidecar");
  PlanArenaPool pool(prefix, 0);
  PlanArenaWriter* a = pool.Acquire(64 << 10, 1, 1, 1).value();
  WriteSeeded(*a, 1);
  // The rank opens the part and is killed before it consumed it.
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  pid_t child = ForkChild([&] {
    auto r = PlanArenaReader::Open(PlanArenaPoolName(prefix, 0, 0), 1);
    char c = r.ok() ? 'y' : 'n';
    if (write(ready[1], &c, 1) != 1) return 1;
    pause();
    return 0;
  });
  char c = 0;
  ASSERT_EQ(read(ready[0], &c, 1), 1);
  EXPECT_EQ(c, 'y');
  kill(child, SIGKILL);
  WaitChild(child);
  close(ready[0]);
  close(ready[1]);
  EXPECT_EQ(a->state(), ArenaState::kReady);
  // Never rewritten while READY; the sync ends and the arena is retired instead.
  EXPECT_EQ(pool.Acquire(64 << 10, 2, 2, 1).status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(pool.RetireUnconsumed(), 1u);
  // The next sync gets a new arena under the name; the restarted rank reads it.
  PlanArenaWriter* b = pool.Acquire(64 << 10, 2, 2, 1).value();
  WriteSeeded(*b, 2);
  PlanArenaCache cache;
  PlanArenaReader* r = cache.Open(PlanArenaPoolName(prefix, 0, 0), 2).value();
  EXPECT_TRUE(HoldsSeeded(*r, 2));
  EXPECT_TRUE(r->MarkConsumed().ok());
}

TEST(PlanArenaTest, RestartedSidecarRetiresWhatItsPredecessorLeft) {
  const std::string prefix = UniqueName("sidecar");
  // A sidecar that dies (no destructors run) with one arena consumed and one in flight.
  pid_t child = ForkChild([&] {
    auto* pool = new PlanArenaPool(prefix, 0);
    PlanArenaWriter* a = pool->Acquire(64 << 10, 1, 1, 2).value();
    WriteSeeded(*a, 1);
    PlanArenaWriter* b = pool->Acquire(64 << 10, 2, 1, 2).value();
    WriteSeeded(*b, 2);
    return 0;  // the pool is leaked: its arenas stay
  });
  ASSERT_EQ(WaitChild(child), 0);
  EXPECT_EQ(Segment::ListWithPrefix(prefix + "-plan-").size(), 2u);
  PlanArenaCache rank;
  PlanArenaReader* r = rank.Open(PlanArenaPoolName(prefix, 0, 0), 1).value();
  ASSERT_TRUE(r->MarkConsumed().ok());
  PlanArenaReader* in_flight = rank.Open(PlanArenaPoolName(prefix, 0, 1), 2).value();
  EXPECT_EQ(rank.size(), 2u);

  // The successor removes them; the rank's copy in flight cannot be consumed, and the rank
  // drops both mappings.
  EXPECT_EQ(RemoveStaleArenas(prefix).value(), 2u);
  EXPECT_TRUE(Segment::ListWithPrefix(prefix + "-plan-").empty());
  EXPECT_EQ(in_flight->MarkConsumed().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(rank.Sweep(), 2u);

  // The successor's generations differ (its instance generation is higher): a kept mapping of
  // a predecessor's arena never passes for one of its parts.
  PlanArenaPool pool(prefix, 0);
  PlanArenaWriter* a = pool.Acquire(64 << 10, (uint64_t{2} << 32) + 1, 5, 2).value();
  WriteSeeded(*a, 9);
  EXPECT_EQ(rank.Open(a->name(), 1).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(HoldsSeeded(*rank.Open(a->name(), (uint64_t{2} << 32) + 1).value(), 9));
}

}  // namespace
}  // namespace deltakv::shm
