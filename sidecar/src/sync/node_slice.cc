#include "sync/node_slice.h"

#include <algorithm>

namespace deltakv::sidecar {

StatusOr<NodeHolding> HoldingOf(const deltasync::TensorLayout& layout, const NodeSlice& slice) {
  NodeHolding h;
  // Pieces come in (canonical offset, rank) order: one run's holders are consecutive.
  bool have = false, in = false, out = false;
  uint64_t at = 0, len = 0;
  auto close = [&] {
    if (!have) return;
    if (in) h.bytes += len;
    h.shared = h.shared || (in && out);
  };
  Status s = layout.ForEachPiece(0, layout.canonical_bytes(), [&](const deltasync::LayoutPiece& p) {
    if (!have || p.canonical_offset != at) {
      close();
      have = true;
      at = p.canonical_offset;
      in = out = false;
      len = 0;
    }
    if (slice.Has(p.rank)) {
      if (!in) len = p.length;
      in = true;
    } else {
      out = true;
    }
  });
  if (!s.ok()) return s;
  close();
  return h;
}

bool Overlaps(const deltasync::TensorLayout& layout, const NodeSlice& slice, uint64_t offset,
              uint64_t length) {
  bool found = false;
  Status s = layout.ForEachPiece(offset, length, [&](const deltasync::LayoutPiece& p) -> Status {
    if (!slice.Has(p.rank)) return Status::Ok();
    found = true;
    return FailedPrecondition("found");  // stops the walk
  });
  // An error other than the stop (a frame past the tensor) keeps the frame: the planner reports it.
  return found || !s.ok();
}

namespace {

// fn(piece) for each canonical run the node holds, once: at the first of its ranks holding it
// (pieces of one run come together, in rank order).
template <typename F>
Status ForEachHeldOnce(const deltasync::TensorLayout& layout, const NodeSlice& slice, F&& fn) {
  bool have = false;
  uint64_t last = 0;
  return layout.ForEachPiece(0, layout.canonical_bytes(), [&](const deltasync::LayoutPiece& p) {
    if (!slice.Has(p.rank) || (have && p.canonical_offset == last)) return;
    have = true;
    last = p.canonical_offset;
    fn(p);
  });
}

}  // namespace

StatusOr<deltasync::AdlerDelta> NodeSums(const deltasync::TensorLayout& layout,
                                         const NodeSlice& slice, std::span<const uint8_t> bytes) {
  if (bytes.size() != layout.canonical_bytes()) return InvalidArgument("tensor size differs");
  deltasync::AdlerDelta sums;
  Status s = ForEachHeldOnce(layout, slice, [&](const deltasync::LayoutPiece& p) {
    sums.AddBytes(p.canonical_offset, bytes.subspan(p.canonical_offset, p.length));
  });
  if (!s.ok()) return s;
  return sums;
}

StatusOr<std::vector<deltasync::AdlerDelta>> NodeOwnedSumsFromReads(
    const deltasync::TensorLayout& layout, const NodeSlice& slice,
    const std::function<StatusOr<std::string>(uint64_t offset, uint64_t length)>& read,
    uint64_t max_read) {
  if (max_read == 0) return InvalidArgument("max_read is 0");
  struct Run {
    uint64_t offset, length;
    uint32_t local;
  };
  std::vector<Run> runs;  // in canonical order, disjoint: each held byte once, at its owner
  Status s = ForEachHeldOnce(layout, slice, [&](const deltasync::LayoutPiece& p) {
    for (uint64_t done = 0; done < p.length; done += max_read) {
      runs.push_back({p.canonical_offset + done, std::min(max_read, p.length - done),
                      p.rank - slice.first});
    }
  });
  if (!s.ok()) return s;
  std::vector<deltasync::AdlerDelta> sums(slice.count);
  for (size_t i = 0; i < runs.size();) {
    // Runs [i, j) that touch and fit one read.
    const uint64_t begin = runs[i].offset;
    uint64_t end = runs[i].offset + runs[i].length;
    size_t j = i + 1;
    while (j < runs.size() && runs[j].offset == end && end - begin + runs[j].length <= max_read) {
      end += runs[j].length;
      ++j;
    }
    ASSIGN_OR_RETURN(std::string bytes, read(begin, end - begin));
    if (bytes.size() != end - begin) {
      return DataLoss("read " + std::to_string(bytes.size()) + " bytes at canonical offset " +
                      std::to_string(begin) + ", expected " + std::to_string(end - begin));
    }
    const std::span<const uint8_t> span(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
    for (; i < j; ++i) {
      sums[runs[i].local].AddBytes(runs[i].offset, span.subspan(runs[i].offset - begin, runs[i].length));
    }
  }
  return sums;
}

Status NodePlanOutput::Add(uint32_t rank, uint32_t tensor, uint64_t local_offset,
                           uint64_t canonical_offset, std::span<const uint8_t> xor_bytes,
                           bool /*owner*/) {
  if (!slice_.Has(rank)) return Status::Ok();
  if (tensor >= last_.size()) return Internal("plan piece names an unknown tensor");
  const bool owner = last_[tensor] != canonical_offset;
  if (owner) last_[tensor] = canonical_offset;
  return out_.Add(rank - slice_.first, tensor, local_offset, canonical_offset, xor_bytes, owner);
}

}  // namespace deltakv::sidecar
