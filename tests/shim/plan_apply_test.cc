// The whole sparse data path without processes: publish a delta, plan it for TP=2 ranks with
// real layouts (row shards, column shards, replicated, small tensors), stage each rank's plan
// on the cpu backend, verify the merged partial checksums, commit, and compare every rank's
// local tensors with the new checkpoint sliced by the engine's rules.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <utility>

#include "base/file_util.h"
#include "deltasync/applier.h"
#include "deltasync/checkpoint.h"
#include "deltasync/delta_manifest.h"
#include "deltasync/engine_tensors.h"
#include "deltasync/plan_verify.h"
#include "deltasync/publisher.h"
#include "deltasync/sync_planner.h"
#include "deltasync/synthetic.h"
#include "shim/plan_stage.h"
#include "shim/weight_checksum.h"
#include "test_util.h"

namespace deltakv::shim {
namespace {

using namespace deltasync;
using deltakv::testing::ReadAll;
using deltakv::testing::TempDir;

constexpr uint32_t kWorld = 2;

struct Fixture {
  TempDir tmp;
  std::vector<SyntheticFile> layout = {{"model.safetensors",
                                        {{"rows", DType::kBF16, {64, 48}},
                                         {"cols", DType::kBF16, {32, 64}},
                                         {"norm", DType::kF32, {48}},
                                         {"big_norm", DType::kF32, {2048}},
                                         {"bias", DType::kBF16, {64}}}}};

  // name -> layout for the engine
  TensorLayout LayoutFor(const TensorDecl& t) {
    if (t.name == "rows") return *TensorLayout::ShardDim0(t.shape, t.dtype, kWorld);
    if (t.name == "cols") return *TensorLayout::ShardDim1(t.shape, t.dtype, kWorld);
    if (t.name == "bias") return *TensorLayout::ShardDim0(t.shape, t.dtype, kWorld);
    return *TensorLayout::Replicated(t.shape, t.dtype, kWorld);
  }

  // Each rank's local tensors, sliced from a checkpoint's canonical bytes.
  std::vector<std::vector<std::vector<uint8_t>>> Slice(const std::string& dir) {
    auto ckpt = Checkpoint::Open(dir);
    EXPECT_TRUE(ckpt.ok());
    std::vector<std::vector<std::vector<uint8_t>>> out(kWorld);
    for (const TensorDecl& t : layout[0].tensors) {
      TensorLayout l = LayoutFor(t);
      auto canonical = ckpt->Bytes(*ckpt->Find(t.name));
      for (uint32_t r = 0; r < kWorld; ++r) {
        std::vector<uint8_t> local(l.LocalBytes(r).total);
        for (uint64_t i = 0; i < local.size(); ++i) {
          auto c = l.LocalToCanonical(r, i);
          EXPECT_TRUE(c.has_value());
          local[i] = canonical[*c];
        }
        out[r].push_back(std::move(local));
      }
    }
    return out;
  }

  // v1 (generated), v2 (v1 with `density` of its elements changed) and the delta d12 between
  // them, cut into frames of `frame_bytes` (0: the publisher's default).
  void MakeV1V2Delta(double density, uint64_t frame_bytes = 0) {
    ASSERT_TRUE(GenerateCheckpoint(tmp / "v1", layout, 3).ok());
    MutationOptions mo;
    mo.density = density;
    ASSERT_TRUE(MutateCheckpoint(tmp / "v1", tmp / "v2", mo).ok());
    PublishOptions po{tmp / "v1", tmp / "v2", tmp / "d12"};
    if (frame_bytes > 0) po.frame_bytes = frame_bytes;
    ASSERT_TRUE(PublishDelta(po).ok());
  }

  RankTensorTables Tables() {
    std::vector<EngineTensorTable> tables;
    for (uint32_t r = 0; r < kWorld; ++r) {
      EngineTensorTable t{r, kWorld, "v1", {}};
      for (const TensorDecl& d : layout[0].tensors) {
        TensorLayout l = LayoutFor(d);
        t.tensors.push_back({d.name, d.dtype, l.LocalBytes(r).total, l});
      }
      // Through the wire format, as the sidecar receives it.
      auto parsed = ParseEngineTensorTable(EngineTensorTableToJson(t));
      EXPECT_TRUE(parsed.ok()) << parsed.status().ToString();
      tables.push_back(std::move(parsed).value());
    }
    auto ranks = ToRankTensorTables(tables);
    EXPECT_TRUE(ranks.ok()) << ranks.status().ToString();
    return std::move(ranks).value();
  }
};

struct Buffer {
  explicit Buffer(size_t n) : words(n / 8 + 1) {}
  std::span<uint8_t> span() { return {reinterpret_cast<uint8_t*>(words.data()), words.size() * 8}; }
  std::vector<uint64_t> words;
};

// A PlanOutput that cuts each rank's plan into parts of at most `part_bytes`, as the sidecar
// streams them (a run larger than a part is split).
class PartedOutput final : public PlanOutput {
 public:
  PartedOutput(std::vector<std::vector<PlanTensor>> tables, uint64_t part_bytes)
      : tables_(std::move(tables)), part_bytes_(part_bytes), parts_(tables_.size()) {}

  Status Add(uint32_t rank, uint32_t tensor, uint64_t local, uint64_t canonical,
             std::span<const uint8_t> bytes, bool owner) override {
    if (rank >= parts_.size()) return Internal("rank out of range");
    while (!bytes.empty()) {
      if (parts_[rank].empty() || WritePlanWriter::RecordBytes(1) > Last(rank).remaining()) {
        NewPart(rank);
      }
      uint64_t n = std::min<uint64_t>(
          bytes.size(), (Last(rank).remaining() - sizeof(PlanRecord)) & ~uint64_t{7});
      if (n == 0) {
        NewPart(rank);
        continue;
      }
      RETURN_IF_ERROR(Last(rank).Add(tensor, local, canonical, bytes.first(n), owner));
      bytes = bytes.subspan(n);
      local += n;
      canonical += n;
    }
    return Status::Ok();
  }

  // Every rank's parts, finished (a rank with no records gets one empty part).
  StatusOr<std::vector<std::vector<std::span<uint8_t>>>> Finish() {
    std::vector<std::vector<std::span<uint8_t>>> out(parts_.size());
    for (uint32_t r = 0; r < parts_.size(); ++r) {
      if (parts_[r].empty()) NewPart(r);
      for (Part& p : parts_[r]) {
        ASSIGN_OR_RETURN(uint64_t used, p.writer->Finish());
        out[r].push_back(p.buffer->span().first(used));
      }
    }
    return out;
  }
  size_t parts(uint32_t rank) const { return parts_[rank].size(); }

 private:
  struct Part {
    std::unique_ptr<Buffer> buffer;
    std::unique_ptr<WritePlanWriter> writer;
  };
  WritePlanWriter& Last(uint32_t rank) { return *parts_[rank].back().writer; }
  void NewPart(uint32_t rank) {
    Part p;
    p.buffer = std::make_unique<Buffer>(WritePlanWriter::FixedBytes(tables_[rank].size()) +
                                        part_bytes_);
    p.writer = std::make_unique<WritePlanWriter>(p.buffer->span(), tables_[rank]);
    parts_[rank].push_back(std::move(p));
  }

  std::vector<std::vector<PlanTensor>> tables_;
  uint64_t part_bytes_;
  std::vector<std::vector<Part>> parts_;
};

// Plans `delta` in parts of `part_bytes` and stages it part by part on `engine` (per-rank local
// tensors). Returns the verification status; on success commits into `engine`.
Status SyncOnce(Fixture& f, const std::string& delta,
                std::vector<std::vector<std::vector<uint8_t>>>& engine,
                uint64_t part_bytes = 1 << 20, const PlannerOptions& opt = {},
                size_t* max_parts = nullptr) {
  auto text = ReadAll(delta + "/manifest.json");
  auto m = ParseDeltaManifest(text);
  EXPECT_TRUE(m.ok());
  RankTensorTables ranks = f.Tables();
  ASSIGN_OR_RETURN(auto plan_tables, PlanTensorTables(*m, ranks));
  PartedOutput out(plan_tables, part_bytes);
  auto store = MakeFileStore(delta);
  ASSIGN_OR_RETURN(PlanStats stats, BuildSyncPlans(*m, *store, ranks, out, opt));
  EXPECT_GT(stats.nonzero_bytes, 0u);
  ASSIGN_OR_RETURN(auto parts, out.Finish());
  if (max_parts != nullptr) *max_parts = std::max(out.parts(0), out.parts(1));
  auto backend = MakeDeviceBackend("cpu");
  std::vector<AdlerDelta> inc(m->tensors.size()), full(m->tensors.size());
  std::vector<std::vector<LocalTensor>> locals(kWorld);
  std::vector<std::unique_ptr<PreparedScatter>> prepared;
  for (uint32_t r = 0; r < kWorld; ++r) {
    for (size_t i = 0; i < f.layout[0].tensors.size(); ++i) {
      locals[r].push_back({f.layout[0].tensors[i].name, engine[r][i].data(), engine[r][i].size()});
    }
    std::vector<StagedTensor> staged(m->tensors.size());
    for (std::span<uint8_t> part : parts[r]) {
      ASSIGN_OR_RETURN(WritePlanReader reader, WritePlanReader::Open(part));
      ASSIGN_OR_RETURN(auto st, StagePlan(reader, locals[r], **backend));
      for (size_t t = 0; t < st.size(); ++t) staged[t].Merge(st[t]);
      ASSIGN_OR_RETURN(ScatterBatch batch, PackScatter(reader, locals[r]));
      std::memset(part.data(), 0xEE, part.size());  // the batch must not point into the plan
      ASSIGN_OR_RETURN(auto p, (*backend)->PrepareScatter(std::move(batch)));
      prepared.push_back(std::move(p));
    }
    for (size_t t = 0; t < staged.size(); ++t) {
      inc[t].Merge(staged[t].delta);
      full[t].Merge(staged[t].full);
    }
  }
  for (size_t t = 0; t < m->tensors.size(); ++t) {
    RETURN_IF_ERROR(VerifyStagedTensor(m->tensors[t].name, plan_tables[0][t], inc[t], full[t]));
  }
  for (auto& p : prepared) RETURN_IF_ERROR((*backend)->CommitScatter(*p));
  return Status::Ok();
}

TEST(PlanApply, TwoRanksMatchTheNewCheckpoint) {
  Fixture f;
  ASSERT_NO_FATAL_FAILURE(f.MakeV1V2Delta(0.05, 1024));  // several frames per tensor

  auto engine = f.Slice(f.tmp / "v1");
  Status s = SyncOnce(f, f.tmp / "d12", engine);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(engine, f.Slice(f.tmp / "v2"));
}

TEST(PlanApply, SmallPartsAndFetchWindowsGiveTheSameResult) {
  Fixture f;
  ASSERT_NO_FATAL_FAILURE(f.MakeV1V2Delta(0.3, 1024));  // several frames per tensor
  for (unsigned threads : {1u, 2u, 3u}) {
    for (bool prefetch : {true, false}) {
    for (uint64_t window : {uint64_t{1}, uint64_t{700}, uint64_t{1} << 20}) {
      auto engine = f.Slice(f.tmp / "v1");
      PlannerOptions opt;
      opt.prefetch = prefetch;
      opt.fetch_window_bytes = window;
      opt.decode_threads = threads;
      size_t parts = 0;
      Status s = SyncOnce(f, f.tmp / "d12", engine, /*part_bytes=*/256, opt, &parts);
      ASSERT_TRUE(s.ok()) << s.ToString();
      EXPECT_GT(parts, 10u);
      EXPECT_EQ(engine, f.Slice(f.tmp / "v2"))
          << "threads " << threads << " prefetch " << prefetch << " window " << window;
    }
    }
  }
}

// The first fetch is small and each next one at most twice the last, up to the window bound;
// the reads cover every frame once, and the plans are the same as with one size throughout.
TEST(PlanApply, FetchWindowsStartSmallAndGrow) {
  Fixture f;
  ASSERT_NO_FATAL_FAILURE(f.MakeV1V2Delta(0.3, 1024));  // several frames per tensor
  class RecordingStore final : public ObjectStore {
   public:
    explicit RecordingStore(std::unique_ptr<ObjectStore> inner) : inner_(std::move(inner)) {}
    StatusOr<uint64_t> Size(const std::string& name) override { return inner_->Size(name); }
    StatusOr<std::string> ReadRange(const std::string& name, uint64_t offset,
                                    uint64_t length) override {
      std::lock_guard<std::mutex> lock(mu_);
      reads_.push_back(length);
      return inner_->ReadRange(name, offset, length);
    }
    StatusOr<std::string> ReadObject(const std::string& name, uint64_t max_bytes) override {
      return inner_->ReadObject(name, max_bytes);
    }
    std::string Describe() const override { return inner_->Describe(); }
    std::vector<uint64_t> reads() {
      std::lock_guard<std::mutex> lock(mu_);
      return reads_;
    }

   private:
    std::unique_ptr<ObjectStore> inner_;
    std::mutex mu_;
    std::vector<uint64_t> reads_;
  };
  auto m = ParseDeltaManifest(ReadAll(f.tmp / "d12/manifest.json"));
  ASSERT_TRUE(m.ok());
  uint64_t largest_frame = 0, frame_bytes = 0;
  for (const DeltaTensor& t : m->tensors) {
    for (const DeltaFrame& fr : t.frames) {
      largest_frame = std::max(largest_frame, fr.compressed_length);
      frame_bytes += fr.compressed_length;
    }
  }
  ASSERT_GT(frame_bytes, 8 * largest_frame);
  const uint64_t first = largest_frame, cap = 4 * largest_frame;
  PlannerOptions opt;
  opt.verify_sha256 = false;  // only the windows read
  opt.first_fetch_window_bytes = first;
  opt.fetch_window_bytes = cap;
  RankTensorTables ranks = f.Tables();
  auto plan_tables = PlanTensorTables(*m, ranks);
  ASSERT_TRUE(plan_tables.ok());
  auto plan = [&](const PlannerOptions& o, std::vector<uint64_t>* reads) {
    PartedOutput out(*plan_tables, 1 << 20);
    RecordingStore store(MakeFileStore(f.tmp / "d12"));
    auto stats = BuildSyncPlans(*m, store, ranks, out, o);
    EXPECT_TRUE(stats.ok()) << stats.status().ToString();
    *reads = store.reads();
    auto parts = out.Finish();
    EXPECT_TRUE(parts.ok());
    std::vector<std::vector<uint8_t>> bytes;
    for (auto& rank : *parts) {
      for (std::span<uint8_t> p : rank) bytes.emplace_back(p.begin(), p.end());
    }
    return bytes;
  };
  std::vector<uint64_t> reads;
  auto grown = plan(opt, &reads);
  ASSERT_GE(reads.size(), 3u);
  EXPECT_LE(reads[0], first);
  uint64_t total = 0, limit = first;
  for (size_t i = 0; i < reads.size(); ++i) {
    EXPECT_LE(reads[i], std::max(limit, largest_frame)) << "read " << i;
    EXPECT_LE(reads[i], cap) << "read " << i;
    total += reads[i];
    limit = std::min(cap, limit * 2);
  }
  EXPECT_EQ(total, frame_bytes);  // one object per shard, frames back to back
  EXPECT_GT(*std::max_element(reads.begin(), reads.end()), 2 * first);  // it did grow
  PlannerOptions flat = opt;
  flat.first_fetch_window_bytes = cap;
  std::vector<uint64_t> flat_reads;
  EXPECT_EQ(plan(flat, &flat_reads), grown);
  EXPECT_LT(flat_reads.size(), reads.size());
}

TEST(PlanApply, CorruptFrameFailsWithParallelDecode) {
  Fixture f;
  ASSERT_NO_FATAL_FAILURE(f.MakeV1V2Delta(0.3, 1024));  // several frames per tensor
  // Corrupt the middle of the shard: one frame fails while others decode beside it.
  std::string shard = f.tmp / "d12/shard-00000.zst";
  std::string data = ReadAll(shard);
  data[data.size() / 2] ^= 0x55;
  deltakv::testing::WriteAll(shard, data);
  auto engine = f.Slice(f.tmp / "v1");
  PlannerOptions opt;
  opt.decode_threads = 4;
  Status s = SyncOnce(f, f.tmp / "d12", engine, 1 << 20, opt);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("tensor '"), std::string::npos) << s.ToString();
}

// An output that fails part-way (a full plan buffer, a dead rank) stops a pipelined plan with
// its error, however many walker threads are streaming frames behind it, and never hangs.
TEST(PlanApply, FailingOutputStopsPipelinedWalkers) {
  Fixture f;
  ASSERT_NO_FATAL_FAILURE(f.MakeV1V2Delta(0.3, 1024));  // several frames per tensor
  auto text = ReadAll(f.tmp / "d12/manifest.json");
  auto m = ParseDeltaManifest(text);
  ASSERT_TRUE(m.ok());
  RankTensorTables ranks = f.Tables();
  class FailAfter final : public PlanOutput {
   public:
    explicit FailAfter(int n) : left_(n) {}
    Status Add(uint32_t, uint32_t, uint64_t, uint64_t, std::span<const uint8_t>, bool) override {
      if (--left_ < 0) return ResourceExhausted("plan buffer full (test)");
      return Status::Ok();
    }
    int left() const { return left_; }

   private:
    int left_;
  };
  int total = 0;  // pieces of the whole delta
  {
    FailAfter count(1 << 30);
    auto store = MakeFileStore(f.tmp / "d12");
    ASSERT_TRUE(BuildSyncPlans(*m, *store, ranks, count, {}).ok());
    total = (1 << 30) - count.left();
    ASSERT_GT(total, 10);
  }
  for (unsigned threads : {2u, 3u, 8u}) {
    for (int fail_after : {0, total / 3, total - 1}) {
      FailAfter out(fail_after);
      PlannerOptions opt;
      opt.decode_threads = threads;
      opt.fetch_window_bytes = 1 << 20;
      auto store = MakeFileStore(f.tmp / "d12");
      auto r = BuildSyncPlans(*m, *store, ranks, out, opt);
      ASSERT_FALSE(r.ok()) << "threads " << threads << " fail_after " << fail_after;
      EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted) << r.status().ToString();
    }
  }
}

// A PlanOutput that keeps every piece, and the threads that called it.
class PieceOutput final : public PlanOutput {
 public:
  struct Piece {
    uint32_t rank, tensor;
    uint64_t local, canonical;
    bool owner;
    std::vector<uint8_t> bytes;
    auto operator<=>(const Piece&) const = default;
  };
  Status Add(uint32_t rank, uint32_t tensor, uint64_t local, uint64_t canonical,
             std::span<const uint8_t> bytes, bool owner) override {
    pieces.push_back({rank, tensor, local, canonical, owner, {bytes.begin(), bytes.end()}});
    callers.insert(std::this_thread::get_id());
    return Status::Ok();
  }
  // With `records`, walker threads route pieces themselves and this output replays their
  // records (PlanOutput's default AddRecorded).
  bool TakesRecorded() override { return records; }
  Status AddRecorded(uint32_t rank, const WritePlanWriter& w) override {
    ++recorded_calls;
    return PlanOutput::AddRecorded(rank, w);
  }
  std::vector<Piece> Sorted() const {
    std::vector<Piece> v = pieces;
    std::sort(v.begin(), v.end());
    return v;
  }
  bool records = false;
  uint64_t recorded_calls = 0;
  std::vector<Piece> pieces;
  std::set<std::thread::id> callers;
};

// With several decode threads the planner hands over the same pieces as with one (in another
// order), all from the calling thread, whatever the fetch windows and however little may queue
// between the walkers and the planner (a budget of 1 byte: one chunk at a time, plus the frame
// being planned); and the sync it plans gives the new checkpoint.
TEST(PlanApply, PipelinedPlanningHandsOverTheSamePieces) {
  Fixture f;
  ASSERT_NO_FATAL_FAILURE(f.MakeV1V2Delta(0.3, 512));  // many frames per tensor
  auto m = ParseDeltaManifest(ReadAll(f.tmp / "d12/manifest.json"));
  ASSERT_TRUE(m.ok());
  RankTensorTables ranks = f.Tables();
  int recorded_any = 0;
  auto plan = [&](const PlannerOptions& o, bool records = false) {
    PieceOutput out;
    out.records = records;
    auto store = MakeFileStore(f.tmp / "d12");
    auto stats = BuildSyncPlans(*m, *store, ranks, out, o);
    EXPECT_TRUE(stats.ok()) << stats.status().ToString();
    EXPECT_EQ(out.callers, std::set<std::thread::id>{std::this_thread::get_id()});
    // Records come from walker threads only (the calling thread plans straight into the
    // output; it may have walked every frame itself).
    if (!records || o.decode_threads < 2) {
      EXPECT_EQ(out.recorded_calls, 0u);
    }
    recorded_any += out.recorded_calls > 0;
    return out.Sorted();
  };
  const auto one = plan({});
  ASSERT_GT(one.size(), 50u);
  EXPECT_EQ(plan({}, /*records=*/true), one);
  for (unsigned threads : {2u, 3u, 5u}) {
    for (uint64_t budget : {uint64_t{1}, uint64_t{1} << 20}) {
      for (uint64_t window : {uint64_t{700}, uint64_t{1} << 20}) {
        PlannerOptions opt;
        opt.decode_threads = threads;
        opt.queued_chunk_bytes = budget;
        opt.fetch_window_bytes = window;
        opt.first_fetch_window_bytes = window;
        EXPECT_EQ(plan(opt), one) << "threads " << threads << " budget " << budget << " window "
                                  << window;
        EXPECT_EQ(plan(opt, /*records=*/true), one)
            << "records, threads " << threads << " budget " << budget << " window " << window;
        auto engine = f.Slice(f.tmp / "v1");
        Status s = SyncOnce(f, f.tmp / "d12", engine, /*part_bytes=*/256, opt);
        ASSERT_TRUE(s.ok()) << s.ToString();
        EXPECT_EQ(engine, f.Slice(f.tmp / "v2")) << "threads " << threads;
      }
    }
  }
  EXPECT_GT(recorded_any, 0) << "no walker thread routed a frame in 12 pipelined plans";
}

// Plans written whole into one version 2 writer per rank (WriterPlanOutput, which takes
// walkers' records and appends them with WritePlanWriter::AppendFrom) hold the same records,
// record counts and touched lines with any number of decode threads.
TEST(PlanApply, PipelinedRecordsAppendToTheSamePlans) {
  Fixture f;
  ASSERT_NO_FATAL_FAILURE(f.MakeV1V2Delta(0.3, 512));
  auto m = ParseDeltaManifest(ReadAll(f.tmp / "d12/manifest.json"));
  ASSERT_TRUE(m.ok());
  RankTensorTables ranks = f.Tables();
  auto tables = PlanTensorTables(*m, ranks);
  ASSERT_TRUE(tables.ok());
  using Record = std::tuple<uint32_t, uint32_t, uint64_t, uint64_t, uint32_t, std::string>;
  struct Planned {
    std::vector<Record> records;  // sorted
    std::vector<uint64_t> counts, touched;
  };
  auto plan = [&](unsigned threads) {
    Planned out;
    std::vector<Buffer> buffers;
    for (size_t r = 0; r < kWorld; ++r) buffers.emplace_back(8 << 20);
    std::vector<WritePlanWriter> writers;
    std::vector<std::vector<uint64_t>> last(kWorld);
    out.touched.assign(kWorld, 0);
    for (size_t r = 0; r < kWorld; ++r) {
      writers.emplace_back(buffers[r].span(), (*tables)[r], kPlanVersionCompact);
      last[r].assign((*tables)[r].size(), 0);
      writers[r].CountLines(last[r].data(), &out.touched[r]);
    }
    PlannerOptions opt;
    opt.decode_threads = threads;
    opt.fetch_window_bytes = opt.first_fetch_window_bytes = 4096;
    auto store = MakeFileStore(f.tmp / "d12");
    auto stats = BuildSyncPlans(*m, *store, ranks, writers, opt);
    EXPECT_TRUE(stats.ok()) << stats.status().ToString();
    for (size_t r = 0; r < kWorld; ++r) {
      out.counts.push_back(writers[r].record_count());
      auto used = writers[r].Finish();
      EXPECT_TRUE(used.ok());
      if (!used.ok()) continue;
      auto reader = WritePlanReader::Open(buffers[r].span().first(*used));
      EXPECT_TRUE(reader.ok()) << reader.status().ToString();
      if (!reader.ok()) continue;
      EXPECT_TRUE(reader
                      ->ForEach([&](const PlanRecord& rec, std::span<uint8_t> bytes) {
                        out.records.emplace_back(static_cast<uint32_t>(r), rec.tensor,
                                                 rec.local_offset, rec.canonical_offset, rec.flags,
                                                 std::string(bytes.begin(), bytes.end()));
                        return Status::Ok();
                      })
                      .ok());
    }
    std::sort(out.records.begin(), out.records.end());
    return out;
  };
  const Planned one = plan(1);
  ASSERT_GT(one.records.size(), 50u);
  for (unsigned threads : {2u, 3u, 5u}) {
    const Planned many = plan(threads);
    EXPECT_EQ(many.records, one.records) << "threads " << threads;
    EXPECT_EQ(many.counts, one.counts) << "threads " << threads;
    // Frames the calling thread walks itself come out of frame order, so a line shared by two
    // frames' records may be counted twice: at least the distinct lines, at most every
    // record's lines (the exact count of AppendFrom is checked in write_plan_test).
    for (size_t r = 0; r < kWorld; ++r) {
      std::set<std::pair<uint32_t, uint64_t>> distinct;
      uint64_t all = 0;
      for (const Record& rec : many.records) {
        if (std::get<0>(rec) != r) continue;
        const uint64_t first = std::get<2>(rec) / 64;
        const uint64_t last = (std::get<2>(rec) + std::get<5>(rec).size() - 1) / 64;
        for (uint64_t l = first; l <= last; ++l) distinct.insert({std::get<1>(rec), l});
        all += last - first + 1;
      }
      EXPECT_GE(many.touched[r], distinct.size()) << "threads " << threads;
      EXPECT_LE(many.touched[r], all) << "threads " << threads;
    }
  }
}

// A store read that fails part-way (after some windows decoded) fails a pipelined plan with
// the store's error, and never hangs, whichever window it hits.
TEST(PlanApply, FetchFailureStopsPipelinedPlanning) {
  Fixture f;
  ASSERT_NO_FATAL_FAILURE(f.MakeV1V2Delta(0.3, 512));
  auto m = ParseDeltaManifest(ReadAll(f.tmp / "d12/manifest.json"));
  ASSERT_TRUE(m.ok());
  RankTensorTables ranks = f.Tables();
  class FailingStore final : public ObjectStore {
   public:
    FailingStore(std::unique_ptr<ObjectStore> inner, int fail_at)
        : inner_(std::move(inner)), left_(fail_at) {}
    StatusOr<uint64_t> Size(const std::string& name) override { return inner_->Size(name); }
    StatusOr<std::string> ReadRange(const std::string& name, uint64_t offset,
                                    uint64_t length) override {
      if (left_.fetch_sub(1) <= 0) return IoError("read refused (test)");
      return inner_->ReadRange(name, offset, length);
    }
    StatusOr<std::string> ReadObject(const std::string& name, uint64_t max_bytes) override {
      return inner_->ReadObject(name, max_bytes);
    }
    std::string Describe() const override { return inner_->Describe(); }

   private:
    std::unique_ptr<ObjectStore> inner_;
    std::atomic<int> left_;
  };
  for (unsigned threads : {2u, 4u}) {
    for (int fail_at : {0, 1, 3, 6}) {
      PlannerOptions opt;
      opt.decode_threads = threads;
      opt.fetch_window_bytes = 700;
      opt.first_fetch_window_bytes = 700;
      FailingStore store(MakeFileStore(f.tmp / "d12"), fail_at);
      PieceOutput out;
      auto r = BuildSyncPlans(*m, store, ranks, out, opt);
      ASSERT_FALSE(r.ok()) << "threads " << threads << " fail_at " << fail_at;
      EXPECT_EQ(r.status().code(), StatusCode::kIoError) << r.status().ToString();
    }
  }
}

// Every object's sha256 is checked over the bytes as they stream in: a manifest whose recorded
// digest is wrong (or a shard altered where the Adler sums cannot see it) fails planning with
// DataLoss naming the object, at any fetch window size; turning the check off is the only
// thing that lets it through.
TEST(PlanApply, ObjectSha256IsCheckedWhileStreaming) {
  Fixture f;
  f.MakeV1V2Delta(0.02, 16 << 10);
  const std::string manifest_path = f.tmp / "d12/manifest.json";
  const std::string good = ReadAll(manifest_path);
  for (uint64_t window : {uint64_t{1} << 12, uint64_t{1} << 16, uint64_t{32} << 20}) {
    PlannerOptions opt;
    opt.fetch_window_bytes = window;
    auto engine = f.Slice(f.tmp / "v1");
    EXPECT_TRUE(SyncOnce(f, f.tmp / "d12", engine, 1 << 20, opt).ok()) << window;
  }
  auto m = ParseDeltaManifest(good);
  ASSERT_TRUE(m.ok());
  std::string bad = good;
  const std::string digest = m->objects[0].sha256;
  ASSERT_EQ(digest.size(), 64u);
  std::string wrong = digest;
  wrong[10] = wrong[10] == '0' ? '1' : '0';
  bad.replace(bad.find(digest), digest.size(), wrong);
  {
    std::ofstream out(manifest_path, std::ios::binary | std::ios::trunc);
    out << bad;
  }
  for (uint64_t window : {uint64_t{1} << 12, uint64_t{32} << 20}) {
    PlannerOptions opt;
    opt.fetch_window_bytes = window;
    auto engine = f.Slice(f.tmp / "v1");
    Status s = SyncOnce(f, f.tmp / "d12", engine, 1 << 20, opt);
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.code(), StatusCode::kDataLoss);
    EXPECT_NE(s.message().find("delta object '" + m->objects[0].name + "': sha256 mismatch"),
              std::string::npos)
        << s.ToString();
    PlannerOptions off = opt;
    off.verify_sha256 = false;
    engine = f.Slice(f.tmp / "v1");
    EXPECT_TRUE(SyncOnce(f, f.tmp / "d12", engine, 1 << 20, off).ok()) << "only the digest is off";
  }
}

TEST(PlanApply, WrongParentFailsVerificationAndChangesNothing) {
  Fixture f;
  ASSERT_TRUE(GenerateCheckpoint(f.tmp / "v1", f.layout, 3).ok());
  MutationOptions mo;
  mo.density = 0.05;
  ASSERT_TRUE(MutateCheckpoint(f.tmp / "v1", f.tmp / "v2", mo).ok());
  mo.seed = 9;
  ASSERT_TRUE(MutateCheckpoint(f.tmp / "v2", f.tmp / "v3", mo).ok());
  PublishOptions po{f.tmp / "v2", f.tmp / "v3", f.tmp / "d23"};
  ASSERT_TRUE(PublishDelta(po).ok());

  auto engine = f.Slice(f.tmp / "v1");  // the engine is on v1, the delta is v2 -> v3
  auto before = engine;
  Status s = SyncOnce(f, f.tmp / "d23", engine);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("checksum mismatch"), std::string::npos) << s.ToString();
  EXPECT_EQ(engine, before);
}

TEST(PlanApply, UnregisteredTensorIsRefused) {
  Fixture f;
  ASSERT_NO_FATAL_FAILURE(f.MakeV1V2Delta(0.05));
  auto m = ParseDeltaManifest(ReadAll(f.tmp / "d12/manifest.json"));
  RankTensorTables ranks = f.Tables();
  ranks[1].erase("rows");
  auto r = PlanTensorTables(*m, ranks);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("engine rank 1 did not register"), std::string::npos);
}

// A range past an object's end is DataLoss without a buffer of its length being made first.
TEST(FileStore, RangesPastTheEndAreDataLossWhateverTheirLength) {
  TempDir tmp;
  ASSERT_TRUE(deltakv::WriteFileAtomic(tmp / "obj", std::string(100, 'a')).ok());
  auto store = MakeFileStore(tmp.path());
  EXPECT_EQ(store->ReadRange("obj", 10, 90).value(), std::string(90, 'a'));
  EXPECT_EQ(store->ReadRange("obj", 100, 0).value(), "");
  for (auto [offset, length] : {std::pair<uint64_t, uint64_t>{5, UINT64_MAX},
                                {5, uint64_t{1} << 40},
                                {0, 101},
                                {101, 0},
                                {uint64_t{1} << 63, 1},
                                {UINT64_MAX, UINT64_MAX}}) {
    auto r = store->ReadRange("obj", offset, length);
    ASSERT_FALSE(r.ok()) << offset << " " << length;
    EXPECT_EQ(r.status().code(), StatusCode::kDataLoss) << r.status().ToString();
  }
}

TEST(EngineTables, RanksOutsideTheWorldOrMissingAreRefused) {
  const TensorLayout l = TensorLayout::Replicated({16}, DType::kU8, 2).value();
  auto table = [&](uint32_t rank) {
    return EngineTensorTable{rank, 2, "v1", {{"w", DType::kU8, 16, l}}};
  };
  auto outside = ToRankTensorTables({table(2), table(1)});
  ASSERT_FALSE(outside.ok());
  EXPECT_EQ(outside.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(outside.status().message().find("outside the world"), std::string::npos)
      << outside.status().ToString();
  auto twice = ToRankTensorTables({table(1), table(1)});
  EXPECT_EQ(twice.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ToRankTensorTables({table(0)}).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(ToRankTensorTables({}).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(ToRankTensorTables({table(1), table(0)}).ok());
  // Parsed tables: each entry's dtype and group are its layout's.
  EngineTensorTable t = table(0);
  EXPECT_TRUE(ParseEngineTensorTable(EngineTensorTableToJson(t)).ok());
  t.tensors[0].dtype = DType::kBF16;  // 16 bytes still, but the layout says U8
  auto dtype = ParseEngineTensorTable(EngineTensorTableToJson(t));
  EXPECT_EQ(dtype.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(dtype.status().message().find("layout's is U8"), std::string::npos)
      << dtype.status().ToString();
  t = table(0);
  t.world_size = 4;  // a layout of 2 ranks in a table of 4
  auto group = ParseEngineTensorTable(EngineTensorTableToJson(t));
  EXPECT_EQ(group.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(group.status().message().find("spans 2 ranks"), std::string::npos)
      << group.status().ToString();
}

TEST(PlanStage, CheckPlanRecordRefusesATensorOutsideThePlan) {
  std::vector<uint8_t> weights(64);
  const std::vector<shim::LocalTensor> tensors = {{"w", weights.data(), weights.size()}};
  const std::vector<PlanTensor> plan_tensors = {{0, 0, 64, 0, 0}};
  PlanRecord rec{};
  rec.length = 1;
  EXPECT_TRUE(shim::CheckPlanRecord(rec, plan_tensors, tensors).ok());
  rec.tensor = 1;
  Status s = shim::CheckPlanRecord(rec, plan_tensors, tensors);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("plan tensor #1"), std::string::npos) << s.ToString();
  rec.tensor = UINT32_MAX;
  EXPECT_EQ(shim::CheckPlanRecord(rec, plan_tensors, tensors).code(),
            StatusCode::kInvalidArgument);
}


// The live checksums of every rank's weights: owned sums add up to each tensor's Adler-32 of
// the checkpoint; every replica matches its owner's refs; a flipped byte shows in exactly the
// sums that cover it (owned on a sharded tensor, replica on a replicated one).
TEST(LiveChecksums, OwnedSumsAreTheCheckpointAndReplicasMatchTheirOwners) {
  Fixture f;
  ASSERT_TRUE(GenerateCheckpoint(f.tmp / "v1", f.layout, 3).ok());
  auto engine = f.Slice(f.tmp / "v1");
  auto ckpt = Checkpoint::Open(f.tmp / "v1");
  ASSERT_TRUE(ckpt.ok());
  RankTensorTables ranks = f.Tables();
  auto backend = MakeDeviceBackend("cpu");
  ASSERT_TRUE(backend.ok());
  auto sums_of = [&](uint32_t r) {
    std::vector<LocalTensor> locals;
    std::vector<EngineTensor> table;
    for (size_t i = 0; i < f.layout[0].tensors.size(); ++i) {
      const TensorDecl& d = f.layout[0].tensors[i];
      locals.push_back({d.name, engine[r][i].data(), engine[r][i].size()});
      TensorLayout l = f.LayoutFor(d);
      table.push_back({d.name, d.dtype, l.LocalBytes(r).total, l});
    }
    uint64_t read = 0;
    ChecksumOptions opts;
    opts.chunk_bytes = 4096;  // many chunks per tensor
    auto s = ChecksumWeights(locals, table, r, **backend, opts, &read);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    uint64_t local_total = 0;
    for (const LocalTensor& t : locals) local_total += t.bytes;
    EXPECT_EQ(read, local_total) << "every local byte is read once";
    return std::move(s).value();
  };
  auto check = [&](std::vector<std::string>* owned_bad, std::vector<std::string>* replica_bad) {
    auto s0 = sums_of(0), s1 = sums_of(1);
    for (size_t i = 0; i < f.layout[0].tensors.size(); ++i) {
      const TensorDecl& d = f.layout[0].tensors[i];
      AdlerDelta total = s0[i].owned;
      total.Merge(s1[i].owned);
      auto canonical = ckpt->Bytes(*ckpt->Find(d.name));
      const uint32_t want = Adler32(canonical);
      if (total.Apply(Adler32OfZeros(canonical.size()), canonical.size()) != want) {
        owned_bad->push_back(d.name);
      }
      const bool replicated = d.name == "norm" || d.name == "big_norm";
      EXPECT_EQ(s1[i].holds_replica, replicated) << d.name;
      EXPECT_FALSE(s0[i].holds_replica) << d.name << ": rank 0 owns what it holds";
      EXPECT_EQ(s0[i].refs.count(1), replicated ? 1u : 0u) << d.name;
      if (replicated && (s0[i].refs[1].s1() != s1[i].replica.s1() ||
                         s0[i].refs[1].s2() != s1[i].replica.s2())) {
        replica_bad->push_back(d.name);
      }
    }
  };
  std::vector<std::string> owned_bad, replica_bad;
  check(&owned_bad, &replica_bad);
  EXPECT_TRUE(owned_bad.empty());
  EXPECT_TRUE(replica_bad.empty());
  engine[1][0][17] ^= 0x10;  // "rows", sharded: rank 1 owns its half
  engine[1][3][5] ^= 0x01;   // "big_norm", replicated: rank 1 holds a replica
  check(&owned_bad, &replica_bad);
  EXPECT_EQ(owned_bad, std::vector<std::string>{"rows"});
  EXPECT_EQ(replica_bad, std::vector<std::string>{"big_norm"});
}

}  // namespace
}  // namespace deltakv::shim
