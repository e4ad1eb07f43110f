/* deltakv_kv.h: the host KV tier part of the C ABI of libdeltakv.
 *
 * The sidecar keeps a pool of fixed-size KV block slots in host shared memory, named
 * "<shm-name>.kv" (`deltakv sidecar --kv-block-bytes N`; "deltakv.kv" with the default
 * --shm-name). An engine process opens a client on that pool with the layout of its own KV
 * memory and a copy backend, then:
 *
 *   deltakv_kv_chain_keys / deltakv_kv_engine_hash_keys   -> the 128-bit keys of its blocks
 *   deltakv_kv_lookup(keys)             -> how many leading keys are stored (advisory)
 *   deltakv_kv_prepare_load(keys, n)    -> a load handle: the first n blocks pinned
 *   deltakv_kv_load(handle, blocks)     -> starts the async copy pool -> engine blocks
 *   deltakv_kv_load_query / _wait       -> has the copy finished?
 *   deltakv_kv_complete_load(handle)    -> waits for the copy, unpins; the copy's status
 *   deltakv_kv_prepare_store(keys)      -> a store handle; per key: slot / already stored /
 *                                          in flight / refused
 *   deltakv_kv_store(handle, blocks)    -> starts the async copy engine blocks -> slots
 *   deltakv_kv_complete_store(handle)   -> waits for the copy, then publishes the blocks
 *   deltakv_kv_touch, deltakv_kv_remove, deltakv_kv_get_stats, deltakv_kv_drain_events
 *
 * This is the C form of kvtier::KvTierClient (kvtier/tier_client.h); the ordering rules of
 * kvtier/ORDERING.md hold on every path: a stored block becomes visible to any process only
 * after its copy completed, and a loaded block's pins are dropped only after the copy out of it
 * completed. A process killed mid-store leaves its slots unreadable (the sidecar reclaims them).
 *
 * Keys (docs/KEYS.md): a block's key covers the block's tokens, every token before it and the
 * key context (model, KV dtype and layout, tensor-parallel rank, and the "extra keys" that
 * change a block's KV: the LoRA adapter and the cache salt / tenant). Engines that already
 * chain-hash their blocks (vLLM, SGLang) pass those hashes instead of tokens.
 *
 * Errors follow deltakv_base.h: every function that can fail returns a deltakv_status, and
 * deltakv_last_error() gives the calling thread's message of its last call. Out-parameters are
 * written only on success, unless said otherwise. NULL handles and NULL arrays with a nonzero
 * count are rejected with DELTAKV_ERR_INVALID_ARGUMENT; a NULL array with a count of 0 is an
 * empty array.
 *
 * Ownership:
 *   - the caller owns every handle it receives: close a client with deltakv_kv_client_close,
 *     free load and store handles with deltakv_kv_load_free / deltakv_kv_store_free (all three
 *     accept NULL);
 *   - the client borrows the engine KV memory its layout names: it must stay valid (and must not
 *     be freed or reused for other purposes while a copy into or out of it runs) until the
 *     client is closed; arrays passed to any call (the layout's layers and pieces included) are
 *     read during that call only;
 *   - handles and the client may be released in any order. Freeing a handle that was not
 *     completed waits for its copy (if one was started), then gives its slots back (a store:
 *     nothing is published) or unpins (a load). Closing a client finishes its live handles the
 *     same way; they stay allocated and must still be freed: until then deltakv_kv_load_size
 *     says 0, deltakv_kv_store_info / _outcome_at still answer, and every other call on them
 *     fails with DELTAKV_ERR_FAILED_PRECONDITION. Both may block while a copy runs. A closed
 *     client (or a freed handle) must not be passed to any call again; such stale pointers are
 *     usually, not always, caught and rejected.
 *
 * Thread-safety: every function taking a client may be called concurrently from any threads,
 * except deltakv_kv_client_close, which must not run concurrently with any other call on that
 * client or its handles. A load or store handle is used by one thread at a time (query and
 * wait included). The key functions are pure and thread-safe.
 *
 * The pool's lifetime: the pool lives as long as its sidecar. When the sidecar stops (its pool
 * is removed) or a new sidecar replaces it (a restart creates a new, empty pool under the same
 * name), a client opened on the old pool keeps it mapped but is told: deltakv_kv_lookup,
 * deltakv_kv_touch, deltakv_kv_remove, deltakv_kv_prepare_load and deltakv_kv_prepare_store fail
 * with DELTAKV_ERR_FAILED_PRECONDITION ("... was removed or replaced ..."), so nothing is stored
 * where no other process will find it. Handles prepared before finish as usual. Close the
 * client and open a new one once the sidecar is back.
 *
 * fork(): a client belongs to the process that opened it. In a child forked after it was
 * opened, every call on it and its handles fails with DELTAKV_ERR_FAILED_PRECONDITION, and
 * closing or freeing them there releases only the child's copy of the wrappers (the parent's
 * pins and slots are untouched); the child opens a client of its own.
 */
#ifndef DELTAKV_DELTAKV_KV_H_
#define DELTAKV_DELTAKV_KV_H_

#include <stddef.h>
#include <stdint.h>

#include "deltakv/deltakv_base.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Keys ------------------------------------------------------------------------------- */

/* A 128-bit block key. Its canonical 16 bytes (docs/KEYS.md §2) are `hi` big-endian, then `lo`
 * big-endian. Any value is a valid key for the pool; engines use the functions below. */
typedef struct deltakv_kv_key {
  uint64_t lo;
  uint64_t hi;
} deltakv_kv_key;

typedef enum deltakv_kv_hash_kind {
  DELTAKV_KV_HASH_XXH3 = 0,  /* XXH3-128 (default) */
  DELTAKV_KV_HASH_SHA256 = 1 /* truncated SHA-256, for tiers shared by untrusting tenants */
} deltakv_kv_hash_kind;

/* What, besides the tokens, a block's KV depends on (docs/KEYS.md §3). String fields: NULL is
 * absent, "" is present and empty (different keys); NUL-terminated, hashed as raw bytes, at most
 * 4096 bytes. tp_size > 0: tp_rank and tp_size are present, 0 <= tp_rank < tp_size; tp_size <= 0:
 * both are absent (tp_rank must then be 0 or -1). adapter_id and salt are the "extra keys" of
 * an engine's block hash: the LoRA adapter and the cache salt or tenant id. Start from
 * deltakv_kv_default_key_context(): every field absent, XXH3 keys, struct_size set. */
typedef struct deltakv_kv_key_context {
  uint32_t struct_size;          /* sizeof(deltakv_kv_key_context) (deltakv_base.h) */
  const char* model_fingerprint; /* weights identity, e.g. "org/model@revision" */
  const char* kv_dtype;          /* e.g. "bfloat16", "fp8_e4m3" */
  const char* kv_layout;         /* e.g. "NHD", or an engine layout id */
  int32_t tp_rank;               /* the KV shard's tensor-parallel rank */
  int32_t tp_size;               /* tensor-parallel world size; <= 0 = absent */
  const char* adapter_id;        /* LoRA / adapter identity */
  const char* salt;              /* cache salt or tenant id (isolation) */
  int32_t hash_kind;             /* deltakv_kv_hash_kind */
  uint32_t reserved0;            /* ignored: the padding up to sizeof, named so that a later
                                    field is appended after it (deltakv_base.h) */
} deltakv_kv_key_context;

/* Every field absent, XXH3. (Inline: the struct is the caller's.) */
static inline deltakv_kv_key_context deltakv_kv_default_key_context(void) {
  deltakv_kv_key_context c;
  c.struct_size = (uint32_t)sizeof(deltakv_kv_key_context);
  c.model_fingerprint = NULL;
  c.kv_dtype = NULL;
  c.kv_layout = NULL;
  c.tp_rank = -1;
  c.tp_size = -1;
  c.adapter_id = NULL;
  c.salt = NULL;
  c.hash_kind = DELTAKV_KV_HASH_XXH3;
  c.reserved0 = 0;
  return c;
}

/* Keys of the full blocks of `tokens`: num_tokens / block_tokens keys, key i covering tokens
 * [i * block_tokens, (i + 1) * block_tokens); a trailing partial block has none. `parent`
 * (NULL = the root) continues a chain whose earlier blocks were keyed before: pass the last key
 * of those. *num_keys receives the number of keys (also on INVALID_ARGUMENT for an `out` of
 * fewer than that many entries, so the caller can size it). INVALID_ARGUMENT for block_tokens 0
 * or above 65536, an invalid context, or a too small `out`. */
deltakv_status deltakv_kv_chain_keys(const deltakv_kv_key_context* ctx, const uint32_t* tokens,
                                     size_t num_tokens, uint32_t block_tokens,
                                     const deltakv_kv_key* parent, deltakv_kv_key* out,
                                     size_t out_capacity, size_t* num_keys);

/* Keys of `count` engine-provided block hashes (docs/KEYS.md §5), each `hash_bytes` long,
 * concatenated in `hashes` (vLLM's 32-byte block hashes as is; integer hashes as 8 bytes
 * little-endian). Each engine hash must already cover its block's prefix and tokens. `out` has
 * `count` entries. INVALID_ARGUMENT for hash_bytes 0 or above 256 or an invalid context. */
deltakv_status deltakv_kv_engine_hash_keys(const deltakv_kv_key_context* ctx, const void* hashes,
                                           size_t hash_bytes, size_t count, deltakv_kv_key* out);

/* The 64-bit token fingerprint of one block's tokens (docs/KEYS.md §6), for prepare_store. */
deltakv_status deltakv_kv_token_fingerprint(const uint32_t* tokens, size_t num_tokens,
                                            uint64_t* out);

/* Writes the key's 32 lowercase hex digits and a NUL into `out` (33 bytes). */
deltakv_status deltakv_kv_key_to_hex(deltakv_kv_key key, char* out, size_t out_size);

/* ---- Engine KV layout ---------------------------------------------------------------------
 * Where the engine keeps the bytes of one KV block (kvtier/kv_layout.h). A pool slot holds one
 * block as the concatenation of its runs in piece order; engines that share a pool must use
 * layouts with the same run sizes in the same order (the key context's kv_layout says so).
 * Addresses are host pointers for the cpu copy backend. */

typedef enum deltakv_kv_layout_kind {
  /* One tensor per layer ([num_blocks, bytes_per_tensor] rows at a stride), or separate K and V
   * tensors per layer; runs in order layer 0 K, layer 0 V, layer 1 K, ... */
  DELTAKV_KV_LAYOUT_PER_LAYER = 1,
  /* One region per block holding every layer: block b at base + b * block_stride. */
  DELTAKV_KV_LAYOUT_CROSS_LAYER = 2,
  /* The general form: any set of pieces (base, stride, bytes per block). */
  DELTAKV_KV_LAYOUT_PIECES = 3
} deltakv_kv_layout_kind;

typedef struct deltakv_kv_layer {
  void* k;         /* the layer's K tensor (or its only tensor) */
  void* v;         /* the layer's V tensor; NULL when K and V share one tensor (or MLA) */
  uint64_t stride; /* bytes between the rows of blocks b and b+1; 0 = bytes_per_tensor */
} deltakv_kv_layer;

typedef struct deltakv_kv_piece {
  void* base;      /* the run of block 0 */
  uint64_t stride; /* bytes between the runs of blocks b and b+1; 0 = bytes */
  uint64_t bytes;  /* bytes of one block's run */
} deltakv_kv_piece;

typedef struct deltakv_kv_layout {
  int32_t kind;        /* deltakv_kv_layout_kind */
  uint64_t num_blocks; /* engine blocks; block ids passed to load/store are < num_blocks */
  /* PER_LAYER */
  const deltakv_kv_layer* layers;
  size_t num_layers;
  uint64_t bytes_per_tensor; /* bytes of one block in one tensor */
  /* CROSS_LAYER */
  void* base;
  uint64_t block_bytes;
  uint64_t block_stride; /* 0 = block_bytes */
  /* PIECES */
  const deltakv_kv_piece* pieces;
  size_t num_pieces;
} deltakv_kv_layout;

/* ---- Client ----------------------------------------------------------------------------- */

typedef struct deltakv_kv_client deltakv_kv_client; /* opaque */
/* opaque: the pins of a prepared load */
typedef struct deltakv_kv_load_handle deltakv_kv_load_handle;
/* opaque: the slots of a prepared store */
typedef struct deltakv_kv_store_handle deltakv_kv_store_handle;

typedef struct deltakv_kv_client_params {
  /* sizeof(deltakv_kv_client_params) as the caller compiled it (deltakv_base.h). */
  uint32_t struct_size;
  /* The pool segment: "<shm-name>.kv" of the sidecar; NULL = "deltakv.kv". */
  const char* pool_name;
  /* The engine's KV memory. Its block bytes must equal the pool's slot size. */
  deltakv_kv_layout layout;
  /* Copy backend: "cpu" (NULL = "cpu"); "cuda" is not in this build. */
  const char* copy_backend;
  /* cpu: copy worker threads (0 = copy synchronously inside deltakv_kv_load/_store). */
  uint32_t copy_threads;
  /* Cap on keys per prepare_load / prepare_store call; 0 = 65536. */
  uint64_t max_keys_per_call;
  /* Cap on queued events (the oldest are dropped past it, counted in events_dropped);
   * 0 = 65536. */
  uint64_t max_queued_events;
  /* How long opening waits for a pool segment that exists but is not yet initialized;
   * 0 = 1000 ms. A pool that does not exist at all fails at once with NOT_FOUND. */
  uint32_t open_timeout_ms;
  /* Ignored. Version 1 of this struct ended at open_timeout_ms with 4 bytes of padding
   * (sizeof 136 on 64-bit targets); this word keeps those bytes, which a version-1 caller
   * may leave uninitialized, apart from the fields added later. */
  uint32_t reserved0;
  /* Added in version 2 of this struct (read only when struct_size covers it). Nonzero: also
   * report what every other client of the pool did (stored, evicted, removed; from the
   * pool's event feed: other processes' clients and this process's other clients), with their
   * origin_pid; events the feed overwrote before this client read them are counted in
   * deltakv_kv_stats.events_lost. 0 = this client's own actions. */
  uint32_t pool_events;
  uint32_t reserved1; /* ignored: the padding up to sizeof (deltakv_base.h) */
} deltakv_kv_client_params;

/* Defaults: struct_size set, pool "deltakv.kv", backend "cpu" with 2 threads, no layout.
 * (Inline: the struct is the caller's.) */
static inline deltakv_kv_client_params deltakv_kv_client_default_params(void) {
  deltakv_kv_client_params p;
  p.struct_size = (uint32_t)sizeof(deltakv_kv_client_params);
  p.pool_name = "deltakv.kv";
  p.layout.kind = 0;
  p.layout.num_blocks = 0;
  p.layout.layers = NULL;
  p.layout.num_layers = 0;
  p.layout.bytes_per_tensor = 0;
  p.layout.base = NULL;
  p.layout.block_bytes = 0;
  p.layout.block_stride = 0;
  p.layout.pieces = NULL;
  p.layout.num_pieces = 0;
  p.copy_backend = "cpu";
  p.copy_threads = 2;
  p.max_keys_per_call = 0;
  p.max_queued_events = 0;
  p.open_timeout_ms = 0;
  p.reserved0 = 0;
  p.pool_events = 0;
  p.reserved1 = 0;
  return p;
}

/* Opens a client on the pool; *out is NULL on failure. NOT_FOUND if the pool does not exist
 * (is the sidecar running with --kv-block-bytes?); INVALID_ARGUMENT for a bad layout or a
 * layout whose block size differs from the pool's slot size (the message names both), a
 * struct_size smaller than version 1's (the struct up to and including open_timeout_ms; a
 * version-1 struct is accepted, and the fields it lacks keep their defaults), a struct_size
 * larger than this version's with a nonzero byte past this version's fields, an empty pool
 * name; UNIMPLEMENTED / INVALID_ARGUMENT for a copy backend that is not built / unknown; errors
 * of the pool segment otherwise. */
deltakv_status deltakv_kv_client_open(const deltakv_kv_client_params* params,
                                      deltakv_kv_client** out);

/* Finishes the client's live handles (see Ownership above), then closes it. NULL is a no-op.
 * REQUIRES: no other call on this client or its handles runs concurrently. */
deltakv_status deltakv_kv_client_close(deltakv_kv_client* client);

/* The pool's slot size (= the layout's block bytes) and number of slots. Either may be NULL. */
deltakv_status deltakv_kv_client_info(const deltakv_kv_client* client, uint64_t* block_bytes,
                                      uint64_t* capacity_slots);

/* The number of leading keys stored now. Advisory: a block may be evicted before
 * deltakv_kv_prepare_load pins it. */
deltakv_status deltakv_kv_lookup(deltakv_kv_client* client, const deltakv_kv_key* keys,
                                 size_t num_keys, size_t* hits);

/* Stamps the stored keys among `keys` recently used; *found (may be NULL) counts them. */
deltakv_status deltakv_kv_touch(deltakv_kv_client* client, const deltakv_kv_key* keys,
                                size_t num_keys, size_t* found);

/* Removes a stored block. NOT_FOUND if absent; FAILED_PRECONDITION if pinned or being written. */
deltakv_status deltakv_kv_remove(deltakv_kv_client* client, deltakv_kv_key key);

/* ---- Load: pool -> engine ---------------------------------------------------------------- */

/* Pins the blocks of keys[0, num_keys) (usually num_keys = the hits of a lookup). NOT_FOUND
 * (nothing pinned, *out untouched) if any of them is no longer stored; INVALID_ARGUMENT past
 * max_keys_per_call. num_keys 0 gives an empty handle. */
deltakv_status deltakv_kv_prepare_load(deltakv_kv_client* client, const deltakv_kv_key* keys,
                                       size_t num_keys, deltakv_kv_load_handle** out);

/* Starts copying the pinned blocks into engine blocks `engine_blocks` (one per pinned block, in
 * order, distinct, < layout.num_blocks). Returns at once with the copy running (or done, with
 * copy_threads 0). INVALID_ARGUMENT for a count mismatch, a block out of range or repeated, or
 * a handle of another client; FAILED_PRECONDITION if a load was already started on the handle
 * or it was completed. On error nothing was started. */
deltakv_status deltakv_kv_load(deltakv_kv_client* client, deltakv_kv_load_handle* load,
                               const uint64_t* engine_blocks, size_t num_blocks);

/* *done = 1 once the started copy finished (successfully or not), else 0. Never blocks.
 * FAILED_PRECONDITION if no load was started on the handle or it was completed. */
deltakv_status deltakv_kv_load_query(const deltakv_kv_load_handle* load, int* done);

/* Waits at most timeout_ms (< 0: without limit) for the started copy; *done as query. */
deltakv_status deltakv_kv_load_wait(deltakv_kv_load_handle* load, int64_t timeout_ms, int* done);

/* Waits for the copy (if one was started), unpins, and spends the handle (free it after).
 * Returns the copy's status (OK when no load was started); on error the engine blocks hold
 * undefined bytes. INVALID_ARGUMENT for a handle of another client; FAILED_PRECONDITION if it
 * was completed before. */
deltakv_status deltakv_kv_complete_load(deltakv_kv_client* client, deltakv_kv_load_handle* load);

/* Blocks pinned by the handle (0 once completed). */
deltakv_status deltakv_kv_load_size(const deltakv_kv_load_handle* load, size_t* num_blocks);

/* Frees the handle; an uncompleted one is completed first (waits for its copy, unpins). */
deltakv_status deltakv_kv_load_free(deltakv_kv_load_handle* load);

/* ---- Store: engine -> pool --------------------------------------------------------------- */

typedef enum deltakv_kv_store_outcome {
  DELTAKV_KV_STORE_ALLOCATED = 0,      /* a slot was claimed: deltakv_kv_store copies this one */
  DELTAKV_KV_STORE_ALREADY_STORED = 1, /* the key is stored: nothing to do */
  DELTAKV_KV_STORE_IN_FLIGHT = 2,      /* another store of the key is running: nothing to do */
  DELTAKV_KV_STORE_REFUSED = 3         /* no slot without evicting pinned or in-flight blocks */
} deltakv_kv_store_outcome;

/* Claims slots for the keys that are not stored yet (evicting unpinned blocks as needed, never
 * pinned or in-flight ones). `fingerprints` is NULL or one token fingerprint per key (kept with
 * the block). `outcomes` (may be NULL) receives one deltakv_kv_store_outcome per key. A call
 * where every key was refused still gives a handle. INVALID_ARGUMENT for a repeated key or
 * past max_keys_per_call. */
deltakv_status deltakv_kv_prepare_store(deltakv_kv_client* client, const deltakv_kv_key* keys,
                                        const uint64_t* fingerprints, size_t num_keys,
                                        uint8_t* outcomes, deltakv_kv_store_handle** out);

/* Per-outcome counts of the handle's keys; any pointer may be NULL. */
deltakv_status deltakv_kv_store_info(const deltakv_kv_store_handle* store, size_t* num_keys,
                                     size_t* allocated, size_t* already_stored, size_t* in_flight,
                                     size_t* refused);

/* The outcome of key i of the handle (a deltakv_kv_store_outcome). */
deltakv_status deltakv_kv_store_outcome_at(const deltakv_kv_store_handle* store, size_t i,
                                           int* outcome);

/* Starts copying engine blocks into the handle's claimed slots. `engine_blocks` has one entry
 * per key of the handle (the engine block holding that key's KV); only the entries of
 * ALLOCATED keys are read, and they must be distinct and < layout.num_blocks; the entries of
 * the other keys are ignored (any value will do). Errors as deltakv_kv_load: INVALID_ARGUMENT
 * for a count mismatch, an ALLOCATED key's block out of range or repeated, or a handle of
 * another client; FAILED_PRECONDITION if a store was already started on the handle or it was
 * completed. On error nothing was started. */
deltakv_status deltakv_kv_store(deltakv_kv_client* client, deltakv_kv_store_handle* store,
                                const uint64_t* engine_blocks, size_t num_blocks);

deltakv_status deltakv_kv_store_query(const deltakv_kv_store_handle* store, int* done);
deltakv_status deltakv_kv_store_wait(deltakv_kv_store_handle* store, int64_t timeout_ms, int* done);

/* Waits for the copy; if it succeeded publishes every claimed slot (stored events), otherwise
 * gives them back. Without a started store it gives them back (a cancel) and returns OK.
 * Returns the copy's error or the first publish error. Spends the handle (free it after).
 * Errors on the handle itself as deltakv_kv_complete_load. */
deltakv_status deltakv_kv_complete_store(deltakv_kv_client* client, deltakv_kv_store_handle* store);

/* Frees the handle; an uncompleted one is cancelled first (waits for its copy, gives the slots
 * back: nothing is published). */
deltakv_status deltakv_kv_store_free(deltakv_kv_store_handle* store);

/* ---- Events and stats -------------------------------------------------------------------- */

/* What happened to a block. A client reports its own actions, and with params.pool_events
 * those of every other client of the pool too; deltakv_kv_event.origin_pid says which process
 * caused it. */
typedef enum deltakv_kv_event_kind {
  DELTAKV_KV_EVENT_STORED = 0,  /* a store published the block */
  DELTAKV_KV_EVENT_EVICTED = 1, /* a prepare_store evicted it to make room (also reported for
                                 * an eviction a dead process left unfinished, possibly twice) */
  DELTAKV_KV_EVENT_REMOVED = 2, /* deltakv_kv_remove removed it */
  /* A kind this header does not name (from a newer library); see raw_kind. Treat as
   * informational: the key's block may or may not be stored now. */
  DELTAKV_KV_EVENT_OTHER = 255
} deltakv_kv_event_kind;

typedef struct deltakv_kv_event {
  int32_t kind;      /* deltakv_kv_event_kind */
  uint32_t raw_kind; /* the library's own code of the kind (equals `kind` for named kinds) */
  deltakv_kv_key key;
  uint32_t origin_pid; /* the process that caused it (this process's pid: the client's own
                          action, or with pool_events another client of this process) */
  uint32_t reserved;   /* 0 */
} deltakv_kv_event;

/* Moves up to `capacity` queued events (oldest first) into `out`; *count receives how many.
 * Events are kept until drained: call again while *count == capacity. This client's own
 * actions are reported, and with params.pool_events those of every other client of the pool
 * too (read from the pool's event feed when this is called). INVALID_ARGUMENT for a NULL
 * `out` or capacity 0. */
deltakv_status deltakv_kv_drain_events(deltakv_kv_client* client, deltakv_kv_event* out,
                                       size_t capacity, size_t* count);

#define DELTAKV_KV_STATS_VERSION 2

/* Counters of this client, its copies and the whole pool. Set struct_size to
 * sizeof(deltakv_kv_stats) before the call; the library fills that many bytes at most (fields it
 * does not know are zeroed) and returns the bytes it filled in struct_size and its
 * DELTAKV_KV_STATS_VERSION in version. Later versions only append fields. */
typedef struct deltakv_kv_stats {
  uint32_t struct_size;
  uint32_t version;
  /* This client's calls. */
  uint64_t lookups;     /* lookup calls */
  uint64_t hit_blocks;  /* keys lookup found */
  uint64_t miss_blocks; /* keys at and after lookup's first miss */
  uint64_t loads_prepared;
  uint64_t loads_refused;    /* prepare_load calls answered NOT_FOUND */
  uint64_t stores_allocated; /* keys prepare_store gave a slot */
  uint64_t stores_already;
  uint64_t stores_in_flight;
  uint64_t stores_refused;
  uint64_t stores_committed;
  uint64_t stores_aborted; /* slots given back (failed copy, cancel, handle freed) */
  uint64_t evictions;      /* blocks this client's stores evicted */
  uint64_t removals;
  uint64_t events_dropped;
  /* Copies engine -> pool (store) and pool -> engine (load). */
  uint64_t store_blocks;
  uint64_t store_bytes;
  uint64_t store_batches;
  uint64_t store_failed_batches;
  double store_busy_seconds; /* time at least one store copy was running */
  double store_gb_per_s;     /* store_bytes / store_busy_seconds / 1e9 */
  uint64_t load_blocks;
  uint64_t load_bytes;
  uint64_t load_batches;
  uint64_t load_failed_batches;
  double load_busy_seconds;
  double load_gb_per_s;
  /* The pool as a whole (every process): occupancy from a scan, counters since creation. */
  uint64_t pool_capacity_slots;
  uint64_t pool_block_bytes;
  uint64_t pool_untouched_slots;
  uint64_t pool_free_slots;
  uint64_t pool_writing_slots;
  uint64_t pool_ready_slots;
  uint64_t pool_evicting_slots;
  uint64_t pool_pinned_slots;
  uint64_t pool_ready_bytes;
  uint64_t pool_index_entries;
  uint64_t pool_lookups;
  uint64_t pool_hits;
  uint64_t pool_misses;
  uint64_t pool_stores_prepared;
  uint64_t pool_stores_committed;
  uint64_t pool_stores_aborted;
  uint64_t pool_stores_refused;
  uint64_t pool_evictions;
  uint64_t pool_removals;
  uint64_t pool_pins;
  uint64_t pool_reclaimed_writes;
  uint64_t pool_reclaimed_evictions;
  uint64_t pool_reclaimed_pins;
  uint64_t pool_chunks_touched;
  double occupancy; /* pool_ready_slots / pool_capacity_slots */
  /* Version 2. */
  uint64_t pool_events;          /* events of other clients reported (params.pool_events) */
  uint64_t events_lost;          /* pool events overwritten or never written before read */
  uint64_t pool_loads_completed; /* blocks loaded by every process */
  uint64_t pool_bytes_in;        /* engine -> host, every process */
  uint64_t pool_bytes_out;       /* host -> engine, every process */
  double pool_copy_in_gb_per_s;  /* pool_bytes_in / the time copies in were running */
  double pool_copy_out_gb_per_s; /* pool_bytes_out / the time copies out were running */
} deltakv_kv_stats;

deltakv_status deltakv_kv_get_stats(const deltakv_kv_client* client, deltakv_kv_stats* stats);

#ifdef __cplusplus
}
#endif

#endif /* DELTAKV_DELTAKV_KV_H_ */
