// The byte layout of the KV pool segment (SegmentKind::kKvPool) and the encoding of its slot
// state word. kvtier/ORDERING.md specifies who may read and write each field when.
//
// Segment layout (offsets from the start of the segment; every region 64-byte aligned):
//
//   0                 SegmentHeader (shm/segment.h), kind 3
//   64                PoolHeader (384 bytes): configuration, allocation cursors, event ticket,
//                     reclaim counters
//   counters_offset   kCounterShards x PoolCounterShard (256 bytes each): pool-wide counters;
//                     counters_offset = 448
//   events_offset     event_capacity x PoolEventEntry (64 bytes each): the event ring
//   slots_offset      slot_count x SlotMeta (128 bytes each), 4 KiB aligned
//   buckets_offset    (bucket_count + probe_buckets) x IndexBucket (256 bytes each), 4 KiB
//                     aligned
//   data_offset       slot_count x slot_stride bytes of block data (2 MiB aligned)
//
// The creator fills the header and initializes the bucket mutexes while the segment magic is
// still 0, then publishes. Everything else starts as zero bytes, which is a valid empty pool
// (every slot FREE with generation 0, every index entry empty, every counter 0, every counter
// shard unowned, every event entry never written). An opener checks every field of the
// PoolHeader against the formulas below and the segment size (ValidatePoolHeader).
//
// Layout version history: 1 = counters in the PoolHeader; 2 = sharded counter region, event
// ring, page-aligned slot and bucket regions, IndexBucket with key_lo and slot_ref first; 3 =
// the pids in slot, pin-holder, counter-shard and event words are judged alive by the liveness
// token files that name them (never by kill(pid, 0)), so every process holds its token before
// it attaches.
//
// Thread-safety: the structs are laid out in shared memory and accessed by several processes
// at once, through the atomics they contain; plain fields are written once by the creator.
#pragma once

#include <pthread.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "base/status.h"
#include "shm/segment.h"

namespace deltakv::kvtier {

inline constexpr uint64_t kPoolMagic = shm::MagicFromText("DKVKVPL1");
// Version of everything in this file. Bump on any change to an offset, size or meaning.
inline constexpr uint32_t kPoolLayoutVersion = 3;

inline constexpr uint64_t kPoolHeaderOffset = sizeof(shm::SegmentHeader);  // 64
inline constexpr uint32_t kMaxPinHolders = 8;            // distinct processes pinning one slot
inline constexpr uint32_t kEntriesPerBucket = 8;         // index entries per bucket
inline constexpr uint32_t kProbeBuckets = 16;            // buckets past the last home bucket
inline constexpr uint64_t kDataAlignment = 2ull << 20;   // data area: huge-page aligned
inline constexpr uint8_t kPoisonByte = 0xDB;             // debug fill of slots that leave use
inline constexpr uint64_t kMaxSlots = (1ull << 32) - 2;  // slot_ref stores slot + 1 in 32 bits
inline constexpr uint64_t kMaxBlockBytes = 1ull << 30;
inline constexpr uint32_t kCounterShards = 128;          // shard 0 is shared, 1.. are owned
inline constexpr uint32_t kDefaultEventCapacity = 1u << 16;  // entries of the event ring
inline constexpr uint32_t kMaxEventCapacity = 1u << 24;
inline constexpr uint64_t kRegionAlignment = 4096;       // slot metadata and index regions

// PoolHeader.flags bits.
inline constexpr uint32_t kPoolFlagPoisonFreed = 1u << 0;  // debug poison-fill (ORDERING.md §5)
inline constexpr uint32_t kPoolFlagHugePages = 1u << 1;    // madvise(MADV_HUGEPAGE) per chunk
inline constexpr uint32_t kPoolFlagPrefault = 1u << 2;     // MADV_POPULATE_WRITE per chunk
inline constexpr uint32_t kPoolKnownFlags = 0x7;

// ---- Slot state word -------------------------------------------------------------------------
//
//   bits  0-31  pid: the owner while WRITING, the evicting process while EVICTING/FREEING, else 0
//   bits 32-35  state (SlotState)
//   bits 36-63  generation (28 bits, wraps): bumped on every FREE/FREEING -> WRITING
//
// Every change is a compare-and-swap of the whole word, so a transition and its owner are one
// atomic step: a process that dies right after a CAS is still named as the owner.
enum class SlotState : uint32_t {
  kFree = 0,      // unused; data undefined (poisoned in debug mode)
  kWriting = 1,   // owned by `pid`, which is filling the data; never readable
  kReady = 2,     // published; immutable until it leaves READY; pinnable
  kEvicting = 3,  // tentative: `pid` is checking the pin holders; data and index entry intact
  kFreeing = 4,   // committed eviction/removal by `pid`: unpinned, index entry being removed
};
std::string_view SlotStateName(SlotState state);

inline constexpr uint32_t kGenerationBits = 28;
inline constexpr uint32_t kGenerationMask = (1u << kGenerationBits) - 1;

struct SlotWord {
  uint32_t pid = 0;
  SlotState state = SlotState::kFree;
  uint32_t generation = 0;

  static constexpr SlotWord Decode(uint64_t word) {
    return SlotWord{static_cast<uint32_t>(word), static_cast<SlotState>((word >> 32) & 0xF),
                    static_cast<uint32_t>(word >> 36)};
  }
  constexpr uint64_t Encode() const {
    return static_cast<uint64_t>(pid) | (static_cast<uint64_t>(state) & 0xF) << 32 |
           static_cast<uint64_t>(generation & kGenerationMask) << 36;
  }
};
inline constexpr uint32_t NextGeneration(uint32_t generation) {
  return (generation + 1) & kGenerationMask;
}
static_assert(SlotWord::Decode(SlotWord{7, SlotState::kReady, kGenerationMask}.Encode())
                  .generation == kGenerationMask);

// A pin holder word: pid (bits 0-31) | count (bits 32-63); 0 = unused.
inline constexpr uint64_t HolderWord(uint32_t pid, uint32_t count) {
  return count == 0 ? 0 : (static_cast<uint64_t>(count) << 32 | pid);
}
inline constexpr uint32_t HolderPid(uint64_t word) { return static_cast<uint32_t>(word); }
inline constexpr uint32_t HolderCount(uint64_t word) { return static_cast<uint32_t>(word >> 32); }

// ---- Structures ------------------------------------------------------------------------------

// At kPoolHeaderOffset. Bytes 0-127 are written once by the creator; so are event_entry_size
// and counter_shard_size; the rest are atomics.
struct PoolHeader {
  uint64_t magic;               // kPoolMagic
  uint32_t layout_version;      // kPoolLayoutVersion
  uint32_t header_size;         // sizeof(PoolHeader) == 384
  uint64_t block_bytes;         // bytes of one block, 1..kMaxBlockBytes
  uint64_t slot_stride;         // distance between slots' data: block_bytes rounded (SlotStride)
  uint64_t slot_count;          // 1..kMaxSlots
  uint64_t chunk_slots;         // lazy-touch granularity, 1..slot_count
  uint64_t bucket_count;        // home buckets, a power of two >= slot_count / 4
  uint32_t probe_buckets;       // kProbeBuckets
  uint32_t flags;               // kPoolFlag*
  uint64_t slots_offset;        // round_up(events end, kRegionAlignment)
  uint64_t buckets_offset;      // round_up(slots_offset + 128 * slot_count, kRegionAlignment)
  uint64_t data_offset;         // round_up(buckets end, kDataAlignment)
  uint32_t max_pin_holders;     // kMaxPinHolders
  uint32_t slot_meta_size;      // sizeof(SlotMeta) == 128
  uint32_t bucket_size;         // sizeof(IndexBucket) == 256
  uint32_t entries_per_bucket;  // kEntriesPerBucket
  uint64_t counters_offset;     // 64 + 384 = 448
  uint64_t events_offset;       // counters_offset + 256 * counter_shards
  uint32_t counter_shards;      // kCounterShards
  uint32_t event_capacity;      // entries in the event ring: 0 (no ring) or a power of two
  // Allocation (offset 128).
  std::atomic<uint64_t> fresh_next;      // slots [0, fresh_next) have been handed out once
  std::atomic<uint64_t> free_hint;       // approximate number of FREE slots below fresh_next
  std::atomic<uint64_t> free_cursor;     // where the next free-slot scan starts
  std::atomic<uint64_t> evict_cursor;    // where the LRU sampler's next window starts
  std::atomic<uint64_t> chunks_touched;  // chunks whose pages were advised/prefaulted
  uint8_t reserved1[24];
  // Event ring (offset 192), on its own cache line: every published event takes a ticket here.
  std::atomic<uint64_t> event_tail;      // the next event sequence number (tickets [0, tail) taken)
  std::atomic<uint64_t> next_client_id;  // last attachment id handed out (ids start at 1)
  uint32_t event_entry_size;             // sizeof(PoolEventEntry) == 64
  uint32_t counter_shard_size;           // sizeof(PoolCounterShard) == 256
  uint8_t reserved2[40];
  // Rare counters (offset 256): monotonic, relaxed; see PoolStats.
  std::atomic<uint64_t> reclaimed_writes;
  std::atomic<uint64_t> reclaimed_evictions;
  std::atomic<uint64_t> reclaimed_pins;
  std::atomic<uint64_t> reclaimed_shards;  // counter shards of dead processes given back
  uint8_t reserved3[96];
};
static_assert(sizeof(PoolHeader) == 384);
static_assert(offsetof(PoolHeader, block_bytes) == 16);
static_assert(offsetof(PoolHeader, slot_stride) == 24);
static_assert(offsetof(PoolHeader, slot_count) == 32);
static_assert(offsetof(PoolHeader, chunk_slots) == 40);
static_assert(offsetof(PoolHeader, bucket_count) == 48);
static_assert(offsetof(PoolHeader, probe_buckets) == 56);
static_assert(offsetof(PoolHeader, flags) == 60);
static_assert(offsetof(PoolHeader, slots_offset) == 64);
static_assert(offsetof(PoolHeader, data_offset) == 80);
static_assert(offsetof(PoolHeader, max_pin_holders) == 88);
static_assert(offsetof(PoolHeader, entries_per_bucket) == 100);
static_assert(offsetof(PoolHeader, counters_offset) == 104);
static_assert(offsetof(PoolHeader, events_offset) == 112);
static_assert(offsetof(PoolHeader, counter_shards) == 120);
static_assert(offsetof(PoolHeader, event_capacity) == 124);
static_assert(offsetof(PoolHeader, fresh_next) == 128);
static_assert(offsetof(PoolHeader, event_tail) == 192);
static_assert(offsetof(PoolHeader, reclaimed_writes) == 256);
static_assert(std::atomic<uint64_t>::is_always_lock_free && sizeof(std::atomic<uint64_t>) == 8);

// ---- Counters --------------------------------------------------------------------------------
//
// Pool-wide counters live in kCounterShards shards of one counter array each; a counter's value
// is the sum over all shards. Shard 0 is shared: anyone may add to it with an atomic fetch_add.
// Every other shard is owned by one thread of one process at a time (owner = its pid; 0 = free),
// claimed with a CAS of `owner` from 0 and given back with a release store of 0 (or by
// ReclaimDead once the pid is dead). Its owner is the only writer, so it adds with a relaxed
// load and a relaxed store: no locked instruction on the lookup path. The counts stay in the
// shard when it changes hands; a new owner's acquiring CAS sees the last values. Readers sum
// relaxed loads: each value is exact once its writers have stopped, and never torn. A process
// killed mid-update loses at most that update. All values are monotonic.
enum class PoolCounter : uint32_t {
  kLookups = 0,          // Lookup calls
  kHitBlocks = 1,        // keys Lookup found
  kMissBlocks = 2,       // keys at and after Lookup's first miss
  kPrefixPins = 3,       // PinPrefix calls (prepare_load)
  kPins = 4,             // successful pins (Pin, PinPrefix, PrepareStore's own protection)
  kStoresPrepared = 5,   // slots PrepareStore handed out
  kStoresCommitted = 6,  // blocks published (CommitStore)
  kStoresAborted = 7,
  kStoresRefused = 8,
  kEvictions = 9,        // READY blocks evicted to make room
  kRemovals = 10,        // Remove calls that removed a block
  kLoadsCompleted = 11,  // blocks copied out of the pool successfully (tier clients)
  kBytesIn = 12,         // bytes copied into the pool (engine -> host), successful copies
  kBytesOut = 13,        // bytes copied out of the pool (host -> engine), successful copies
  kCopyBusyNsIn = 14,    // ns during which a client had a store copy in flight, summed
  kCopyBusyNsOut = 15,   // ns during which a client had a load copy in flight, summed
  kCopyBatchesIn = 16,   // completed store copy batches
  kCopyBatchesOut = 17,  // completed load copy batches
  kFailedCopies = 18,    // copy batches (either direction) that reported an error
  kEventsPublished = 19, // event ring entries written
  kEventsDropped = 20,   // events not written: their entry was held by a live, stalled writer
  kCount = 21,
};
inline constexpr uint32_t kCounterSlotsPerShard = 31;
static_assert(static_cast<uint32_t>(PoolCounter::kCount) <= kCounterSlotsPerShard);

struct PoolCounterShard {
  std::atomic<uint64_t> owner;                         // pid of the owning process; 0 = free
  std::atomic<uint64_t> value[kCounterSlotsPerShard];  // indexed by PoolCounter; rest reserved
};
static_assert(sizeof(PoolCounterShard) == 256);

// ---- Event ring ------------------------------------------------------------------------------
//
// Blocks stored, evicted and removed, by any process, in one bounded ring (vLLM/SGLang-style
// KV events). A writer takes ticket t = event_tail.fetch_add(1) and writes entry t % capacity:
//
//   1. lock:    CAS entry.lock 0 -> its pid (acquire). A held lock is waited for a bounded
//               time; if its holder is dead the writer takes the lock over (CAS holder -> pid),
//               if it is alive the writer gives up (the event is dropped, kEventsDropped).
//   2. check:   seq >= 2t + 1 means a later ticket already wrote here: unlock, drop.
//   3. write:   seq = 2t + 1 (relaxed); release fence; payload words (relaxed);
//               seq = 2t + 2 (release): ticket t is published.
//   4. unlock:  lock = 0 (release).
//
// Only the lock holder writes an entry, and a lock is only taken over from a dead process, so
// payload words of two tickets are never interleaved. seq only grows. A reader of ticket t
// loads seq (acquire): 2t + 2 -> copy the payload, acquire fence, reload seq; unchanged means
// the copy is ticket t's event. A larger value means the entry was overwritten (the event is
// lost to this reader); a smaller one means ticket t is not written yet: a live writer is
// between its fetch_add and step 3, or the writer died. Readers wait a bounded time for such an
// entry and then skip it as lost, so a writer killed mid-entry never wedges them; the entry
// itself is repaired by the next writer whose ticket lands on it.
enum class PoolEventKind : uint8_t {
  kStored = 0,   // a block was committed (READY)
  kEvicted = 1,  // a READY block was evicted to make room (or a dead evictor's eviction finished)
  kRemoved = 2,  // a READY block was removed
};

struct PoolEventEntry {
  std::atomic<uint64_t> lock;    // pid of the process writing this entry; 0 = none
  std::atomic<uint64_t> seq;     // 2t + 1 while ticket t is written, 2t + 2 once published
  std::atomic<uint64_t> key_lo;  // payload: the block's key
  std::atomic<uint64_t> key_hi;
  std::atomic<uint64_t> info;    // slot (bits 0-31) | generation (32-59) | kind (60-63)
  std::atomic<uint64_t> origin;  // pid (bits 0-31) | attachment id (32-63) of the writer
  std::atomic<uint64_t> time_ns; // CLOCK_MONOTONIC ns when the event happened
  uint64_t reserved;
};
static_assert(sizeof(PoolEventEntry) == 64);
static_assert(offsetof(PoolEventEntry, seq) == 8);
static_assert(offsetof(PoolEventEntry, key_lo) == 16);
static_assert(offsetof(PoolEventEntry, info) == 32);

inline constexpr uint64_t EventInfo(uint32_t slot, uint32_t generation, PoolEventKind kind) {
  return static_cast<uint64_t>(slot) |
         static_cast<uint64_t>(generation & kGenerationMask) << 32 |
         static_cast<uint64_t>(kind) << 60;
}

// Per-slot metadata, 128 bytes (two cache lines: state/key/LRU, then the pin holders).
struct SlotMeta {
  std::atomic<uint64_t> state;        // SlotWord
  std::atomic<uint64_t> key_lo;       // written by the owner while WRITING
  std::atomic<uint64_t> key_hi;       //   "
  std::atomic<uint64_t> lru_tick;     // last store/touch/pin (TickSource); relaxed
  std::atomic<uint64_t> fingerprint;  // optional token fingerprint given at PrepareStore; 0 none
  uint8_t reserved[24];
  std::atomic<uint64_t> holders[kMaxPinHolders];  // HolderWord per pinning process
};
static_assert(sizeof(SlotMeta) == 128);
static_assert(offsetof(SlotMeta, key_lo) == 8);
static_assert(offsetof(SlotMeta, lru_tick) == 24);
static_assert(offsetof(SlotMeta, fingerprint) == 32);
static_assert(offsetof(SlotMeta, holders) == 64);

// One index bucket, 256 bytes, 256-byte aligned. Entries are stored column-wise so a probe
// compares key_lo on one cache line; slot_ref is on the next line (the same 128-byte pair) so a
// hit reads two adjacent lines that are fetched together. key_hi (needed by Lookup, which
// answers from the entry alone, and by writers) and the writers' mutex come last.
// slot_ref = (slot + 1) | generation << 32 | kSlotRefCommitted once committed; 0 = empty.
struct IndexBucket {
  std::atomic<uint64_t> key_lo[kEntriesPerBucket];
  std::atomic<uint64_t> slot_ref[kEntriesPerBucket];
  std::atomic<uint64_t> key_hi[kEntriesPerBucket];
  alignas(8) uint8_t mutex[48];    // pthread_mutex_t, PTHREAD_PROCESS_SHARED + ROBUST
  std::atomic<uint32_t> overflow;  // entries whose home is this bucket or earlier, stored later
  uint32_t reserved0;
  uint64_t reserved1;
};
static_assert(sizeof(IndexBucket) == 256);
static_assert(offsetof(IndexBucket, key_lo) == 0);
static_assert(offsetof(IndexBucket, slot_ref) == 64);
static_assert(offsetof(IndexBucket, key_hi) == 128);
static_assert(offsetof(IndexBucket, mutex) == 192);
static_assert(offsetof(IndexBucket, overflow) == 240);
static_assert(sizeof(pthread_mutex_t) <= sizeof(IndexBucket::mutex));

// slot_ref bit 63: the block was committed (set by CommitStore after the slot became READY, or
// by ReclaimDead's sweep for a committer that died first). Lookup answers from entries alone
// and counts only marked ones; everything that touches block bytes still checks the slot.
inline constexpr uint64_t kSlotRefCommitted = 1ull << 63;
inline constexpr uint64_t MakeSlotRef(uint32_t slot, uint32_t generation) {
  return (static_cast<uint64_t>(slot) + 1) |
         static_cast<uint64_t>(generation & kGenerationMask) << 32;
}
inline constexpr uint32_t SlotRefSlot(uint64_t ref) { return static_cast<uint32_t>(ref) - 1; }
inline constexpr uint32_t SlotRefGeneration(uint64_t ref) {
  return static_cast<uint32_t>(ref >> 32) & kGenerationMask;
}
inline constexpr bool SlotRefCommitted(uint64_t ref) { return (ref & kSlotRefCommitted) != 0; }

// ---- Geometry --------------------------------------------------------------------------------

struct PoolGeometry {
  uint64_t block_bytes = 0;
  uint64_t slot_stride = 0;
  uint64_t slot_count = 0;
  uint64_t chunk_slots = 0;
  uint64_t bucket_count = 0;
  uint32_t event_capacity = 0;
  uint64_t counters_offset = 0;
  uint64_t events_offset = 0;
  uint64_t slots_offset = 0;
  uint64_t buckets_offset = 0;
  uint64_t data_offset = 0;
  uint64_t total_size = 0;
};

// Distance between slots: block_bytes rounded up to 64 bytes below 4 KiB, else to 4 KiB pages.
uint64_t SlotStride(uint64_t block_bytes);

// The layout for `slot_count` slots of `block_bytes`, lazily touched in chunks of about
// `chunk_bytes`, with an event ring of `event_capacity` entries (0, or a power of two up to
// kMaxEventCapacity). InvalidArgument for zero or out-of-range sizes, a bad event capacity or a
// total that overflows.
StatusOr<PoolGeometry> ComputeGeometry(uint64_t block_bytes, uint64_t slot_count,
                                       uint64_t chunk_bytes,
                                       uint64_t event_capacity = kDefaultEventCapacity);

// Checks a mapped pool header against this build and the segment size. FailedPrecondition for
// another layout version; DataLoss (naming the field) for anything else that disagrees.
Status ValidatePoolHeader(const PoolHeader& header, uint64_t segment_size);

}  // namespace deltakv::kvtier
