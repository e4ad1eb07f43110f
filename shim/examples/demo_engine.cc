// deltakv-demo-engine: a reference engine that links libdeltakv through its C ABI.
//
// It loads a checkpoint into device memory as N rank processes with tensor parallelism: host
// memory with the cpu backend, CUDA device memory with --backend cuda (all ranks on one GPU,
// rank r on device r mod the device count). Tensor parallelism: q/k/v/gate/up projections and
// embeddings are split by rows, o/down projections by columns, everything else is replicated. Each
// rank serves HTTP on its own port:
//   GET  /v1/generate  {"answer": sha256 of the rank's live weights, "version", "policy_version"}
//   GET  /v1/state     the same plus tensor count and bytes
//   POST /v1/dump      {"path": P}: writes the rank's local tensors to a safetensors file
//   POST /v1/corrupt   {"tensor", "offset", "xor"}: flips bits of a live weight (tests)
//   POST /v1/fail-derived  makes the derived-weights callback fail from now on (tests)
//   POST /v1/slow-pause    {"ms": N}: the pause callback sleeps N ms first (tests)
//   POST /v1/reload    {"checkpoint": DIR}: full reload of another checkpoint, paused (baseline;
//                      cuda: one host-to-device copy of every tensor from pinned host memory)
//   POST /v1/copy-bound {"bytes": N, "kind": "h2d"|"d2d"} (cuda): the best of three copies of
//                      N bytes, host to device from pinned memory (the floor for staging N
//                      changed bytes) or device to device (a pass over N bytes of device
//                      memory): {"ms", "gbps"}
//   POST /v1/touch-bound {"parent": DIR}: the memory floor of the last sync's writes: finds the
//                      64-byte lines of live weights that differ from the parent checkpoint and
//                      times one store per such line (of the byte already there) on as many
//                      threads as the cpu backend's scatter, the better of two passes:
//                      {"lines", "touch_ms", "threads"}. For all ranks at once, as their
//                      commits write: {"parent": DIR, "hold": true} on every rank finds and
//                      keeps the lines ({"lines", "held"}), then {"start_unix_ns": T,
//                      "rounds": R (default 2), "round_ns": D} on every rank runs pass r at
//                      wall-clock time T + r * D: {"lines", "touch_ms" (its best pass),
//                      "threads", "late_us" (the most a pass began past its time),
//                      "round_end_unix_ns": [when each pass ended]}.
// and /v1/state also carries the rank's deltakv_engine_get_sync_stats ("sync_stats"), so the
// served policy and what each sync cost are observable. Requests are held while a commit pauses
// the engine.
//
//   deltakv-demo-engine --checkpoint DIR --tp N [--backend cpu|cuda] [--shm NAME] [--port P]
//                       [--port-dir D] [--poll] [--tp-world W --first-rank R]
// With --tp-world the N ranks are global ranks R..R+N-1 of a W-rank tensor-parallel group that
// spans nodes: each holds exactly the shards of its global rank.
// With --ep E, stacked expert tensors (checkpoint generate --experts) are split over E
// expert-parallel groups of world/E ranks each (moe_experts layouts).
// With --pp P --pp-stage S the engine serves pipeline stage S of P: the checkpoint's tensors, in
// file and header order, are cut into P consecutive groups of (nearly) equal count, and the
// engine loads and registers group S only (its tp ranks split those tensors as usual).
#include <httplib.h>
#include <openssl/evp.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <shared_mutex>
#include <thread>
#include <vector>

#ifdef DELTAKV_HAVE_CUDA
#include <cuda_runtime.h>
#endif

#include "base/file_util.h"
#include "base/parallel.h"
#include "deltakv/deltakv.h"
#include "deltasync/checkpoint.h"
#include "deltasync/layout.h"
#include "deltasync/safetensors.h"

using namespace deltakv;
using namespace deltakv::deltasync;

namespace {

std::atomic<bool> g_stop{false};
void OnSignal(int) { g_stop.store(true); }

bool Contains(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

// The engine's sharding rule for a checkpoint tensor.
// --ep: expert-parallel groups for stacked expert tensors (world = ep x the groups' tp).
uint32_t g_ep = 1;

StatusOr<TensorLayout> LayoutFor(const TensorInfo& t, uint32_t tp) {
  // Stacked experts ([E, 2I, h] gate | up, [E, h, I] down): E / ep experts per group, each
  // split over the group's tp ranks (the intermediate dimension), as MoE engines shard them.
  if (Contains(t.name, "experts.w13") && t.shape.size() == 3 && tp % g_ep == 0)
    return TensorLayout::MoeExperts(t.shape, t.dtype, 1, 2, g_ep, tp / g_ep);
  if (Contains(t.name, "experts.w2") && t.shape.size() == 3 && tp % g_ep == 0)
    return TensorLayout::MoeExperts(t.shape, t.dtype, 2, 1, g_ep, tp / g_ep);
  const bool rows = Contains(t.name, "q_proj") || Contains(t.name, "k_proj") ||
                    Contains(t.name, "v_proj") || Contains(t.name, "gate_proj") ||
                    Contains(t.name, "up_proj") || Contains(t.name, "embed_tokens");
  const bool cols = Contains(t.name, "o_proj") || Contains(t.name, "down_proj");
  if (rows && !t.shape.empty() && t.shape[0] % tp == 0)
    return TensorLayout::ShardDim0(t.shape, t.dtype, tp);
  if (cols && t.shape.size() == 2 && t.shape[1] % tp == 0)
    return TensorLayout::ShardDim1(t.shape, t.dtype, tp);
  return TensorLayout::Replicated(t.shape, t.dtype, tp);
}

// Serving lock: requests hold it shared; a commit holds it exclusively (pause .. resume).
std::shared_mutex g_serving;

struct Weights {
  std::vector<std::string> names;
  std::vector<uint64_t> sizes;              // rank-local bytes per tensor
  std::vector<std::vector<uint8_t>> bytes;  // host memory: the live weights (cpu backend), or
                                            // what was read, until it moves to the device
  std::vector<uint8_t*> device;             // cuda: the live weights, one allocation per tensor
  bool on_device() const { return !device.empty(); }
  uint8_t* live(size_t i) { return on_device() ? device[i] : bytes[i].data(); }
  uint64_t total() const {
    uint64_t n = 0;
    for (uint64_t b : sizes) n += b;
    return n;
  }
};

#ifdef DELTAKV_HAVE_CUDA
Status Cuda(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return Status::Ok();
  return Internal(std::string("CUDA ") + what + ": " + cudaGetErrorString(e));
}
#define CUDA_OK(expr, what) RETURN_IF_ERROR(Cuda((expr), what))

// Pinned host memory, freed on destruction.
struct Pinned {
  uint8_t* ptr = nullptr;
  explicit Pinned(uint64_t n) {
    if (cudaMallocHost(reinterpret_cast<void**>(&ptr), std::max<uint64_t>(n, 1)) != cudaSuccess)
      ptr = nullptr;
  }
  ~Pinned() {
    if (ptr != nullptr) cudaFreeHost(ptr);
  }
  Pinned(const Pinned&) = delete;
  Pinned& operator=(const Pinned&) = delete;
};

// Moves every tensor of `w` into its own device allocation on `device`; the host copy is freed.
Status MoveToDevice(int device, Weights* w) {
  CUDA_OK(cudaSetDevice(device), "cudaSetDevice");
  for (size_t i = 0; i < w->bytes.size(); ++i) {
    uint8_t* d = nullptr;
    CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&d), std::max<uint64_t>(w->sizes[i], 1)),
            "cudaMalloc");
    w->device.push_back(d);
    CUDA_OK(cudaMemcpy(d, w->bytes[i].data(), w->sizes[i], cudaMemcpyHostToDevice), "upload");
    std::vector<uint8_t>().swap(w->bytes[i]);
  }
  return Status::Ok();
}

// One tensor's device bytes, downloaded into `out`.
Status Download(const Weights& w, size_t i, std::vector<uint8_t>* out) {
  out->resize(w.sizes[i]);
  CUDA_OK(cudaMemcpy(out->data(), w.device[i], w.sizes[i], cudaMemcpyDeviceToHost), "download");
  return Status::Ok();
}

// The full reload on a GPU: `next` is staged in pinned host memory first (outside the pause),
// then one host-to-device copy per tensor on one stream; *pause_ms covers only those copies.
Status ReloadDevice(const Weights& next, Weights* w, double* pause_ms) {
  Pinned host(next.total());
  if (host.ptr == nullptr) return ResourceExhausted("cudaMallocHost of the reload buffer");
  uint64_t at = 0;
  for (size_t i = 0; i < next.bytes.size(); ++i) {
    std::memcpy(host.ptr + at, next.bytes[i].data(), next.sizes[i]);
    at += next.sizes[i];
  }
  cudaStream_t stream;
  CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  std::unique_lock<std::shared_mutex> pause(g_serving);
  const auto start = std::chrono::steady_clock::now();
  Status s;
  at = 0;
  for (size_t i = 0; i < next.sizes.size() && s.ok(); ++i) {
    s = Cuda(cudaMemcpyAsync(w->device[i], host.ptr + at, next.sizes[i], cudaMemcpyHostToDevice,
                             stream),
             "reload copy");
    at += next.sizes[i];
  }
  if (s.ok()) s = Cuda(cudaStreamSynchronize(stream), "reload copy");
  *pause_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                  .count();
  pause.unlock();
  cudaStreamDestroy(stream);
  return s;
}

// The best of three copies of `bytes`, in milliseconds: host to device from pinned memory, or
// (device_to_device) between two device buffers, which reads each byte once and writes it once.
StatusOr<double> CopyBound(uint64_t bytes, bool device_to_device) {
  Pinned host(device_to_device ? 1 : bytes);
  if (host.ptr == nullptr) return ResourceExhausted("cudaMallocHost for the copy bound");
  if (!device_to_device) std::memset(host.ptr, 0x5a, bytes);
  uint8_t* dev = nullptr;
  uint8_t* src = nullptr;
  CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&dev), std::max<uint64_t>(bytes, 1)), "cudaMalloc");
  if (device_to_device) {
    CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&src), std::max<uint64_t>(bytes, 1)),
            "cudaMalloc");
    CUDA_OK(cudaMemset(src, 0x5a, bytes), "cudaMemset");
  }
  cudaStream_t stream;
  CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  double best = 0;
  Status s;
  for (int rep = 0; rep < 3 && s.ok(); ++rep) {
    const auto start = std::chrono::steady_clock::now();
    s = Cuda(device_to_device
                 ? cudaMemcpyAsync(dev, src, bytes, cudaMemcpyDeviceToDevice, stream)
                 : cudaMemcpyAsync(dev, host.ptr, bytes, cudaMemcpyHostToDevice, stream),
             "copy");
    if (s.ok()) s = Cuda(cudaStreamSynchronize(stream), "copy");
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    best = rep == 0 ? ms : std::min(best, ms);
  }
  cudaStreamDestroy(stream);
  cudaFree(dev);
  if (src != nullptr) cudaFree(src);
  RETURN_IF_ERROR(s);
  return best;
}
#endif

// Set by POST /v1/slow-pause: the pause callback first sleeps this long (fault injection, so a
// test can act while a commit is under way).
std::atomic<int> g_pause_delay_ms{0};

int Pause(void*) {
  if (int ms = g_pause_delay_ms.load(); ms > 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  }
  g_serving.lock();
  return 0;
}
int Resume(void*) {
  g_serving.unlock();
  return 0;
}

// Derived weights: this engine has none, but it counts what the hook reports, so tests can see
// that every commit names the touched regions.
std::atomic<uint64_t> g_derived_calls{0};
std::atomic<uint64_t> g_derived_bytes{0};
// Set by POST /v1/fail-derived: the next derived-weights callbacks fail (fault injection).
std::atomic<bool> g_fail_derived{false};

int Derived(void*, const char*, const deltakv_region* regions, size_t n) {
  // Runs inside the pause: one atomic add per call, not per region.
  g_derived_calls.fetch_add(1);
  uint64_t bytes = 0;
  for (size_t i = 0; i < n; ++i) bytes += regions[i].length;
  g_derived_bytes.fetch_add(bytes);
  return g_fail_derived.load() ? 1 : 0;
}

// --pp / --pp-stage: the pipeline stage this engine serves (1 / 0: every tensor).
uint32_t g_pp = 1, g_pp_stage = 0;

// Copies this rank's slice of every tensor of `ckpt` (of this engine's pipeline stage) into `w`
// (allocating when !existing).
Status LoadShards(const Checkpoint& ckpt, uint32_t rank, uint32_t tp, Weights* w, bool existing) {
  size_t count = 0;
  for (const auto& f : ckpt.files()) count += f.header().tensors.size();
  size_t i = 0, index = 0;
  for (const auto& f : ckpt.files()) {
    for (const TensorInfo& t : f.header().tensors) {
      if (index++ * g_pp / std::max<size_t>(count, 1) != g_pp_stage) continue;
      ASSIGN_OR_RETURN(TensorLayout layout, LayoutFor(t, tp));
      if (!existing) {
        w->names.push_back(t.name);
        w->sizes.push_back(layout.LocalBytes(rank).total);
        w->bytes.emplace_back(layout.LocalBytes(rank).total);
      } else if (i >= w->names.size() || w->names[i] != t.name ||
                 w->bytes[i].size() != layout.LocalBytes(rank).total) {
        return InvalidArgument("checkpoint layout differs from the loaded one at '" + t.name + "'");
      }
      uint8_t* local = w->bytes[i].data();
      auto canonical = f.TensorBytes(t);
      RETURN_IF_ERROR(layout.ForEachPiece(0, canonical.size(), [&](const LayoutPiece& piece) {
        if (piece.rank == rank) {
          std::memcpy(local + piece.local_offset, canonical.data() + piece.canonical_offset,
                      piece.length);
        }
      }));
      ++i;
    }
  }
  return Status::Ok();
}

// This rank's shards of the checkpoint in `dir`, which must hold the same tensors with the same
// local sizes as `live` (InvalidArgument naming the first difference).
StatusOr<Weights> LoadLike(const std::string& dir, uint32_t rank, uint32_t tp,
                           const Weights& live) {
  ASSIGN_OR_RETURN(Checkpoint ckpt, Checkpoint::Open(dir));
  Weights w;
  RETURN_IF_ERROR(LoadShards(ckpt, rank, tp, &w, /*existing=*/false));
  if (w.names != live.names) {
    return InvalidArgument("checkpoint '" + dir + "' has other tensors than the loaded one");
  }
  for (size_t i = 0; i < live.names.size(); ++i) {
    if (w.sizes[i] != live.sizes[i]) {
      return InvalidArgument("tensor '" + live.names[i] + "' is " + std::to_string(w.sizes[i]) +
                             " bytes on this rank in '" + dir + "', " +
                             std::to_string(live.sizes[i]) + " loaded");
    }
  }
  return w;
}

// The baselines' copy threads: a crew started with the rank, as the cpu backend keeps one, so
// that the baselines run on their CPUs as the scatter they are compared with does.
WorkerCrew& BaselineCrew() {
  static WorkerCrew crew(DefaultThreads() - 1);
  return crew;
}

// Copies every tensor of `src` over the same-sized tensor of `dst` on `threads` threads, each
// taking an equal share of the bytes (tensor sizes are far from even, so splitting by tensor
// would leave the embedding's thread running alone).
void CopyWeights(const Weights& src, Weights* dst, unsigned threads) {
  uint64_t total = 0;
  for (const auto& b : src.bytes) total += b.size();
  auto copy_share = [&](uint64_t begin, uint64_t end) {
    uint64_t pos = 0;
    for (size_t i = 0; i < src.bytes.size() && pos < end; ++i) {
      uint64_t n = src.bytes[i].size();
      uint64_t lo = std::max(begin, pos), hi = std::min(end, pos + n);
      if (lo < hi) {
        std::memcpy(dst->bytes[i].data() + (lo - pos), src.bytes[i].data() + (lo - pos), hi - lo);
      }
      pos += n;
    }
  };
  threads = static_cast<unsigned>(std::max<uint64_t>(1, std::min<uint64_t>(threads, total)));
  BaselineCrew().Run(
      threads, [&](unsigned t) { copy_share(total * t / threads, total * (t + 1) / threads); });
}

// Every 64-byte memory line of `live` that holds a byte differing from `parent` (same layout).
std::vector<uint8_t*> DifferingLines(const Weights& parent, Weights* live) {
  std::vector<uint8_t*> lines;
  for (size_t i = 0; i < live->bytes.size(); ++i) {
    uint8_t* base = live->bytes[i].data();
    const uint8_t* old = parent.bytes[i].data();
    const size_t n = live->bytes[i].size();
    uintptr_t last_line = ~uintptr_t{0};
    for (size_t at = 0; at < n;) {
      // Compare 8 bytes at a time; only a differing word is looked at byte by byte.
      if (at + 8 <= n) {
        uint64_t a, b;
        std::memcpy(&a, base + at, 8);
        std::memcpy(&b, old + at, 8);
        if (a == b) {
          at += 8;
          continue;
        }
      }
      const size_t stop = std::min(n, at + 8);
      for (; at < stop; ++at) {
        if (base[at] == old[at]) continue;
        const uintptr_t line = reinterpret_cast<uintptr_t>(base + at) >> 6;
        if (line != last_line) lines.push_back(base + at);
        last_line = line;
      }
    }
  }
  return lines;
}

// One store per line (the value already there) split over `threads` threads; milliseconds.
double TouchLines(const std::vector<uint8_t*>& lines, unsigned threads) {
  threads = static_cast<unsigned>(std::max<size_t>(1, std::min<size_t>(threads, lines.size())));
  auto touch = [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) {
      volatile uint8_t* p = lines[i];
      *p = *p;
    }
  };
  const auto start = std::chrono::steady_clock::now();
  BaselineCrew().Run(threads, [&](unsigned t) {
    touch(lines.size() * t / threads, lines.size() * (t + 1) / threads);
  });
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

// sha256 of the live weights (downloaded tensor by tensor from the device with --backend cuda).
std::string Sha256Hex(const Weights& w) {
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr);
  if (!w.on_device()) {
    for (const auto& b : w.bytes) EVP_DigestUpdate(ctx, b.data(), b.size());
  }
#ifdef DELTAKV_HAVE_CUDA
  std::vector<uint8_t> buf;
  for (size_t i = 0; i < w.device.size(); ++i) {
    if (!Download(w, i, &buf).ok()) {
      EVP_MD_CTX_free(ctx);
      return "download-failed";
    }
    EVP_DigestUpdate(ctx, buf.data(), buf.size());
  }
#endif
  unsigned char md[32];
  unsigned len = 0;
  EVP_DigestFinal_ex(ctx, md, &len);
  EVP_MD_CTX_free(ctx);
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned i = 0; i < len; ++i) {
    out += kHex[md[i] >> 4];
    out += kHex[md[i] & 15];
  }
  return out;
}

int RunRank(const std::string& dir, uint32_t rank, uint32_t tp, uint32_t tp_world,
            uint32_t first_rank, const std::string& backend, const std::string& shm, int port,
            const std::string& port_dir, bool poll, std::string version,
            uint64_t staging_reserve_bytes) {
  // This process is global rank `grank` of a `gworld`-rank group: layouts and shards use it.
  const uint32_t gworld = tp_world > 0 ? tp_world : tp;
  const uint32_t grank = first_rank + rank;
  auto ckpt = Checkpoint::Open(dir);
  if (!ckpt.ok()) {
    std::fprintf(stderr, "rank %u: %s\n", rank, ckpt.status().ToString().c_str());
    return 2;
  }
  if (version.empty()) version = CheckpointVersionId(dir);
  deltakv_engine_params p = deltakv_engine_default_params();
  p.shm_name = shm.c_str();
  p.rank = static_cast<int32_t>(rank);
  p.world_size = static_cast<int32_t>(tp);
  if (tp_world > 0) {
    p.first_global_rank = static_cast<int32_t>(first_rank);
    p.global_world_size = static_cast<int32_t>(tp_world);
  }
  p.initial_version = version.c_str();
  p.poll_mode = poll ? 1 : 0;
  p.backend = backend.c_str();
  p.staging_reserve_bytes = staging_reserve_bytes;
  deltakv_engine* engine = nullptr;
  if (deltakv_engine_create(&p, &engine) != DELTAKV_OK) {
    std::fprintf(stderr, "rank %u: %s\n", rank, deltakv_last_error());
    return 3;
  }
  Weights w;
  Status loaded = LoadShards(*ckpt, grank, gworld, &w, /*existing=*/false);
  if (!loaded.ok()) {
    std::fprintf(stderr, "rank %u: %s\n", rank, loaded.ToString().c_str());
    return 2;
  }
  if (backend == "cuda") {
#ifdef DELTAKV_HAVE_CUDA
    int devices = 0;
    Status moved = Cuda(cudaGetDeviceCount(&devices), "cudaGetDeviceCount");
    if (moved.ok() && devices == 0) moved = FailedPrecondition("no CUDA device");
    if (moved.ok()) moved = MoveToDevice(static_cast<int>(rank) % devices, &w);
    if (!moved.ok()) {
      std::fprintf(stderr, "rank %u: %s\n", rank, moved.ToString().c_str());
      return 2;
    }
#else
    std::fprintf(stderr, "rank %u: this build has no CUDA (configure with -DDELTAKV_CUDA=ON)\n",
                 rank);
    return 2;
#endif
  }
  for (size_t i = 0; i < w.names.size(); ++i) {
    const TensorInfo& t = *ckpt->Find(w.names[i])->info;
    auto layout = LayoutFor(t, gworld);
    int64_t elements = static_cast<int64_t>(w.sizes[i] / DTypeSize(t.dtype));
    std::string json = layout->ToJson();
    if (deltakv_engine_register_tensor(engine, w.names[i].c_str(), w.live(i),
                                       std::string(DTypeName(t.dtype)).c_str(), &elements, 1,
                                       json.c_str()) != DELTAKV_OK) {
      std::fprintf(stderr, "rank %u: register '%s': %s\n", rank, w.names[i].c_str(),
                   deltakv_last_error());
      return 2;
    }
  }
  deltakv_callbacks cb = deltakv_default_callbacks();
  cb.pause = Pause;
  cb.resume = Resume;
  cb.derived = Derived;
  deltakv_engine_set_callbacks(engine, &cb);
  if (deltakv_engine_start(engine) != DELTAKV_OK) {
    std::fprintf(stderr, "rank %u: start: %s\n", rank, deltakv_last_error());
    return 3;
  }

  httplib::Server server;
  auto state = [&](bool full) {
    std::shared_lock<std::shared_mutex> lock(g_serving);
    nlohmann::json j = {{"rank", rank},
                        {"global_rank", grank},
                        {"global_world", gworld},
                        {"answer", Sha256Hex(w)},
                        {"version", deltakv_engine_version_id(engine)},
                        {"policy_version", deltakv_engine_policy_version(engine)},
                        {"engine_state", static_cast<int>(deltakv_engine_get_state(engine))}};
    if (full) {
      j["tensors"] = w.names.size();
      j["bytes"] = w.total();
      j["backend"] = backend;
      deltakv_sync_stats st;
      st.struct_size = sizeof(st);
      if (deltakv_engine_get_sync_stats(engine, &st) == DELTAKV_OK) {
        j["sync_stats"] = {{"sync_id", st.sync_id}, {"outcome", st.outcome},
                           {"parts", st.parts},     {"bytes", st.bytes},
                           {"stage_us", st.stage_us}, {"pause_us", st.pause_us}};
      }
      j["derived_calls"] = g_derived_calls.load();
      j["derived_bytes"] = g_derived_bytes.load();
    }
    return j;
  };
  server.Get("/v1/generate", [&](const httplib::Request&, httplib::Response& res) {
    res.set_content(state(false).dump(), "application/json");
  });
  server.Get("/v1/state", [&](const httplib::Request&, httplib::Response& res) {
    res.set_content(state(true).dump(), "application/json");
  });
  // Fault injection for tests: flip bits of the live weights behind the sidecar's back
  // ({"tensor": NAME, "offset": local byte offset, "xor": byte}), or make the derived-weights
  // callback fail from now on ({"fail": true}).
  server.Post("/v1/corrupt", [&](const httplib::Request& req, httplib::Response& res) {
    auto j = nlohmann::json::parse(req.body, nullptr, false);
    if (j.is_discarded() || !j.contains("tensor") || !j["tensor"].is_string() ||
        !j.contains("offset") || !j["offset"].is_number_unsigned()) {
      res.status = 400;
      return;
    }
    std::unique_lock<std::shared_mutex> lock(g_serving);
    auto it = std::find(w.names.begin(), w.names.end(), j["tensor"].get<std::string>());
    const uint64_t offset = j["offset"].get<uint64_t>();
    const size_t i = static_cast<size_t>(it - w.names.begin());
    if (it == w.names.end() || offset >= w.sizes[i]) {
      res.status = 404;
      return;
    }
    const uint8_t x = static_cast<uint8_t>(j.value("xor", 1));
    if (!w.on_device()) {
      w.bytes[i][offset] ^= x;
    }
#ifdef DELTAKV_HAVE_CUDA
    else {
      uint8_t b = 0;
      if (cudaMemcpy(&b, w.device[i] + offset, 1, cudaMemcpyDeviceToHost) != cudaSuccess ||
          (b ^= x, cudaMemcpy(w.device[i] + offset, &b, 1, cudaMemcpyHostToDevice)) !=
              cudaSuccess) {
        res.status = 500;
        return;
      }
    }
#endif
    res.set_content("{}", "application/json");
  });
  server.Post("/v1/slow-pause", [&](const httplib::Request& req, httplib::Response& res) {
    auto j = nlohmann::json::parse(req.body, nullptr, false);
    if (j.is_discarded() || !j.contains("ms") || !j["ms"].is_number_unsigned()) {
      res.status = 400;
      return;
    }
    g_pause_delay_ms.store(j["ms"].get<int>());
    res.set_content("{}", "application/json");
  });
  server.Post("/v1/fail-derived", [&](const httplib::Request&, httplib::Response& res) {
    g_fail_derived.store(true);
    res.set_content("{}", "application/json");
  });
  server.Post("/v1/dump", [&](const httplib::Request& req, httplib::Response& res) {
    auto j = nlohmann::json::parse(req.body, nullptr, false);
    if (j.is_discarded() || !j.contains("path") || !j["path"].is_string()) {
      res.status = 400;
      return;
    }
    std::shared_lock<std::shared_mutex> lock(g_serving);
    std::vector<TensorToWrite> out;
    std::vector<std::vector<uint8_t>> downloaded(w.on_device() ? w.names.size() : 0);
#ifdef DELTAKV_HAVE_CUDA
    for (size_t i = 0; i < downloaded.size(); ++i) {
      if (Status d = Download(w, i, &downloaded[i]); !d.ok()) {
        res.status = 500;
        res.set_content(d.ToString(), "text/plain");
        return;
      }
    }
#endif
    for (size_t i = 0; i < w.names.size(); ++i) {
      const std::vector<uint8_t>& b = w.on_device() ? downloaded[i] : w.bytes[i];
      out.push_back({w.names[i], DType::kU8, {b.size()}, b});
    }
    Status s = WriteSafetensors(j["path"].get<std::string>(), out, {});
    res.status = s.ok() ? 200 : 500;
    res.set_content(s.ok() ? "{}" : s.ToString(), "application/json");
  });
  // A full reload of another checkpoint: the baseline a delta sync is compared with, so it is
  // the fastest full copy this engine can do. The rank's shards are read into memory first
  // (faulted in, outside the pause, as a sync prepares its scatter), and the pause covers only
  // the copy, on as many threads as the cpu backend's scatter uses. total_ms includes the read.
  server.Post("/v1/reload", [&](const httplib::Request& req, httplib::Response& res) {
    auto j = nlohmann::json::parse(req.body, nullptr, false);
    if (j.is_discarded() || !j.contains("checkpoint") || !j["checkpoint"].is_string()) {
      res.status = 400;
      return;
    }
    auto fail = [&](int status, const Status& s) {
      res.status = status;
      res.set_content(nlohmann::json{{"ok", false}, {"error", s.ToString()}}.dump(),
                      "application/json");
    };
    auto start = std::chrono::steady_clock::now();
    auto other = LoadLike(j["checkpoint"].get<std::string>(), grank, gworld, w);
    if (!other.ok()) return fail(400, other.status());
    const Weights& next = *other;
    double pause_ms = 0;
    unsigned threads = 1;  // cuda: one stream of copies
    if (!w.on_device()) {
      // The cpu backend's scatter runs on DefaultThreads() threads.
      threads = DefaultThreads();
      std::unique_lock<std::shared_mutex> pause(g_serving);
      auto paused = std::chrono::steady_clock::now();
      CopyWeights(next, &w, threads);
      pause_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - paused)
                     .count();
    }
#ifdef DELTAKV_HAVE_CUDA
    else if (Status r = ReloadDevice(next, &w, &pause_ms); !r.ok()) {
      return fail(500, r);
    }
#endif
    auto end = std::chrono::steady_clock::now();
    res.set_content(
        nlohmann::json{
            {"ok", true},
            {"bytes", next.total()},
            {"threads", threads},
            {"total_ms", std::chrono::duration<double, std::milli>(end - start).count()},
            {"pause_ms", pause_ms}}
            .dump(),
        "application/json");
  });
  // Lines found by a touch-bound request with "hold", timed by the next one with "start_unix_ns".
  std::mutex held_mu;
  std::optional<std::vector<uint8_t*>> held_lines;
  server.Post("/v1/touch-bound", [&](const httplib::Request& req, httplib::Response& res) {
    auto j = nlohmann::json::parse(req.body, nullptr, false);
    auto fail = [&](int status, const Status& s) {
      res.status = status;
      res.set_content(nlohmann::json{{"ok", false}, {"error", s.ToString()}}.dump(),
                      "application/json");
    };
    const bool has_parent = !j.is_discarded() && j.contains("parent") && j["parent"].is_string();
    const bool has_start =
        !j.is_discarded() && j.contains("start_unix_ns") && j["start_unix_ns"].is_number_unsigned();
    if (j.is_discarded() || has_parent == has_start) {
      return fail(400, InvalidArgument("expected {\"parent\": DIR[, \"hold\": true]} or "
                                       "{\"start_unix_ns\": T}"));
    }
    if (w.on_device()) {
      return fail(400, FailedPrecondition("touch-bound times host memory lines (the cpu backend); "
                                          "on cuda use /v1/copy-bound"));
    }
    const uint64_t round_ns = j.value("round_ns", uint64_t{0});
    const uint32_t rounds = j.value("rounds", 2u);
    std::vector<uint8_t*> lines;
    if (has_parent) {
      auto parent = LoadLike(j["parent"].get<std::string>(), grank, gworld, w);
      if (!parent.ok()) return fail(400, parent.status());
      std::shared_lock<std::shared_mutex> serving(g_serving);
      lines = DifferingLines(*parent, &w);
      if (j.value("hold", false)) {
        const size_t count = lines.size();
        std::lock_guard<std::mutex> lock(held_mu);
        held_lines = std::move(lines);
        res.set_content(nlohmann::json{{"ok", true}, {"lines", count}, {"held", true}}.dump(),
                        "application/json");
        return;
      }
    } else {
      std::lock_guard<std::mutex> lock(held_mu);
      if (!held_lines) {
        return fail(400, FailedPrecondition("no lines held: send {\"parent\": DIR, \"hold\": "
                                            "true} first"));
      }
      // Checked before the request uses up the held lines.
      if (rounds < 1 || rounds > 16 || (rounds > 1 && round_ns == 0)) {
        return fail(400, InvalidArgument("rounds is 1 to 16; more than one needs round_ns > 0"));
      }
      lines = std::move(*held_lines);
      held_lines.reset();
    }
    const unsigned threads = DefaultThreads();
    nlohmann::json reply{{"ok", true}, {"lines", lines.size()}, {"threads", threads}};
    std::unique_lock<std::shared_mutex> hold(g_serving);
    if (!has_start) {
      // The better of two passes: a floor for the scatter, whose lines staging has just read.
      const double first = TouchLines(lines, threads);
      reply["touch_ms"] = std::min(first, TouchLines(lines, threads));
    } else {
      // Every rank times its passes from the same instants, as their commits' scatters run:
      // pass r starts at start_unix_ns + r * round_ns.
      const uint64_t start = j["start_unix_ns"].get<uint64_t>();
      double best = 0, late_us = 0;
      nlohmann::json ends = nlohmann::json::array();
      for (uint32_t r = 0; r < rounds; ++r) {
        const auto at =
            std::chrono::system_clock::time_point(std::chrono::nanoseconds(start + r * round_ns));
        std::this_thread::sleep_until(at);
        late_us = std::max(late_us, std::chrono::duration<double, std::micro>(
                                        std::chrono::system_clock::now() - at)
                                        .count());
        const double ms = TouchLines(lines, threads);
        best = r == 0 ? ms : std::min(best, ms);
        ends.push_back(std::chrono::duration_cast<std::chrono::nanoseconds>(
                           std::chrono::system_clock::now().time_since_epoch())
                           .count());
      }
      reply["touch_ms"] = best;
      reply["late_us"] = late_us;
      reply["round_end_unix_ns"] = ends;
    }
    hold.unlock();
    res.set_content(reply.dump(), "application/json");
  });
  server.Post("/v1/copy-bound", [&](const httplib::Request& req, httplib::Response& res) {
    auto j = nlohmann::json::parse(req.body, nullptr, false);
    auto fail = [&](int status, const Status& s) {
      res.status = status;
      res.set_content(nlohmann::json{{"ok", false}, {"error", s.ToString()}}.dump(),
                      "application/json");
    };
    if (j.is_discarded() || !j.contains("bytes") || !j["bytes"].is_number_unsigned() ||
        j["bytes"].get<uint64_t>() == 0 || j["bytes"].get<uint64_t>() > (uint64_t{16} << 30)) {
      return fail(400, InvalidArgument("expected {\"bytes\": N}, 0 < N <= 16 GiB"));
    }
    if (!w.on_device()) {
      return fail(400, FailedPrecondition("copy-bound needs --backend cuda"));
    }
#ifdef DELTAKV_HAVE_CUDA
    const uint64_t bytes = j["bytes"].get<uint64_t>();
    const std::string kind = j.value("kind", "h2d");
    if (kind != "h2d" && kind != "d2d") {
      return fail(400, InvalidArgument("kind is h2d or d2d"));
    }
    auto ms = CopyBound(bytes, kind == "d2d");
    if (!ms.ok()) return fail(500, ms.status());
    res.set_content(nlohmann::json{{"ok", true},
                                   {"kind", kind},
                                   {"bytes", bytes},
                                   {"ms", *ms},
                                   {"gbps", static_cast<double>(bytes) / (*ms * 1e6)}}
                        .dump(),
                    "application/json");
#endif
  });
  int bound = port == 0 ? server.bind_to_any_port("127.0.0.1")
                        : (server.bind_to_port("127.0.0.1", port + static_cast<int>(rank))
                               ? port + static_cast<int>(rank)
                               : -1);
  if (bound <= 0) return 3;
  if (!port_dir.empty()) {
    (void)WriteFileAtomic(port_dir + "/rank" + std::to_string(rank) + ".port",
                          std::to_string(bound) + "\n");
  }
  std::thread http([&] { server.listen_after_bind(); });
  std::fprintf(stderr, "rank %u/%u: serving %s on 127.0.0.1:%d\n", rank, tp, version.c_str(),
               bound);
  while (!g_stop.load()) {
    if (poll) {
      // The scheduler loop: a "step", then the sync hook between steps.
      std::unique_lock<std::shared_mutex> step(g_serving);
      int32_t committed = 0;
      if (const deltakv_status st = deltakv_engine_poll(engine, &committed); st != DELTAKV_OK) {
        std::fprintf(stderr, "rank %u: poll: %s: %s\n", rank, deltakv_status_name(st),
                     deltakv_last_error());
      }
      step.unlock();
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  server.stop();
  http.join();
  deltakv_engine_free(engine);
#ifdef DELTAKV_HAVE_CUDA
  for (uint8_t* d : w.device) cudaFree(d);
#endif
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"deltakv reference engine (tensor parallel rank processes)"};
  std::string dir, shm = "deltakv", port_dir, version, backend = "cpu";
  uint32_t tp = 1, tp_world = 0, first_rank = 0;
  uint64_t staging_reserve_mib = 0;
  int rank = -1, port = 0;
  bool poll = false;
  app.add_option("--checkpoint", dir, "Checkpoint directory")->required();
  app.add_option("--tp", tp, "Tensor-parallel degree (rank processes)")->check(CLI::Range(1u, 64u));
  app.add_option("--tp-world", tp_world,
                 "Serve a slice of a larger tensor-parallel group of this many ranks (default: --tp)")
      ->check(CLI::Range(1u, 4096u));
  app.add_option("--first-rank", first_rank,
                 "With --tp-world: this engine's ranks are global ranks first-rank..first-rank+tp-1");
  app.add_option("--backend", backend, "Device backend: cpu (host memory) or cuda")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_option("--shm", shm, "The sidecar's shared-memory name");
  app.add_option("--port", port, "HTTP port of rank 0 (rank r uses port + r); 0 = any");
  app.add_option("--port-dir", port_dir, "Write rank<r>.port files here");
  app.add_option("--version", version, "Version id of the loaded checkpoint");
  app.add_flag("--poll", poll, "Apply commits from the scheduler loop (deltakv_engine_poll)");
  app.add_option("--staging-reserve-mib", staging_reserve_mib,
                 "Device memory each rank reserves for staging at start (cuda backend)")
      ->check(CLI::Range(uint64_t{0}, uint64_t{1} << 30));
  app.add_option("--ep", g_ep,
                 "Expert-parallel groups for stacked expert tensors ([E, ...]: E/ep experts per "
                 "group of world/ep ranks)")
      ->check(CLI::Range(1u, 64u));
  app.add_option("--pp", g_pp, "Pipeline stages the checkpoint's tensors are cut into")
      ->check(CLI::Range(1u, 64u));
  app.add_option("--pp-stage", g_pp_stage, "With --pp: the stage this engine serves (0-based)");
  app.add_option("--rank", rank, "Internal: run one rank");
  CLI11_PARSE(app, argc, argv);
  if (g_pp_stage >= g_pp) {
    std::fprintf(stderr, "--pp-stage %u is not below --pp %u\n", g_pp_stage, g_pp);
    return 2;
  }
  signal(SIGINT, OnSignal);
  signal(SIGTERM, OnSignal);
  if (tp_world > 0 && first_rank + tp > tp_world) {
    std::fprintf(stderr, "--first-rank %u + --tp %u exceeds --tp-world %u\n", first_rank, tp,
                 tp_world);
    return 2;
  }
  if (tp_world == 0 && first_rank != 0) {
    std::fprintf(stderr, "--first-rank needs --tp-world\n");
    return 2;
  }
  if (const uint32_t world = tp_world > 0 ? tp_world : tp; world % g_ep != 0) {
    std::fprintf(stderr, "--ep %u does not divide the world of %u ranks\n", g_ep, world);
    return 2;
  }
  if (rank >= 0)
    return RunRank(dir, static_cast<uint32_t>(rank), tp, tp_world, first_rank, backend, shm, port,
                   port_dir, poll, version, staging_reserve_mib << 20);

  // Parent: one process per rank, as real engines run tensor parallelism.
  std::vector<pid_t> children;
  for (uint32_t r = 0; r < tp; ++r) {
    pid_t pid = fork();
    if (pid == 0) {
      std::vector<std::string> args(argv, argv + argc);
      args.push_back("--rank");
      args.push_back(std::to_string(r));
      std::vector<char*> cargs;
      for (auto& a : args) cargs.push_back(a.data());
      cargs.push_back(nullptr);
      execv("/proc/self/exe", cargs.data());
      _exit(127);
    }
    children.push_back(pid);
  }
  int rc = 0;
  size_t alive = children.size();
  while (alive > 0) {
    int status = 0;
    pid_t done = waitpid(-1, &status, WNOHANG);
    if (done > 0) {
      --alive;
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) rc = 1;
      continue;
    }
    if (g_stop.load()) {
      for (pid_t c : children) kill(c, SIGTERM);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return rc;
}
