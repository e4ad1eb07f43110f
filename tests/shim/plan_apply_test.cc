// The whole sparse data path without processes: publish a delta, plan it for TP=2 ranks with
// real layouts (row shards, column shards, replicated, small tensors), stage each rank's plan
// on the cpu backend, verify the merged partial checksums, commit, and compare every rank's
// local tensors with the new checkpoint sliced by the engine's rules.
#include <gtest/gtest.h>

#include <map>

#include "deltasync/applier.h"
#include "deltasync/checkpoint.h"
#include "deltasync/delta_manifest.h"
#include "deltasync/engine_tensors.h"
#include "deltasync/plan_verify.h"
#include "deltasync/publisher.h"
#include "deltasync/sync_planner.h"
#include "deltasync/synthetic.h"
#include "shim/plan_stage.h"
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

// Plans `delta` and stages it on `engine` (per-rank local tensors). Returns the verification
// status; on success commits into `engine`.
Status SyncOnce(Fixture& f, const std::string& delta,
                std::vector<std::vector<std::vector<uint8_t>>>& engine) {
  auto text = ReadAll(delta + "/manifest.json");
  auto m = ParseDeltaManifest(text);
  EXPECT_TRUE(m.ok());
  RankTensorTables ranks = f.Tables();
  ASSIGN_OR_RETURN(auto plan_tables, PlanTensorTables(*m, ranks));
  std::vector<Buffer> buffers;
  std::vector<WritePlanWriter> writers;
  for (uint32_t r = 0; r < kWorld; ++r) buffers.emplace_back(1 << 20);
  for (uint32_t r = 0; r < kWorld; ++r) writers.emplace_back(buffers[r].span(), plan_tables[r]);
  auto store = MakeFileStore(delta);
  ASSIGN_OR_RETURN(PlanStats stats, BuildSyncPlans(*m, *store, ranks, writers, {}));
  EXPECT_GT(stats.nonzero_bytes, 0u);
  auto backend = MakeDeviceBackend("cpu");
  std::vector<AdlerDelta> inc(m->tensors.size()), full(m->tensors.size());
  std::vector<WritePlanReader> readers;
  std::vector<std::vector<LocalTensor>> locals(kWorld);
  for (uint32_t r = 0; r < kWorld; ++r) {
    ASSIGN_OR_RETURN(uint64_t used, writers[r].Finish());
    ASSIGN_OR_RETURN(WritePlanReader reader, WritePlanReader::Open(buffers[r].span().first(used)));
    for (size_t i = 0; i < f.layout[0].tensors.size(); ++i) {
      locals[r].push_back({f.layout[0].tensors[i].name, engine[r][i].data(), engine[r][i].size()});
    }
    ASSIGN_OR_RETURN(auto staged, StagePlan(reader, locals[r], **backend));
    for (size_t t = 0; t < staged.size(); ++t) {
      inc[t].Merge(staged[t].delta);
      full[t].Merge(staged[t].full);
    }
    readers.push_back(std::move(reader));
  }
  for (size_t t = 0; t < m->tensors.size(); ++t) {
    RETURN_IF_ERROR(VerifyStagedTensor(m->tensors[t].name, plan_tables[0][t], inc[t], full[t]));
  }
  for (uint32_t r = 0; r < kWorld; ++r) {
    ASSIGN_OR_RETURN(std::vector<CopyOp> scatter, ScatterList(readers[r], locals[r]));
    RETURN_IF_ERROR(CommitPlan(scatter, **backend));
  }
  return Status::Ok();
}

TEST(PlanApply, TwoRanksMatchTheNewCheckpoint) {
  Fixture f;
  ASSERT_TRUE(GenerateCheckpoint(f.tmp / "v1", f.layout, 3).ok());
  MutationOptions mo;
  mo.density = 0.05;
  ASSERT_TRUE(MutateCheckpoint(f.tmp / "v1", f.tmp / "v2", mo).ok());
  PublishOptions po{f.tmp / "v1", f.tmp / "v2", f.tmp / "d12"};
  po.frame_bytes = 1024;  // several frames per tensor
  ASSERT_TRUE(PublishDelta(po).ok());

  auto engine = f.Slice(f.tmp / "v1");
  Status s = SyncOnce(f, f.tmp / "d12", engine);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(engine, f.Slice(f.tmp / "v2"));
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
  ASSERT_TRUE(GenerateCheckpoint(f.tmp / "v1", f.layout, 3).ok());
  MutationOptions mo;
  mo.density = 0.05;
  ASSERT_TRUE(MutateCheckpoint(f.tmp / "v1", f.tmp / "v2", mo).ok());
  PublishOptions po{f.tmp / "v1", f.tmp / "v2", f.tmp / "d12"};
  ASSERT_TRUE(PublishDelta(po).ok());
  auto m = ParseDeltaManifest(ReadAll(f.tmp / "d12/manifest.json"));
  RankTensorTables ranks = f.Tables();
  ranks[1].erase("rows");
  auto r = PlanTensorTables(*m, ranks);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("engine rank 1 did not register"), std::string::npos);
}

}  // namespace
}  // namespace deltakv::shim
