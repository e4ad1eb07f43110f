// Publish -> apply round trips over generated checkpoints: the rebuilt checkpoint equals the
// new one byte for byte (safetensors files and manifest), for every dtype and layout shape.
#include <gtest/gtest.h>

#include <cstring>

#include "deltasync/applier.h"
#include "deltasync/checkpoint.h"
#include "deltasync/publisher.h"
#include "deltasync/synthetic.h"
#include "test_util.h"

namespace deltakv::deltasync {
namespace {

using testing::ListDir;
using testing::ReadAll;
using testing::TempDir;

struct RoundTripCase {
  std::string label;
  std::vector<SyntheticFile> layout;
  double density = 0.01;
  uint64_t frame_bytes = 64ull << 20;
  std::string step_metadata;
  bool include_checkpoint = true;
  unsigned threads = 2;
  FrameSequences sequences = FrameSequences::kXorRuns;
};

// Publishes parent -> child, applies, and checks the result. Returns the publish summary.
PublishSummary RoundTrip(const RoundTripCase& c, const TempDir& tmp) {
  EXPECT_TRUE(GenerateCheckpoint(tmp / "v1", c.layout, 7).ok());
  MutationOptions mo;
  mo.density = c.density;
  mo.seed = 11;
  mo.step_metadata = c.step_metadata;
  auto mutated = MutateCheckpoint(tmp / "v1", tmp / "v2", mo);
  EXPECT_TRUE(mutated.ok()) << mutated.status().ToString();

  PublishOptions po;
  po.parent_dir = tmp / "v1";
  po.new_dir = tmp / "v2";
  po.out_dir = tmp / "delta";
  po.frame_bytes = c.frame_bytes;
  po.include_checkpoint = c.include_checkpoint;
  po.threads = c.threads;
  po.sequences = c.sequences;
  auto pub = PublishDelta(po);
  EXPECT_TRUE(pub.ok()) << pub.status().ToString();
  if (!pub.ok()) return {};
  EXPECT_EQ(pub->parent_version, "v1");
  EXPECT_EQ(pub->version, "v2");

  ApplyOptions ao;
  ao.parent_dir = tmp / "v1";
  ao.delta_dir = tmp / "delta";
  ao.out_dir = tmp / "out";
  ao.threads = c.threads;
  auto app = ApplyDelta(ao);
  EXPECT_TRUE(app.ok()) << app.status().ToString();
  if (!app.ok()) return *pub;
  EXPECT_EQ(app->tensors_changed, pub->tensors_changed);
  EXPECT_EQ(app->nonzero_bytes, pub->nonzero_bytes);

  // Byte-exact files.
  auto want = Checkpoint::Open(tmp / "v2");
  EXPECT_TRUE(want.ok());
  std::vector<std::string> names = want->file_names();
  names.push_back(kManifestFileName);
  std::sort(names.begin(), names.end());
  EXPECT_EQ(ListDir(tmp / "out"), names);
  for (const std::string& f : want->file_names()) {
    EXPECT_EQ(ReadAll(tmp / "out/" + f), ReadAll(tmp / "v2/" + f)) << c.label << ": " << f;
  }
  // The written manifest is the one `checkpoint manifest` computes for the new checkpoint.
  auto m = ComputeCheckpointManifest(*want, "v2", 1, false);
  EXPECT_TRUE(m.ok());
  EXPECT_EQ(ReadAll(tmp / "out/manifest.json"), CheckpointManifestToJson(*m)) << c.label;
  return *pub;
}

std::vector<SyntheticFile> OneFile(std::vector<SyntheticTensor> tensors) {
  return {{"model.safetensors", std::move(tensors)}};
}

TEST(DeltaRoundTrip, Bf16ModelWithFewUlpChanges) {
  TempDir tmp;
  RoundTripCase c{"bf16", ModelLikeLayout(8 << 20, 2), 0.005};
  PublishSummary s = RoundTrip(c, tmp);
  EXPECT_GT(s.tensors_changed, 0u);
  EXPECT_LT(s.compressed_bytes, s.checkpoint_bytes / 10);
  EXPECT_NEAR(s.density(), 0.005 * 0.6, 0.004);  // about 1-2 changed bytes per element
}

TEST(DeltaRoundTrip, BothSequenceParsesApplyAndRunsAreSmallerOnASparseDelta) {
  TempDir runs_dir, zstd_dir;
  RoundTripCase c{"runs", ModelLikeLayout(8 << 20, 2), 0.005};
  const PublishSummary runs = RoundTrip(c, runs_dir);
  c.label = "zstd";
  c.sequences = FrameSequences::kZstd;
  const PublishSummary zstd = RoundTrip(c, zstd_dir);
  EXPECT_EQ(runs.nonzero_bytes, zstd.nonzero_bytes);
  EXPECT_EQ(runs.frames, zstd.frames);
  EXPECT_GT(runs.compressed_bytes, 0u);
  EXPECT_LT(runs.compressed_bytes, zstd.compressed_bytes);
}

TEST(DeltaRoundTrip, MixtureOfExpertsModel) {
  TempDir tmp;
  const auto layout = ModelLikeLayout(8 << 20, 1, 8);
  int routers = 0, w13 = 0, w2 = 0, dense_mlp = 0;
  for (const SyntheticTensor& t : layout[0].tensors) {
    if (t.name.ends_with("mlp.gate.weight")) {
      ++routers;
      ASSERT_EQ(t.shape.size(), 2u);
      EXPECT_EQ(t.shape[0], 8u);
    } else if (t.name.ends_with("mlp.experts.w13_weight")) {
      ++w13;
      ASSERT_EQ(t.shape.size(), 3u);
      EXPECT_EQ(t.shape[0], 8u);
      EXPECT_EQ(t.shape[1] % 128, 0u);  // gate | up, each a multiple of 64 rows
    } else if (t.name.ends_with("mlp.experts.w2_weight")) {
      ++w2;
      ASSERT_EQ(t.shape.size(), 3u);
      EXPECT_EQ(t.shape[2] % 64, 0u);
    } else if (t.name.find("_proj") != std::string::npos &&
               t.name.find("mlp.") != std::string::npos) {
      ++dense_mlp;
    }
  }
  EXPECT_GT(routers, 0);
  EXPECT_EQ(routers, w13);
  EXPECT_EQ(routers, w2);
  EXPECT_EQ(dense_mlp, 0);
  RoundTripCase c{"moe", layout, 0.01};
  PublishSummary s = RoundTrip(c, tmp);
  EXPECT_GT(s.tensors_changed, 0u);
}

TEST(DeltaRoundTrip, Fp32AndOneByteDtypes) {
  TempDir tmp;
  RoundTripCase c{"mixed",
                  OneFile({{"f32", DType::kF32, {300, 17}},
                           {"u8", DType::kU8, {1000}},
                           {"i8", DType::kI8, {3, 5, 7}},
                           {"bool", DType::kBool, {64}},
                           {"f8", DType::kF8E4M3, {4096}},
                           {"i64", DType::kI64, {129}}}),
                  0.05};
  RoundTrip(c, tmp);
}

TEST(DeltaRoundTrip, ZeroSizeAndScalarTensors) {
  TempDir tmp;
  RoundTripCase c{"zero",
                  OneFile({{"empty", DType::kBF16, {0, 8}},
                           {"scalar", DType::kF32, {}},
                           {"w", DType::kBF16, {64, 64}},
                           {"empty2", DType::kU8, {0}}}),
                  0.2};
  RoundTrip(c, tmp);
}

TEST(DeltaRoundTrip, HundredsOfTensorsOverSeveralFiles) {
  TempDir tmp;
  std::vector<SyntheticFile> layout(3);
  for (int f = 0; f < 3; ++f) {
    layout[f].name = "part-" + std::to_string(f) + ".safetensors";
    for (int i = 0; i < 120; ++i) {
      layout[f].tensors.push_back({"layer." + std::to_string(f) + "." + std::to_string(i),
                                   i % 3 == 0 ? DType::kF32 : DType::kBF16,
                                   {static_cast<uint64_t>(1 + i % 17), 33}});
    }
  }
  RoundTripCase c{"many", layout, 0.01};
  PublishSummary s = RoundTrip(c, tmp);
  EXPECT_EQ(s.tensors, 360u);
  EXPECT_LT(s.tensors_changed, s.tensors);  // some small tensors stay unchanged
}

TEST(DeltaRoundTrip, TensorsSpanningSeveralFrames) {
  TempDir tmp;
  RoundTripCase c{"frames",
                  OneFile({{"big", DType::kBF16, {1024, 700}}, {"b", DType::kBF16, {999}}}), 0.001,
                  /*frame_bytes=*/64 << 10};
  PublishSummary s = RoundTrip(c, tmp);
  EXPECT_GT(s.frames, 20u);
}

TEST(DeltaRoundTrip, UnchangedPiecesAreOmittedButVerified) {
  TempDir tmp;
  RoundTripCase c{"sparse-frames", OneFile({{"big", DType::kBF16, {4096, 256}}}), 0.00002,
                  /*frame_bytes=*/16 << 10};
  PublishSummary s = RoundTrip(c, tmp);
  EXPECT_LT(s.dense_bytes, s.checkpoint_bytes);  // untouched 16 KiB pieces have no frame
}

TEST(DeltaRoundTrip, HeaderChangesAreCarriedByTheCheckpointSection) {
  TempDir tmp;
  RoundTripCase c{"header", ModelLikeLayout(2 << 20, 2), 0.01, 64ull << 20, "step-42"};
  RoundTrip(c, tmp);
}

TEST(DeltaRoundTrip, WithoutCheckpointSection) {
  TempDir tmp;
  RoundTripCase c{"no-section", ModelLikeLayout(2 << 20, 1), 0.01};
  c.include_checkpoint = false;
  RoundTrip(c, tmp);
}

TEST(DeltaRoundTrip, IdenticalCheckpointsGiveAnEmptyDelta) {
  TempDir tmp;
  RoundTripCase c{"identical", ModelLikeLayout(1 << 20, 1), 0.0};
  PublishSummary s = RoundTrip(c, tmp);
  EXPECT_EQ(s.tensors_changed, 0u);
  EXPECT_EQ(s.frames, 0u);
}

TEST(DeltaRoundTrip, OutputDoesNotDependOnThreadCount) {
  TempDir a, b;
  RoundTripCase c{"t1", ModelLikeLayout(4 << 20, 2), 0.01, 256 << 10};
  c.threads = 1;
  RoundTrip(c, a);
  c.threads = 4;
  RoundTrip(c, b);
  EXPECT_EQ(ReadAll(a / "delta/manifest.json"), ReadAll(b / "delta/manifest.json"));
  EXPECT_EQ(ReadAll(a / "delta/shard-00000.zst"), ReadAll(b / "delta/shard-00000.zst"));
}

TEST(DeltaRoundTrip, ShardsRotateAtTheirSizeLimit) {
  TempDir tmp;
  ASSERT_TRUE(GenerateCheckpoint(tmp / "v1", ModelLikeLayout(4 << 20, 1), 3).ok());
  MutationOptions mo;
  mo.density = 0.05;
  ASSERT_TRUE(MutateCheckpoint(tmp / "v1", tmp / "v2", mo).ok());
  PublishOptions po;
  po.parent_dir = tmp / "v1";
  po.new_dir = tmp / "v2";
  po.out_dir = tmp / "delta";
  po.frame_bytes = 128 << 10;
  po.shard_bytes = 64 << 10;
  auto pub = PublishDelta(po);
  ASSERT_TRUE(pub.ok()) << pub.status().ToString();
  EXPECT_GE(pub->objects, 2u);
  ApplyOptions ao{tmp / "v1", tmp / "delta", tmp / "out"};
  auto app = ApplyDelta(ao);
  ASSERT_TRUE(app.ok()) << app.status().ToString();
  EXPECT_EQ(ReadAll(tmp / "out/model-00001-of-00001.safetensors"),
            ReadAll(tmp / "v2/model-00001-of-00001.safetensors"));
}

TEST(Mutate, TensorFractionChangesOnlyPickedTensorsAndOneByDefault) {
  TempDir tmp;
  ASSERT_TRUE(GenerateCheckpoint(tmp / "v1", ModelLikeLayout(4 << 20, 1), 3).ok());
  auto changed = [&](const std::string& dir) {
    auto a = Checkpoint::Open(tmp / "v1");
    auto b = Checkpoint::Open(tmp / dir);
    size_t tensors = 0, total = 0;
    for (size_t f = 0; f < a->files().size(); ++f) {
      for (const TensorInfo& t : a->files()[f].header().tensors) {
        const auto pa = a->files()[f].TensorBytes(t);
        const auto pb = b->files()[f].TensorBytes(t);
        if (pa.empty()) continue;
        ++total;
        tensors += std::memcmp(pa.data(), pb.data(), pa.size()) != 0 ? 1 : 0;
      }
    }
    return std::make_pair(tensors, total);
  };
  MutationOptions all;
  all.density = 0.05;
  ASSERT_TRUE(MutateCheckpoint(tmp / "v1", tmp / "all", all).ok());
  const auto [every, total] = changed("all");
  EXPECT_EQ(every, total);
  MutationOptions few = all;
  few.tensor_fraction = 0.25;
  ASSERT_TRUE(MutateCheckpoint(tmp / "v1", tmp / "few", few).ok());
  const auto [some, total2] = changed("few");
  EXPECT_GT(some, 0u);
  EXPECT_LT(some, total2 / 2);
  // Deterministic, and refused outside (0, 1].
  ASSERT_TRUE(MutateCheckpoint(tmp / "v1", tmp / "few2", few).ok());
  EXPECT_EQ(ReadAll(tmp / "few/model-00001-of-00001.safetensors"),
            ReadAll(tmp / "few2/model-00001-of-00001.safetensors"));
  few.tensor_fraction = 0;
  EXPECT_EQ(MutateCheckpoint(tmp / "v1", tmp / "bad", few).status().code(),
            StatusCode::kInvalidArgument);
}

// In-memory tensors give the same frames and shards as the same tensors in checkpoint files.
std::vector<TensorBytes> TensorsOf(const Checkpoint& c) {
  std::vector<TensorBytes> out;
  for (const SafetensorsFile& f : c.files()) {
    for (const TensorInfo& t : f.header().tensors) {
      out.push_back({t.name, t.dtype, t.shape, f.TensorBytes(t)});
    }
  }
  return out;
}

TEST(DeltaFromTensors, SameShardsAsTheFilePublisher) {
  TempDir tmp;
  ASSERT_TRUE(GenerateCheckpoint(tmp / "v1", ModelLikeLayout(2 << 20, 2), 7).ok());
  MutationOptions mo;
  mo.density = 0.01;
  mo.seed = 3;
  ASSERT_TRUE(MutateCheckpoint(tmp / "v1", tmp / "v2", mo).ok());
  PublishOptions po;
  po.parent_dir = tmp / "v1";
  po.new_dir = tmp / "v2";
  po.out_dir = tmp / "files";
  po.frame_bytes = 256 << 10;
  po.include_checkpoint = false;
  auto from_files = PublishDelta(po);
  ASSERT_TRUE(from_files.ok()) << from_files.status().ToString();

  auto a = Checkpoint::Open(tmp / "v1");
  auto b = Checkpoint::Open(tmp / "v2");
  ASSERT_TRUE(a.ok() && b.ok());
  const std::vector<TensorBytes> pa = TensorsOf(*a), pb = TensorsOf(*b);
  po.out_dir = tmp / "memory";
  po.parent_version = "v1";
  po.version = "v2";
  auto from_memory = PublishDeltaFromTensors(pa, pb, po);
  ASSERT_TRUE(from_memory.ok()) << from_memory.status().ToString();
  EXPECT_EQ(from_memory->frames, from_files->frames);
  EXPECT_EQ(from_memory->nonzero_bytes, from_files->nonzero_bytes);
  EXPECT_EQ(ListDir(tmp / "memory"), ListDir(tmp / "files"));
  for (const std::string& f : ListDir(tmp / "files")) {
    EXPECT_EQ(ReadAll(tmp / "memory/" + f), ReadAll(tmp / "files/" + f)) << f;
  }
  // And it applies to the parent checkpoint.
  ApplyOptions ao;
  ao.parent_dir = tmp / "v1";
  ao.delta_dir = tmp / "memory";
  ao.out_dir = tmp / "out";
  auto app = ApplyDelta(ao);
  ASSERT_TRUE(app.ok()) << app.status().ToString();
  for (const std::string& f : b->file_names()) {
    EXPECT_EQ(ReadAll(tmp / "out/" + f), ReadAll(tmp / "v2/" + f)) << f;
  }
}

TEST(DeltaFromTensors, BadInputIsRefusedAndLeavesNothing) {
  TempDir tmp;
  std::vector<uint8_t> x(64, 1), y(64, 2), short_bytes(10, 0);
  PublishOptions po;
  po.out_dir = tmp / "d";
  po.parent_version = "v1";
  po.version = "v2";
  auto refused = [&](std::vector<TensorBytes> p, std::vector<TensorBytes> n, PublishOptions o,
                     const std::string& fragment) {
    auto r = PublishDeltaFromTensors(p, n, o);
    ASSERT_FALSE(r.ok()) << fragment;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().ToString();
    EXPECT_NE(r.status().message().find(fragment), std::string::npos) << r.status().ToString();
    EXPECT_TRUE(ListDir(tmp.path()).empty());
  };
  const TensorBytes w1{"w", DType::kF32, {16}, x}, w2{"w", DType::kF32, {16}, y};
  refused({w1}, {{"w", DType::kF32, {17}, y}}, po, "shape need");
  refused({w1}, {{"w", DType::kBF16, {32}, y}}, po,
          "'w' changed dtype or shape between parent (F32 [16]) and new (BF16 [32])");
  // A reshape alone: the shapes tell the two apart.
  refused({w1}, {{"w", DType::kF32, {4, 4}, y}}, po,
          "'w' changed dtype or shape between parent (F32 [16]) and new (F32 [4, 4])");
  refused({w1}, {{"v", DType::kF32, {16}, y}}, po, "not in the parent");
  refused({w1}, {w2, w2}, po, "cannot add or remove");
  refused({w1, w1}, {w2, w2}, po, "appears twice");
  refused({{"", DType::kU8, {10}, short_bytes}}, {w2}, po, "no name");
  PublishOptions same = po;
  same.version = "v1";
  refused({w1}, {w2}, same, "both");
  PublishOptions unnamed = po;
  unnamed.version = "";
  refused({w1}, {w2}, unnamed, "required");
  // Names a JSON manifest cannot hold.
  refused({{"w\xff", DType::kF32, {16}, x}}, {{"w\xff", DType::kF32, {16}, y}}, po,
          "tensor name 'w\\xff' is not valid UTF-8");
  PublishOptions latin1 = po;
  latin1.version = "v2\xe9";
  refused({w1}, {w2}, latin1, "version 'v2\\xe9' is not valid UTF-8");
  latin1 = po;
  latin1.parent_version = "\xc0\xaf";  // an overlong '/'
  refused({w1}, {w2}, latin1, "parent version");

  auto ok = PublishDeltaFromTensors(std::vector<TensorBytes>{w1}, std::vector<TensorBytes>{w2}, po);
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->tensors_changed, 1u);
  EXPECT_EQ(ok->nonzero_bytes, 64u);
  // An existing output directory is refused, as for checkpoint files.
  auto again =
      PublishDeltaFromTensors(std::vector<TensorBytes>{w1}, std::vector<TensorBytes>{w2}, po);
  EXPECT_EQ(again.status().code(), StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace deltakv::deltasync
