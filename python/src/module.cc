// deltakv._native: the Python bindings. The engine handle and the KV tier client are bound over
// libdeltakv's C ABI (deltakv.h), exactly as an engine in C uses them; the publisher is the
// deltasync library's (it is not part of the engine ABI). Errors raise the exceptions of
// deltakv.errors with the C status and message. Every call that may block releases the GIL.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "deltakv/deltakv.h"
#include "deltasync/dtype.h"
#include "deltasync/publisher.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace {

namespace ds = deltakv::deltasync;

// ---- Errors ---------------------------------------------------------------------------------

[[noreturn]] void Raise(int status, const std::string& message) {
  nb::module_::import_("deltakv.errors").attr("_raise")(status, message);
  throw std::runtime_error("deltakv.errors._raise returned");  // not reached
}

// Raises for a failed C call, with the calling thread's message.
void Check(deltakv_status s) {
  if (s != DELTAKV_OK) Raise(static_cast<int>(s), deltakv_last_error());
}

// Runs a C call without the GIL; raises after taking it back.
template <typename F>
void CheckNoGil(F&& f) {
  deltakv_status s;
  std::string message;
  {
    nb::gil_scoped_release release;
    s = f();
    if (s != DELTAKV_OK) message = deltakv_last_error();
  }
  if (s != DELTAKV_OK) Raise(static_cast<int>(s), message);
}

// ---- Arrays ---------------------------------------------------------------------------------

using AnyArray = nb::ndarray<nb::ro>;  // read-only views accepted (weights are checked apart)

// The safetensors dtype name of an array's DLPack dtype; nullopt when there is none.
std::optional<std::string> DTypeNameOf(const nb::dlpack::dtype& d) {
  using C = nb::dlpack::dtype_code;
  if (d.lanes != 1) return std::nullopt;
  const auto code = static_cast<C>(d.code);
  switch (code) {
    case C::Bool:
      return "BOOL";
    case C::Int:
      switch (d.bits) {
        case 8:
          return "I8";
        case 16:
          return "I16";
        case 32:
          return "I32";
        case 64:
          return "I64";
      }
      break;
    case C::UInt:
      switch (d.bits) {
        case 8:
          return "U8";
        case 16:
          return "U16";
        case 32:
          return "U32";
        case 64:
          return "U64";
      }
      break;
    case C::Float:
      switch (d.bits) {
        case 16:
          return "F16";
        case 32:
          return "F32";
        case 64:
          return "F64";
      }
      break;
    case C::Bfloat:
      if (d.bits == 16) return "BF16";
      break;
    case C::Float8_E4M3FN:
      return "F8_E4M3";
    case C::Float8_E5M2:
      return "F8_E5M2";
    case C::Float8_E8M0FNU:
      return "F8_E8M0";
    default:
      break;
  }
  return std::nullopt;
}

bool IsCContiguous(const AnyArray& a) {
  // An array without elements is contiguous whatever its strides (numpy gives it strides 0).
  for (size_t i = 0; i < a.ndim(); ++i) {
    if (a.shape(i) == 0) return true;
  }
  int64_t want = 1;
  for (size_t i = a.ndim(); i-- > 0;) {
    if (a.shape(i) != 1 && a.stride(i) != want) return false;
    want *= static_cast<int64_t>(a.shape(i));
  }
  return true;
}

// (data pointer, bytes, shape, safetensors dtype or None, DLPack device type) of any array.
std::tuple<uintptr_t, size_t, std::vector<uint64_t>, std::optional<std::string>, int> ArrayInfo(
    AnyArray a) {
  if (!IsCContiguous(a)) Raise(DELTAKV_ERR_INVALID_ARGUMENT, "the array is not C-contiguous");
  std::vector<uint64_t> shape(a.ndim());
  for (size_t i = 0; i < a.ndim(); ++i) shape[i] = a.shape(i);
  return {reinterpret_cast<uintptr_t>(a.data()), a.nbytes(), shape, DTypeNameOf(a.dtype()),
          a.device_type()};
}

// A read-only view of a CPU array's bytes, for the publisher.
std::span<const uint8_t> HostBytes(const AnyArray& a, const std::string& what) {
  if (a.device_type() != nb::device::cpu::value) {
    Raise(DELTAKV_ERR_INVALID_ARGUMENT, what + ": not in host memory (copy it to the CPU)");
  }
  if (!IsCContiguous(a)) Raise(DELTAKV_ERR_INVALID_ARGUMENT, what + ": not C-contiguous");
  return {static_cast<const uint8_t*>(a.data()), a.nbytes()};
}

template <typename T>
using Owned = nb::ndarray<nb::numpy, T>;

// A new numpy array of `n` x `cols` T that owns `v`.
template <typename T>
Owned<T> ToNumpy(std::vector<T> v, size_t rows, size_t cols) {
  auto* heap = new std::vector<T>(std::move(v));
  nb::capsule owner(heap, [](void* p) noexcept { delete static_cast<std::vector<T>*>(p); });
  if (cols == 0) {
    size_t shape[1] = {rows};
    return Owned<T>(heap->data(), 1, shape, owner);
  }
  size_t shape[2] = {rows, cols};
  return Owned<T>(heap->data(), 2, shape, owner);
}

// Keys: a C-contiguous uint64 array of shape (n, 2) (lo, hi per key) is the C layout of n
// deltakv_kv_key.
using KeyArray = nb::ndarray<const uint64_t, nb::shape<-1, 2>, nb::c_contig, nb::device::cpu>;
using U64Array = nb::ndarray<const uint64_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
using U32Array = nb::ndarray<const uint32_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;

const deltakv_kv_key* Keys(const KeyArray& k) {
  static_assert(sizeof(deltakv_kv_key) == 2 * sizeof(uint64_t));
  return reinterpret_cast<const deltakv_kv_key*>(k.data());
}

// ---- Publisher ------------------------------------------------------------------------------

nb::dict SummaryDict(const ds::PublishSummary& s) {
  nb::dict d;
  d["parent_version"] = s.parent_version;
  d["version"] = s.version;
  d["tensors"] = s.tensors;
  d["tensors_changed"] = s.tensors_changed;
  d["checkpoint_bytes"] = s.checkpoint_bytes;
  d["dense_bytes"] = s.dense_bytes;
  d["compressed_bytes"] = s.compressed_bytes;
  d["nonzero_bytes"] = s.nonzero_bytes;
  d["frames"] = s.frames;
  d["objects"] = s.objects;
  d["seconds"] = s.seconds;
  d["density"] = s.density();
  return d;
}

ds::PublishOptions Options(std::string out_dir, std::string parent_version, std::string version,
                           int level, bool xor_runs, unsigned threads, uint64_t frame_bytes,
                           uint64_t shard_bytes, bool progress) {
  ds::PublishOptions o;
  o.out_dir = std::move(out_dir);
  o.parent_version = std::move(parent_version);
  o.version = std::move(version);
  o.level = level;
  o.sequences = xor_runs ? ds::FrameSequences::kXorRuns : ds::FrameSequences::kZstd;
  o.threads = threads;
  o.frame_bytes = frame_bytes;
  o.shard_bytes = shard_bytes;
  o.progress = progress;
  return o;
}

nb::dict Publish(ds::PublishOptions o) {
  deltakv::StatusOr<ds::PublishSummary> r = deltakv::Internal("not run");
  {
    nb::gil_scoped_release release;
    r = ds::PublishDelta(o);
  }
  if (!r.ok()) Raise(static_cast<int>(r.status().code()), r.status().message());
  return SummaryDict(*r);
}

// The array's shape in elements of `dtype`. Reinterpreted bytes (e.g. uint8 holding bfloat16)
// keep their size: the last dimension scales with the element sizes.
std::vector<uint64_t> ShapeIn(const AnyArray& array, ds::DType dtype, const std::string& dtype_name,
                              const std::string& what) {
  std::vector<uint64_t> shape;
  for (size_t i = 0; i < array.ndim(); ++i) shape.push_back(array.shape(i));
  const uint32_t from = (array.dtype().bits + 7) / 8, to = ds::DTypeSize(dtype);
  if (from == to) return shape;
  if (shape.empty()) {
    Raise(DELTAKV_ERR_INVALID_ARGUMENT, what + ": a scalar cannot change its element size");
  }
  if ((shape.back() * from) % to != 0) {
    Raise(DELTAKV_ERR_INVALID_ARGUMENT,
          what + ": its last dimension does not hold whole " + dtype_name + " elements");
  }
  shape.back() = shape.back() * from / to;
  return shape;
}

using TensorEntry = std::tuple<std::string, std::optional<std::string>, AnyArray>;

std::vector<ds::TensorBytes> ToTensors(const std::vector<TensorEntry>& entries, const char* side) {
  std::vector<ds::TensorBytes> out;
  out.reserve(entries.size());
  for (const auto& [name, dtype_override, array] : entries) {
    const std::string what = std::string(side) + " tensor '" + name + "'";
    std::optional<std::string> dtype_name =
        dtype_override ? dtype_override : DTypeNameOf(array.dtype());
    if (!dtype_name) {
      Raise(DELTAKV_ERR_INVALID_ARGUMENT,
            what + ": its dtype has no safetensors name; pass (array, \"DTYPE\")");
    }
    std::optional<ds::DType> dtype = ds::ParseDType(*dtype_name);
    if (!dtype) Raise(DELTAKV_ERR_INVALID_ARGUMENT, what + ": unknown dtype '" + *dtype_name + "'");
    ds::TensorBytes t;
    t.name = name;
    t.dtype = *dtype;
    t.bytes = HostBytes(array, what);
    t.shape = ShapeIn(array, *dtype, *dtype_name, what);
    out.push_back(std::move(t));
  }
  return out;
}

nb::dict PublishTensors(const std::vector<TensorEntry>& parent,
                        const std::vector<TensorEntry>& next, ds::PublishOptions o) {
  std::vector<ds::TensorBytes> p = ToTensors(parent, "parent");
  std::vector<ds::TensorBytes> n = ToTensors(next, "new");
  deltakv::StatusOr<ds::PublishSummary> r = deltakv::Internal("not run");
  {
    nb::gil_scoped_release release;
    r = ds::PublishDeltaFromTensors(p, n, o);
  }
  if (!r.ok()) Raise(static_cast<int>(r.status().code()), r.status().message());
  return SummaryDict(*r);
}

// ---- Engine handle --------------------------------------------------------------------------

const char* StateName(deltakv_engine_state s) {
  switch (s) {
    case DELTAKV_ENGINE_CREATED:
      return "created";
    case DELTAKV_ENGINE_ATTACHED:
      return "attached";
    case DELTAKV_ENGINE_STAGING:
      return "staging";
    case DELTAKV_ENGINE_STAGED:
      return "staged";
    case DELTAKV_ENGINE_COMMITTING:
      return "committing";
    case DELTAKV_ENGINE_VERIFYING:
      return "verifying";
    case DELTAKV_ENGINE_DIVERGED:
      return "diverged";
    case DELTAKV_ENGINE_STOPPED:
      return "stopped";
  }
  return "unknown";
}

class Engine {
 public:
  Engine(const std::string& shm_name, int rank, int world_size, const std::string& backend,
         const std::string& initial_version, bool poll_mode, uint32_t attach_timeout_ms,
         uint64_t staging_reserve_bytes) {
    // The handle copies every string of the params.
    deltakv_engine_params p = deltakv_engine_default_params();
    p.shm_name = shm_name.c_str();
    p.rank = rank;
    p.world_size = world_size;
    p.backend = backend.c_str();
    p.initial_version = initial_version.c_str();
    p.poll_mode = poll_mode ? 1 : 0;
    p.attach_timeout_ms = attach_timeout_ms;
    p.staging_reserve_bytes = staging_reserve_bytes;
    Check(deltakv_engine_create(&p, &e_));
  }
  ~Engine() { Close(); }
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  void RegisterTensor(const std::string& name, nb::object tensor, uintptr_t data_ptr,
                      std::optional<std::string> dtype, std::optional<std::vector<int64_t>> shape,
                      std::optional<std::string> layout_json) {
    Live();
    void* ptr = reinterpret_cast<void*>(data_ptr);
    std::vector<int64_t> dims = shape.value_or(std::vector<int64_t>{});
    if (!tensor.is_none()) {
      AnyArray a;
      if (!nb::try_cast(tensor, a, /*convert=*/false)) {
        Raise(DELTAKV_ERR_INVALID_ARGUMENT,
              "tensor '" + name + "': not an array (numpy, or an object with __dlpack__)");
      }
      if (!IsCContiguous(a)) {
        Raise(DELTAKV_ERR_INVALID_ARGUMENT, "tensor '" + name + "': not C-contiguous");
      }
      if (a.device_type() == nb::device::cpu::value) {
        // Registered weights are written in place: a read-only buffer would be a lie.
        nb::object flags = nb::getattr(tensor, "flags", nb::none());
        if (!flags.is_none() && !nb::cast<bool>(flags.attr("writeable"))) {
          Raise(DELTAKV_ERR_INVALID_ARGUMENT, "tensor '" + name + "': read-only array");
        }
      }
      ptr = const_cast<void*>(a.data());  // writability was checked above
      if (!dtype) dtype = DTypeNameOf(a.dtype());
      // An unknown dtype name is left to the library to refuse.
      if (const std::optional<ds::DType> dt = dtype ? ds::ParseDType(*dtype) : std::nullopt) {
        if (!shape) {  // as publish: reinterpreted bytes keep their size
          dims.clear();
          for (uint64_t d : ShapeIn(a, *dt, *dtype, "tensor '" + name + "'")) {
            dims.push_back(static_cast<int64_t>(d));
          }
        }
        // The library writes the bytes the dtype and shape say: never more than the array holds.
        uint64_t bytes = ds::DTypeSize(*dt);
        for (int64_t d : dims) bytes *= d < 0 ? 0 : static_cast<uint64_t>(d);
        if (bytes != a.nbytes()) {
          Raise(DELTAKV_ERR_INVALID_ARGUMENT,
                "tensor '" + name + "': " + *dtype + " of that shape is " + std::to_string(bytes) +
                    " bytes, the array holds " + std::to_string(a.nbytes()));
        }
      }
      keep_.push_back(tensor);
    }
    if (!dtype) Raise(DELTAKV_ERR_INVALID_ARGUMENT, "tensor '" + name + "': no dtype");
    const char* layout = layout_json ? layout_json->c_str() : nullptr;
    Check(deltakv_engine_register_tensor(e_, name.c_str(), ptr, dtype->c_str(), dims.data(),
                                         static_cast<int32_t>(dims.size()), layout));
  }

  // The objects are kept only once the library took the callbacks (it refuses them after start,
  // when its worker may be calling the ones it has).
  void SetCallbacks(nb::object pause, nb::object resume, nb::object derived) {
    Live();
    deltakv_callbacks cb = deltakv_default_callbacks();
    cb.user = this;
    cb.pause = pause.is_none() ? nullptr : &Engine::OnPause;
    cb.resume = resume.is_none() ? nullptr : &Engine::OnResume;
    cb.derived = derived.is_none() ? nullptr : &Engine::OnDerived;
    Check(deltakv_engine_set_callbacks(e_, &cb));
    pause_ = std::move(pause);
    resume_ = std::move(resume);
    derived_ = std::move(derived);
  }

  void Start() {
    Live();
    CheckNoGil([&] { return deltakv_engine_start(e_); });
  }

  bool Poll() {
    Live();
    int32_t committed = 0;
    CheckNoGil([&] { return deltakv_engine_poll(e_, &committed); });
    return committed != 0;
  }

  void Close() {
    if (e_ == nullptr) return;
    deltakv_engine* e = e_;
    e_ = nullptr;
    // The worker may be waiting for the GIL inside a callback: free without it.
    if (PyGILState_Check()) {
      nb::gil_scoped_release release;
      deltakv_engine_free(e);
    } else {
      deltakv_engine_free(e);
    }
    keep_.clear();
    // The handle's thread is gone: the callbacks (often bound methods of the caller) go too.
    pause_ = nb::none();
    resume_ = nb::none();
    derived_ = nb::none();
  }

  std::string State() const { return StateName(deltakv_engine_get_state(e_)); }
  uint64_t PolicyVersion() const { return deltakv_engine_policy_version(e_); }
  std::string VersionId() { return e_ == nullptr ? "" : deltakv_engine_version_id(e_); }
  std::string SyncError() const { return deltakv_engine_sync_error(e_); }
  // deltakv_engine_get_sync_stats as a dict; the outcome by name ("none" before any sync).
  nb::dict SyncStats() const {
    Live();
    deltakv_sync_stats s;
    std::memset(&s, 0, sizeof(s));
    s.struct_size = sizeof(s);
    Check(deltakv_engine_get_sync_stats(e_, &s));
    static constexpr const char* kOutcomes[] = {"staging", "committed", "dropped", "diverged"};
    nb::dict d;
    d["outcome"] = s.sync_id == 0                     ? "none"
                   : s.outcome >= 0 && s.outcome <= 3 ? kOutcomes[s.outcome]
                                                      : "unknown";
    d["sync_id"] = s.sync_id;
    d["parts"] = s.parts;
    d["bytes"] = s.bytes;
    d["stage_us"] = s.stage_us;
    d["pause_us"] = s.pause_us;
    return d;
  }
  bool closed() const { return e_ == nullptr; }

  // Cyclic garbage collection: the callbacks are often bound methods of an object that holds
  // this engine, and the kept arrays may refer back to it.
  int Traverse(visitproc visit, void* arg) const {
    for (const nb::object* o : {&pause_, &resume_, &derived_}) Py_VISIT(o->ptr());
    for (const nb::object& o : keep_) Py_VISIT(o.ptr());
    return 0;
  }

 private:
  void Live() const {
    if (e_ == nullptr) Raise(DELTAKV_ERR_FAILED_PRECONDITION, "the engine handle is closed");
  }

  // Callbacks run on the handle's thread: take the GIL, and turn an exception into a failure
  // (printed, as Python does for exceptions nobody can catch).
  static int CallPy(const nb::object& fn, auto&&... args) {
    nb::gil_scoped_acquire gil;
    try {
      nb::object r = fn(std::forward<decltype(args)>(args)...);
      // None or a true value: success; a false value (False, numpy's False, 0): failure.
      if (!r.is_none() && PyObject_IsTrue(r.ptr()) == 0) return 1;
      return 0;
    } catch (nb::python_error& e) {
      e.discard_as_unraisable("deltakv engine callback");
      return 1;
    }
  }
  static int OnPause(void* user) { return CallPy(static_cast<Engine*>(user)->pause_); }
  static int OnResume(void* user) { return CallPy(static_cast<Engine*>(user)->resume_); }
  // The regions go to Python as one numpy array of shape (n, 2), (offset, length) per row: a
  // sparse sync hands millions of them, inside the pause (a list of tuples took ~150 ns each).
  static int OnDerived(void* user, const char* tensor, const deltakv_region* regions, size_t n) {
    static_assert(sizeof(deltakv_region) == 2 * sizeof(uint64_t), "a region is two uint64");
    auto* self = static_cast<Engine*>(user);
    std::vector<uint64_t> rows(2 * n);
    if (n > 0) std::memcpy(rows.data(), regions, n * sizeof(deltakv_region));
    nb::gil_scoped_acquire gil;
    nb::object array = nb::cast(ToNumpy(std::move(rows), n, 2));
    return CallPy(self->derived_, std::string(tensor), array);
  }

  deltakv_engine* e_ = nullptr;
  std::vector<nb::object> keep_;  // registered arrays stay alive while the handle does
  nb::object pause_ = nb::none(), resume_ = nb::none(), derived_ = nb::none();
};

// ---- KV tier client -------------------------------------------------------------------------

struct KeyContextArgs {
  std::optional<std::string> model_fingerprint, kv_dtype, kv_layout, adapter_id, salt;
  int32_t tp_rank = -1, tp_size = -1, hash_kind = DELTAKV_KV_HASH_XXH3;

  deltakv_kv_key_context ToC() const {
    deltakv_kv_key_context c = deltakv_kv_default_key_context();
    auto s = [](const std::optional<std::string>& v) { return v ? v->c_str() : nullptr; };
    c.model_fingerprint = s(model_fingerprint);
    c.kv_dtype = s(kv_dtype);
    c.kv_layout = s(kv_layout);
    c.adapter_id = s(adapter_id);
    c.salt = s(salt);
    c.tp_rank = tp_rank;
    c.tp_size = tp_size;
    c.hash_kind = hash_kind;
    return c;
  }
};

Owned<uint64_t> ChainKeys(const KeyContextArgs& ctx, U32Array tokens, uint32_t block_tokens,
                          std::optional<std::pair<uint64_t, uint64_t>> parent) {
  const deltakv_kv_key_context c = ctx.ToC();
  deltakv_kv_key p{};
  if (parent) p = deltakv_kv_key{parent->first, parent->second};
  const size_t cap = block_tokens == 0 ? 0 : tokens.shape(0) / block_tokens;
  std::vector<uint64_t> out(2 * cap);
  size_t n = 0;
  Check(deltakv_kv_chain_keys(&c, tokens.data(), tokens.shape(0), block_tokens,
                              parent ? &p : nullptr, reinterpret_cast<deltakv_kv_key*>(out.data()),
                              cap, &n));
  out.resize(2 * n);
  return ToNumpy(std::move(out), n, 2);
}

// The longest engine hash deltakv_kv_engine_hash_keys takes (deltakv_kv.h, docs/KEYS.md §5).
constexpr size_t kMaxEngineHashBytes = 256;

Owned<uint64_t> EngineHashKeys(const KeyContextArgs& ctx, nb::bytes hashes, size_t hash_bytes) {
  const deltakv_kv_key_context c = ctx.ToC();
  if (hash_bytes == 0 || hash_bytes > kMaxEngineHashBytes) {
    Raise(DELTAKV_ERR_INVALID_ARGUMENT, "an engine hash is 1 to " +
                                            std::to_string(kMaxEngineHashBytes) +
                                            " bytes long, not " + std::to_string(hash_bytes));
  }
  if (hashes.size() % hash_bytes != 0) {
    Raise(DELTAKV_ERR_INVALID_ARGUMENT, std::to_string(hashes.size()) +
                                            " bytes of hashes are not a multiple of hash_bytes " +
                                            std::to_string(hash_bytes));
  }
  const size_t count = hashes.size() / hash_bytes;
  std::vector<uint64_t> out(2 * count);
  Check(deltakv_kv_engine_hash_keys(&c, hashes.c_str(), hash_bytes, count,
                                    reinterpret_cast<deltakv_kv_key*>(out.data())));
  return ToNumpy(std::move(out), count, 2);
}

uint64_t TokenFingerprint(U32Array tokens) {
  uint64_t fp = 0;
  Check(deltakv_kv_token_fingerprint(tokens.data(), tokens.shape(0), &fp));
  return fp;
}

class KvClient;

class LoadHandle {
 public:
  explicit LoadHandle(deltakv_kv_load_handle* h) : h_(h) {}
  ~LoadHandle() { Free(); }
  void Free() {
    if (h_ == nullptr) return;
    deltakv_kv_load_handle* h = h_;
    h_ = nullptr;
    nb::gil_scoped_release release;
    (void)deltakv_kv_load_free(h);
  }
  size_t Size() const {
    size_t n = 0;
    Check(deltakv_kv_load_size(Live(), &n));
    return n;
  }
  bool Query() const {
    int done = 0;
    Check(deltakv_kv_load_query(Live(), &done));
    return done != 0;
  }
  bool Wait(int64_t timeout_ms) {
    int done = 0;
    deltakv_kv_load_handle* h = Live();
    CheckNoGil([&] { return deltakv_kv_load_wait(h, timeout_ms, &done); });
    return done != 0;
  }
  deltakv_kv_load_handle* Live() const {
    if (h_ == nullptr) Raise(DELTAKV_ERR_FAILED_PRECONDITION, "the load handle was freed");
    return h_;
  }

 private:
  deltakv_kv_load_handle* h_;
};

class StoreHandle {
 public:
  StoreHandle(deltakv_kv_store_handle* h, std::vector<uint8_t> outcomes)
      : h_(h), outcomes_(std::move(outcomes)) {}
  ~StoreHandle() { Free(); }
  void Free() {
    if (h_ == nullptr) return;
    deltakv_kv_store_handle* h = h_;
    h_ = nullptr;
    nb::gil_scoped_release release;
    (void)deltakv_kv_store_free(h);
  }
  Owned<uint8_t> Outcomes() const { return ToNumpy(outcomes_, outcomes_.size(), 0); }
  nb::dict Info() const {
    size_t n = 0, allocated = 0, already = 0, in_flight = 0, refused = 0;
    Check(deltakv_kv_store_info(Live(), &n, &allocated, &already, &in_flight, &refused));
    nb::dict d;
    d["keys"] = n;
    d["allocated"] = allocated;
    d["already_stored"] = already;
    d["in_flight"] = in_flight;
    d["refused"] = refused;
    return d;
  }
  bool Query() const {
    int done = 0;
    Check(deltakv_kv_store_query(Live(), &done));
    return done != 0;
  }
  bool Wait(int64_t timeout_ms) {
    int done = 0;
    deltakv_kv_store_handle* h = Live();
    CheckNoGil([&] { return deltakv_kv_store_wait(h, timeout_ms, &done); });
    return done != 0;
  }
  deltakv_kv_store_handle* Live() const {
    if (h_ == nullptr) Raise(DELTAKV_ERR_FAILED_PRECONDITION, "the store handle was freed");
    return h_;
  }

 private:
  deltakv_kv_store_handle* h_;
  std::vector<uint8_t> outcomes_;
};

using LayerArg = std::tuple<uintptr_t, uintptr_t, uint64_t>;  // k, v (0 = none), stride
using PieceArg = std::tuple<uintptr_t, uint64_t, uint64_t>;   // base, stride, bytes

class KvClient {
 public:
  KvClient(const std::string& pool_name, int32_t kind, uint64_t num_blocks,
           const std::vector<LayerArg>& layers, uint64_t bytes_per_tensor, uintptr_t base,
           uint64_t block_bytes, uint64_t block_stride, const std::vector<PieceArg>& pieces,
           const std::string& copy_backend, uint32_t copy_threads, uint64_t max_keys_per_call,
           uint64_t max_queued_events, uint32_t open_timeout_ms, bool pool_events,
           nb::object keepalive)
      : keepalive_(std::move(keepalive)) {
    std::vector<deltakv_kv_layer> l;
    for (const auto& [k, v, stride] : layers) {
      l.push_back({reinterpret_cast<void*>(k), reinterpret_cast<void*>(v), stride});
    }
    std::vector<deltakv_kv_piece> p;
    for (const auto& [b, stride, bytes] : pieces) {
      p.push_back({reinterpret_cast<void*>(b), stride, bytes});
    }
    deltakv_kv_client_params kp = deltakv_kv_client_default_params();
    kp.pool_name = pool_name.c_str();
    kp.layout.kind = kind;
    kp.layout.num_blocks = num_blocks;
    kp.layout.layers = l.data();
    kp.layout.num_layers = l.size();
    kp.layout.bytes_per_tensor = bytes_per_tensor;
    kp.layout.base = reinterpret_cast<void*>(base);
    kp.layout.block_bytes = block_bytes;
    kp.layout.block_stride = block_stride;
    kp.layout.pieces = p.data();
    kp.layout.num_pieces = p.size();
    kp.copy_backend = copy_backend.c_str();
    kp.copy_threads = copy_threads;
    kp.max_keys_per_call = max_keys_per_call;
    kp.max_queued_events = max_queued_events;
    kp.open_timeout_ms = open_timeout_ms;
    kp.pool_events = pool_events ? 1 : 0;
    CheckNoGil([&] { return deltakv_kv_client_open(&kp, &c_); });
  }
  ~KvClient() { Close(); }
  KvClient(const KvClient&) = delete;
  KvClient& operator=(const KvClient&) = delete;

  void Close() {
    if (c_ == nullptr) return;
    deltakv_kv_client* c = c_;
    c_ = nullptr;
    {
      nb::gil_scoped_release release;
      (void)deltakv_kv_client_close(c);
    }
    keepalive_ = nb::none();
  }
  bool closed() const { return c_ == nullptr; }

  std::pair<uint64_t, uint64_t> Info() const {
    uint64_t bytes = 0, slots = 0;
    Check(deltakv_kv_client_info(Live(), &bytes, &slots));
    return {bytes, slots};
  }
  size_t Lookup(KeyArray keys) {
    size_t hits = 0;
    deltakv_kv_client* c = Live();
    CheckNoGil([&] { return deltakv_kv_lookup(c, Keys(keys), keys.shape(0), &hits); });
    return hits;
  }
  size_t Touch(KeyArray keys) {
    size_t found = 0;
    Check(deltakv_kv_touch(Live(), Keys(keys), keys.shape(0), &found));
    return found;
  }
  void Remove(uint64_t lo, uint64_t hi) {
    Check(deltakv_kv_remove(Live(), deltakv_kv_key{lo, hi}));
  }

  std::unique_ptr<LoadHandle> PrepareLoad(KeyArray keys) {
    deltakv_kv_load_handle* h = nullptr;
    deltakv_kv_client* c = Live();
    CheckNoGil([&] { return deltakv_kv_prepare_load(c, Keys(keys), keys.shape(0), &h); });
    return std::make_unique<LoadHandle>(h);
  }
  void Load(LoadHandle& h, U64Array blocks) {
    deltakv_kv_client* c = Live();
    deltakv_kv_load_handle* lh = h.Live();
    CheckNoGil([&] { return deltakv_kv_load(c, lh, blocks.data(), blocks.shape(0)); });
  }
  void CompleteLoad(LoadHandle& h) {
    deltakv_kv_client* c = Live();
    deltakv_kv_load_handle* lh = h.Live();
    CheckNoGil([&] { return deltakv_kv_complete_load(c, lh); });
  }

  std::unique_ptr<StoreHandle> PrepareStore(KeyArray keys, std::optional<U64Array> fingerprints) {
    if (fingerprints && fingerprints->shape(0) != keys.shape(0)) {
      Raise(DELTAKV_ERR_INVALID_ARGUMENT, std::to_string(fingerprints->shape(0)) +
                                              " fingerprints for " + std::to_string(keys.shape(0)) +
                                              " keys");
    }
    deltakv_kv_store_handle* h = nullptr;
    std::vector<uint8_t> outcomes(keys.shape(0));
    deltakv_kv_client* c = Live();
    const uint64_t* fp = fingerprints ? fingerprints->data() : nullptr;
    CheckNoGil([&] {
      return deltakv_kv_prepare_store(c, Keys(keys), fp, keys.shape(0), outcomes.data(), &h);
    });
    return std::make_unique<StoreHandle>(h, std::move(outcomes));
  }
  void Store(StoreHandle& h, U64Array blocks) {
    deltakv_kv_client* c = Live();
    deltakv_kv_store_handle* sh = h.Live();
    CheckNoGil([&] { return deltakv_kv_store(c, sh, blocks.data(), blocks.shape(0)); });
  }
  void CompleteStore(StoreHandle& h) {
    deltakv_kv_client* c = Live();
    deltakv_kv_store_handle* sh = h.Live();
    CheckNoGil([&] { return deltakv_kv_complete_store(c, sh); });
  }

  nb::list DrainEvents() {
    nb::list out;
    deltakv_kv_event buf[256];
    for (;;) {
      size_t n = 0;
      Check(deltakv_kv_drain_events(Live(), buf, 256, &n));
      for (size_t i = 0; i < n; ++i) {
        out.append(nb::make_tuple(buf[i].kind, buf[i].raw_kind,
                                  nb::make_tuple(buf[i].key.lo, buf[i].key.hi), buf[i].origin_pid));
      }
      if (n < 256) return out;
    }
  }

  nb::dict Stats() const {
    deltakv_kv_stats s;
    std::memset(&s, 0, sizeof(s));
    s.struct_size = sizeof(s);
    Check(deltakv_kv_get_stats(Live(), &s));
    nb::dict d;
#define DELTAKV_STAT(f) d[#f] = s.f
    DELTAKV_STAT(lookups);
    DELTAKV_STAT(hit_blocks);
    DELTAKV_STAT(miss_blocks);
    DELTAKV_STAT(loads_prepared);
    DELTAKV_STAT(loads_refused);
    DELTAKV_STAT(stores_allocated);
    DELTAKV_STAT(stores_already);
    DELTAKV_STAT(stores_in_flight);
    DELTAKV_STAT(stores_refused);
    DELTAKV_STAT(stores_committed);
    DELTAKV_STAT(stores_aborted);
    DELTAKV_STAT(evictions);
    DELTAKV_STAT(removals);
    DELTAKV_STAT(events_dropped);
    DELTAKV_STAT(store_blocks);
    DELTAKV_STAT(store_bytes);
    DELTAKV_STAT(store_batches);
    DELTAKV_STAT(store_failed_batches);
    DELTAKV_STAT(store_busy_seconds);
    DELTAKV_STAT(store_gb_per_s);
    DELTAKV_STAT(load_blocks);
    DELTAKV_STAT(load_bytes);
    DELTAKV_STAT(load_batches);
    DELTAKV_STAT(load_failed_batches);
    DELTAKV_STAT(load_busy_seconds);
    DELTAKV_STAT(load_gb_per_s);
    DELTAKV_STAT(pool_capacity_slots);
    DELTAKV_STAT(pool_block_bytes);
    DELTAKV_STAT(pool_untouched_slots);
    DELTAKV_STAT(pool_free_slots);
    DELTAKV_STAT(pool_writing_slots);
    DELTAKV_STAT(pool_ready_slots);
    DELTAKV_STAT(pool_evicting_slots);
    DELTAKV_STAT(pool_pinned_slots);
    DELTAKV_STAT(pool_ready_bytes);
    DELTAKV_STAT(pool_index_entries);
    DELTAKV_STAT(pool_lookups);
    DELTAKV_STAT(pool_hits);
    DELTAKV_STAT(pool_misses);
    DELTAKV_STAT(pool_stores_prepared);
    DELTAKV_STAT(pool_stores_committed);
    DELTAKV_STAT(pool_stores_aborted);
    DELTAKV_STAT(pool_stores_refused);
    DELTAKV_STAT(pool_evictions);
    DELTAKV_STAT(pool_removals);
    DELTAKV_STAT(pool_pins);
    DELTAKV_STAT(pool_reclaimed_writes);
    DELTAKV_STAT(pool_reclaimed_evictions);
    DELTAKV_STAT(pool_reclaimed_pins);
    DELTAKV_STAT(pool_chunks_touched);
    DELTAKV_STAT(occupancy);
    DELTAKV_STAT(pool_events);
    DELTAKV_STAT(events_lost);
    DELTAKV_STAT(pool_loads_completed);
    DELTAKV_STAT(pool_bytes_in);
    DELTAKV_STAT(pool_bytes_out);
    DELTAKV_STAT(pool_copy_in_gb_per_s);
    DELTAKV_STAT(pool_copy_out_gb_per_s);
#undef DELTAKV_STAT
    return d;
  }

 private:
  deltakv_kv_client* Live() const {
    if (c_ == nullptr) Raise(DELTAKV_ERR_FAILED_PRECONDITION, "the KV client is closed");
    return c_;
  }

  deltakv_kv_client* c_ = nullptr;
  nb::object keepalive_;  // the arrays the layout points into
};

// An engine in a reference cycle (through its callbacks) is collected: traversed by the
// collector and closed when it breaks the cycle (closing is what its destructor does).
int EngineTraverse(PyObject* self, visitproc visit, void* arg) {
  Py_VISIT(Py_TYPE(self));
  if (!nb::inst_ready(self)) return 0;
  return nb::inst_ptr<Engine>(self)->Traverse(visit, arg);
}

int EngineClear(PyObject* self) {
  if (nb::inst_ready(self)) nb::inst_ptr<Engine>(self)->Close();
  return 0;
}

PyType_Slot kEngineSlots[] = {{Py_tp_traverse, reinterpret_cast<void*>(&EngineTraverse)},
                              {Py_tp_clear, reinterpret_cast<void*>(&EngineClear)},
                              {0, nullptr}};

}  // namespace

NB_MODULE(_native, m) {
  m.doc() = "deltakv native bindings (use the deltakv package, not this module)";
  m.def("version", [] { return std::string(deltakv_version()); });
  m.def("abi_version", [] { return deltakv_abi_version(); });
  m.attr("HEADER_ABI_VERSION") = DELTAKV_ABI_VERSION;
  m.def("status_name", [](int s) { return std::string(deltakv_status_name(s)); });
  m.def("array_info", &ArrayInfo, "array"_a);

  m.def(
      "publish_dirs",
      [](std::string parent_dir, std::string new_dir, std::string out_dir,
         std::string parent_version, std::string version, int level, bool xor_runs,
         unsigned threads, uint64_t frame_bytes, uint64_t shard_bytes, bool include_checkpoint,
         bool progress) {
        ds::PublishOptions o =
            Options(std::move(out_dir), std::move(parent_version), std::move(version), level,
                    xor_runs, threads, frame_bytes, shard_bytes, progress);
        o.parent_dir = std::move(parent_dir);
        o.new_dir = std::move(new_dir);
        o.include_checkpoint = include_checkpoint;
        return Publish(std::move(o));
      },
      "parent_dir"_a, "new_dir"_a, "out_dir"_a, "parent_version"_a, "version"_a, "level"_a,
      "xor_runs"_a, "threads"_a, "frame_bytes"_a, "shard_bytes"_a, "include_checkpoint"_a,
      "progress"_a);
  m.def(
      "publish_tensors",
      [](const std::vector<TensorEntry>& parent, const std::vector<TensorEntry>& next,
         std::string out_dir, std::string parent_version, std::string version, int level,
         bool xor_runs, unsigned threads, uint64_t frame_bytes, uint64_t shard_bytes,
         bool progress) {
        return PublishTensors(
            parent, next,
            Options(std::move(out_dir), std::move(parent_version), std::move(version), level,
                    xor_runs, threads, frame_bytes, shard_bytes, progress));
      },
      "parent"_a, "new"_a, "out_dir"_a, "parent_version"_a, "version"_a, "level"_a, "xor_runs"_a,
      "threads"_a, "frame_bytes"_a, "shard_bytes"_a, "progress"_a);

  nb::class_<Engine>(m, "Engine", nb::type_slots(kEngineSlots))
      .def(nb::init<const std::string&, int, int, const std::string&, const std::string&, bool,
                    uint32_t, uint64_t>(),
           "shm_name"_a = "deltakv", "rank"_a = 0, "world_size"_a = 1, "backend"_a = "cpu",
           "initial_version"_a = "", "poll_mode"_a = false, "attach_timeout_ms"_a = 10000,
           "staging_reserve_bytes"_a = 0)
      .def("register_tensor", &Engine::RegisterTensor, "name"_a, "tensor"_a = nb::none(),
           nb::kw_only(), "data_ptr"_a = 0, "dtype"_a = nb::none(), "shape"_a = nb::none(),
           "layout_json"_a = nb::none())
      .def("set_callbacks", &Engine::SetCallbacks, nb::kw_only(), "pause"_a = nb::none(),
           "resume"_a = nb::none(), "derived"_a = nb::none())
      .def("start", &Engine::Start)
      .def("poll", &Engine::Poll)
      .def("close", &Engine::Close)
      .def_prop_ro("state", &Engine::State)
      .def_prop_ro("policy_version", &Engine::PolicyVersion)
      .def_prop_ro("version_id", &Engine::VersionId)
      .def_prop_ro("sync_error", &Engine::SyncError)
      .def_prop_ro("sync_stats", &Engine::SyncStats)
      .def_prop_ro("closed", &Engine::closed);

  nb::class_<KeyContextArgs>(m, "KeyContext")
      .def(
          "__init__",
          [](KeyContextArgs* self, std::optional<std::string> model_fingerprint,
             std::optional<std::string> kv_dtype, std::optional<std::string> kv_layout,
             int32_t tp_rank, int32_t tp_size, std::optional<std::string> adapter_id,
             std::optional<std::string> salt, int32_t hash_kind) {
            new (self) KeyContextArgs{model_fingerprint, kv_dtype, kv_layout, adapter_id, salt,
                                      tp_rank,           tp_size,  hash_kind};
          },
          nb::kw_only(), "model_fingerprint"_a = nb::none(), "kv_dtype"_a = nb::none(),
          "kv_layout"_a = nb::none(), "tp_rank"_a = -1, "tp_size"_a = -1,
          "adapter_id"_a = nb::none(), "salt"_a = nb::none(), "hash_kind"_a = 0)
      .def_rw("model_fingerprint", &KeyContextArgs::model_fingerprint)
      .def_rw("kv_dtype", &KeyContextArgs::kv_dtype)
      .def_rw("kv_layout", &KeyContextArgs::kv_layout)
      .def_rw("tp_rank", &KeyContextArgs::tp_rank)
      .def_rw("tp_size", &KeyContextArgs::tp_size)
      .def_rw("adapter_id", &KeyContextArgs::adapter_id)
      .def_rw("salt", &KeyContextArgs::salt)
      .def_rw("hash_kind", &KeyContextArgs::hash_kind);
  m.def("chain_keys", &ChainKeys, "context"_a, "tokens"_a, "block_tokens"_a,
        "parent"_a = nb::none());
  m.def("engine_hash_keys", &EngineHashKeys, "context"_a, "hashes"_a, "hash_bytes"_a);
  m.def("token_fingerprint", &TokenFingerprint, "tokens"_a);

  nb::class_<LoadHandle>(m, "LoadHandle")
      .def_prop_ro("size", &LoadHandle::Size)
      .def("query", &LoadHandle::Query)
      .def("wait", &LoadHandle::Wait, "timeout_ms"_a = -1)
      .def("free", &LoadHandle::Free);
  nb::class_<StoreHandle>(m, "StoreHandle")
      .def_prop_ro("outcomes", &StoreHandle::Outcomes, nb::rv_policy::move)
      .def("info", &StoreHandle::Info)
      .def("query", &StoreHandle::Query)
      .def("wait", &StoreHandle::Wait, "timeout_ms"_a = -1)
      .def("free", &StoreHandle::Free);

  nb::class_<KvClient>(m, "KvClient")
      .def(nb::init<const std::string&, int32_t, uint64_t, const std::vector<LayerArg>&, uint64_t,
                    uintptr_t, uint64_t, uint64_t, const std::vector<PieceArg>&, const std::string&,
                    uint32_t, uint64_t, uint64_t, uint32_t, bool, nb::object>(),
           "pool_name"_a, "kind"_a, "num_blocks"_a, "layers"_a, "bytes_per_tensor"_a, "base"_a,
           "block_bytes"_a, "block_stride"_a, "pieces"_a, "copy_backend"_a, "copy_threads"_a,
           "max_keys_per_call"_a, "max_queued_events"_a, "open_timeout_ms"_a, "pool_events"_a,
           "keepalive"_a)
      .def("close", &KvClient::Close)
      .def_prop_ro("closed", &KvClient::closed)
      .def("info", &KvClient::Info)
      .def("lookup", &KvClient::Lookup, "keys"_a)
      .def("touch", &KvClient::Touch, "keys"_a)
      .def("remove", &KvClient::Remove, "lo"_a, "hi"_a)
      .def("prepare_load", &KvClient::PrepareLoad, "keys"_a)
      .def("load", &KvClient::Load, "handle"_a, "blocks"_a)
      .def("complete_load", &KvClient::CompleteLoad, "handle"_a)
      .def("prepare_store", &KvClient::PrepareStore, "keys"_a, "fingerprints"_a = nb::none())
      .def("store", &KvClient::Store, "handle"_a, "blocks"_a)
      .def("complete_store", &KvClient::CompleteStore, "handle"_a)
      .def("drain_events", &KvClient::DrainEvents)
      .def("stats", &KvClient::Stats);
}
