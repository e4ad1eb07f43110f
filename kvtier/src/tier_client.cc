#include "kvtier/tier_client.h"

#include <unistd.h>

#include <algorithm>
#include <cassert>
#include <unordered_set>
#include <utility>

namespace deltakv::kvtier {
namespace {

std::string CountText(size_t n, const char* what) { return std::to_string(n) + " " + what; }

// InvalidArgument "kv tier: <op>: engine block N <role>" for the smallest block that `blocks`
// holds more than once; OK when they are distinct.
Status CheckDistinctBlocks(std::vector<uint64_t> blocks, const char* op, const char* role) {
  std::sort(blocks.begin(), blocks.end());
  if (auto dup = std::adjacent_find(blocks.begin(), blocks.end()); dup != blocks.end()) {
    return InvalidArgument("kv tier: " + std::string(op) + ": engine block " +
                           std::to_string(*dup) + " " + role);
  }
  return Status::Ok();
}

}  // namespace

std::string_view TierEventKindName(TierEventKind kind) {
  switch (kind) {
    case TierEventKind::kStored:
      return "stored";
    case TierEventKind::kEvicted:
      return "evicted";
    case TierEventKind::kRemoved:
      return "removed";
  }
  return "unknown";
}

struct KvTierClient::Counters {
  std::atomic<uint64_t> lookups{0}, hit_blocks{0}, miss_blocks{0};
  std::atomic<uint64_t> loads_prepared{0}, loads_refused{0};
  std::atomic<uint64_t> stores_allocated{0}, stores_already{0}, stores_in_flight{0};
  std::atomic<uint64_t> stores_refused{0}, stores_committed{0}, stores_aborted{0};
  std::atomic<uint64_t> evictions{0}, removals{0}, events_dropped{0};
  std::atomic<uint64_t> pool_events{0}, events_lost{0};

  struct Direction {
    TierDirectionStats stats;
    uint64_t busy_ns = 0;
    uint64_t busy_until_ns = 0;
  };
  mutable std::mutex copy_mu;
  Direction store;  // GUARDED_BY(copy_mu)
  Direction load;   // GUARDED_BY(copy_mu)
};

// ---- Handles ---------------------------------------------------------------------------------

LoadHandle::LoadHandle(LoadHandle&& other) noexcept
    : client_(std::exchange(other.client_, nullptr)),
      pins_(std::move(other.pins_)),
      completion_(std::exchange(other.completion_, CopyCompletion())),
      issued_(std::exchange(other.issued_, false)) {}

LoadHandle& LoadHandle::operator=(LoadHandle&& other) noexcept {
  if (this != &other) {
    Finish(nullptr);
    client_ = std::exchange(other.client_, nullptr);
    pins_ = std::move(other.pins_);
    completion_ = std::exchange(other.completion_, CopyCompletion());
    issued_ = std::exchange(other.issued_, false);
  }
  return *this;
}

LoadHandle::~LoadHandle() { Finish(nullptr); }

void LoadHandle::Finish(Status* copy_status) {
  if (client_ == nullptr) return;
  // L4: the copy out of the slots has completed before any pin is dropped.
  Status s = completion_.Wait();
  if (issued_) {
    const uint64_t n = pins_.size();
    client_->NoteCopy(CopyDirection::kFromPool, completion_, s.ok(), n,
                      n * client_->layout_.block_bytes());
  }
  pins_.Release();
  client_->live_handles_.fetch_sub(1, std::memory_order_relaxed);
  client_ = nullptr;
  completion_ = CopyCompletion();
  issued_ = false;
  if (copy_status != nullptr) *copy_status = std::move(s);
}

StoreHandle::StoreHandle(StoreHandle&& other) noexcept
    : client_(std::exchange(other.client_, nullptr)),
      keys_(std::move(other.keys_)),
      slots_(std::move(other.slots_)),
      allocated_(std::exchange(other.allocated_, 0)),
      already_(std::exchange(other.already_, 0)),
      in_flight_(std::exchange(other.in_flight_, 0)),
      refused_(std::exchange(other.refused_, 0)),
      completion_(std::exchange(other.completion_, CopyCompletion())),
      issued_(std::exchange(other.issued_, false)) {
  other.keys_.clear();
  other.slots_.clear();
}

StoreHandle& StoreHandle::operator=(StoreHandle&& other) noexcept {
  if (this != &other) {
    Finish(nullptr);
    client_ = std::exchange(other.client_, nullptr);
    keys_ = std::move(other.keys_);
    slots_ = std::move(other.slots_);
    allocated_ = std::exchange(other.allocated_, 0);
    already_ = std::exchange(other.already_, 0);
    in_flight_ = std::exchange(other.in_flight_, 0);
    refused_ = std::exchange(other.refused_, 0);
    completion_ = std::exchange(other.completion_, CopyCompletion());
    issued_ = std::exchange(other.issued_, false);
    other.keys_.clear();
    other.slots_.clear();
  }
  return *this;
}

StoreHandle::~StoreHandle() { Finish(nullptr); }

// `result` null: the handle is dropped (abort); otherwise CompleteStore (commit if the copy
// succeeded) and *result receives the outcome.
void StoreHandle::Finish(Status* result) {
  if (client_ == nullptr) return;
  // S1/S2: no slot is committed or handed back while the copy into it may still be writing.
  Status copy = completion_.Wait();
  const uint64_t block_bytes = client_->layout_.block_bytes();
  if (issued_) {
    client_->NoteCopy(CopyDirection::kToPool, completion_, copy.ok(), allocated_,
                      allocated_ * block_bytes);
  }
  const bool commit = result != nullptr && issued_ && copy.ok();
  Status outcome = result != nullptr && issued_ ? copy : Status::Ok();
  SlotPool& pool = client_->pool_;
  std::vector<TierEvent> events;
  uint64_t committed = 0;
  uint64_t aborted = 0;
  for (size_t i = 0; i < slots_.size(); ++i) {
    if (slots_[i].outcome != StoreOutcome::kAllocated) continue;
    if (commit) {
      Status c = pool.CommitStore(slots_[i].ref);
      if (c.ok()) {
        ++committed;
        events.push_back(TierEvent{TierEventKind::kStored, keys_[i], client_->pid_});
      } else if (outcome.ok()) {
        outcome = c.WithPrefix("kv tier: commit of key " + keys_[i].ToHex());
      }
    } else if (pool.AbortStore(slots_[i].ref).ok()) {
      ++aborted;
    }
  }
  KvTierClient* client = std::exchange(client_, nullptr);
  client->counters_->stores_committed.fetch_add(committed, std::memory_order_relaxed);
  client->counters_->stores_aborted.fetch_add(aborted, std::memory_order_relaxed);
  client->live_handles_.fetch_sub(1, std::memory_order_relaxed);
  keys_.clear();
  slots_.clear();
  allocated_ = already_ = in_flight_ = refused_ = 0;
  completion_ = CopyCompletion();
  issued_ = false;
  client->Emit(std::move(events));
  if (result != nullptr) *result = std::move(outcome);
}

// ---- Client ----------------------------------------------------------------------------------

KvTierClient::KvTierClient(SlotPool pool, KvLayout layout, CopyEngine* engine,
                           KvTierClientOptions options)
    : pool_(std::move(pool)),
      layout_(std::move(layout)),
      engine_(engine),
      options_(std::move(options)),
      counters_(std::make_unique<Counters>()),
      pid_(static_cast<uint32_t>(getpid())),
      cursor_(pool_.OpenEventCursor()) {}

KvTierClient::~KvTierClient() {
  assert(live_handles_.load() == 0 && "a LoadHandle or StoreHandle outlived its KvTierClient");
}

StatusOr<std::unique_ptr<KvTierClient>> KvTierClient::Open(const std::string& pool_name,
                                                           KvLayout layout, CopyEngine* engine,
                                                           KvTierClientOptions options) {
  if (engine == nullptr) return InvalidArgument("kv tier: no copy engine");
  ASSIGN_OR_RETURN(SlotPool pool, SlotPool::Open(pool_name, options.pool));
  if (Status s = layout.CheckBlockBytes(pool.block_bytes()); !s.ok()) {
    return s.WithPrefix("kv tier: pool '" + pool_name + "'");
  }
  return std::unique_ptr<KvTierClient>(
      new KvTierClient(std::move(pool), std::move(layout), engine, std::move(options)));
}

Status KvTierClient::CheckPool() const {
  if (!pool_.retired()) [[likely]]
    return Status::Ok();
  return FailedPrecondition("kv tier: the pool '" + pool_.segment().name() +
                            "' was removed or replaced (its sidecar stopped or restarted); "
                            "close this client and open a new one");
}

size_t KvTierClient::Lookup(std::span<const PoolKey> keys) {
  const size_t hits = pool_.retired() ? 0 : pool_.Lookup(keys);
  counters_->lookups.fetch_add(1, std::memory_order_relaxed);
  counters_->hit_blocks.fetch_add(hits, std::memory_order_relaxed);
  counters_->miss_blocks.fetch_add(keys.size() - hits, std::memory_order_relaxed);
  return hits;
}

StatusOr<LoadHandle> KvTierClient::PrepareLoad(std::span<const PoolKey> keys, size_t n) {
  if (n > keys.size() || n > options_.max_keys_per_call) {
    return InvalidArgument("kv tier: prepare_load of " + std::to_string(n) + " blocks with " +
                           CountText(keys.size(), "keys") + " (cap " +
                           std::to_string(options_.max_keys_per_call) + ")");
  }
  RETURN_IF_ERROR(CheckPool());
  PinnedBlocks pins = pool_.PinPrefix(keys.first(n));
  if (pins.size() < n) {
    counters_->loads_refused.fetch_add(1, std::memory_order_relaxed);
    return NotFound("kv tier: prepare_load: only the first " + std::to_string(pins.size()) +
                    " of " +
                    CountText(n,
                              "blocks are stored (the next one was never stored, was evicted or "
                              "removed, or is pinned by too many processes)"));
  }
  counters_->loads_prepared.fetch_add(1, std::memory_order_relaxed);
  LoadHandle handle;
  handle.client_ = this;
  handle.pins_ = std::move(pins);
  live_handles_.fetch_add(1, std::memory_order_relaxed);
  return handle;
}

StatusOr<CopyCompletion> KvTierClient::Load(LoadHandle& handle,
                                            std::span<const uint64_t> engine_blocks) {
  if (handle.client_ != this) return InvalidArgument("kv tier: load: handle is not open here");
  if (handle.issued_) return FailedPrecondition("kv tier: load already issued on this handle");
  if (engine_blocks.size() != handle.size()) {
    return InvalidArgument("kv tier: load: " + CountText(engine_blocks.size(), "engine blocks") +
                           " for " + CountText(handle.size(), "pinned blocks"));
  }
  RETURN_IF_ERROR(
      CheckDistinctBlocks(std::vector<uint64_t>(engine_blocks.begin(), engine_blocks.end()), "load",
                          "is a destination twice"));
  std::vector<CopyRegion> regions;
  regions.reserve(handle.size() * layout_.pieces().size());
  for (size_t i = 0; i < handle.size(); ++i) {
    RETURN_IF_ERROR(layout_.AppendScatter(engine_blocks[i], handle.pins_.data(i), &regions));
  }
  ASSIGN_OR_RETURN(CopyCompletion completion,
                   engine_->Submit(CopyDirection::kFromPool, std::move(regions)));
  handle.completion_ = completion;
  handle.issued_ = true;
  return completion;
}

Status KvTierClient::CompleteLoad(LoadHandle& handle) {
  if (handle.client_ != this) return InvalidArgument("kv tier: complete_load: foreign handle");
  Status status;
  handle.Finish(&status);
  return status;
}

StatusOr<StoreHandle> KvTierClient::PrepareStore(std::span<const PoolKey> keys,
                                                 std::span<const uint64_t> fingerprints) {
  if (keys.size() > options_.max_keys_per_call) {
    return InvalidArgument("kv tier: prepare_store of " + CountText(keys.size(), "keys") +
                           ", cap " + std::to_string(options_.max_keys_per_call));
  }
  if (!fingerprints.empty() && fingerprints.size() != keys.size()) {
    return InvalidArgument(
        "kv tier: prepare_store: " + CountText(fingerprints.size(), "fingerprints") + " for " +
        CountText(keys.size(), "keys"));
  }
  {
    std::unordered_set<PoolKey, BlockKeyHash> seen;
    seen.reserve(keys.size());
    for (size_t i = 0; i < keys.size(); ++i) {
      if (!seen.insert(keys[i]).second) {
        return InvalidArgument("kv tier: prepare_store: key " + keys[i].ToHex() +
                               " repeated at position " + std::to_string(i));
      }
    }
  }
  RETURN_IF_ERROR(CheckPool());
  StoreHandle handle;
  handle.keys_.assign(keys.begin(), keys.end());
  StatusOr<PrepareStoreResult> prepared = pool_.PrepareStore(keys, fingerprints);
  std::vector<TierEvent> events;
  if (prepared.ok()) {
    handle.slots_ = std::move(prepared->slots);
    for (const PoolKey& key : prepared->evicted_keys) {
      events.push_back(TierEvent{TierEventKind::kEvicted, key, pid_});
    }
    counters_->evictions.fetch_add(prepared->evicted, std::memory_order_relaxed);
  } else if (prepared.status().code() == StatusCode::kResourceExhausted) {
    // Nothing was allocated and nothing is held: say per key what the pool holds now.
    handle.slots_.resize(keys.size());
    for (size_t i = 0; i < keys.size(); ++i) {
      StoreOutcome& o = handle.slots_[i].outcome;
      if (pool_.index().Find(keys[i], StateBit(SlotState::kReady))) {
        o = StoreOutcome::kAlreadyStored;
      } else if (pool_.index().Find(keys[i], StateBit(SlotState::kWriting))) {
        o = StoreOutcome::kInFlight;
      } else {
        o = StoreOutcome::kRefused;
      }
    }
  } else {
    return prepared.status();
  }
  for (const StoreSlot& s : handle.slots_) {
    switch (s.outcome) {
      case StoreOutcome::kAllocated:
        ++handle.allocated_;
        break;
      case StoreOutcome::kAlreadyStored:
        ++handle.already_;
        break;
      case StoreOutcome::kInFlight:
        ++handle.in_flight_;
        break;
      case StoreOutcome::kRefused:
        ++handle.refused_;
        break;
    }
  }
  counters_->stores_allocated.fetch_add(handle.allocated_, std::memory_order_relaxed);
  counters_->stores_already.fetch_add(handle.already_, std::memory_order_relaxed);
  counters_->stores_in_flight.fetch_add(handle.in_flight_, std::memory_order_relaxed);
  counters_->stores_refused.fetch_add(handle.refused_, std::memory_order_relaxed);
  handle.client_ = this;
  live_handles_.fetch_add(1, std::memory_order_relaxed);
  Emit(std::move(events));
  return handle;
}

StatusOr<CopyCompletion> KvTierClient::Store(StoreHandle& handle,
                                             std::span<const uint64_t> engine_blocks) {
  if (handle.client_ != this) return InvalidArgument("kv tier: store: handle is not open here");
  if (handle.issued_) return FailedPrecondition("kv tier: store already issued on this handle");
  if (engine_blocks.size() != handle.size()) {
    return InvalidArgument("kv tier: store: " + CountText(engine_blocks.size(), "engine blocks") +
                           " for " + CountText(handle.size(), "keys"));
  }
  // Only the entries of allocated keys are read; those must be distinct, as in Load.
  std::vector<uint64_t> sources;
  sources.reserve(handle.allocated_);
  for (size_t i = 0; i < handle.size(); ++i) {
    if (handle.slots_[i].outcome == StoreOutcome::kAllocated) sources.push_back(engine_blocks[i]);
  }
  RETURN_IF_ERROR(
      CheckDistinctBlocks(std::move(sources), "store", "is the source of two allocated keys"));
  std::vector<CopyRegion> regions;
  regions.reserve(handle.allocated_ * layout_.pieces().size());
  for (size_t i = 0; i < handle.size(); ++i) {
    const StoreSlot& s = handle.slots_[i];
    if (s.outcome != StoreOutcome::kAllocated) continue;
    RETURN_IF_ERROR(layout_.AppendGather(engine_blocks[i], s.data, &regions));
  }
  CopyCompletion completion;
  if (!regions.empty()) {
    ASSIGN_OR_RETURN(completion, engine_->Submit(CopyDirection::kToPool, std::move(regions)));
  }
  handle.completion_ = completion;
  handle.issued_ = true;
  return completion;
}

Status KvTierClient::CompleteStore(StoreHandle& handle) {
  if (handle.client_ != this) return InvalidArgument("kv tier: complete_store: foreign handle");
  Status status;
  handle.Finish(&status);
  return status;
}

size_t KvTierClient::Touch(std::span<const PoolKey> keys) {
  return pool_.retired() ? 0 : pool_.Touch(keys);
}

Status KvTierClient::Remove(const PoolKey& key) {
  RETURN_IF_ERROR(CheckPool());
  RETURN_IF_ERROR(pool_.Remove(key));
  counters_->removals.fetch_add(1, std::memory_order_relaxed);
  Emit({TierEvent{TierEventKind::kRemoved, key, pid_}});
  return Status::Ok();
}

void KvTierClient::Emit(std::vector<TierEvent> events) {
  if (events.empty()) return;
  if (options_.on_event) {
    for (const TierEvent& e : events) options_.on_event(e);
    return;
  }
  std::lock_guard<std::mutex> lock(events_mu_);
  for (const TierEvent& e : events) {
    if (options_.max_queued_events == 0) {
      counters_->events_dropped.fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    if (events_.size() >= options_.max_queued_events) {
      events_.pop_front();
      counters_->events_dropped.fetch_add(1, std::memory_order_relaxed);
    }
    events_.push_back(e);
  }
}

size_t KvTierClient::PollPoolEvents() {
  if (!options_.pool_events) return 0;
  bool idle = false;
  // One poller at a time keeps the pool's order; a callback that drains meanwhile skips polling.
  if (!polling_.compare_exchange_strong(idle, true, std::memory_order_acquire)) return 0;
  struct Done {
    std::atomic<bool>* polling;
    ~Done() { polling->store(false, std::memory_order_release); }
  } done{&polling_};  // also if on_event throws
  std::vector<PoolEvent> read;
  const PoolEventRead r =
      pool_.ReadEvents(&cursor_, &read, SIZE_MAX,
                       std::chrono::duration_cast<std::chrono::nanoseconds>(
                           options_.pool_event_skip_after));
  std::vector<TierEvent> events;
  events.reserve(read.size());
  for (const PoolEvent& e : read) {
    if (e.attachment == pool_.attachment_id()) continue;  // this client's own: reported already
    events.push_back(TierEvent{static_cast<TierEventKind>(e.kind), e.key, e.pid});
  }
  const size_t n = events.size();
  counters_->pool_events.fetch_add(n, std::memory_order_relaxed);
  counters_->events_lost.fetch_add(r.lost, std::memory_order_relaxed);
  Emit(std::move(events));
  return n;
}

void KvTierClient::DrainEvents(std::vector<TierEvent>* out) {
  (void)PollPoolEvents();
  std::lock_guard<std::mutex> lock(events_mu_);
  out->insert(out->end(), events_.begin(), events_.end());
  events_.clear();
}

void KvTierClient::NoteCopy(CopyDirection direction, const CopyCompletion& completion, bool ok,
                            uint64_t blocks, uint64_t bytes) {
  if (!completion.valid()) return;  // nothing was copied (no allocated slot)
  const CopyTiming t = completion.Timing();
  uint64_t added_busy_ns = 0;
  {
    std::lock_guard<std::mutex> lock(counters_->copy_mu);
    Counters::Direction& d =
        direction == CopyDirection::kToPool ? counters_->store : counters_->load;
    ++d.stats.batches;
    if (ok) {
      d.stats.blocks += blocks;
      d.stats.bytes += bytes;
    } else {
      ++d.stats.failed_batches;
    }
    if (t.done_ns != 0 && t.done_ns >= t.submit_ns) {
      const uint64_t start = std::max(t.submit_ns, d.busy_until_ns);
      if (t.done_ns > start) added_busy_ns = t.done_ns - start;
      d.busy_ns += added_busy_ns;
      d.busy_until_ns = std::max(d.busy_until_ns, t.done_ns);
    }
  }
  // The pool-wide counters get the same numbers, so they are the sums of every client's.
  pool_.RecordCopy(direction == CopyDirection::kToPool, ok, blocks, bytes, added_busy_ns);
}

TierStats KvTierClient::Stats() const {
  TierStats s;
  const Counters& c = *counters_;
  auto get = [](const std::atomic<uint64_t>& a) { return a.load(std::memory_order_relaxed); };
  s.lookups = get(c.lookups);
  s.hit_blocks = get(c.hit_blocks);
  s.miss_blocks = get(c.miss_blocks);
  s.loads_prepared = get(c.loads_prepared);
  s.loads_refused = get(c.loads_refused);
  s.stores_allocated = get(c.stores_allocated);
  s.stores_already = get(c.stores_already);
  s.stores_in_flight = get(c.stores_in_flight);
  s.stores_refused = get(c.stores_refused);
  s.stores_committed = get(c.stores_committed);
  s.stores_aborted = get(c.stores_aborted);
  s.evictions = get(c.evictions);
  s.removals = get(c.removals);
  s.events_dropped = get(c.events_dropped);
  s.pool_events = get(c.pool_events);
  s.events_lost = get(c.events_lost);
  {
    std::lock_guard<std::mutex> lock(c.copy_mu);
    auto finish = [](const Counters::Direction& d) {
      TierDirectionStats out = d.stats;
      out.busy_seconds = static_cast<double>(d.busy_ns) * 1e-9;
      out.gb_per_s = d.busy_ns > 0 ? static_cast<double>(d.stats.bytes) / d.busy_ns : 0.0;
      return out;
    };
    s.store = finish(c.store);
    s.load = finish(c.load);
  }
  s.pool = pool_.Stats();
  s.occupancy = s.pool.capacity_slots == 0 ? 0.0
                                           : static_cast<double>(s.pool.ready_slots) /
                                                 static_cast<double>(s.pool.capacity_slots);
  return s;
}

}  // namespace deltakv::kvtier
