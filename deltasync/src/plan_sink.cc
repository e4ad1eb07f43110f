#include "plan_sink.h"

#include <algorithm>
#include <cstring>

#include "base/le_bytes.h"

namespace deltakv::deltasync {

Status PlanSink::OnRun(uint64_t pos, std::span<const uint8_t> bytes) {
  const uint64_t canonical = base_ + pos;
  if (dense_ != nullptr) {  // small tensor: collected, planned in full later
    if (canonical > dense_->size() || bytes.size() > dense_->size() - canonical) {
      return DataLoss("decoded bytes fall outside the tensor");
    }
    std::memcpy(dense_->data() + canonical, bytes.data(), bytes.size());
    return Status::Ok();
  }
  uint64_t at = 0;  // where the run's bytes go in pending_
  if (pending_len_ != 0 && canonical - pending_end() <= kPlanMergeGap &&
      pending_len_ < kPlanMaxPendingRun) {
    at = canonical - pending_start_;
  } else {
    RETURN_IF_ERROR(Flush());
    pending_start_ = canonical;
  }
  const uint64_t len = at + bytes.size();
  if (len + kPendingSlack > pending_.size()) GrowPending(len);
  uint8_t* const p = pending_.data();
  const size_t n = bytes.size();
  // The gap a merge bridges is zero already (pending_ is zero past the held-back run).
  if (n <= 8) {
    // The common case: a run of a few bytes, written as one word (zero past the run).
    const uint64_t word = n == 0 ? 0 : LoadShortLE(bytes.data(), n);
    std::memcpy(p + at, &word, 8);
  } else {
    std::memcpy(p + at, bytes.data(), n);
  }
  pending_len_ = len;
  return Status::Ok();
}

Status PlanSink::OnBytes(const uint64_t* entries, size_t count, uint64_t base) {
  if (dense_ != nullptr) {  // small tensor: collected, planned in full later
    for (size_t i = 0; i < count; ++i) {
      const uint64_t canonical = base_ + base + (entries[i] >> 8);
      if (canonical >= dense_->size()) return DataLoss("decoded bytes fall outside the tensor");
      (*dense_)[canonical] = static_cast<uint8_t>(entries[i]);
    }
    return Status::Ok();
  }
  uint8_t* p = pending_.data();
  uint64_t room = pending_.size();  // bytes of pending_; a write at `at` needs at + 8 of them
  for (size_t i = 0; i < count; ++i) {
    const uint64_t canonical = base_ + base + (entries[i] >> 8);
    const uint8_t value = static_cast<uint8_t>(entries[i]);
    uint64_t at = 0;
    if (pending_len_ != 0 && canonical - pending_end() <= kPlanMergeGap &&
        pending_len_ < kPlanMaxPendingRun) [[likely]] {
      at = canonical - pending_start_;  // joins the held-back run
    } else {
      if (pending_len_ != 0) {
        Status error;
        if (!FlushShort(&error)) {
          RETURN_IF_ERROR(error);
          RETURN_IF_ERROR(FlushPieces());
        }
      }
      pending_start_ = canonical;
    }
    if (at + kPendingSlack > room) [[unlikely]] {
      GrowPending(at);
      p = pending_.data();
      room = pending_.size();
    }
    p[at] = value;  // the gap before it is zero already
    pending_len_ = at + 1;
  }
  return Status::Ok();
}

inline bool PlanSink::FlushShort(Status* error) {
  uint64_t local = 0;
  uint32_t rank_lo = 0, ranks = 0;
  if (pending_len_ - 1 >= WritePlanWriter::kShortBytes ||
      !layout_.PiecesInCursorSegment(cursor_, pending_start_, pending_len_, &local, &rank_lo,
                                     &ranks)) {
    return false;
  }
  const std::span<const uint8_t> bytes(pending_.data(), pending_len_);
  pending_len_ = 0;
  if (ranks == 1 && lend_generation_ != nullptr) {
    // The common case: straight into the rank's writer, as AddShort would append it.
    Lent& lent = lent_[rank_lo % kLent];
    if (lent.rank != rank_lo || lent.generation != *lend_generation_) {
      lent = Lent{out_.LendWriter(rank_lo), rank_lo, *lend_generation_};
    }
    if (lent.writer != nullptr &&
        lent.writer->TryAddShort(tensor_, local, pending_start_, bytes, /*owner=*/true)) {
      ZeroRouted(bytes.size());
      return true;
    }
  }
  for (uint32_t i = 0; i < ranks; ++i) {
    if (out_.AddShort(rank_lo + i, tensor_, local, pending_start_, bytes, i == 0)) continue;
    Status s = out_.Add(rank_lo + i, tensor_, local, pending_start_, bytes, i == 0);
    if (!s.ok()) [[unlikely]] {
      *error = std::move(s);
      break;
    }
  }
  ZeroRouted(bytes.size());
  return error->ok();
}

Status PlanSink::Flush() {
  if (pending_len_ == 0) return Status::Ok();
  Status error;
  if (FlushShort(&error)) return Status::Ok();
  RETURN_IF_ERROR(error);
  return FlushPieces();
}

Status PlanSink::FlushPieces() {
  const uint64_t start = pending_start_;
  const std::span<const uint8_t> bytes(pending_.data(), pending_len_);
  pending_len_ = 0;
  const Status s =
      layout_.ForEachPiece(cursor_, start, bytes.size(), [&](const LayoutPiece& p) -> Status {
        const std::span<const uint8_t> piece = bytes.subspan(p.canonical_offset - start, p.length);
        // Short pieces go through AddShort, which returns in a register (no Status).
        if (p.length - 1 < WritePlanWriter::kShortBytes &&
            out_.AddShort(p.rank, tensor_, p.local_offset, p.canonical_offset, piece, p.owner)) {
          return Status::Ok();
        }
        return out_.Add(p.rank, tensor_, p.local_offset, p.canonical_offset, piece, p.owner);
      });
  ZeroRouted(bytes.size());
  return s;
}

Status PlanSink::Route(const TensorLayout& layout, uint32_t tensor, uint64_t canonical,
                       std::span<const uint8_t> bytes, PlanOutput& out) {
  return layout.ForEachPiece(canonical, bytes.size(), [&](const LayoutPiece& p) -> Status {
    return out.Add(p.rank, tensor, p.local_offset, p.canonical_offset,
                   bytes.subspan(p.canonical_offset - canonical, p.length), p.owner);
  });
}

Status RecordsOutput::Add(uint32_t rank, uint32_t tensor, uint64_t local_offset,
                          uint64_t canonical_offset, std::span<const uint8_t> xor_bytes,
                          bool owner) {
  if (rank >= writers_.size()) return Internal("layout names rank beyond the plan writers");
  if (AddShort(rank, tensor, local_offset, canonical_offset, xor_bytes, owner)) {
    return Status::Ok();
  }
  // Room for the piece in whole records (runs over 2^31 bytes take several).
  const uint64_t n = xor_bytes.size();
  const uint64_t need =
      (n / WritePlanWriter::kMaxRecordLength + 1) *
      WritePlanWriter::RecordBytes(std::min<uint64_t>(n, WritePlanWriter::kMaxRecordLength));
  if (writers_[rank] != nullptr && writers_[rank]->writer.remaining() < need) {
    RETURN_IF_ERROR(Send());
  }
  return Writer(rank, need).Add(tensor, local_offset, canonical_offset, xor_bytes, owner);
}

Status RecordsOutput::Send() {
  ++generation_;
  std::vector<RecordedRank> chunk;
  for (std::unique_ptr<RecordedRank>& w : writers_) {
    if (w == nullptr) continue;
    if (!w->writer.status().ok()) return w->writer.status();
    if (!w->writer.records().empty()) chunk.push_back(std::move(*w));
    w.reset();
  }
  if (chunk.empty()) return Status::Ok();
  return send_(std::move(chunk));
}

std::unique_ptr<uint64_t[]> RecordBufferPool::Take(uint64_t bytes) {
  if (bytes <= RecordsOutput::kChunkBytes) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!free_.empty()) {
      std::unique_ptr<uint64_t[]> b = std::move(free_.back());
      free_.pop_back();
      return b;
    }
  }
  return std::make_unique_for_overwrite<uint64_t[]>(std::max(bytes, RecordsOutput::kChunkBytes) /
                                                    8);
}

void RecordBufferPool::Give(RecordedRank&& r) {
  if (r.buffer == nullptr || r.writer.capacity() != RecordsOutput::kChunkBytes) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (free_.size() < keep_) free_.push_back(std::move(r.buffer));
}

std::unique_ptr<RecordedRank> RecordsOutput::NewWriter(uint32_t rank, uint64_t room) const {
  const uint64_t bytes = (std::max(kChunkBytes, room) + 7) & ~uint64_t{7};
  auto buffer =
      pool_ != nullptr ? pool_->Take(bytes) : std::make_unique_for_overwrite<uint64_t[]>(bytes / 8);
  const std::span<uint8_t> span(reinterpret_cast<uint8_t*>(buffer.get()), bytes);
  return std::make_unique<RecordedRank>(RecordedRank{
      rank, std::move(buffer), WritePlanWriter::RecordsOnly(span, tensors_, kPlanVersionCompact)});
}

}  // namespace deltakv::deltasync
