// SlotPool: the host-RAM KV block pool shared by the sidecar and every engine process on a node.
//
// The pool is one shared-memory segment (SegmentKind::kKvPool, layout in kvtier/pool_layout.h)
// holding a fixed number of fixed-size slots, per-slot metadata, and the key -> slot index
// (kvtier/block_index.h). The sidecar creates it (Create) and keeps it across engine restarts;
// engines attach (Open). Each slot moves through
//
//   FREE --PrepareStore--> WRITING(pid, gen+1) --CommitStore--> READY(gen) --evict/Remove-->
//        EVICTING(pid) --(no pins)--> FREEING(pid) --> FREE, or straight to WRITING(gen+1)
//   WRITING --AbortStore / ReclaimDead--> FREE;  EVICTING --(pinned) or ReclaimDead--> READY
//
// and every transition is one CAS of the slot's 64-bit state word (pid | state | generation).
// Publishing a block is that CAS with release order after its bytes were written; a reader uses
// a slot only while it holds a pin taken on READY with the generation it looked up.
// kvtier/ORDERING.md is the happens-before contract for stores and loads.
//
// Pins: each slot has kMaxPinHolders holder words {pid, count}; a process pins by raising its
// own holder word (one CAS), so pins are attributed to processes and ReclaimDead can drop the
// pins of dead ones without a separate per-process table. At most kMaxPinHolders distinct
// processes can pin one slot at once (Pin then fails with ResourceExhausted). Pin and eviction
// exclude each other Dekker-style: Pin raises its holder then checks the state; an evictor
// moves READY -> EVICTING then checks the holders; both seq_cst, so one sees the other.
//
// Crash safety: a process killed mid-store leaves its slots WRITING(pid): never readable;
// ReclaimDead (run by the sidecar, e.g. when an engine's death is noticed) frees them, drops
// index entries and pins of dead processes, and puts interrupted evictions back. Blocks
// committed before a crash stay READY and readable by any process that opens the pool.
//
// Counters: every process adds to pool-wide counters in the segment (pool_layout.h, Counters):
// each thread of each SlotPool claims a counter shard of its own on first use and adds to it
// without locked instructions; Stats() sums the shards. A thread's shard stays claimed until its
// SlotPool is destroyed (or, for a dead process, until ReclaimDead); when every shard is taken,
// threads share shard 0 with atomic adds. Copy throughput (RecordCopy) is reported by the
// tier clients, which see the copies.
//
// Events: every store commit, eviction and removal is also written to the pool's event ring
// (pool_layout.h, Event ring) with the pid and attachment id of the process that caused it;
// any process reads the ring with its own cursor (OpenEventCursor / ReadEvents). Writers never
// block on readers; a reader that falls more than the ring's capacity behind is told how many
// events it lost. Around crashes delivery is at least once for evictions (ReclaimDead reports
// an eviction a dead process had committed) and at most once for stores (a process killed
// between its commit and its event leaves a READY block without a kStored event).
//
// Ownership: a SlotPool owns its mapping of the segment; the creating SlotPool unlinks the name
// on destruction unless told not to. PinnedBlocks unpin on destruction.
// Thread-safety: every method may be called concurrently from any threads; all processes share
// the state. A SlotPool object identifies its process by the pid at Create/Open: REQUIRES that
// it is not used in a child after fork() (the child opens its own).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "kvtier/block_index.h"
#include "kvtier/eviction_policy.h"
#include "kvtier/pool_key.h"
#include "kvtier/pool_layout.h"
#include "shm/segment.h"

namespace deltakv::kvtier {

struct SlotPoolOptions {
  uint64_t block_bytes = 0;     // bytes of one KV block; 1..kMaxBlockBytes
  uint64_t capacity_slots = 0;  // number of slots; see SlotsForHostMemory (host_memory.h)
  // Slots are handed out in address order the first time and their pages are advised or
  // prefaulted a chunk at a time, so an empty pool costs no memory.
  uint64_t chunk_bytes = 256ull << 20;
  // madvise(MADV_HUGEPAGE) the whole segment in every process that maps it (metadata and index
  // included: fewer TLB misses per lookup) and each data chunk when first used. Takes effect
  // only where /sys/kernel/mm/transparent_hugepage/shmem_enabled allows it (advise, always,
  // within_size, force); best effort otherwise.
  bool hugepages = false;
  bool prefault = false;      // MADV_POPULATE_WRITE each chunk when first used
  bool poison_freed = false;  // debug: fill a slot with kPoisonByte whenever it leaves use
  // Entries of the event ring: 0 (no ring; nothing is published) or a power of two up to
  // kMaxEventCapacity. 64 bytes each.
  uint32_t event_capacity = kDefaultEventCapacity;
  shm::IfExists if_exists = shm::IfExists::kFail;
  bool unlink_on_destroy = true;
  // Called by Create once the segment is mapped, before the pool writes anything past the
  // segment header: where to bind or how to advise the memory (e.g. a NUMA policy, which for
  // shared memory applies to every process's later page faults). An error fails Create.
  std::function<Status(std::span<uint8_t> segment)> place_memory;
};

// Per-process settings (not stored in the segment).
struct SlotPoolClientOptions {
  TickSource* clock = nullptr;       // recency stamps; nullptr = DefaultTickSource()
  EvictionPolicy* policy = nullptr;  // nullptr = a LruEvictionPolicy owned by the pool
  // Policy calls (0 counts as 1) PrepareStore makes for one slot before it stops trying the
  // policy's candidates and scans the slot table itself (see PrepareStore). Not a refusal
  // limit: a key is refused only once that scan found nothing.
  uint32_t evict_rounds = 4;
  shm::OpenOptions open;  // Open only
};

enum class StoreOutcome : uint8_t {
  kAllocated,      // a slot in WRITING owned by the caller: fill it, then Commit or Abort
  kAlreadyStored,  // the key is READY: nothing to do
  kInFlight,       // another store of the key is in progress: nothing to do
  kRefused,        // no slot without evicting pinned/in-flight blocks (see PrepareStore)
};

struct StoreSlot {
  StoreOutcome outcome = StoreOutcome::kRefused;
  SlotRef ref;              // valid for kAllocated
  uint8_t* data = nullptr;  // kAllocated: block_bytes writable bytes
};

struct PrepareStoreResult {
  std::vector<StoreSlot> slots;  // one per key, in order
  size_t allocated = 0;
  size_t refused = 0;
  size_t evicted = 0;                 // READY blocks evicted to make room
  std::vector<PoolKey> evicted_keys;  // their keys, in eviction order (`evicted` of them)
};

struct PoolStats {
  uint64_t capacity_slots = 0;
  uint64_t block_bytes = 0;
  // Occupancy, from a scan (a snapshot; concurrent changes may be half-seen).
  uint64_t untouched_slots = 0;  // never allocated
  uint64_t free_slots = 0;
  uint64_t writing_slots = 0;
  uint64_t ready_slots = 0;
  uint64_t evicting_slots = 0;  // EVICTING or FREEING
  uint64_t pinned_slots = 0;
  uint64_t ready_bytes = 0;
  uint64_t index_entries = 0;
  // Counters since creation, summed over every process (PoolCounter in pool_layout.h).
  uint64_t lookups = 0;  // Lookup calls
  uint64_t hits = 0;     // keys Lookup found (blocks)
  uint64_t misses = 0;   // keys at and after Lookup's first miss (blocks): hits + misses = keys
  uint64_t prefix_pins = 0;  // PinPrefix calls
  uint64_t stores_prepared = 0;
  uint64_t stores_committed = 0;
  uint64_t stores_aborted = 0;
  uint64_t stores_refused = 0;
  uint64_t evictions = 0;
  uint64_t removals = 0;
  uint64_t pins = 0;
  // Copies reported by tier clients (RecordCopy): blocks loaded, bytes each way, and the time a
  // client had a copy in flight, summed over clients (bytes / busy = throughput while copying).
  uint64_t loads_completed = 0;
  uint64_t bytes_in = 0;   // engine -> host (stores)
  uint64_t bytes_out = 0;  // host -> engine (loads)
  uint64_t copy_busy_ns_in = 0;
  uint64_t copy_busy_ns_out = 0;
  uint64_t copy_batches_in = 0;
  uint64_t copy_batches_out = 0;
  uint64_t failed_copies = 0;
  // Event ring.
  uint64_t events_published = 0;
  uint64_t events_dropped = 0;  // not written: the entry was held by a live, stalled writer
  uint64_t event_sequence = 0;  // sequence number of the next event (events ever ticketed)
  uint64_t event_capacity = 0;
  // Recovery.
  uint64_t reclaimed_writes = 0;
  uint64_t reclaimed_evictions = 0;
  uint64_t reclaimed_pins = 0;
  uint64_t reclaimed_shards = 0;
  uint64_t counter_shards_owned = 0;  // counter shards claimed by threads now
  uint64_t chunks_touched = 0;
};

// One entry of the event ring as a reader sees it.
struct PoolEvent {
  PoolEventKind kind = PoolEventKind::kStored;
  PoolKey key;
  SlotRef ref;              // the slot and generation the block had
  uint32_t pid = 0;         // the process that caused it
  uint32_t attachment = 0;  // that process's attachment id (SlotPool::attachment_id); 0 for an
                            // eviction ReclaimDead finished for a dead process
  uint64_t sequence = 0;    // position in the pool-wide order of events
  uint64_t time_ns = 0;     // CLOCK_MONOTONIC ns
};

// A reader's position in the event ring. Value type; one per reader.
struct PoolEventCursor {
  uint64_t next = 0;              // sequence number of the next event to read
  uint64_t pending_since_ns = 0;  // when `next` was first found unwritten; 0 = not waiting
};

struct PoolEventRead {
  size_t read = 0;    // events appended
  uint64_t lost = 0;  // sequence numbers skipped: overwritten (ring overran) or never written
  bool waiting = false;  // stopped at an event that is not written yet (see ReadEvents)
};

struct ReclaimReport {
  size_t writes = 0;         // WRITING slots of dead owners freed
  size_t evictions = 0;      // interrupted evictions finished or rolled back
  size_t pins = 0;           // pin counts of dead processes dropped
  size_t index_entries = 0;  // stale index entries dropped
};

class SlotPool;

// Pins on a run of blocks (prepare_load). Unpins on destruction. Movable.
class PinnedBlocks {
 public:
  PinnedBlocks() = default;
  PinnedBlocks(PinnedBlocks&& other) noexcept;
  PinnedBlocks& operator=(PinnedBlocks&& other) noexcept;
  PinnedBlocks(const PinnedBlocks&) = delete;
  PinnedBlocks& operator=(const PinnedBlocks&) = delete;
  ~PinnedBlocks() { Release(); }

  size_t size() const { return refs_.size(); }
  const std::vector<SlotRef>& refs() const { return refs_; }
  // The bytes of block i, readable until Release. REQUIRES: i < size().
  const uint8_t* data(size_t i) const;
  // Unpins everything now (idempotent).
  void Release();

 private:
  friend class SlotPool;
  PinnedBlocks(SlotPool* pool, std::vector<SlotRef> refs) : pool_(pool), refs_(std::move(refs)) {}
  SlotPool* pool_ = nullptr;
  std::vector<SlotRef> refs_;
};

class SlotPool {
 public:
  SlotPool();
  SlotPool(SlotPool&&) noexcept;
  SlotPool& operator=(SlotPool&&) noexcept;
  ~SlotPool();

  // Creates and publishes the pool segment `name` (the sidecar). InvalidArgument for a bad
  // size or name; FailedPrecondition if it exists and options.if_exists is kFail; IoError if the
  // system refuses. Nothing is left behind on failure.
  static StatusOr<SlotPool> Create(const std::string& name, const SlotPoolOptions& options,
                                   const SlotPoolClientOptions& client = {});
  // Attaches to an existing pool (an engine). NotFound, FailedPrecondition (other layout
  // version, never published) or DataLoss (a header that disagrees with itself or the size).
  static StatusOr<SlotPool> Open(const std::string& name, const SlotPoolClientOptions& client = {});

  // lookup: the number of leading keys that are stored (stops at the first miss). Lock-free and
  // advisory: it reads only index entries (BlockIndex::FindCommitted), so it reflects every
  // commit, eviction and removal that completed before it and may go either way on one that
  // runs concurrently; only PinPrefix/Pin protect and verify a block.
  size_t Lookup(std::span<const PoolKey> keys);

  // prepare_load: pins the longest READY prefix of `keys` and stamps it recent. The result may
  // be shorter than Lookup said a moment ago (a block can be evicted in between) or empty.
  PinnedBlocks PinPrefix(std::span<const PoolKey> keys);

  // Pins the block `ref` names. OK; NotFound if the slot no longer holds generation `ref` in
  // READY; ResourceExhausted if kMaxPinHolders other processes pin it; InvalidArgument for a
  // slot out of range. On failure nothing is pinned.
  Status Pin(SlotRef ref);
  // Drops one pin of this process on `ref`. FailedPrecondition if this process holds none
  // (also when the slot holds another generation than `ref`'s: a stale ref drops no pin);
  // InvalidArgument for a slot out of range.
  Status Unpin(SlotRef ref);

  // prepare_store: one StoreSlot per key (see StoreOutcome). Keys already READY are pinned for
  // the duration of the call so the batch never evicts its own prefix. Slots are allocated in
  // key order: a never-used slot while any is left, else a FREE slot (looked for in a window
  // from a shared cursor), else one the policy proposes: FREE, or an unpinned READY block that
  // is evicted (up to evict_rounds policy calls per slot). When none of those can be had
  // (stale, pinned or taken meanwhile), one pass over the slot table takes the first FREE or
  // unpinned READY slot it finds. Pinned and in-flight (WRITING, EVICTING, FREEING) blocks are
  // never evicted. A key is therefore kRefused only when that pass found every slot pinned or
  // in flight at the moment it examined it, or (rarely) when the index cannot take the key (no
  // free entry within reach, a lock error); once a pass finds nothing, every later key needing
  // a slot is kRefused as well. The pass reads each slot's state once, O(capacity), and runs
  // only after the policy's candidates failed. ResourceExhausted (nothing allocated, nothing
  // evicted, nothing left behind) when keys needed slots and none could be had; a batch that
  // evicted a block and then could not use the slot (the index had no room for the key) returns
  // its result, the key kRefused and the evicted key in evicted_keys. A key READY but pinned by
  // kMaxPinHolders other processes is kAlreadyStored (it cannot be evicted while they hold it).
  // `fingerprints` is empty or one token fingerprint per key, stored with the block. REQUIRES: keys
  // are distinct.
  StatusOr<PrepareStoreResult> PrepareStore(std::span<const PoolKey> keys,
                                            std::span<const uint64_t> fingerprints = {});
  // WRITING -> READY (release): the block becomes visible to every process. FailedPrecondition
  // if the slot is not WRITING at that generation owned by this process.
  Status CommitStore(SlotRef ref);
  // Gives up a kAllocated slot: its index entry goes, the slot becomes FREE. Same errors.
  Status AbortStore(SlotRef ref);

  // Stamps the READY keys among `keys` most recent. Returns how many were found.
  size_t Touch(std::span<const PoolKey> keys);
  // Removes a READY block. NotFound if absent; FailedPrecondition if pinned or being written.
  Status Remove(const PoolKey& key);

  // Frees WRITING slots and finishes evictions whose process is dead, drops pins held by dead
  // processes and stale index entries. Safe to run while other processes use the pool.
  StatusOr<ReclaimReport> ReclaimDead();

  PoolStats Stats() const;
  // One counter summed over all shards (no slot scan).
  uint64_t Counter(PoolCounter counter) const;

  // Adds one completed copy batch to the pool-wide counters: `into_pool` for a store's copy
  // (engine -> host), else a load's. `ok` batches add their blocks and bytes; `busy_ns` is the
  // time the batch added to the reporting client's busy time for that direction.
  void RecordCopy(bool into_pool, bool ok, uint64_t blocks, uint64_t bytes, uint64_t busy_ns);

  // A cursor at the current end of the event ring: it reads events published from now on.
  PoolEventCursor OpenEventCursor() const;
  // Appends up to `max_events` events from `cursor` on to `out`, oldest first, and advances
  // the cursor. Events whose ring entry was overwritten before they were read are counted as
  // lost. At an event whose sequence number was taken but whose entry is not written yet the
  // read waits a few microseconds, then stops (`waiting`); once the same event has been
  // pending for `skip_after` (its writer died or stalled), it is skipped as lost. Never blocks
  // longer than that short wait; safe against writers killed at any point.
  PoolEventRead ReadEvents(
      PoolEventCursor* cursor, std::vector<PoolEvent>* out, size_t max_events = SIZE_MAX,
      std::chrono::nanoseconds skip_after = std::chrono::milliseconds(100)) const;
  // This attachment's id, written into the events it publishes (unique per pool segment).
  uint32_t attachment_id() const { return attachment_id_; }

  // The state word of `slot` (tests and tools). REQUIRES: slot < capacity().
  SlotWord InspectSlot(uint32_t slot) const;
  // The pin count this process holds on `slot` (all holder words with its pid).
  uint32_t PinsHeldByThisProcess(uint32_t slot) const;
  // The bytes of `slot`. Readable only under the ORDERING.md rules. REQUIRES: slot < capacity.
  uint8_t* SlotData(uint32_t slot) const { return data_ + slot * stride_; }
  uint64_t TokenFingerprint(SlotRef ref) const;

  uint64_t block_bytes() const { return block_bytes_; }
  uint64_t capacity() const { return slot_count_; }
  // True once the pool segment was retired (shm/PROTOCOL.md §2): the sidecar that created it
  // stopped, or a new sidecar replaced it. Its blocks stay readable to those who have it mapped,
  // but no other process will ever find what is stored in it from now on.
  bool retired() const;
  bool poison_freed() const { return poison_; }
  uint32_t event_capacity() const { return event_capacity_; }
  const shm::Segment& segment() const;
  const BlockIndex& index() const { return index_; }

 private:
  struct Attachment;  // the mapping and this process's claimed counter shards (slot_pool.cc)
  class CounterWriter;

  SlotPool(shm::Segment segment, const SlotPoolClientOptions& client);

  // Drops one pin of this process on `ref`'s slot, whatever block it holds (Pin's rollback).
  Status DropPin(SlotRef ref);

  // The calling thread's counter shard (claimed on first use; shard 0 when none is free).
  PoolCounterShard* ThreadShard();
  PoolCounterShard* ClaimThreadShard();
  CounterWriter Counters();
  void PublishEvent(PoolEventKind kind, const PoolKey& key, uint32_t slot, uint32_t generation,
                    uint32_t pid, uint32_t attachment);
  bool LockEventEntry(PoolEventEntry& entry);

  SlotMeta& Meta(uint32_t slot) const { return slots_[slot]; }
  // CAS FREE(g) -> WRITING(g+1, pid). Returns the new generation, or -1.
  int64_t TryClaimFree(uint32_t slot);
  int64_t ClaimFresh();
  int64_t ClaimFromFreeScan();
  // READY(gen), unpinned -> FREEING(pid), `kind` event published, index entry erased, data
  // poisoned. *key_out (if not null) receives the block's key.
  bool TryEvict(uint32_t slot, uint32_t generation, PoolEventKind kind,
                PoolKey* key_out = nullptr);
  // FREEING(gen, pid) of an eviction by this process -> WRITING(gen+1, pid). Returns gen+1.
  uint32_t ReuseEvicted(uint32_t slot, uint32_t generation);
  // One pass over the used slots from a shared cursor: claims the first FREE slot or evicts
  // the first unpinned READY block it can. Returns the new generation (slot in *slot), or -1.
  int64_t ClaimFromTableScan(uint32_t* slot, bool* evicted, PoolKey* evicted_key);
  // Allocates one slot in WRITING; refills `candidates` from the policy as needed, then falls
  // back to ClaimFromTableScan. *evicted_key is set when *evicted.
  StatusOr<int64_t> AllocateSlot(std::vector<EvictionCandidate>* candidates, size_t wanted,
                                 uint32_t* slot, bool* evicted, PoolKey* evicted_key);
  Status FreeOwned(SlotRef ref, bool erase_index);
  void Poison(uint32_t slot) const;
  void NoteFreed();
  void TouchChunk(uint64_t chunk);

  std::unique_ptr<Attachment> attach_;
  uint64_t local_id_ = 0;  // attach_'s process-unique id: keys the thread-local shard cache
  PoolHeader* header_ = nullptr;
  PoolCounterShard* shards_ = nullptr;
  PoolEventEntry* events_ = nullptr;
  uint64_t event_mask_ = 0;
  uint32_t event_capacity_ = 0;
  uint32_t attachment_id_ = 0;
  SlotMeta* slots_ = nullptr;
  uint8_t* data_ = nullptr;
  BlockIndex index_;
  uint64_t slot_count_ = 0;
  uint64_t stride_ = 0;
  uint64_t block_bytes_ = 0;
  uint64_t chunk_slots_ = 1;
  bool poison_ = false;
  uint32_t pid_ = 0;
  uint32_t evict_rounds_ = 4;
  TickSource* clock_ = nullptr;
  EvictionPolicy* policy_ = nullptr;
  std::unique_ptr<EvictionPolicy> owned_policy_;
};

}  // namespace deltakv::kvtier
