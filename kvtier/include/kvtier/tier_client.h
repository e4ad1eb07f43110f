// KvTierClient: the engine-facing API of the host KV tier.
//
// An engine process opens a client on the pool segment the sidecar created (SlotPool::Open),
// with the layout of its KV memory (kvtier/kv_layout.h) and a copy engine
// (kvtier/copy_engine.h). The API has the shape of vLLM's OffloadingManager / KV connector and
// SGLang HiCache's storage backend:
//
//   Lookup(keys)                  -> how many leading keys are stored (advisory)
//   PrepareLoad(keys, n)          -> LoadHandle: the first n blocks pinned, or NotFound
//   Load(handle, engine blocks)   -> CopyCompletion of the async scatter into engine memory
//   CompleteLoad(handle)          -> waits for the copy, unpins; the copy's status
//   PrepareStore(keys)            -> StoreHandle: per key, a slot / already stored / in flight /
//                                    refused (never by evicting a pinned or in-flight block)
//   Store(handle, engine blocks)  -> CopyCompletion of the async gather into the slots
//   CompleteStore(handle)         -> waits for the copy, then commits (or aborts on failure)
//   Touch(keys), Remove(key), Stats(), DrainEvents() / on_event, PollPoolEvents()
//
// Ordering (kvtier/ORDERING.md): a store's slots are committed only after its copy completed
// (S2), and a load's pins are dropped only after its copy completed (L4), on every path: the
// Complete* calls and the handles' destructors wait for the copy first. A block is therefore
// never published half-written and never reused while a copy out of it runs.
//
// Handles are RAII: destroying a LoadHandle that was not completed waits for its copy (if one
// was issued) and unpins; destroying an uncompleted StoreHandle waits for its copy and aborts
// its slots (nothing is published). Both block while their copy is in flight.
//
// Events: this client reports kStored for every block it committed, kEvicted for every block
// its own PrepareStore evicted, and kRemoved for its own Remove calls, as they happen. With
// KvTierClientOptions::pool_events it also reports what every other client of the pool did (in
// any process: blocks stored, evicted to make room, removed), read from the pool's event ring
// (kvtier/slot_pool.h, Events) by PollPoolEvents, which DrainEvents calls first. Those arrive
// when polled, in the pool's order among themselves, and carry the pid that caused them; events
// that the ring overwrote before they were polled, or whose writer died mid-entry, are counted
// in TierStats::events_lost. Events go to KvTierClientOptions::on_event when set (called
// outside the client's locks: on the thread that caused them, or the one polling), otherwise to
// a bounded queue read with DrainEvents.
//
// Ownership: the client owns its SlotPool mapping; it borrows the CopyEngine and the engine
// memory the layout names (both must outlive it). REQUIRES: every handle is destroyed or
// completed before its client. Not usable in a child after fork() (open a new client there).
// Thread-safety: every client method may be called concurrently from any threads. A handle is
// used by one thread at a time.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "kvtier/copy_engine.h"
#include "kvtier/kv_layout.h"
#include "kvtier/pool_key.h"
#include "kvtier/slot_pool.h"

namespace deltakv::kvtier {

class KvTierClient;

// The values equal PoolEventKind's.
enum class TierEventKind : uint8_t {
  kStored = 0,   // the block was committed (by this client, or by origin_pid: see Events above)
  kEvicted = 1,  // a PrepareStore evicted it to make room
  kRemoved = 2,  // it was removed
};
std::string_view TierEventKindName(TierEventKind kind);

struct TierEvent {
  TierEventKind kind = TierEventKind::kStored;
  PoolKey key;
  uint32_t origin_pid = 0;  // the process that caused it (this process for this client's own)
};

struct KvTierClientOptions {
  // Clock, eviction policy (LRU when null; borrowed, must outlive the client), eviction rounds
  // and open options of the client's SlotPool.
  SlotPoolClientOptions pool;
  // Cap on keys per PrepareLoad / PrepareStore call.
  size_t max_keys_per_call = 1u << 16;
  // Cap on queued events; past it the oldest are dropped (TierStats::events_dropped).
  size_t max_queued_events = 1u << 16;
  // When set, receives every event instead of the queue. Must not call back into the client's
  // handle-completing methods on the same handle; may call DrainEvents/Stats.
  std::function<void(const TierEvent&)> on_event;
  // Also report blocks stored, evicted or removed by the pool's other clients (other processes
  // and other clients of this one), from the pool's event ring; see Events above. The feed
  // starts when the client is opened.
  bool pool_events = false;
  // A ring entry whose writer took its sequence number but has not written it this long (it
  // died or stalled) is skipped and counted in events_lost.
  std::chrono::milliseconds pool_event_skip_after{100};
};

// Copy throughput of one direction, from the copy engine's completion timestamps.
struct TierDirectionStats {
  uint64_t blocks = 0;          // blocks copied successfully
  uint64_t bytes = 0;           // their bytes
  uint64_t batches = 0;         // completed batches (successful or not)
  uint64_t failed_batches = 0;  // batches whose copy reported an error
  // Seconds during which at least one batch of this direction was copying (the union of
  // [submit, done] intervals, approximated in completion order), and bytes / busy_seconds.
  double busy_seconds = 0;
  double gb_per_s = 0;  // 1e9 bytes per second; 0 before the first batch
};

struct TierStats {
  // This client's calls.
  uint64_t lookups = 0;      // Lookup calls
  uint64_t hit_blocks = 0;   // keys Lookup found
  uint64_t miss_blocks = 0;  // keys at and after Lookup's first miss
  uint64_t loads_prepared = 0;
  uint64_t loads_refused = 0;     // PrepareLoad calls answered NotFound
  uint64_t stores_allocated = 0;  // keys PrepareStore gave a slot
  uint64_t stores_already = 0;    // keys already stored
  uint64_t stores_in_flight = 0;  // keys another store was writing
  uint64_t stores_refused = 0;    // keys refused (no slot without evicting pinned blocks)
  uint64_t stores_committed = 0;
  uint64_t stores_aborted = 0;  // slots given back (failed copy, cancel, handle dropped)
  uint64_t evictions = 0;       // blocks this client's stores evicted
  uint64_t removals = 0;
  uint64_t events_dropped = 0;
  uint64_t pool_events = 0;  // events of other clients reported (pool_events)
  uint64_t events_lost = 0;  // pool events not seen: overwritten before polled, or never written
  TierDirectionStats store;  // bytes into the tier (engine -> pool)
  TierDirectionStats load;   // bytes out of the tier (pool -> engine)
  // The pool as a whole (all processes), from a scan: occupancy and the pool-wide counters
  // every client adds to (pool.hits, pool.bytes_in, pool.copy_busy_ns_in, ...).
  PoolStats pool;
  double occupancy = 0;  // pool.ready_slots / pool.capacity_slots
};

// Pins of a prepared load. Move-only; see the file comment for destruction.
class LoadHandle {
 public:
  LoadHandle() = default;
  LoadHandle(LoadHandle&& other) noexcept;
  LoadHandle& operator=(LoadHandle&& other) noexcept;
  LoadHandle(const LoadHandle&) = delete;
  LoadHandle& operator=(const LoadHandle&) = delete;
  ~LoadHandle();

  // False for a default-constructed, moved-from or completed handle.
  bool valid() const { return client_ != nullptr; }
  size_t size() const { return pins_.size(); }
  bool issued() const { return issued_; }  // Load was called and accepted
  // The copy of the issued Load (a default completion before that): poll it with Done().
  const CopyCompletion& completion() const { return completion_; }
  const std::vector<SlotRef>& refs() const { return pins_.refs(); }

 private:
  friend class KvTierClient;
  void Finish(Status* copy_status);

  KvTierClient* client_ = nullptr;
  PinnedBlocks pins_;
  CopyCompletion completion_;
  bool issued_ = false;
};

// Slots of a prepared store. Move-only; see the file comment for destruction.
class StoreHandle {
 public:
  StoreHandle() = default;
  StoreHandle(StoreHandle&& other) noexcept;
  StoreHandle& operator=(StoreHandle&& other) noexcept;
  StoreHandle(const StoreHandle&) = delete;
  StoreHandle& operator=(const StoreHandle&) = delete;
  ~StoreHandle();

  bool valid() const { return client_ != nullptr; }
  // One entry per key given to PrepareStore, in order.
  size_t size() const { return keys_.size(); }
  const std::vector<PoolKey>& keys() const { return keys_; }
  StoreOutcome outcome(size_t i) const { return slots_[i].outcome; }
  size_t allocated() const { return allocated_; }
  size_t already_stored() const { return already_; }
  size_t in_flight() const { return in_flight_; }
  size_t refused() const { return refused_; }
  bool issued() const { return issued_; }
  const CopyCompletion& completion() const { return completion_; }

 private:
  friend class KvTierClient;
  // result null: dropped (abort); else CompleteStore (commit if the copy succeeded).
  void Finish(Status* result);

  KvTierClient* client_ = nullptr;
  std::vector<PoolKey> keys_;
  std::vector<StoreSlot> slots_;
  size_t allocated_ = 0;
  size_t already_ = 0;
  size_t in_flight_ = 0;
  size_t refused_ = 0;
  CopyCompletion completion_;
  bool issued_ = false;
};

class KvTierClient {
 public:
  // Opens pool `pool_name`. Errors of SlotPool::Open; InvalidArgument if the layout's block
  // size differs from the pool's block_bytes or `engine` is null.
  static StatusOr<std::unique_ptr<KvTierClient>> Open(const std::string& pool_name, KvLayout layout,
                                                      CopyEngine* engine,
                                                      KvTierClientOptions options = {});
  ~KvTierClient();
  KvTierClient(const KvTierClient&) = delete;
  KvTierClient& operator=(const KvTierClient&) = delete;

  // OK while the pool is live; FailedPrecondition once it was retired (SlotPool::retired: its
  // sidecar stopped or was replaced by a new one), after which nothing stored in it is found
  // by anyone else: open a new client. PrepareLoad, PrepareStore and Remove fail with this
  // error on a retired pool, Lookup and Touch find nothing; handles prepared before finish.
  Status CheckPool() const;

  // The number of leading keys stored (READY) now. Advisory: only PrepareLoad protects them.
  // 0 on a retired pool.
  size_t Lookup(std::span<const PoolKey> keys);

  // Pins the blocks of keys[0, n). NotFound (nothing pinned) if any of them is no longer
  // stored (or is pinned by kMaxPinHolders other processes); InvalidArgument if n > keys.size()
  // or n > max_keys_per_call. n = 0 gives an empty handle.
  StatusOr<LoadHandle> PrepareLoad(std::span<const PoolKey> keys, size_t n);

  // Starts copying the pinned blocks into engine blocks `engine_blocks` (one per pinned block,
  // in order, distinct). Returns the copy's completion. InvalidArgument for a foreign or spent
  // handle, a count mismatch, a block out of range or a repeated block; FailedPrecondition if
  // Load was already issued on the handle; the engine's error if it refuses the batch. On
  // error nothing was started and the handle is unchanged.
  StatusOr<CopyCompletion> Load(LoadHandle& handle, std::span<const uint64_t> engine_blocks);

  // Waits for the handle's copy (if issued), unpins, and spends the handle. Returns the copy's
  // status (OK when no copy was issued); on error the engine blocks hold undefined bytes.
  // InvalidArgument (handle untouched) for a foreign or spent handle.
  Status CompleteLoad(LoadHandle& handle);

  // Claims slots for the keys that are not stored yet. The handle says per key what happened;
  // blocks are refused rather than evicting pinned or in-flight blocks (when exactly:
  // SlotPool::PrepareStore), and a call where every key was refused still returns a handle
  // (refused() == number of keys needing slots).
  // `fingerprints` is empty or one token fingerprint per key. InvalidArgument for repeated
  // keys, too many keys or a fingerprint count mismatch; other pool errors as returned.
  StatusOr<StoreHandle> PrepareStore(std::span<const PoolKey> keys,
                                     std::span<const uint64_t> fingerprints = {});

  // Starts copying engine blocks into the handle's allocated slots. `engine_blocks` has one
  // entry per key of the handle; only the entries of allocated keys are read, and they must be
  // distinct blocks in range; the entries of the other keys are ignored (any value will do).
  // Errors as Load: InvalidArgument for a foreign or spent handle, a count mismatch, or an
  // allocated key's block out of range or repeated; FailedPrecondition if Store was already
  // issued on the handle; the engine's error if it refuses the batch. On error nothing was
  // started and the handle is unchanged.
  StatusOr<CopyCompletion> Store(StoreHandle& handle, std::span<const uint64_t> engine_blocks);

  // Waits for the handle's copy; if it succeeded commits every allocated slot (the blocks
  // become visible to every process, kStored events), otherwise aborts them. Without an issued
  // Store it aborts them (a cancel) and returns OK. Returns the copy's error, or the first
  // commit error (the other slots are still committed). Spends the handle.
  Status CompleteStore(StoreHandle& handle);

  // Marks the stored keys among `keys` recently used. Returns how many were found (0 on a
  // retired pool).
  size_t Touch(std::span<const PoolKey> keys);

  // Removes a stored block (kRemoved event). NotFound if absent; FailedPrecondition if pinned
  // or being written.
  Status Remove(const PoolKey& key);

  // With pool_events: reads the pool's event ring up to now and delivers the events of other
  // clients (to on_event or the queue). Returns how many. Never blocks beyond a few
  // microseconds; if another thread is polling, returns 0 at once. 0 without pool_events.
  size_t PollPoolEvents();

  // Polls the pool's events (with pool_events), then appends the queued events to `out` (oldest
  // first) and empties the queue.
  void DrainEvents(std::vector<TierEvent>* out);

  TierStats Stats() const;

  const KvLayout& layout() const { return layout_; }
  // The underlying pool (tests and tools; engines use the methods above).
  SlotPool& pool() { return pool_; }

 private:
  friend class LoadHandle;
  friend class StoreHandle;
  struct Counters;

  KvTierClient(SlotPool pool, KvLayout layout, CopyEngine* engine, KvTierClientOptions options);
  void Emit(std::vector<TierEvent> events);
  void NoteCopy(CopyDirection direction, const CopyCompletion& completion, bool ok, uint64_t blocks,
                uint64_t bytes);
  void NoteAborted(uint64_t n);

  SlotPool pool_;
  KvLayout layout_;
  CopyEngine* engine_;
  KvTierClientOptions options_;
  std::unique_ptr<Counters> counters_;
  uint32_t pid_ = 0;
  mutable std::mutex events_mu_;
  std::deque<TierEvent> events_;  // GUARDED_BY(events_mu_)
  std::atomic<bool> polling_{false};
  PoolEventCursor cursor_;  // read and written only by the thread that set polling_
  std::atomic<int64_t> live_handles_{0};
};

}  // namespace deltakv::kvtier
