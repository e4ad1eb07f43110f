// TensorLayout::ForEachPiece: splitting a canonical run into maximal per-rank pieces.
//
// The run is walked segment by segment (SegmentAt). A run inside one segment yields one piece
// per holding rank directly. Otherwise PieceMerger joins a rank's consecutive segments when
// they are contiguous locally with the same owner flag (e.g. the last q shard and a
// replicated k at the last rank), and emits finished pieces in (canonical_offset, rank) order:
// a finished piece waits only while an open piece started before it.
#include <algorithm>
#include <queue>
#include <string>
#include <vector>

#include "deltasync/layout.h"

namespace deltakv::deltasync {
namespace {

struct PieceAfter {
  bool operator()(const LayoutPiece& a, const LayoutPiece& b) const {
    return a.canonical_offset != b.canonical_offset ? a.canonical_offset > b.canonical_offset
                                                    : a.rank > b.rank;
  }
};

bool Before(const LayoutPiece& a, const LayoutPiece& b) { return PieceAfter()(b, a); }

template <typename Sink>
class PieceMerger {
 public:
  explicit PieceMerger(Sink sink) : sink_(sink) {}

  // Canonical [begin, end) is held by ranks [rank_lo, rank_lo + rank_count) at local offset
  // `local` (rank_lo owns it). REQUIRES: begin is the end of the previous call's run.
  Status Add(uint32_t rank_lo, uint32_t rank_count, uint64_t local, uint64_t begin, uint64_t end) {
    next_.clear();
    for (uint32_t i = 0; i < rank_count; ++i) {
      const uint32_t rank = rank_lo + i;
      const LayoutPiece fresh{.rank = rank,
                              .local_offset = local,
                              .canonical_offset = begin,
                              .length = end - begin,
                              .owner = i == 0};
      LayoutPiece* prev =
          rank >= open_lo_ && rank - open_lo_ < open_.size() ? &open_[rank - open_lo_] : nullptr;
      // Every open piece ends at `begin`; extend it if it also ends at `local`.
      if (prev != nullptr && prev->local_offset + prev->length == local &&
          prev->owner == fresh.owner) {
        next_.push_back(*prev);
        next_.back().length += fresh.length;
        prev->length = 0;  // taken
      } else {
        next_.push_back(fresh);
      }
    }
    for (const LayoutPiece& p : open_) {
      if (p.length != 0) pending_.push(p);
    }
    open_.swap(next_);
    open_lo_ = rank_lo;
    return Flush(/*all=*/false);
  }

  Status Finish() {
    for (const LayoutPiece& p : open_) pending_.push(p);
    open_.clear();
    return Flush(/*all=*/true);
  }

 private:
  // Emits the finished pieces that no open piece precedes.
  Status Flush(bool all) {
    const LayoutPiece* first_open = nullptr;
    for (const LayoutPiece& p : open_) {
      if (first_open == nullptr || Before(p, *first_open)) first_open = &p;
    }
    while (!pending_.empty() &&
           (all || first_open == nullptr || Before(pending_.top(), *first_open))) {
      const LayoutPiece p = pending_.top();
      pending_.pop();
      RETURN_IF_ERROR(sink_(p));
    }
    return Status::Ok();
  }

  Sink sink_;
  std::vector<LayoutPiece> open_;  // open pieces of ranks open_lo_, open_lo_ + 1, ...
  std::vector<LayoutPiece> next_;
  uint32_t open_lo_ = 0;
  std::priority_queue<LayoutPiece, std::vector<LayoutPiece>, PieceAfter> pending_;
};

}  // namespace

Status TensorLayout::ForEachPieceImpl(uint64_t canonical_offset, uint64_t length,
                                      PieceSink sink) const {
  if (canonical_offset > canonical_bytes_ || length > canonical_bytes_ - canonical_offset) {
    return InvalidArgument("layout '" + std::string(LayoutKindName(spec_.kind)) + "': run [" +
                           std::to_string(canonical_offset) + ", +" + std::to_string(length) +
                           ") exceeds the tensor's " + std::to_string(canonical_bytes_) + " bytes");
  }
  if (length == 0) return Status::Ok();
  const uint64_t end = canonical_offset + length;
  Segment s = SegmentAt(canonical_offset);
  if (s.end >= end) {
    const uint64_t local = s.local_begin + (canonical_offset - s.begin);
    for (uint32_t i = 0; i < s.rank_count; ++i) {
      RETURN_IF_ERROR(sink.fn(sink.ctx, LayoutPiece{.rank = s.rank_lo + i,
                                                    .local_offset = local,
                                                    .canonical_offset = canonical_offset,
                                                    .length = length,
                                                    .owner = i == 0}));
    }
    return Status::Ok();
  }
  auto emit = [&sink](const LayoutPiece& p) { return sink.fn(sink.ctx, p); };
  PieceMerger<decltype(emit)> merger(emit);
  uint64_t at = canonical_offset;
  while (true) {
    const uint64_t run_end = std::min(s.end, end);
    RETURN_IF_ERROR(
        merger.Add(s.rank_lo, s.rank_count, s.local_begin + (at - s.begin), at, run_end));
    at = run_end;
    if (at == end) break;
    s = SegmentAt(at);
  }
  return merger.Finish();
}

}  // namespace deltakv::deltasync
