// PlanSink: the sync planner's sink for one decoded frame. It merges nearby runs of nonzero
// XOR bytes and routes each merged run into per-rank pieces (TensorLayout::ForEachPiece) for a
// PlanOutput. Internal to deltasync; benchmarks use it to time the planner's routing alone.
//
// Thread-safety: one sink per frame, used by one thread.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "base/status.h"
#include "deltasync/layout.h"
#include "deltasync/sync_planner.h"
#include "deltasync/write_plan.h"
#include "deltasync/xor_decoder.h"

namespace deltakv::deltasync {

// Runs separated by at most this many zero bytes are planned as one record: a record header
// costs 32 bytes, so bridging a shorter gap with zero XOR bytes (which change nothing and add
// nothing to the checksum sums) makes the plan smaller.
inline constexpr uint64_t kPlanMergeGap = 32;
// A merged run is routed once it reaches this size, so dense changes never pile up here.
inline constexpr uint64_t kPlanMaxPendingRun = 1ull << 20;

class PlanSink final : public NonzeroSink {
 public:
  // Runs at frame position p are canonical offset frame_offset + p of plan tensor
  // `plan_tensor`. With `dense` (a small tensor's buffer of its canonical size) the runs are
  // only copied there, to be planned in full later with Route.
  PlanSink(const TensorLayout& layout, uint32_t plan_tensor, uint64_t frame_offset, PlanOutput& out,
           std::vector<uint8_t>* dense)
      : layout_(layout),
        tensor_(plan_tensor),
        base_(frame_offset),
        out_(out),
        dense_(dense),
        lend_generation_(out.LendGeneration()) {}

  // Runs come in increasing position order (the decoder's order); a run that starts at most
  // kPlanMergeGap bytes after the held-back run joins it, otherwise the held-back run is
  // routed first. DataLoss for dense bytes outside the tensor; the output's errors.
  Status OnRun(uint64_t pos, std::span<const uint8_t> bytes) override;
  // The same for nonzero bytes one by one (the sparse walker's batches): merged as runs are.
  bool TakesBytes() const override { return true; }
  Status OnBytes(const uint64_t* entries, size_t count, uint64_t base) override;

  // Routes the run still held back. Call once after the frame decoded.
  Status Flush();

  // Routes `bytes` at `canonical` to `out` without merging (a small tensor's dense bytes).
  static Status Route(const TensorLayout& layout, uint32_t tensor, uint64_t canonical,
                      std::span<const uint8_t> bytes, PlanOutput& out);

 private:
  uint64_t pending_end() const { return pending_start_ + pending_len_; }
  // Flush for a held-back run of at most WritePlanWriter::kShortBytes inside the cursor's
  // segment, through PlanOutput::AddShort (Add for a piece it does not take): false when the
  // run is not such a run (nothing done; Flush it) or on an output error (in *error, which
  // the caller passes OK).
  [[gnu::always_inline]] inline bool FlushShort(Status* error);
  // Flush through TensorLayout::ForEachPiece, for any held-back run.
  Status FlushPieces();
  // Grows pending_ to hold a run reaching `end` plus kPendingSlack: short runs and the gaps a
  // merge bridges are written in whole words and kPlanMergeGap-byte blocks past a run's end.
  static constexpr uint64_t kPendingSlack = kPlanMergeGap + 8;
  void GrowPending(uint64_t end) {
    pending_.resize(std::max<uint64_t>({end + kPendingSlack, 2 * pending_.size(), 64}));
  }
  // Zeroes the first `n` bytes of pending_ once the run they held is routed, so every byte of
  // pending_ past the held-back run is zero (the gaps a merge bridges are zero XOR bytes).
  void ZeroRouted(uint64_t n) {
    if (n <= 16) [[likely]] {
      std::memset(pending_.data(), 0, 16);
    } else {
      std::memset(pending_.data(), 0, n);
    }
  }

  const TensorLayout& layout_;
  TensorLayout::Cursor cursor_;  // consecutive merged runs mostly share a segment
  uint32_t tensor_;
  uint64_t base_;
  PlanOutput& out_;
  std::vector<uint8_t>* dense_;
  // The held-back run: pending_len_ bytes at the front of pending_, whose size only grows
  // (kept across runs so holding a run costs a copy, no allocation or zero fill). Every byte
  // past the run is zero.
  uint64_t pending_start_ = 0;
  uint64_t pending_len_ = 0;
  std::vector<uint8_t> pending_;
  // Writers the output lent (PlanOutput::LendWriter), by rank modulo kLent: a short run held
  // by one rank is appended to its writer here, without a call to the output.
  struct Lent {
    WritePlanWriter* writer = nullptr;
    uint32_t rank = UINT32_MAX;  // none yet
    uint64_t generation = 0;     // *lend_generation_ when lent
  };
  static constexpr uint32_t kLent = 8;
  const uint64_t* const lend_generation_;  // nullptr: the output lends none
  Lent lent_[kLent];
};

// One rank's records routed by a RecordsOutput, with the writer's 8-byte aligned storage.
struct RecordedRank {
  uint32_t rank = 0;
  std::unique_ptr<uint64_t[]> buffer;
  WritePlanWriter writer;
};

// Record buffers of RecordsOutput::kChunkBytes handed back once their records were appended,
// for walker threads to reuse (a fresh buffer costs page faults). Thread-safe; keeps at most
// `keep` buffers.
class RecordBufferPool {
 public:
  explicit RecordBufferPool(size_t keep) : keep_(keep) {}
  // A buffer of at least `bytes` (a multiple of 8): a kept one when it is large enough.
  std::unique_ptr<uint64_t[]> Take(uint64_t bytes);
  // Keeps the buffer of `r` if it is a chunk-sized one and there is room.
  void Give(RecordedRank&& r);

 private:
  std::mutex mu_;
  size_t keep_;
  std::vector<std::unique_ptr<uint64_t[]>> free_;
};

// The PlanOutput a walker thread routes a frame into (PlanOutput::TakesRecorded): the pieces go
// into one WritePlanWriter::RecordsOnly writer (plan version 2) per rank that holds any, and
// the writers that hold records go to `send` as one chunk, in rank order, whenever one of them
// is full and by Send at the end. Short pieces are appended by the PlanSink itself (writers are
// lent). Memory: at most kChunkBytes per rank (more for a single longer piece).
class RecordsOutput final : public PlanOutput {
 public:
  static constexpr uint64_t kChunkBytes = 64 << 10;
  using SendFn = std::function<Status(std::vector<RecordedRank>)>;
  // `ranks` and `tensors`: the plans' rank and tensor counts.
  // `pool` (optional) supplies the buffers.
  RecordsOutput(uint32_t ranks, uint32_t tensors, SendFn send, RecordBufferPool* pool = nullptr)
      : tensors_(tensors), send_(std::move(send)), pool_(pool), writers_(ranks) {}

  Status Add(uint32_t rank, uint32_t tensor, uint64_t local_offset, uint64_t canonical_offset,
             std::span<const uint8_t> xor_bytes, bool owner) override;
  bool AddShort(uint32_t rank, uint32_t tensor, uint64_t local_offset, uint64_t canonical_offset,
                std::span<const uint8_t> xor_bytes, bool owner) override {
    return rank < writers_.size() &&
           Writer(rank, 0).TryAddShort(tensor, local_offset, canonical_offset, xor_bytes, owner);
  }
  WritePlanWriter* LendWriter(uint32_t rank) override {
    return rank < writers_.size() ? &Writer(rank, 0) : nullptr;
  }
  const uint64_t* LendGeneration() override { return &generation_; }

  // Sends the records so far as one chunk (nothing when there are none); `send`'s error.
  Status Send();

 private:
  // Rank `rank`'s writer, created with room for at least `room` bytes of records.
  WritePlanWriter& Writer(uint32_t rank, uint64_t room) {
    std::unique_ptr<RecordedRank>& w = writers_[rank];
    if (w == nullptr) [[unlikely]]
      w = NewWriter(rank, room);
    return w->writer;
  }
  std::unique_ptr<RecordedRank> NewWriter(uint32_t rank, uint64_t room) const;

  uint32_t tensors_;
  SendFn send_;
  RecordBufferPool* pool_;
  std::vector<std::unique_ptr<RecordedRank>> writers_;
  uint64_t generation_ = 0;
};

}  // namespace deltakv::deltasync
