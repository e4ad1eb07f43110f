// BlockIndex: the key -> slot map of the KV pool, an open-addressing hash table of buckets that
// lives in the pool segment and is used concurrently by every process that maps it.
//
// Design (why locks for writers, none for readers):
// - Each bucket holds kEntriesPerBucket entries {key_lo, key_hi, slot_ref}. A key's home bucket
//   is MixKey(key) & (bucket_count - 1); when the home is full the key goes to the next bucket
//   with room, at most kProbeBuckets further (the table has that many extra buckets at the end,
//   so probing never wraps), and every bucket it passed counts it in `overflow`, which tells a
//   reader to keep probing.
// - Writers (Insert/Erase/Sweep) take a per-bucket pthread mutex, PTHREAD_PROCESS_SHARED and
//   PTHREAD_MUTEX_ROBUST: an insert or erase holds the key's home bucket lock (which serializes
//   every writer of that key, so "insert if absent" is atomic) and, to claim an entry in a later
//   bucket, also that bucket's lock. Locks are taken in increasing bucket order only, so there
//   is no deadlock. The critical sections are a few loads and stores. A lock-free table for
//   128-bit keys needs double-width CAS or multi-word protocols whose crash states are much
//   harder to reason about; a robust mutex makes a writer's death an explicit, repairable event.
// - A process that dies holding a bucket lock hands the next locker EOWNERDEAD; it repairs the
//   bucket by dropping every entry that does not match a live slot (RepairBucket) and marks the
//   mutex consistent. Overflow counts may be left too high (only extra probing), never too low:
//   they are raised before an entry is stored and lowered after it is cleared.
// - Readers (Find) take no lock. An entry is published by storing the key words and then
//   release-storing slot_ref; it is cleared by storing slot_ref = 0. Entries never move. A reader
//   may see a half-written or just-reused entry, so the index is a hint: the slot metadata is the
//   truth, and callers accept a candidate only after checking that the slot's state word has
//   the entry's generation and the slot's key equals the key looked up (SlotMatches). Find
//   therefore reads only key_lo (to pick candidates) and slot_ref of an entry: a hit costs the
//   bucket's first two cache lines (loaded together) and the slot's first line.
// - FindCommitted (the advisory Lookup) answers from the entry alone: an entry whose slot_ref
//   carries kSlotRefCommitted and whose key words read consistently (slot_ref equal before and
//   after them; a slot_ref value names one slot generation, which holds one key). The mark is
//   set after the slot became READY and the entry is erased before an eviction or removal
//   returns, so a lookup reflects every completed commit, eviction and removal; it costs three
//   lines of one bucket, all requested at once, and no slot metadata.
//
// Ownership: a BlockIndex is a view over memory owned by the pool's Segment; it owns nothing.
// Thread-safety: all operations may run concurrently from any threads of any processes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include "base/status.h"
#include "kvtier/pool_key.h"
#include "kvtier/pool_layout.h"

namespace deltakv::kvtier {

// A slot and the generation it had when it was looked up.
struct SlotRef {
  uint32_t slot = 0;
  uint32_t generation = 0;
  friend bool operator==(const SlotRef&, const SlotRef&) = default;
};

// True when `meta` currently holds `key` at `generation` in a state whose bit is set in
// `state_mask` (bit 1 << SlotState). Reads the state word before and after the key (acquire) so
// the key belongs to that generation.
bool SlotMatches(const SlotMeta& meta, const PoolKey& key, uint32_t generation,
                 uint32_t state_mask);
inline constexpr uint32_t StateBit(SlotState state) { return 1u << static_cast<uint32_t>(state); }
// States in which an index entry for the slot's key is legitimate.
inline constexpr uint32_t kIndexedStates =
    StateBit(SlotState::kWriting) | StateBit(SlotState::kReady) | StateBit(SlotState::kEvicting) |
    StateBit(SlotState::kFreeing);

class BlockIndex {
 public:
  BlockIndex() = default;
  // REQUIRES: `buckets` holds bucket_count + kProbeBuckets buckets; `slots` holds slot_count.
  BlockIndex(IndexBucket* buckets, uint64_t bucket_count, SlotMeta* slots, uint64_t slot_count)
      : buckets_(buckets), bucket_count_(bucket_count), slots_(slots), slot_count_(slot_count) {}

  // Initializes every bucket's robust mutex (creator only, before the segment is published).
  // IoError if the system refuses a mutex attribute.
  static Status InitBuckets(IndexBucket* buckets, uint64_t total_buckets);

  // The entry for `key` whose slot is in one of `state_mask`'s states, or nullopt. Lock-free.
  std::optional<SlotRef> Find(const PoolKey& key, uint32_t state_mask) const;

  // True if `key` has an entry marked committed (see the file comment). Lock-free, advisory:
  // nothing is pinned or verified against the slot.
  bool FindCommitted(const PoolKey& key) const;

  // Hints the CPU to load the lines of `key`'s home bucket that FindCommitted reads.
  void Prefetch(const PoolKey& key) const;

  // Marks the entry key -> ref committed. Returns false if there is no such entry (erased).
  // REQUIRES: the slot `ref` names holds `key` READY at that generation.
  bool MarkCommitted(const PoolKey& key, SlotRef ref);

  enum class InsertResult { kInserted, kPresent, kFull };
  // Inserts key -> ref unless a live entry for `key` exists (then kPresent, *existing set).
  // Stale entries for `key` met on the way are dropped. kFull if no bucket within reach has a
  // free entry. REQUIRES: the slot `ref` names holds `key` in WRITING state (the caller owns it).
  StatusOr<InsertResult> Insert(const PoolKey& key, SlotRef ref, SlotRef* existing = nullptr);

  // Removes the entry key -> ref. Returns true if it was there.
  StatusOr<bool> Erase(const PoolKey& key, SlotRef ref);

  // Drops every entry that does not name a slot currently holding its key in an indexed state,
  // and marks committed the entries of READY slots whose committer died before marking them.
  // Returns how many were dropped.
  StatusOr<size_t> SweepStale();

  // Number of non-empty entries (a scan; for tests and stats).
  size_t CountEntries() const;

  uint64_t bucket_count() const { return bucket_count_; }

 private:
  uint64_t Home(const PoolKey& key) const { return MixKey(key) & (bucket_count_ - 1); }
  bool EntryIsLive(uint64_t ref, uint64_t key_lo, uint64_t key_hi) const;
  Status Lock(uint64_t bucket);
  void Unlock(uint64_t bucket);
  void RepairBucket(uint64_t bucket);

  IndexBucket* buckets_ = nullptr;
  uint64_t bucket_count_ = 0;
  SlotMeta* slots_ = nullptr;
  uint64_t slot_count_ = 0;
};

}  // namespace deltakv::kvtier
