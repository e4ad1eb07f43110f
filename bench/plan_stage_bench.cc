// Plan/stage benchmark: the cost of each step of the sync data path after the zstd walk, in ns
// per changed byte, on one core, per layout kind. Prints the environment, then one JSON line
// per (layout, density) workload with every stage's figures, their total and the baseline
// measured in the same run.
//
// Stages (each timed on its own, best of --reps, CPU time and wall clock):
//   layout_mapping  the planner's routing of the walker's nonzero bytes: its PlanSink
//                   (deltasync/src/plan_sink.h) taking them one by one in the walker's
//                   batches of a block (NonzeroSink::OnBytes), merging those closer than
//                   32 bytes and splitting each merged run into per-rank pieces with
//                   TensorLayout::ForEachPiece into a PlanOutput that only counts; every
//                   workload checks that its pieces are exactly the ones BuildSyncPlans emits
//                   for the same delta (compressed with zstd, walked by the real planner).
//   plan_records    the pieces appended as WritePlanWriter records into warm part buffers of
//                   the sidecar's part size, a new part when one is full (as PlanStreamer::Add),
//                   each writer counting the lines its records touch (CountLines).
//   planner         the two above at once, as the sidecar plans: the PlanSink appends each
//                   short run held by one rank straight to that rank's open part (the writer
//                   the output lends, PlanOutput::LendWriter) and hands the rest to the
//                   output's AddShort/Add; its parts must equal the two stages' byte for byte,
//                   with the same records and touched lines.
//   walker_route    the planner's routing as a walker thread runs it with --decode-threads
//                   >= 2: the same PlanSink into per-rank records (RecordsOutput, chunks of at
//                   most 64 KiB per rank, in buffers reused once appended, as the planner
//                   reuses them), on every walker thread in parallel.
//   plan_append     what is then left on the one planning thread: appending each chunk's
//                   records whole to the parts (PlanOutput::AddRecorded, as PlanStreamer does);
//                   its parts must hold the planner's records, record and line counts.
//                   planner_vs_append is the planner's time over this: how much less serial
//                   work per changed byte the planning thread does when walkers route.
//   plan_transport  moving each part to its rank: the sidecar takes an arena from its rank's
//                   pool (shm/plan_arena.h: a consumed arena rewritten under a new generation,
//                   its pages still mapped; created on the first sync), touches the pages the
//                   part uses, publishes and encodes the PLAN message; the rank decodes the
//                   message, finds the arena among those it keeps mapped (re-checked for READY
//                   and the generation), copies the part out into the buffer it keeps for
//                   parts, as shim/src/engine.cc does, and marks it consumed. Writing the
//                   records themselves is plan_records: the arena is filled untimed after its
//                   pages are touched, so no byte is counted twice. Taking an arena costs the
//                   same for a full part as for this tensor's partial one, so it is charged by
//                   the share of the part's capacity used, as in a sync of many tensors whose
//                   parts fill up (unamortized_ns_per_changed_byte: in full). The pools are
//                   warmed by the untimed first repetition, which is reported on its own
//                   (first_sync_ns_per_changed_byte: creating, prefaulting and mapping them).
//   rank_stage      the rank's WritePlanReader::OpenLazy and DeviceBackend::StagePart on the cpu
//                   backend (old bytes read in place, XOR, partial Adler-32 sums, packed new
//                   bytes) against real weight buffers of each rank's local size.
// Baseline: the least memory work for the same changes: every walker run's XOR bytes XORed
// into a warm copy of each holding rank's weights at its local offset (offsets precomputed).
// total_ns_per_changed_byte is the production path: planner + plan_transport + rank_stage;
// total_split_ns_per_changed_byte has layout_mapping + plan_records in place of planner.
//
// ns_per_changed_byte = time for all ranks / nonzero XOR bytes of the canonical tensor (a
// replicated tensor stages every byte at every rank, the baseline too). CPU time is the
// process's (user + system, page faults included): the process is pinned to one CPU and
// single-threaded except for helper threads the cpu backend may start for large gathers,
// whose work counts as well. Checks: the staged bytes equal old ^ delta at every staged
// position, the owners' partial sums give the new tensor's Adler-32, and the baseline's
// weights end as expected; any failure or a missing figure exits 1.
//
// Workloads: one ~--size-mib bf16 tensor per layout (replicated over world 4; row = dim 0 and
// column = dim 1 shards at tp 4; fused qkv, 32 heads, 2 KV heads replicated twice, tp 4; MoE
// w13 [8, 2I, H] split on dim 1 into gate|up, tp 4). XOR deltas change bf16 elements at the
// given byte densities: mostly the low byte alone, one in five both bytes.
//
// Usage: plan_stage_bench [--size-mib 64] [--densities 0.005,0.025] [--reps 3]
//                         [--part-mib 4] [--layouts replicated,row,column,fused_qkv,moe]
//                         [--plan-version 2]  (1: the plan format without compact records)
#include <sched.h>
#include <time.h>
#include <unistd.h>
#include <zstd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "bench_util.h"
#include "deltasync/adler32.h"
#include "deltasync/delta_manifest.h"
#include "deltasync/layout.h"
#include "deltasync/object_store.h"
#include "deltasync/sync_planner.h"
#include "deltasync/write_plan.h"
#include "plan_sink.h"
#include "shim/device_backend.h"
#include "shim/plan_stage.h"
#include "shm/messages.h"
#include "shm/plan_arena.h"

namespace deltakv {
namespace {

using deltasync::DType;
using deltasync::LayoutPiece;
using deltasync::PlanOutput;
using deltasync::PlanTensor;
using deltasync::TensorLayout;
using deltasync::WritePlanReader;
using deltasync::WritePlanWriter;

constexpr uint32_t kWorld = 4;
constexpr double kTargetNsPerChangedByte = 20;

struct Flags {
  size_t size_mib = 64;
  std::vector<double> densities = {0.005, 0.025};
  int reps = 3;
  // The sidecar's part size at the default --plan-buffer-bytes: min(4 MiB, budget / (2 * world)).
  size_t part_mib = 4;
  uint32_t plan_version = deltasync::kPlanVersionCompact;  // the sidecar's
  std::vector<std::string> layouts = {"replicated", "row", "column", "fused_qkv", "moe"};
};

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "plan_stage_bench: error: %s\n", what.c_str());
  std::exit(1);
}

void Check(const Status& s, const std::string& what) {
  if (!s.ok()) Fail(what + ": " + s.ToString());
}

template <typename T>
T Take(StatusOr<T> v, const std::string& what) {
  if (!v.ok()) Fail(what + ": " + v.status().ToString());
  return std::move(v).value();
}

Flags ParseFlags(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&] { return bench::FlagValue(argc, argv, &i); };
    if (a == "--size-mib") {
      f.size_mib = std::strtoull(next(), nullptr, 10);
    } else if (a == "--densities") {
      f.densities = bench::ParseList<double>(next());
    } else if (a == "--reps") {
      f.reps = std::atoi(next());
    } else if (a == "--part-mib") {
      f.part_mib = std::strtoull(next(), nullptr, 10);
    } else if (a == "--layouts") {
      f.layouts = bench::ParseList<std::string>(next());
    } else if (a == "--plan-version") {
      f.plan_version = static_cast<uint32_t>(std::strtoul(next(), nullptr, 10));
    } else {
      std::fprintf(stderr, "unknown flag %s\n", a.c_str());
      std::exit(2);
    }
  }
  if (f.size_mib == 0 || f.reps < 1 || f.part_mib == 0 || f.densities.empty()) {
    std::fprintf(stderr, "--size-mib, --reps and --part-mib must be >= 1\n");
    std::exit(2);
  }
  if (f.plan_version != deltasync::kPlanVersion &&
      f.plan_version != deltasync::kPlanVersionCompact) {
    std::fprintf(stderr, "--plan-version must be 1 or 2\n");
    std::exit(2);
  }
  return f;
}

// ---- Timing ----------------------------------------------------------------------------

double CpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

double WallSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

struct Span {
  double cpu = 0;
  double wall = 0;
  Span& operator+=(const Span& o) {
    cpu += o.cpu;
    wall += o.wall;
    return *this;
  }
};

// Measures the code between construction and Stop().
class Timer {
 public:
  Timer() : cpu0_(CpuSeconds()), wall0_(WallSeconds()) {}
  Span Stop() const { return {CpuSeconds() - cpu0_, WallSeconds() - wall0_}; }

 private:
  double cpu0_, wall0_;
};

// The best (lowest) of several repetitions, CPU and wall taken separately.
struct Best {
  double cpu = std::numeric_limits<double>::infinity();
  double wall = std::numeric_limits<double>::infinity();
  void Add(const Span& s) {
    cpu = std::min(cpu, s.cpu);
    wall = std::min(wall, s.wall);
  }
};

// ---- Workload --------------------------------------------------------------------------

struct Workload {
  std::string name;
  TensorLayout layout;
};

std::vector<Workload> MakeWorkloads(const Flags& f) {
  const uint64_t bytes = f.size_mib << 20;
  std::vector<Workload> out;
  for (const std::string& name : f.layouts) {
    StatusOr<TensorLayout> layout = InvalidArgument("unknown layout '" + name + "'");
    if (name == "replicated" || name == "row" || name == "column") {
      const uint64_t cols = 4096;
      const uint64_t rows = std::max<uint64_t>(bytes / (cols * 2) / kWorld, 1) * kWorld;
      if (name == "replicated") {
        layout = TensorLayout::Replicated({rows, cols}, DType::kBF16, kWorld);
      } else {
        layout = TensorLayout::Sharded({rows, cols}, DType::kBF16, name == "row" ? 0 : 1, kWorld);
      }
    } else if (name == "fused_qkv") {
      // q: 32 heads, k and v: 2 KV heads each held by 2 of the 4 ranks; hidden fills the size.
      const uint64_t rows = (32 + 2 * 2) * 128;
      const uint64_t hidden = std::max<uint64_t>(bytes / (rows * 2) / 64, 1) * 64;
      auto parts = Take(deltasync::QkvPartSpecs(32, 2, 128, {hidden}, kWorld), "qkv parts");
      layout = TensorLayout::FusedCheckpoint(std::move(parts), DType::kBF16, kWorld);
    } else if (name == "moe") {
      // w13 [E, 2I, H]: gate|up fused on dim 1, each part sharded over tp ranks.
      const uint64_t experts = 8, hidden = 2048;
      const uint64_t i2 = std::max<uint64_t>(bytes / (experts * hidden * 2) / (2 * kWorld), 1) *
                          (2 * kWorld);
      layout = TensorLayout::MoeExperts({experts, i2, hidden}, DType::kBF16, 1, 2, 1, kWorld);
    }
    out.push_back({name, Take(std::move(layout), "layout " + name)});
  }
  return out;
}

struct Run {
  uint64_t pos = 0;  // canonical offset
  uint64_t at = 0;   // offset of its bytes in Delta::bytes
  uint32_t len = 0;
};

// A synthetic XOR delta as the sparse walker delivers it to the planner's sink (which takes
// bytes, NonzeroSink::TakesBytes): its nonzero bytes packed (position << 8 | value), in
// batches of one 128 KiB block of output each; also as maximal runs of nonzero bytes.
struct Delta {
  std::vector<uint8_t> dense;  // for the checks only
  std::vector<Run> runs;
  std::vector<uint8_t> bytes;
  std::vector<uint64_t> entries;
  std::vector<size_t> batch_ends;  // entries of batch k: [batch_ends[k - 1], batch_ends[k])
  uint64_t changed = 0;  // nonzero bytes
};

Delta MakeDelta(uint64_t size, double density, uint64_t seed) {
  Delta d;
  d.dense.assign(size, 0);
  std::mt19937_64 rng(seed);
  // A changed element changes 1.2 bytes on average; `density` is the fraction of bytes.
  const uint64_t elements = size / 2;
  std::geometric_distribution<uint64_t> gap(std::min(1.0, density * 2 / 1.2));
  for (uint64_t e = gap(rng); e < elements; e += 1 + gap(rng)) {
    const uint64_t r = rng();
    d.dense[2 * e] = static_cast<uint8_t>(1 + r % 127);                           // mantissa
    if ((r >> 8) % 5 == 0) d.dense[2 * e + 1] = static_cast<uint8_t>(1 + (r >> 16) % 3);  // exp
  }
  for (uint64_t i = 0; i < size;) {
    if (d.dense[i] == 0) {
      ++i;
      continue;
    }
    uint64_t j = i;
    while (j < size && d.dense[j] != 0) ++j;
    d.runs.push_back({i, d.bytes.size(), static_cast<uint32_t>(j - i)});
    d.bytes.insert(d.bytes.end(), d.dense.begin() + i, d.dense.begin() + j);
    d.changed += j - i;
    i = j;
  }
  constexpr uint64_t kBlock = 128 << 10;
  for (uint64_t i = 0; i < size; ++i) {
    if (d.dense[i] != 0) d.entries.push_back(i << 8 | d.dense[i]);
    if ((i + 1) % kBlock == 0 || i + 1 == size) {
      if (d.batch_ends.empty() || d.batch_ends.back() != d.entries.size()) {
        d.batch_ends.push_back(d.entries.size());
      }
    }
  }
  return d;
}

// ---- Stage 1: layout mapping -----------------------------------------------------------

// The planner's own sink (deltasync/src/plan_sink.h) over the walker's bytes of one frame.
Status RouteAll(const Delta& d, const TensorLayout& layout, PlanOutput& out) {
  deltasync::PlanSink sink(layout, 0, 0, out, nullptr);
  if (!sink.TakesBytes()) return Internal("the planner's sink no longer takes bytes");
  size_t begin = 0;
  for (size_t end : d.batch_ends) {
    RETURN_IF_ERROR(sink.OnBytes(d.entries.data() + begin, end - begin, 0));
    begin = end;
  }
  return sink.Flush();
}

class CountingOutput final : public PlanOutput {
 public:
  Status Add(uint32_t, uint32_t, uint64_t, uint64_t, std::span<const uint8_t> bytes,
             bool) override {
    ++pieces;
    piece_bytes += bytes.size();
    return Status::Ok();
  }
  bool AddShort(uint32_t, uint32_t, uint64_t, uint64_t, std::span<const uint8_t> bytes,
                bool) override {
    ++pieces;
    piece_bytes += bytes.size();
    return true;
  }
  uint64_t pieces = 0;
  uint64_t piece_bytes = 0;
};

// Keeps every piece, bytes copied (the spans a PlanOutput gets are valid during the call).
struct Piece {
  uint32_t rank;
  uint32_t len;
  uint64_t local;
  uint64_t canonical;
  uint64_t at;
  bool owner;
  bool operator==(const Piece&) const = default;
};

class RecordingOutput final : public PlanOutput {
 public:
  Status Add(uint32_t rank, uint32_t, uint64_t local, uint64_t canonical,
             std::span<const uint8_t> bytes, bool owner) override {
    pieces.push_back(
        {rank, static_cast<uint32_t>(bytes.size()), local, canonical, pool.size(), owner});
    pool.insert(pool.end(), bytes.begin(), bytes.end());
    return Status::Ok();
  }
  std::vector<Piece> pieces;
  std::vector<uint8_t> pool;
};

// ---- The real planner, for the cross-check ---------------------------------------------

class MemoryStore final : public deltasync::ObjectStore {
 public:
  std::map<std::string, std::string> objects;
  StatusOr<uint64_t> Size(const std::string& name) override {
    auto it = objects.find(name);
    if (it == objects.end()) return NotFound(name);
    return uint64_t{it->second.size()};
  }
  StatusOr<std::string> ReadRange(const std::string& name, uint64_t offset,
                                  uint64_t length) override {
    auto it = objects.find(name);
    if (it == objects.end()) return NotFound(name);
    if (offset > it->second.size() || length > it->second.size() - offset) return DataLoss(name);
    return it->second.substr(offset, length);
  }
  StatusOr<std::string> ReadObject(const std::string& name, uint64_t max_bytes) override {
    ASSIGN_OR_RETURN(uint64_t n, Size(name));
    if (n > max_bytes) return ResourceExhausted(name);
    return objects[name];
  }
  std::string Describe() const override { return "memory"; }
};

// Runs BuildSyncPlans over `d` compressed into one frame; true if its pieces equal `mine`.
bool MatchesPlanner(const Delta& d, const TensorLayout& layout, const RecordingOutput& mine) {
  std::string frame(ZSTD_compressBound(d.dense.size()), '\0');
  const size_t n = ZSTD_compress(frame.data(), frame.size(), d.dense.data(), d.dense.size(), 1);
  if (ZSTD_isError(n)) Fail(std::string("zstd: ") + ZSTD_getErrorName(n));
  frame.resize(n);
  MemoryStore store;
  store.objects["shard-00000.zst"] = frame;
  deltasync::DeltaManifest m;
  m.version = "v2";
  m.parent_version = "v1";
  m.objects.push_back({"shard-00000.zst", n, ""});
  deltasync::DeltaTensor t;
  t.name = "w";
  t.length = d.dense.size();
  t.frames.push_back({0, d.dense.size(), "shard-00000.zst", 0, n});
  m.tensors.push_back(t);
  deltasync::RankTensorTables ranks(layout.world());
  for (auto& table : ranks) table.emplace("w", deltasync::RankTensorEntry{0, layout});
  deltasync::PlannerOptions options;
  options.prefetch = false;
  RecordingOutput real;
  Take(deltasync::BuildSyncPlans(m, store, ranks, real, options), "BuildSyncPlans");
  if (real.pieces.size() != mine.pieces.size()) return false;
  for (size_t i = 0; i < real.pieces.size(); ++i) {
    const Piece& a = real.pieces[i];
    const Piece& b = mine.pieces[i];
    if (a.rank != b.rank || a.len != b.len || a.local != b.local || a.canonical != b.canonical ||
        a.owner != b.owner ||
        std::memcmp(real.pool.data() + a.at, mine.pool.data() + b.at, a.len) != 0) {
      return false;
    }
  }
  return true;
}

// ---- Stage 2: plan records -------------------------------------------------------------

// One rank's plan as parts: 8-aligned buffers of the part capacity, kept across repetitions.
struct RankParts {
  std::vector<std::vector<uint64_t>> buffers;
  std::vector<uint64_t> used;  // bytes of each finished part
  std::optional<WritePlanWriter> writer;
  uint64_t last_line = 0;  // WritePlanWriter::CountLines's state for the one tensor
};

// Appends pieces into part-sized WritePlanWriters the way PlanStreamer::Add does (a new part
// when the next record does not fit; a run larger than a whole part is split).
class PartOutput final : public PlanOutput {
 public:
  PartOutput(uint32_t world, uint64_t part_capacity, PlanTensor table, uint32_t version)
      : ranks_(world), capacity_(part_capacity), table_{table}, version_(version) {}

  Status Add(uint32_t r, uint32_t tensor, uint64_t local_offset, uint64_t canonical_offset,
             std::span<const uint8_t> bytes, bool owner) override {
    if (r >= ranks_.size()) return Internal("layout names rank beyond the plan writers");
    RankParts& rp = ranks_[r];
    if (AddShort(r, tensor, local_offset, canonical_offset, bytes, owner)) return Status::Ok();
    while (!bytes.empty()) {
      if (!rp.writer) Open(rp);
      uint64_t n = bytes.size();
      if (WritePlanWriter::RecordBytes(n) > rp.writer->remaining()) {
        if (rp.writer->record_count() > 0) {
          RETURN_IF_ERROR(Close(rp));
          continue;
        }
        n = (rp.writer->remaining() - WritePlanWriter::kMaxRecordOverhead) & ~uint64_t{7};
      }
      RETURN_IF_ERROR(
          rp.writer->Add(tensor, local_offset, canonical_offset, bytes.first(n), owner));
      bytes = bytes.subspan(n);
      local_offset += n;
      canonical_offset += n;
    }
    return Status::Ok();
  }

  // As PlanStreamer::AddShort.
  bool AddShort(uint32_t r, uint32_t tensor, uint64_t local_offset, uint64_t canonical_offset,
                std::span<const uint8_t> bytes, bool owner) override {
    if (r >= ranks_.size()) return false;
    RankParts& rp = ranks_[r];
    return rp.writer &&
           rp.writer->TryAddShort(tensor, local_offset, canonical_offset, bytes, owner);
  }

  // As PlanStreamer: the open part's writer, valid until a part opens or closes.
  WritePlanWriter* LendWriter(uint32_t r) override {
    return r < ranks_.size() && ranks_[r].writer ? &*ranks_[r].writer : nullptr;
  }
  const uint64_t* LendGeneration() override { return &generation_; }

  // As PlanStreamer::AddRecorded: a walker thread's records appended whole to the open part,
  // or to a new one, or piece by piece when they do not fit a whole part.
  bool TakesRecorded() override { return true; }
  Status AddRecorded(uint32_t r, const WritePlanWriter& recorded) override {
    if (r >= ranks_.size()) return Internal("layout names rank beyond the plan writers");
    RankParts& rp = ranks_[r];
    if (recorded.records().empty()) return Status::Ok();
    if (!rp.writer) Open(rp);
    if (rp.writer->AppendFrom(recorded)) return Status::Ok();
    if (rp.writer->record_count() > 0) {
      RETURN_IF_ERROR(Close(rp));
      Open(rp);
      if (rp.writer->AppendFrom(recorded)) return Status::Ok();
    }
    return PlanOutput::AddRecorded(r, recorded);
  }

  Status Finish() {
    for (RankParts& rp : ranks_) {
      if (!rp.writer) Open(rp);
      RETURN_IF_ERROR(Close(rp));
    }
    return Status::Ok();
  }

  // Forgets the parts (keeps the buffers) for the next repetition.
  void Reset() {
    for (RankParts& rp : ranks_) {
      rp.used.clear();
      rp.writer.reset();
      rp.last_line = 0;
    }
    records_ = 0;
    touched_lines_ = 0;
  }

  const std::vector<RankParts>& ranks() const { return ranks_; }
  // Records of the finished parts (after Finish: all).
  uint64_t records() const { return records_; }
  uint64_t touched_lines() const { return touched_lines_; }
  uint64_t capacity() const { return capacity_; }

 private:
  void Open(RankParts& rp) {
    ++generation_;
    if (rp.used.size() == rp.buffers.size()) {
      rp.buffers.emplace_back(capacity_ / 8, 0);  // faulted here, in the untimed warm-up
    }
    std::vector<uint64_t>& b = rp.buffers[rp.used.size()];
    rp.writer.emplace(std::span<uint8_t>(reinterpret_cast<uint8_t*>(b.data()), capacity_),
                      std::vector<PlanTensor>{table_}, version_);
    // The sidecar's writers count the lines their records touch (the sync's touched_lines).
    rp.writer->CountLines(&rp.last_line, &touched_lines_);
  }

  Status Close(RankParts& rp) {
    ++generation_;
    ASSIGN_OR_RETURN(uint64_t used, rp.writer->Finish());
    rp.used.push_back(used);
    records_ += rp.writer->record_count();
    rp.writer.reset();
    return Status::Ok();
  }

  std::vector<RankParts> ranks_;
  uint64_t capacity_;
  PlanTensor table_;
  uint32_t version_;
  uint64_t records_ = 0;
  uint64_t touched_lines_ = 0;
  uint64_t generation_ = 0;
};

// True if both outputs hold the same finished parts, byte for byte.
bool SameParts(const PartOutput& a, const PartOutput& b) {
  if (a.ranks().size() != b.ranks().size()) return false;
  for (size_t r = 0; r < a.ranks().size(); ++r) {
    const RankParts& x = a.ranks()[r];
    const RankParts& y = b.ranks()[r];
    if (x.used != y.used) return false;
    for (size_t i = 0; i < x.used.size(); ++i) {
      if (std::memcmp(x.buffers[i].data(), y.buffers[i].data(), x.used[i]) != 0) return false;
    }
  }
  return true;
}

// Every record of the finished parts, rank by rank in order: (rank, local, canonical, owner,
// bytes). Parts that differ only in where one ends or in repeated tensor records give the same.
std::vector<std::tuple<uint32_t, uint64_t, uint64_t, bool, std::string>> RecordsOf(
    const PartOutput& out) {
  std::vector<std::tuple<uint32_t, uint64_t, uint64_t, bool, std::string>> records;
  for (uint32_t r = 0; r < out.ranks().size(); ++r) {
    const RankParts& rp = out.ranks()[r];
    for (size_t i = 0; i < rp.used.size(); ++i) {
      std::vector<uint64_t> copy(rp.buffers[i].begin(), rp.buffers[i].end());
      auto reader = WritePlanReader::Open(
          std::span<uint8_t>(reinterpret_cast<uint8_t*>(copy.data()), rp.used[i]));
      if (!reader.ok()) Fail("a finished part does not open: " + reader.status().ToString());
      Check(reader->ForEach([&](const deltasync::PlanRecord& rec, std::span<uint8_t> bytes) {
        records.emplace_back(r, rec.local_offset, rec.canonical_offset,
                             (rec.flags & deltasync::kPlanRecordOwner) != 0,
                             std::string(bytes.begin(), bytes.end()));
        return Status::Ok();
      }),
            "reading a finished part");
    }
  }
  return records;
}

Status AppendAll(const RecordingOutput& pieces, PartOutput& out) {
  // As PlanSink hands pieces over: short ones through AddShort first.
  for (const Piece& p : pieces.pieces) {
    const std::span<const uint8_t> bytes(pieces.pool.data() + p.at, p.len);
    if (p.len - 1 < WritePlanWriter::kShortBytes &&
        out.AddShort(p.rank, 0, p.local, p.canonical, bytes, p.owner)) {
      continue;
    }
    RETURN_IF_ERROR(out.Add(p.rank, 0, p.local, p.canonical, bytes, p.owner));
  }
  return out.Finish();
}

// ---- Stage 3: plan transport -----------------------------------------------------------

struct TransportTimes {
  Span sidecar;  // page faults, publish, message; acquiring the arena prorated
  Span rank;
  Span arena;        // acquiring the arenas (reused, or created on the first sync), in full
  Span arena_share;  // the same, each arena's cost times the share of its capacity used
};

// The arenas of a sync's transport, kept across calls as the sidecar keeps its pools and each
// engine handle its mapped arenas: the sidecar's pool per rank, the rank's cache and the
// buffer it copies parts into.
struct TransportState {
  explicit TransportState(uint32_t world) : copies(world), caches(world) {
    const std::string prefix = "dkv-plan-stage-bench-" + std::to_string(getpid());
    for (uint32_t r = 0; r < world; ++r) {
      pools.push_back(std::make_unique<shm::PlanArenaPool>(prefix, r));
    }
  }
  std::vector<std::unique_ptr<shm::PlanArenaPool>> pools;
  std::vector<std::vector<uint64_t>> copies;
  std::vector<shm::PlanArenaCache> caches;
  uint64_t generation = 0;
};

// Parts sent and not consumed per rank at the sidecar's default --plan-buffer-bytes (its pool
// holds one more arena).
constexpr size_t kPartsInFlight = 7;

// Moves every part of every rank through a plan arena of its rank's pool; returns the time of
// each side. The first call creates the arenas (a first sync), later calls reuse them.
TransportTimes TransportAll(const PartOutput& parts, uint64_t sync_id, TransportState& state) {
  const std::string version = "v2";
  const uint64_t root_bytes = deltasync::PlanArenaRootBytes(version.size());
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  TransportTimes t;
  for (uint32_t r = 0; r < parts.ranks().size(); ++r) {
    const RankParts& rp = parts.ranks()[r];
    for (uint32_t p = 0; p < rp.used.size(); ++p) {
      const uint64_t used = rp.used[p];
      // Sidecar: take an arena of the pool (as PlanStreamer::OpenPart) and lay out root and
      // plan block.
      const double share = static_cast<double>(used) / static_cast<double>(parts.capacity());
      Timer acquire;
      shm::PlanArenaWriter* arena =
          Take(state.pools[r]->Acquire(shm::kArenaDataOffset + deltasync::PlanArenaRootBytes(64) +
                                           parts.capacity() + 64,
                                       ++state.generation, sync_id, kPartsInFlight + 1),
               "acquire arena");
      const uint64_t root = Take(arena->Allocate(root_bytes, 8), "allocate root");
      Check(arena->SetRoot(root), "set root");
      std::memcpy(arena->Bytes(root, root_bytes).data() + sizeof(deltasync::PlanArenaRoot),
                  version.data(), version.size());
      const uint64_t plan_at = Take(arena->Allocate(parts.capacity(), 8), "allocate plan");
      uint8_t* plan = arena->Bytes(plan_at, parts.capacity()).data();
      if (plan == nullptr || plan_at != root + root_bytes) Fail("plan arena layout");
      const Span fixed = acquire.Stop();
      t.arena += fixed;
      t.arena_share += {fixed.cpu * share, fixed.wall * share};
      // Fault the pages the records will fill (none once the arena was used before).
      Timer fault;
      volatile uint8_t* touch = plan;
      for (uint64_t i = 0; i < used; i += page) touch[i] = 0;
      touch[used - 1] = 0;
      t.sidecar += fault.Stop();
      // The records, written in place by the sidecar's writer: counted in plan_records.
      std::memcpy(plan, rp.buffers[p].data(), used);
      Timer publish;
      deltasync::PlanArenaRoot rb{used, static_cast<uint32_t>(version.size()), p};
      std::memcpy(arena->Bytes(root, sizeof(rb)).data(), &rb, sizeof(rb));
      Check(arena->Publish(), "publish");
      shm::PlanRef ref = arena->Ref();
      ref.flags = p + 1 < rp.used.size() ? shm::kPlanMore : 0;
      const std::vector<uint8_t> wire = Take(
          shm::EncodeMessage(Take(shm::MakePlan(sync_id, ref), "make plan")), "encode plan");
      t.sidecar += publish.Stop();

      // Rank: what Engine::StagePart does before staging.
      Timer rank;
      {
        const shm::Message msg = Take(shm::DecodeMessage(wire), "decode plan");
        const shm::PlanRef got = Take(shm::ParsePlan(msg), "parse plan");
        shm::PlanArenaReader* reader =
            Take(state.caches[r].Open(got.arena_name, got.generation), "open arena");
        auto root_block = Take(
            reader->Block(reader->root_offset(), sizeof(deltasync::PlanArenaRoot)), "root block");
        deltasync::PlanArenaRoot rr;
        std::memcpy(&rr, root_block.data(), sizeof(rr));
        auto version_block = Take(
            reader->Block(reader->root_offset() + sizeof(deltasync::PlanArenaRoot), rr.version_len),
            "version block");
        auto plan_block = Take(
            reader->Block(reader->root_offset() + deltasync::PlanArenaRootBytes(rr.version_len),
                          rr.plan_bytes),
            "plan block");
        std::vector<uint64_t>& words = state.copies[r];
        if (words.size() < plan_block.size() / 8 + 1) words.resize(plan_block.size() / 8 + 1);
        std::memcpy(words.data(), plan_block.data(), plan_block.size());
        const std::string version_id(reinterpret_cast<const char*>(version_block.data()),
                                     version_block.size());
        Check(reader->MarkConsumed(), "mark consumed");
        if (version_id != version || rr.plan_bytes != used ||
            std::memcmp(words.data(), rp.buffers[p].data(), used) != 0) {
          Fail("the part the rank copied out differs from the one sent");
        }
      }
      t.rank += rank.Stop();
    }
  }
  return t;
}

// ---- Stage 4: rank stage ---------------------------------------------------------------

struct StageResult {
  Span time;
  uint64_t records = 0;
  uint64_t bytes = 0;
  std::vector<shim::StagedTensor> sums;
};

// Stages every part of one rank (part copies in `work`, restored from the sent parts first).
StageResult StageRank(const RankParts& rp, std::vector<std::vector<uint64_t>>& work,
                      const std::vector<shim::LocalTensor>& locals, shim::DeviceBackend& backend) {
  work.resize(rp.used.size());
  for (size_t p = 0; p < rp.used.size(); ++p) {
    work[p].resize(rp.used[p] / 8 + 1);
    std::memcpy(work[p].data(), rp.buffers[p].data(), rp.used[p]);
  }
  StageResult res;
  res.sums.assign(1, shim::StagedTensor{});
  std::vector<std::unique_ptr<shim::PreparedScatter>> prepared;
  Timer timer;
  for (size_t p = 0; p < rp.used.size(); ++p) {
    std::span<uint8_t> plan(reinterpret_cast<uint8_t*>(work[p].data()), rp.used[p]);
    WritePlanReader reader = Take(WritePlanReader::OpenLazy(plan), "open plan");
    res.records += reader.record_count();
    prepared.push_back(Take(backend.StagePart(reader, locals, &res.sums), "stage part"));
  }
  res.time = timer.Stop();
  for (const auto& s : prepared) res.bytes += s->bytes();
  return res;
}

// Every staged byte is old ^ delta; the local bytes the plan names hold the canonical bytes.
uint64_t CheckStaged(const RankParts& rp, std::vector<std::vector<uint64_t>>& work,
                     const std::vector<uint8_t>& weights, const std::vector<uint8_t>& old,
                     const Delta& d) {
  uint64_t checked = 0;
  for (size_t p = 0; p < rp.used.size(); ++p) {
    std::span<uint8_t> plan(reinterpret_cast<uint8_t*>(work[p].data()), rp.used[p]);
    WritePlanReader reader = Take(WritePlanReader::Open(plan), "open staged plan");
    Check(reader.ForEach([&](const deltasync::PlanRecord& rec, std::span<uint8_t> bytes) {
      for (uint32_t i = 0; i < rec.length; ++i) {
        const uint64_t c = rec.canonical_offset + i, l = rec.local_offset + i;
        if (weights[l] != old[c] || bytes[i] != (old[c] ^ d.dense[c])) {
          return DataLoss("staged byte at local " + std::to_string(l) + " (canonical " +
                          std::to_string(c) + ") is " + std::to_string(bytes[i]) + ", expected " +
                          std::to_string(old[c] ^ d.dense[c]));
        }
      }
      checked += rec.length;
      return Status::Ok();
    }),
          "staged bytes");
  }
  return checked;
}

// ---- Baseline --------------------------------------------------------------------------

struct BasePiece {
  uint64_t local;
  uint64_t at;
  uint32_t len;
};

void XorPieces(const std::vector<BasePiece>& pieces, const uint8_t* src, uint8_t* dst) {
  for (const BasePiece& p : pieces) {
    const uint8_t* s = src + p.at;
    uint8_t* w = dst + p.local;
    for (uint32_t i = 0; i < p.len; ++i) w[i] ^= s[i];
  }
}

// ---- Driver ----------------------------------------------------------------------------

nlohmann::json StageJson(const Best& b, uint64_t changed, uint64_t records, double bytes) {
  return {{"ns_per_changed_byte", b.cpu * 1e9 / static_cast<double>(changed)},
          {"wall_ns_per_changed_byte", b.wall * 1e9 / static_cast<double>(changed)},
          {"records", records},
          {"bytes_per_record", records ? bytes / static_cast<double>(records) : 0.0}};
}

bool Finite(double v) { return std::isfinite(v) && v > 0; }

void RunWorkload(const Flags& flags, const Workload& w, double density, uint64_t seed,
                 shim::DeviceBackend& backend) {
  const TensorLayout& layout = w.layout;
  const uint64_t size = layout.canonical_bytes();
  const uint32_t world = layout.world();
  const Delta d = MakeDelta(size, density, seed);
  if (d.changed == 0) Fail(w.name + ": the delta changes no byte");

  // Old weights: the canonical tensor, and each rank's local tensor built from it.
  std::vector<uint8_t> old(size);
  {
    std::mt19937_64 rng(seed ^ 0x9e3779b97f4a7c15ull);
    for (uint64_t i = 0; i < size; i += 8) {
      const uint64_t v = rng();
      std::memcpy(old.data() + i, &v, std::min<uint64_t>(8, size - i));
    }
  }
  std::vector<std::vector<uint8_t>> weights(world);
  for (uint32_t r = 0; r < world; ++r) weights[r].assign(layout.LocalBytes(r).total, 0xa5);
  Check(layout.ForEachPiece(0, size,
                            [&](const LayoutPiece& p) {
                              std::memcpy(weights[p.rank].data() + p.local_offset,
                                          old.data() + p.canonical_offset, p.length);
                            }),
        "building rank weights");
  std::vector<uint8_t> fresh(size);
  for (uint64_t i = 0; i < size; ++i) fresh[i] = old[i] ^ d.dense[i];
  const uint32_t parent_adler = deltasync::Adler32(old);
  const uint32_t new_adler = deltasync::Adler32(fresh);

  // Stage 1: layout mapping.
  Best mapping;
  CountingOutput counted;
  for (int rep = 0; rep <= flags.reps; ++rep) {  // rep 0 warms up
    CountingOutput c;
    Timer t;
    Check(RouteAll(d, layout, c), "layout mapping");
    const Span s = t.Stop();
    if (rep > 0) mapping.Add(s);
    counted = c;
  }
  RecordingOutput pieces;
  Check(RouteAll(d, layout, pieces), "recording pieces");
  if (pieces.pieces.size() != counted.pieces) Fail("piece counts differ between passes");
  const bool planner_match = MatchesPlanner(d, layout, pieces);
  if (!planner_match) Fail(w.name + ": the routed pieces differ from those of BuildSyncPlans");

  // Stage 2: plan records.
  const PlanTensor table{0, 0, size, parent_adler, new_adler};
  PartOutput parts(
      world, std::max<uint64_t>(flags.part_mib << 20, WritePlanWriter::FixedBytes(1) + (64 << 10)),
      table, flags.plan_version);
  Best records;
  for (int rep = 0; rep <= flags.reps; ++rep) {
    parts.Reset();
    Timer t;
    Check(AppendAll(pieces, parts), "plan records");
    const Span s = t.Stop();
    if (rep > 0) records.Add(s);
  }
  // The planner as the sidecar runs it, both stages at once: the PlanSink appends each short
  // run held by one rank straight to the rank's open part (the writer the output lends,
  // PlanOutput::LendWriter) and hands everything else to the output's AddShort/Add. Its parts
  // must be byte for byte those of the two stages.
  PartOutput routed(world, parts.capacity(), table, flags.plan_version);
  Best planner;
  for (int rep = 0; rep <= flags.reps; ++rep) {
    routed.Reset();
    Timer t;
    Check(RouteAll(d, layout, routed), "planner");
    Check(routed.Finish(), "planner parts");
    const Span s = t.Stop();
    if (rep > 0) planner.Add(s);
  }
  if (!SameParts(parts, routed) || routed.records() != parts.records() ||
      routed.touched_lines() != parts.touched_lines()) {
    Fail(w.name + ": the planner's parts differ from those of the mapping and records stages");
  }

  // With decode threads >= 2 the routing runs on the walker threads, into per-rank records
  // (deltasync::RecordsOutput, chunks of at most 64 KiB per rank), and the planning thread
  // only appends those to the parts (PlanOutput::AddRecorded): walker_route is the first (on
  // every walker thread, in parallel), plan_append the second (the one serial step per changed
  // byte). Their parts must hold the planner's records, record and line counts.
  // As in the planner, the buffers of appended records come back for the walkers to reuse:
  // each repetition hands the previous one's back first.
  std::vector<std::vector<deltasync::RecordedRank>> chunks;
  deltasync::RecordBufferPool buffers(size_t{1} << 20);
  Best walker_route;
  for (int rep = 0; rep <= flags.reps; ++rep) {
    for (auto& c : chunks) {
      for (deltasync::RecordedRank& r : c) buffers.Give(std::move(r));
    }
    chunks.clear();
    deltasync::RecordsOutput recorder(
        world, 1,
        [&](std::vector<deltasync::RecordedRank> c) {
          chunks.push_back(std::move(c));
          return Status::Ok();
        },
        &buffers);
    Timer t;
    Check(RouteAll(d, layout, recorder), "walker route");
    Check(recorder.Send(), "walker route");
    const Span s = t.Stop();
    if (rep > 0) walker_route.Add(s);
  }
  PartOutput appended(world, parts.capacity(), table, flags.plan_version);
  Best plan_append;
  for (int rep = 0; rep <= flags.reps; ++rep) {
    appended.Reset();
    Timer t;
    for (const std::vector<deltasync::RecordedRank>& chunk : chunks) {
      for (const deltasync::RecordedRank& r : chunk) {
        Check(appended.AddRecorded(r.rank, r.writer), "plan append");
      }
    }
    Check(appended.Finish(), "plan append parts");
    const Span s = t.Stop();
    if (rep > 0) plan_append.Add(s);
  }
  if (RecordsOf(appended) != RecordsOf(routed) || appended.records() != routed.records() ||
      appended.touched_lines() != routed.touched_lines()) {
    Fail(w.name + ": the appended records differ from the planner's");
  }
  uint64_t chunk_count = 0;
  for (const auto& c : chunks) chunk_count += c.size();

  uint64_t plan_bytes = 0, part_count = 0;
  for (const RankParts& rp : parts.ranks()) {
    part_count += rp.used.size();
    for (uint64_t u : rp.used) plan_bytes += u;
  }

  // Stage 3: plan transport.
  // A sync of many tensors fills its parts, so an arena's fixed cost is charged by the share of
  // the part these records use; the figure for this tensor alone, in parts of its own, is
  // reported as unamortized. Rep 0 is the first sync: it creates the arenas and faults them in
  // (reported as first_sync); every later rep reuses them, as every later sync does.
  Best transport, transport_sidecar, transport_rank, transport_unamortized;
  Span first_sync;
  TransportState transport_state(world);
  for (int rep = 0; rep <= flags.reps; ++rep) {
    const TransportTimes t = TransportAll(parts, static_cast<uint64_t>(rep) + 1, transport_state);
    if (rep == 0) {
      first_sync = t.sidecar;
      first_sync += t.arena;
      first_sync += t.rank;
    } else {
      Span sidecar = t.sidecar;
      sidecar += t.arena_share;
      transport_sidecar.Add(sidecar);
      transport_rank.Add(t.rank);
      Span both = sidecar;
      both += t.rank;
      transport.Add(both);
      Span whole = t.sidecar;
      whole += t.arena;
      whole += t.rank;
      transport_unamortized.Add(whole);
    }
  }

  // Stage 4: rank stage, rank by rank; then the checks.
  Best stage;
  uint64_t staged_records = 0, staged_bytes = 0, checked = 0;
  deltasync::AdlerDelta owners;
  std::vector<std::vector<std::vector<uint64_t>>> work(world);
  std::vector<std::vector<shim::LocalTensor>> locals(world);
  for (uint32_t r = 0; r < world; ++r) {
    locals[r] = {{"w", weights[r].data(), weights[r].size()}};
  }
  for (int rep = 0; rep <= flags.reps; ++rep) {
    Span all;
    staged_records = staged_bytes = 0;
    owners = deltasync::AdlerDelta();
    for (uint32_t r = 0; r < world; ++r) {
      StageResult res = StageRank(parts.ranks()[r], work[r], locals[r], backend);
      all += res.time;
      staged_records += res.records;
      staged_bytes += res.bytes;
      owners.Merge(res.sums[0].delta);
      if (res.sums[0].bytes_changed != res.bytes) Fail("staged byte counts disagree");
    }
    if (rep > 0) stage.Add(all);
  }
  for (uint32_t r = 0; r < world; ++r) {
    checked += CheckStaged(parts.ranks()[r], work[r], weights[r], old, d);
  }
  if (checked != staged_bytes) Fail("checked bytes differ from staged bytes");
  if (owners.Apply(parent_adler, size) != new_adler) {
    Fail(w.name + ": the owners' partial sums do not give the new tensor's Adler-32");
  }

  // Baseline: each walker run XORed into every holding rank's weights.
  std::vector<std::vector<BasePiece>> base_pieces(world);
  uint64_t rank_changed = 0;
  for (const Run& run : d.runs) {
    Check(layout.ForEachPiece(run.pos, run.len,
                              [&](const LayoutPiece& p) {
                                base_pieces[p.rank].push_back(
                                    {p.local_offset, run.at + (p.canonical_offset - run.pos),
                                     static_cast<uint32_t>(p.length)});
                                rank_changed += p.length;
                              }),
          "baseline pieces");
  }
  Best baseline;
  std::vector<std::vector<uint8_t>> copies = weights;  // warm copies
  for (int rep = 0; rep <= flags.reps; ++rep) {
    Timer t;
    for (uint32_t r = 0; r < world; ++r) XorPieces(base_pieces[r], d.bytes.data(), copies[r].data());
    const Span s = t.Stop();
    if (rep > 0) baseline.Add(s);
  }
  // After reps + 1 passes each changed byte is new (odd) or old (even).
  const bool odd = (flags.reps + 1) % 2 == 1;
  for (uint32_t r = 0; r < world; ++r) {
    for (size_t i = 0; i < base_pieces[r].size(); i += 7) {
      const BasePiece& p = base_pieces[r][i];
      const uint8_t want = weights[r][p.local] ^ (odd ? d.bytes[p.at] : 0);
      if (copies[r][p.local] != want) Fail("baseline left unexpected bytes");
    }
  }

  const double changed = static_cast<double>(d.changed);
  // The total is the production path: the planner, the transport and the rank's stage.
  const double total_cpu = planner.cpu + transport.cpu + stage.cpu;
  const double total_wall = planner.wall + transport.wall + stage.wall;
  const double total_ns = total_cpu * 1e9 / changed;
  const double split_ns = (mapping.cpu + records.cpu + transport.cpu + stage.cpu) * 1e9 / changed;
  const double baseline_ns = baseline.cpu * 1e9 / changed;
  for (double v : {mapping.cpu, records.cpu, planner.cpu, transport.cpu, stage.cpu, baseline.cpu,
                   mapping.wall, records.wall, planner.wall, transport.wall, stage.wall,
                   baseline.wall, transport_unamortized.cpu, walker_route.cpu, plan_append.cpu,
                   walker_route.wall, plan_append.wall}) {
    if (!Finite(v)) Fail(w.name + ": a stage has no valid time");
  }
  nlohmann::json stages = {
      {"layout_mapping",
       StageJson(mapping, d.changed, counted.pieces, static_cast<double>(counted.piece_bytes))},
      {"plan_records",
       StageJson(records, d.changed, parts.records(), static_cast<double>(plan_bytes))},
      {"planner", StageJson(planner, d.changed, routed.records(), static_cast<double>(plan_bytes))},
      {"walker_route",
       StageJson(walker_route, d.changed, routed.records(), static_cast<double>(plan_bytes))},
      {"plan_append",
       StageJson(plan_append, d.changed, appended.records(), static_cast<double>(plan_bytes))},
      {"plan_transport",
       StageJson(transport, d.changed, parts.records(), static_cast<double>(plan_bytes))},
      {"rank_stage",
       StageJson(stage, d.changed, staged_records, static_cast<double>(staged_bytes))},
  };
  stages["plan_records"]["parts"] = part_count;
  stages["walker_route"]["rank_chunks"] = chunk_count;
  // How much of the planner's serial work per changed byte is left on the planning thread
  // when walkers route: the planner's time over plan_append's.
  stages["plan_append"]["planner_vs_append"] = planner.cpu / plan_append.cpu;
  stages["plan_transport"]["parts"] = part_count;
  stages["plan_transport"]["sidecar_ns_per_changed_byte"] = transport_sidecar.cpu * 1e9 / changed;
  stages["plan_transport"]["rank_ns_per_changed_byte"] = transport_rank.cpu * 1e9 / changed;
  stages["plan_transport"]["unamortized_ns_per_changed_byte"] =
      transport_unamortized.cpu * 1e9 / changed;
  stages["plan_transport"]["first_sync_ns_per_changed_byte"] = first_sync.cpu * 1e9 / changed;
  stages["plan_transport"]["part_fill"] =
      static_cast<double>(plan_bytes) / static_cast<double>(part_count * parts.capacity());
  nlohmann::json j = {{"bench", "plan_stage_bench"},
                      {"kind", "result"},
                      {"layout", w.name},
                      {"layout_kind", deltasync::LayoutKindName(layout.spec().kind)},
                      {"layout_spec", nlohmann::json::parse(layout.ToJson())},
                      {"world", world},
                      {"density", density},
                      {"canonical_bytes", size},
                      {"changed_bytes", d.changed},
                      {"measured_density", changed / static_cast<double>(size)},
                      {"walker_runs", d.runs.size()},
                      {"rank_changed_bytes", rank_changed},
                      {"plan_bytes", plan_bytes},
                      {"part_bytes", parts.capacity()},
                      {"plan_version", flags.plan_version},
                      {"reps", flags.reps},
                      {"stages", stages},
                      {"total_ns_per_changed_byte", total_ns},
                      {"total_split_ns_per_changed_byte", split_ns},
                      {"touched_lines", parts.touched_lines()},
                      {"total_wall_ns_per_changed_byte", total_wall * 1e9 / changed},
                      {"baseline_ns_per_changed_byte", baseline_ns},
                      {"baseline_wall_ns_per_changed_byte", baseline.wall * 1e9 / changed},
                      {"total_vs_baseline", total_cpu / baseline.cpu},
                      {"total_vs_baseline_wall", total_wall / baseline.wall},
                      {"target_ns_per_changed_byte", kTargetNsPerChangedByte},
                      {"within_target", total_ns <= kTargetNsPerChangedByte},
                      {"planner_match", planner_match},
                      {"checked_bytes", checked},
                      {"adler_ok", true},
                      {"build", bench::BuildType()}};
  bench::PrintResult(j);
}

// Pins the process to the CPU it runs on, so every thread it starts shares one core.
int PinToOneCpu() {
  const int cpu = sched_getcpu();
  if (cpu < 0) Fail("sched_getcpu failed");
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  if (sched_setaffinity(0, sizeof(set), &set) != 0) Fail("sched_setaffinity failed");
  return cpu;
}

int Main(int argc, char** argv) {
  const Flags flags = ParseFlags(argc, argv);
  const int cpu = PinToOneCpu();
  bench::PrintEnvironment("plan_stage_bench");
  std::fprintf(stderr, "plan_stage_bench: pinned to cpu %d\n", cpu);
  const std::vector<Workload> workloads = MakeWorkloads(flags);
  std::unique_ptr<shim::DeviceBackend> backend =
      Take(shim::MakeDeviceBackend("cpu"), "cpu backend");
  uint64_t seed = 1;
  for (double density : flags.densities) {
    if (!(density > 0 && density <= 1)) Fail("densities must be in (0, 1]");
    for (const Workload& w : workloads) RunWorkload(flags, w, density, seed++, *backend);
  }
  return 0;
}

}  // namespace
}  // namespace deltakv

int main(int argc, char** argv) { return deltakv::Main(argc, argv); }
