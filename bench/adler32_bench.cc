// Adler-32 benchmarks. Prints the environment, then one JSON line per result, each with the
// baseline it is compared with, measured in the same run:
//   adler32_full         full pass of every implementation vs zlib's adler32, per buffer size
//   adler32_incremental  AdlerDelta over k changed bytes of a 256 MiB tensor vs a full recompute
//   adler32_xor_run      AdlerDelta::AddXorRun over a whole tensor's XOR buffer vs a full pass
//
// Usage: adler32_bench [full|incremental|xor_run|all]   (default all)
#include <zlib.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "deltasync/adler32.h"

#ifndef DELTAKV_BUILD_TYPE
#define DELTAKV_BUILD_TYPE "unknown"
#endif

namespace deltakv::deltasync {
namespace {

#ifdef NDEBUG
constexpr bool kOptimized = true;
#else
constexpr bool kOptimized = false;
#endif

constexpr size_t kTensorBytes = size_t{256} << 20;

// Keeps results observable so no measured call is optimized away.
volatile uint32_t g_sink = 0;

double NowNs() {
  return static_cast<double>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                 std::chrono::steady_clock::now().time_since_epoch())
                                 .count());
}

// Best time of `reps` runs of fn, each repeated enough to last >= min_ns; ns per call.
template <typename Fn>
double BestNs(Fn&& fn, int reps = 5, double min_ns = 2e8) {
  int iters = 1;
  for (;;) {  // calibrate
    const double t0 = NowNs();
    for (int i = 0; i < iters; ++i) fn();
    const double dt = NowNs() - t0;
    if (dt >= min_ns / 4 || iters >= (1 << 24)) {
      iters = std::max(1, static_cast<int>(iters * (min_ns / std::max(dt, 1.0))));
      break;
    }
    iters *= 4;
  }
  double best = 1e300;
  for (int r = 0; r < reps; ++r) {
    const double t0 = NowNs();
    for (int i = 0; i < iters; ++i) fn();
    best = std::min(best, (NowNs() - t0) / iters);
  }
  return best;
}

std::string CpuModel() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) return line.substr(colon + 2);
    }
  }
  return "unknown";
}

std::string Common() {
  return std::string("\"build_type\":\"") + DELTAKV_BUILD_TYPE +
         "\",\"optimized\":" + (kOptimized ? "true" : "false");
}

std::vector<uint8_t> RandomBytes(size_t n, uint64_t seed) {
  std::vector<uint8_t> v(n);
  std::mt19937_64 rng(seed);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const uint64_t r = rng();
    for (int k = 0; k < 8; ++k) v[i + k] = static_cast<uint8_t>(r >> (8 * k));
  }
  for (; i < n; ++i) v[i] = static_cast<uint8_t>(rng());
  return v;
}

void PrintEnvironment() {
  std::string impls;
  for (Adler32Impl impl : SupportedAdler32Impls()) {
    if (!impls.empty()) impls += ",";
    impls += "\"" + std::string(Adler32ImplName(impl)) + "\"";
  }
  std::printf(
      "{\"bench\":\"env\",\"cpu\":\"%s\",\"impls\":[%s],\"dispatched\":\"%s\",\"zlib\":\"%s\","
      "%s}\n",
      CpuModel().c_str(), impls.c_str(),
      std::string(Adler32ImplName(SupportedAdler32Impls().back())).c_str(), zlibVersion(),
      Common().c_str());
}

uint32_t Zlib(const std::vector<uint8_t>& buf) {
  return static_cast<uint32_t>(adler32(1, buf.data(), static_cast<uInt>(buf.size())));
}

void BenchFull() {
  for (size_t bytes : {size_t{64} << 10, size_t{4} << 20, kTensorBytes}) {
    const std::vector<uint8_t> buf = RandomBytes(bytes, bytes);
    const uint32_t expected = Zlib(buf);
    const double zlib_ns = BestNs([&] { g_sink = g_sink + Zlib(buf); });
    const double zlib_gbps = static_cast<double>(bytes) / zlib_ns;
    for (Adler32Impl impl : SupportedAdler32Impls()) {
      if (Adler32With(impl, buf) != expected) {
        std::fprintf(stderr, "adler32_bench: %s disagrees with zlib\n",
                     std::string(Adler32ImplName(impl)).c_str());
        std::exit(1);
      }
      const double ns = BestNs([&] { g_sink = g_sink + Adler32With(impl, buf); });
      const double gbps = static_cast<double>(bytes) / ns;
      std::printf(
          "{\"bench\":\"adler32_full\",\"impl\":\"%s\",\"bytes\":%zu,\"gbps\":%.2f,"
          "\"baseline\":\"zlib adler32\",\"baseline_gbps\":%.2f,\"speedup\":%.2f,%s}\n",
          std::string(Adler32ImplName(impl)).c_str(), bytes, gbps, zlib_gbps, gbps / zlib_gbps,
          Common().c_str());
      std::fflush(stdout);
    }
  }
}

// k distinct positions in [0, n), sorted (the order a decoder delivers them).
std::vector<uint64_t> RandomPositions(uint64_t n, size_t k, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<bool> used(n);
  std::vector<uint64_t> pos;
  pos.reserve(k);
  while (pos.size() < k) {
    const uint64_t p = rng() % n;
    if (!used[p]) {
      used[p] = true;
      pos.push_back(p);
    }
  }
  std::sort(pos.begin(), pos.end());
  return pos;
}

void BenchIncremental() {
  const std::vector<uint8_t> old_buf = RandomBytes(kTensorBytes, 42);
  const uint32_t before = Adler32(old_buf);
  for (size_t k : {size_t{1000}, size_t{100000}, size_t{10000000}}) {
    const std::vector<uint64_t> pos = RandomPositions(kTensorBytes, k, k);
    std::vector<uint8_t> new_buf = old_buf;
    std::vector<uint8_t> old_bytes(k);
    std::vector<uint8_t> new_bytes(k);
    std::mt19937_64 rng(k + 1);
    for (size_t i = 0; i < k; ++i) {
      old_bytes[i] = old_buf[pos[i]];
      new_bytes[i] = static_cast<uint8_t>(old_bytes[i] ^ (1 + rng() % 255));  // really changes
      new_buf[pos[i]] = new_bytes[i];
    }
    const double full_ns = BestNs([&] { g_sink = g_sink + Adler32(new_buf); }, 3, 5e8);
    const uint32_t expected = Adler32(new_buf);

    // "gather": old bytes read from the tensor at each position, as the applier does;
    // "pregathered": positions and old/new bytes already in contiguous arrays.
    auto gather = [&] {
      AdlerDelta d;
      for (size_t i = 0; i < k; ++i) d.AddByte(pos[i], old_buf[pos[i]], new_bytes[i]);
      return d.Apply(before, kTensorBytes);
    };
    auto pregathered = [&] {
      AdlerDelta d;
      for (size_t i = 0; i < k; ++i) d.AddByte(pos[i], old_bytes[i], new_bytes[i]);
      return d.Apply(before, kTensorBytes);
    };
    for (int variant = 0; variant < 2; ++variant) {
      const uint32_t got = variant == 0 ? gather() : pregathered();
      if (got != expected) {
        std::fprintf(stderr, "adler32_bench: incremental checksum disagrees (k=%zu)\n", k);
        std::exit(1);
      }
      const double ns = variant == 0 ? BestNs([&] { g_sink = g_sink + gather(); })
                                     : BestNs([&] { g_sink = g_sink + pregathered(); });
      std::printf(
          "{\"bench\":\"adler32_incremental\",\"variant\":\"%s\",\"k\":%zu,\"tensor_bytes\":%zu,"
          "\"incremental_ns\":%.0f,\"ns_per_changed_byte\":%.2f,\"baseline\":\"full Adler32 "
          "recompute\",\"full_recompute_ns\":%.0f,\"full_over_incremental\":%.1f,%s}\n",
          variant == 0 ? "gather" : "pregathered", k, kTensorBytes, ns, ns / static_cast<double>(k),
          full_ns, full_ns / ns, Common().c_str());
      std::fflush(stdout);
    }
  }
}

void BenchXorRun() {
  const std::vector<uint8_t> old_buf = RandomBytes(kTensorBytes, 7);
  const uint32_t before = Adler32(old_buf);
  for (size_t k : {size_t{100000}, size_t{10000000}}) {
    std::vector<uint8_t> xor_buf(kTensorBytes, 0);
    std::vector<uint8_t> new_buf = old_buf;
    std::mt19937_64 rng(k);
    for (uint64_t p : RandomPositions(kTensorBytes, k, k + 3)) {
      xor_buf[p] = static_cast<uint8_t>(1 + rng() % 255);
      new_buf[p] ^= xor_buf[p];
    }
    auto run = [&] {
      AdlerDelta d;
      d.AddXorRun(0, old_buf, xor_buf);
      return d.Apply(before, kTensorBytes);
    };
    if (run() != Adler32(new_buf)) {
      std::fprintf(stderr, "adler32_bench: AddXorRun checksum disagrees (k=%zu)\n", k);
      std::exit(1);
    }
    const double full_ns = BestNs([&] { g_sink = g_sink + Adler32(new_buf); }, 3, 5e8);
    const double ns = BestNs([&] { g_sink = g_sink + run(); }, 3, 5e8);
    std::printf(
        "{\"bench\":\"adler32_xor_run\",\"k\":%zu,\"tensor_bytes\":%zu,\"xor_run_ns\":%.0f,"
        "\"xor_run_gbps\":%.2f,\"baseline\":\"full Adler32 recompute\",\"full_recompute_ns\":%.0f,"
        "\"full_over_xor_run\":%.2f,%s}\n",
        k, kTensorBytes, ns, static_cast<double>(kTensorBytes) / ns, full_ns, full_ns / ns,
        Common().c_str());
    std::fflush(stdout);
  }
}

}  // namespace
}  // namespace deltakv::deltasync

int main(int argc, char** argv) {
  using namespace deltakv::deltasync;
  const std::string workload = argc > 1 ? argv[1] : "all";
  if (workload != "all" && workload != "full" && workload != "incremental" &&
      workload != "xor_run") {
    std::fprintf(stderr, "usage: %s [full|incremental|xor_run|all]\n", argv[0]);
    return 2;
  }
  if (!kOptimized) {
    std::fprintf(stderr,
                 "WARNING: adler32_bench was built without NDEBUG (build type %s); its numbers "
                 "do not represent an optimized build.\n",
                 DELTAKV_BUILD_TYPE);
  }
  PrintEnvironment();
  if (workload == "all" || workload == "full") BenchFull();
  if (workload == "all" || workload == "incremental") BenchIncremental();
  if (workload == "all" || workload == "xor_run") BenchXorRun();
  return 0;
}
