// PlanArena: a shared-memory segment that carries one part of one rank's write plan from the
// sidecar to that engine rank (layout: shm/PROTOCOL.md §4). A plan is streamed as a sequence of
// bounded parts, so the sidecar never holds a whole plan; the arenas that carry them are reused
// across parts and syncs, so a part costs neither segment creation nor page faults.
//
// The sidecar creates an arena (state WRITING), bump-allocates aligned blocks addressed by
// offsets from the start of the segment, fills them, records the root block and publishes
// (release-store READY). It then sends the arena's name and generation in a kPlan message.
// The rank opens the arena (or re-checks the mapping it kept) and trusts it only if the state
// is READY and the generation is the one the message named; it reads blocks through
// bounds-checked spans, and marks the arena CONSUMED once it holds its own copy. The sidecar
// may then rewrite it for another part under a new generation (Reuse). An arena the sidecar
// gives up is RETIRED and unlinked; ranks drop their mappings of retired arenas. States:
//
//   EMPTY(0) --Create--> WRITING(1) --Publish--> READY(2) --MarkConsumed--> CONSUMED(3)
//   CONSUMED --Reuse (new generation)--> WRITING;   any --Retire--> RETIRED(4)
//
// Ownership: the sidecar's PlanArenaWriter unlinks the name when destroyed unless told to keep
// it; a reader keeps its mapping until destroyed. PlanArenaPool holds one rank's reusable
// arenas on the sidecar, PlanArenaCache the arenas a rank keeps mapped. A restarted sidecar
// retires and removes the arenas of its dead predecessor with RemoveStaleArenas(prefix).
//
// Thread-safety: a writer, a pool and a cache are used by one thread; a reader's accessors are
// const and may be called from many threads. The arena's bytes are immutable while READY.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "shm/messages.h"
#include "shm/segment.h"

namespace deltakv::shm {

inline constexpr uint64_t kArenaMagic = MagicFromText("DKVARENA");

enum class ArenaState : uint32_t {
  kEmpty = 0,
  kWriting = 1,
  kReady = 2,
  kConsumed = 3,
  kRetired = 4,  // given up by the sidecar (and unlinked): never READY again
};
std::string_view ArenaStateName(uint32_t state);

// At byte 64 of the segment, after the SegmentHeader.
struct ArenaHeader {
  uint64_t magic;               // kArenaMagic
  uint32_t layout_version;      // kLayoutVersion
  uint32_t header_size;         // sizeof(ArenaHeader) == 64
  std::atomic<uint32_t> state;  // ArenaState; READY is release-stored after all bytes
  uint32_t rank;                // the rank the plan is for
  uint64_t generation;          // the sidecar's id for this write of the arena; named in kPlan
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

// "<prefix>-plan-<sync_id>-r<rank>-p<part>": a name for an arena used once (tests, tools).
std::string PlanArenaName(std::string_view prefix, uint64_t sync_id, uint32_t rank,
                          uint32_t part = 0);
// "<prefix>-plan-r<rank>-a<slot>": the name of arena `slot` of rank `rank`'s pool on the
// sidecar (PlanArenaPool), reused across parts and syncs.
std::string PlanArenaPoolName(std::string_view prefix, uint32_t rank, uint32_t slot);
// Retires (so that ranks drop their mappings) and unlinks every arena named "<prefix>-plan-*".
// Returns how many were removed.
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
  // CONSUMED → WRITING by CAS (the rank's reads of the previous contents happen before), then
  // starts a new write: nothing allocated, no root, `generation` and `sync_id` recorded. The
  // pages stay mapped and faulted in. FailedPrecondition if the arena was not CONSUMED (a rank
  // may still be reading it); nothing changes then.
  Status Reuse(uint64_t generation, uint64_t sync_id);
  // Any state → RETIRED: a rank that has not consumed it fails to, and readers that kept it
  // mapped drop it. Returns the previous state. The arena is never written again.
  ArenaState Retire();
  // Maps every page of the segment now (one batched call instead of a fault per page), so
  // writing a part costs no page faults. Best effort: a kernel without it leaves the faults.
  void Prefault();

  ArenaState state() const;
  uint64_t generation() const { return header_->generation; }
  uint64_t used_bytes() const;
  uint64_t capacity() const { return segment_.size(); }
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
  // READY → CONSUMED by CAS. FailedPrecondition if the state was not READY (the arena was
  // retired: what was read from it belongs to a sync the sidecar gave up).
  Status MarkConsumed();
  // Checks the mapping again as Open does, for the part the sidecar wrote into the same arena
  // under `expected_generation`, and captures its used and root offsets. Errors as Open; on
  // error the reader keeps its previous snapshot.
  Status Rebind(uint64_t expected_generation);
  // Maps every page of the segment now (best effort), so reading later parts costs no faults.
  void Prefault() const;

  ArenaState state() const;
  const std::string& name() const { return segment_.name(); }
  // Whether both map the same incarnation of a name (creator pid and creation time).
  bool SameSegment(const PlanArenaReader& other) const;
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

// The sidecar's reusable arenas for one rank: slot i holds the arena named
// PlanArenaPoolName(prefix, rank, i), created on first need and rewritten after the rank
// consumed it. Its memory is at most max_arenas × capacity (the caller's bounds).
class PlanArenaPool {
 public:
  PlanArenaPool(std::string prefix, uint32_t rank) : prefix_(std::move(prefix)), rank_(rank) {}
  PlanArenaPool(const PlanArenaPool&) = delete;
  PlanArenaPool& operator=(const PlanArenaPool&) = delete;
  ~PlanArenaPool() { RetireAll(); }

  // An arena of exactly `capacity` bytes in state WRITING for (`generation`, `sync_id`): the
  // CONSUMED one of that capacity in the lowest slot, rewritten; else a new one (pages
  // prefaulted) in the lowest free slot below `max_arenas`. CONSUMED arenas of another capacity
  // or in a slot at or above `max_arenas` are retired on the way. ResourceExhausted when every
  // slot below `max_arenas` holds an arena still READY or WRITING. The pointer stays valid until
  // the arena is retired.
  StatusOr<PlanArenaWriter*> Acquire(uint64_t capacity, uint64_t generation, uint64_t sync_id,
                                     size_t max_arenas);
  // Retires and unlinks every arena that is not CONSUMED (being written, or sent and not
  // taken): at the end of a sync no rank may use them any more. Returns how many.
  size_t RetireUnconsumed();
  // Retires and unlinks every arena.
  void RetireAll();

  size_t arenas() const;
  uint64_t mapped_bytes() const;

 private:
  std::string prefix_;
  uint32_t rank_;
  std::vector<std::unique_ptr<PlanArenaWriter>> slots_;  // null: free
};

// The arenas a rank keeps mapped across parts and syncs, at most `max_entries` (the least
// recently used is dropped first).
class PlanArenaCache {
 public:
  explicit PlanArenaCache(size_t max_entries = 16) : max_entries_(max_entries) {}

  // The arena `name`, checked for `generation` as PlanArenaReader::Open does: the kept mapping
  // when it is READY under that generation (Rebind), else the name opened anew, replacing it
  // if that passes (a generation names one write of one arena, so a kept mapping of a segment
  // since replaced under the name never passes). Errors as PlanArenaReader::Open. The pointer
  // stays valid until the next call to any method.
  StatusOr<PlanArenaReader*> Open(const std::string& name, uint64_t generation);
  // Drops the mappings of retired arenas; returns how many.
  size_t Sweep();
  void Clear() { entries_.clear(); }
  size_t size() const { return entries_.size(); }
  // How many times a name was mapped (opened anew) so far.
  uint64_t opens() const { return opens_; }

 private:
  struct Entry {
    std::unique_ptr<PlanArenaReader> reader;
    uint64_t last_use = 0;
  };
  size_t max_entries_;
  uint64_t clock_ = 0;
  uint64_t opens_ = 0;
  std::vector<Entry> entries_;
};

}  // namespace deltakv::shm
