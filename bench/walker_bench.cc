// Sparse zstd walker benchmark. Prints the environment, then one JSON line per workload: the
// walker's time on the production path (DecodeDeltaFrame with the frame's xor_digest from the
// manifest, as apply and the sidecar decode publisher frames: walker_*), checking the frame's
// XXH64 content checksum instead (frames without xor_digest: walker_xxh64_*) and with no check
// (walker_unchecked_*), next to baselines measured in the same run on the same frame:
//   dense_decode       ZSTD_decompressDCtx into a reused, pre-faulted buffer (no scan): the
//                      fastest dense decode; libzstd verifies the checksum too.
//   dense_decode_scan  the same plus a scan for the nonzero bytes (what the walker delivers).
//   zero_write         zeros written over the same length into a reused, pre-faulted buffer,
//                      one block (128 KiB) at a time as libzstd writes its output: what
//                      storing the output once costs (dense_decode_write_share of
//                      dense_decode). dense_decode minus zero_write, per sequence, is
//                      libzstd's own cost of a sequence, decoding and copying it
//                      (dense_decode_net_of_writes_ns_per_sequence), the figure next to which
//                      walker_ns_per_sequence is judged.
//   zero_hash          XXH64 over the frame's length of zeros (the walker's zero-stripe path):
//                      the floor of what checking a checksum costs without reading any data.
// and the walker's own split (walker_decode_only_*): the same frame walked with
// WalkerOptions::decode_only, which parses and entropy-decodes every block, literals section and
// sequence with every check but executes no sequence: the floor of any walker of these frames
// that decodes sequences one by one. walker_execute_ns_per_sequence is the unchecked walk minus
// it: what tracking the nonzero bytes, resolving match sources and delivering costs.
// Per nonzero output byte: walker_ns_per_nonzero, walker_decode_only_ns_per_nonzero and
// dense_decode_ns_per_nonzero (libzstd): the walker's work grows with the nonzero bytes,
// libzstd's with the output, so at a given byte density these say how much a walker may spend
// per nonzero byte to keep up with the dense decode.
// Each side runs in its own forked child so its peak RSS (wait4 / ru_maxrss) is measured
// separately. Times are the best of --reps runs (more for a short run: each side repeats until
// it has run for --min-total-ms, at most 200 times, so a frame decoded in a millisecond is not
// judged on three runs, the first with cold memory) as thread CPU time (*_cpu_*; steadier on a
// shared machine) and wall clock. The walker hands its nonzero bytes to a sink that counts and
// sums them: as they come (--sink bytes, default: the sidecar's planner takes them so), or
// grouped into runs (--sink runs: what `deltakv frame scan` and other run consumers get).
//
// Workloads (--shape): adam (default): the XOR of two bf16 tensors across one Adam-like step on
// fp32 master weights (weights ~ N(0, 0.02), a clipped unit-normal update scaled so that the
// given fraction of bytes changes; both rounded to bf16 to nearest even): mostly low-byte
// changes with carries, some exponent and sign bytes. bf16: low bytes 1..7 of 2-byte elements.
// scattered: uniformly scattered random bytes. Frames come from libzstd at each --levels, for
// each --sequences (default runs,zstd; "sequences_from" in the output): runs parses them into
// one sequence per run of nonzero bytes as the publisher does by default (the level then sets
// the entropy stage only), zstd with libzstd's match finder at the level,
// with content checksums (as the publisher writes them) unless --no-checksum. Levels at or
// above 10 compress slowly, so they use --slow-level-mib of data.
//
// Targets (printed with each line): walker >= 4x dense_decode at byte density <= 0.05 %, >= 2x
// at <= 0.5 %, >= 1x above; <= 15 ns per sequence; checking <= 1.1x unchecked (both the
// production check and XXH64 are reported; XXH64 must hash every zero stripe, see zero_hash).
//
// Usage: walker_bench [--size-mib N] [--slow-level-mib N] [--densities 0.0005,0.005,0.025]
//                     [--levels 1,3,19] [--sequences runs,zstd] [--reps R]
//                     [--min-total-ms 100] [--no-checksum]
//                     [--shape adam|bf16|scattered] [--sink bytes|runs] [--walker-only]
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zstd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "bench_util.h"
#include "deltasync/xor_digest.h"
#include "deltasync/zstd_walker.h"
#include "walker/xxh64.h"
#include "xor_sequences.h"  // the publisher's sequence parse

namespace deltakv::deltasync {
namespace {

struct Flags {
  size_t size_mib = 256;
  size_t slow_level_mib = 32;
  std::vector<double> densities = {0.0005, 0.005, 0.025};
  std::vector<int> levels = {1, 3, 19};
  std::vector<std::string> parses = {"runs", "zstd"};  // how frames are parsed into sequences
  int reps = 3;
  double min_total_ms = 100;
  bool checksum = true;
  std::string shape = "adam";
  bool walker_only = false;  // for profiling: skip the baselines
  bool bytes_sink = true;    // --sink bytes (the sidecar's) or runs
};

Flags ParseFlags(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&] { return bench::FlagValue(argc, argv, &i); };
    if (a == "--size-mib") {
      f.size_mib = std::strtoull(next(), nullptr, 10);
    } else if (a == "--slow-level-mib") {
      f.slow_level_mib = std::strtoull(next(), nullptr, 10);
    } else if (a == "--densities") {
      f.densities = bench::ParseList<double>(next());
    } else if (a == "--levels") {
      f.levels = bench::ParseList<int>(next());
    } else if (a == "--sequences") {
      f.parses = bench::ParseList<std::string>(next());
      for (const std::string& p : f.parses) {
        if (p != "runs" && p != "zstd") {
          std::fprintf(stderr, "unknown --sequences %s (runs, zstd)\n", p.c_str());
          std::exit(2);
        }
      }
    } else if (a == "--reps") {
      f.reps = std::atoi(next());
    } else if (a == "--min-total-ms") {
      f.min_total_ms = std::strtod(next(), nullptr);
    } else if (a == "--checksum") {
      f.checksum = true;
    } else if (a == "--no-checksum") {
      f.checksum = false;
    } else if (a == "--walker-only") {
      f.walker_only = true;
    } else if (a == "--shape") {
      f.shape = next();
    } else if (a == "--sink") {
      const std::string sink = next();
      if (sink != "bytes" && sink != "runs") {
        std::fprintf(stderr, "unknown --sink %s (bytes, runs)\n", sink.c_str());
        std::exit(2);
      }
      f.bytes_sink = sink == "bytes";
    } else {
      std::fprintf(stderr, "unknown flag %s\n", a.c_str());
      std::exit(2);
    }
  }
  if (f.shape != "adam" && f.shape != "bf16" && f.shape != "scattered") {
    std::fprintf(stderr, "unknown --shape %s (adam, bf16, scattered)\n", f.shape.c_str());
    std::exit(2);
  }
  if (f.size_mib == 0 || f.slow_level_mib == 0 || f.reps < 1 || !(f.min_total_ms >= 0) ||
      f.densities.empty() || f.levels.empty() || f.parses.empty()) {
    std::fprintf(stderr,
                 "sizes and --reps must be positive, --min-total-ms not negative, the lists "
                 "non-empty\n");
    std::exit(2);
  }
  return f;
}

// A fast, reproducible generator (splitmix64) with an approximately normal draw (the sum of
// four uniforms, Irwin-Hall); the bench needs realistic magnitudes, not exact tails.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  float Uniform() { return static_cast<float>(Next() >> 40) * (1.0f / 16777216.0f); }
  float Normal() {  // mean 0, variance 1
    return (Uniform() + Uniform() + Uniform() + Uniform() - 2.0f) * 1.7320508f;
  }

 private:
  uint64_t state_;
};

uint16_t Bf16(float x) {  // round to nearest even
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

// One Adam-like step of `n` bf16 elements at learning rate `lr`, XORed, into `out` (2n bytes).
void AdamXor(uint8_t* out, size_t n, double lr, uint64_t seed) {
  Rng rng(seed);
  const float step = static_cast<float>(lr);
  for (size_t i = 0; i < n; ++i) {
    const float w = rng.Normal() * 0.02f;
    const float u = std::clamp(rng.Normal(), -3.0f, 3.0f);
    const uint16_t x = static_cast<uint16_t>(Bf16(w) ^ Bf16(w - step * u));
    std::memcpy(out + 2 * i, &x, 2);
  }
}

// The learning rate at which an Adam-like step changes `density` of the bytes (bisection on a
// sample; the fraction grows monotonically with the rate).
double CalibrateLearningRate(double density) {
  std::vector<uint8_t> sample(2 << 18);
  double lo = 1e-10, hi = 1e-1;
  for (int i = 0; i < 40; ++i) {
    const double mid = std::sqrt(lo * hi);
    AdamXor(sample.data(), sample.size() / 2, mid, 7);
    const size_t nonzero = sample.size() - static_cast<size_t>(
                                               std::count(sample.begin(), sample.end(), 0));
    (static_cast<double>(nonzero) / static_cast<double>(sample.size()) < density ? lo : hi) = mid;
  }
  return std::sqrt(lo * hi);
}

std::vector<uint8_t> MakeData(const Flags& f, size_t size, double density, uint64_t seed) {
  std::vector<uint8_t> data(size, 0);
  std::mt19937_64 rng(seed);
  if (f.shape == "adam") {
    AdamXor(data.data(), data.size() / 2, CalibrateLearningRate(density), seed);
  } else if (f.shape == "bf16") {
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

// With `runs`, parsed into sequences as the publisher does by default (one per run of nonzero
// bytes), otherwise by libzstd's match finder at `level`.
std::vector<uint8_t> Compress(const std::vector<uint8_t>& data, int level, bool checksum,
                              bool runs) {
  ZSTD_CCtx* cctx = ZSTD_createCCtx();
  ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, level);
  ZSTD_CCtx_setParameter(cctx, ZSTD_c_checksumFlag, checksum ? 1 : 0);
  if (runs) {
    if (!deltakv::deltasync::UseXorRunSequences(cctx).ok()) std::exit(1);
  } else {
    ZSTD_CCtx_setParameter(cctx, ZSTD_c_nbWorkers, 2);  // speeds up setup only
  }
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
  uint64_t checksums_verified = 0;
  long peak_rss_kib = 0;
  bool ok = false;
};

// Counts and sums what the walker delivers. With `bytes` it takes the nonzero bytes as the
// walker finds them (OnBytes), as the sidecar's planner does; otherwise it takes them grouped
// into runs (OnRun, bytes at most 31 zeros apart merged), as `deltakv frame scan` does.
class CountingSink : public NonzeroSink {
 public:
  explicit CountingSink(bool bytes) : bytes_(bytes) {}
  bool TakesBytes() const override { return bytes_; }
  Status OnBytes(const uint64_t* entries, size_t count, uint64_t) override {
    for (size_t i = 0; i < count; ++i) Count(static_cast<uint8_t>(entries[i]));
    return Status::Ok();
  }
  Status OnRun(uint64_t, std::span<const uint8_t> bytes) override {
    for (uint8_t b : bytes) Count(b);
    return Status::Ok();
  }
  uint64_t nonzeros = 0;
  uint64_t sum = 0;

 private:
  void Count(uint8_t b) {
    nonzeros += b != 0;
    sum += b;
  }
  bool bytes_;
};

// How often a side runs: at least `min` times, and until its runs add up to `min_total_s`
// (at most kMaxReps times).
struct Reps {
  int min;
  double min_total_s;
};
constexpr int kMaxReps = 200;

// Runs `once` as `reps` says and returns its best wall and thread-CPU times (timing only the
// call), with the figures `once` recorded; `once` returns false, having reported why, when it
// failed, and the result is then not ok.
template <typename F>
Measurement Repeat(Reps reps, F once) {
  Measurement m;
  double total_s = 0;
  for (int r = 0; r < reps.min || (total_s < reps.min_total_s && r < kMaxReps); ++r) {
    const double cpu0 = ThreadCpuSeconds();
    bench::Stopwatch sw;
    if (!once(&m)) return Measurement{};
    const double s = sw.Seconds();
    const double cpu = ThreadCpuSeconds() - cpu0;
    total_s += s;
    if (r == 0 || s < m.best_s) m.best_s = s;
    if (r == 0 || cpu < m.best_cpu_s) m.best_cpu_s = cpu;
  }
  m.ok = true;
  return m;
}

// The production path: the walker decoder (reused across frames, as the sidecar's decode
// threads reuse theirs) through DecodeDeltaFrame with the manifest's xor_digest.
Measurement RunProduction(const std::vector<uint8_t>& frame, size_t size, const XorDigest& digest,
                          Reps reps, bool bytes_sink) {
  std::unique_ptr<XorDecoder> decoder = MakeSparseWalkerDecoder();
  return Repeat(reps, [&](Measurement* m) {
    CountingSink sink(bytes_sink);
    auto result = DecodeDeltaFrame(*decoder, frame, size, 31, sink, "frame", digest);
    if (!result.ok()) {
      std::fprintf(stderr, "walker failed: %s\n", result.status().ToString().c_str());
      return false;
    }
    m->nonzeros = sink.nonzeros;
    m->sum = sink.sum;
    return true;
  });
}

// The walker alone, with or without the frame's XXH64 check; one walker for all repetitions
// (Restart keeps its memory), as in RunProduction.
Measurement RunWalker(const std::vector<uint8_t>& frame, Reps reps, bool verify, bool bytes_sink,
                      bool decode_only = false) {
  WalkerOptions options;
  options.limits.max_window_log = 31;
  options.limits.verify_checksum = verify;
  options.decode_only = decode_only;
  CountingSink first(bytes_sink);
  SparseZstdWalker walker(first, options);
  return Repeat(reps, [&](Measurement* m) {
    CountingSink sink(bytes_sink);
    walker.Restart(sink, options);
    Status st = walker.Feed(frame);
    if (st.ok()) st = walker.Finish();
    if (!st.ok()) {
      std::fprintf(stderr, "walker failed: %s\n", st.ToString().c_str());
      return false;
    }
    m->nonzeros = sink.nonzeros;
    m->sum = sink.sum;
    m->sequences = walker.stats().sequences;
    m->checksums_verified = walker.stats().checksums_verified;
    return true;
  });
}

// libzstd into one buffer, written once before the first timed run (pre-faulted) and reused;
// with `scan`, followed by a scan that counts and sums the nonzero bytes.
Measurement RunDense(const std::vector<uint8_t>& frame, size_t size, Reps reps, bool scan) {
  std::vector<uint8_t> buffer(size, 1);
  ZSTD_DCtx* dctx = ZSTD_createDCtx();
  Measurement m = Repeat(reps, [&](Measurement* out) {
    const size_t n =
        ZSTD_decompressDCtx(dctx, buffer.data(), buffer.size(), frame.data(), frame.size());
    if (ZSTD_isError(n)) {
      std::fprintf(stderr, "libzstd failed: %s\n", ZSTD_getErrorName(n));
      return false;
    }
    uint64_t nonzeros = 0, sum = 0;
    if (scan) {
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
    }
    out->nonzeros = nonzeros;
    out->sum = sum;
    return true;
  });
  ZSTD_freeDCtx(dctx);
  return m;
}

// `size` zero bytes written into one buffer (pre-faulted, reused) a block at a time.
Measurement RunZeroWrite(size_t size, Reps reps) {
  constexpr size_t kBlock = 128 << 10;
  std::vector<uint8_t> buffer(size, 1);
  return Repeat(reps, [&](Measurement* m) {
    for (size_t at = 0; at < size; at += kBlock) {
      std::memset(buffer.data() + at, 0, std::min(kBlock, size - at));
    }
    // Read back so the stores are kept; the sum of zeros is checked below.
    m->sum = buffer[size / 2] + buffer[size - 1];
    return true;
  });
}

// XXH64 of `size` zero bytes through the walker's zero-stripe path.
Measurement RunZeroHash(size_t size, Reps reps) {
  return Repeat(reps, [&](Measurement* m) {
    walker::Xxh64 hash;
    hash.UpdateZeros(size);
    m->sum = hash.Digest();  // keeps the work
    return true;
  });
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
std::vector<uint8_t> MakeFrame(const Flags& flags, size_t size, double density, int level,
                               bool runs, uint64_t* expected_nonzeros, XorDigest* digest) {
  int fds[2];
  if (pipe(fds) != 0) std::exit(1);
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    const auto data = MakeData(flags, size, density, 1000 + static_cast<uint64_t>(level));
    uint64_t nonzeros = 0;
    for (uint8_t b : data) nonzeros += b != 0;
    const XorDigest d = ComputeXorDigest(data);  // what the publisher records
    const auto frame = Compress(data, level, flags.checksum, runs);
    const uint64_t n = frame.size();
    if (!WriteAll(fds[1], &nonzeros, 8) || !WriteAll(fds[1], &d, sizeof(d)) ||
        !WriteAll(fds[1], &n, 8) ||
        !WriteAll(fds[1], frame.data(), frame.size())) {
      _exit(1);
    }
    _exit(0);
  }
  close(fds[1]);
  uint64_t n = 0;
  std::vector<uint8_t> frame;
  if (!ReadAll(fds[0], expected_nonzeros, 8) || !ReadAll(fds[0], digest, sizeof(*digest)) ||
      !ReadAll(fds[0], &n, 8)) {
    std::exit(1);
  }
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

// The speedup over the fastest dense decode that the walker must reach at `density`.
double TargetSpeedup(double density) {
  if (density <= 0.0005) return 4.0;
  if (density <= 0.005) return 2.0;
  return 1.0;
}

constexpr double kTargetNsPerSequence = 15.0;
constexpr double kTargetChecksumOverhead = 1.10;

int Main(int argc, char** argv) {
  const Flags flags = ParseFlags(argc, argv);
  const Reps reps{flags.reps, flags.min_total_ms / 1e3};
  bench::PrintEnvironment("walker_bench");
  int failures = 0;
  std::vector<std::pair<int, std::string>> frames;  // (level, parse) of each workload
  for (int level : flags.levels) {
    for (const std::string& parse : flags.parses) frames.emplace_back(level, parse);
  }
  for (double density : flags.densities) {
    for (const auto& [level, parse] : frames) {
      const size_t mib = level >= 10 ? std::min(flags.slow_level_mib, flags.size_mib)
                                     : flags.size_mib;
      const size_t size = mib << 20;
      uint64_t expected_nonzeros = 0;
      XorDigest digest;
      const std::vector<uint8_t> frame =
          MakeFrame(flags, size, density, level, parse == "runs", &expected_nonzeros, &digest);
      const Measurement walker =
          InChild([&] { return RunProduction(frame, size, digest, reps, flags.bytes_sink); });
      const Measurement xxh64 =
          InChild([&] { return RunWalker(frame, reps, true, flags.bytes_sink); });
      const Measurement unchecked =
          InChild([&] { return RunWalker(frame, reps, false, flags.bytes_sink); });
      const Measurement decode_only = InChild(
          [&] { return RunWalker(frame, reps, false, flags.bytes_sink, /*decode_only=*/true); });
      Measurement dense, scan, zero_write, zero_hash;
      if (!flags.walker_only) {
        dense = InChild([&] { return RunDense(frame, size, reps, false); });
        scan = InChild([&] { return RunDense(frame, size, reps, true); });
        zero_write = InChild([&] { return RunZeroWrite(size, reps); });
        zero_hash = InChild([&] { return RunZeroHash(size, reps); });
      }
      const bool measured = walker.ok && xxh64.ok && unchecked.ok && decode_only.ok &&
                            (flags.walker_only || (dense.ok && scan.ok && zero_write.ok &&
                                                   zero_write.sum == 0 && zero_hash.ok));
      const bool agree =
          walker.ok && xxh64.ok && unchecked.ok && walker.nonzeros == expected_nonzeros &&
          xxh64.nonzeros == expected_nonzeros && unchecked.nonzeros == expected_nonzeros &&
          (flags.walker_only || (scan.nonzeros == expected_nonzeros && walker.sum == scan.sum)) &&
          xxh64.checksums_verified == (flags.checksum ? 1u : 0u) && decode_only.ok &&
          decode_only.sequences == unchecked.sequences && decode_only.nonzeros == 0;
      const double gb = static_cast<double>(size) / 1e9;
      // Every mode decodes the same sequences; the unchecked walk counts them.
      const uint64_t sequences = unchecked.sequences;
      const auto per_sequence = [&](const Measurement& m) {
        return sequences ? m.best_cpu_s * 1e9 / static_cast<double>(sequences) : 0.0;
      };
      const double ns_per_sequence = per_sequence(walker);
      nlohmann::json j = {
          {"bench", "walker_bench"},
          {"kind", "result"},
          {"shape", flags.shape},
          {"density", density},
          {"level", level},
          {"sequences_from", parse},
          {"checksum", flags.checksum},
          {"sink", flags.bytes_sink ? "bytes" : "runs"},
          {"min_reps", flags.reps},
          {"min_total_ms", flags.min_total_ms},
          {"logical_mib", mib},
          {"compressed_bytes", frame.size()},
          {"sequences", sequences},
          {"nonzeros", expected_nonzeros},
          {"agree", agree},
          {"walker_ms", walker.best_s * 1e3},
          {"walker_cpu_ms", walker.best_cpu_s * 1e3},
          {"walker_cpu_gbps", gb / walker.best_cpu_s},
          {"walker_ns_per_sequence", ns_per_sequence},
          {"walker_xxh64_cpu_ms", xxh64.best_cpu_s * 1e3},
          {"walker_xxh64_ns_per_sequence", per_sequence(xxh64)},
          {"walker_unchecked_cpu_ms", unchecked.best_cpu_s * 1e3},
          {"walker_unchecked_ns_per_sequence", per_sequence(unchecked)},
          {"walker_decode_only_cpu_ms", decode_only.best_cpu_s * 1e3},
          {"walker_decode_only_ns_per_sequence", per_sequence(decode_only)},
          {"walker_execute_ns_per_sequence", per_sequence(unchecked) - per_sequence(decode_only)},
          {"checksum_overhead", walker.best_cpu_s / unchecked.best_cpu_s},
          {"xxh64_overhead", xxh64.best_cpu_s / unchecked.best_cpu_s},
          {"target_ns_per_sequence", kTargetNsPerSequence},
          {"target_checksum_overhead", kTargetChecksumOverhead},
          {"walker_peak_rss_mib", walker.peak_rss_kib / 1024.0},
          {"parent_rss_at_fork_mib", CurrentRssKib() / 1024.0},
          {"build", bench::BuildType()}};
      if (expected_nonzeros > 0) {  // figures per nonzero output byte (none without any)
        const double nz = static_cast<double>(expected_nonzeros);
        j.update({{"walker_ns_per_nonzero", walker.best_cpu_s * 1e9 / nz},
                  {"walker_decode_only_ns_per_nonzero", decode_only.best_cpu_s * 1e9 / nz}});
        if (!flags.walker_only) j["dense_decode_ns_per_nonzero"] = dense.best_cpu_s * 1e9 / nz;
      }
      if (!flags.walker_only) {
        const double target = TargetSpeedup(density);
        const double speedup = dense.best_cpu_s / walker.best_cpu_s;
        j.update({{"dense_decode_cpu_ms", dense.best_cpu_s * 1e3},
                  {"dense_decode_cpu_gbps", gb / dense.best_cpu_s},
                  {"dense_decode_scan_cpu_ms", scan.best_cpu_s * 1e3},
                  {"zero_write_cpu_ms", zero_write.best_cpu_s * 1e3},
                  {"dense_decode_write_share", zero_write.best_cpu_s / dense.best_cpu_s},
                  {"dense_decode_net_of_writes_ns_per_sequence",
                   sequences ? (dense.best_cpu_s - zero_write.best_cpu_s) * 1e9 /
                                   static_cast<double>(sequences)
                             : 0.0},
                  {"zero_hash_cpu_ms", zero_hash.best_cpu_s * 1e3},
                  {"speedup_vs_dense_decode", speedup},
                  {"speedup_vs_dense_decode_wall", dense.best_s / walker.best_s},
                  {"speedup_vs_dense_decode_scan", scan.best_cpu_s / walker.best_cpu_s},
                  {"target_speedup", target},
                  {"meets_speedup_target", speedup >= target},
                  {"dense_decode_peak_rss_mib", dense.peak_rss_kib / 1024.0}});
      }
      // A target is met only by figures that were measured and decoded the right bytes.
      const bool valid = measured && agree;
      if (j.contains("meets_speedup_target")) {
        j["meets_speedup_target"] = valid && j["meets_speedup_target"].get<bool>();
      }
      j["meets_ns_per_sequence_target"] = valid && ns_per_sequence <= kTargetNsPerSequence;
      j["meets_checksum_target"] =
          valid && walker.best_cpu_s / unchecked.best_cpu_s <= kTargetChecksumOverhead;
      bench::PrintResult(j);
      // A figure that could not be measured, or disagreement with libzstd, fails the run.
      if (!measured || !agree) ++failures;
    }
  }
  if (failures > 0) {
    std::fprintf(stderr, "walker_bench: %d workload(s) failed or disagreed\n", failures);
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace deltakv::deltasync

int main(int argc, char** argv) { return deltakv::deltasync::Main(argc, argv); }
