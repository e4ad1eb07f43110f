#include "sync/plan_stream.h"

#include <algorithm>
#include <cstring>

#include "shm/messages.h"

namespace deltakv::sidecar {

namespace {
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;
using deltasync::WritePlanWriter;

// Every part can hold its tensor table plus at least this many record bytes.
constexpr uint64_t kMinRecordRoom = 64 << 10;
}  // namespace

Status RankErrorStatus(const shm::Message& msg, uint64_t sync_id, uint32_t rank) {
  if (msg.sync_id != sync_id || msg.type != shm::MessageType::kError) return Status::Ok();
  auto text = shm::ParseText(msg);
  return DataLoss(text.ok() ? *text : "rank " + std::to_string(rank) + " failed");
}

PlanStreamer::PlanStreamer(PlanStreamOptions options, std::vector<shm::RankChannel*> channels,
                           std::vector<std::vector<deltasync::PlanTensor>> tables,
                           std::vector<shm::PlanArenaPool*> pools,
                           std::function<uint64_t()> next_generation,
                           std::function<Status(uint32_t)> check_rank)
    : opt_(std::move(options)),
      next_generation_(std::move(next_generation)),
      check_rank_(std::move(check_rank)) {
  ranks_.resize(channels.size());
  uint64_t table_bytes = 0;
  for (size_t r = 0; r < channels.size(); ++r) {
    ranks_[r].channel = channels[r];
    ranks_[r].pool = pools[r];
    ranks_[r].table = std::move(tables[r]);
    ranks_[r].last_line.assign(ranks_[r].table.size(), 0);
    table_bytes = std::max(table_bytes, WritePlanWriter::FixedBytes(ranks_[r].table.size()));
  }
  part_capacity_ = std::max(opt_.part_bytes, table_bytes + kMinRecordRoom);
}

PlanStreamer::~PlanStreamer() {
  for (RankStream& rs : ranks_) {
    if (rs.pool != nullptr) rs.pool->RetireUnconsumed();
  }
}

Status PlanStreamer::OpenPart(uint32_t r) {
  ++lend_generation_;
  RankStream& rs = ranks_[r];
  RETURN_IF_ERROR(Drain(r, opt_.max_in_flight));
  const uint64_t root_bytes = deltasync::PlanArenaRootBytes(opt_.version.size());
  // Always the same capacity for a given part size and version length, so arenas are reused
  // from one sync to the next (the version id is padded to 8 bytes; ids of up to 64 bytes share
  // one size).
  const uint64_t capacity =
      shm::kArenaDataOffset +
      deltasync::PlanArenaRootBytes(std::max<size_t>(opt_.version.size(), 64)) + part_capacity_ +
      64;
  ASSIGN_OR_RETURN(
      shm::PlanArenaWriter * arena,
      rs.pool->Acquire(capacity, next_generation_(), opt_.sync_id, opt_.max_in_flight + 1));
  ASSIGN_OR_RETURN(uint64_t root, arena->Allocate(root_bytes, 8));
  RETURN_IF_ERROR(arena->SetRoot(root));
  std::memcpy(arena->Bytes(root, root_bytes).data() + sizeof(deltasync::PlanArenaRoot),
              opt_.version.data(), opt_.version.size());
  ASSIGN_OR_RETURN(uint64_t plan_at, arena->Allocate(part_capacity_, 8));
  if (plan_at != root + root_bytes) return Internal("plan arena blocks are not contiguous");
  rs.plan_offset = plan_at;
  rs.arena = arena;
  rs.writer.emplace(arena->Bytes(plan_at, part_capacity_), rs.table,
                    deltasync::kPlanVersionCompact);
  RETURN_IF_ERROR(rs.writer->status());
  rs.writer->CountLines(rs.last_line.data(), &touched_lines_);
  return Status::Ok();
}

Status PlanStreamer::SendPart(uint32_t r, bool last) {
  ++lend_generation_;
  RankStream& rs = ranks_[r];
  ASSIGN_OR_RETURN(uint64_t used, rs.writer->Finish());
  const uint64_t root_bytes = deltasync::PlanArenaRootBytes(opt_.version.size());
  deltasync::PlanArenaRoot root{used, static_cast<uint32_t>(opt_.version.size()), rs.next_part};
  std::memcpy(rs.arena->Bytes(rs.plan_offset - root_bytes, sizeof(root)).data(), &root,
              sizeof(root));
  RETURN_IF_ERROR(rs.arena->Publish());
  shm::PlanRef ref = rs.arena->Ref();
  ref.flags = last ? 0 : shm::kPlanMore;
  ASSIGN_OR_RETURN(shm::Message msg, shm::MakePlan(opt_.sync_id, ref));
  ASSIGN_OR_RETURN(auto bytes, shm::EncodeMessage(msg));
  RETURN_IF_ERROR(rs.channel->commands.Push(bytes, 5s).WithPrefix(
      "sending plan part " + std::to_string(rs.next_part) + " to rank " + std::to_string(r)));
  rs.sent.push_back(rs.arena);
  rs.arena = nullptr;
  records_sent_ += rs.writer->record_count();
  rs.writer.reset();
  ++rs.next_part;
  ++parts_sent_;
  return Status::Ok();
}

Status PlanStreamer::Drain(uint32_t r, size_t keep) {
  RankStream& rs = ranks_[r];
  const auto deadline = Clock::now() + opt_.consume_timeout;
  std::vector<uint8_t> buf;
  // A rank takes a part by marking its arena consumed, which sends no message: the wait looks
  // again after 100 us, then twice as long each time, up to 20 ms. (A fixed 20 ms cost about
  // 20 ms per part whenever parts waited, though a rank takes one within a few ms.)
  std::chrono::nanoseconds wait = 100us;
  for (;;) {
    while (!rs.sent.empty() && rs.sent.front()->state() == shm::ArenaState::kConsumed) {
      rs.sent.pop_front();  // the pool may rewrite it now
    }
    if (rs.sent.size() <= keep) return Status::Ok();
    // The rank answers only with ERROR before its last part; anything else is stale.
    auto popped = rs.channel->responses.Pop(&buf, wait);
    wait = std::min<std::chrono::nanoseconds>(2 * wait, 20ms);
    if (!popped.ok()) return popped.status().WithPrefix("rank " + std::to_string(r));
    if (*popped) {
      auto msg = shm::DecodeMessage(buf);
      if (msg.ok()) RETURN_IF_ERROR(RankErrorStatus(*msg, opt_.sync_id, r));
      continue;
    }
    RETURN_IF_ERROR(check_rank_(r));
    if (Clock::now() > deadline) {
      return FailedPrecondition("engine rank " + std::to_string(r) + " did not take plan part " +
                                std::to_string(rs.next_part - rs.sent.size()) + " within " +
                                std::to_string(opt_.consume_timeout.count()) + " ms");
    }
  }
}

Status PlanStreamer::Add(uint32_t r, uint32_t tensor, uint64_t local_offset,
                         uint64_t canonical_offset, std::span<const uint8_t> bytes, bool owner) {
  if (r >= ranks_.size()) return Internal("layout names rank beyond the registered ranks");
  RankStream& rs = ranks_[r];
  if (tensor >= rs.last_line.size()) return Internal("plan record names an unknown tensor");
  if (rs.writer && rs.writer->TryAddShort(tensor, local_offset, canonical_offset, bytes, owner)) {
    return Status::Ok();
  }
  while (!bytes.empty()) {
    if (!rs.writer) RETURN_IF_ERROR(OpenPart(r));
    uint64_t n = bytes.size();
    if (WritePlanWriter::RecordBytes(n) > rs.writer->remaining()) {
      if (rs.writer->record_count() > 0) {
        RETURN_IF_ERROR(SendPart(r, /*last=*/false));
        continue;
      }
      // A run larger than a whole part: split it.
      n = (rs.writer->remaining() - WritePlanWriter::kMaxRecordOverhead) & ~uint64_t{7};
    }
    RETURN_IF_ERROR(rs.writer->Add(tensor, local_offset, canonical_offset, bytes.first(n), owner));
    bytes = bytes.subspan(n);
    local_offset += n;
    canonical_offset += n;
  }
  return Status::Ok();
}

bool PlanStreamer::AddShort(uint32_t r, uint32_t tensor, uint64_t local_offset,
                            uint64_t canonical_offset, std::span<const uint8_t> bytes, bool owner) {
  if (r >= ranks_.size()) return false;
  RankStream& rs = ranks_[r];
  // The writer refuses a tensor beyond its table (the rank's, as last_line).
  return rs.writer && rs.writer->TryAddShort(tensor, local_offset, canonical_offset, bytes, owner);
}

Status PlanStreamer::AddRecorded(uint32_t r, const deltasync::WritePlanWriter& records) {
  if (r >= ranks_.size()) return Internal("layout names rank beyond the registered ranks");
  RankStream& rs = ranks_[r];
  if (records.records().empty()) return Status::Ok();
  if (!rs.writer) RETURN_IF_ERROR(OpenPart(r));
  if (rs.writer->AppendFrom(records)) return Status::Ok();
  if (rs.writer->record_count() > 0) {
    RETURN_IF_ERROR(SendPart(r, /*last=*/false));
    RETURN_IF_ERROR(OpenPart(r));
    if (rs.writer->AppendFrom(records)) return Status::Ok();
  }
  return PlanOutput::AddRecorded(r, records);
}

Status PlanStreamer::Finish() {
  for (uint32_t r = 0; r < ranks_.size(); ++r) {
    if (!ranks_[r].writer) RETURN_IF_ERROR(OpenPart(r));
    RETURN_IF_ERROR(SendPart(r, /*last=*/true));
  }
  return Status::Ok();
}

}  // namespace deltakv::sidecar
