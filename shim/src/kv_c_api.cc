// The host KV tier part of the C ABI (include/deltakv/deltakv_kv.h): thin wrappers over
// kvtier::KvTierClient that validate every pointer and count, follow the ABI's conventions
// (c_abi.h: a deltakv_status and the calling thread's message).
//
// Handles: each C handle owns its kvtier handle and is registered with its client, so that
// closing the client can finish (and detach) the handles still alive, and a handle can be
// freed before or after its client. Every handle carries a magic word that is cleared when it
// is freed, so a handle of the wrong kind (or, usually, a stale one) is rejected with an error
// instead of being used.
//
// fork(): a client belongs to the process that opened it (its pins and slots are attributed to
// that pid, and its copy threads do not exist in a child). A pthread_atfork handler bumps a
// fork epoch in the child; every call on a client or handle opened in an earlier epoch fails
// with FAILED_PRECONDITION, and closing or freeing it there releases only the C wrapper (the
// kvtier objects are left alone: their destructors would wait for copy threads that the child
// does not have).
#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <span>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "base/status.h"
#include "c_abi.h"
#include "deltakv/deltakv_kv.h"
#include "kvtier/copy_engine.h"
#include "kvtier/keys.h"
#include "kvtier/kv_layout.h"
#include "kvtier/tier_client.h"

namespace {

using deltakv::InvalidArgument;
using deltakv::Status;
using deltakv::StatusCode;
using deltakv::StatusOr;
namespace kvtier = deltakv::kvtier;

constexpr uint64_t kClientMagic = 0x746e65696c63766bull;  // "kvclient"
constexpr uint64_t kLoadMagic = 0x0064616f6c766bull;      // "kvload"
constexpr uint64_t kStoreMagic = 0x65726f7473766bull;     // "kvstore"

constexpr const char* kDefaultPoolName = "deltakv.kv";
constexpr uint64_t kDefaultMaxKeysPerCall = 1u << 16;
constexpr uint64_t kDefaultMaxQueuedEvents = 1u << 16;
constexpr uint32_t kDefaultOpenTimeoutMs = 1000;
constexpr uint32_t kMaxCopyThreads = 256;

// The parameter struct of the first version: every caller passes at least this much.
// Version 1 of the params ended at open_timeout_ms; later fields are read only when the
// caller's struct_size covers them.
constexpr size_t kParamsV1Size =
    offsetof(deltakv_kv_client_params, open_timeout_ms) + sizeof(uint32_t);
// Stats: the header (struct_size, version) must be there.
constexpr size_t kStatsHeaderSize = offsetof(deltakv_kv_stats, lookups);

// No versioned struct ends in padding (deltakv_base.h): a later field always lands past sizeof,
// where a newer caller's nonzero byte is seen.
static_assert(sizeof(deltakv_kv_key_context) ==
              offsetof(deltakv_kv_key_context, reserved0) + sizeof(uint32_t));
static_assert(sizeof(deltakv_kv_client_params) ==
              offsetof(deltakv_kv_client_params, reserved1) + sizeof(uint32_t));
static_assert(sizeof(deltakv_kv_stats) ==
              offsetof(deltakv_kv_stats, pool_copy_out_gb_per_s) + sizeof(double));
// Array element types of the ABI keep their size (callers index arrays of them).
static_assert(sizeof(deltakv_kv_key) == 16 && sizeof(deltakv_kv_event) == 32);
// Store outcomes pass through by value.
static_assert(static_cast<int>(DELTAKV_KV_STORE_ALLOCATED) ==
                  static_cast<int>(kvtier::StoreOutcome::kAllocated) &&
              static_cast<int>(DELTAKV_KV_STORE_ALREADY_STORED) ==
                  static_cast<int>(kvtier::StoreOutcome::kAlreadyStored) &&
              static_cast<int>(DELTAKV_KV_STORE_IN_FLIGHT) ==
                  static_cast<int>(kvtier::StoreOutcome::kInFlight) &&
              static_cast<int>(DELTAKV_KV_STORE_REFUSED) ==
                  static_cast<int>(kvtier::StoreOutcome::kRefused));

// Bumped in the child after every fork().
std::atomic<uint64_t> g_fork_epoch{0};
std::once_flag g_atfork_once;
void OnForkChild() { g_fork_epoch.fetch_add(1, std::memory_order_relaxed); }

template <typename Body>
deltakv_status Run(const char* fn, Body&& body) {
  return deltakv::shim::RunC(fn, std::forward<Body>(body));
}

std::string Count(size_t n, const char* what) { return std::to_string(n) + " " + what; }

// NULL with a nonzero count is an error; NULL with 0 is an empty array.
Status CheckArray(const void* p, size_t n, const char* name) {
  if (p == nullptr && n > 0) {
    return InvalidArgument(std::string(name) + " is NULL with a count of " + std::to_string(n));
  }
  return Status::Ok();
}

Status CheckOut(const void* p, const char* name) {
  if (p == nullptr) return InvalidArgument(std::string(name) + " is NULL");
  return Status::Ok();
}

std::vector<kvtier::PoolKey> ToKeys(const deltakv_kv_key* keys, size_t n) {
  std::vector<kvtier::PoolKey> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = kvtier::PoolKey{keys[i].lo, keys[i].hi};
  return out;
}

deltakv_kv_key ToC(const kvtier::PoolKey& k) { return deltakv_kv_key{k.lo, k.hi}; }

int32_t EventKind(kvtier::TierEventKind kind) {
  switch (kind) {
    case kvtier::TierEventKind::kStored:
      return DELTAKV_KV_EVENT_STORED;
    case kvtier::TierEventKind::kEvicted:
      return DELTAKV_KV_EVENT_EVICTED;
    case kvtier::TierEventKind::kRemoved:
      return DELTAKV_KV_EVENT_REMOVED;
    default:
      // Kinds added to the tier later reach C callers generically (raw_kind says which).
      return DELTAKV_KV_EVENT_OTHER;
  }
}

StatusOr<kvtier::KeyContext> ToKeyContext(const deltakv_kv_key_context* in) {
  deltakv_kv_key_context copy = deltakv_kv_default_key_context();
  RETURN_IF_ERROR(
      deltakv::shim::ReadVersionedStruct(in, sizeof(deltakv_kv_key_context), "key context",
                                         "start from deltakv_kv_default_key_context()", &copy));
  const deltakv_kv_key_context* c = &copy;
  kvtier::KeyContext ctx;
  auto str = [](const char* s) -> std::optional<std::string> {
    if (s == nullptr) return std::nullopt;
    return std::string(s);
  };
  ctx.model_fingerprint = str(c->model_fingerprint);
  ctx.kv_dtype = str(c->kv_dtype);
  ctx.kv_layout = str(c->kv_layout);
  ctx.adapter_id = str(c->adapter_id);
  ctx.salt = str(c->salt);
  if (c->tp_size > 0) {
    if (c->tp_rank < 0 || c->tp_rank >= c->tp_size) {
      return InvalidArgument("key context: tp_rank " + std::to_string(c->tp_rank) +
                             " is not in [0, tp_size " + std::to_string(c->tp_size) + ")");
    }
    ctx.tp_rank = static_cast<uint32_t>(c->tp_rank);
    ctx.tp_size = static_cast<uint32_t>(c->tp_size);
  } else if (c->tp_rank != 0 && c->tp_rank != -1) {
    return InvalidArgument("key context: tp_rank " + std::to_string(c->tp_rank) +
                           " without a tp_size (set tp_size > 0, or tp_rank to -1)");
  }
  switch (c->hash_kind) {
    case DELTAKV_KV_HASH_XXH3:
      ctx.kind = kvtier::HashKind::kXxh3;
      break;
    case DELTAKV_KV_HASH_SHA256:
      ctx.kind = kvtier::HashKind::kSha256;
      break;
    default:
      return InvalidArgument("key context: hash_kind " + std::to_string(c->hash_kind) +
                             " (expected 0 xxh3 or 1 sha256)");
  }
  RETURN_IF_ERROR(kvtier::ValidateKeyContext(ctx));
  return ctx;
}

StatusOr<kvtier::KvLayout> ToLayout(const deltakv_kv_layout& l) {
  switch (l.kind) {
    case DELTAKV_KV_LAYOUT_PER_LAYER: {
      if (l.num_layers == 0) return InvalidArgument("per-layer layout: num_layers is 0");
      RETURN_IF_ERROR(CheckArray(l.layers, l.num_layers, "per-layer layout: layers"));
      if (l.num_layers > kvtier::kMaxLayoutPieces) {
        return InvalidArgument("per-layer layout: " + Count(l.num_layers, "layers") + ", cap " +
                               std::to_string(kvtier::kMaxLayoutPieces));
      }
      std::vector<kvtier::LayerTensors> layers(l.num_layers);
      for (size_t i = 0; i < l.num_layers; ++i) {
        if (l.layers[i].k == nullptr) {
          return InvalidArgument("per-layer layout: layer " + std::to_string(i) + " has no K");
        }
        layers[i].k = static_cast<uint8_t*>(l.layers[i].k);
        layers[i].v = static_cast<uint8_t*>(l.layers[i].v);
        layers[i].stride = l.layers[i].stride;
      }
      return kvtier::KvLayout::PerLayer(layers, l.num_blocks, l.bytes_per_tensor);
    }
    case DELTAKV_KV_LAYOUT_CROSS_LAYER:
      return kvtier::KvLayout::CrossLayer(static_cast<uint8_t*>(l.base), l.num_blocks,
                                          l.block_bytes, l.block_stride);
    case DELTAKV_KV_LAYOUT_PIECES: {
      if (l.num_pieces == 0) return InvalidArgument("pieces layout: num_pieces is 0");
      RETURN_IF_ERROR(CheckArray(l.pieces, l.num_pieces, "pieces layout: pieces"));
      if (l.num_pieces > kvtier::kMaxLayoutPieces) {
        return InvalidArgument("pieces layout: " + Count(l.num_pieces, "pieces") + ", cap " +
                               std::to_string(kvtier::kMaxLayoutPieces));
      }
      std::vector<kvtier::KvPiece> pieces(l.num_pieces);
      for (size_t i = 0; i < l.num_pieces; ++i) {
        pieces[i].base = static_cast<uint8_t*>(l.pieces[i].base);
        pieces[i].stride = l.pieces[i].stride;
        pieces[i].bytes = l.pieces[i].bytes;
      }
      return kvtier::KvLayout::FromPieces(std::move(pieces), l.num_blocks);
    }
    default:
      return InvalidArgument("layout kind " + std::to_string(l.kind) +
                             " (expected 1 per-layer, 2 cross-layer or 3 pieces)");
  }
}

StatusOr<std::unique_ptr<kvtier::CopyEngine>> MakeCopyEngine(const char* backend,
                                                             uint32_t threads) {
  const std::string name = backend == nullptr ? "cpu" : backend;
  if (name == "cpu") {
    if (threads > kMaxCopyThreads) {
      return InvalidArgument("copy_threads " + std::to_string(threads) + ", cap " +
                             std::to_string(kMaxCopyThreads));
    }
    kvtier::CpuCopyEngineOptions o;
    o.threads = threads;
    ASSIGN_OR_RETURN(std::unique_ptr<kvtier::CpuCopyEngine> engine,
                     kvtier::CpuCopyEngine::Create(o));
    return std::unique_ptr<kvtier::CopyEngine>(std::move(engine));
  }
  if (name == "cuda") {
    return deltakv::Unimplemented("copy backend 'cuda' is not in this build (use 'cpu')");
  }
  return InvalidArgument("unknown copy backend '" + name + "' (expected 'cpu')");
}

}  // namespace

struct deltakv_kv_client {
  uint64_t magic = kClientMagic;
  uint64_t fork_epoch = 0;
  pid_t pid = 0;
  uint64_t max_queued_events = kDefaultMaxQueuedEvents;
  // Declared before `client`: the copy engine outlives the client that borrows it.
  std::unique_ptr<kvtier::CopyEngine> engine;
  std::unique_ptr<kvtier::KvTierClient> client;

  std::mutex handles_mu;
  std::unordered_set<deltakv_kv_load_handle*> loads;    // GUARDED_BY(handles_mu): not yet freed
  std::unordered_set<deltakv_kv_store_handle*> stores;  // GUARDED_BY(handles_mu)

  mutable std::mutex events_mu;
  std::deque<deltakv_kv_event> events;  // GUARDED_BY(events_mu): drained, not yet returned
  uint64_t events_dropped = 0;          // GUARDED_BY(events_mu)
};

struct deltakv_kv_load_handle {
  uint64_t magic = kLoadMagic;
  deltakv_kv_client* owner = nullptr;  // null once the client was closed
  uint64_t fork_epoch = 0;
  std::unique_ptr<kvtier::LoadHandle> handle;
};

struct deltakv_kv_store_handle {
  uint64_t magic = kStoreMagic;
  deltakv_kv_client* owner = nullptr;
  uint64_t fork_epoch = 0;
  std::unique_ptr<kvtier::StoreHandle> handle;
  // The outcome of PrepareStore, kept after completion.
  std::vector<uint8_t> outcomes;
  size_t allocated = 0, already = 0, in_flight = 0, refused = 0;
};

namespace {

bool ForkedSince(uint64_t epoch) { return epoch != g_fork_epoch.load(std::memory_order_relaxed); }

Status ForkedError(const char* what, pid_t pid) {
  return deltakv::FailedPrecondition(std::string(what) + " was opened in process " +
                                     std::to_string(pid) +
                                     " before a fork(); open a new client in this process");
}

// A client usable by this process.
Status CheckClient(const deltakv_kv_client* c) {
  if (c == nullptr) return InvalidArgument("client is NULL");
  if (c->magic != kClientMagic) return InvalidArgument("not a deltakv_kv_client (freed?)");
  if (ForkedSince(c->fork_epoch)) return ForkedError("the client", c->pid);
  return Status::Ok();
}

// A handle of kind T (magic `magic`) whose client is open; `owner` (when given) must be its
// client; the kvtier handle must not be spent.
template <typename H>
Status CheckHandle(const H* h, uint64_t magic, const char* kind, const deltakv_kv_client* owner,
                   bool must_be_live) {
  if (h == nullptr) return InvalidArgument(std::string(kind) + " handle is NULL");
  if (h->magic != magic) {
    return InvalidArgument(std::string("not a deltakv_kv_") + kind + " handle (freed?)");
  }
  if (ForkedSince(h->fork_epoch)) {
    return deltakv::FailedPrecondition(std::string(kind) +
                                       " handle was made before a fork(); it is not usable in "
                                       "this process");
  }
  if (h->owner == nullptr) {
    return deltakv::FailedPrecondition(std::string(kind) +
                                       " handle's client was closed (only free it now)");
  }
  if (owner != nullptr && h->owner != owner) {
    return InvalidArgument(std::string(kind) + " handle belongs to another client");
  }
  if (must_be_live && !h->handle->valid()) {
    return deltakv::FailedPrecondition(std::string(kind) + " handle was already completed");
  }
  return Status::Ok();
}

// Query / wait on a handle's copy. `wait_ms` < 0 waits without limit; no value: never blocks.
template <typename H>
Status CopyDone(const H* h, uint64_t magic, const char* kind, std::optional<int64_t> wait_ms,
                int* done) {
  RETURN_IF_ERROR(CheckHandle(h, magic, kind, nullptr, /*must_be_live=*/true));
  RETURN_IF_ERROR(CheckOut(done, "done"));
  if (!h->handle->issued()) {
    return deltakv::FailedPrecondition(std::string("no ") + kind + " was started on this handle");
  }
  const kvtier::CopyCompletion& c = h->handle->completion();
  bool finished = c.Done();
  if (!finished && wait_ms.has_value()) {
    if (*wait_ms < 0) {
      (void)c.Wait();  // the copy's status is what complete_* returns
      finished = true;
    } else {
      finished = c.WaitFor(std::chrono::milliseconds(*wait_ms));
    }
  }
  *done = finished ? 1 : 0;
  return Status::Ok();
}

// Removes a handle from its client's registry. REQUIRES: handles_mu held, or no other thread.
void Forget(deltakv_kv_load_handle* h) { h->owner->loads.erase(h); }
void Forget(deltakv_kv_store_handle* h) { h->owner->stores.erase(h); }

template <typename H>
void Unregister(H* h) {
  std::lock_guard<std::mutex> lock(h->owner->handles_mu);
  Forget(h);
}

// Frees a handle wrapper: finishes the kvtier handle (waits for its copy, unpins or aborts)
// unless that belongs to the process before a fork.
template <typename H>
Status FreeHandle(H* h, uint64_t magic, const char* kind) {
  if (h == nullptr) return Status::Ok();
  if (h->magic != magic) {
    return InvalidArgument(std::string("not a deltakv_kv_") + kind + " handle (freed twice?)");
  }
  if (ForkedSince(h->fork_epoch)) {
    // The parent's pins and slots are not this process's to release, and waiting for a copy
    // that ran on the parent's threads would never end: leave the kvtier handle alone. The
    // client's registry (this process's copy) forgets the handle; its mutex is not taken, as a
    // thread of the parent may have held it at the fork.
    if (h->owner != nullptr) Forget(h);
    (void)h->handle.release();
  } else if (h->owner != nullptr) {
    Unregister(h);
    h->handle.reset();  // waits for the copy, then unpins / aborts
  }
  h->magic = 0;
  delete h;
  return Status::Ok();
}

void FillStats(const kvtier::TierStats& t, uint64_t extra_dropped, deltakv_kv_stats* s) {
  s->lookups = t.lookups;
  s->hit_blocks = t.hit_blocks;
  s->miss_blocks = t.miss_blocks;
  s->loads_prepared = t.loads_prepared;
  s->loads_refused = t.loads_refused;
  s->stores_allocated = t.stores_allocated;
  s->stores_already = t.stores_already;
  s->stores_in_flight = t.stores_in_flight;
  s->stores_refused = t.stores_refused;
  s->stores_committed = t.stores_committed;
  s->stores_aborted = t.stores_aborted;
  s->evictions = t.evictions;
  s->removals = t.removals;
  s->events_dropped = t.events_dropped + extra_dropped;
  s->store_blocks = t.store.blocks;
  s->store_bytes = t.store.bytes;
  s->store_batches = t.store.batches;
  s->store_failed_batches = t.store.failed_batches;
  s->store_busy_seconds = t.store.busy_seconds;
  s->store_gb_per_s = t.store.gb_per_s;
  s->load_blocks = t.load.blocks;
  s->load_bytes = t.load.bytes;
  s->load_batches = t.load.batches;
  s->load_failed_batches = t.load.failed_batches;
  s->load_busy_seconds = t.load.busy_seconds;
  s->load_gb_per_s = t.load.gb_per_s;
  const kvtier::PoolStats& p = t.pool;
  s->pool_capacity_slots = p.capacity_slots;
  s->pool_block_bytes = p.block_bytes;
  s->pool_untouched_slots = p.untouched_slots;
  s->pool_free_slots = p.free_slots;
  s->pool_writing_slots = p.writing_slots;
  s->pool_ready_slots = p.ready_slots;
  s->pool_evicting_slots = p.evicting_slots;
  s->pool_pinned_slots = p.pinned_slots;
  s->pool_ready_bytes = p.ready_bytes;
  s->pool_index_entries = p.index_entries;
  s->pool_lookups = p.lookups;
  s->pool_hits = p.hits;
  s->pool_misses = p.misses;
  s->pool_stores_prepared = p.stores_prepared;
  s->pool_stores_committed = p.stores_committed;
  s->pool_stores_aborted = p.stores_aborted;
  s->pool_stores_refused = p.stores_refused;
  s->pool_evictions = p.evictions;
  s->pool_removals = p.removals;
  s->pool_pins = p.pins;
  s->pool_reclaimed_writes = p.reclaimed_writes;
  s->pool_reclaimed_evictions = p.reclaimed_evictions;
  s->pool_reclaimed_pins = p.reclaimed_pins;
  s->pool_chunks_touched = p.chunks_touched;
  s->pool_events = t.pool_events;
  s->events_lost = t.events_lost;
  s->pool_loads_completed = p.loads_completed;
  s->pool_bytes_in = p.bytes_in;
  s->pool_bytes_out = p.bytes_out;
  s->pool_copy_in_gb_per_s =
      p.copy_busy_ns_in > 0 ? static_cast<double>(p.bytes_in) / p.copy_busy_ns_in : 0;
  s->pool_copy_out_gb_per_s =
      p.copy_busy_ns_out > 0 ? static_cast<double>(p.bytes_out) / p.copy_busy_ns_out : 0;
  s->occupancy = t.occupancy;
}

}  // namespace

extern "C" {

// ---- Keys -------------------------------------------------------------------------------------

deltakv_status deltakv_kv_chain_keys(const deltakv_kv_key_context* ctx, const uint32_t* tokens,
                                     size_t num_tokens, uint32_t block_tokens,
                                     const deltakv_kv_key* parent, deltakv_kv_key* out,
                                     size_t out_capacity, size_t* num_keys) {
  return Run(__func__, [&]() -> Status {
    ASSIGN_OR_RETURN(kvtier::KeyContext context, ToKeyContext(ctx));
    RETURN_IF_ERROR(CheckArray(tokens, num_tokens, "tokens"));
    RETURN_IF_ERROR(CheckOut(num_keys, "num_keys"));
    if (block_tokens == 0 || block_tokens > kvtier::kMaxBlockTokens) {
      return InvalidArgument("block_tokens " + std::to_string(block_tokens) + " is not in [1, " +
                             std::to_string(kvtier::kMaxBlockTokens) + "]");
    }
    const size_t needed = num_tokens / block_tokens;
    *num_keys = needed;
    RETURN_IF_ERROR(CheckArray(out, out_capacity, "out"));
    if (out_capacity < needed) {
      return InvalidArgument("out has room for " + Count(out_capacity, "keys") + ", " +
                             Count(num_tokens, "tokens") + " in blocks of " +
                             std::to_string(block_tokens) + " need " + std::to_string(needed));
    }
    kvtier::BlockKey parent_key;
    if (parent != nullptr) parent_key = kvtier::BlockKey{parent->lo, parent->hi};
    ASSIGN_OR_RETURN(std::vector<kvtier::BlockKey> keys,
                     kvtier::ChainKeys(context, std::span<const uint32_t>(tokens, num_tokens),
                                       block_tokens, parent != nullptr ? &parent_key : nullptr));
    if (keys.size() != needed) {
      return deltakv::Internal("ChainKeys gave " + Count(keys.size(), "keys") + ", expected " +
                               std::to_string(needed));
    }
    for (size_t i = 0; i < keys.size(); ++i) out[i] = ToC(keys[i]);
    return Status::Ok();
  });
}

deltakv_status deltakv_kv_engine_hash_keys(const deltakv_kv_key_context* ctx, const void* hashes,
                                           size_t hash_bytes, size_t count, deltakv_kv_key* out) {
  return Run(__func__, [&]() -> Status {
    ASSIGN_OR_RETURN(kvtier::KeyContext context, ToKeyContext(ctx));
    if (hash_bytes == 0 || hash_bytes > kvtier::kMaxEngineHashBytes) {
      return InvalidArgument("hash_bytes " + std::to_string(hash_bytes) + " is not in [1, " +
                             std::to_string(kvtier::kMaxEngineHashBytes) + "]");
    }
    RETURN_IF_ERROR(CheckArray(hashes, count, "hashes"));
    RETURN_IF_ERROR(CheckArray(out, count, "out"));
    const auto* bytes = static_cast<const uint8_t*>(hashes);
    for (size_t i = 0; i < count; ++i) {
      StatusOr<kvtier::BlockKey> key = kvtier::KeyFromEngineHash(
          std::span<const uint8_t>(bytes + i * hash_bytes, hash_bytes), context);
      if (!key.ok()) return key.status().WithPrefix("hash " + std::to_string(i));
      out[i] = ToC(*key);
    }
    return Status::Ok();
  });
}

deltakv_status deltakv_kv_token_fingerprint(const uint32_t* tokens, size_t num_tokens,
                                            uint64_t* out) {
  return Run(__func__, [&]() -> Status {
    RETURN_IF_ERROR(CheckArray(tokens, num_tokens, "tokens"));
    RETURN_IF_ERROR(CheckOut(out, "out"));
    *out = kvtier::TokenFingerprint(std::span<const uint32_t>(tokens, num_tokens));
    return Status::Ok();
  });
}

deltakv_status deltakv_kv_key_to_hex(deltakv_kv_key key, char* out, size_t out_size) {
  return Run(__func__, [&]() -> Status {
    RETURN_IF_ERROR(CheckOut(out, "out"));
    if (out_size < 33) {
      return InvalidArgument("out_size " + std::to_string(out_size) + ", need 33");
    }
    const std::string hex = kvtier::BlockKey{key.lo, key.hi}.ToHex();
    std::memcpy(out, hex.c_str(), hex.size() + 1);
    return Status::Ok();
  });
}

// ---- Client -----------------------------------------------------------------------------------

deltakv_status deltakv_kv_client_open(const deltakv_kv_client_params* params,
                                      deltakv_kv_client** out) {
  return Run(__func__, [&]() -> Status {
    RETURN_IF_ERROR(CheckOut(out, "out"));
    *out = nullptr;
    deltakv_kv_client_params p = deltakv_kv_client_default_params();
    // Fields the caller's struct does not hold keep their defaults.
    RETURN_IF_ERROR(deltakv::shim::ReadVersionedStruct(
        params, kParamsV1Size, "params", "start from deltakv_kv_client_default_params()", &p));
    const std::string pool_name = p.pool_name == nullptr ? kDefaultPoolName : p.pool_name;
    if (pool_name.empty()) return InvalidArgument("pool_name is empty");
    ASSIGN_OR_RETURN(kvtier::KvLayout layout, ToLayout(p.layout));
    ASSIGN_OR_RETURN(std::unique_ptr<kvtier::CopyEngine> engine,
                     MakeCopyEngine(p.copy_backend, p.copy_threads));

    auto c = std::make_unique<deltakv_kv_client>();
    c->max_queued_events = p.max_queued_events == 0 ? kDefaultMaxQueuedEvents : p.max_queued_events;
    kvtier::KvTierClientOptions options;
    options.max_keys_per_call =
        p.max_keys_per_call == 0 ? kDefaultMaxKeysPerCall : p.max_keys_per_call;
    options.max_queued_events = c->max_queued_events;
    options.pool_events = p.pool_events != 0;
    options.pool.open.init_timeout = std::chrono::milliseconds(
        p.open_timeout_ms == 0 ? kDefaultOpenTimeoutMs : p.open_timeout_ms);
    StatusOr<std::unique_ptr<kvtier::KvTierClient>> client =
        kvtier::KvTierClient::Open(pool_name, std::move(layout), engine.get(), options);
    if (!client.ok()) {
      Status s = client.status();
      if (s.code() == StatusCode::kNotFound) {
        s = s.WithPrefix("pool '" + pool_name +
                         "' (is the sidecar running with --kv-block-bytes, and is the name "
                         "'<shm-name>.kv'?)");
      }
      return s;
    }
    std::call_once(g_atfork_once, [] { pthread_atfork(nullptr, nullptr, &OnForkChild); });
    c->fork_epoch = g_fork_epoch.load(std::memory_order_relaxed);
    c->pid = getpid();
    c->engine = std::move(engine);
    c->client = std::move(client).value();
    *out = c.release();
    return Status::Ok();
  });
}

deltakv_status deltakv_kv_client_close(deltakv_kv_client* c) {
  return Run(__func__, [&]() -> Status {
    if (c == nullptr) return Status::Ok();
    if (c->magic != kClientMagic) return InvalidArgument("not a deltakv_kv_client (closed twice?)");
    if (ForkedSince(c->fork_epoch)) {
      // The parent's client: release only the wrapper (see the file comment). Its mutexes may
      // have been held by a thread of the parent at the fork; they are not taken here.
      for (deltakv_kv_load_handle* h : c->loads) h->owner = nullptr;
      for (deltakv_kv_store_handle* h : c->stores) h->owner = nullptr;
      (void)c->client.release();
      (void)c->engine.release();
    } else {
      std::unordered_set<deltakv_kv_load_handle*> loads;
      std::unordered_set<deltakv_kv_store_handle*> stores;
      {
        std::lock_guard<std::mutex> lock(c->handles_mu);
        loads.swap(c->loads);
        stores.swap(c->stores);
      }
      // Finish the live handles (waiting for their copies) before the client goes; they stay
      // allocated, detached, until the caller frees them.
      // (Assigning an empty handle finishes the old one and cannot fail.)
      for (deltakv_kv_load_handle* h : loads) {
        *h->handle = kvtier::LoadHandle();
        h->owner = nullptr;
      }
      for (deltakv_kv_store_handle* h : stores) {
        *h->handle = kvtier::StoreHandle();
        h->owner = nullptr;
      }
      c->client.reset();
      c->engine.reset();
    }
    c->magic = 0;
    delete c;
    return Status::Ok();
  });
}

deltakv_status deltakv_kv_client_info(const deltakv_kv_client* c, uint64_t* block_bytes,
                                      uint64_t* capacity_slots) {
  return Run(__func__, [&]() -> Status {
    RETURN_IF_ERROR(CheckClient(c));
    if (block_bytes != nullptr) *block_bytes = c->client->layout().block_bytes();
    if (capacity_slots != nullptr) *capacity_slots = c->client->pool().capacity();
    return Status::Ok();
  });
}

deltakv_status deltakv_kv_lookup(deltakv_kv_client* c, const deltakv_kv_key* keys, size_t num_keys,
                                 size_t* hits) {
  return Run(__func__, [&]() -> Status {
    RETURN_IF_ERROR(CheckClient(c));
    RETURN_IF_ERROR(CheckArray(keys, num_keys, "keys"));
    RETURN_IF_ERROR(CheckOut(hits, "hits"));
    RETURN_IF_ERROR(c->client->CheckPool());
    *hits = c->client->Lookup(ToKeys(keys, num_keys));
    return Status::Ok();
  });
}

deltakv_status deltakv_kv_touch(deltakv_kv_client* c, const deltakv_kv_key* keys, size_t num_keys,
                                size_t* found) {
  return Run(__func__, [&]() -> Status {
    RETURN_IF_ERROR(CheckClient(c));
    RETURN_IF_ERROR(CheckArray(keys, num_keys, "keys"));
    RETURN_IF_ERROR(c->client->CheckPool());
    const size_t n = c->client->Touch(ToKeys(keys, num_keys));
    if (found != nullptr) *found = n;
    return Status::Ok();
  });
}

deltakv_status deltakv_kv_remove(deltakv_kv_client* c, deltakv_kv_key key) {
  return Run(__func__, [&]() -> Status {
    RETURN_IF_ERROR(CheckClient(c));
    return c->client->Remove(kvtier::PoolKey{key.lo, key.hi});
  });
}

// ---- Load -------------------------------------------------------------------------------------

deltakv_status deltakv_kv_prepare_load(deltakv_kv_client* c, const deltakv_kv_key* keys,
                                       size_t num_keys, deltakv_kv_load_handle** out) {
  return Run(__func__, [&]() -> Status {
    RETURN_IF_ERROR(CheckClient(c));
    RETURN_IF_ERROR(CheckArray(keys, num_keys, "keys"));
    RETURN_IF_ERROR(CheckOut(out, "out"));
    const std::vector<kvtier::PoolKey> k = ToKeys(keys, num_keys);
    auto h = std::make_unique<deltakv_kv_load_handle>();
    h->owner = c;
    h->fork_epoch = c->fork_epoch;
    h->handle = std::make_unique<kvtier::LoadHandle>();
    ASSIGN_OR_RETURN(*h->handle, c->client->PrepareLoad(k, k.size()));
    {
      std::lock_guard<std::mutex> lock(c->handles_mu);
      c->loads.insert(h.get());
    }
    *out = h.release();
    return Status::Ok();
  });
}

deltakv_status deltakv_kv_load(deltakv_kv_client* c, deltakv_kv_load_handle* h,
                               const uint64_t* engine_blocks, size_t num_blocks) {
  return Run(__func__, [&]() -> Status {
    RETURN_IF_ERROR(CheckClient(c));
    RETURN_IF_ERROR(CheckHandle(h, kLoadMagic, "load", c, /*must_be_live=*/true));
    RETURN_IF_ERROR(CheckArray(engine_blocks, num_blocks, "engine_blocks"));
    StatusOr<kvtier::CopyCompletion> started =
        c->client->Load(*h->handle, std::span<const uint64_t>(engine_blocks, num_blocks));
    return started.status();
  });
}

deltakv_status deltakv_kv_load_query(const deltakv_kv_load_handle* h, int* done) {
  return Run(__func__, [&] { return CopyDone(h, kLoadMagic, "load", std::nullopt, done); });
}

deltakv_status deltakv_kv_load_wait(deltakv_kv_load_handle* h, int64_t timeout_ms, int* done) {
  return Run(__func__, [&] { return CopyDone(h, kLoadMagic, "load", timeout_ms, done); });
}

deltakv_status deltakv_kv_complete_load(deltakv_kv_client* c, deltakv_kv_load_handle* h) {
  return Run(__func__, [&]() -> Status {
    RETURN_IF_ERROR(CheckClient(c));
    RETURN_IF_ERROR(CheckHandle(h, kLoadMagic, "load", c, /*must_be_live=*/true));
    return c->client->CompleteLoad(*h->handle);
  });
}

deltakv_status deltakv_kv_load_size(const deltakv_kv_load_handle* h, size_t* num_blocks) {
  return Run(__func__, [&]() -> Status {
    if (h == nullptr) return InvalidArgument("load handle is NULL");
    if (h->magic != kLoadMagic)
      return InvalidArgument("not a deltakv_kv_load_handle handle (freed?)");
    RETURN_IF_ERROR(CheckOut(num_blocks, "num_blocks"));
    const bool usable = h->owner != nullptr && !ForkedSince(h->fork_epoch) && h->handle->valid();
    *num_blocks = usable ? h->handle->size() : 0;
    return Status::Ok();
  });
}

deltakv_status deltakv_kv_load_free(deltakv_kv_load_handle* h) {
  return Run(__func__, [&] { return FreeHandle(h, kLoadMagic, "load"); });
}

// ---- Store ------------------------------------------------------------------------------------

deltakv_status deltakv_kv_prepare_store(deltakv_kv_client* c, const deltakv_kv_key* keys,
                                        const uint64_t* fingerprints, size_t num_keys,
                                        uint8_t* outcomes, deltakv_kv_store_handle** out) {
  return Run(__func__, [&]() -> Status {
    RETURN_IF_ERROR(CheckClient(c));
    RETURN_IF_ERROR(CheckArray(keys, num_keys, "keys"));
    RETURN_IF_ERROR(CheckOut(out, "out"));
    const std::vector<kvtier::PoolKey> k = ToKeys(keys, num_keys);
    std::span<const uint64_t> fps;
    if (fingerprints != nullptr) fps = std::span<const uint64_t>(fingerprints, num_keys);
    auto h = std::make_unique<deltakv_kv_store_handle>();
    h->owner = c;
    h->fork_epoch = c->fork_epoch;
    h->handle = std::make_unique<kvtier::StoreHandle>();
    h->outcomes.reserve(num_keys);
    ASSIGN_OR_RETURN(*h->handle, c->client->PrepareStore(k, fps));
    const kvtier::StoreHandle& s = *h->handle;
    for (size_t i = 0; i < s.size(); ++i) h->outcomes.push_back(static_cast<uint8_t>(s.outcome(i)));
    h->allocated = s.allocated();
    h->already = s.already_stored();
    h->in_flight = s.in_flight();
    h->refused = s.refused();
    {
      std::lock_guard<std::mutex> lock(c->handles_mu);
      c->stores.insert(h.get());
    }
    if (outcomes != nullptr) std::copy(h->outcomes.begin(), h->outcomes.end(), outcomes);
    *out = h.release();
    return Status::Ok();
  });
}

deltakv_status deltakv_kv_store_info(const deltakv_kv_store_handle* h, size_t* num_keys,
                                     size_t* allocated, size_t* already_stored, size_t* in_flight,
                                     size_t* refused) {
  return Run(__func__, [&]() -> Status {
    if (h == nullptr) return InvalidArgument("store handle is NULL");
    if (h->magic != kStoreMagic)
      return InvalidArgument("not a deltakv_kv_store_handle handle (freed?)");
    if (num_keys != nullptr) *num_keys = h->outcomes.size();
    if (allocated != nullptr) *allocated = h->allocated;
    if (already_stored != nullptr) *already_stored = h->already;
    if (in_flight != nullptr) *in_flight = h->in_flight;
    if (refused != nullptr) *refused = h->refused;
    return Status::Ok();
  });
}

deltakv_status deltakv_kv_store_outcome_at(const deltakv_kv_store_handle* h, size_t i,
                                           int* outcome) {
  return Run(__func__, [&]() -> Status {
    if (h == nullptr) return InvalidArgument("store handle is NULL");
    if (h->magic != kStoreMagic)
      return InvalidArgument("not a deltakv_kv_store_handle handle (freed?)");
    RETURN_IF_ERROR(CheckOut(outcome, "outcome"));
    if (i >= h->outcomes.size()) {
      return InvalidArgument("key " + std::to_string(i) + " of a handle of " +
                             Count(h->outcomes.size(), "keys"));
    }
    *outcome = h->outcomes[i];
    return Status::Ok();
  });
}

deltakv_status deltakv_kv_store(deltakv_kv_client* c, deltakv_kv_store_handle* h,
                                const uint64_t* engine_blocks, size_t num_blocks) {
  return Run(__func__, [&]() -> Status {
    RETURN_IF_ERROR(CheckClient(c));
    RETURN_IF_ERROR(CheckHandle(h, kStoreMagic, "store", c, /*must_be_live=*/true));
    RETURN_IF_ERROR(CheckArray(engine_blocks, num_blocks, "engine_blocks"));
    StatusOr<kvtier::CopyCompletion> started =
        c->client->Store(*h->handle, std::span<const uint64_t>(engine_blocks, num_blocks));
    return started.status();
  });
}

deltakv_status deltakv_kv_store_query(const deltakv_kv_store_handle* h, int* done) {
  return Run(__func__, [&] { return CopyDone(h, kStoreMagic, "store", std::nullopt, done); });
}

deltakv_status deltakv_kv_store_wait(deltakv_kv_store_handle* h, int64_t timeout_ms, int* done) {
  return Run(__func__, [&] { return CopyDone(h, kStoreMagic, "store", timeout_ms, done); });
}

deltakv_status deltakv_kv_complete_store(deltakv_kv_client* c, deltakv_kv_store_handle* h) {
  return Run(__func__, [&]() -> Status {
    RETURN_IF_ERROR(CheckClient(c));
    RETURN_IF_ERROR(CheckHandle(h, kStoreMagic, "store", c, /*must_be_live=*/true));
    return c->client->CompleteStore(*h->handle);
  });
}

deltakv_status deltakv_kv_store_free(deltakv_kv_store_handle* h) {
  return Run(__func__, [&] { return FreeHandle(h, kStoreMagic, "store"); });
}

// ---- Events and stats -------------------------------------------------------------------------

deltakv_status deltakv_kv_drain_events(deltakv_kv_client* c, deltakv_kv_event* out, size_t capacity,
                                       size_t* count) {
  return Run(__func__, [&]() -> Status {
    RETURN_IF_ERROR(CheckClient(c));
    RETURN_IF_ERROR(CheckOut(out, "out"));
    RETURN_IF_ERROR(CheckOut(count, "count"));
    if (capacity == 0) return InvalidArgument("capacity is 0");
    std::vector<kvtier::TierEvent> fresh;
    c->client->DrainEvents(&fresh);
    std::lock_guard<std::mutex> lock(c->events_mu);
    for (const kvtier::TierEvent& e : fresh) {
      deltakv_kv_event ce;
      ce.kind = EventKind(e.kind);
      ce.raw_kind = static_cast<uint32_t>(e.kind);
      ce.key = ToC(e.key);
      ce.origin_pid = e.origin_pid != 0 ? e.origin_pid : static_cast<uint32_t>(c->pid);
      ce.reserved = 0;
      c->events.push_back(ce);
    }
    // Bounded like the client's own queue: past the cap the oldest go.
    while (c->events.size() > c->max_queued_events) {
      c->events.pop_front();
      ++c->events_dropped;
    }
    const size_t n = std::min(capacity, c->events.size());
    std::copy_n(c->events.begin(), n, out);
    c->events.erase(c->events.begin(), c->events.begin() + static_cast<ptrdiff_t>(n));
    *count = n;
    return Status::Ok();
  });
}

deltakv_status deltakv_kv_get_stats(const deltakv_kv_client* c, deltakv_kv_stats* stats) {
  return Run(__func__, [&]() -> Status {
    RETURN_IF_ERROR(CheckClient(c));
    RETURN_IF_ERROR(CheckOut(stats, "stats"));
    const size_t caller_size = stats->struct_size;
    if (caller_size < kStatsHeaderSize) {
      return InvalidArgument("stats->struct_size is " + std::to_string(caller_size) +
                             ", set it to sizeof(deltakv_kv_stats)");
    }
    uint64_t extra_dropped = 0;
    {
      std::lock_guard<std::mutex> lock(c->events_mu);
      extra_dropped = c->events_dropped;
    }
    deltakv_kv_stats full{};
    FillStats(c->client->Stats(), extra_dropped, &full);
    const size_t n = std::min(caller_size, sizeof(full));
    full.struct_size = static_cast<uint32_t>(n);
    full.version = DELTAKV_KV_STATS_VERSION;
    std::memcpy(stats, &full, n);
    if (caller_size > n) std::memset(reinterpret_cast<char*>(stats) + n, 0, caller_size - n);
    return Status::Ok();
  });
}

}  // extern "C"
