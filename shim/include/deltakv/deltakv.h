/* deltakv.h: the C ABI of libdeltakv, the library an inference engine links.
 *
 * One engine process per tensor-parallel rank creates one engine handle, registers its weight
 * tensors (name -> device pointer, dtype, shape, layout), then starts it. The handle attaches
 * to the sidecar's shared-memory control block, registers the rank, and serves sync plans on a
 * background thread: it gathers the old bytes at the changed positions, XORs, computes partial
 * Adler-32 sums over canonical positions, and stages the new bytes. Nothing the engine serves
 * changes until the sidecar has verified every rank and decided to commit; then the handle
 * pauses the engine, writes the staged bytes, refreshes derived weights, bumps the policy
 * version and resumes.
 *
 * Two ways to pause:
 *   - callbacks: set pause/resume (and optionally derived) with deltakv_engine_set_callbacks;
 *     the background thread calls them around the commit;
 *   - polling: set params.poll_mode = 1 and call deltakv_engine_poll() from the scheduler loop
 *     between steps; a pending commit is applied inside that call (the engine is, by
 *     construction, not running a step then).
 *
 * Ownership: the caller owns the handle (free with deltakv_engine_free, which accepts NULL) and
 * its device memory; registered pointers must stay valid until the handle is freed.
 * States (deltakv_engine_get_state): CREATED -> (start) ATTACHED; a sync moves it through
 * STAGING (plan parts arriving), STAGED (verified partial sums sent, waiting for the decision)
 * and COMMITTING (the decision is COMMIT; writing, or waiting for deltakv_engine_poll) back to
 * ATTACHED; an abort, a newer decision or a dead sidecar returns STAGING/STAGED to ATTACHED
 * with nothing written. VERIFYING: the live weights are being checksummed for the sidecar
 * (startup verify, scrub). DIVERGED: a commit failed after the COMMIT decision (the pause
 * callback failed: weights are the old version; writing failed: weights are partly new; the
 * derived-weights callback failed: weights and policy version are the new version, derived
 * weights may be stale); the sidecar then marks the sync `diverged` and refuses syncs until the
 * engine is verified again; the next sync's plan leaves DIVERGED. STOPPED: freed.
 * No wait is unbounded: a staged rank waits for the decision only while the sidecar is alive
 * (pid and heartbeat, about 1 s), and deltakv_engine_free ends every wait.
 *
 * Thread-safety: register_tensor/set_callbacks/start are called by one thread before serving;
 * poll from the engine's scheduler thread; get_state, policy_version, version_id and
 * sync_error from any thread, at any time while the handle exists.
 * Errors follow deltakv_base.h: every call that can fail returns a deltakv_status and
 * deltakv_last_error() gives the calling thread's message of its last call. A sync that fails
 * on this rank fails on the handle's own thread, outside any call: its message is kept in the
 * handle (deltakv_engine_sync_error).
 *
 * The host KV tier (store and reload KV blocks through the sidecar's pool) is declared in
 * deltakv/deltakv_kv.h, included below.
 */
#ifndef DELTAKV_DELTAKV_H_
#define DELTAKV_DELTAKV_H_

#include <stddef.h>
#include <stdint.h>

#include "deltakv/deltakv_base.h"
#include "deltakv/deltakv_kv.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct deltakv_engine deltakv_engine; /* opaque */

typedef enum deltakv_engine_state {
  DELTAKV_ENGINE_CREATED = 0,
  DELTAKV_ENGINE_ATTACHED = 1,
  DELTAKV_ENGINE_STAGING = 2,
  DELTAKV_ENGINE_STAGED = 3,
  DELTAKV_ENGINE_COMMITTING = 4,
  DELTAKV_ENGINE_VERIFYING = 5,
  DELTAKV_ENGINE_DIVERGED = 6,
  DELTAKV_ENGINE_STOPPED = 7,
} deltakv_engine_state;

typedef struct deltakv_engine_params {
  uint32_t struct_size;        /* sizeof(deltakv_engine_params) (deltakv_base.h) */
  const char* shm_name;        /* the sidecar's control segment name; default "deltakv" */
  int32_t rank;                /* this process's tensor-parallel rank, 0-based */
  int32_t world_size;          /* tensor-parallel degree */
  const char* backend;         /* device backend: "cpu" (default) or "cuda" */
  const char* initial_version; /* the policy version the engine loaded, e.g. "v1" */
  int32_t poll_mode;           /* 1: commits are applied in deltakv_engine_poll() */
  uint32_t attach_timeout_ms;  /* how long start() waits for the sidecar; 0 or default: 10000 */
  /* A node serving a slice of a larger tensor-parallel group (docs/MULTINODE.md): this process
   * is global rank first_global_rank + rank of global_world_size ranks, and layouts name global
   * ranks. global_world_size 0 (the default): the node serves the whole group. */
  int32_t first_global_rank;
  int32_t global_world_size;
  /* Device memory for staging that start() reserves up front (the cuda backend: in the device's
   * stream-ordered pool, which keeps what syncs free), so that syncs while the engine serves
   * take staging memory from the pool instead of the driver. A sync needs about the new bytes of
   * its parts plus 16 bytes per changed range of at most 64 bytes. 0 (the default): the pool
   * grows on the first syncs. The cpu backend reserves nothing up front; it keeps the host
   * buffers its staged parts used for later syncs' parts (a fresh buffer is page faults), at
   * most staging_reserve_bytes of them, and with 0 as many as one sync staged at once. */
  uint64_t staging_reserve_bytes;
} deltakv_engine_params;

/* A byte range of a registered tensor that a sync wrote, in rank-local bytes. The ranges cover
 * every changed byte and may include unchanged ones: changes at most 32 bytes apart are
 * written (and reported) as one range, a tensor below 4096 canonical bytes is written whole,
 * and adjacent ranges are merged. */
typedef struct deltakv_region {
  uint64_t offset;
  uint64_t length;
} deltakv_region;

typedef struct deltakv_callbacks {
  uint32_t struct_size; /* sizeof(deltakv_callbacks) (deltakv_base.h) */
  void* user;
  /* Stop admitting and finish (or hold) in-flight work. Return 0 on success. */
  int (*pause)(void* user);
  /* Reopen admission. Return 0 on success. */
  int (*resume)(void* user);
  /* Refresh weights derived from `tensor` over the touched regions (optional). Called after
   * the new bytes are written, inside the pause. A nonzero return leaves the new weights and
   * version in place, skips the remaining tensors' calls, and puts the handle in DIVERGED. */
  int (*derived)(void* user, const char* tensor, const deltakv_region* regions, size_t n);
} deltakv_callbacks;

/* Defaults: struct_size set, segment "deltakv", rank 0 of 1, backend "cpu", initial version "",
 * callbacks mode, 10 s attach timeout. (Inline: the struct is the caller's.) */
static inline deltakv_engine_params deltakv_engine_default_params(void) {
  deltakv_engine_params p;
  p.struct_size = (uint32_t)sizeof(deltakv_engine_params);
  p.shm_name = "deltakv";
  p.rank = 0;
  p.world_size = 1;
  p.backend = "cpu";
  p.initial_version = "";
  p.poll_mode = 0;
  p.attach_timeout_ms = 10000;
  p.first_global_rank = 0;
  p.global_world_size = 0;
  p.staging_reserve_bytes = 0;
  return p;
}

/* No callbacks, struct_size set. (Inline: the struct is the caller's.) */
static inline deltakv_callbacks deltakv_default_callbacks(void) {
  deltakv_callbacks c;
  c.struct_size = (uint32_t)sizeof(deltakv_callbacks);
  c.user = NULL;
  c.pause = NULL;
  c.resume = NULL;
  c.derived = NULL;
  return c;
}

/* Creates a handle. Nothing is attached until deltakv_engine_start. NULL params = the defaults.
 * INVALID_ARGUMENT for a bad struct_size (deltakv_base.h), world_size <= 0, a rank outside
 * [0, world_size), global_world_size < 0, or (global_world_size > 0) a slice
 * [first_global_rank, + world_size) outside [0, global_world_size), or a shm_name that is not
 * a segment name (1-200 characters of [A-Za-z0-9._-], not starting with '.', leaving room for
 * the rank's tensor table "<shm_name>.tensors.<rank>"). *out is NULL on failure. */
deltakv_status deltakv_engine_create(const deltakv_engine_params* params, deltakv_engine** out);
void deltakv_engine_free(deltakv_engine* engine);

/* Registers one weight tensor. `name` is its checkpoint name (non-empty, valid UTF-8); `dtype`
 * uses safetensors names ("BF16", "F32", ...); `shape` is the rank-local shape; `layout_json`
 * describes how the canonical checkpoint tensor maps to this rank (NULL = replicated: the local
 * tensor is the whole canonical tensor). INVALID_ARGUMENT for a bad name, dtype or shape, a
 * layout that does not parse, has another dtype or spans another number of ranks than the
 * engine's group, or gives this rank another byte count than the local shape, or a name
 * registered twice.
 * REQUIRES: called before deltakv_engine_start. */
deltakv_status deltakv_engine_register_tensor(deltakv_engine* engine, const char* name,
                                              void* device_ptr, const char* dtype,
                                              const int64_t* shape, int32_t ndim,
                                              const char* layout_json);

/* Sets the pause/resume/derived callbacks (start from deltakv_default_callbacks()).
 * FAILED_PRECONDITION once deltakv_engine_start succeeded (the handle keeps the callbacks it
 * has). */
deltakv_status deltakv_engine_set_callbacks(deltakv_engine* engine, const deltakv_callbacks* cb);

/* Attaches to the sidecar, registers the rank and starts serving sync plans. */
deltakv_status deltakv_engine_start(deltakv_engine* engine);

/* Poll mode: applies a pending commit, if any. On success *committed (may be NULL) is 1 if a
 * commit was applied, else 0; on failure it is not written. DATA_LOSS if the commit failed
 * after the COMMIT decision: writing the staged bytes failed (weights partly new) or the
 * derived callback failed (weights new, derived weights may be stale); the handle is then
 * DIVERGED and the message says which. */
deltakv_status deltakv_engine_poll(deltakv_engine* engine, int32_t* committed);

/* The policy version counter the engine serves now (starts at 0, +1 per commit; 0 for NULL).
 * A commit changes the counter and the version id together: a thread that reads the counter,
 * then deltakv_engine_version_id, then the counter again, and sees the same counter both times,
 * has read the id that goes with it. */
uint64_t deltakv_engine_policy_version(const deltakv_engine* engine);
/* The version id string the engine serves now ("" for NULL). The string is a copy owned by the
 * calling thread, valid until that thread calls this function again. */
const char* deltakv_engine_version_id(deltakv_engine* engine);

/* The handle's state now (DELTAKV_ENGINE_STOPPED for NULL). */
deltakv_engine_state deltakv_engine_get_state(const deltakv_engine* engine);

/* The message of the last sync that failed on this rank ("" if none since the handle was
 * created, and for NULL; a later successful commit does not clear it). A copy owned by the calling
 * thread, valid until that thread calls this function again; safe from any thread. Failed calls
 * report through deltakv_last_error() instead. */
const char* deltakv_engine_sync_error(const deltakv_engine* engine);

/* Figures of the newest sync this rank staged: what it cost the engine, for operators and
 * benchmarks. Set struct_size = sizeof(deltakv_sync_stats) before the call; the library fills
 * the fields it knows, sets struct_size to their size and zeroes the rest of a larger struct
 * (deltakv_base.h). All zero before the first staged sync. */
typedef struct deltakv_sync_stats {
  uint32_t struct_size; /* sizeof(deltakv_sync_stats) (deltakv_base.h) */
  int32_t outcome;      /* 0 staging or staged, 1 committed, 2 dropped (aborted or failed
                         * before the decision), 3 diverged (failed after COMMIT) */
  uint64_t sync_id;     /* the sidecar's sync id */
  uint64_t parts;       /* plan parts staged */
  uint64_t bytes;       /* changed bytes gathered, XORed, summed and staged */
  uint64_t stage_us;    /* time in the device backend's staging, summed over the parts */
  uint64_t pause_us;    /* the commit's pause, pause callback to resume (0 unless committed) */
} deltakv_sync_stats;

/* Fills *out (INVALID_ARGUMENT for NULL or a struct_size below the first version's). Safe
 * from any thread. */
deltakv_status deltakv_engine_get_sync_stats(const deltakv_engine* engine,
                                             deltakv_sync_stats* out);

#ifdef __cplusplus
}
#endif

#endif /* DELTAKV_DELTAKV_H_ */
