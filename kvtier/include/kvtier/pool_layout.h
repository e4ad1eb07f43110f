// The byte layout of the KV pool segment (SegmentKind::kKvPool) and the encoding of its slot
// state word. kvtier/ORDERING.md specifies who may read and write each field when.
//
// Segment layout (offsets from the start of the segment; every region 64-byte aligned):
//
//   0                 SegmentHeader (shm/segment.h), kind 3
//   64                PoolHeader (384 bytes): configuration, allocation cursors, counters
//   slots_offset      slot_count x SlotMeta (128 bytes each)
//   buckets_offset    (bucket_count + probe_buckets) x IndexBucket (256 bytes each)
//   data_offset       slot_count x slot_stride bytes of block data (2 MiB aligned)
//
// The creator fills the header and initializes the bucket mutexes while the segment magic is
// still 0, then publishes. Everything else starts as zero bytes, which is a valid empty pool
// (every slot FREE with generation 0, every index entry empty). An opener checks every field
// of the PoolHeader against the formulas below and the segment size (ValidatePoolHeader).
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
inline constexpr uint32_t kPoolLayoutVersion = 1;

inline constexpr uint64_t kPoolHeaderOffset = sizeof(shm::SegmentHeader);  // 64
inline constexpr uint32_t kMaxPinHolders = 8;            // distinct processes pinning one slot
inline constexpr uint32_t kEntriesPerBucket = 8;         // index entries per bucket
inline constexpr uint32_t kProbeBuckets = 16;            // buckets past the last home bucket
inline constexpr uint64_t kDataAlignment = 2ull << 20;   // data area: huge-page aligned
inline constexpr uint8_t kPoisonByte = 0xDB;             // debug fill of slots that leave use
inline constexpr uint64_t kMaxSlots = (1ull << 32) - 2;  // slot_ref stores slot + 1 in 32 bits
inline constexpr uint64_t kMaxBlockBytes = 1ull << 30;

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

// At kPoolHeaderOffset. Bytes 0-127 are written once by the creator; the rest are atomics.
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
  uint64_t slots_offset;        // 64 + 384 = 448
  uint64_t buckets_offset;      // slots_offset + 128 * slot_count
  uint64_t data_offset;         // round_up(buckets end, kDataAlignment)
  uint32_t max_pin_holders;     // kMaxPinHolders
  uint32_t slot_meta_size;      // sizeof(SlotMeta) == 128
  uint32_t bucket_size;         // sizeof(IndexBucket) == 256
  uint32_t entries_per_bucket;  // kEntriesPerBucket
  uint8_t reserved0[24];
  // Allocation (offset 128).
  std::atomic<uint64_t> fresh_next;      // slots [0, fresh_next) have been handed out once
  std::atomic<uint64_t> free_hint;       // approximate number of FREE slots below fresh_next
  std::atomic<uint64_t> free_cursor;     // where the next free-slot scan starts
  std::atomic<uint64_t> evict_cursor;    // where the LRU sampler's next window starts
  std::atomic<uint64_t> chunks_touched;  // chunks whose pages were advised/prefaulted
  uint8_t reserved1[24];
  // Counters (offset 192): monotonic, relaxed; see PoolStats.
  std::atomic<uint64_t> lookups;
  std::atomic<uint64_t> hits;
  std::atomic<uint64_t> misses;
  std::atomic<uint64_t> stores_prepared;
  std::atomic<uint64_t> stores_committed;
  std::atomic<uint64_t> stores_aborted;
  std::atomic<uint64_t> stores_refused;
  std::atomic<uint64_t> evictions;
  std::atomic<uint64_t> removals;
  std::atomic<uint64_t> pins;
  std::atomic<uint64_t> reclaimed_writes;
  std::atomic<uint64_t> reclaimed_evictions;
  std::atomic<uint64_t> reclaimed_pins;
  std::atomic<uint64_t> loads;  // PinPrefix calls
  uint8_t reserved2[80];
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
static_assert(offsetof(PoolHeader, fresh_next) == 128);
static_assert(offsetof(PoolHeader, lookups) == 192);
static_assert(std::atomic<uint64_t>::is_always_lock_free && sizeof(std::atomic<uint64_t>) == 8);

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

// One index bucket, 256 bytes. Entries are stored column-wise so a probe compares key_lo on one
// cache line. slot_ref = (slot + 1) | generation << 32; 0 = empty entry.
struct IndexBucket {
  alignas(8) uint8_t mutex[48];    // pthread_mutex_t, PTHREAD_PROCESS_SHARED + ROBUST
  std::atomic<uint32_t> overflow;  // entries whose home is this bucket or earlier, stored later
  uint32_t reserved0;
  uint64_t reserved1;
  std::atomic<uint64_t> key_lo[kEntriesPerBucket];
  std::atomic<uint64_t> key_hi[kEntriesPerBucket];
  std::atomic<uint64_t> slot_ref[kEntriesPerBucket];
};
static_assert(sizeof(IndexBucket) == 256);
static_assert(offsetof(IndexBucket, overflow) == 48);
static_assert(offsetof(IndexBucket, key_lo) == 64);
static_assert(offsetof(IndexBucket, key_hi) == 128);
static_assert(offsetof(IndexBucket, slot_ref) == 192);
static_assert(sizeof(pthread_mutex_t) <= sizeof(IndexBucket::mutex));

inline constexpr uint64_t MakeSlotRef(uint32_t slot, uint32_t generation) {
  return (static_cast<uint64_t>(slot) + 1) | static_cast<uint64_t>(generation) << 32;
}
inline constexpr uint32_t SlotRefSlot(uint64_t ref) { return static_cast<uint32_t>(ref) - 1; }
inline constexpr uint32_t SlotRefGeneration(uint64_t ref) {
  return static_cast<uint32_t>(ref >> 32);
}

// ---- Geometry --------------------------------------------------------------------------------

struct PoolGeometry {
  uint64_t block_bytes = 0;
  uint64_t slot_stride = 0;
  uint64_t slot_count = 0;
  uint64_t chunk_slots = 0;
  uint64_t bucket_count = 0;
  uint64_t slots_offset = 0;
  uint64_t buckets_offset = 0;
  uint64_t data_offset = 0;
  uint64_t total_size = 0;
};

// Distance between slots: block_bytes rounded up to 64 bytes below 4 KiB, else to 4 KiB pages.
uint64_t SlotStride(uint64_t block_bytes);

// The layout for `slot_count` slots of `block_bytes`, lazily touched in chunks of about
// `chunk_bytes`. InvalidArgument for zero or out-of-range sizes or a total that overflows.
StatusOr<PoolGeometry> ComputeGeometry(uint64_t block_bytes, uint64_t slot_count,
                                       uint64_t chunk_bytes);

// Checks a mapped pool header against this build and the segment size. FailedPrecondition for
// another layout version; DataLoss (naming the field) for anything else that disagrees.
Status ValidatePoolHeader(const PoolHeader& header, uint64_t segment_size);

}  // namespace deltakv::kvtier
