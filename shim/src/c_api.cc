// The engine half of the C ABI (include/deltakv/deltakv.h): thin wrappers over shim::Engine that
// follow the ABI's conventions (c_abi.h).
#include <cstddef>
#include <cstring>
#include <string>

#include "c_abi.h"
#include "deltakv/deltakv.h"
#include "deltasync/engine_tensors.h"
#include "engine.h"
#include "shm/segment.h"

struct deltakv_engine {
  explicit deltakv_engine(const deltakv_engine_params& p) : impl(p) {}
  deltakv::shim::Engine impl;
};

namespace {

using deltakv::InvalidArgument;
using deltakv::Status;
using deltakv::shim::RunC;

// No versioned struct ends in padding (deltakv_base.h).
static_assert(sizeof(deltakv_engine_params) ==
              offsetof(deltakv_engine_params, staging_reserve_bytes) + sizeof(uint64_t));
static_assert(sizeof(deltakv_callbacks) == offsetof(deltakv_callbacks, derived) + sizeof(void*));
static_assert(sizeof(deltakv_sync_stats) ==
              offsetof(deltakv_sync_stats, pause_us) + sizeof(uint64_t));

// Both structs as of ABI 1: every caller passes at least this much.
// ABI 1 ended at attach_timeout_ms; the global slice fields came later and default to 0.
constexpr size_t kEngineParamsV1Size = offsetof(deltakv_engine_params, first_global_rank);
constexpr size_t kCallbacksV1Size = sizeof(deltakv_callbacks);
constexpr size_t kSyncStatsV1Size = sizeof(deltakv_sync_stats);

Status CheckEngine(const deltakv_engine* e) {
  if (e == nullptr) return InvalidArgument("engine is NULL");
  return Status::Ok();
}

}  // namespace

extern "C" {

deltakv_status deltakv_engine_create(const deltakv_engine_params* params, deltakv_engine** out) {
  return RunC(__func__, [&]() -> Status {
    if (out == nullptr) return InvalidArgument("out is NULL");
    *out = nullptr;
    deltakv_engine_params p = deltakv_engine_default_params();
    if (params != nullptr) {
      RETURN_IF_ERROR(deltakv::shim::ReadVersionedStruct(
          params, kEngineParamsV1Size, "params", "start from deltakv_engine_default_params()", &p));
    }
    if (p.world_size <= 0 || p.rank < 0 || p.rank >= p.world_size) {
      return InvalidArgument("rank " + std::to_string(p.rank) + " of world_size " +
                             std::to_string(p.world_size) +
                             " (expected world_size > 0 and 0 <= rank < world_size)");
    }
    if (p.global_world_size < 0 || (p.global_world_size > 0 &&
                                     (p.first_global_rank < 0 ||
                                      int64_t{p.first_global_rank} + p.world_size >
                                          p.global_world_size))) {
      return InvalidArgument("global ranks " + std::to_string(p.first_global_rank) + ".." +
                             std::to_string(int64_t{p.first_global_rank} + p.world_size - 1) +
                             " of global_world_size " + std::to_string(p.global_world_size) +
                             " (expected 0 <= first_global_rank and first_global_rank + "
                             "world_size <= global_world_size)");
    }
    // A bad name is refused now, not after start has retried it for attach_timeout_ms.
    const std::string shm_name = p.shm_name != nullptr ? p.shm_name : "deltakv";
    RETURN_IF_ERROR(deltakv::shm::Segment::ValidateName(shm_name).WithPrefix("params.shm_name"));
    RETURN_IF_ERROR(
        deltakv::shm::Segment::ValidateName(deltakv::deltasync::EngineTensorTableSegmentName(
                                                shm_name, static_cast<uint32_t>(p.rank)))
            .WithPrefix("params.shm_name (the rank's tensor table is named after it)"));
    *out = new deltakv_engine(p);
    return Status::Ok();
  });
}

void deltakv_engine_free(deltakv_engine* engine) { delete engine; }

deltakv_status deltakv_engine_register_tensor(deltakv_engine* e, const char* name, void* device_ptr,
                                              const char* dtype, const int64_t* shape, int32_t ndim,
                                              const char* layout_json) {
  return RunC(__func__, [&]() -> Status {
    RETURN_IF_ERROR(CheckEngine(e));
    return e->impl.RegisterTensor(name, device_ptr, dtype, shape, ndim, layout_json);
  });
}

deltakv_status deltakv_engine_set_callbacks(deltakv_engine* e, const deltakv_callbacks* cb) {
  return RunC(__func__, [&]() -> Status {
    RETURN_IF_ERROR(CheckEngine(e));
    deltakv_callbacks c = deltakv_default_callbacks();
    RETURN_IF_ERROR(deltakv::shim::ReadVersionedStruct(
        cb, kCallbacksV1Size, "callbacks", "start from deltakv_default_callbacks()", &c));
    return e->impl.SetCallbacks(c);
  });
}

deltakv_status deltakv_engine_start(deltakv_engine* e) {
  return RunC(__func__, [&]() -> Status {
    RETURN_IF_ERROR(CheckEngine(e));
    return e->impl.Start();
  });
}

deltakv_status deltakv_engine_poll(deltakv_engine* e, int32_t* committed) {
  return RunC(__func__, [&]() -> Status {
    RETURN_IF_ERROR(CheckEngine(e));
    ASSIGN_OR_RETURN(bool applied, e->impl.Poll());
    if (committed != nullptr) *committed = applied ? 1 : 0;
    return Status::Ok();
  });
}

uint64_t deltakv_engine_policy_version(const deltakv_engine* e) {
  return e == nullptr ? 0 : e->impl.policy_version();
}

// Both strings are copied into storage of the calling thread, so a call from any thread never
// races with the worker updating them.
const char* deltakv_engine_version_id(deltakv_engine* e) {
  thread_local std::string copy;
  copy = e == nullptr ? "" : e->impl.version_id();
  return copy.c_str();
}

const char* deltakv_engine_sync_error(const deltakv_engine* e) {
  thread_local std::string copy;
  copy = e == nullptr ? "" : e->impl.sync_error();
  return copy.c_str();
}

deltakv_status deltakv_engine_get_sync_stats(const deltakv_engine* e, deltakv_sync_stats* out) {
  return RunC(__func__, [&]() -> Status {
    RETURN_IF_ERROR(CheckEngine(e));
    if (out == nullptr) return InvalidArgument("out is NULL");
    const size_t size = out->struct_size;
    if (size < kSyncStatsV1Size) {
      return InvalidArgument("out->struct_size is " + std::to_string(size) +
                             ", expected at least " + std::to_string(kSyncStatsV1Size) +
                             " (set it to sizeof(deltakv_sync_stats))");
    }
    // As deltakv_kv_get_stats: the fields this library knows, a newer caller's tail zeroed.
    deltakv_sync_stats s = e->impl.sync_stats();
    s.struct_size = static_cast<uint32_t>(sizeof(deltakv_sync_stats));
    std::memcpy(out, &s, sizeof(s));
    if (size > sizeof(s)) std::memset(reinterpret_cast<char*>(out) + sizeof(s), 0, size - sizeof(s));
    return Status::Ok();
  });
}

deltakv_engine_state deltakv_engine_get_state(const deltakv_engine* e) {
  return e == nullptr ? DELTAKV_ENGINE_STOPPED : e->impl.state();
}

}  // extern "C"
