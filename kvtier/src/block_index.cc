#include "kvtier/block_index.h"

#include <pthread.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace deltakv::kvtier {
namespace {

pthread_mutex_t* MutexOf(IndexBucket& bucket) {
  return reinterpret_cast<pthread_mutex_t*>(bucket.mutex);
}

// Reads entry `e` of `bucket` consistently: slot_ref before and after the key words must agree.
bool ReadEntry(const IndexBucket& bucket, uint32_t e, uint64_t* ref, uint64_t* lo, uint64_t* hi) {
  uint64_t first = bucket.slot_ref[e].load(std::memory_order_acquire);
  if (first == 0) return false;
  *lo = bucket.key_lo[e].load(std::memory_order_relaxed);
  *hi = bucket.key_hi[e].load(std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_acquire);
  if (bucket.slot_ref[e].load(std::memory_order_relaxed) != first) return false;
  *ref = first;
  return true;
}

// Publishes key -> ref in entry `e`. REQUIRES: the caller holds the bucket's lock and saw the
// entry empty.
void ClaimEntry(IndexBucket& bucket, uint32_t e, const PoolKey& key, uint64_t ref) {
  // Orders the key stores after the observation of the empty entry (ORDERING.md §3).
  std::atomic_thread_fence(std::memory_order_release);
  bucket.key_lo[e].store(key.lo, std::memory_order_relaxed);
  bucket.key_hi[e].store(key.hi, std::memory_order_relaxed);
  bucket.slot_ref[e].store(ref, std::memory_order_release);
}

}  // namespace

bool SlotMatches(const SlotMeta& meta, const PoolKey& key, uint32_t generation,
                 uint32_t state_mask) {
  SlotWord before = SlotWord::Decode(meta.state.load(std::memory_order_acquire));
  if ((state_mask & StateBit(before.state)) == 0 || before.generation != generation) return false;
  uint64_t lo = meta.key_lo.load(std::memory_order_relaxed);
  uint64_t hi = meta.key_hi.load(std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_acquire);
  SlotWord after = SlotWord::Decode(meta.state.load(std::memory_order_relaxed));
  return after.generation == generation && (state_mask & StateBit(after.state)) != 0 &&
         lo == key.lo && hi == key.hi;
}

Status BlockIndex::InitBuckets(IndexBucket* buckets, uint64_t total_buckets) {
  pthread_mutexattr_t attr;
  if (pthread_mutexattr_init(&attr) != 0) return IoError("pthread_mutexattr_init failed");
  int rc = pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
  if (rc == 0) rc = pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
  for (uint64_t b = 0; rc == 0 && b < total_buckets; ++b) {
    rc = pthread_mutex_init(MutexOf(buckets[b]), &attr);
  }
  pthread_mutexattr_destroy(&attr);
  if (rc != 0) {
    return IoError(std::string("kv pool index: cannot initialize a robust process-shared mutex: ") +
                   std::strerror(rc));
  }
  return Status::Ok();
}

bool BlockIndex::EntryIsLive(uint64_t ref, uint64_t key_lo, uint64_t key_hi) const {
  uint32_t slot = SlotRefSlot(ref);
  if (slot >= slot_count_) return false;
  return SlotMatches(slots_[slot], PoolKey{key_lo, key_hi}, SlotRefGeneration(ref), kIndexedStates);
}

Status BlockIndex::Lock(uint64_t bucket) {
  int rc = pthread_mutex_lock(MutexOf(buckets_[bucket]));
  if (rc == EOWNERDEAD) {
    // The previous holder died inside its critical section: drop what it may have left stale.
    RepairBucket(bucket);
    rc = pthread_mutex_consistent(MutexOf(buckets_[bucket]));
  }
  if (rc != 0) {
    return Internal("kv pool index: bucket " + std::to_string(bucket) +
                    " lock failed: " + std::strerror(rc));
  }
  return Status::Ok();
}

void BlockIndex::Unlock(uint64_t bucket) { pthread_mutex_unlock(MutexOf(buckets_[bucket])); }

void BlockIndex::RepairBucket(uint64_t bucket) {
  // Every entry is either complete or invisible (slot_ref is stored last), so repair only drops
  // entries whose slot no longer holds their key. Overflow counts may stay too high: harmless.
  IndexBucket& b = buckets_[bucket];
  for (uint32_t e = 0; e < kEntriesPerBucket; ++e) {
    uint64_t ref, lo, hi;
    if (ReadEntry(b, e, &ref, &lo, &hi) && !EntryIsLive(ref, lo, hi)) {
      b.slot_ref[e].store(0, std::memory_order_release);
    }
  }
}

void BlockIndex::Prefetch(const PoolKey& key) const {
  const IndexBucket& bucket = buckets_[Home(key)];
  __builtin_prefetch(&bucket.key_lo[0]);
  __builtin_prefetch(&bucket.slot_ref[0]);
  __builtin_prefetch(&bucket.key_hi[0]);
}

bool BlockIndex::FindCommitted(const PoolKey& key) const {
  const uint64_t home = Home(key);
  const uint64_t end = home + kProbeBuckets + 1;
  {
    // The three lines a hit reads, requested together rather than one after the other.
    const IndexBucket& bucket = buckets_[home];
    __builtin_prefetch(&bucket.slot_ref[0]);
    __builtin_prefetch(&bucket.key_hi[0]);
  }
  for (uint64_t b = home; b < end; ++b) {
    const IndexBucket& bucket = buckets_[b];
    for (uint32_t e = 0; e < kEntriesPerBucket; ++e) {
      if (bucket.key_lo[e].load(std::memory_order_relaxed) != key.lo) continue;
      // A concurrent mark or reuse of the entry fails the consistency check: read it again.
      for (int attempt = 0; attempt < 2; ++attempt) {
        uint64_t ref, lo, hi;
        if (!ReadEntry(bucket, e, &ref, &lo, &hi)) continue;
        if (lo == key.lo && hi == key.hi && SlotRefCommitted(ref)) return true;
        break;
      }
    }
    if (bucket.overflow.load(std::memory_order_acquire) == 0) break;
  }
  return false;
}

bool BlockIndex::MarkCommitted(const PoolKey& key, SlotRef ref) {
  const uint64_t home = Home(key);
  const uint64_t end = home + kProbeBuckets + 1;
  const uint64_t packed = MakeSlotRef(ref.slot, ref.generation);
  for (uint64_t b = home; b < end; ++b) {
    IndexBucket& bucket = buckets_[b];
    for (uint32_t e = 0; e < kEntriesPerBucket; ++e) {
      uint64_t r = bucket.slot_ref[e].load(std::memory_order_relaxed);
      if ((r & ~kSlotRefCommitted) != packed) continue;
      // Only this slot generation's entry holds `packed`, and that generation holds `key`; the
      // CAS fails harmlessly if the entry was erased (0) or reused meanwhile.
      return SlotRefCommitted(r) ||
             bucket.slot_ref[e].compare_exchange_strong(r, packed | kSlotRefCommitted,
                                                        std::memory_order_release,
                                                        std::memory_order_relaxed);
    }
    if (bucket.overflow.load(std::memory_order_acquire) == 0) break;
  }
  return false;
}

std::optional<SlotRef> BlockIndex::Find(const PoolKey& key, uint32_t state_mask) const {
  const uint64_t home = Home(key);
  const uint64_t end = home + kProbeBuckets + 1;
  // A hit in the home bucket reads its key_lo and slot_ref lines: start both loads at once.
  __builtin_prefetch(&buckets_[home].slot_ref[0]);
  for (uint64_t b = home; b < end; ++b) {
    const IndexBucket& bucket = buckets_[b];
    for (uint32_t e = 0; e < kEntriesPerBucket; ++e) {
      if (bucket.key_lo[e].load(std::memory_order_relaxed) != key.lo) continue;
      // The entry is a hint (ORDERING.md §4): key_lo and slot_ref may belong to different
      // occupants of the entry, and key_hi is not read at all. SlotMatches accepts the slot only
      // if it holds exactly `key` at the entry's generation in a wanted state, which is the
      // whole acceptance rule, so no consistent snapshot of the entry is needed.
      const uint64_t ref = bucket.slot_ref[e].load(std::memory_order_acquire);
      if (ref == 0) continue;
      const uint32_t slot = SlotRefSlot(ref);
      if (slot >= slot_count_) continue;
      const uint32_t generation = SlotRefGeneration(ref);
      if (SlotMatches(slots_[slot], key, generation, state_mask)) {
        return SlotRef{slot, generation};
      }
    }
    if (bucket.overflow.load(std::memory_order_acquire) == 0) break;
  }
  return std::nullopt;
}

StatusOr<BlockIndex::InsertResult> BlockIndex::Insert(const PoolKey& key, SlotRef ref,
                                                      SlotRef* existing) {
  const uint64_t home = Home(key);
  const uint64_t end = home + kProbeBuckets + 1;
  RETURN_IF_ERROR(Lock(home));
  // Every entry for `key` lives in [home, end) and changes only under the home lock: scan them.
  int home_free = -1;
  for (uint64_t b = home; b < end; ++b) {
    IndexBucket& bucket = buckets_[b];
    for (uint32_t e = 0; e < kEntriesPerBucket; ++e) {
      uint64_t r, lo, hi;
      if (!ReadEntry(bucket, e, &r, &lo, &hi)) {
        if (b == home && home_free < 0 && bucket.slot_ref[e].load(std::memory_order_acquire) == 0) {
          home_free = static_cast<int>(e);
        }
        continue;
      }
      if (lo != key.lo || hi != key.hi) continue;
      if (EntryIsLive(r, lo, hi)) {
        if (existing != nullptr) *existing = SlotRef{SlotRefSlot(r), SlotRefGeneration(r)};
        Unlock(home);
        return InsertResult::kPresent;
      }
      bucket.slot_ref[e].store(0, std::memory_order_release);  // stale entry of this key
      for (uint64_t p = home; p < b; ++p)
        buckets_[p].overflow.fetch_sub(1, std::memory_order_relaxed);
      if (b == home && home_free < 0) home_free = static_cast<int>(e);
    }
    if (bucket.overflow.load(std::memory_order_acquire) == 0) break;
  }

  const uint64_t packed = MakeSlotRef(ref.slot, ref.generation);
  if (home_free >= 0) {
    ClaimEntry(buckets_[home], static_cast<uint32_t>(home_free), key, packed);
    Unlock(home);
    return InsertResult::kInserted;
  }
  for (uint64_t b = home + 1; b < end; ++b) {
    if (Status s = Lock(b); !s.ok()) {
      Unlock(home);
      return s;
    }
    IndexBucket& bucket = buckets_[b];
    for (uint32_t e = 0; e < kEntriesPerBucket; ++e) {
      if (bucket.slot_ref[e].load(std::memory_order_acquire) != 0) continue;
      // Raise the overflow counts before the entry becomes visible (never too low).
      for (uint64_t p = home; p < b; ++p) {
        buckets_[p].overflow.fetch_add(1, std::memory_order_release);
      }
      ClaimEntry(bucket, e, key, packed);
      Unlock(b);
      Unlock(home);
      return InsertResult::kInserted;
    }
    Unlock(b);
  }
  Unlock(home);
  return InsertResult::kFull;
}

StatusOr<bool> BlockIndex::Erase(const PoolKey& key, SlotRef ref) {
  const uint64_t home = Home(key);
  const uint64_t end = home + kProbeBuckets + 1;
  const uint64_t packed = MakeSlotRef(ref.slot, ref.generation);
  RETURN_IF_ERROR(Lock(home));
  bool erased = false;
  for (uint64_t b = home; b < end && !erased; ++b) {
    IndexBucket& bucket = buckets_[b];
    for (uint32_t e = 0; e < kEntriesPerBucket; ++e) {
      uint64_t r, lo, hi;
      if (!ReadEntry(bucket, e, &r, &lo, &hi) || (r & ~kSlotRefCommitted) != packed ||
          lo != key.lo || hi != key.hi) {
        continue;
      }
      bucket.slot_ref[e].store(0, std::memory_order_release);
      // Lower the overflow counts only after the entry is gone (never too low).
      for (uint64_t p = home; p < b; ++p)
        buckets_[p].overflow.fetch_sub(1, std::memory_order_relaxed);
      erased = true;
      break;
    }
    if (bucket.overflow.load(std::memory_order_acquire) == 0) break;
  }
  Unlock(home);
  return erased;
}

StatusOr<size_t> BlockIndex::SweepStale() {
  size_t dropped = 0;
  const uint64_t total = bucket_count_ + kProbeBuckets;
  for (uint64_t b = 0; b < total; ++b) {
    for (uint32_t e = 0; e < kEntriesPerBucket; ++e) {
      uint64_t r, lo, hi;
      if (!ReadEntry(buckets_[b], e, &r, &lo, &hi)) continue;
      if (EntryIsLive(r, lo, hi)) {
        // A committer that died between its READY CAS and its mark: mark for it.
        const uint32_t slot = SlotRefSlot(r);
        if (!SlotRefCommitted(r) &&
            SlotMatches(slots_[slot], PoolKey{lo, hi}, SlotRefGeneration(r),
                        StateBit(SlotState::kReady))) {
          buckets_[b].slot_ref[e].compare_exchange_strong(r, r | kSlotRefCommitted,
                                                          std::memory_order_release,
                                                          std::memory_order_relaxed);
        }
        continue;
      }
      PoolKey key{lo, hi};
      const uint64_t home = Home(key);
      if (home > b) continue;  // not a valid position for this key; RepairBucket's business
      RETURN_IF_ERROR(Lock(home));
      uint64_t r2, lo2, hi2;
      if (ReadEntry(buckets_[b], e, &r2, &lo2, &hi2) && r2 == r && lo2 == lo && hi2 == hi &&
          !EntryIsLive(r2, lo2, hi2)) {
        buckets_[b].slot_ref[e].store(0, std::memory_order_release);
        for (uint64_t p = home; p < b; ++p) {
          buckets_[p].overflow.fetch_sub(1, std::memory_order_relaxed);
        }
        ++dropped;
      }
      Unlock(home);
    }
  }
  return dropped;
}

size_t BlockIndex::CountEntries() const {
  size_t count = 0;
  const uint64_t total = bucket_count_ + kProbeBuckets;
  for (uint64_t b = 0; b < total; ++b) {
    for (uint32_t e = 0; e < kEntriesPerBucket; ++e) {
      if (buckets_[b].slot_ref[e].load(std::memory_order_relaxed) != 0) ++count;
    }
  }
  return count;
}

}  // namespace deltakv::kvtier
