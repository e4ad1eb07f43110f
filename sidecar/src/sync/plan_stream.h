// PlanStreamer: hands every engine rank its write plan as a stream of bounded parts
// (shm/PROTOCOL.md §8), so the sidecar's memory does not grow with the delta or the model.
//
// It is the planner's PlanOutput. Records for rank r are appended to r's current part, a
// WritePlan inside a plan arena of at most `part_bytes`; when a record does not fit, the part is
// published and sent to the rank in a PLAN message flagged "more parts follow", and a new part
// is started. Before a new part is started, the streamer waits until at most `max_in_flight`
// earlier parts of that rank are still unconsumed (a rank consumes a part by copying it out).
// Arenas come from the rank's PlanArenaPool (owned by the caller, kept across syncs): a
// consumed arena is rewritten under a new generation, so a part costs no segment creation and
// no page faults once the pool is warm. A pool holds at most max_in_flight + 1 arenas, so the
// sidecar maps at most world × (max_in_flight + 1) × part capacity of plan. Finish() sends each
// rank its last part (without the "more" flag); ranks answer STAGED after it.
//
// While waiting it watches the rank: an ERROR message for this sync, a dead or deregistered
// rank, or a rank that consumes nothing within `consume_timeout` fails the call, and the
// caller must ABORT the sync (ranks may hold staged parts).
//
// Thread-safety: one thread. When the streamer is destroyed, arenas not consumed (the sync
// failed or was given up) are retired and unlinked; consumed ones stay in their pools.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "deltasync/sync_planner.h"
#include "deltasync/write_plan.h"
#include "shm/control_block.h"
#include "shm/messages.h"
#include "shm/plan_arena.h"

namespace deltakv::sidecar {

// A rank's ERROR message for `sync_id` as a DataLoss status carrying its text; OK for any
// other message.
Status RankErrorStatus(const shm::Message& msg, uint64_t sync_id, uint32_t rank);

struct PlanStreamOptions {
  uint64_t sync_id = 0;
  std::string version;           // the new version id, repeated in every part's root block
  uint64_t part_bytes = 16 << 20;  // plan bytes per part (raised to fit the tensor table)
  size_t max_in_flight = 1;        // parts sent but not yet consumed, per rank
  std::chrono::milliseconds consume_timeout{120000};
};

class PlanStreamer final : public deltasync::PlanOutput {
 public:
  // channels[r] is rank r's channel, tables[r] its plan tensor table and pools[r] the arenas
  // of rank r. check_rank(r) returns an error when rank r is gone. next_generation() returns
  // a generation never handed out before by this sidecar instance nor a previous one.
  PlanStreamer(PlanStreamOptions options, std::vector<shm::RankChannel*> channels,
               std::vector<std::vector<deltasync::PlanTensor>> tables,
               std::vector<shm::PlanArenaPool*> pools, std::function<uint64_t()> next_generation,
               std::function<Status(uint32_t)> check_rank);
  ~PlanStreamer() override;
  PlanStreamer(const PlanStreamer&) = delete;
  PlanStreamer& operator=(const PlanStreamer&) = delete;

  Status Add(uint32_t rank, uint32_t tensor, uint64_t local_offset, uint64_t canonical_offset,
             std::span<const uint8_t> xor_bytes, bool owner) override;
  // Add for a piece of 1 to WritePlanWriter::kShortBytes bytes that fits the rank's open part;
  // false (nothing done) otherwise.
  bool AddShort(uint32_t rank, uint32_t tensor, uint64_t local_offset, uint64_t canonical_offset,
                std::span<const uint8_t> xor_bytes, bool owner) override;
  // The rank's open part, for the planner to append short records to itself.
  deltasync::WritePlanWriter* LendWriter(uint32_t rank) override {
    return rank < ranks_.size() && ranks_[rank].writer ? &*ranks_[rank].writer : nullptr;
  }
  const uint64_t* LendGeneration() override { return &lend_generation_; }
  // Appends the records whole to the rank's open part, or to a new one when they do not fit
  // what is left of it; records larger than a whole part go piece by piece (Add).
  bool TakesRecorded() override { return true; }
  Status AddRecorded(uint32_t rank, const deltasync::WritePlanWriter& records) override;
  // Sends every rank its last part.
  Status Finish();

  uint64_t parts_sent() const { return parts_sent_; }
  // Records in the parts sent and the open ones.
  uint64_t records() const {
    uint64_t n = records_sent_;
    for (const RankStream& rs : ranks_) n += rs.writer ? rs.writer->record_count() : 0;
    return n;
  }
  // Distinct 64-byte lines of device memory the plans write, all ranks together: what a
  // commit's scatter must touch (counted assuming each tensor starts on a line boundary).
  uint64_t touched_lines() const { return touched_lines_; }

 private:
  struct RankStream {
    shm::RankChannel* channel = nullptr;
    shm::PlanArenaPool* pool = nullptr;
    std::vector<deltasync::PlanTensor> table;
    shm::PlanArenaWriter* arena = nullptr;  // the part being written (in `pool`)
    std::optional<deltasync::WritePlanWriter> writer;
    uint64_t plan_offset = 0;
    uint32_t next_part = 0;
    std::deque<shm::PlanArenaWriter*> sent;  // published, maybe not consumed yet
    std::vector<uint64_t> last_line;         // per plan tensor: 1 + the last line counted
  };

  Status OpenPart(uint32_t rank);
  Status SendPart(uint32_t rank, bool last);
  // Waits until at most `keep` sent parts of `rank` are unconsumed; forgets consumed ones.
  Status Drain(uint32_t rank, size_t keep);

  PlanStreamOptions opt_;
  std::vector<RankStream> ranks_;
  std::function<uint64_t()> next_generation_;
  std::function<Status(uint32_t)> check_rank_;
  uint64_t part_capacity_ = 0;
  uint64_t parts_sent_ = 0;
  uint64_t records_sent_ = 0;  // in parts sent; the open parts' writers count the rest
  // Every writer counts the lines its records touch into touched_lines_ (pieces of one tensor
  // mostly arrive in increasing order; a line shared with the previous piece is counted once).
  uint64_t touched_lines_ = 0;
  uint64_t lend_generation_ = 0;  // changes whenever a part is opened or sent
};

}  // namespace deltakv::sidecar
