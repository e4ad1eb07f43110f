#include "shm/plan_arena.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <new>

namespace deltakv::shm {
namespace {

std::string Label(std::string_view name) { return "plan arena '" + std::string(name) + "'"; }

// Moves `state` from `from` to `to` in one compare-and-swap (`order` on success);
// FailedPrecondition "<arena>: <action> in state <actual>" when it was not in `from`.
Status Transition(std::atomic<uint32_t>& state, ArenaState from, ArenaState to,
                  std::memory_order order, std::string_view name, const char* action) {
  uint32_t expected = static_cast<uint32_t>(from);
  if (!state.compare_exchange_strong(expected, static_cast<uint32_t>(to), order,
                                     std::memory_order_relaxed)) {
    return FailedPrecondition(Label(name) + ": " + action + " in state " +
                              std::string(ArenaStateName(expected)));
  }
  return Status::Ok();
}

// Maps the pages of [data, data + size) now, with MADV_POPULATE_(READ|WRITE) (Linux 5.14); a
// kernel without it (EINVAL) keeps faulting them one by one, which is only slower.
void Populate(uint8_t* data, uint64_t size, bool write) {
#if defined(MADV_POPULATE_READ) && defined(MADV_POPULATE_WRITE)
  if (data != nullptr && size > 0) {
    (void)madvise(data, static_cast<size_t>(size),
                  write ? MADV_POPULATE_WRITE : MADV_POPULATE_READ);
  }
#else
  (void)data;
  (void)size;
  (void)write;
#endif
}

// What a reader captures from a READY arena.
struct Snapshot {
  uint64_t generation = 0;
  uint64_t sync_id = 0;
  uint32_t rank = 0;
  uint64_t root = 0;
  uint64_t used = 0;
};

// The checks of PlanArenaReader::Open on a mapped arena header.
StatusOr<Snapshot> Check(std::string_view name, ArenaHeader* h, uint64_t segment_size,
                         uint64_t expected_generation) {
  if (h->magic != kArenaMagic) return DataLoss(Label(name) + ": bad arena magic");
  if (h->layout_version != kLayoutVersion) {
    return FailedPrecondition(Label(name) + ": arena layout version " +
                              std::to_string(h->layout_version) + ", this build speaks " +
                              std::to_string(kLayoutVersion));
  }
  if (h->header_size != sizeof(ArenaHeader)) {
    return DataLoss(Label(name) + ": arena header size " + std::to_string(h->header_size));
  }
  // Acquire pairs with Publish's release: everything the writer wrote is visible below. While
  // READY only the reader's CONSUMED or the sidecar's RETIRED can change the state, neither of
  // which changes a byte, so what is read below is the published part.
  const uint32_t state = h->state.load(std::memory_order_acquire);
  if (state != static_cast<uint32_t>(ArenaState::kReady)) {
    return FailedPrecondition(Label(name) + " is " + std::string(ArenaStateName(state)) +
                              ", not READY");
  }
  if (h->generation != expected_generation) {
    return FailedPrecondition(Label(name) + " has generation " + std::to_string(h->generation) +
                              ", expected " + std::to_string(expected_generation));
  }
  Snapshot snap;
  snap.used = h->used.load(std::memory_order_relaxed);
  if (snap.used < kArenaDataOffset || snap.used > segment_size) {
    return DataLoss(Label(name) + ": used size " + std::to_string(snap.used) + " outside [128, " +
                    std::to_string(segment_size) + "]");
  }
  snap.root = h->root_offset;
  if (snap.root != 0 && (snap.root < kArenaDataOffset || snap.root >= snap.used)) {
    return DataLoss(Label(name) + ": root offset " + std::to_string(snap.root) +
                    " outside the used area");
  }
  snap.generation = h->generation;
  snap.sync_id = h->sync_id;
  snap.rank = h->rank;
  return snap;
}

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
    case ArenaState::kRetired:
      return "RETIRED";
  }
  return "INVALID";
}

std::string PlanArenaName(std::string_view prefix, uint64_t sync_id, uint32_t rank,
                          uint32_t part) {
  return std::string(prefix) + "-plan-" + std::to_string(sync_id) + "-r" + std::to_string(rank) +
         "-p" + std::to_string(part);
}

std::string PlanArenaPoolName(std::string_view prefix, uint32_t rank, uint32_t slot) {
  return std::string(prefix) + "-plan-r" + std::to_string(rank) + "-a" + std::to_string(slot);
}

StatusOr<size_t> RemoveStaleArenas(std::string_view prefix) {
  if (prefix.empty()) return InvalidArgument("RemoveStaleArenas: empty prefix");
  const std::string stem = std::string(prefix) + "-plan-";
  // Retired first, so that ranks that keep one mapped drop it (their copy of a part being read
  // fails to be marked consumed: it belongs to the dead instance's sync, which never commits).
  OpenOptions quick;
  quick.init_timeout = std::chrono::milliseconds(0);
  for (const std::string& name : Segment::ListWithPrefix(stem)) {
    auto segment = Segment::Open(name, SegmentKind::kPlanArena, quick);
    if (!segment.ok() || segment->size() < kArenaDataOffset) continue;
    auto* h = reinterpret_cast<ArenaHeader*>(segment->data() + kArenaHeaderOffset);
    if (h->magic == kArenaMagic && h->header_size == sizeof(ArenaHeader)) {
      h->state.exchange(static_cast<uint32_t>(ArenaState::kRetired), std::memory_order_acq_rel);
    }
  }
  return Segment::UnlinkWithPrefix(stem);
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
  return Transition(header_->state, ArenaState::kWriting, ArenaState::kReady,
                    std::memory_order_release, name(), "publish");
}

Status PlanArenaWriter::Reuse(uint64_t generation, uint64_t sync_id) {
  // Acquire pairs with the rank's CAS to CONSUMED: its reads of the old part happen before the
  // writes of the new one.
  RETURN_IF_ERROR(Transition(header_->state, ArenaState::kConsumed, ArenaState::kWriting,
                             std::memory_order_acquire, name(), "reuse"));
  header_->generation = generation;
  header_->sync_id = sync_id;
  header_->used.store(kArenaDataOffset, std::memory_order_relaxed);
  header_->root_offset = 0;
  header_->writer_pid = static_cast<uint32_t>(getpid());
  return Status::Ok();
}

ArenaState PlanArenaWriter::Retire() {
  return static_cast<ArenaState>(header_->state.exchange(
      static_cast<uint32_t>(ArenaState::kRetired), std::memory_order_acq_rel));
}

void PlanArenaWriter::Prefault() { Populate(segment_.data(), segment_.size(), /*write=*/true); }

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
  ASSIGN_OR_RETURN(Snapshot snap, Check(name, h, segment.size(), expected_generation));
  PlanArenaReader reader;
  reader.header_ = h;
  reader.generation_ = snap.generation;
  reader.sync_id_ = snap.sync_id;
  reader.rank_ = snap.rank;
  reader.root_offset_ = snap.root;
  reader.used_ = snap.used;
  reader.segment_ = std::move(segment);
  return reader;
}

Status PlanArenaReader::Rebind(uint64_t expected_generation) {
  if (header_ == nullptr) return FailedPrecondition("plan arena reader is not open");
  ASSIGN_OR_RETURN(Snapshot snap,
                   Check(segment_.name(), header_, segment_.size(), expected_generation));
  generation_ = snap.generation;
  sync_id_ = snap.sync_id;
  rank_ = snap.rank;
  root_offset_ = snap.root;
  used_ = snap.used;
  return Status::Ok();
}

void PlanArenaReader::Prefault() const {
  Populate(segment_.data(), segment_.size(), /*write=*/false);
}

bool PlanArenaReader::SameSegment(const PlanArenaReader& other) const {
  const SegmentHeader* a = segment_.header();
  const SegmentHeader* b = other.segment_.header();
  return a != nullptr && b != nullptr && a->creator_pid == b->creator_pid &&
         a->created_realtime_ns == b->created_realtime_ns;
}

ArenaState PlanArenaReader::state() const {
  return static_cast<ArenaState>(header_->state.load(std::memory_order_acquire));
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
  return Transition(header_->state, ArenaState::kReady, ArenaState::kConsumed,
                    std::memory_order_acq_rel, segment_.name(), "consume");
}

// -------------------------------------------------------------------------------------- pool

StatusOr<PlanArenaWriter*> PlanArenaPool::Acquire(uint64_t capacity, uint64_t generation,
                                                  uint64_t sync_id, size_t max_arenas) {
  if (max_arenas == 0) return InvalidArgument("plan arena pool: max_arenas is 0");
  PlanArenaWriter* reuse = nullptr;
  for (size_t i = 0; i < slots_.size(); ++i) {
    std::unique_ptr<PlanArenaWriter>& slot = slots_[i];
    if (!slot || slot->state() != ArenaState::kConsumed) continue;
    if (i >= max_arenas || slot->capacity() != capacity) {
      slot->Retire();
      slot.reset();  // unmaps and unlinks
    } else if (reuse == nullptr) {
      reuse = slot.get();
    }
  }
  while (!slots_.empty() && !slots_.back()) slots_.pop_back();
  if (reuse != nullptr) {
    RETURN_IF_ERROR(reuse->Reuse(generation, sync_id));
    return reuse;
  }
  size_t free = 0;
  while (free < slots_.size() && slots_[free]) ++free;
  if (free >= max_arenas) {
    return ResourceExhausted("plan arenas of rank " + std::to_string(rank_) + ": all " +
                             std::to_string(max_arenas) + " are in use");
  }
  PlanArenaOptions ao;
  ao.capacity = capacity;
  ao.generation = generation;
  ao.sync_id = sync_id;
  ao.rank = rank_;
  ao.if_exists = IfExists::kReplace;  // a name left by a dead predecessor is stale
  ASSIGN_OR_RETURN(
      PlanArenaWriter arena,
      PlanArenaWriter::Create(PlanArenaPoolName(prefix_, rank_, static_cast<uint32_t>(free)), ao));
  arena.Prefault();
  if (free == slots_.size()) slots_.emplace_back();
  slots_[free] = std::make_unique<PlanArenaWriter>(std::move(arena));
  return slots_[free].get();
}

size_t PlanArenaPool::RetireUnconsumed() {
  size_t n = 0;
  for (std::unique_ptr<PlanArenaWriter>& slot : slots_) {
    if (slot && slot->state() != ArenaState::kConsumed) {
      slot->Retire();
      slot.reset();
      ++n;
    }
  }
  while (!slots_.empty() && !slots_.back()) slots_.pop_back();
  return n;
}

void PlanArenaPool::RetireAll() {
  for (std::unique_ptr<PlanArenaWriter>& slot : slots_) {
    if (slot) slot->Retire();
    slot.reset();
  }
  slots_.clear();
}

size_t PlanArenaPool::arenas() const {
  return static_cast<size_t>(
      std::count_if(slots_.begin(), slots_.end(), [](const auto& s) { return s != nullptr; }));
}

uint64_t PlanArenaPool::mapped_bytes() const {
  uint64_t n = 0;
  for (const auto& s : slots_) n += s ? s->capacity() : 0;
  return n;
}

// ------------------------------------------------------------------------------------- cache

StatusOr<PlanArenaReader*> PlanArenaCache::Open(const std::string& name, uint64_t generation) {
  ++clock_;
  auto it = std::find_if(entries_.begin(), entries_.end(),
                         [&](const Entry& e) { return e.reader->name() == name; });
  if (it != entries_.end()) {
    it->last_use = clock_;
    Status kept = it->reader->Rebind(generation);
    if (kept.ok()) return it->reader.get();
    // Not READY under this generation: either the name now refers to another segment (a
    // retired arena replaced), or the message is stale or early, and opening the name anew
    // refuses it too; the kept mapping then stays unless it is retired.
    StatusOr<PlanArenaReader> fresh = PlanArenaReader::Open(name, generation);
    if (!fresh.ok()) {
      if (it->reader->state() == ArenaState::kRetired) entries_.erase(it);
      return fresh.status();
    }
    if (fresh->SameSegment(*it->reader) && it->reader->Rebind(generation).ok()) {
      return it->reader.get();  // it was published meanwhile: the kept mapping serves
    }
    fresh->Prefault();
    *it->reader = std::move(fresh).value();
    ++opens_;
    return it->reader.get();
  }
  ASSIGN_OR_RETURN(PlanArenaReader reader, PlanArenaReader::Open(name, generation));
  reader.Prefault();
  ++opens_;
  if (max_entries_ == 0) max_entries_ = 1;
  while (entries_.size() >= max_entries_) {
    entries_.erase(
        std::min_element(entries_.begin(), entries_.end(),
                         [](const Entry& a, const Entry& b) { return a.last_use < b.last_use; }));
  }
  entries_.push_back({std::make_unique<PlanArenaReader>(std::move(reader)), clock_});
  return entries_.back().reader.get();
}

size_t PlanArenaCache::Sweep() {
  const size_t before = entries_.size();
  std::erase_if(entries_, [](const Entry& e) { return e.reader->state() == ArenaState::kRetired; });
  return before - entries_.size();
}

}  // namespace deltakv::shm
