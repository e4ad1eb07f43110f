// TensorLayout single-byte queries: canonical <-> local offsets and per-rank sizes.
//
// Canonical bytes are [canonical_experts_, outer_, canonical_rows_, inner_bytes_]; local bytes
// are [experts_per_group_, outer_, local_rows_, inner_bytes_]. Along the row dim, part p of
// the canonical row group is split into parts_[p].shards shards; tp rank t holds shard
// t / replicas at local rows [local_row_offset, + shard_rows).
#include <algorithm>

#include "deltasync/layout.h"

namespace deltakv::deltasync {

TensorLayout::Segment TensorLayout::SegmentAt(uint64_t canonical_offset) const {
  const uint64_t row_group_bytes = canonical_rows_ * inner_bytes_;
  const uint64_t expert_bytes = outer_ * row_group_bytes;
  const uint64_t local_expert_bytes = outer_ * local_rows_ * inner_bytes_;
  const uint64_t e = canonical_offset / expert_bytes;
  const uint64_t global_expert = expert_begin_ + e;
  const uint64_t group = global_expert / experts_per_group_;
  const uint64_t group_first = group * experts_per_group_;
  const uint32_t rank_base = static_cast<uint32_t>(group) * tp_;
  Segment s;
  if (uniform_) {
    // All experts of this group are one run; local rows == canonical rows.
    const uint64_t e_first = std::max(group_first, expert_begin_) - expert_begin_;
    const uint64_t e_end =
        std::min(canonical_experts_, group_first + experts_per_group_ - expert_begin_);
    s.begin = e_first * expert_bytes;
    s.end = e_end * expert_bytes;
    s.local_begin = (expert_begin_ + e_first - group_first) * local_expert_bytes;
    s.rank_lo = rank_base;
    s.rank_count = tp_;
    return s;
  }
  const uint64_t in_expert = canonical_offset - e * expert_bytes;
  const uint64_t o = in_expert / row_group_bytes;
  const uint64_t row = (in_expert - o * row_group_bytes) / inner_bytes_;
  const uint64_t row_group_begin = e * expert_bytes + o * row_group_bytes;
  const uint32_t part_end = first_part_ + part_count_;
  uint32_t p = first_part_;
  while (p + 1 < part_end && row >= parts_[p + 1].canonical_row_offset) ++p;
  const Part& part = parts_[p];
  const uint64_t shard = (row - part.canonical_row_offset) / part.shard_rows;
  const uint64_t shard_begin_row = part.canonical_row_offset + shard * part.shard_rows;
  uint64_t end_row = shard_begin_row + part.shard_rows;
  if (part.shards == 1) {
    // Following whole-held parts sit right after this one locally, at the same ranks.
    for (uint32_t q = p + 1; q < part_end && parts_[q].shards == 1; ++q) {
      end_row = parts_[q].canonical_row_offset + parts_[q].rows;
    }
  }
  const uint64_t local_row_group = (global_expert - group_first) * outer_ + o;
  s.begin = row_group_begin + shard_begin_row * inner_bytes_;
  s.end = row_group_begin + end_row * inner_bytes_;
  s.local_begin = (local_row_group * local_rows_ + part.local_row_offset) * inner_bytes_;
  s.rank_lo = rank_base + static_cast<uint32_t>(shard) * part.replicas;
  s.rank_count = part.replicas;
  return s;
}

std::optional<uint64_t> TensorLayout::CanonicalToLocal(uint32_t rank,
                                                       uint64_t canonical_offset) const {
  if (rank >= world() || canonical_offset >= canonical_bytes_) return std::nullopt;
  const Segment s = SegmentAt(canonical_offset);
  if (rank < s.rank_lo || rank - s.rank_lo >= s.rank_count) return std::nullopt;
  return s.local_begin + (canonical_offset - s.begin);
}

std::optional<uint64_t> TensorLayout::LocalToCanonical(uint32_t rank, uint64_t local_offset) const {
  if (rank >= world() || local_offset >= local_total_bytes_) return std::nullopt;
  const uint64_t group = rank / tp_;
  const uint32_t tp_rank = rank % tp_;
  const uint64_t row_group_bytes = local_rows_ * inner_bytes_;
  const uint64_t expert_bytes = outer_ * row_group_bytes;
  const uint64_t local_expert = local_offset / expert_bytes;
  const uint64_t global_expert = group * experts_per_group_ + local_expert;
  if (global_expert < expert_begin_ || global_expert - expert_begin_ >= canonical_experts_) {
    return std::nullopt;
  }
  uint64_t rest = local_offset - local_expert * expert_bytes;
  const uint64_t o = rest / row_group_bytes;
  rest -= o * row_group_bytes;
  const uint64_t local_row = rest / inner_bytes_;
  const uint64_t in_row = rest - local_row * inner_bytes_;
  uint32_t p = 0;
  while (p + 1 < parts_.size() && local_row >= parts_[p + 1].local_row_offset) ++p;
  if (p < first_part_ || p >= first_part_ + part_count_) return std::nullopt;
  const Part& part = parts_[p];
  const uint64_t row = part.canonical_row_offset + (tp_rank / part.replicas) * part.shard_rows +
                       (local_row - part.local_row_offset);
  const uint64_t e = global_expert - expert_begin_;
  return ((e * outer_ + o) * canonical_rows_ + row) * inner_bytes_ + in_row;
}

RankBytes TensorLayout::LocalBytes(uint32_t rank) const {
  if (rank >= world()) return {};
  const uint64_t group_first = (rank / tp_) * experts_per_group_;
  const uint64_t lo = std::max(group_first, expert_begin_);
  const uint64_t hi =
      std::min(group_first + experts_per_group_, expert_begin_ + canonical_experts_);
  const uint64_t experts_held = hi > lo ? hi - lo : 0;
  uint64_t rows = 0;
  for (uint32_t p = first_part_; p < first_part_ + part_count_; ++p) rows += parts_[p].shard_rows;
  return RankBytes{.touched = experts_held * outer_ * rows * inner_bytes_,
                   .total = local_total_bytes_};
}

}  // namespace deltakv::deltasync
