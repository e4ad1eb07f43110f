// NodeSlice: the consecutive global ranks [first, first + count) of a `world`-rank group that
// one node's engine serves, and what that means for one tensor's bytes: which frames the node
// needs, which bytes it holds, and plan pieces renumbered to the node's local ranks.
//
// Within a node the owner of a canonical byte is the lowest of the node's ranks holding it, so
// the node's partial Adler sums count each byte it holds exactly once.
//
// Values and a single-threaded PlanOutput.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "deltasync/adler32.h"
#include "deltasync/layout.h"
#include "deltasync/sync_planner.h"

namespace deltakv::sidecar {

struct NodeSlice {
  uint32_t first = 0;
  uint32_t count = 1;
  uint32_t world = 1;
  bool whole() const { return first == 0 && count == world; }
  bool Has(uint32_t rank) const { return rank >= first && rank - first < count; }
};

struct NodeHolding {
  uint64_t bytes = 0;   // canonical bytes held by at least one of the node's ranks
  bool shared = false;  // some of them are also held by a rank of another node
};

// Walks the whole tensor once: O(pieces).
StatusOr<NodeHolding> HoldingOf(const deltasync::TensorLayout& layout, const NodeSlice& slice);

// Whether canonical bytes [offset, offset + length) include a byte one of the node's ranks holds.
bool Overlaps(const deltasync::TensorLayout& layout, const NodeSlice& slice, uint64_t offset,
              uint64_t length);

// The node's partial Adler sums of `bytes` (the whole canonical tensor) over the bytes it holds.
StatusOr<deltasync::AdlerDelta> NodeSums(const deltasync::TensorLayout& layout,
                                         const NodeSlice& slice, std::span<const uint8_t> bytes);

// The node's partial sums per local rank (index = rank - first; `slice.count` entries) over
// the canonical bytes each owns within the node, for a tensor whose canonical bytes are read
// by `read(offset, length)`. Reads cover only bytes the node holds: runs that touch are read
// together, each read at most `max_read` bytes (a longer run is read in parts). O(pieces).
StatusOr<std::vector<deltasync::AdlerDelta>> NodeOwnedSumsFromReads(
    const deltasync::TensorLayout& layout, const NodeSlice& slice,
    const std::function<StatusOr<std::string>(uint64_t offset, uint64_t length)>& read,
    uint64_t max_read = 16ull << 20);

// Passes the node's ranks' pieces to `out` as local ranks (rank - first), owner set on the
// lowest node rank holding each run; drops the other ranks' pieces.
class NodePlanOutput final : public deltasync::PlanOutput {
 public:
  NodePlanOutput(deltasync::PlanOutput& out, NodeSlice slice, size_t tensors)
      : out_(out), slice_(slice), last_(tensors, UINT64_MAX) {}
  Status Add(uint32_t rank, uint32_t tensor, uint64_t local_offset, uint64_t canonical_offset,
             std::span<const uint8_t> xor_bytes, bool owner) override;
  // Walker threads renumber and re-own their pieces themselves, through a NodePlanOutput of
  // their own in front of their records (one run's pieces come together there), and the
  // records, already in local ranks, pass straight on. REQUIRES: `out` has no walker view.
  bool TakesRecorded() override { return out_.TakesRecorded(); }
  std::unique_ptr<deltasync::PlanOutput> WalkerView(deltasync::PlanOutput& records) override {
    return std::make_unique<NodePlanOutput>(records, slice_, last_.size());
  }
  Status AddRecorded(uint32_t local_rank, const deltasync::WritePlanWriter& records) override {
    return out_.AddRecorded(local_rank, records);
  }

 private:
  deltasync::PlanOutput& out_;
  NodeSlice slice_;
  std::vector<uint64_t> last_;  // per tensor: canonical offset of the last owned run
};

}  // namespace deltakv::sidecar
