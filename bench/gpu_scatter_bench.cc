// The commit pause on a GPU: the cuda backend's scatter of a sparse delta into a model's
// weights in device memory, next to a full reload of the same model from pinned host memory
// (one host-to-device copy of every byte, what an engine pays without deltas at the very
// least) in the same run. Also: the time to prepare (upload) the scatter before the pause, the
// gather of old bytes, and a device-to-device copy of the whole model (the HBM bound).
// Every commit is verified against a host mirror. JSON lines.
//
//   gpu_scatter_bench [--size-mib 4096] [--densities 0.001,0.01,0.05] [--repeat 3]
//
// Exits 2 without a CUDA device.
#include <cuda_runtime.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstring>
#include <random>
#include <sstream>
#include <vector>

#include "bench_util.h"
#include "shim/device_backend.h"

using namespace deltakv;
using namespace deltakv::shim;
using deltakv::bench::Stopwatch;

namespace {

void Check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "gpu_scatter_bench: %s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

void Check(const Status& s, const char* what) {
  if (!s.ok()) {
    std::fprintf(stderr, "gpu_scatter_bench: %s: %s\n", what, s.ToString().c_str());
    std::exit(1);
  }
}

}  // namespace

int main(int argc, char** argv) {
  uint64_t size_mib = 4096;
  std::string densities_arg = "0.001,0.01,0.05";
  int repeat = 3;
  CLI::App app{"cuda backend scatter vs full reload"};
  app.add_option("--size-mib", size_mib);
  app.add_option("--densities", densities_arg);
  app.add_option("--repeat", repeat);
  CLI11_PARSE(app, argc, argv);
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::fprintf(stderr, "gpu_scatter_bench: no CUDA device\n");
    return 2;
  }
  bench::PrintEnvironment("gpu_scatter_bench");
  cudaDeviceProp prop{};
  Check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  const uint64_t size = size_mib << 20;
  uint8_t* weights = nullptr;
  uint8_t* copy = nullptr;
  uint8_t* pinned = nullptr;
  Check(cudaMalloc(&weights, size), "cudaMalloc weights");
  Check(cudaMalloc(&copy, size), "cudaMalloc copy");
  Check(cudaMallocHost(&pinned, size), "cudaMallocHost");
  std::vector<uint8_t> mirror(size);
  std::mt19937_64 rng(42);
  for (uint64_t i = 0; i < size; i += 8) {
    uint64_t v = rng();
    std::memcpy(&mirror[i], &v, std::min<uint64_t>(8, size - i));
  }
  std::memcpy(pinned, mirror.data(), size);

  // Baselines: a full reload from pinned host memory, and a device-to-device copy.
  double reload_s = 1e30, d2d_s = 1e30;
  for (int r = 0; r < repeat; ++r) {
    Stopwatch w;
    Check(cudaMemcpy(weights, pinned, size, cudaMemcpyHostToDevice), "full reload");
    reload_s = std::min(reload_s, w.Seconds());
    Stopwatch w2;
    Check(cudaMemcpy(copy, weights, size, cudaMemcpyDeviceToDevice), "d2d");
    Check(cudaDeviceSynchronize(), "sync");
    d2d_s = std::min(d2d_s, w2.Seconds());
  }
  Check(cudaFree(copy), "cudaFree");
  auto backend = MakeDeviceBackend("cuda");
  Check(backend.status(), "cuda backend");

  std::stringstream ds(densities_arg);
  for (std::string tok; std::getline(ds, tok, ',');) {
    const double density = std::stod(tok);
    // Changed bf16 elements at random positions; runs closer than 32 bytes merged, as the
    // planner does. Ops in parts of at most 4M, as plan parts arrive.
    std::geometric_distribution<uint64_t> gap(density);
    std::vector<std::pair<uint64_t, uint64_t>> runs;
    for (uint64_t e = gap(rng); e * 2 + 2 <= size; e += 1 + gap(rng)) {
      const uint64_t off = e * 2;
      if (!runs.empty() && off - (runs.back().first + runs.back().second) <= 32) {
        runs.back().second = off + 2 - runs.back().first;
      } else {
        runs.push_back({off, 2});
      }
    }
    uint64_t bytes = 0, lines = 0, last_line = UINT64_MAX;
    for (auto& [off, len] : runs) {
      bytes += len;
      uint64_t first = off / 64, last = (off + len - 1) / 64;
      lines += last - first + 1 - (first == last_line ? 1 : 0);
      last_line = last;
    }
    constexpr size_t kOpsPerPart = 4u << 20;
    std::vector<std::unique_ptr<PreparedScatter>> prepared;
    std::vector<CopyOp> gather_ops;
    std::vector<uint8_t> old_bytes(bytes);
    Stopwatch prep;
    for (size_t begin = 0; begin < runs.size(); begin += kOpsPerPart) {
      const size_t end = std::min(runs.size(), begin + kOpsPerPart);
      ScatterBatch batch;
      uint64_t part_bytes = 0;
      for (size_t i = begin; i < end; ++i) part_bytes += runs[i].second;
      batch.data.resize(part_bytes);
      uint8_t* at = batch.data.data();
      for (size_t i = begin; i < end; ++i) {
        auto [off, len] = runs[i];
        for (uint64_t k = 0; k < len; ++k) at[k] = static_cast<uint8_t>(mirror[off + k] ^ 0x5a);
        std::memcpy(&mirror[off], at, len);
        batch.ops.push_back({weights + off, at, len});
        at += len;
      }
      auto p = backend.value()->PrepareScatter(std::move(batch));
      Check(p.status(), "PrepareScatter");
      prepared.push_back(std::move(p).value());
    }
    const double prepare_s = prep.Seconds();
    {
      uint64_t at = 0;
      for (auto& [off, len] : runs) {
        gather_ops.push_back({weights + off, old_bytes.data() + at, len});
        at += len;
      }
    }
    Stopwatch g;
    Check(backend.value()->Gather(gather_ops), "Gather");
    const double gather_s = g.Seconds();
    Stopwatch pause;
    for (auto& p : prepared) Check(backend.value()->CommitScatter(*p), "CommitScatter");
    const double pause_s = pause.Seconds();
    // Verify every byte, then restore the device copy for the next density.
    std::vector<uint8_t> back(size);
    Check(cudaMemcpy(back.data(), weights, size, cudaMemcpyDeviceToHost), "verify download");
    const bool verified = back == mirror;
    std::memcpy(pinned, mirror.data(), size);
    bench::PrintResult({{"bench", "gpu_scatter_bench"},
                        {"device", prop.name},
                        {"model_bytes", size},
                        {"element_density", density},
                        {"runs", runs.size()},
                        {"changed_bytes", bytes},
                        {"touched_line_fraction", static_cast<double>(lines) / (size / 64)},
                        {"prepare_ms", prepare_s * 1e3},
                        {"gather_ms", gather_s * 1e3},
                        {"pause_ms", pause_s * 1e3},
                        {"full_reload_ms", reload_s * 1e3},
                        {"d2d_copy_ms", d2d_s * 1e3},
                        {"pause_vs_full_reload", pause_s / reload_s},
                        {"verified", verified}});
    if (!verified) return 1;
  }
  cudaFree(weights);
  cudaFreeHost(pinned);
  return 0;
}
