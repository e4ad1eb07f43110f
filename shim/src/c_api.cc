// The C ABI: thin wrappers that convert Status to deltakv_status and keep the message.
#include "deltakv/deltakv.h"
#include "engine.h"

#include <string>

struct deltakv_engine {
  explicit deltakv_engine(const deltakv_engine_params& p) : impl(p) {}
  deltakv::shim::Engine impl;
};

namespace {

deltakv_status ToC(deltakv_engine* e, const deltakv::Status& s) {
  if (e != nullptr) e->impl.set_error(s);
  return static_cast<deltakv_status>(static_cast<int>(s.code()));
}

}  // namespace

extern "C" {

deltakv_engine_params deltakv_engine_default_params(void) {
  deltakv_engine_params p{};
  p.shm_name = "deltakv";
  p.rank = 0;
  p.world_size = 1;
  p.backend = "cpu";
  p.initial_version = "";
  p.poll_mode = 0;
  p.attach_timeout_ms = 10000;
  return p;
}

deltakv_status deltakv_engine_create(const deltakv_engine_params* params, deltakv_engine** out) {
  if (out == nullptr) return DELTAKV_ERR_INVALID_ARGUMENT;
  *out = nullptr;
  deltakv_engine_params p = params != nullptr ? *params : deltakv_engine_default_params();
  if (p.world_size <= 0 || p.rank < 0 || p.rank >= p.world_size)
    return DELTAKV_ERR_INVALID_ARGUMENT;
  *out = new deltakv_engine(p);
  return DELTAKV_OK;
}

void deltakv_engine_free(deltakv_engine* engine) { delete engine; }

deltakv_status deltakv_engine_register_tensor(deltakv_engine* e, const char* name, void* device_ptr,
                                              const char* dtype, const int64_t* shape, int32_t ndim,
                                              const char* layout_json) {
  if (e == nullptr) return DELTAKV_ERR_INVALID_ARGUMENT;
  return ToC(e, e->impl.RegisterTensor(name, device_ptr, dtype, shape, ndim, layout_json));
}

deltakv_status deltakv_engine_set_callbacks(deltakv_engine* e, const deltakv_callbacks* cb) {
  if (e == nullptr || cb == nullptr) return DELTAKV_ERR_INVALID_ARGUMENT;
  e->impl.SetCallbacks(*cb);
  return DELTAKV_OK;
}

deltakv_status deltakv_engine_start(deltakv_engine* e) {
  if (e == nullptr) return DELTAKV_ERR_INVALID_ARGUMENT;
  return ToC(e, e->impl.Start());
}

deltakv_status deltakv_engine_poll(deltakv_engine* e, int32_t* committed) {
  if (committed != nullptr) *committed = 0;
  if (e == nullptr) return DELTAKV_ERR_INVALID_ARGUMENT;
  auto r = e->impl.Poll();
  if (!r.ok()) return ToC(e, r.status());
  if (committed != nullptr) *committed = *r ? 1 : 0;
  return DELTAKV_OK;
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

const char* deltakv_engine_last_error(const deltakv_engine* e) {
  thread_local std::string copy;
  copy = e == nullptr ? "" : e->impl.last_error();
  return copy.c_str();
}

deltakv_engine_state deltakv_engine_get_state(const deltakv_engine* e) {
  return e == nullptr ? DELTAKV_ENGINE_STOPPED : e->impl.state();
}

}  // extern "C"
