// PlanArena: allocation, publication, the READY + generation checks a rank makes, bounds checks,
// corrupt headers, cross-process consumption and stale-arena cleanup.
#include "shm/plan_arena.h"

#include <gtest/gtest.h>

#include <cstring>

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

}  // namespace
}  // namespace deltakv::shm
