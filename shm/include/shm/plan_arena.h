// PlanArena: a shared-memory segment that carries one part of one rank's write plan for one
// sync from the sidecar to that engine rank (layout: shm/PROTOCOL.md §4). A plan is streamed
// as a sequence of bounded parts, each in its own arena, so the sidecar never holds a whole
// plan.
//
// The sidecar creates the arena (state WRITING), bump-allocates aligned blocks addressed by
// offsets from the start of the segment, fills them, records the root block and publishes
// (release-store READY). It then sends the arena's name and generation in a kPlan message.
// The rank opens the arena and trusts it only if the state is READY and the generation is the
// one the message named; it reads blocks through bounds-checked spans, and marks the arena
// CONSUMED once it holds its own copy (the sidecar then drops the arena). State machine:
//
//   EMPTY(0) --Create--> WRITING(1) --Publish--> READY(2) --MarkConsumed--> CONSUMED(3)
//
// Ownership: the sidecar's PlanArenaWriter unlinks the name when destroyed (when the sync ends)
// unless told to keep it; a reader keeps its mapping until destroyed. A restarted sidecar removes
// the arenas of its dead predecessor with RemoveStaleArenas(prefix).
//
// Thread-safety: a writer is used by one thread; a reader's accessors are const and may be
// called from many threads. The arena's bytes are immutable once READY.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "base/status.h"
#include "shm/messages.h"
#include "shm/segment.h"

namespace deltakv::shm {

inline constexpr uint64_t kArenaMagic = MagicFromText("DKVARENA");

enum class ArenaState : uint32_t { kEmpty = 0, kWriting = 1, kReady = 2, kConsumed = 3 };
std::string_view ArenaStateName(uint32_t state);

// At byte 64 of the segment, after the SegmentHeader.
struct ArenaHeader {
  uint64_t magic;               // kArenaMagic
  uint32_t layout_version;      // kLayoutVersion
  uint32_t header_size;         // sizeof(ArenaHeader) == 64
  std::atomic<uint32_t> state;  // ArenaState; READY is release-stored after all bytes
  uint32_t rank;                // the rank the plan is for
  uint64_t generation;          // the sidecar's id for this arena; named in the kPlan message
  uint64_t sync_id;             // the sync the plan belongs to
  std::atomic<uint64_t> used;   // first free byte (offset from the segment start), >= 128
  uint64_t root_offset;         // offset of the plan's root block; 0 = none
  uint32_t writer_pid;          // the sidecar process that wrote it
  uint32_t reserved;            // zero
};
static_assert(sizeof(ArenaHeader) == 64);
static_assert(offsetof(ArenaHeader, state) == 16);
static_assert(offsetof(ArenaHeader, rank) == 20);
static_assert(offsetof(ArenaHeader, generation) == 24);
static_assert(offsetof(ArenaHeader, sync_id) == 32);
static_assert(offsetof(ArenaHeader, used) == 40);
static_assert(offsetof(ArenaHeader, root_offset) == 48);
static_assert(offsetof(ArenaHeader, writer_pid) == 56);

inline constexpr uint64_t kArenaHeaderOffset = sizeof(SegmentHeader);
inline constexpr uint64_t kArenaDataOffset = kArenaHeaderOffset + sizeof(ArenaHeader);  // 128

// "<prefix>-plan-<sync_id>-r<rank>-p<part>", the name the sidecar gives the arena that carries
// part `part` of rank `rank`'s plan for sync `sync_id`.
std::string PlanArenaName(std::string_view prefix, uint64_t sync_id, uint32_t rank,
                          uint32_t part = 0);
// Unlinks every arena named "<prefix>-plan-*". Returns how many were removed.
StatusOr<size_t> RemoveStaleArenas(std::string_view prefix);

struct PlanArenaOptions {
  uint64_t capacity = 0;  // total segment bytes, >= 128 (header included)
  uint64_t generation = 0;
  uint64_t sync_id = 0;
  uint32_t rank = 0;
  IfExists if_exists = IfExists::kFail;
};

// The sidecar's side.
class PlanArenaWriter {
 public:
  PlanArenaWriter() = default;
  // Creates the arena in state WRITING. Errors as Segment::Create; InvalidArgument if the
  // capacity cannot hold the headers.
  static StatusOr<PlanArenaWriter> Create(const std::string& name, const PlanArenaOptions& options);

  // Reserves `size` bytes aligned to `alignment` (a power of two <= 4096) and returns their
  // offset from the segment start. FailedPrecondition unless WRITING; InvalidArgument for a
  // bad alignment; ResourceExhausted when the arena is full (nothing is reserved).
  StatusOr<uint64_t> Allocate(uint64_t size, uint64_t alignment = 64);
  // The bytes of an allocated block; empty if [offset, offset+size) is not inside the used area.
  std::span<uint8_t> Bytes(uint64_t offset, uint64_t size);
  // Records the block the reader starts from. InvalidArgument if it is not inside the used area.
  Status SetRoot(uint64_t offset);
  // WRITING → READY (release): every byte written before is visible to readers that see READY.
  // FailedPrecondition if the arena is not WRITING.
  Status Publish();

  ArenaState state() const;
  uint64_t generation() const { return header_->generation; }
  uint64_t used_bytes() const;
  const std::string& name() const { return segment_.name(); }
  PlanRef Ref() const { return PlanRef{segment_.name(), header_->generation}; }
  // Keep the name after destruction (e.g. a test that hands it to another process).
  void KeepOnDestroy() { segment_.set_unlink_on_destroy(false); }

 private:
  Segment segment_;
  ArenaHeader* header_ = nullptr;
};

// The rank's side.
class PlanArenaReader {
 public:
  PlanArenaReader() = default;
  // Opens `name` and checks it: segment header (Segment::Open), arena magic, version and header
  // size, state READY, generation == `expected_generation`, used and root offsets inside the
  // segment. NotFound if absent; FailedPrecondition if the state is not READY or the
  // generation differs (a stale or unfinished arena); DataLoss for a corrupt header.
  static StatusOr<PlanArenaReader> Open(const std::string& name, uint64_t expected_generation,
                                        const OpenOptions& options = {});

  // The bytes [offset, offset+size), if they lie inside the used data area
  // [kArenaDataOffset, used) captured at Open; InvalidArgument otherwise.
  StatusOr<std::span<const uint8_t>> Block(uint64_t offset, uint64_t size) const;
  // Re-checks that the arena is still READY (or CONSUMED) with the same generation.
  Status CheckValid() const;
  // READY → CONSUMED by CAS. FailedPrecondition if the state was not READY.
  Status MarkConsumed();

  uint64_t generation() const { return generation_; }
  uint64_t sync_id() const { return sync_id_; }
  uint32_t rank() const { return rank_; }
  uint64_t root_offset() const { return root_offset_; }
  uint64_t used_bytes() const { return used_; }

 private:
  Segment segment_;
  ArenaHeader* header_ = nullptr;
  uint64_t generation_ = 0;
  uint64_t sync_id_ = 0;
  uint32_t rank_ = 0;
  uint64_t root_offset_ = 0;
  uint64_t used_ = 0;  // snapshot, validated against the segment size
};

}  // namespace deltakv::shm
