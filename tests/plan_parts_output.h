// A PlanOutput for tests that streams each rank's records into plan parts of `part_bytes`, as
// the sidecar's PlanStreamer does (a new part when one is full, a run longer than a part split),
// and, when `lend`, lends the open part's writer to the planner (PlanOutput::LendWriter) with a
// new generation whenever a part is opened or sent. A sent part's buffer and writer stay
// allocated, so a writer used past its generation writes into a part already taken and its
// records go missing from Parts() and Pieces(). Records and touched lines are counted through
// the writers (WritePlanWriter::CountLines). With takes_records it takes walker threads' records
// (PlanOutput::AddRecorded) as PlanStreamer does.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "deltasync/sync_planner.h"
#include "deltasync/write_plan.h"

namespace deltakv::deltasync {

class PlanPartsOutput final : public PlanOutput {
 public:
  PlanPartsOutput(uint32_t ranks, uint32_t tensors, uint64_t part_bytes, bool lend)
      : ranks_(ranks), part_bytes_(part_bytes), lend_(lend) {
    for (uint32_t t = 0; t < tensors; ++t) table_.push_back({t, 0, uint64_t{1} << 40, 0, 0});
    for (Rank& r : ranks_) r.last_line.assign(tensors, 0);
  }
  Status Add(uint32_t rank, uint32_t tensor, uint64_t local, uint64_t canonical,
             std::span<const uint8_t> bytes, bool owner) override {
    Rank& r = ranks_.at(rank);
    while (!bytes.empty()) {
      if (r.writer == nullptr) Open(r);
      uint64_t n = bytes.size();
      if (WritePlanWriter::RecordBytes(n) > r.writer->remaining()) {
        if (r.writer->record_count() > 0) {
          RETURN_IF_ERROR(Send(r));
          continue;
        }
        n = (r.writer->remaining() - WritePlanWriter::kMaxRecordOverhead) & ~uint64_t{7};
      }
      RETURN_IF_ERROR(r.writer->Add(tensor, local, canonical, bytes.first(n), owner));
      bytes = bytes.subspan(n);
      local += n;
      canonical += n;
    }
    return Status::Ok();
  }
  bool AddShort(uint32_t rank, uint32_t tensor, uint64_t local, uint64_t canonical,
                std::span<const uint8_t> bytes, bool owner) override {
    Rank& r = ranks_.at(rank);
    return r.writer != nullptr && r.writer->TryAddShort(tensor, local, canonical, bytes, owner);
  }
  WritePlanWriter* LendWriter(uint32_t rank) override {
    return lend_ ? ranks_.at(rank).writer : nullptr;
  }
  const uint64_t* LendGeneration() override { return lend_ ? &generation_ : nullptr; }
  // With takes_records, walker threads' records are appended whole, as PlanStreamer does: to
  // the open part, or to a new one when they do not fit it, or piece by piece when they do not
  // fit a whole part.
  bool TakesRecorded() override { return takes_records; }
  Status AddRecorded(uint32_t rank, const WritePlanWriter& recorded) override {
    Rank& r = ranks_.at(rank);
    if (recorded.records().empty()) return Status::Ok();
    if (r.writer == nullptr) Open(r);
    if (r.writer->AppendFrom(recorded)) return Status::Ok();
    if (r.writer->record_count() > 0) {
      RETURN_IF_ERROR(Send(r));
      Open(r);
      if (r.writer->AppendFrom(recorded)) return Status::Ok();
    }
    return PlanOutput::AddRecorded(rank, recorded);
  }
  bool takes_records = false;

  // Sends the open parts.
  Status Finish() {
    for (Rank& r : ranks_) {
      if (r.writer != nullptr) RETURN_IF_ERROR(Send(r));
    }
    return Status::Ok();
  }
  // Each rank's sent parts, as written.
  std::vector<std::vector<std::vector<uint8_t>>> Parts() const {
    std::vector<std::vector<std::vector<uint8_t>>> all;
    for (const Rank& r : ranks_) all.push_back(r.parts);
    return all;
  }
  // Every record of the sent parts: rank, tensor, local and canonical offsets, owner, bytes.
  using Piece = std::tuple<uint32_t, uint32_t, uint64_t, uint64_t, bool, std::string>;
  std::vector<Piece> Pieces() const {
    std::vector<Piece> pieces;
    for (uint32_t rank = 0; rank < ranks_.size(); ++rank) {
      for (std::vector<uint8_t> plan : ranks_[rank].parts) {
        std::vector<uint64_t> words((plan.size() + 7) / 8);  // 8-byte aligned
        std::memcpy(words.data(), plan.data(), plan.size());
        auto reader =
            WritePlanReader::Open(std::span(reinterpret_cast<uint8_t*>(words.data()), plan.size()));
        if (!reader.ok()) std::abort();
        const Status walked =
            reader->ForEach([&](const PlanRecord& rec, std::span<uint8_t> bytes) -> Status {
              pieces.emplace_back(rank, rec.tensor, rec.local_offset, rec.canonical_offset,
                                  (rec.flags & kPlanRecordOwner) != 0,
                                  std::string(bytes.begin(), bytes.end()));
              return Status::Ok();
            });
        if (!walked.ok()) std::abort();
      }
    }
    return pieces;
  }
  uint64_t records = 0;  // in the sent parts
  uint64_t touched = 0;  // lines, through WritePlanWriter::CountLines

 private:
  struct Part {
    std::vector<uint64_t> words;
    std::unique_ptr<WritePlanWriter> writer;
  };
  struct Rank {
    WritePlanWriter* writer = nullptr;  // the open part's, or none
    std::vector<std::unique_ptr<Part>> all;
    std::vector<std::vector<uint8_t>> parts;  // the sent parts' bytes
    std::vector<uint64_t> last_line;
  };
  void Open(Rank& r) {
    ++generation_;
    auto part = std::make_unique<Part>();
    part->words.assign(part_bytes_ / 8, 0);
    part->writer = std::make_unique<WritePlanWriter>(
        std::span(reinterpret_cast<uint8_t*>(part->words.data()), part_bytes_), table_,
        kPlanVersionCompact);
    part->writer->CountLines(r.last_line.data(), &touched);
    r.writer = part->writer.get();
    r.all.push_back(std::move(part));
  }
  Status Send(Rank& r) {
    ++generation_;
    ASSIGN_OR_RETURN(uint64_t used, r.writer->Finish());
    records += r.writer->record_count();
    const auto* p = reinterpret_cast<const uint8_t*>(r.all.back()->words.data());
    r.parts.emplace_back(p, p + used);
    r.writer = nullptr;
    return Status::Ok();
  }
  std::vector<Rank> ranks_;
  std::vector<PlanTensor> table_;
  uint64_t part_bytes_;
  bool lend_;
  uint64_t generation_ = 0;
};

}  // namespace deltakv::deltasync
