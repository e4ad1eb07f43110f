// PlanSink: the planner's routing of decoded runs. Runs closer than kPlanMergeGap zero bytes
// become one piece with the gap as zero XOR bytes; pieces follow the layout's shards; for any
// split of a sparse buffer into runs (whole runs, short runs, runs with zeros inside, gaps of
// every size around the merge limit) the pieces rebuild exactly the buffer's bytes per rank.
#include "plan_sink.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <tuple>
#include <vector>

#include "plan_parts_output.h"

namespace deltakv::deltasync {
namespace {

struct Collect final : public PlanOutput {
  struct Piece {
    uint32_t rank;
    uint64_t local, canonical;
    std::vector<uint8_t> bytes;
  };
  Status Add(uint32_t rank, uint32_t, uint64_t local, uint64_t canonical,
             std::span<const uint8_t> bytes, bool) override {
    pieces.push_back({rank, local, canonical, {bytes.begin(), bytes.end()}});
    return Status::Ok();
  }
  std::vector<Piece> pieces;
};

// fn(start, end) for each maximal run of nonzero bytes of `x`, in order.
template <typename F>
void ForEachNonzeroRun(const std::vector<uint8_t>& x, F fn) {
  for (uint64_t i = 0; i < x.size();) {
    if (x[i] == 0) {
      ++i;
      continue;
    }
    uint64_t e = i;
    while (e < x.size() && x[e] != 0) ++e;
    fn(i, e);
    i = e;
  }
}

// The nonzero bytes of `x` as the sparse walker hands them over: position << 8 | value.
std::vector<uint64_t> Entries(const std::vector<uint8_t>& x) {
  std::vector<uint64_t> entries;
  for (uint64_t i = 0; i < x.size(); ++i) {
    if (x[i] != 0) entries.push_back(i << 8 | x[i]);
  }
  return entries;
}

TEST(PlanSink, MergesRunsWithinTheGapAndNotBeyond) {
  auto layout = TensorLayout::Replicated({4096}, DType::kU8, 1);
  ASSERT_TRUE(layout.ok());
  Collect out;
  PlanSink sink(*layout, 0, 0, out, nullptr);
  const std::vector<uint8_t> one = {7};
  ASSERT_TRUE(sink.OnRun(100, one).ok());
  ASSERT_TRUE(sink.OnRun(101 + kPlanMergeGap, one).ok());      // gap of exactly the limit
  ASSERT_TRUE(sink.OnRun(102 + 2 * kPlanMergeGap + 1, one).ok());  // one more: a new piece
  ASSERT_TRUE(sink.Flush().ok());
  ASSERT_EQ(out.pieces.size(), 2u);
  EXPECT_EQ(out.pieces[0].canonical, 100u);
  std::vector<uint8_t> want(kPlanMergeGap + 2, 0);
  want.front() = want.back() = 7;
  EXPECT_EQ(out.pieces[0].bytes, want);
  EXPECT_EQ(out.pieces[1].canonical, 102 + 2 * kPlanMergeGap + 1);
  EXPECT_EQ(out.pieces[1].bytes, one);
}

TEST(PlanSink, AnySplitRebuildsTheBufferPerRank) {
  // Rows sharded over 2 ranks, the frame starting at canonical offset 1000 of the tensor.
  const uint64_t rows = 64, row_bytes = 512, frame_offset = 1000;
  auto layout = TensorLayout::ShardDim0({rows, row_bytes}, DType::kU8, 2);
  ASSERT_TRUE(layout.ok());
  const uint64_t total = rows * row_bytes, frame = total - frame_offset;
  std::mt19937_64 rng(21);
  for (int round = 0; round < 60; ++round) {
    std::vector<uint8_t> x(frame, 0);
    const double density = (round % 3 == 0) ? 0.2 : (round % 3 == 1 ? 0.02 : 0.003);
    for (auto& b : x) {
      if (std::uniform_real_distribution<double>(0, 1)(rng) < density) {
        b = static_cast<uint8_t>(1 + rng() % 255);
      }
    }
    Collect out;
    PlanSink sink(*layout, 0, frame_offset, out, nullptr);
    // Runs in increasing order: maximal nonzero runs, cut at random points, sometimes with the
    // zeros after them included (a decoder may merge nearby nonzeros).
    for (uint64_t i = 0; i < frame;) {
      if (x[i] == 0) {
        ++i;
        continue;
      }
      uint64_t e = i;
      while (e < frame && x[e] != 0) ++e;
      if (rng() % 4 == 0) e = std::min<uint64_t>(frame, e + rng() % 12);
      for (uint64_t a = i; a < e;) {
        const uint64_t b = std::min<uint64_t>(e, a + 1 + rng() % 10);
        ASSERT_TRUE(sink.OnRun(a, std::span<const uint8_t>(x.data() + a, b - a)).ok());
        a = b;
      }
      i = e;
    }
    ASSERT_TRUE(sink.Flush().ok());
    // Rebuild each rank's local shard from the pieces.
    const uint64_t shard = total / 2;
    std::vector<std::vector<uint8_t>> local(2, std::vector<uint8_t>(shard, 0));
    std::vector<std::vector<bool>> seen(2, std::vector<bool>(shard, false));
    for (const Collect::Piece& p : out.pieces) {
      ASSERT_LT(p.rank, 2u);
      ASSERT_EQ(p.local, p.canonical - p.rank * shard);
      ASSERT_LE(p.local + p.bytes.size(), shard);
      for (size_t k = 0; k < p.bytes.size(); ++k) {
        ASSERT_FALSE(seen[p.rank][p.local + k]) << "byte in two pieces";
        seen[p.rank][p.local + k] = true;
        local[p.rank][p.local + k] = p.bytes[k];
      }
    }
    for (uint64_t c = frame_offset; c < total; ++c) {
      const uint32_t r = c < shard ? 0 : 1;
      ASSERT_EQ(local[r][c - r * shard], x[c - frame_offset]) << "round " << round << " at " << c;
    }
  }
}

// Nonzero bytes one by one (OnBytes, the sparse walker's delivery) in batches of any size give
// exactly the pieces that maximal runs of the same bytes give through OnRun: merged across
// gaps of up to kPlanMergeGap zeros (also across batches), split at shard edges, dense runs
// cut at kPlanMaxPendingRun; and a small tensor's dense buffer is filled the same way.
TEST(PlanSink, BytesOneByOneGiveThePiecesOfTheirRuns) {
  const uint64_t rows = 64, row_bytes = 64 << 10, frame_offset = 3000;
  auto layout = TensorLayout::ShardDim0({rows, row_bytes}, DType::kU8, 4);
  ASSERT_TRUE(layout.ok());
  const uint64_t total = rows * row_bytes, frame = total - frame_offset;
  std::mt19937_64 rng(5);
  for (int round = 0; round < 12; ++round) {
    std::vector<uint8_t> x(frame, 0);
    if (round % 4 == 3) {
      // Dense: a run longer than kPlanMaxPendingRun.
      for (uint64_t i = 100; i < 100 + kPlanMaxPendingRun + 5000; ++i) {
        x[i] = static_cast<uint8_t>(1 + rng() % 255);
      }
    } else {
      const uint64_t gap_max = round % 4 == 0 ? 3 : (round % 4 == 1 ? 2 * kPlanMergeGap : 4000);
      for (uint64_t i = rng() % 50; i < frame; i += 1 + rng() % gap_max) {
        x[i] = static_cast<uint8_t>(1 + rng() % 255);
      }
    }
    const std::vector<uint64_t> entries = Entries(x);
    Collect by_runs, by_bytes;
    PlanSink runs(*layout, 0, frame_offset, by_runs, nullptr);
    ForEachNonzeroRun(x, [&](uint64_t i, uint64_t e) {
      ASSERT_TRUE(runs.OnRun(i, std::span<const uint8_t>(x.data() + i, e - i)).ok());
    });
    ASSERT_TRUE(runs.Flush().ok());
    PlanSink bytes(*layout, 0, frame_offset, by_bytes, nullptr);
    ASSERT_TRUE(bytes.TakesBytes());
    for (size_t i = 0; i < entries.size();) {
      const size_t n = std::min<size_t>(entries.size() - i, 1 + rng() % 3000);
      ASSERT_TRUE(bytes.OnBytes(entries.data() + i, n, 0).ok());
      i += n;
    }
    ASSERT_TRUE(bytes.Flush().ok());
    // Both rebuild the frame's bytes exactly, each byte in one piece.
    const uint64_t shard = total / 4;
    for (const Collect* out : {&by_runs, &by_bytes}) {
      std::vector<uint8_t> rebuilt(total, 0);
      std::vector<bool> seen(total, false);
      for (const Collect::Piece& p : out->pieces) {
        ASSERT_LT(p.rank, 4u);
        ASSERT_EQ(p.local, p.canonical - p.rank * shard);
        ASSERT_LE(p.local + p.bytes.size(), shard);
        ASSERT_LE(p.bytes.size(), kPlanMaxPendingRun + kPlanMergeGap);
        for (size_t k = 0; k < p.bytes.size(); ++k) {
          ASSERT_FALSE(seen[p.canonical + k]) << "byte in two pieces";
          seen[p.canonical + k] = true;
          rebuilt[p.canonical + k] = p.bytes[k];
        }
      }
      ASSERT_TRUE(std::equal(x.begin(), x.end(), rebuilt.begin() + frame_offset))
          << "round " << round << (out == &by_bytes ? " bytes" : " runs");
    }
    // Where no merged run comes near kPlanMaxPendingRun (which a run may pass by its own length
    // and a byte may not), the pieces are the same.
    if (round % 4 != 1 && round % 4 != 2) continue;
    ASSERT_EQ(by_bytes.pieces.size(), by_runs.pieces.size()) << "round " << round;
    for (size_t k = 0; k < by_runs.pieces.size(); ++k) {
      const Collect::Piece &a = by_runs.pieces[k], &b = by_bytes.pieces[k];
      ASSERT_EQ(a.rank, b.rank) << "round " << round << " piece " << k;
      ASSERT_EQ(a.local, b.local) << "round " << round << " piece " << k;
      ASSERT_EQ(a.canonical, b.canonical) << "round " << round << " piece " << k;
      ASSERT_EQ(a.bytes, b.bytes) << "round " << round << " piece " << k;
    }
  }
  // A small tensor: bytes land in its dense buffer at their canonical offsets (with `base`);
  // one past the end is refused.
  auto small = TensorLayout::Replicated({256}, DType::kU8, 2);
  ASSERT_TRUE(small.ok());
  Collect none;
  std::vector<uint8_t> dense(256, 0);
  PlanSink sink(*small, 0, 16, none, &dense);
  const std::vector<uint64_t> e = {uint64_t{0} << 8 | 5, uint64_t{7} << 8 | 9};
  ASSERT_TRUE(sink.OnBytes(e.data(), e.size(), 100).ok());
  EXPECT_EQ(dense[116], 5);
  EXPECT_EQ(dense[123], 9);
  const std::vector<uint64_t> past = {uint64_t{140} << 8 | 1};
  Status st = sink.OnBytes(past.data(), past.size(), 100);
  EXPECT_EQ(st.code(), StatusCode::kDataLoss) << st.ToString();
  EXPECT_TRUE(none.pieces.empty());
}

// The planner's pieces, whatever path they take (short pieces inside a remembered layout
// segment, AddShort refused now and then, general pieces), are exactly the pieces that
// TensorLayout::ForEachPiece gives each run merged across gaps of at most kPlanMergeGap zeros:
// rank, offsets, bytes and owner flag, in the same order, for replicated, sharded, fused and
// KV-replicated layouts.
TEST(PlanSink, PiecesAreTheLayoutsPiecesOfTheMergedRuns) {
  struct Piece {
    uint32_t rank;
    uint64_t local, canonical;
    std::vector<uint8_t> bytes;
    bool owner;
    bool operator==(const Piece&) const = default;
  };
  // Takes short pieces, but refuses every seventh (as a full part does): Add gets those.
  struct Output final : public PlanOutput {
    Status Add(uint32_t rank, uint32_t, uint64_t local, uint64_t canonical,
               std::span<const uint8_t> bytes, bool owner) override {
      pieces.push_back({rank, local, canonical, {bytes.begin(), bytes.end()}, owner});
      return Status::Ok();
    }
    bool AddShort(uint32_t rank, uint32_t tensor, uint64_t local, uint64_t canonical,
                  std::span<const uint8_t> bytes, bool owner) override {
      if (++calls % 7 == 0) return false;
      EXPECT_LE(bytes.size(), WritePlanWriter::kShortBytes);
      return Add(rank, tensor, local, canonical, bytes, owner).ok();
    }
    uint64_t calls = 0;
    std::vector<Piece> pieces;
  };
  std::vector<TensorLayout> layouts;
  auto add = [&](StatusOr<TensorLayout> l) {
    ASSERT_TRUE(l.ok()) << l.status().ToString();
    layouts.push_back(std::move(*l));
  };
  add(TensorLayout::Replicated({96, 512}, DType::kBF16, 3));
  add(TensorLayout::ShardDim0({96, 512}, DType::kBF16, 4));
  add(TensorLayout::ShardDim1({96, 512}, DType::kBF16, 4));
  auto qkv = QkvPartSpecs(8, 2, 16, {64}, 4);  // KV heads replicated twice
  ASSERT_TRUE(qkv.ok());
  add(TensorLayout::FusedPart(*qkv, 1, DType::kBF16, 4));
  add(TensorLayout::FusedCheckpoint(*qkv, DType::kBF16, 4));
  std::mt19937_64 rng(17);
  for (size_t li = 0; li < layouts.size(); ++li) {
    const TensorLayout& layout = layouts[li];
    const uint64_t total = layout.canonical_bytes();
    for (int round = 0; round < 6; ++round) {
      std::vector<uint8_t> x(total, 0);
      const uint64_t gap_max = round % 3 == 0 ? 6 : (round % 3 == 1 ? 3 * kPlanMergeGap : 900);
      for (uint64_t i = rng() % 20; i < total; i += 1 + rng() % gap_max) {
        x[i] = static_cast<uint8_t>(1 + rng() % 255);
      }
      // The planner: the bytes one by one, in batches.
      Output got;
      PlanSink sink(layout, 0, 0, got, nullptr);
      const std::vector<uint64_t> entries = Entries(x);
      for (size_t i = 0; i < entries.size();) {
        const size_t n = std::min<size_t>(entries.size() - i, 1 + rng() % 500);
        ASSERT_TRUE(sink.OnBytes(entries.data() + i, n, 0).ok());
        i += n;
      }
      ASSERT_TRUE(sink.Flush().ok());
      // The reference: merge, then ForEachPiece without a cursor.
      std::vector<Piece> want;
      auto route = [&](uint64_t start, uint64_t end) {
        Status st = layout.ForEachPiece(start, end - start, [&](const LayoutPiece& p) {
          const auto first = x.begin() + static_cast<ptrdiff_t>(p.canonical_offset);
          want.push_back({p.rank, p.local_offset, p.canonical_offset,
                          {first, first + static_cast<ptrdiff_t>(p.length)}, p.owner});
        });
        ASSERT_TRUE(st.ok()) << st.ToString();
      };
      uint64_t start = 0, end = 0;
      for (uint64_t e : entries) {
        const uint64_t p = e >> 8;
        if (end != 0 && p - end <= kPlanMergeGap && end - start < kPlanMaxPendingRun) {
          end = p + 1;
          continue;
        }
        if (end != 0) route(start, end);
        start = p;
        end = p + 1;
      }
      if (end != 0) route(start, end);
      ASSERT_EQ(got.pieces.size(), want.size()) << "layout " << li << " round " << round;
      for (size_t k = 0; k < want.size(); ++k) {
        ASSERT_TRUE(got.pieces[k] == want[k]) << "layout " << li << " round " << round
                                              << " piece " << k << " rank " << want[k].rank
                                              << " at " << want[k].canonical;
      }
    }
  }
}

TEST(PlanSink, LentWritersGiveTheSamePlans) {
  // Two frames' sinks (two tensors) take their bytes in alternating batches into small parts,
  // so parts fill up and are sent between a writer's lending and its next use: lending the
  // writers or not, every rank gets byte-identical parts, and the same records and lines.
  std::vector<TensorLayout> layouts;
  auto add = [&](StatusOr<TensorLayout> l) {
    ASSERT_TRUE(l.ok()) << l.status().ToString();
    layouts.push_back(std::move(*l));
  };
  add(TensorLayout::Replicated({96, 512}, DType::kBF16, 4));
  add(TensorLayout::ShardDim0({96, 512}, DType::kBF16, 4));
  add(TensorLayout::ShardDim1({96, 512}, DType::kBF16, 4));
  auto qkv = QkvPartSpecs(8, 2, 16, {64}, 4);
  ASSERT_TRUE(qkv.ok());
  add(TensorLayout::FusedCheckpoint(*qkv, DType::kBF16, 4));
  std::mt19937_64 rng(23);
  for (size_t a = 0; a < layouts.size(); ++a) {
    const size_t b = (a + 1) % layouts.size();
    for (int round = 0; round < 4; ++round) {
      std::vector<std::vector<uint64_t>> entries(2);
      for (int f = 0; f < 2; ++f) {
        const TensorLayout& layout = layouts[f == 0 ? a : b];
        std::vector<uint8_t> x(layout.canonical_bytes(), 0);
        const uint64_t gap = round % 2 == 0 ? 40 : 3 * kPlanMergeGap;
        for (uint64_t i = rng() % 20; i < x.size(); i += 1 + rng() % gap) {
          x[i] = static_cast<uint8_t>(1 + rng() % 255);
        }
        entries[f] = Entries(x);
      }
      const uint64_t seed = rng();
      auto plan = [&](bool lend) {
        PlanPartsOutput out(4, 2, 2048 + 1024 * (round % 3), lend);
        PlanSink first(layouts[a], 0, 0, out, nullptr), second(layouts[b], 1, 0, out, nullptr);
        PlanSink* sinks[2] = {&first, &second};
        std::mt19937_64 batches(seed);
        size_t at[2] = {0, 0};
        while (at[0] < entries[0].size() || at[1] < entries[1].size()) {
          for (int f = 0; f < 2; ++f) {
            const size_t n = std::min<size_t>(entries[f].size() - at[f], 1 + batches() % 300);
            EXPECT_TRUE(sinks[f]->OnBytes(entries[f].data() + at[f], n, 0).ok());
            at[f] += n;
          }
        }
        EXPECT_TRUE(first.Flush().ok());
        EXPECT_TRUE(second.Flush().ok());
        EXPECT_TRUE(out.Finish().ok());
        return std::make_tuple(out.Parts(), out.records, out.touched);
      };
      const auto [lent_parts, lent_records, lent_lines] = plan(true);
      const auto [parts, records, lines] = plan(false);
      ASSERT_EQ(lent_parts, parts) << "layouts " << a << ", " << b << " round " << round;
      EXPECT_EQ(lent_records, records);
      EXPECT_EQ(lent_lines, lines);
      EXPECT_GT(records, 0u);
    }
  }
}

}  // namespace
}  // namespace deltakv::deltasync
