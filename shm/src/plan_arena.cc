#include "shm/plan_arena.h"

#include <unistd.h>

#include <new>

namespace deltakv::shm {
namespace {

std::string Label(std::string_view name) { return "plan arena '" + std::string(name) + "'"; }

}  // namespace

std::string_view ArenaStateName(uint32_t state) {
  switch (static_cast<ArenaState>(state)) {
    case ArenaState::kEmpty:
      return "EMPTY";
    case ArenaState::kWriting:
      return "WRITING";
    case ArenaState::kReady:
      return "READY";
    case ArenaState::kConsumed:
      return "CONSUMED";
  }
  return "INVALID";
}

std::string PlanArenaName(std::string_view prefix, uint64_t sync_id, uint32_t rank,
                          uint32_t part) {
  return std::string(prefix) + "-plan-" + std::to_string(sync_id) + "-r" + std::to_string(rank) +
         "-p" + std::to_string(part);
}

StatusOr<size_t> RemoveStaleArenas(std::string_view prefix) {
  if (prefix.empty()) return InvalidArgument("RemoveStaleArenas: empty prefix");
  return Segment::UnlinkWithPrefix(std::string(prefix) + "-plan-");
}

// ------------------------------------------------------------------------------------ writer

StatusOr<PlanArenaWriter> PlanArenaWriter::Create(const std::string& name,
                                                  const PlanArenaOptions& options) {
  if (options.capacity < kArenaDataOffset) {
    return InvalidArgument(Label(name) + ": capacity " + std::to_string(options.capacity) +
                           " cannot hold the 128 header bytes");
  }
  CreateOptions create;
  create.if_exists = options.if_exists;
  ASSIGN_OR_RETURN(Segment segment,
                   Segment::Create(name, options.capacity, SegmentKind::kPlanArena, create));
  auto* h = new (segment.data() + kArenaHeaderOffset) ArenaHeader{};
  h->magic = kArenaMagic;
  h->layout_version = kLayoutVersion;
  h->header_size = sizeof(ArenaHeader);
  h->rank = options.rank;
  h->generation = options.generation;
  h->sync_id = options.sync_id;
  h->used.store(kArenaDataOffset, std::memory_order_relaxed);
  h->root_offset = 0;
  h->writer_pid = static_cast<uint32_t>(getpid());
  h->state.store(static_cast<uint32_t>(ArenaState::kWriting), std::memory_order_relaxed);
  segment.Publish();  // the segment is visible; the arena is not READY yet

  PlanArenaWriter writer;
  writer.segment_ = std::move(segment);
  writer.header_ = h;
  return writer;
}

ArenaState PlanArenaWriter::state() const {
  return static_cast<ArenaState>(header_->state.load(std::memory_order_acquire));
}

uint64_t PlanArenaWriter::used_bytes() const {
  return header_->used.load(std::memory_order_relaxed);
}

StatusOr<uint64_t> PlanArenaWriter::Allocate(uint64_t size, uint64_t alignment) {
  if (state() != ArenaState::kWriting) {
    return FailedPrecondition(Label(name()) + ": allocate in state " +
                              std::string(ArenaStateName(static_cast<uint32_t>(state()))));
  }
  if (alignment == 0 || (alignment & (alignment - 1)) != 0 || alignment > 4096) {
    return InvalidArgument(Label(name()) + ": alignment " + std::to_string(alignment) +
                           " is not a power of two <= 4096");
  }
  const uint64_t used = used_bytes();
  const uint64_t offset = (used + alignment - 1) & ~(alignment - 1);
  if (offset > segment_.size() || size > segment_.size() - offset) {
    return ResourceExhausted(Label(name()) + ": " + std::to_string(size) + " bytes at alignment " +
                             std::to_string(alignment) + " do not fit (" + std::to_string(used) +
                             " of " + std::to_string(segment_.size()) + " used)");
  }
  header_->used.store(offset + size, std::memory_order_relaxed);
  return offset;
}

std::span<uint8_t> PlanArenaWriter::Bytes(uint64_t offset, uint64_t size) {
  const uint64_t used = used_bytes();
  if (offset < kArenaDataOffset || offset > used || size > used - offset) return {};
  return {segment_.data() + offset, static_cast<size_t>(size)};
}

Status PlanArenaWriter::SetRoot(uint64_t offset) {
  if (offset < kArenaDataOffset || offset >= used_bytes()) {
    return InvalidArgument(Label(name()) + ": root offset " + std::to_string(offset) +
                           " is outside the used area");
  }
  header_->root_offset = offset;
  return Status::Ok();
}

Status PlanArenaWriter::Publish() {
  uint32_t expected = static_cast<uint32_t>(ArenaState::kWriting);
  if (!header_->state.compare_exchange_strong(expected, static_cast<uint32_t>(ArenaState::kReady),
                                              std::memory_order_release,
                                              std::memory_order_relaxed)) {
    return FailedPrecondition(Label(name()) + ": publish in state " +
                              std::string(ArenaStateName(expected)));
  }
  return Status::Ok();
}

// ------------------------------------------------------------------------------------ reader

StatusOr<PlanArenaReader> PlanArenaReader::Open(const std::string& name,
                                                uint64_t expected_generation,
                                                const OpenOptions& options) {
  ASSIGN_OR_RETURN(Segment segment, Segment::Open(name, SegmentKind::kPlanArena, options));
  if (segment.size() < kArenaDataOffset) {
    return DataLoss(Label(name) + ": " + std::to_string(segment.size()) +
                    " bytes cannot hold the arena header");
  }
  auto* h = reinterpret_cast<ArenaHeader*>(segment.data() + kArenaHeaderOffset);
  if (h->magic != kArenaMagic) return DataLoss(Label(name) + ": bad arena magic");
  if (h->layout_version != kLayoutVersion) {
    return FailedPrecondition(Label(name) + ": arena layout version " +
                              std::to_string(h->layout_version) + ", this build speaks " +
                              std::to_string(kLayoutVersion));
  }
  if (h->header_size != sizeof(ArenaHeader)) {
    return DataLoss(Label(name) + ": arena header size " + std::to_string(h->header_size));
  }
  // Acquire pairs with Publish's release: everything the writer wrote is visible below.
  const uint32_t state = h->state.load(std::memory_order_acquire);
  if (state != static_cast<uint32_t>(ArenaState::kReady)) {
    return FailedPrecondition(Label(name) + " is " + std::string(ArenaStateName(state)) +
                              ", not READY");
  }
  if (h->generation != expected_generation) {
    return FailedPrecondition(Label(name) + " has generation " + std::to_string(h->generation) +
                              ", expected " + std::to_string(expected_generation));
  }
  const uint64_t used = h->used.load(std::memory_order_relaxed);
  if (used < kArenaDataOffset || used > segment.size()) {
    return DataLoss(Label(name) + ": used size " + std::to_string(used) + " outside [128, " +
                    std::to_string(segment.size()) + "]");
  }
  const uint64_t root = h->root_offset;
  if (root != 0 && (root < kArenaDataOffset || root >= used)) {
    return DataLoss(Label(name) + ": root offset " + std::to_string(root) +
                    " outside the used area");
  }
  PlanArenaReader reader;
  reader.header_ = h;
  reader.generation_ = h->generation;
  reader.sync_id_ = h->sync_id;
  reader.rank_ = h->rank;
  reader.root_offset_ = root;
  reader.used_ = used;
  reader.segment_ = std::move(segment);
  return reader;
}

StatusOr<std::span<const uint8_t>> PlanArenaReader::Block(uint64_t offset, uint64_t size) const {
  if (offset < kArenaDataOffset || offset > used_ || size > used_ - offset) {
    return InvalidArgument(Label(segment_.name()) + ": block [" + std::to_string(offset) + ", +" +
                           std::to_string(size) + ") outside the used area [128, " +
                           std::to_string(used_) + ")");
  }
  return std::span<const uint8_t>(segment_.data() + offset, static_cast<size_t>(size));
}

Status PlanArenaReader::CheckValid() const {
  const uint32_t state = header_->state.load(std::memory_order_acquire);
  if (state != static_cast<uint32_t>(ArenaState::kReady) &&
      state != static_cast<uint32_t>(ArenaState::kConsumed)) {
    return FailedPrecondition(Label(segment_.name()) + " is now " +
                              std::string(ArenaStateName(state)));
  }
  if (header_->generation != generation_) {
    return FailedPrecondition(Label(segment_.name()) + " changed generation");
  }
  return Status::Ok();
}

Status PlanArenaReader::MarkConsumed() {
  uint32_t expected = static_cast<uint32_t>(ArenaState::kReady);
  if (!header_->state.compare_exchange_strong(
          expected, static_cast<uint32_t>(ArenaState::kConsumed), std::memory_order_acq_rel)) {
    return FailedPrecondition(Label(segment_.name()) + ": consume in state " +
                              std::string(ArenaStateName(expected)));
  }
  return Status::Ok();
}

}  // namespace deltakv::shm
