// TensorLayout against a reference that materializes every tensor: the canonical tensor holds
// distinct ids, each rank's local tensor is built with the engine's slicing rule written
// plainly (slice, concatenate), and every query is compared byte by byte.
#include "deltasync/layout.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

namespace deltakv::deltasync {
namespace {

using Shape = std::vector<uint64_t>;

// ---------------------------------------------------------------------------------------------
// Reference: element-id tensors, slicing and concatenation, written the slow obvious way.

struct IdTensor {
  Shape shape;
  std::vector<int64_t> ids;  // canonical element index, or -1 for "not this tensor"
};

uint64_t Numel(const Shape& shape) {
  uint64_t n = 1;
  for (uint64_t d : shape) n *= d;
  return n;
}

IdTensor Iota(const Shape& shape, int64_t first = 0) {
  IdTensor t{shape, std::vector<int64_t>(Numel(shape))};
  for (size_t i = 0; i < t.ids.size(); ++i) t.ids[i] = first + static_cast<int64_t>(i);
  return t;
}

IdTensor Blank(const Shape& shape) { return {shape, std::vector<int64_t>(Numel(shape), -1)}; }

// Multi-index of flat element `flat` in `shape`.
std::vector<uint64_t> Unflatten(uint64_t flat, const Shape& shape) {
  std::vector<uint64_t> idx(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    idx[d] = flat % shape[d];
    flat /= shape[d];
  }
  return idx;
}

uint64_t Flatten(const std::vector<uint64_t>& idx, const Shape& shape) {
  uint64_t flat = 0;
  for (size_t d = 0; d < shape.size(); ++d) flat = flat * shape[d] + idx[d];
  return flat;
}

// t[..., begin:begin+count, ...] along `dim`.
IdTensor Slice(const IdTensor& t, size_t dim, uint64_t begin, uint64_t count) {
  Shape out_shape = t.shape;
  out_shape[dim] = count;
  IdTensor out = Blank(out_shape);
  for (uint64_t i = 0; i < out.ids.size(); ++i) {
    std::vector<uint64_t> idx = Unflatten(i, out_shape);
    idx[dim] += begin;
    out.ids[i] = t.ids[Flatten(idx, t.shape)];
  }
  return out;
}

// Concatenation along `dim`.
IdTensor Concat(const std::vector<IdTensor>& ts, size_t dim) {
  Shape out_shape = ts[0].shape;
  out_shape[dim] = 0;
  for (const IdTensor& t : ts) out_shape[dim] += t.shape[dim];
  IdTensor out = Blank(out_shape);
  uint64_t at = 0;
  for (const IdTensor& t : ts) {
    for (uint64_t i = 0; i < t.ids.size(); ++i) {
      std::vector<uint64_t> idx = Unflatten(i, t.shape);
      idx[dim] += at;
      out.ids[Flatten(idx, out_shape)] = t.ids[i];
    }
    at += t.shape[dim];
  }
  return out;
}

struct Ref {
  uint64_t canonical_bytes = 0;
  std::vector<std::vector<int64_t>> local;  // [rank][local byte] -> canonical byte or -1
};

Ref ToBytes(uint64_t canonical_elements, const std::vector<IdTensor>& locals, DType dtype) {
  const uint64_t es = DTypeSize(dtype);
  Ref ref;
  ref.canonical_bytes = canonical_elements * es;
  for (const IdTensor& t : locals) {
    std::vector<int64_t>& bytes = ref.local.emplace_back(t.ids.size() * es, -1);
    for (uint64_t i = 0; i < bytes.size(); ++i) {
      const int64_t id = t.ids[i / es];
      if (id >= 0) bytes[i] = id * static_cast<int64_t>(es) + static_cast<int64_t>(i % es);
    }
  }
  return ref;
}

Ref RefReplicated(const Shape& shape, DType dtype, uint32_t world) {
  return ToBytes(Numel(shape), std::vector<IdTensor>(world, Iota(shape)), dtype);
}

Ref RefSharded(const Shape& shape, DType dtype, size_t dim, uint32_t tp) {
  const IdTensor canonical = Iota(shape);
  const uint64_t chunk = shape[dim] / tp;
  std::vector<IdTensor> locals;
  for (uint32_t r = 0; r < tp; ++r) locals.push_back(Slice(canonical, dim, r * chunk, chunk));
  return ToBytes(Numel(shape), locals, dtype);
}

// parts_ids: each part as the checkpoint holds it (ids or blank); local = [part0_r|part1_r|...]
// with rank r taking shard r / replicas of each part.
std::vector<IdTensor> FuseShards(const std::vector<IdTensor>& parts_ids,
                                 const std::vector<FusedPartSpec>& parts, uint32_t tp) {
  std::vector<IdTensor> locals;
  for (uint32_t r = 0; r < tp; ++r) {
    std::vector<IdTensor> slices;
    for (size_t p = 0; p < parts.size(); ++p) {
      const uint64_t shards = tp / parts[p].replicas;
      const uint64_t rows = parts[p].shape[0] / shards;
      slices.push_back(Slice(parts_ids[p], 0, (r / parts[p].replicas) * rows, rows));
    }
    locals.push_back(Concat(slices, 0));
  }
  return locals;
}

Ref RefFusedPart(const std::vector<FusedPartSpec>& parts, size_t part, DType dtype, uint32_t tp) {
  std::vector<IdTensor> ids;
  for (size_t p = 0; p < parts.size(); ++p) {
    ids.push_back(p == part ? Iota(parts[p].shape) : Blank(parts[p].shape));
  }
  return ToBytes(Numel(parts[part].shape), FuseShards(ids, parts, tp), dtype);
}

Ref RefFusedCheckpoint(const std::vector<FusedPartSpec>& parts, DType dtype, uint32_t tp) {
  Shape fused = parts[0].shape;
  fused[0] = 0;
  for (const FusedPartSpec& p : parts) fused[0] += p.shape[0];
  const IdTensor canonical = Iota(fused);
  std::vector<IdTensor> ids;
  uint64_t row = 0;
  for (const FusedPartSpec& p : parts) {
    ids.push_back(Slice(canonical, 0, row, p.shape[0]));
    row += p.shape[0];
  }
  return ToBytes(Numel(fused), FuseShards(ids, parts, tp), dtype);
}

// `full` is [E, ...]; rank g*tp+t holds experts [g*E/ep, (g+1)*E/ep), each with `dim` cut in
// num_parts parts and each part's t-th tp slice kept, concatenated on `dim`.
std::vector<IdTensor> ExpertLocals(const IdTensor& full, size_t dim, uint32_t num_parts,
                                   uint32_t ep, uint32_t tp) {
  const uint64_t per_group = full.shape[0] / ep;
  const uint64_t part_rows = full.shape[dim] / num_parts;
  const uint64_t shard_rows = part_rows / tp;
  std::vector<IdTensor> locals;
  for (uint32_t g = 0; g < ep; ++g) {
    for (uint32_t t = 0; t < tp; ++t) {
      std::vector<IdTensor> experts;
      for (uint64_t el = 0; el < per_group; ++el) {
        const IdTensor expert = Slice(full, 0, g * per_group + el, 1);
        std::vector<IdTensor> shards;
        for (uint32_t p = 0; p < num_parts; ++p) {
          shards.push_back(Slice(expert, dim, p * part_rows + t * shard_rows, shard_rows));
        }
        experts.push_back(Concat(shards, dim));
      }
      locals.push_back(Concat(experts, 0));
    }
  }
  return locals;
}

Ref RefMoeExperts(const Shape& shape, DType dtype, size_t dim, uint32_t num_parts, uint32_t ep,
                  uint32_t tp) {
  return ToBytes(Numel(shape), ExpertLocals(Iota(shape), dim, num_parts, ep, tp), dtype);
}

Ref RefMoeExpertPart(const Shape& shape, DType dtype, size_t dim, uint32_t part, uint32_t num_parts,
                     uint64_t experts, uint64_t expert, uint32_t ep, uint32_t tp) {
  Shape one = shape;
  one.insert(one.begin(), 1);  // [1, ...]
  std::vector<IdTensor> all_experts;
  for (uint64_t e = 0; e < experts; ++e) {
    std::vector<IdTensor> parts;
    for (uint32_t p = 0; p < num_parts; ++p) {
      parts.push_back(e == expert && p == part ? Iota(one) : Blank(one));
    }
    all_experts.push_back(Concat(parts, dim + 1));
  }
  return ToBytes(Numel(shape), ExpertLocals(Concat(all_experts, 0), dim + 1, num_parts, ep, tp),
                 dtype);
}

// ---------------------------------------------------------------------------------------------
// Checks.

std::vector<LayoutPiece> Pieces(const TensorLayout& layout, uint64_t offset, uint64_t length) {
  std::vector<LayoutPiece> pieces;
  Status s =
      layout.ForEachPiece(offset, length, [&](const LayoutPiece& p) { pieces.push_back(p); });
  EXPECT_TRUE(s.ok()) << s.ToString();
  return pieces;
}

std::string Describe(const LayoutPiece& p) {
  return "{rank " + std::to_string(p.rank) + " local " + std::to_string(p.local_offset) +
         " canonical " + std::to_string(p.canonical_offset) + " len " + std::to_string(p.length) +
         (p.owner ? " owner}" : "}");
}

std::string Describe(const std::vector<LayoutPiece>& ps) {
  std::string s;
  for (size_t i = 0; i < ps.size() && i < 40; ++i) s += Describe(ps[i]) + "\n";
  if (ps.size() > 40) s += "... (" + std::to_string(ps.size()) + " pieces)\n";
  return s;
}

class ReferenceChecker {
 public:
  ReferenceChecker(const TensorLayout& layout, const Ref& ref) : layout_(layout), ref_(ref) {
    const size_t world = ref.local.size();
    inverse_.assign(world, std::vector<int64_t>(ref.canonical_bytes, -1));
    owner_.assign(ref.canonical_bytes, -1);
    for (size_t r = 0; r < world; ++r) {
      for (size_t l = 0; l < ref.local[r].size(); ++l) {
        const int64_t c = ref.local[r][l];
        if (c < 0) continue;
        EXPECT_EQ(inverse_[r][c], -1) << "reference holds a canonical byte twice at one rank";
        inverse_[r][c] = static_cast<int64_t>(l);
      }
    }
    for (uint64_t c = 0; c < ref.canonical_bytes; ++c) {
      for (size_t r = 0; r < world && owner_[c] < 0; ++r) {
        if (inverse_[r][c] >= 0) owner_[c] = static_cast<int64_t>(r);
      }
    }
  }

  // Maximal pieces of canonical [begin, end) per the reference, in (canonical, rank) order.
  std::vector<LayoutPiece> Expected(uint64_t begin, uint64_t end) const {
    const size_t world = inverse_.size();
    std::vector<std::optional<LayoutPiece>> open(world);
    std::vector<LayoutPiece> out;
    for (uint64_t c = begin; c < end; ++c) {
      for (uint32_t r = 0; r < world; ++r) {
        const int64_t l = inverse_[r][c];
        std::optional<LayoutPiece>& o = open[r];
        const bool owner = owner_[c] == static_cast<int64_t>(r);
        if (l >= 0 && o && o->canonical_offset + o->length == c &&
            o->local_offset + o->length == static_cast<uint64_t>(l) && o->owner == owner) {
          ++o->length;
          continue;
        }
        if (o) out.push_back(*o);
        o.reset();
        if (l >= 0) o = LayoutPiece{r, static_cast<uint64_t>(l), c, 1, owner};
      }
    }
    for (auto& o : open) {
      if (o) out.push_back(*o);
    }
    std::sort(out.begin(), out.end(), [](const LayoutPiece& a, const LayoutPiece& b) {
      return a.canonical_offset != b.canonical_offset ? a.canonical_offset < b.canonical_offset
                                                      : a.rank < b.rank;
    });
    return out;
  }

  void CheckSizes() const {
    ASSERT_EQ(layout_.world(), ref_.local.size());
    ASSERT_EQ(layout_.canonical_bytes(), ref_.canonical_bytes);
    for (uint32_t r = 0; r < ref_.local.size(); ++r) {
      const RankBytes b = layout_.LocalBytes(r);
      EXPECT_EQ(b.total, ref_.local[r].size()) << "rank " << r;
      EXPECT_EQ(b.touched,
                static_cast<uint64_t>(std::count_if(ref_.local[r].begin(), ref_.local[r].end(),
                                                    [](int64_t c) { return c >= 0; })))
          << "rank " << r;
    }
    const RankBytes none = layout_.LocalBytes(layout_.world());
    EXPECT_EQ(none.total, 0u);
    EXPECT_EQ(none.touched, 0u);
  }

  // Every (rank, local byte) is hit exactly once by a full sweep; each canonical byte has one
  // owner piece; pieces equal the reference's maximal pieces.
  void CheckFullSweep() const {
    const std::vector<LayoutPiece> got = Pieces(layout_, 0, ref_.canonical_bytes);
    std::vector<std::vector<int>> hits(ref_.local.size());
    for (size_t r = 0; r < hits.size(); ++r) hits[r].assign(ref_.local[r].size(), 0);
    std::vector<int> owned(ref_.canonical_bytes, 0);
    for (const LayoutPiece& p : got) {
      ASSERT_LT(p.rank, hits.size());
      ASSERT_LE(p.local_offset + p.length, hits[p.rank].size()) << Describe(p);
      ASSERT_LE(p.canonical_offset + p.length, ref_.canonical_bytes) << Describe(p);
      for (uint64_t i = 0; i < p.length; ++i) {
        ++hits[p.rank][p.local_offset + i];
        ASSERT_EQ(ref_.local[p.rank][p.local_offset + i],
                  static_cast<int64_t>(p.canonical_offset + i))
            << Describe(p) << " byte " << i;
        if (p.owner) ++owned[p.canonical_offset + i];
      }
    }
    for (size_t r = 0; r < hits.size(); ++r) {
      for (size_t l = 0; l < hits[r].size(); ++l) {
        ASSERT_EQ(hits[r][l], ref_.local[r][l] >= 0 ? 1 : 0) << "rank " << r << " local " << l;
      }
    }
    for (uint64_t c = 0; c < ref_.canonical_bytes; ++c) {
      ASSERT_EQ(owned[c], 1) << "canonical byte " << c;
    }
    const std::vector<LayoutPiece> want = Expected(0, ref_.canonical_bytes);
    ASSERT_EQ(got, want) << "got\n" << Describe(got) << "want\n" << Describe(want);
  }

  void CheckRandomRuns(uint64_t seed, int runs) const {
    const uint64_t n = ref_.canonical_bytes;
    if (n == 0) return;
    std::mt19937_64 rng(seed);
    for (int i = 0; i < runs; ++i) {
      const uint64_t begin = rng() % n;
      const uint64_t max_len = n - begin;
      // Mostly short runs (mid-element starts and ends), some long ones.
      const uint64_t len =
          (i % 4 == 0) ? 1 + rng() % max_len : 1 + rng() % std::min<uint64_t>(max_len, 37);
      const std::vector<LayoutPiece> got = Pieces(layout_, begin, len);
      const std::vector<LayoutPiece> want = Expected(begin, begin + len);
      ASSERT_EQ(got, want) << "run [" << begin << ", +" << len << ")\ngot\n"
                           << Describe(got) << "want\n"
                           << Describe(want);
    }
    EXPECT_TRUE(Pieces(layout_, n / 2, 0).empty());
  }

  void CheckSingleBytes() const {
    const uint32_t world = layout_.world();
    for (uint32_t r = 0; r < world; ++r) {
      for (uint64_t c = 0; c < ref_.canonical_bytes; ++c) {
        const std::optional<uint64_t> l = layout_.CanonicalToLocal(r, c);
        const int64_t want = inverse_[r][c];
        ASSERT_EQ(l.has_value(), want >= 0) << "rank " << r << " canonical " << c;
        if (l) {
          ASSERT_EQ(*l, static_cast<uint64_t>(want)) << "rank " << r << " canonical " << c;
        }
      }
      for (uint64_t l = 0; l < ref_.local[r].size(); ++l) {
        const std::optional<uint64_t> c = layout_.LocalToCanonical(r, l);
        const int64_t want = ref_.local[r][l];
        ASSERT_EQ(c.has_value(), want >= 0) << "rank " << r << " local " << l;
        if (c) {
          ASSERT_EQ(*c, static_cast<uint64_t>(want)) << "rank " << r << " local " << l;
          ASSERT_EQ(layout_.CanonicalToLocal(r, *c), l);  // round trip
        }
      }
      EXPECT_FALSE(layout_.CanonicalToLocal(r, ref_.canonical_bytes).has_value());
      EXPECT_FALSE(layout_.LocalToCanonical(r, ref_.local[r].size()).has_value());
    }
    EXPECT_FALSE(layout_.CanonicalToLocal(world, 0).has_value());
    EXPECT_FALSE(layout_.LocalToCanonical(world, 0).has_value());
  }

  void CheckJsonRoundTrip() const {
    StatusOr<TensorLayout> back = TensorLayout::FromJson(layout_.ToJson());
    ASSERT_TRUE(back.ok()) << back.status().ToString() << " for " << layout_.ToJson();
    EXPECT_EQ(back->spec(), layout_.spec());
    EXPECT_EQ(back->ToJson(), layout_.ToJson());
    EXPECT_EQ(Pieces(*back, 0, ref_.canonical_bytes), Pieces(layout_, 0, ref_.canonical_bytes));
  }

 private:
  const TensorLayout& layout_;
  const Ref& ref_;
  std::vector<std::vector<int64_t>> inverse_;  // [rank][canonical byte] -> local byte or -1
  std::vector<int64_t> owner_;                 // [canonical byte] -> lowest holding rank
};

void CheckAll(const StatusOr<TensorLayout>& layout, const Ref& ref, uint64_t seed) {
  ASSERT_TRUE(layout.ok()) << layout.status().ToString();
  SCOPED_TRACE(layout->ToJson());
  ReferenceChecker checker(*layout, ref);
  ASSERT_NO_FATAL_FAILURE(checker.CheckSizes());
  ASSERT_NO_FATAL_FAILURE(checker.CheckFullSweep());
  ASSERT_NO_FATAL_FAILURE(checker.CheckRandomRuns(seed, 120));
  ASSERT_NO_FATAL_FAILURE(checker.CheckSingleBytes());
  ASSERT_NO_FATAL_FAILURE(checker.CheckJsonRoundTrip());
}

size_t PieceCount(const TensorLayout& layout, uint64_t offset, uint64_t length) {
  size_t n = 0;
  Status s = layout.ForEachPiece(offset, length, [&n](const LayoutPiece&) { ++n; });
  EXPECT_TRUE(s.ok()) << s.ToString();
  return n;
}

const std::vector<uint32_t> kTps = {1, 2, 4, 8};

// ---------------------------------------------------------------------------------------------
// Differential tests, one per layout kind.

TEST(LayoutReferenceTest, Replicated) {
  const std::vector<Shape> shapes = {{}, {5}, {3, 7}, {2, 3, 4}};
  const std::vector<DType> dtypes = {DType::kU8, DType::kBF16, DType::kF32, DType::kF64};
  uint64_t seed = 1;
  for (const Shape& shape : shapes) {
    for (DType dtype : dtypes) {
      for (uint32_t world : kTps) {
        CheckAll(TensorLayout::Replicated(shape, dtype, world), RefReplicated(shape, dtype, world),
                 seed++);
      }
    }
  }
}

TEST(LayoutReferenceTest, ShardedDim0AndDim1) {
  const std::vector<Shape> shapes = {{16}, {16, 6}, {8, 16}, {8, 8, 3}, {8, 16, 2, 3}};
  const std::vector<DType> dtypes = {DType::kU8, DType::kBF16, DType::kF32};
  uint64_t seed = 100;
  for (const Shape& shape : shapes) {
    for (uint32_t dim = 0; dim < std::min<size_t>(shape.size(), 3); ++dim) {
      for (DType dtype : dtypes) {
        for (uint32_t tp : kTps) {
          if (shape[dim] % tp != 0) continue;
          CheckAll(TensorLayout::Sharded(shape, dtype, dim, tp), RefSharded(shape, dtype, dim, tp),
                   seed++);
        }
      }
    }
  }
  CheckAll(TensorLayout::ShardDim0({8, 3}, DType::kBF16, 4), RefSharded({8, 3}, DType::kBF16, 0, 4),
           seed++);
  CheckAll(TensorLayout::ShardDim1({3, 8}, DType::kBF16, 4), RefSharded({3, 8}, DType::kBF16, 1, 4),
           seed++);
}

TEST(LayoutReferenceTest, QkvSeparateAndFused) {
  uint64_t seed = 1000;
  for (uint64_t num_heads : {8u, 16u}) {
    for (uint64_t num_kv_heads : {1u, 2u, 8u}) {
      for (uint32_t tp : kTps) {
        for (const Shape& trailing : {Shape{3}, Shape{}, Shape{2, 3}}) {
          for (DType dtype : {DType::kBF16, DType::kF32}) {
            StatusOr<std::vector<FusedPartSpec>> parts =
                QkvPartSpecs(num_heads, num_kv_heads, /*head_dim=*/2, trailing, tp);
            ASSERT_TRUE(parts.ok()) << parts.status().ToString();
            for (uint32_t part = 0; part < 3; ++part) {
              CheckAll(TensorLayout::FusedPart(*parts, part, dtype, tp),
                       RefFusedPart(*parts, part, dtype, tp), seed++);
            }
            CheckAll(TensorLayout::FusedCheckpoint(*parts, dtype, tp),
                     RefFusedCheckpoint(*parts, dtype, tp), seed++);
          }
        }
      }
    }
  }
}

TEST(LayoutReferenceTest, KvReplicationOwnerAndHolders) {
  // 8 q heads, 2 kv heads, tp 8: kv shard s is held by ranks 4s..4s+3, owned by rank 4s.
  StatusOr<std::vector<FusedPartSpec>> parts = QkvPartSpecs(8, 2, 4, {6}, 8);
  ASSERT_TRUE(parts.ok());
  EXPECT_EQ((*parts)[1].replicas, 4u);
  StatusOr<TensorLayout> k = TensorLayout::FusedPart(*parts, 1, DType::kBF16, 8);
  ASSERT_TRUE(k.ok()) << k.status().ToString();
  const uint64_t head_bytes = 4 * 6 * 2;
  const std::vector<LayoutPiece> pieces = Pieces(*k, head_bytes + 5, 1);  // kv head 1
  ASSERT_EQ(pieces.size(), 4u);
  for (uint32_t i = 0; i < 4; ++i) {
    EXPECT_EQ(pieces[i].rank, 4 + i);
    EXPECT_EQ(pieces[i].owner, i == 0);
    // Local [q_r (1 head) | k_r (1 head) | v_r (1 head)]: k at one q head.
    EXPECT_EQ(pieces[i].local_offset, head_bytes + 5);
  }
}

TEST(LayoutReferenceTest, GateUpSeparateAndFused) {
  uint64_t seed = 5000;
  for (uint32_t tp : kTps) {
    for (DType dtype : {DType::kBF16, DType::kF8E4M3}) {
      const std::vector<FusedPartSpec> parts = {{{16, 5}, 1}, {{16, 5}, 1}};
      for (uint32_t part = 0; part < 2; ++part) {
        CheckAll(TensorLayout::FusedPart(parts, part, dtype, tp),
                 RefFusedPart(parts, part, dtype, tp), seed++);
      }
      CheckAll(TensorLayout::FusedCheckpoint(parts, dtype, tp),
               RefFusedCheckpoint(parts, dtype, tp), seed++);
    }
  }
}

TEST(LayoutReferenceTest, MixedReplicatedAndShardedParts) {
  // Whole-held parts around sharded ones: pieces merge across parts at some ranks only.
  uint64_t seed = 6000;
  for (uint32_t tp : {2u, 4u}) {
    const std::vector<FusedPartSpec> parts = {
        {{4, 3}, tp}, {{8, 3}, 1}, {{2, 3}, tp}, {{4, 3}, tp}, {{8, 3}, tp / 2}};
    for (uint32_t part = 0; part < parts.size(); ++part) {
      CheckAll(TensorLayout::FusedPart(parts, part, DType::kBF16, tp),
               RefFusedPart(parts, part, DType::kBF16, tp), seed++);
    }
    CheckAll(TensorLayout::FusedCheckpoint(parts, DType::kBF16, tp),
             RefFusedCheckpoint(parts, DType::kBF16, tp), seed++);
  }
}

TEST(LayoutReferenceTest, MoeExperts) {
  uint64_t seed = 7000;
  for (uint32_t ep : {1u, 2u, 4u, 8u}) {
    for (uint32_t tp : {1u, 2u, 4u}) {
      for (DType dtype : {DType::kBF16, DType::kU8}) {
        // w13 [E, 2I, H], gate|up each sharded on dim 1.
        CheckAll(TensorLayout::MoeExperts({8, 16, 3}, dtype, 1, 2, ep, tp),
                 RefMoeExperts({8, 16, 3}, dtype, 1, 2, ep, tp), seed++);
        // w2 [E, H, I], sharded on the last dim.
        CheckAll(TensorLayout::MoeExperts({8, 3, 8}, dtype, 2, 1, ep, tp),
                 RefMoeExperts({8, 3, 8}, dtype, 2, 1, ep, tp), seed++);
        // A plain dim-1 shard, and a 4-D tensor.
        CheckAll(TensorLayout::MoeExperts({8, 4, 5}, dtype, 1, 1, ep, tp),
                 RefMoeExperts({8, 4, 5}, dtype, 1, 1, ep, tp), seed++);
        CheckAll(TensorLayout::MoeExperts({8, 2, 8, 2}, dtype, 2, 2, ep, 1),
                 RefMoeExperts({8, 2, 8, 2}, dtype, 2, 2, ep, 1), seed++);
      }
    }
  }
}

TEST(LayoutReferenceTest, MoeExpertPart) {
  uint64_t seed = 9000;
  for (uint32_t ep : {1u, 2u, 4u}) {
    for (uint32_t tp : {1u, 2u, 4u}) {
      for (uint64_t expert : {0u, 3u, 7u}) {
        // experts.N.gate_proj / up_proj [I, H] into w13; experts.N.down_proj [H, I] into w2.
        for (uint32_t part = 0; part < 2; ++part) {
          CheckAll(TensorLayout::MoeExpertPart({8, 3}, DType::kBF16, 0, part, 2, 8, expert, ep, tp),
                   RefMoeExpertPart({8, 3}, DType::kBF16, 0, part, 2, 8, expert, ep, tp), seed++);
        }
        CheckAll(TensorLayout::MoeExpertPart({3, 8}, DType::kF32, 1, 0, 1, 8, expert, ep, tp),
                 RefMoeExpertPart({3, 8}, DType::kF32, 1, 0, 1, 8, expert, ep, tp), seed++);
      }
    }
  }
}

// Hand-computed examples (independent of the reference above).

TEST(LayoutExampleTest, RowParallelMidElementRun) {
  // [2, 4] BF16 over tp 2: rank 0 holds columns 0-1 of each row, rank 1 columns 2-3.
  StatusOr<TensorLayout> layout = TensorLayout::ShardDim1({2, 4}, DType::kBF16, 2);
  ASSERT_TRUE(layout.ok());
  const std::vector<LayoutPiece> want = {
      {0, 3, 3, 1, true}, {1, 0, 4, 4, true}, {0, 4, 8, 4, true}, {1, 4, 12, 1, true}};
  EXPECT_EQ(Pieces(*layout, 3, 10), want) << Describe(Pieces(*layout, 3, 10));
  EXPECT_EQ(layout->LocalBytes(1).total, 8u);
}

TEST(LayoutExampleTest, MoeW13WithExpertAndTensorParallel) {
  // w13 [E=4, 2I=4, H=1] BF16, ep 2, tp 2: rank g*2+t holds experts 2g, 2g+1 as
  // [gate_t | up_t] (one row each); expert e is canonical bytes [8e, 8e+8).
  StatusOr<TensorLayout> layout = TensorLayout::MoeExperts({4, 4, 1}, DType::kBF16, 1, 2, 2, 2);
  ASSERT_TRUE(layout.ok());
  EXPECT_EQ(layout->world(), 4u);
  EXPECT_EQ(layout->CanonicalToLocal(1, 8 + 2), 4u);       // expert 1 gate row 1 -> rank 1
  EXPECT_EQ(layout->CanonicalToLocal(3, 24 + 6 + 1), 7u);  // expert 3 up row 1 -> rank 3
  EXPECT_FALSE(layout->CanonicalToLocal(0, 24 + 6).has_value());
  EXPECT_EQ(layout->LocalToCanonical(2, 2), 16u + 4);  // rank 2: expert 2, up row 0
  EXPECT_EQ((layout->LocalBytes(2)), (RankBytes{8, 8}));
}

// ---------------------------------------------------------------------------------------------
// Cost: pieces, never bytes. These tensors are terabytes; nothing is materialized.

TEST(LayoutCostTest, HugeTensorsYieldFewPieces) {
  const uint64_t big = uint64_t{1} << 20;
  StatusOr<TensorLayout> dim0 = TensorLayout::ShardDim0({big, big}, DType::kBF16, 8);
  ASSERT_TRUE(dim0.ok());
  EXPECT_EQ(dim0->canonical_bytes(), big * big * 2);
  EXPECT_EQ(PieceCount(*dim0, 0, dim0->canonical_bytes()), 8u);

  // 2^40 rows of 2 bytes: a walk that visited rows (not pieces) would never finish.
  const uint64_t rows = uint64_t{1} << 40;
  StatusOr<TensorLayout> dim1_tp1 = TensorLayout::ShardDim1({rows, 2}, DType::kU8, 1);
  ASSERT_TRUE(dim1_tp1.ok());
  EXPECT_EQ(PieceCount(*dim1_tp1, 0, dim1_tp1->canonical_bytes()), 1u);
  StatusOr<TensorLayout> moe_tp1 =
      TensorLayout::MoeExperts({rows, 2, 2}, DType::kU8, 1, 2, /*ep=*/4, /*tp=*/1);
  ASSERT_TRUE(moe_tp1.ok());
  EXPECT_EQ(PieceCount(*moe_tp1, 0, moe_tp1->canonical_bytes()), 4u);
  const std::vector<FusedPartSpec> gate_up = {{{rows, 2}, 1}, {{rows, 2}, 1}};
  StatusOr<TensorLayout> gate_up_tp1 = TensorLayout::FusedCheckpoint(gate_up, DType::kU8, 1);
  ASSERT_TRUE(gate_up_tp1.ok());
  EXPECT_EQ(PieceCount(*gate_up_tp1, 0, gate_up_tp1->canonical_bytes()), 1u);

  StatusOr<TensorLayout> dim1 = TensorLayout::ShardDim1({big, big}, DType::kBF16, 2);
  ASSERT_TRUE(dim1.ok());
  EXPECT_EQ(PieceCount(*dim1, 3 * big * 2, 10 * big * 2), 20u);  // 10 rows, 2 halves each

  StatusOr<TensorLayout> rep = TensorLayout::Replicated({big, big}, DType::kF32, 64);
  ASSERT_TRUE(rep.ok());
  EXPECT_EQ(PieceCount(*rep, 1, rep->canonical_bytes() - 2), 64u);

  StatusOr<std::vector<FusedPartSpec>> qkv = QkvPartSpecs(64, 8, 128, {big}, 1);
  ASSERT_TRUE(qkv.ok());
  StatusOr<TensorLayout> fused_tp1 = TensorLayout::FusedCheckpoint(*qkv, DType::kBF16, 1);
  ASSERT_TRUE(fused_tp1.ok());
  EXPECT_EQ(PieceCount(*fused_tp1, 0, fused_tp1->canonical_bytes()), 1u);

  StatusOr<TensorLayout> moe =
      TensorLayout::MoeExperts({256, 2 * 4096, 8192}, DType::kBF16, 1, 2, /*ep=*/8, /*tp=*/1);
  ASSERT_TRUE(moe.ok());
  EXPECT_EQ(PieceCount(*moe, 0, moe->canonical_bytes()), 8u);  // one run per expert group

  StatusOr<TensorLayout> w2 =
      TensorLayout::MoeExperts({256, 8192, 4096}, DType::kBF16, 2, 1, /*ep=*/8, /*tp=*/1);
  ASSERT_TRUE(w2.ok());
  EXPECT_EQ(PieceCount(*w2, 0, w2->canonical_bytes()), 8u);
}

// ---------------------------------------------------------------------------------------------
// The callback contract and range errors.

TEST(LayoutApiTest, CallbackStatusStopsTheWalk) {
  StatusOr<TensorLayout> layout = TensorLayout::ShardDim1({4, 8}, DType::kBF16, 2);
  ASSERT_TRUE(layout.ok());
  int calls = 0;
  Status s = layout->ForEachPiece(0, layout->canonical_bytes(), [&](const LayoutPiece&) {
    return ++calls == 3 ? DataLoss("stop here") : Status::Ok();
  });
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_EQ(s.message(), "stop here");
  EXPECT_EQ(calls, 3);
}

TEST(LayoutApiTest, RunOutOfRange) {
  StatusOr<TensorLayout> layout = TensorLayout::ShardDim0({4, 8}, DType::kBF16, 2);
  ASSERT_TRUE(layout.ok());
  int calls = 0;
  auto count = [&calls](const LayoutPiece&) { ++calls; };
  EXPECT_EQ(layout->ForEachPiece(0, 65, count).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(layout->ForEachPiece(65, 0, count).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(layout->ForEachPiece(1, std::numeric_limits<uint64_t>::max(), count).code(),
            StatusCode::kInvalidArgument);
  EXPECT_TRUE(layout->ForEachPiece(64, 0, count).ok());
  EXPECT_EQ(calls, 0);
}

// A cursor changes nothing but the cost: every run gives the pieces and errors of the plain
// walk, whether it stays in the remembered segment, moves on, crosses segments or goes back.
TEST(LayoutApiTest, CursorGivesThePiecesOfThePlainWalk) {
  StatusOr<std::vector<FusedPartSpec>> qkv = QkvPartSpecs(8, 2, 4, {6}, 4);
  ASSERT_TRUE(qkv.ok());
  std::vector<StatusOr<TensorLayout>> layouts;
  layouts.push_back(TensorLayout::Replicated({16, 6}, DType::kBF16, 3));
  layouts.push_back(TensorLayout::ShardDim0({16, 6}, DType::kBF16, 4));
  layouts.push_back(TensorLayout::ShardDim1({6, 16}, DType::kBF16, 4));
  layouts.push_back(TensorLayout::FusedCheckpoint(*qkv, DType::kBF16, 4));
  layouts.push_back(TensorLayout::MoeExperts({4, 8, 6}, DType::kBF16, 1, 2, 2, 2));
  std::mt19937_64 rng(7);
  for (const StatusOr<TensorLayout>& layout : layouts) {
    ASSERT_TRUE(layout.ok()) << layout.status().ToString();
    const uint64_t n = layout->canonical_bytes();
    TensorLayout::Cursor cursor;
    uint64_t at = 0;
    for (int i = 0; i < 2000; ++i) {
      // Mostly short runs moving forward, some long, some backwards, some past the end.
      const uint64_t r = rng();
      if (r % 50 == 0) at = rng() % n;
      const uint64_t length = r % 7 == 0 ? rng() % (n / 2) : rng() % 9;
      const uint64_t offset = r % 97 == 0 ? n - rng() % 3 : at;
      std::vector<LayoutPiece> plain, cached;
      Status a =
          layout->ForEachPiece(offset, length, [&](const LayoutPiece& p) { plain.push_back(p); });
      Status b = layout->ForEachPiece(cursor, offset, length,
                                      [&](const LayoutPiece& p) { cached.push_back(p); });
      ASSERT_EQ(a.code(), b.code()) << layout->ToJson() << " run " << offset << " +" << length;
      ASSERT_EQ(plain, cached) << layout->ToJson() << " run " << offset << " +" << length;
      at = offset + length + rng() % 40;
      if (at >= n) at = 0;
    }
  }
}

TEST(LayoutApiTest, JsonGolden) {
  StatusOr<std::vector<FusedPartSpec>> parts = QkvPartSpecs(8, 2, 4, {6}, 8);
  ASSERT_TRUE(parts.ok());
  StatusOr<TensorLayout> k = TensorLayout::FusedPart(*parts, 1, DType::kBF16, 8);
  ASSERT_TRUE(k.ok());
  EXPECT_EQ(
      k->ToJson(),
      R"({"dtype":"BF16","kind":"fused_part","part":1,"parts":[{"replicas":1,"shape":[32,6]},)"
      R"({"replicas":4,"shape":[8,6]},{"replicas":4,"shape":[8,6]}],"tp":8})");
  EXPECT_EQ(k->spec().shape, (Shape{8, 6}));
}

// ---------------------------------------------------------------------------------------------
// Invalid construction.

void ExpectInvalid(const StatusOr<TensorLayout>& layout, const std::string& needle) {
  ASSERT_FALSE(layout.ok()) << "expected an error containing '" << needle << "'";
  EXPECT_EQ(layout.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(layout.status().message().find(needle), std::string::npos) << layout.status().message();
}

TEST(LayoutInvalidTest, Replicated) {
  ExpectInvalid(TensorLayout::Replicated({4}, static_cast<DType>(200), 2), "unknown dtype");
  ExpectInvalid(TensorLayout::Replicated({4}, DType::kBF16, 0), "tp and ep must be >= 1");
  ExpectInvalid(TensorLayout::Replicated({4}, DType::kBF16, kLayoutMaxWorld + 1), "exceeds");
  ExpectInvalid(TensorLayout::Replicated(Shape(9, 1), DType::kBF16, 2), "dims");
  ExpectInvalid(TensorLayout::Replicated({uint64_t{1} << 40, uint64_t{1} << 40}, DType::kU8, 2),
                "overflows");
}

TEST(LayoutInvalidTest, Sharded) {
  ExpectInvalid(TensorLayout::ShardDim0({}, DType::kBF16, 2), "must have 1..");
  ExpectInvalid(TensorLayout::ShardDim1({8}, DType::kBF16, 2), "dim 1 out of range");
  ExpectInvalid(TensorLayout::ShardDim0({6, 4}, DType::kBF16, 4), "6 is not divisible by tp 4");
  ExpectInvalid(TensorLayout::ShardDim1({4, 6}, DType::kBF16, 4), "6 is not divisible by tp 4");
  ExpectInvalid(TensorLayout::ShardDim0({8, 4}, DType::kBF16, 0), "tp and ep must be >= 1");
  ExpectInvalid(TensorLayout::ShardDim0({uint64_t{1} << 32, uint64_t{1} << 32}, DType::kF32, 1),
                "overflows");
}

// moe_expert_part holds num_parts x shape[dim] rows on a rank: their sum must fit too.
TEST(LayoutInvalidTest, ExpertPartsWhoseRowsTogetherOverflow) {
  for (const char* json :
       {R"({"kind":"moe_expert_part","dtype":"BF16","shape":[4611686018427387904],"dim":0,)"
        R"("num_parts":4,"part":3,"experts":1,"expert":0,"ep":1,"tp":1})",
        R"({"kind":"moe_expert_part","dtype":"U8","shape":[4611686018427387904],"dim":0,)"
        R"("num_parts":5,"part":4,"experts":1,"expert":0,"ep":1,"tp":1})"}) {
    ExpectInvalid(TensorLayout::FromJson(json), "overflows");
  }
  // Two parts of 2^62 rows of one byte fit (2^63 bytes).
  EXPECT_TRUE(TensorLayout::FromJson(
                  R"({"kind":"moe_expert_part","dtype":"U8","shape":[4611686018427387904],)"
                  R"("dim":0,"num_parts":2,"part":1,"experts":1,"expert":0,"ep":1,"tp":1})")
                  .ok());
}

TEST(LayoutInvalidTest, UnusedFieldsMustKeepDefaults) {
  LayoutSpec spec{.kind = LayoutKind::kSharded, .dtype = DType::kBF16, .shape = {8}, .tp = 2};
  LayoutSpec ep = spec;
  ep.ep = 2;
  ExpectInvalid(TensorLayout::Create(ep), "field 'ep' does not apply");
  LayoutSpec part = spec;
  part.part = 1;
  ExpectInvalid(TensorLayout::Create(part), "field 'part' does not apply");
  LayoutSpec parts = spec;
  parts.parts = {{{8}, 1}};
  ExpectInvalid(TensorLayout::Create(parts), "field 'parts' does not apply");
  LayoutSpec experts = spec;
  experts.experts = 4;
  ExpectInvalid(TensorLayout::Create(experts), "field 'experts' does not apply");
  LayoutSpec replicated{.kind = LayoutKind::kReplicated, .dtype = DType::kBF16, .tp = 2};
  replicated.dim = 1;
  ExpectInvalid(TensorLayout::Create(replicated), "field 'dim' does not apply");
  LayoutSpec kind = spec;
  kind.kind = static_cast<LayoutKind>(99);
  ExpectInvalid(TensorLayout::Create(kind), "unknown kind");
}

TEST(LayoutInvalidTest, Fused) {
  const std::vector<FusedPartSpec> ok = {{{8, 4}, 1}, {{4, 4}, 2}};
  ExpectInvalid(TensorLayout::FusedPart({}, 0, DType::kBF16, 2), "needs 1..");
  ExpectInvalid(
      TensorLayout::FusedCheckpoint(std::vector<FusedPartSpec>(17, {{2, 4}, 1}), DType::kBF16, 2),
      "needs 1..");
  ExpectInvalid(TensorLayout::FusedPart(ok, 2, DType::kBF16, 2), "part 2 out of range");
  ExpectInvalid(TensorLayout::FusedPart({{{8, 4}, 1}, {{4, 5}, 1}}, 0, DType::kBF16, 2),
                "does not match part 0 shape");
  ExpectInvalid(TensorLayout::FusedPart({{{8, 4}, 1}, {{4}, 1}}, 0, DType::kBF16, 2),
                "does not match part 0 shape");
  ExpectInvalid(TensorLayout::FusedPart({{{8, 4}, 1}, {{0, 4}, 1}}, 0, DType::kBF16, 2),
                "part 1 is empty");
  ExpectInvalid(TensorLayout::FusedPart({{{8, 4}, 0}}, 0, DType::kBF16, 2),
                "replicas 0 does not divide tp 2");
  ExpectInvalid(TensorLayout::FusedPart({{{8, 4}, 3}}, 0, DType::kBF16, 4),
                "replicas 3 does not divide tp 4");
  ExpectInvalid(TensorLayout::FusedPart({{{8, 4}, 1}, {{6, 4}, 1}}, 0, DType::kBF16, 4),
                "part 1 dim 0 6 is not divisible by shard count 4");
  ExpectInvalid(TensorLayout::FusedPart({{{8}, 1}, {{}, 1}}, 0, DType::kBF16, 1), "dims");
  LayoutSpec wrong_shape{.kind = LayoutKind::kFusedCheckpoint,
                         .dtype = DType::kBF16,
                         .shape = {8, 4},
                         .tp = 2,
                         .parts = ok};
  ExpectInvalid(TensorLayout::Create(wrong_shape), "does not match the parts' [12,4]");
}

TEST(LayoutInvalidTest, QkvPartSpecs) {
  EXPECT_EQ(QkvPartSpecs(6, 2, 4, {8}, 4).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(QkvPartSpecs(8, 3, 4, {8}, 2).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(QkvPartSpecs(8, 0, 4, {8}, 2).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(QkvPartSpecs(8, 2, 4, {8}, 0).status().code(), StatusCode::kInvalidArgument);
  StatusOr<std::vector<FusedPartSpec>> kv16 = QkvPartSpecs(32, 16, 4, {8}, 8);
  ASSERT_TRUE(kv16.ok());
  EXPECT_EQ((*kv16)[2].replicas, 1u);
  EXPECT_EQ((*kv16)[2].shape, (Shape{64, 8}));
}

TEST(LayoutInvalidTest, MoeExperts) {
  ExpectInvalid(TensorLayout::MoeExperts({8}, DType::kBF16, 1, 1, 2, 1), "must have 2..");
  ExpectInvalid(TensorLayout::MoeExperts({8, 4, 4}, DType::kBF16, 0, 1, 2, 1), "dim 0 out");
  ExpectInvalid(TensorLayout::MoeExperts({8, 4, 4}, DType::kBF16, 3, 1, 2, 1), "dim 3 out");
  ExpectInvalid(TensorLayout::MoeExperts({6, 4, 4}, DType::kBF16, 1, 1, 4, 1),
                "expert count 6 is not divisible by ep 4");
  ExpectInvalid(TensorLayout::MoeExperts({0, 4, 4}, DType::kBF16, 1, 1, 1, 1), "no experts");
  ExpectInvalid(TensorLayout::MoeExperts({8, 6, 4}, DType::kBF16, 1, 4, 2, 1),
                "split dim extent 6 is not divisible by num_parts 4");
  ExpectInvalid(TensorLayout::MoeExperts({8, 12, 4}, DType::kBF16, 1, 2, 2, 4),
                "part extent 6 is not divisible by tp 4");
  ExpectInvalid(TensorLayout::MoeExperts({8, 4, 4}, DType::kBF16, 1, 0, 2, 1), "num_parts");
  ExpectInvalid(TensorLayout::MoeExperts({8, 4, 4}, DType::kBF16, 1, 1, 0, 1), ">= 1");
  ExpectInvalid(TensorLayout::MoeExperts({512, 4, 4}, DType::kBF16, 1, 1, 512, 256), "exceeds");
}

TEST(LayoutInvalidTest, MoeExpertPart) {
  ExpectInvalid(TensorLayout::MoeExpertPart({8, 4}, DType::kBF16, 0, 0, 2, 8, 8, 2, 1),
                "expert 8 out of range");
  ExpectInvalid(TensorLayout::MoeExpertPart({8, 4}, DType::kBF16, 0, 2, 2, 8, 0, 2, 1),
                "part 2 out of range");
  ExpectInvalid(TensorLayout::MoeExpertPart({8, 4}, DType::kBF16, 0, 0, 2, 6, 0, 4, 1),
                "expert count 6 is not divisible by ep 4");
  ExpectInvalid(TensorLayout::MoeExpertPart({8, 4}, DType::kBF16, 0, 0, 2, 0, 0, 1, 1),
                "no experts");
  ExpectInvalid(TensorLayout::MoeExpertPart({8, 4}, DType::kBF16, 2, 0, 2, 8, 0, 2, 1),
                "dim 2 out of range");
  ExpectInvalid(TensorLayout::MoeExpertPart({6, 4}, DType::kBF16, 0, 0, 2, 8, 0, 2, 4),
                "part extent 6 is not divisible by tp 4");
}

TEST(LayoutInvalidTest, Json) {
  auto expect_bad = [](const std::string& text, const std::string& needle) {
    StatusOr<TensorLayout> layout = TensorLayout::FromJson(text);
    ASSERT_FALSE(layout.ok()) << text;
    EXPECT_EQ(layout.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(layout.status().message().find(needle), std::string::npos)
        << layout.status().message();
  };
  expect_bad("{", "invalid JSON");
  expect_bad("[1]", "must be an object");
  expect_bad(R"({"dtype":"BF16"})", "field 'kind' missing");
  expect_bad(R"({"kind":"tiled","dtype":"BF16"})", "unknown kind 'tiled'");
  expect_bad(R"({"kind":"sharded","dtype":"BF17","shape":[8],"dim":0,"tp":2})",
             "unknown dtype 'BF17'");
  expect_bad(R"({"kind":"sharded","dtype":"BF16","shape":[8],"dim":0,"tp":2,"x":1})",
             "unknown field 'x'");
  expect_bad(R"({"kind":"sharded","dtype":"BF16","shape":[8],"dim":0})", "field 'tp' missing");
  expect_bad(R"({"kind":"sharded","dtype":"BF16","shape":[8],"dim":0,"tp":-2})",
             "non-negative integer");
  expect_bad(R"({"kind":"sharded","dtype":"BF16","shape":[8],"dim":0,"tp":2.5})",
             "non-negative integer");
  expect_bad(R"({"kind":"sharded","dtype":"BF16","shape":[8],"dim":0,"tp":4294967298})",
             "too large");
  expect_bad(R"({"kind":"sharded","dtype":"BF16","shape":[8,"a"],"dim":0,"tp":2})",
             "non-negative integers");
  expect_bad(R"({"kind":"sharded","dtype":"BF16","shape":[1,1,1,1,1,1,1,1,1],"dim":0,"tp":1})",
             "more than 8 dims");
  expect_bad(R"({"kind":"sharded","dtype":"BF16","shape":[6],"dim":0,"tp":4})",
             "not divisible by tp 4");
  expect_bad(R"({"kind":"fused_checkpoint","dtype":"BF16","parts":{},"tp":1})", "must be an array");
  expect_bad(R"({"kind":"fused_checkpoint","dtype":"BF16","parts":[1],"tp":1})",
             "part 0: must be an object");
  expect_bad(R"({"kind":"fused_checkpoint","dtype":"BF16","parts":[{"shape":[2]}],"tp":1})",
             "field 'replicas' missing");
  expect_bad(R"({"kind":"fused_checkpoint","dtype":"BF16","part":0,"parts":[],"tp":1})",
             "unknown field 'part'");
  expect_bad(R"({"kind":"moe_expert_part","dtype":"BF16","shape":[4,4],"dim":0,"num_parts":1,)"
             R"("part":0,"experts":4,"expert":4,"ep":1,"tp":1})",
             "expert 4 out of range");
}

}  // namespace
}  // namespace deltakv::deltasync
