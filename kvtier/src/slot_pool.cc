#include "kvtier/slot_pool.h"

#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <new>
#include <utility>

#include "shm/liveness.h"
#include "shm/liveness_token.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

namespace deltakv::kvtier {
namespace {

constexpr uint64_t kFreeScanWindow = 1024;
// How long a writer waits for an event entry held by another writer before checking whether
// that writer is alive (a live one finishes within a few hundred nanoseconds unless preempted).
constexpr uint64_t kEventLockWaitNs = 50'000;
// How long a reader spins on an event whose sequence number is taken but not yet written.
constexpr uint64_t kEventReadSpinNs = 20'000;

uint64_t Word(uint32_t pid, SlotState state, uint32_t generation) {
  return SlotWord{pid, state, generation}.Encode();
}

std::string RefText(SlotRef ref) {
  return "slot " + std::to_string(ref.slot) + " generation " + std::to_string(ref.generation);
}

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Per thread: the counter shard this thread uses for each of (up to) the last few attachments it
// counted into, keyed by the attachment's process-unique id (never reused, so an entry of a
// destroyed attachment simply never matches again).
struct ShardCacheEntry {
  uint64_t local_id = 0;
  PoolCounterShard* shard = nullptr;
};
constexpr size_t kShardCacheEntries = 4;
thread_local ShardCacheEntry t_shard_cache[kShardCacheEntries];
thread_local uint32_t t_shard_cache_next = 0;

std::atomic<uint64_t> g_next_local_id{1};

// Best effort: a kernel without shmem THP (or with it set to never/deny) declines.
void AdviseHugePages(const shm::Segment& segment) {
  (void)madvise(segment.data(), segment.size(), MADV_HUGEPAGE);
}

// This process writes its pid into slot, holder, shard and event words only once its liveness
// token exists, so a peer of any PID namespace can tell whether that pid is still alive.
Status HoldLivenessToken(const std::string& name) {
  StatusOr<uint64_t> token = shm::ProcessLivenessToken();
  return token.ok() ? Status::Ok() : token.status().WithPrefix("kv pool '" + name + "'");
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

// This process's attachment to the segment: the mapping plus the counter shards its threads
// claimed. Destroying it gives the shards back (release, so the next owner sees the counts)
// before the segment is unmapped.
struct SlotPool::Attachment {
  explicit Attachment(shm::Segment s)
      : segment(std::move(s)), local_id(g_next_local_id.fetch_add(1, std::memory_order_relaxed)) {}
  ~Attachment() {
    for (const auto& [thread, shard] : claimed) shard->owner.store(0, std::memory_order_release);
  }
  Attachment(const Attachment&) = delete;
  Attachment& operator=(const Attachment&) = delete;

  shm::Segment segment;
  const uint64_t local_id;
  std::mutex mu;
  std::vector<std::pair<pthread_t, PoolCounterShard*>> claimed;  // GUARDED_BY(mu)
  uint32_t claim_hint = 0;                                       // GUARDED_BY(mu)
};

// Adds to the calling thread's shard: a plain load and store when the thread owns the shard
// (it is the only writer), an atomic add on the shared shard 0.
class SlotPool::CounterWriter {
 public:
  CounterWriter(PoolCounterShard* shard, bool shared) : shard_(shard), shared_(shared) {}
  void Add(PoolCounter counter, uint64_t value) const {
    std::atomic<uint64_t>& v = shard_->value[static_cast<uint32_t>(counter)];
    if (shared_) {
      v.fetch_add(value, std::memory_order_relaxed);
    } else {
      v.store(v.load(std::memory_order_relaxed) + value, std::memory_order_relaxed);
    }
  }

 private:
  PoolCounterShard* shard_;
  bool shared_;
};

SlotPool::SlotPool() = default;
SlotPool::SlotPool(SlotPool&&) noexcept = default;
SlotPool& SlotPool::operator=(SlotPool&&) noexcept = default;
SlotPool::~SlotPool() = default;

const shm::Segment& SlotPool::segment() const { return attach_->segment; }

bool SlotPool::retired() const { return attach_->segment.retired(); }

SlotPool::SlotPool(shm::Segment segment, const SlotPoolClientOptions& client)
    : attach_(std::make_unique<Attachment>(std::move(segment))) {
  local_id_ = attach_->local_id;
  uint8_t* base = attach_->segment.data();
  header_ = reinterpret_cast<PoolHeader*>(base + kPoolHeaderOffset);
  shards_ = reinterpret_cast<PoolCounterShard*>(base + header_->counters_offset);
  events_ = reinterpret_cast<PoolEventEntry*>(base + header_->events_offset);
  event_capacity_ = header_->event_capacity;
  event_mask_ = event_capacity_ == 0 ? 0 : event_capacity_ - 1;
  attachment_id_ =
      static_cast<uint32_t>(header_->next_client_id.fetch_add(1, std::memory_order_relaxed) + 1);
  slots_ = reinterpret_cast<SlotMeta*>(base + header_->slots_offset);
  data_ = base + header_->data_offset;
  slot_count_ = header_->slot_count;
  stride_ = header_->slot_stride;
  block_bytes_ = header_->block_bytes;
  chunk_slots_ = header_->chunk_slots;
  poison_ = (header_->flags & kPoolFlagPoisonFreed) != 0;
  // Huge pages are decided per mapping at fault time: every process advises its own.
  if ((header_->flags & kPoolFlagHugePages) != 0) AdviseHugePages(attach_->segment);
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
  RETURN_IF_ERROR(HoldLivenessToken(name));
  ASSIGN_OR_RETURN(PoolGeometry g, ComputeGeometry(options.block_bytes, options.capacity_slots,
                                                   options.chunk_bytes, options.event_capacity));
  shm::CreateOptions create;
  create.if_exists = options.if_exists;
  // Removed if anything below fails (nothing left behind); options.unlink_on_destroy applies
  // once the pool is published.
  create.unlink_on_destroy = true;
  ASSIGN_OR_RETURN(shm::Segment segment,
                   shm::Segment::Create(name, g.total_size, shm::SegmentKind::kKvPool, create));
  if (options.hugepages) AdviseHugePages(segment);  // before the index pages are first touched
  if (options.place_memory) {
    RETURN_IF_ERROR(options.place_memory(segment.bytes()).WithPrefix("kv pool '" + name + "'"));
  }
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
  h->counters_offset = g.counters_offset;
  h->events_offset = g.events_offset;
  h->counter_shards = kCounterShards;
  h->event_capacity = g.event_capacity;
  h->event_entry_size = sizeof(PoolEventEntry);
  h->counter_shard_size = sizeof(PoolCounterShard);
  // Counters, events, slot metadata and index entries are zero bytes already: all unowned,
  // never written, FREE with generation 0, empty.
  RETURN_IF_ERROR(
      BlockIndex::InitBuckets(reinterpret_cast<IndexBucket*>(segment.data() + g.buckets_offset),
                              g.bucket_count + kProbeBuckets));
  segment.Publish();
  segment.set_unlink_on_destroy(options.unlink_on_destroy);
  return SlotPool(std::move(segment), client);
}

StatusOr<SlotPool> SlotPool::Open(const std::string& name, const SlotPoolClientOptions& client) {
  RETURN_IF_ERROR(HoldLivenessToken(name));
  ASSIGN_OR_RETURN(shm::Segment segment,
                   shm::Segment::Open(name, shm::SegmentKind::kKvPool, client.open));
  const auto* h = reinterpret_cast<const PoolHeader*>(segment.data() + kPoolHeaderOffset);
  if (Status s = ValidatePoolHeader(*h, segment.size()); !s.ok()) {
    return s.WithPrefix("kv pool '" + name + "'");
  }
  return SlotPool(std::move(segment), client);
}

// ---- Counters --------------------------------------------------------------------------------

inline PoolCounterShard* SlotPool::ThreadShard() {
  for (const ShardCacheEntry& e : t_shard_cache) {
    if (e.local_id == local_id_) return e.shard;
  }
  return ClaimThreadShard();
}

PoolCounterShard* SlotPool::ClaimThreadShard() {
  Attachment& a = *attach_;
  PoolCounterShard* shard = nullptr;
  {
    std::lock_guard<std::mutex> lock(a.mu);
    const pthread_t self = pthread_self();
    // A thread that fell out of its cache, or a new thread reusing an exited thread's id: the
    // earlier owner is gone, so the shard still has a single writer.
    for (const auto& [thread, claimed] : a.claimed) {
      if (pthread_equal(thread, self)) shard = claimed;
    }
    for (uint32_t i = 0; shard == nullptr && i + 1 < kCounterShards; ++i) {
      const uint32_t index = 1 + (a.claim_hint + i) % (kCounterShards - 1);
      uint64_t expected = 0;
      if (shards_[index].owner.load(std::memory_order_relaxed) == 0 &&
          shards_[index].owner.compare_exchange_strong(expected, pid_,
                                                       std::memory_order_acq_rel)) {
        shard = &shards_[index];
        a.claimed.emplace_back(self, shard);
        a.claim_hint = index;
      }
    }
  }
  if (shard == nullptr) shard = &shards_[0];  // every shard is owned: share shard 0
  t_shard_cache[t_shard_cache_next++ % kShardCacheEntries] = ShardCacheEntry{local_id_, shard};
  return shard;
}

SlotPool::CounterWriter SlotPool::Counters() {
  PoolCounterShard* shard = ThreadShard();
  return CounterWriter(shard, shard == &shards_[0]);
}

uint64_t SlotPool::Counter(PoolCounter counter) const {
  uint64_t sum = 0;
  for (uint32_t i = 0; i < kCounterShards; ++i) {
    sum += shards_[i].value[static_cast<uint32_t>(counter)].load(std::memory_order_relaxed);
  }
  return sum;
}

void SlotPool::RecordCopy(bool into_pool, bool ok, uint64_t blocks, uint64_t bytes,
                          uint64_t busy_ns) {
  CounterWriter w = Counters();
  if (into_pool) {
    w.Add(PoolCounter::kCopyBatchesIn, 1);
    if (ok) w.Add(PoolCounter::kBytesIn, bytes);
    w.Add(PoolCounter::kCopyBusyNsIn, busy_ns);
  } else {
    w.Add(PoolCounter::kCopyBatchesOut, 1);
    if (ok) {
      w.Add(PoolCounter::kLoadsCompleted, blocks);
      w.Add(PoolCounter::kBytesOut, bytes);
    }
    w.Add(PoolCounter::kCopyBusyNsOut, busy_ns);
  }
  if (!ok) w.Add(PoolCounter::kFailedCopies, 1);
}

// ---- Events ----------------------------------------------------------------------------------

bool SlotPool::LockEventEntry(PoolEventEntry& entry) {
  uint64_t holder = 0;
  if (entry.lock.compare_exchange_strong(holder, pid_, std::memory_order_acquire,
                                         std::memory_order_relaxed)) {
    return true;
  }
  const uint64_t deadline = shm::MonotonicNowNs() + kEventLockWaitNs;
  for (uint32_t spin = 1;; ++spin) {
    holder = entry.lock.load(std::memory_order_relaxed);
    if (holder == 0) {
      if (entry.lock.compare_exchange_strong(holder, pid_, std::memory_order_acquire,
                                             std::memory_order_relaxed)) {
        return true;
      }
      continue;
    }
    if (spin % 64 == 0 && shm::MonotonicNowNs() > deadline) break;
    CpuRelax();
  }
  // Held for a long time. A dead holder will never write again: take the entry over. A live one
  // (or this process) keeps it; the caller drops its event rather than wait or interleave. The
  // holder may live in another PID namespace: its token files decide, not its pid.
  if (holder == pid_ || shm::LivenessDirectory().MayBeAlive(static_cast<uint32_t>(holder))) {
    return false;
  }
  return entry.lock.compare_exchange_strong(holder, pid_, std::memory_order_acquire,
                                            std::memory_order_relaxed);
}

void SlotPool::PublishEvent(PoolEventKind kind, const PoolKey& key, uint32_t slot,
                            uint32_t generation, uint32_t pid, uint32_t attachment) {
  if (event_capacity_ == 0) return;
  const uint64_t ticket = header_->event_tail.fetch_add(1, std::memory_order_relaxed);
  PoolEventEntry& e = events_[ticket & event_mask_];
  CounterWriter w = Counters();
  if (!LockEventEntry(e)) {
    w.Add(PoolCounter::kEventsDropped, 1);
    return;
  }
  const uint64_t writing = 2 * ticket + 1;
  if (e.seq.load(std::memory_order_relaxed) >= writing) {
    // A later ticket already wrote here (this writer was delayed by a full ring): drop.
    e.lock.store(0, std::memory_order_release);
    w.Add(PoolCounter::kEventsDropped, 1);
    return;
  }
  e.seq.store(writing, std::memory_order_relaxed);
  // Orders the odd seq before every payload store: a reader that sees any of them sees seq move.
  std::atomic_thread_fence(std::memory_order_release);
  e.key_lo.store(key.lo, std::memory_order_relaxed);
  e.key_hi.store(key.hi, std::memory_order_relaxed);
  e.info.store(EventInfo(slot, generation, kind), std::memory_order_relaxed);
  e.origin.store(static_cast<uint64_t>(attachment) << 32 | pid, std::memory_order_relaxed);
  e.time_ns.store(shm::MonotonicNowNs(), std::memory_order_relaxed);
  e.seq.store(writing + 1, std::memory_order_release);  // ticket published
  e.lock.store(0, std::memory_order_release);
  w.Add(PoolCounter::kEventsPublished, 1);
}

PoolEventCursor SlotPool::OpenEventCursor() const {
  return PoolEventCursor{header_->event_tail.load(std::memory_order_acquire), 0};
}

PoolEventRead SlotPool::ReadEvents(PoolEventCursor* cursor, std::vector<PoolEvent>* out,
                                   size_t max_events, std::chrono::nanoseconds skip_after) const {
  PoolEventRead result;
  const uint64_t tail = header_->event_tail.load(std::memory_order_acquire);
  if (event_capacity_ == 0 || cursor->next > tail) {
    cursor->next = tail;
    cursor->pending_since_ns = 0;
    return result;
  }
  if (tail - cursor->next > event_capacity_) {  // the ring overran this reader
    result.lost += tail - event_capacity_ - cursor->next;
    cursor->next = tail - event_capacity_;
    cursor->pending_since_ns = 0;
  }
  const auto skip_ns = static_cast<uint64_t>(std::max<int64_t>(0, skip_after.count()));
  while (cursor->next < tail && result.read < max_events) {
    const uint64_t ticket = cursor->next;
    const PoolEventEntry& e = events_[ticket & event_mask_];
    const uint64_t published = 2 * ticket + 2;
    uint64_t seq = e.seq.load(std::memory_order_acquire);
    if (seq < published) {
      // Taken but not written: a live writer is a few stores away from publishing it.
      const uint64_t spin_until = shm::MonotonicNowNs() + kEventReadSpinNs;
      for (uint32_t spin = 1; seq < published; ++spin) {
        if (spin % 64 == 0 && shm::MonotonicNowNs() > spin_until) break;
        CpuRelax();
        seq = e.seq.load(std::memory_order_acquire);
      }
      if (seq < published) {
        const uint64_t now = shm::MonotonicNowNs();
        if (cursor->pending_since_ns == 0) cursor->pending_since_ns = now;
        if (now - cursor->pending_since_ns < skip_ns) {
          result.waiting = true;
          break;
        }
        ++result.lost;  // its writer died or stalled: skip it
        ++cursor->next;
        cursor->pending_since_ns = 0;
        continue;
      }
    }
    cursor->pending_since_ns = 0;
    ++cursor->next;
    if (seq != published) {  // a later ticket overwrote it
      ++result.lost;
      continue;
    }
    PoolEvent ev;
    ev.key.lo = e.key_lo.load(std::memory_order_relaxed);
    ev.key.hi = e.key_hi.load(std::memory_order_relaxed);
    const uint64_t info = e.info.load(std::memory_order_relaxed);
    const uint64_t origin = e.origin.load(std::memory_order_relaxed);
    ev.time_ns = e.time_ns.load(std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_acquire);
    if (e.seq.load(std::memory_order_relaxed) != published) {  // overwritten while copying
      ++result.lost;
      continue;
    }
    ev.kind = static_cast<PoolEventKind>(info >> 60);
    ev.ref = SlotRef{static_cast<uint32_t>(info),
                     static_cast<uint32_t>(info >> 32) & kGenerationMask};
    ev.pid = static_cast<uint32_t>(origin);
    ev.attachment = static_cast<uint32_t>(origin >> 32);
    ev.sequence = ticket;
    out->push_back(ev);
    ++result.read;
  }
  return result;
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

bool SlotPool::TryEvict(uint32_t slot, uint32_t generation, PoolEventKind kind, PoolKey* key_out) {
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
  // Committed: the block is gone for every reader from here on, so tell them.
  PublishEvent(kind, key, slot, generation, pid_, attachment_id_);
  (void)index_.Erase(key, SlotRef{slot, generation});
  Poison(slot);
  if (key_out != nullptr) *key_out = key;
  return true;
}

uint32_t SlotPool::ReuseEvicted(uint32_t slot, uint32_t generation) {
  const uint32_t next = NextGeneration(generation);
  // Only this process may leave FREEING(pid), so a store is the transition (ORDERING.md §1.2).
  Meta(slot).state.store(Word(pid_, SlotState::kWriting, next), std::memory_order_release);
  // Orders the owner's writes of key and data after the claim, as TryClaimFree does.
  std::atomic_thread_fence(std::memory_order_release);
  Counters().Add(PoolCounter::kEvictions, 1);
  return next;
}

int64_t SlotPool::ClaimFromTableScan(uint32_t* slot, bool* evicted, PoolKey* evicted_key) {
  const uint64_t used = std::min(slot_count_, header_->fresh_next.load(std::memory_order_relaxed));
  if (used == 0) return -1;
  // Concurrent scans start at different slots, so they do not all race for the same victim.
  const uint64_t start = header_->free_cursor.fetch_add(1, std::memory_order_relaxed);
  for (uint64_t i = 0; i < used; ++i) {
    const auto s = static_cast<uint32_t>((start + i) % used);
    const SlotMeta& meta = Meta(s);
    const SlotWord w = SlotWord::Decode(meta.state.load(std::memory_order_acquire));
    // Checking the pins before TryEvict spares a pinned block the READY -> EVICTING -> READY
    // round trip (a concurrent Pin would take it for a miss); TryEvict still decides.
    if (w.state == SlotState::kFree) {
      const int64_t generation = TryClaimFree(s);
      if (generation >= 0) {
        *slot = s;
        return generation;
      }
    } else if (w.state == SlotState::kReady && SlotUnpinned(meta) &&
               TryEvict(s, w.generation, PoolEventKind::kEvicted, evicted_key)) {
      *slot = s;
      *evicted = true;
      return ReuseEvicted(s, w.generation);
    }
  }
  return -1;
}

StatusOr<int64_t> SlotPool::AllocateSlot(std::vector<EvictionCandidate>* candidates, size_t wanted,
                                         uint32_t* slot, bool* evicted, PoolKey* evicted_key) {
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
                 TryEvict(c.slot, c.generation, PoolEventKind::kEvicted, evicted_key)) {
        *slot = c.slot;
        *evicted = true;
        return ReuseEvicted(c.slot, c.generation);
      }
    }
    if (round == evict_rounds_) break;
    SlotTableView view{slots_, slot_count_,
                       std::min(slot_count_, header_->fresh_next.load(std::memory_order_relaxed)),
                       &header_->evict_cursor};
    policy_->SelectVictims(view, std::max<size_t>(1, wanted), candidates);
  }
  // The policy's candidates were stale, pinned or taken by others by the time they were tried
  // (or it had none): look at every slot once, so that a refusal means every slot was pinned or
  // in flight when it was examined.
  if (int64_t generation = ClaimFromTableScan(slot, evicted, evicted_key); generation >= 0) {
    return generation;
  }
  return ResourceExhausted("kv pool: every slot is pinned or in flight");
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
      if (w.state == SlotState::kReady) {
        const Status pinned = Pin(*found);
        if (pinned.ok()) {
          protect.push_back(*found);
          result.slots[i].outcome = StoreOutcome::kAlreadyStored;
          continue;
        }
        if (pinned.code() == StatusCode::kResourceExhausted) {
          // Pinned by as many processes as can pin it: stored, and it stays while they hold it.
          result.slots[i].outcome = StoreOutcome::kAlreadyStored;
          continue;
        }
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
    PoolKey evicted_key;
    StatusOr<int64_t> generation =
        AllocateSlot(&candidates, remaining + 1, &slot, &evicted, &evicted_key);
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
    if (evicted) {
      ++result.evicted;
      result.evicted_keys.push_back(evicted_key);
    }
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
  const CounterWriter w = Counters();
  w.Add(PoolCounter::kStoresPrepared, result.allocated);
  w.Add(PoolCounter::kStoresRefused, result.refused);
  // An eviction already happened: the caller gets the result (its evicted_keys), not an error.
  if (result.allocated == 0 && result.refused > 0 && result.evicted == 0) {
    return ResourceExhausted("kv pool: refused all " + std::to_string(result.refused) +
                             " blocks: every slot is pinned or in flight");
  }
  return result;
}

Status SlotPool::CommitStore(SlotRef ref) {
  if (ref.slot >= slot_count_) return InvalidArgument("kv pool: " + RefText(ref) + " out of range");
  SlotMeta& meta = Meta(ref.slot);
  meta.lru_tick.store(clock_->Now(), std::memory_order_relaxed);
  // Read while the slot is still ours: once READY it may be evicted and reused at any moment.
  const PoolKey key{meta.key_lo.load(std::memory_order_relaxed),
                    meta.key_hi.load(std::memory_order_relaxed)};
  uint64_t expected = Word(pid_, SlotState::kWriting, ref.generation);
  // The publication: every byte the owner wrote happens-before any acquire of READY.
  if (!meta.state.compare_exchange_strong(expected, Word(0, SlotState::kReady, ref.generation),
                                          std::memory_order_release, std::memory_order_relaxed)) {
    SlotWord w = SlotWord::Decode(expected);
    return FailedPrecondition("kv pool: commit of " + RefText(ref) + ": slot is " +
                              std::string(SlotStateName(w.state)) + " generation " +
                              std::to_string(w.generation) + " pid " + std::to_string(w.pid));
  }
  Counters().Add(PoolCounter::kStoresCommitted, 1);
  // Lookup answers from the index: mark the entry (a death before this is repaired by
  // ReclaimDead's sweep; until then Lookup under-reports the block, nothing worse).
  (void)index_.MarkCommitted(key, ref);
  PublishEvent(PoolEventKind::kStored, key, ref.slot, ref.generation, pid_, attachment_id_);
  return Status::Ok();
}

Status SlotPool::AbortStore(SlotRef ref) {
  if (ref.slot >= slot_count_) return InvalidArgument("kv pool: " + RefText(ref) + " out of range");
  RETURN_IF_ERROR(FreeOwned(ref, /*erase_index=*/true));
  Counters().Add(PoolCounter::kStoresAborted, 1);
  return Status::Ok();
}

// ---- Loads -----------------------------------------------------------------------------------

size_t SlotPool::Lookup(std::span<const PoolKey> keys) {
  constexpr size_t kPrefetchDistance = 4;
  for (size_t i = 0; i < std::min(keys.size(), kPrefetchDistance); ++i) index_.Prefetch(keys[i]);
  size_t hits = 0;
  for (; hits < keys.size(); ++hits) {
    if (hits + kPrefetchDistance < keys.size()) index_.Prefetch(keys[hits + kPrefetchDistance]);
    if (!index_.FindCommitted(keys[hits])) break;
  }
  const CounterWriter w = Counters();
  w.Add(PoolCounter::kLookups, 1);
  w.Add(PoolCounter::kHitBlocks, hits);
  w.Add(PoolCounter::kMissBlocks, keys.size() - hits);
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
    (void)DropPin(ref);  // the pin just added, whatever the slot holds now
    return NotFound("kv pool: " + RefText(ref) + " no longer holds that block");
  }
  meta.lru_tick.store(clock_->Now(), std::memory_order_relaxed);
  Counters().Add(PoolCounter::kPins, 1);
  return Status::Ok();
}

Status SlotPool::Unpin(SlotRef ref) {
  if (ref.slot >= slot_count_) return InvalidArgument("kv pool: " + RefText(ref) + " out of range");
  // While this process holds a pin the slot keeps its block, so a ref of another generation
  // names no block it pinned (a stale ref must not drop a live pin).
  const SlotWord w = SlotWord::Decode(Meta(ref.slot).state.load(std::memory_order_seq_cst));
  if (w.generation != ref.generation) {
    return FailedPrecondition("kv pool: this process holds no pin on " + RefText(ref) +
                              " (the slot holds another block)");
  }
  return DropPin(ref);
}

Status SlotPool::DropPin(SlotRef ref) {
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
  Counters().Add(PoolCounter::kPrefixPins, 1);
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
  if (!TryEvict(found->slot, found->generation, PoolEventKind::kRemoved)) {
    return FailedPrecondition("kv pool: " + RefText(*found) +
                              " is pinned, being written or being evicted");
  }
  Meta(found->slot)
      .state.store(Word(0, SlotState::kFree, found->generation), std::memory_order_release);
  NoteFreed();
  Counters().Add(PoolCounter::kRemovals, 1);
  return Status::Ok();
}

// ---- Recovery and stats ----------------------------------------------------------------------

StatusOr<ReclaimReport> SlotPool::ReclaimDead() {
  ReclaimReport report;
  // Pids in the pool are those of the writers' own PID namespaces (an engine container's pid
  // means nothing here): a pid is alive while a held liveness token names it (ORDERING.md §6).
  shm::LivenessDirectory tokens;
  auto is_alive = [&](uint32_t pid) { return pid == pid_ || tokens.MayBeAlive(pid); };
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
    // WRITING (never published) or FREEING (committed eviction): erase and free. The dead
    // evictor may have died before publishing its event: publish it on its behalf (a reader
    // may see it twice; removing a block twice is harmless, missing a removal is not).
    if (w.state == SlotState::kFreeing) {
      PublishEvent(PoolEventKind::kEvicted, key, slot, w.generation, w.pid, 0);
    }
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
  // Counter shards of dead processes: the counts stay, the shard becomes claimable.
  for (uint32_t i = 1; i < kCounterShards; ++i) {
    uint64_t owner = shards_[i].owner.load(std::memory_order_acquire);
    if (owner != 0 && !is_alive(static_cast<uint32_t>(owner)) &&
        shards_[i].owner.compare_exchange_strong(owner, 0, std::memory_order_acq_rel)) {
      header_->reclaimed_shards.fetch_add(1, std::memory_order_relaxed);
    }
  }
  header_->reclaimed_writes.fetch_add(report.writes, std::memory_order_relaxed);
  header_->reclaimed_evictions.fetch_add(report.evictions, std::memory_order_relaxed);
  header_->reclaimed_pins.fetch_add(report.pins, std::memory_order_relaxed);
  // The token files of the dead are no longer needed by anyone.
  (void)shm::RemoveReleasedTokens();
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
  uint64_t c[static_cast<uint32_t>(PoolCounter::kCount)] = {};
  for (uint32_t i = 0; i < kCounterShards; ++i) {
    for (uint32_t k = 0; k < static_cast<uint32_t>(PoolCounter::kCount); ++k) {
      c[k] += get(shards_[i].value[k]);
    }
    if (i > 0 && get(shards_[i].owner) != 0) ++s.counter_shards_owned;
  }
  auto at = [&c](PoolCounter k) { return c[static_cast<uint32_t>(k)]; };
  s.lookups = at(PoolCounter::kLookups);
  s.hits = at(PoolCounter::kHitBlocks);
  s.misses = at(PoolCounter::kMissBlocks);
  s.prefix_pins = at(PoolCounter::kPrefixPins);
  s.stores_prepared = at(PoolCounter::kStoresPrepared);
  s.stores_committed = at(PoolCounter::kStoresCommitted);
  s.stores_aborted = at(PoolCounter::kStoresAborted);
  s.stores_refused = at(PoolCounter::kStoresRefused);
  s.evictions = at(PoolCounter::kEvictions);
  s.removals = at(PoolCounter::kRemovals);
  s.pins = at(PoolCounter::kPins);
  s.loads_completed = at(PoolCounter::kLoadsCompleted);
  s.bytes_in = at(PoolCounter::kBytesIn);
  s.bytes_out = at(PoolCounter::kBytesOut);
  s.copy_busy_ns_in = at(PoolCounter::kCopyBusyNsIn);
  s.copy_busy_ns_out = at(PoolCounter::kCopyBusyNsOut);
  s.copy_batches_in = at(PoolCounter::kCopyBatchesIn);
  s.copy_batches_out = at(PoolCounter::kCopyBatchesOut);
  s.failed_copies = at(PoolCounter::kFailedCopies);
  s.events_published = at(PoolCounter::kEventsPublished);
  s.events_dropped = at(PoolCounter::kEventsDropped);
  s.event_sequence = get(header_->event_tail);
  s.event_capacity = event_capacity_;
  s.reclaimed_writes = get(header_->reclaimed_writes);
  s.reclaimed_evictions = get(header_->reclaimed_evictions);
  s.reclaimed_pins = get(header_->reclaimed_pins);
  s.reclaimed_shards = get(header_->reclaimed_shards);
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
