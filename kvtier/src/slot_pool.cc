#include "kvtier/slot_pool.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <new>
#include <unordered_map>
#include <utility>

#include "shm/liveness.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

namespace deltakv::kvtier {
namespace {

constexpr uint64_t kFreeScanWindow = 1024;

uint64_t Word(uint32_t pid, SlotState state, uint32_t generation) {
  return SlotWord{pid, state, generation}.Encode();
}

std::string RefText(SlotRef ref) {
  return "slot " + std::to_string(ref.slot) + " generation " + std::to_string(ref.generation);
}

}  // namespace

// ---- PinnedBlocks ----------------------------------------------------------------------------

PinnedBlocks::PinnedBlocks(PinnedBlocks&& other) noexcept
    : pool_(std::exchange(other.pool_, nullptr)), refs_(std::move(other.refs_)) {
  other.refs_.clear();
}

PinnedBlocks& PinnedBlocks::operator=(PinnedBlocks&& other) noexcept {
  if (this != &other) {
    Release();
    pool_ = std::exchange(other.pool_, nullptr);
    refs_ = std::move(other.refs_);
    other.refs_.clear();
  }
  return *this;
}

const uint8_t* PinnedBlocks::data(size_t i) const { return pool_->SlotData(refs_[i].slot); }

void PinnedBlocks::Release() {
  if (pool_ != nullptr) {
    for (const SlotRef& ref : refs_) (void)pool_->Unpin(ref);
  }
  refs_.clear();
  pool_ = nullptr;
}

// ---- Construction ----------------------------------------------------------------------------

SlotPool::SlotPool() = default;
SlotPool::SlotPool(SlotPool&&) noexcept = default;
SlotPool& SlotPool::operator=(SlotPool&&) noexcept = default;
SlotPool::~SlotPool() = default;

SlotPool::SlotPool(shm::Segment segment, const SlotPoolClientOptions& client)
    : segment_(std::move(segment)) {
  uint8_t* base = segment_.data();
  header_ = reinterpret_cast<PoolHeader*>(base + kPoolHeaderOffset);
  slots_ = reinterpret_cast<SlotMeta*>(base + header_->slots_offset);
  data_ = base + header_->data_offset;
  slot_count_ = header_->slot_count;
  stride_ = header_->slot_stride;
  block_bytes_ = header_->block_bytes;
  chunk_slots_ = header_->chunk_slots;
  poison_ = (header_->flags & kPoolFlagPoisonFreed) != 0;
  index_ = BlockIndex(reinterpret_cast<IndexBucket*>(base + header_->buckets_offset),
                      header_->bucket_count, slots_, slot_count_);
  pid_ = static_cast<uint32_t>(getpid());
  evict_rounds_ = std::max<uint32_t>(1, client.evict_rounds);
  clock_ = client.clock != nullptr ? client.clock : DefaultTickSource();
  if (client.policy != nullptr) {
    policy_ = client.policy;
  } else {
    owned_policy_ = std::make_unique<LruEvictionPolicy>();
    policy_ = owned_policy_.get();
  }
}

StatusOr<SlotPool> SlotPool::Create(const std::string& name, const SlotPoolOptions& options,
                                    const SlotPoolClientOptions& client) {
  ASSIGN_OR_RETURN(PoolGeometry g, ComputeGeometry(options.block_bytes, options.capacity_slots,
                                                   options.chunk_bytes));
  shm::CreateOptions create;
  create.if_exists = options.if_exists;
  create.unlink_on_destroy = options.unlink_on_destroy;
  ASSIGN_OR_RETURN(shm::Segment segment,
                   shm::Segment::Create(name, g.total_size, shm::SegmentKind::kKvPool, create));
  auto* h = new (segment.data() + kPoolHeaderOffset) PoolHeader{};
  h->magic = kPoolMagic;
  h->layout_version = kPoolLayoutVersion;
  h->header_size = sizeof(PoolHeader);
  h->block_bytes = g.block_bytes;
  h->slot_stride = g.slot_stride;
  h->slot_count = g.slot_count;
  h->chunk_slots = g.chunk_slots;
  h->bucket_count = g.bucket_count;
  h->probe_buckets = kProbeBuckets;
  h->flags = (options.poison_freed ? kPoolFlagPoisonFreed : 0) |
             (options.hugepages ? kPoolFlagHugePages : 0) |
             (options.prefault ? kPoolFlagPrefault : 0);
  h->slots_offset = g.slots_offset;
  h->buckets_offset = g.buckets_offset;
  h->data_offset = g.data_offset;
  h->max_pin_holders = kMaxPinHolders;
  h->slot_meta_size = sizeof(SlotMeta);
  h->bucket_size = sizeof(IndexBucket);
  h->entries_per_bucket = kEntriesPerBucket;
  // Slot metadata and index entries are zero bytes already: all FREE, generation 0, empty.
  RETURN_IF_ERROR(
      BlockIndex::InitBuckets(reinterpret_cast<IndexBucket*>(segment.data() + g.buckets_offset),
                              g.bucket_count + kProbeBuckets));
  segment.Publish();
  return SlotPool(std::move(segment), client);
}

StatusOr<SlotPool> SlotPool::Open(const std::string& name, const SlotPoolClientOptions& client) {
  ASSIGN_OR_RETURN(shm::Segment segment,
                   shm::Segment::Open(name, shm::SegmentKind::kKvPool, client.open));
  const auto* h = reinterpret_cast<const PoolHeader*>(segment.data() + kPoolHeaderOffset);
  if (Status s = ValidatePoolHeader(*h, segment.size()); !s.ok()) {
    return s.WithPrefix("kv pool '" + name + "'");
  }
  return SlotPool(std::move(segment), client);
}

// ---- Allocation ------------------------------------------------------------------------------

void SlotPool::Poison(uint32_t slot) const {
  if (poison_) std::memset(SlotData(slot), kPoisonByte, block_bytes_);
}

void SlotPool::NoteFreed() { header_->free_hint.fetch_add(1, std::memory_order_relaxed); }

void SlotPool::TouchChunk(uint64_t chunk) {
  const uint32_t flags = header_->flags;
  header_->chunks_touched.fetch_add(1, std::memory_order_relaxed);
  if ((flags & (kPoolFlagHugePages | kPoolFlagPrefault)) == 0) return;
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  uint64_t begin = chunk * chunk_slots_ * stride_;
  uint64_t end = std::min(slot_count_, (chunk + 1) * chunk_slots_) * stride_;
  begin = begin / page * page;  // data_ is 2 MiB aligned, so this stays inside the segment
  // Advice is best effort: a kernel without shmem THP or MADV_POPULATE_WRITE just declines.
  if (flags & kPoolFlagHugePages) (void)madvise(data_ + begin, end - begin, MADV_HUGEPAGE);
  if (flags & kPoolFlagPrefault) (void)madvise(data_ + begin, end - begin, MADV_POPULATE_WRITE);
}

int64_t SlotPool::TryClaimFree(uint32_t slot) {
  SlotMeta& meta = Meta(slot);
  uint64_t word = meta.state.load(std::memory_order_acquire);
  SlotWord w = SlotWord::Decode(word);
  if (w.state != SlotState::kFree) return -1;
  const uint32_t generation = NextGeneration(w.generation);
  if (!meta.state.compare_exchange_strong(word, Word(pid_, SlotState::kWriting, generation),
                                          std::memory_order_acq_rel)) {
    return -1;
  }
  // Orders the owner's writes of key and data after the claim (ORDERING.md §2).
  std::atomic_thread_fence(std::memory_order_release);
  return generation;
}

int64_t SlotPool::ClaimFresh() {
  while (header_->fresh_next.load(std::memory_order_relaxed) < slot_count_) {
    uint64_t slot = header_->fresh_next.fetch_add(1, std::memory_order_relaxed);
    if (slot >= slot_count_) break;
    if (slot % chunk_slots_ == 0) TouchChunk(slot / chunk_slots_);
    int64_t generation = TryClaimFree(static_cast<uint32_t>(slot));
    if (generation >= 0) return static_cast<int64_t>(slot) << 32 | generation;
  }
  return -1;
}

int64_t SlotPool::ClaimFromFreeScan() {
  uint64_t hint = header_->free_hint.load(std::memory_order_relaxed);
  if (hint == 0) return -1;
  const uint64_t used = std::min(slot_count_, header_->fresh_next.load(std::memory_order_relaxed));
  if (used == 0) return -1;
  const uint64_t window = std::min(used, kFreeScanWindow);
  const uint64_t start = header_->free_cursor.fetch_add(window, std::memory_order_relaxed);
  for (uint64_t i = 0; i < window; ++i) {
    const auto slot = static_cast<uint32_t>((start + i) % used);
    int64_t generation = TryClaimFree(slot);
    if (generation >= 0) {
      // Lower the hint without going below zero (it is only a hint).
      uint64_t h = header_->free_hint.load(std::memory_order_relaxed);
      while (h > 0 &&
             !header_->free_hint.compare_exchange_weak(h, h - 1, std::memory_order_relaxed)) {
      }
      return static_cast<int64_t>(slot) << 32 | generation;
    }
  }
  return -1;
}

bool SlotPool::TryEvict(uint32_t slot, uint32_t generation) {
  SlotMeta& meta = Meta(slot);
  uint64_t ready = Word(0, SlotState::kReady, generation);
  // seq_cst: pairs with Pin's holder increment followed by its state load (Dekker).
  if (!meta.state.compare_exchange_strong(ready, Word(pid_, SlotState::kEvicting, generation),
                                          std::memory_order_seq_cst)) {
    return false;
  }
  if (!SlotUnpinned(meta)) {
    meta.state.store(ready, std::memory_order_seq_cst);  // only we may leave EVICTING(pid)
    return false;
  }
  meta.state.store(Word(pid_, SlotState::kFreeing, generation), std::memory_order_release);
  PoolKey key{meta.key_lo.load(std::memory_order_relaxed),
              meta.key_hi.load(std::memory_order_relaxed)};
  (void)index_.Erase(key, SlotRef{slot, generation});
  Poison(slot);
  return true;
}

StatusOr<int64_t> SlotPool::AllocateSlot(std::vector<EvictionCandidate>* candidates, size_t wanted,
                                         uint32_t* slot, bool* evicted) {
  *evicted = false;
  int64_t claimed = ClaimFresh();
  if (claimed < 0) claimed = ClaimFromFreeScan();
  if (claimed >= 0) {
    *slot = static_cast<uint32_t>(claimed >> 32);
    return claimed & 0xFFFFFFFF;
  }
  for (uint32_t round = 0; round <= evict_rounds_; ++round) {
    while (!candidates->empty()) {
      EvictionCandidate c = candidates->front();
      candidates->erase(candidates->begin());
      if (c.slot >= slot_count_) continue;  // a buggy policy must not break the pool
      SlotWord w = SlotWord::Decode(Meta(c.slot).state.load(std::memory_order_acquire));
      if (w.state == SlotState::kFree) {
        int64_t generation = TryClaimFree(c.slot);
        if (generation >= 0) {
          *slot = c.slot;
          return generation;
        }
      } else if (w.state == SlotState::kReady && w.generation == c.generation &&
                 TryEvict(c.slot, c.generation)) {
        const uint32_t generation = NextGeneration(c.generation);
        Meta(c.slot).state.store(Word(pid_, SlotState::kWriting, generation),
                                 std::memory_order_release);
        std::atomic_thread_fence(std::memory_order_release);
        header_->evictions.fetch_add(1, std::memory_order_relaxed);
        *slot = c.slot;
        *evicted = true;
        return generation;
      }
    }
    if (round == evict_rounds_) break;
    SlotTableView view{slots_, slot_count_,
                       std::min(slot_count_, header_->fresh_next.load(std::memory_order_relaxed)),
                       &header_->evict_cursor};
    policy_->SelectVictims(view, std::max<size_t>(1, wanted), candidates);
  }
  return ResourceExhausted("kv pool: no free slot and no unpinned READY block to evict");
}

Status SlotPool::FreeOwned(SlotRef ref, bool erase_index) {
  SlotMeta& meta = Meta(ref.slot);
  uint64_t expected = Word(pid_, SlotState::kWriting, ref.generation);
  if (meta.state.load(std::memory_order_acquire) != expected) {
    return FailedPrecondition("kv pool: " + RefText(ref) + " is not being written by this process");
  }
  if (erase_index) {
    PoolKey key{meta.key_lo.load(std::memory_order_relaxed),
                meta.key_hi.load(std::memory_order_relaxed)};
    (void)index_.Erase(key, ref);
  }
  Poison(ref.slot);
  if (!meta.state.compare_exchange_strong(expected, Word(0, SlotState::kFree, ref.generation),
                                          std::memory_order_release)) {
    return FailedPrecondition("kv pool: " + RefText(ref) + " was taken from this process");
  }
  NoteFreed();
  return Status::Ok();
}

// ---- Stores ----------------------------------------------------------------------------------

StatusOr<PrepareStoreResult> SlotPool::PrepareStore(std::span<const PoolKey> keys,
                                                    std::span<const uint64_t> fingerprints) {
  if (!fingerprints.empty() && fingerprints.size() != keys.size()) {
    return InvalidArgument("kv pool: " + std::to_string(fingerprints.size()) +
                           " fingerprints for " + std::to_string(keys.size()) + " keys");
  }
  PrepareStoreResult result;
  result.slots.resize(keys.size());
  std::vector<bool> needed(keys.size(), false);
  std::vector<SlotRef> protect;  // READY keys of this batch, pinned until we return
  size_t needed_count = 0;
  for (size_t i = 0; i < keys.size(); ++i) {
    std::optional<SlotRef> found = index_.Find(keys[i], kIndexedStates);
    if (found) {
      SlotWord w = SlotWord::Decode(Meta(found->slot).state.load(std::memory_order_acquire));
      if (w.state == SlotState::kWriting) {
        result.slots[i].outcome = StoreOutcome::kInFlight;
        continue;
      }
      if (w.state == SlotState::kReady && Pin(*found).ok()) {
        protect.push_back(*found);
        result.slots[i].outcome = StoreOutcome::kAlreadyStored;
        continue;
      }
    }
    needed[i] = true;
    ++needed_count;
  }

  std::vector<EvictionCandidate> candidates;
  bool exhausted = false;
  size_t remaining = needed_count;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (!needed[i]) continue;
    StoreSlot& out = result.slots[i];
    --remaining;
    if (exhausted) {
      out.outcome = StoreOutcome::kRefused;
      ++result.refused;
      continue;
    }
    uint32_t slot = 0;
    bool evicted = false;
    StatusOr<int64_t> generation = AllocateSlot(&candidates, remaining + 1, &slot, &evicted);
    if (!generation.ok()) {
      exhausted = true;
      out.outcome = StoreOutcome::kRefused;
      ++result.refused;
      continue;
    }
    SlotRef ref{slot, static_cast<uint32_t>(*generation)};
    SlotMeta& meta = Meta(slot);
    meta.key_lo.store(keys[i].lo, std::memory_order_relaxed);
    meta.key_hi.store(keys[i].hi, std::memory_order_relaxed);
    meta.fingerprint.store(fingerprints.empty() ? 0 : fingerprints[i], std::memory_order_relaxed);
    meta.lru_tick.store(clock_->Now(), std::memory_order_relaxed);
    if (evicted) ++result.evicted;
    SlotRef existing;
    StatusOr<BlockIndex::InsertResult> inserted = index_.Insert(keys[i], ref, &existing);
    if (inserted.ok() && *inserted == BlockIndex::InsertResult::kInserted) {
      out = StoreSlot{StoreOutcome::kAllocated, ref, SlotData(slot)};
      ++result.allocated;
      continue;
    }
    (void)FreeOwned(ref, /*erase_index=*/false);
    if (inserted.ok() && *inserted == BlockIndex::InsertResult::kPresent) {
      // Another process stored the key between our check and our insert.
      SlotWord w = SlotWord::Decode(Meta(existing.slot).state.load(std::memory_order_acquire));
      out.outcome =
          w.state == SlotState::kReady ? StoreOutcome::kAlreadyStored : StoreOutcome::kInFlight;
    } else {
      out.outcome = StoreOutcome::kRefused;  // index full around this key, or a lock failure
      ++result.refused;
    }
  }
  for (const SlotRef& ref : protect) (void)Unpin(ref);
  header_->stores_prepared.fetch_add(result.allocated, std::memory_order_relaxed);
  header_->stores_refused.fetch_add(result.refused, std::memory_order_relaxed);
  if (result.allocated == 0 && result.refused > 0) {
    return ResourceExhausted("kv pool: refused all " + std::to_string(result.refused) +
                             " blocks: every slot is pinned or being written");
  }
  return result;
}

Status SlotPool::CommitStore(SlotRef ref) {
  if (ref.slot >= slot_count_) return InvalidArgument("kv pool: " + RefText(ref) + " out of range");
  SlotMeta& meta = Meta(ref.slot);
  meta.lru_tick.store(clock_->Now(), std::memory_order_relaxed);
  uint64_t expected = Word(pid_, SlotState::kWriting, ref.generation);
  // The publication: every byte the owner wrote happens-before any acquire of READY.
  if (!meta.state.compare_exchange_strong(expected, Word(0, SlotState::kReady, ref.generation),
                                          std::memory_order_release, std::memory_order_relaxed)) {
    SlotWord w = SlotWord::Decode(expected);
    return FailedPrecondition("kv pool: commit of " + RefText(ref) + ": slot is " +
                              std::string(SlotStateName(w.state)) + " generation " +
                              std::to_string(w.generation) + " pid " + std::to_string(w.pid));
  }
  header_->stores_committed.fetch_add(1, std::memory_order_relaxed);
  return Status::Ok();
}

Status SlotPool::AbortStore(SlotRef ref) {
  if (ref.slot >= slot_count_) return InvalidArgument("kv pool: " + RefText(ref) + " out of range");
  RETURN_IF_ERROR(FreeOwned(ref, /*erase_index=*/true));
  header_->stores_aborted.fetch_add(1, std::memory_order_relaxed);
  return Status::Ok();
}

// ---- Loads -----------------------------------------------------------------------------------

size_t SlotPool::Lookup(std::span<const PoolKey> keys) {
  constexpr size_t kPrefetchDistance = 4;
  for (size_t i = 0; i < std::min(keys.size(), kPrefetchDistance); ++i) index_.Prefetch(keys[i]);
  size_t hits = 0;
  for (; hits < keys.size(); ++hits) {
    if (hits + kPrefetchDistance < keys.size()) index_.Prefetch(keys[hits + kPrefetchDistance]);
    if (!index_.Find(keys[hits], StateBit(SlotState::kReady))) break;
  }
  header_->lookups.fetch_add(1, std::memory_order_relaxed);
  header_->hits.fetch_add(hits, std::memory_order_relaxed);
  if (hits < keys.size()) header_->misses.fetch_add(1, std::memory_order_relaxed);
  return hits;
}

Status SlotPool::Pin(SlotRef ref) {
  if (ref.slot >= slot_count_) return InvalidArgument("kv pool: " + RefText(ref) + " out of range");
  SlotMeta& meta = Meta(ref.slot);
  std::atomic<uint64_t>* holder = nullptr;
  for (auto& h : meta.holders) {  // raise this process's holder word
    uint64_t w = h.load(std::memory_order_relaxed);
    while (w != 0 && HolderPid(w) == pid_) {
      if (h.compare_exchange_weak(w, HolderWord(pid_, HolderCount(w) + 1),
                                  std::memory_order_seq_cst)) {
        holder = &h;
        break;
      }
    }
    if (holder != nullptr) break;
  }
  for (auto& h : meta.holders) {  // or claim an empty one
    if (holder != nullptr) break;
    uint64_t w = 0;
    if (h.compare_exchange_strong(w, HolderWord(pid_, 1), std::memory_order_seq_cst)) holder = &h;
  }
  if (holder == nullptr) {
    return ResourceExhausted("kv pool: " + RefText(ref) + " is pinned by " +
                             std::to_string(kMaxPinHolders) + " other processes");
  }
  SlotWord w = SlotWord::Decode(meta.state.load(std::memory_order_seq_cst));
  if (w.state != SlotState::kReady || w.generation != ref.generation) {
    (void)Unpin(ref);
    return NotFound("kv pool: " + RefText(ref) + " no longer holds that block");
  }
  meta.lru_tick.store(clock_->Now(), std::memory_order_relaxed);
  header_->pins.fetch_add(1, std::memory_order_relaxed);
  return Status::Ok();
}

Status SlotPool::Unpin(SlotRef ref) {
  if (ref.slot >= slot_count_) return InvalidArgument("kv pool: " + RefText(ref) + " out of range");
  for (auto& h : Meta(ref.slot).holders) {
    uint64_t w = h.load(std::memory_order_relaxed);
    while (w != 0 && HolderPid(w) == pid_) {
      if (h.compare_exchange_weak(w, HolderWord(pid_, HolderCount(w) - 1),
                                  std::memory_order_release)) {
        return Status::Ok();
      }
    }
  }
  return FailedPrecondition("kv pool: this process holds no pin on " + RefText(ref));
}

PinnedBlocks SlotPool::PinPrefix(std::span<const PoolKey> keys) {
  std::vector<SlotRef> refs;
  refs.reserve(keys.size());
  for (const PoolKey& key : keys) {
    std::optional<SlotRef> found = index_.Find(key, StateBit(SlotState::kReady));
    if (!found || !Pin(*found).ok()) break;
    refs.push_back(*found);
  }
  header_->lookups.fetch_add(1, std::memory_order_relaxed);
  header_->hits.fetch_add(refs.size(), std::memory_order_relaxed);
  if (refs.size() < keys.size()) header_->misses.fetch_add(1, std::memory_order_relaxed);
  return PinnedBlocks(this, std::move(refs));
}

size_t SlotPool::Touch(std::span<const PoolKey> keys) {
  size_t touched = 0;
  const uint64_t now = clock_->Now();
  for (const PoolKey& key : keys) {
    std::optional<SlotRef> found = index_.Find(key, StateBit(SlotState::kReady));
    if (!found) continue;
    Meta(found->slot).lru_tick.store(now, std::memory_order_relaxed);
    ++touched;
  }
  return touched;
}

Status SlotPool::Remove(const PoolKey& key) {
  std::optional<SlotRef> found = index_.Find(key, kIndexedStates);
  if (!found) return NotFound("kv pool: key not present");
  if (!TryEvict(found->slot, found->generation)) {
    return FailedPrecondition("kv pool: " + RefText(*found) +
                              " is pinned, being written or being evicted");
  }
  Meta(found->slot)
      .state.store(Word(0, SlotState::kFree, found->generation), std::memory_order_release);
  NoteFreed();
  header_->removals.fetch_add(1, std::memory_order_relaxed);
  return Status::Ok();
}

// ---- Recovery and stats ----------------------------------------------------------------------

StatusOr<ReclaimReport> SlotPool::ReclaimDead() {
  ReclaimReport report;
  std::unordered_map<uint32_t, bool> alive;
  auto is_alive = [&](uint32_t pid) {
    auto it = alive.find(pid);
    if (it != alive.end()) return it->second;
    bool a = pid == pid_ || shm::IsProcessAlive(static_cast<pid_t>(pid));
    alive.emplace(pid, a);
    return a;
  };
  const uint64_t used = std::min(slot_count_, header_->fresh_next.load(std::memory_order_relaxed));
  for (uint64_t s = 0; s < used; ++s) {
    const auto slot = static_cast<uint32_t>(s);
    SlotMeta& meta = Meta(slot);
    for (auto& h : meta.holders) {
      uint64_t w = h.load(std::memory_order_acquire);
      if (w != 0 && !is_alive(HolderPid(w)) &&
          h.compare_exchange_strong(w, 0, std::memory_order_acq_rel)) {
        report.pins += HolderCount(w);
      }
    }
    uint64_t word = meta.state.load(std::memory_order_acquire);
    SlotWord w = SlotWord::Decode(word);
    if (w.state == SlotState::kFree || w.state == SlotState::kReady || is_alive(w.pid)) continue;
    SlotRef ref{slot, w.generation};
    PoolKey key{meta.key_lo.load(std::memory_order_relaxed),
                meta.key_hi.load(std::memory_order_relaxed)};
    if (w.state == SlotState::kEvicting) {
      // The evictor died while checking pins: nothing was changed yet, put the block back.
      if (meta.state.compare_exchange_strong(word, Word(0, SlotState::kReady, w.generation),
                                             std::memory_order_acq_rel)) {
        ++report.evictions;
      }
      continue;
    }
    // WRITING (never published) or FREEING (committed eviction): erase and free.
    (void)index_.Erase(key, ref);
    Poison(slot);
    if (meta.state.compare_exchange_strong(word, Word(0, SlotState::kFree, w.generation),
                                           std::memory_order_acq_rel)) {
      NoteFreed();
      if (w.state == SlotState::kWriting) {
        ++report.writes;
      } else {
        ++report.evictions;
      }
    }
  }
  ASSIGN_OR_RETURN(report.index_entries, index_.SweepStale());
  header_->reclaimed_writes.fetch_add(report.writes, std::memory_order_relaxed);
  header_->reclaimed_evictions.fetch_add(report.evictions, std::memory_order_relaxed);
  header_->reclaimed_pins.fetch_add(report.pins, std::memory_order_relaxed);
  return report;
}

PoolStats SlotPool::Stats() const {
  PoolStats s;
  s.capacity_slots = slot_count_;
  s.block_bytes = block_bytes_;
  const uint64_t used = std::min(slot_count_, header_->fresh_next.load(std::memory_order_relaxed));
  s.untouched_slots = slot_count_ - used;
  for (uint64_t i = 0; i < used; ++i) {
    const SlotMeta& meta = slots_[i];
    switch (SlotWord::Decode(meta.state.load(std::memory_order_acquire)).state) {
      case SlotState::kFree:
        ++s.free_slots;
        break;
      case SlotState::kWriting:
        ++s.writing_slots;
        break;
      case SlotState::kReady:
        ++s.ready_slots;
        break;
      case SlotState::kEvicting:
      case SlotState::kFreeing:
        ++s.evicting_slots;
        break;
    }
    if (!SlotUnpinned(meta)) ++s.pinned_slots;
  }
  s.ready_bytes = s.ready_slots * block_bytes_;
  s.index_entries = index_.CountEntries();
  auto get = [](const std::atomic<uint64_t>& a) { return a.load(std::memory_order_relaxed); };
  s.lookups = get(header_->lookups);
  s.hits = get(header_->hits);
  s.misses = get(header_->misses);
  s.stores_prepared = get(header_->stores_prepared);
  s.stores_committed = get(header_->stores_committed);
  s.stores_aborted = get(header_->stores_aborted);
  s.stores_refused = get(header_->stores_refused);
  s.evictions = get(header_->evictions);
  s.removals = get(header_->removals);
  s.pins = get(header_->pins);
  s.reclaimed_writes = get(header_->reclaimed_writes);
  s.reclaimed_evictions = get(header_->reclaimed_evictions);
  s.reclaimed_pins = get(header_->reclaimed_pins);
  s.chunks_touched = get(header_->chunks_touched);
  return s;
}

SlotWord SlotPool::InspectSlot(uint32_t slot) const {
  return SlotWord::Decode(Meta(slot).state.load(std::memory_order_acquire));
}

uint32_t SlotPool::PinsHeldByThisProcess(uint32_t slot) const {
  uint32_t count = 0;
  for (const auto& h : Meta(slot).holders) {
    uint64_t w = h.load(std::memory_order_acquire);
    if (w != 0 && HolderPid(w) == pid_) count += HolderCount(w);
  }
  return count;
}

uint64_t SlotPool::TokenFingerprint(SlotRef ref) const {
  return Meta(ref.slot).fingerprint.load(std::memory_order_relaxed);
}

}  // namespace deltakv::kvtier
