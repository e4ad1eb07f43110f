// Every kind of bad input to apply gives its documented error and leaves no output behind.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "deltasync/applier.h"
#include "deltasync/delta_manifest.h"
#include "deltasync/publisher.h"
#include "deltasync/synthetic.h"
#include "test_util.h"

namespace deltakv::deltasync {
namespace {

using testing::ReadAll;
using testing::TempDir;
using testing::WriteAll;
using Json = nlohmann::json;

class DeltaRejectTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::vector<SyntheticFile> layout = {
        {"model.safetensors",
         {{"w", DType::kBF16, {512, 256}}, {"tiny", DType::kF32, {8}}, {"u", DType::kU8, {4096}}}}};
    ASSERT_TRUE(GenerateCheckpoint(tmp_ / "v1", layout, 5).ok());
    MutationOptions mo;
    mo.density = 0.02;
    mo.seed = 2;
    ASSERT_TRUE(MutateCheckpoint(tmp_ / "v1", tmp_ / "v2", mo).ok());
    mo.seed = 3;
    ASSERT_TRUE(MutateCheckpoint(tmp_ / "v2", tmp_ / "v3", mo).ok());
    PublishOptions po;
    po.parent_dir = tmp_ / "v1";
    po.new_dir = tmp_ / "v2";
    po.out_dir = tmp_ / "d12";
    po.frame_bytes = 64 << 10;
    ASSERT_TRUE(PublishDelta(po).ok());
    po.parent_dir = tmp_ / "v2";
    po.new_dir = tmp_ / "v3";
    po.out_dir = tmp_ / "d23";
    ASSERT_TRUE(PublishDelta(po).ok());
  }

  // Applies and expects failure with `code` and a message containing `text`; checks that
  // nothing was left in the output's parent directory.
  void ExpectRejected(const std::string& parent, const std::string& delta, StatusCode code,
                      const std::string& text, bool verify_objects = true) {
    auto before = testing::ListDir(tmp_.path());
    ApplyOptions ao;
    ao.parent_dir = tmp_ / parent;
    ao.delta_dir = tmp_ / delta;
    ao.out_dir = tmp_ / "out";
    ao.verify_objects = verify_objects;
    auto r = ApplyDelta(ao);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), code) << r.status().ToString();
    EXPECT_NE(r.status().message().find(text), std::string::npos) << r.status().ToString();
    EXPECT_FALSE(std::filesystem::exists(tmp_ / "out"));
    EXPECT_EQ(testing::ListDir(tmp_.path()), before);  // no temporary left behind
  }

  Json Manifest(const std::string& delta) {
    return Json::parse(ReadAll(tmp_ / (delta + "/manifest.json")));
  }
  void SaveManifest(const std::string& delta, const Json& j) {
    WriteAll(tmp_ / (delta + "/manifest.json"), j.dump());
  }

  TempDir tmp_;
};

TEST_F(DeltaRejectTest, WrongParent) {
  ExpectRejected("v1", "d23", StatusCode::kDataLoss, "parent checksum mismatch: expected 0x");
}

TEST_F(DeltaRejectTest, CorruptFrameCaughtBySha256) {
  std::string shard = ReadAll(tmp_ / "d12/shard-00000.zst");
  shard[shard.size() / 2] ^= 0x40;
  WriteAll(tmp_ / "d12/shard-00000.zst", shard);
  ExpectRejected("v1", "d12", StatusCode::kDataLoss, "sha256 mismatch");
}

TEST_F(DeltaRejectTest, CorruptFrameCaughtByDecoderOrChecksum) {
  std::string shard = ReadAll(tmp_ / "d12/shard-00000.zst");
  for (size_t i = 20; i < shard.size(); i += 97) shard[i] ^= 0x5a;
  WriteAll(tmp_ / "d12/shard-00000.zst", shard);
  // Without the object hash, the zstd frame checks or the tensor checksum must catch it.
  ExpectRejected("v1", "d12", StatusCode::kDataLoss, "tensor '", /*verify_objects=*/false);
}

TEST_F(DeltaRejectTest, XorDigestMismatch) {
  Json j = Manifest("d12");
  Json& f = j["tensors"][0]["frames"][0];
  ASSERT_TRUE(f.contains("xor_digest"));  // the publisher records one per frame
  std::string d = f["xor_digest"];
  d[31] = d[31] == '0' ? '1' : '0';
  f["xor_digest"] = d;
  SaveManifest("d12", j);
  ExpectRejected("v1", "d12", StatusCode::kDataLoss, ", the manifest says " + d);
}

TEST_F(DeltaRejectTest, MalformedXorDigest) {
  Json j = Manifest("d12");
  j["tensors"][0]["frames"][0]["xor_digest"] = "not-a-digest";
  SaveManifest("d12", j);
  ExpectRejected("v1", "d12", StatusCode::kInvalidArgument, "xor_digest must be 32");
}

TEST_F(DeltaRejectTest, DamagedFrameChecksumWithoutXorDigest) {
  // The last 4 bytes of a frame are its XXH64 content checksum. Without the object hash and
  // without xor_digest, the frame checksum refuses the frame; with xor_digest (which checks
  // the same decoded bytes) the delta applies, because its content is intact.
  Json j = Manifest("d12");
  const Json& f = j["tensors"][0]["frames"][0];
  const size_t end = f["object_offset"].get<size_t>() + f["compressed_length"].get<size_t>();
  const std::string object = tmp_ / ("d12/" + f["object"].get<std::string>());
  std::string shard = ReadAll(object);
  shard[end - 1] ^= 0x01;
  WriteAll(object, shard);
  {
    ApplyOptions ao;
    ao.parent_dir = tmp_ / "v1";
    ao.delta_dir = tmp_ / "d12";
    ao.out_dir = tmp_ / "out";
    ao.verify_objects = false;
    ASSERT_TRUE(ApplyDelta(ao).ok());
    std::filesystem::remove_all(tmp_ / "out");
  }
  for (auto& t : j["tensors"]) {
    for (auto& fr : t["frames"]) fr.erase("xor_digest");
  }
  SaveManifest("d12", j);
  ExpectRejected("v1", "d12", StatusCode::kDataLoss, "content checksum mismatch",
                 /*verify_objects=*/false);
}

TEST_F(DeltaRejectTest, TruncatedShard) {
  std::string shard = ReadAll(tmp_ / "d12/shard-00000.zst");
  WriteAll(tmp_ / "d12/shard-00000.zst", shard.substr(0, shard.size() - 100));
  ExpectRejected("v1", "d12", StatusCode::kDataLoss, "(truncated)");
}

TEST_F(DeltaRejectTest, TruncatedFrameWithMatchingManifest) {
  // Cut the last frame short and make the manifest agree: the decoder must notice.
  Json j = Manifest("d12");
  Json& last = j["tensors"].back()["frames"].back();
  uint64_t cut = last["compressed_length"].get<uint64_t>() / 2;
  last["compressed_length"] = cut;
  j["objects"][0].erase("sha256");
  SaveManifest("d12", j);
  ExpectRejected("v1", "d12", StatusCode::kDataLoss, "frame");
}

TEST_F(DeltaRejectTest, NewChecksumMismatch) {
  Json j = Manifest("d12");
  j["tensors"][0]["adler32"] = "00000001";
  for (auto& t : j["checkpoint"]["tensors"]) {
    if (t["name"] == j["tensors"][0]["name"]) t["adler32"] = "00000001";
  }
  SaveManifest("d12", j);
  ExpectRejected("v1", "d12", StatusCode::kDataLoss, "new checksum mismatch");
}

TEST_F(DeltaRejectTest, UnchangedTensorDisagreesWithCheckpointSection) {
  Json j = Manifest("d12");
  // Drop a changed tensor from the delta: the checkpoint section still expects its new bytes.
  std::string name = j["tensors"][0]["name"];
  j["tensors"].erase(0);
  SaveManifest("d12", j);
  ExpectRejected("v1", "d12", StatusCode::kDataLoss, "not changed by the delta");
}

TEST_F(DeltaRejectTest, FrameDecodesToTheWrongLength) {
  Json j = Manifest("d12");
  Json& f = j["tensors"][0]["frames"][0];
  f["length"] = f["length"].get<uint64_t>() - 1;
  SaveManifest("d12", j);
  ExpectRejected("v1", "d12", StatusCode::kDataLoss, "decodes to more than its declared");
}

TEST_F(DeltaRejectTest, TensorTheParentDoesNotHave) {
  Json j = Manifest("d12");
  j.erase("checkpoint");
  j["tensors"][0]["name"] = "no.such.tensor";
  SaveManifest("d12", j);
  ExpectRejected("v1", "d12", StatusCode::kInvalidArgument, "no.such.tensor");
}

TEST_F(DeltaRejectTest, TensorLengthDiffersFromParent) {
  Json j = Manifest("d12");
  j.erase("checkpoint");
  j["tensors"][0]["length"] = j["tensors"][0]["length"].get<uint64_t>() + 2;
  SaveManifest("d12", j);
  ExpectRejected("v1", "d12", StatusCode::kInvalidArgument, "has length");
}

TEST_F(DeltaRejectTest, MalformedManifestJson) {
  WriteAll(tmp_ / "d12/manifest.json", "{\"format\": \"deltakv.delta/1\", ");
  ExpectRejected("v1", "d12", StatusCode::kInvalidArgument, "invalid JSON");
}

TEST_F(DeltaRejectTest, UnsupportedEncoding) {
  Json j = Manifest("d12");
  j["metadata"]["delta_encoding"] = "overwrite";
  SaveManifest("d12", j);
  ExpectRejected("v1", "d12", StatusCode::kInvalidArgument, "delta_encoding is 'overwrite'");
}

TEST_F(DeltaRejectTest, MissingObject) {
  std::filesystem::remove(tmp_ / "d12/shard-00000.zst");
  ExpectRejected("v1", "d12", StatusCode::kIoError, "shard-00000.zst");
}

TEST_F(DeltaRejectTest, CheckpointSectionHeaderDisagrees) {
  Json j = Manifest("d12");
  // The same bytes in another shape (one dimension): it parses, and disagrees with the header.
  uint64_t elements = 1;
  for (const Json& d : j["checkpoint"]["tensors"][0]["shape"]) elements *= d.get<uint64_t>();
  j["checkpoint"]["tensors"][0]["shape"] = Json::array({elements});
  SaveManifest("d12", j);
  ExpectRejected("v1", "d12", StatusCode::kInvalidArgument, "different dtype, shape or byte range");
  // Parsing the manifest alone finds it too (FORMAT.md 2.3).
  auto parsed = ParseDeltaManifest(j.dump());
  ASSERT_FALSE(parsed.ok());
  EXPECT_NE(parsed.status().message().find("different dtype, shape or byte range"),
            std::string::npos)
      << parsed.status().ToString();
  // Tensors out of order are refused by the parser (FORMAT.md 1.2 via 2.3).
  Json reordered = Manifest("d12");
  ASSERT_GE(reordered["checkpoint"]["tensors"].size(), 2u);
  std::swap(reordered["checkpoint"]["tensors"][0], reordered["checkpoint"]["tensors"][1]);
  EXPECT_NE(ParseDeltaManifest(reordered.dump()).status().message().find("out of order"),
            std::string::npos);
  // A shape whose bytes disagree with the byte range is refused by the parser itself.
  j["checkpoint"]["tensors"][0]["shape"] = Json::array({1, 2, 3});
  EXPECT_NE(ParseDeltaManifest(j.dump()).status().message().find("its dtype and shape"),
            std::string::npos);
}

TEST_F(DeltaRejectTest, OutputAlreadyExists) {
  std::filesystem::create_directory(tmp_ / "out");
  ApplyOptions ao{tmp_ / "v1", tmp_ / "d12", tmp_ / "out"};
  auto r = ApplyDelta(ao);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(std::filesystem::is_empty(tmp_ / "out"));
}

TEST_F(DeltaRejectTest, PublishRefusesDifferentTensorSets) {
  std::vector<SyntheticFile> other = {{"model.safetensors", {{"w", DType::kBF16, {512, 256}}}}};
  ASSERT_TRUE(GenerateCheckpoint(tmp_ / "other", other, 1).ok());
  PublishOptions po;
  po.parent_dir = tmp_ / "v1";
  po.new_dir = tmp_ / "other";
  po.out_dir = tmp_ / "dx";
  auto r = PublishDelta(po);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("cannot remove tensors"), std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(tmp_ / "dx"));
}

TEST_F(DeltaRejectTest, FrameApplyLengthMismatch) {
  Json j = Manifest("d12");
  const Json& f = j["tensors"][0]["frames"][0];
  std::string shard = ReadAll(tmp_ / "d12/shard-00000.zst");
  WriteAll(tmp_ / "frame.zst", shard.substr(f["object_offset"].get<uint64_t>(),
                                            f["compressed_length"].get<uint64_t>()));
  WriteAll(tmp_ / "base.bin", std::string(f["length"].get<uint64_t>() + 5, '\x01'));
  auto r = ApplyFramesToFile(tmp_ / "base.bin", tmp_ / "frame.zst", tmp_ / "out.bin", "", 27);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
  EXPECT_FALSE(std::filesystem::exists(tmp_ / "out.bin"));
  WriteAll(tmp_ / "base.bin", std::string(f["length"].get<uint64_t>(), '\x01'));
  r = ApplyFramesToFile(tmp_ / "base.bin", tmp_ / "frame.zst", tmp_ / "out.bin", "", 27);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(ReadAll(tmp_ / "out.bin").size(), f["length"].get<uint64_t>());
}

}  // namespace
}  // namespace deltakv::deltasync
