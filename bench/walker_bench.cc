// Sparse zstd walker benchmark. Prints the environment, then one JSON line per workload with
// the walker's logical throughput and the baseline measured in the same run: libzstd
// ZSTD_decompressDCtx into a buffer followed by a nonzero scan. Each side runs in its own
// forked child so its peak RSS (wait4 / ru_maxrss) is measured separately. Times are the best
// of --reps runs, as wall clock (*_gbps, speedup) and as thread CPU time (*_cpu_gbps,
// speedup_cpu; steadier on a shared machine).
//
// Workloads: XOR-delta-like buffers with scattered nonzero bytes at the given densities,
// compressed by libzstd at the given levels (library defaults: no checksum unless --checksum).
//
// Usage: walker_bench [--size-mib N] [--densities 0.001,0.01,0.05] [--levels 1,3,9]
//                     [--reps R] [--checksum] [--shape scattered|bf16] [--walker-only]
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zstd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "bench_util.h"
#include "deltasync/zstd_walker.h"

namespace deltakv::deltasync {
namespace {

struct Flags {
  size_t size_mib = 256;
  std::vector<double> densities = {0.001, 0.01, 0.05};
  std::vector<int> levels = {1, 3, 9};
  int reps = 3;
  bool checksum = false;
  std::string shape = "scattered";
  bool walker_only = false;  // for profiling: skip the baseline
};

template <typename T>
std::vector<T> ParseList(const char* s) {
  std::vector<T> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    std::stringstream is(item);
    T v;
    is >> v;
    out.push_back(v);
  }
  return out;
}

Flags ParseFlags(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "missing value for %s\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--size-mib") {
      f.size_mib = std::strtoull(next(), nullptr, 10);
    } else if (a == "--densities") {
      f.densities = ParseList<double>(next());
    } else if (a == "--levels") {
      f.levels = ParseList<int>(next());
    } else if (a == "--reps") {
      f.reps = std::atoi(next());
    } else if (a == "--checksum") {
      f.checksum = true;
    } else if (a == "--walker-only") {
      f.walker_only = true;
    } else if (a == "--shape") {
      f.shape = next();
    } else {
      std::fprintf(stderr, "unknown flag %s\n", a.c_str());
      std::exit(2);
    }
  }
  return f;
}

std::vector<uint8_t> MakeData(const Flags& f, double density, uint64_t seed) {
  std::vector<uint8_t> data(f.size_mib << 20, 0);
  std::mt19937_64 rng(seed);
  if (f.shape == "bf16") {
    // Nonzero low bytes of 2-byte elements; `density` is the fraction of bytes changed.
    std::geometric_distribution<size_t> gap(std::min(1.0, density * 2));
    for (size_t i = 2 * gap(rng); i < data.size(); i += 2 + 2 * gap(rng)) {
      data[i] = static_cast<uint8_t>(1 + rng() % 7);
    }
  } else {
    std::geometric_distribution<size_t> gap(density);
    for (size_t i = gap(rng); i < data.size(); i += 1 + gap(rng)) {
      data[i] = static_cast<uint8_t>(1 + rng() % 255);
    }
  }
  return data;
}

std::vector<uint8_t> Compress(const std::vector<uint8_t>& data, int level, bool checksum) {
  ZSTD_CCtx* cctx = ZSTD_createCCtx();
  ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, level);
  ZSTD_CCtx_setParameter(cctx, ZSTD_c_checksumFlag, checksum ? 1 : 0);
  ZSTD_CCtx_setParameter(cctx, ZSTD_c_nbWorkers, 2);  // speeds up setup only
  std::vector<uint8_t> out(ZSTD_compressBound(data.size()));
  const size_t n = ZSTD_compress2(cctx, out.data(), out.size(), data.data(), data.size());
  ZSTD_freeCCtx(cctx);
  if (ZSTD_isError(n)) {
    std::fprintf(stderr, "compression failed: %s\n", ZSTD_getErrorName(n));
    std::exit(1);
  }
  out.resize(n);
  out.shrink_to_fit();
  return out;
}

// CPU time of the calling thread: on a shared machine this excludes time stolen by others.
double ThreadCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

struct Measurement {
  double best_s = 0;
  double best_cpu_s = 0;
  uint64_t nonzeros = 0;
  uint64_t sum = 0;
  uint64_t sequences = 0;
  long peak_rss_kib = 0;
  bool ok = false;
};

class CountingSink : public NonzeroSink {
 public:
  Status OnRun(uint64_t, std::span<const uint8_t> bytes) override {
    for (uint8_t b : bytes) {
      nonzeros += b != 0;
      sum += b;
    }
    return Status::Ok();
  }
  uint64_t nonzeros = 0;
  uint64_t sum = 0;
};

Measurement RunWalker(const std::vector<uint8_t>& frame, int reps) {
  Measurement m;
  for (int r = 0; r < reps; ++r) {
    CountingSink sink;
    const double cpu0 = ThreadCpuSeconds();
    bench::Stopwatch sw;
    WalkerOptions options;
    options.limits.max_window_log = 31;
    auto stats = WalkZstd(frame, options, sink);
    const double s = sw.Seconds();
    const double cpu = ThreadCpuSeconds() - cpu0;
    if (!stats.ok()) {
      std::fprintf(stderr, "walker failed: %s\n", stats.status().ToString().c_str());
      return m;
    }
    if (r == 0 || s < m.best_s) m.best_s = s;
    if (r == 0 || cpu < m.best_cpu_s) m.best_cpu_s = cpu;
    m.nonzeros = sink.nonzeros;
    m.sum = sink.sum;
    m.sequences = stats->sequences;
  }
  m.ok = true;
  return m;
}

Measurement RunLibzstdScan(const std::vector<uint8_t>& frame, size_t size, int reps) {
  Measurement m;
  std::vector<uint8_t> buffer(size);
  ZSTD_DCtx* dctx = ZSTD_createDCtx();
  for (int r = 0; r < reps; ++r) {
    const double cpu0 = ThreadCpuSeconds();
    bench::Stopwatch sw;
    const size_t n =
        ZSTD_decompressDCtx(dctx, buffer.data(), buffer.size(), frame.data(), frame.size());
    if (ZSTD_isError(n)) {
      std::fprintf(stderr, "libzstd failed: %s\n", ZSTD_getErrorName(n));
      ZSTD_freeDCtx(dctx);
      return m;
    }
    uint64_t nonzeros = 0, sum = 0;
    const uint8_t* p = buffer.data();
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
      uint64_t w;
      std::memcpy(&w, p + i, 8);
      if (w == 0) continue;
      for (int j = 0; j < 8; ++j) {
        nonzeros += p[i + j] != 0;
        sum += p[i + j];
      }
    }
    for (; i < n; ++i) {
      nonzeros += p[i] != 0;
      sum += p[i];
    }
    const double s = sw.Seconds();
    const double cpu = ThreadCpuSeconds() - cpu0;
    if (r == 0 || s < m.best_s) m.best_s = s;
    if (r == 0 || cpu < m.best_cpu_s) m.best_cpu_s = cpu;
    m.nonzeros = nonzeros;
    m.sum = sum;
  }
  ZSTD_freeDCtx(dctx);
  m.ok = true;
  return m;
}

long CurrentRssKib() {
  long pages = 0, resident = 0;
  if (FILE* f = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
    std::fclose(f);
  }
  return resident * (sysconf(_SC_PAGESIZE) / 1024);
}

bool ReadAll(int fd, void* p, size_t n) {
  auto* b = static_cast<uint8_t*>(p);
  while (n > 0) {
    const ssize_t got = read(fd, b, n);
    if (got <= 0) return false;
    b += got;
    n -= static_cast<size_t>(got);
  }
  return true;
}

bool WriteAll(int fd, const void* p, size_t n) {
  const auto* b = static_cast<const uint8_t*>(p);
  while (n > 0) {
    const ssize_t put = write(fd, b, n);
    if (put <= 0) return false;
    b += put;
    n -= static_cast<size_t>(put);
  }
  return true;
}

// Generates and compresses a workload in a child, so the parent (whose address space the
// measuring children inherit) never holds the logical buffer.
std::vector<uint8_t> MakeFrame(const Flags& flags, double density, int level,
                               uint64_t* expected_nonzeros) {
  int fds[2];
  if (pipe(fds) != 0) std::exit(1);
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    const auto data = MakeData(flags, density, 1000 + static_cast<uint64_t>(level));
    uint64_t nonzeros = 0;
    for (uint8_t b : data) nonzeros += b != 0;
    const auto frame = Compress(data, level, flags.checksum);
    const uint64_t n = frame.size();
    if (!WriteAll(fds[1], &nonzeros, 8) || !WriteAll(fds[1], &n, 8) ||
        !WriteAll(fds[1], frame.data(), frame.size())) {
      _exit(1);
    }
    _exit(0);
  }
  close(fds[1]);
  uint64_t n = 0;
  std::vector<uint8_t> frame;
  if (!ReadAll(fds[0], expected_nonzeros, 8) || !ReadAll(fds[0], &n, 8)) std::exit(1);
  frame.resize(n);
  if (!ReadAll(fds[0], frame.data(), n)) std::exit(1);
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  return frame;
}

// Runs fn in a forked child; returns its measurement plus the child's peak RSS.
template <typename Fn>
Measurement InChild(Fn&& fn) {
  int fds[2];
  if (pipe(fds) != 0) std::exit(1);
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    Measurement m = fn();
    if (!WriteAll(fds[1], &m, sizeof(m))) _exit(1);
    _exit(0);
  }
  close(fds[1]);
  Measurement m;
  const bool got = ReadAll(fds[0], &m, sizeof(m));
  close(fds[0]);
  int status = 0;
  rusage usage{};
  wait4(pid, &status, 0, &usage);
  if (!got || !WIFEXITED(status) || WEXITSTATUS(status) != 0) m.ok = false;
  m.peak_rss_kib = usage.ru_maxrss;
  return m;
}

int Main(int argc, char** argv) {
  const Flags flags = ParseFlags(argc, argv);
  bench::PrintEnvironment("walker_bench");
  const size_t size = flags.size_mib << 20;
  for (double density : flags.densities) {
    for (int level : flags.levels) {
      uint64_t expected_nonzeros = 0;
      const std::vector<uint8_t> frame = MakeFrame(flags, density, level, &expected_nonzeros);
      const Measurement walker = InChild([&] { return RunWalker(frame, flags.reps); });
      const Measurement baseline =
          flags.walker_only ? Measurement{}
                            : InChild([&] { return RunLibzstdScan(frame, size, flags.reps); });
      const double gb = static_cast<double>(size) / 1e9;
      nlohmann::json j = {
          {"bench", "walker_bench"},
          {"kind", "result"},
          {"shape", flags.shape},
          {"density", density},
          {"level", level},
          {"checksum", flags.checksum},
          {"logical_mib", flags.size_mib},
          {"compressed_bytes", frame.size()},
          {"sequences", walker.sequences},
          {"nonzeros", expected_nonzeros},
          {"agree", walker.ok && baseline.ok && walker.nonzeros == expected_nonzeros &&
                        baseline.nonzeros == expected_nonzeros && walker.sum == baseline.sum},
          {"walker_gbps", walker.ok ? gb / walker.best_s : 0.0},
          {"libzstd_scan_gbps", baseline.ok ? gb / baseline.best_s : 0.0},
          {"speedup", walker.ok && baseline.ok ? baseline.best_s / walker.best_s : 0.0},
          {"walker_cpu_gbps", walker.ok ? gb / walker.best_cpu_s : 0.0},
          {"libzstd_scan_cpu_gbps", baseline.ok ? gb / baseline.best_cpu_s : 0.0},
          {"speedup_cpu", walker.ok && baseline.ok ? baseline.best_cpu_s / walker.best_cpu_s : 0.0},
          {"walker_ns_per_sequence",
           walker.ok && walker.sequences ? walker.best_cpu_s * 1e9 / walker.sequences : 0.0},
          {"walker_peak_rss_mib", walker.peak_rss_kib / 1024.0},
          {"libzstd_scan_peak_rss_mib", baseline.peak_rss_kib / 1024.0},
          {"parent_rss_at_fork_mib", CurrentRssKib() / 1024.0},
          {"build", bench::BuildType()}};
      bench::PrintResult(j);
    }
  }
  return 0;
}

}  // namespace
}  // namespace deltakv::deltasync

int main(int argc, char** argv) { return deltakv::deltasync::Main(argc, argv); }
