// Parsing and serializing the checkpoint and delta manifests: round trips and each kind of
// malformed input, with the field named in the error.
#include <gtest/gtest.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "deltasync/checkpoint.h"
#include "deltasync/delta_manifest.h"
#include "deltasync/synthetic.h"
#include "test_util.h"

namespace deltakv::deltasync {
namespace {

using Json = nlohmann::json;

DeltaManifest Sample() {
  DeltaManifest m;
  m.version = "v2";
  m.parent_version = "v1";
  m.objects = {{"shard-00000.zst", 1000, std::string(64, 'a')}, {"s1", 50, ""}};
  m.tensors = {{"a.weight",
                4096,
                0x01020304,
                0xa0b0c0d0,
                {{0, 1024, "shard-00000.zst", 0, 100}, {2048, 2048, "s1", 10, 40}}},
               {"b", 10, 1, 2, {{0, 10, "shard-00000.zst", 100, 900}}}};
  m.tensors[1].frames[0].xor_digest = XorDigest{0x0123456789abcdefull, 42};
  return m;
}

TEST(DeltaManifest, RoundTrip) {
  DeltaManifest m = Sample();
  std::string text = DeltaManifestToJson(m);
  auto back = ParseDeltaManifest(text);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(DeltaManifestToJson(*back), text);
  EXPECT_EQ(back->tensors[0].frames[1].object, "s1");
  EXPECT_EQ(back->tensors[0].adler32, 0xa0b0c0d0u);
  Json j = Json::parse(text);
  EXPECT_EQ(j["metadata"]["delta_encoding"], "xor");
  EXPECT_EQ(j["metadata"]["compression_format"], "zstd");
  EXPECT_EQ(j["metadata"]["checksum_format"], "adler32");
  EXPECT_EQ(j["metadata"]["base_version"], "v1");
  // xor_digest is optional: written only where recorded, 32 lowercase hex digits.
  EXPECT_FALSE(j["tensors"][0]["frames"][0].contains("xor_digest"));
  EXPECT_EQ(j["tensors"][1]["frames"][0]["xor_digest"], "0123456789abcdef000000000000002a");
  EXPECT_FALSE(back->tensors[0].frames[0].xor_digest.has_value());
  ASSERT_TRUE(back->tensors[1].frames[0].xor_digest.has_value());
  EXPECT_EQ(back->tensors[1].frames[0].xor_digest->hi, 0x0123456789abcdefull);
  EXPECT_EQ(back->tensors[1].frames[0].xor_digest->lo, 42u);
}

struct BadCase {
  const char* label;
  std::function<void(Json&)> edit;
  const char* message;
};

TEST(DeltaManifest, RejectsEachKindOfMalformedInput) {
  const BadCase cases[] = {
      {"format", [](Json& j) { j["format"] = "deltakv.delta/2"; }, "format 'deltakv.delta/2'"},
      {"no metadata", [](Json& j) { j.erase("metadata"); }, "field 'metadata' missing"},
      {"compression", [](Json& j) { j["metadata"]["compression_format"] = "lz4"; },
       "compression_format is 'lz4'"},
      {"checksum fmt", [](Json& j) { j["metadata"]["checksum_format"] = "crc32"; },
       "checksum_format is 'crc32'"},
      {"object name", [](Json& j) { j["objects"][0]["name"] = "../etc/passwd"; },
       "unsafe object name"},
      {"dup object", [](Json& j) { j["objects"][1]["name"] = "shard-00000.zst"; },
       "duplicate object"},
      {"object size", [](Json& j) { j["objects"][0]["size"] = -1; }, "non-negative integer"},
      {"sha", [](Json& j) { j["objects"][0]["sha256"] = "xyz"; }, "sha256 must be"},
      {"checksum hex", [](Json& j) { j["tensors"][0]["adler32"] = "12345"; },
       "must be 8 hex digits"},
      {"checksum chars", [](Json& j) { j["tensors"][0]["parent_adler32"] = "1234567g"; },
       "must be 8 hex digits"},
      {"dup tensor", [](Json& j) { j["tensors"][1]["name"] = "a.weight"; }, "listed twice"},
      {"frame beyond tensor", [](Json& j) { j["tensors"][0]["frames"][1]["length"] = 2049; },
       "beyond the tensor"},
      {"frame overlap", [](Json& j) { j["tensors"][0]["frames"][1]["offset"] = 1000; },
       "must not overlap"},
      {"frame unsorted",
       [](Json& j) { std::swap(j["tensors"][0]["frames"][0], j["tensors"][0]["frames"][1]); },
       "must be sorted"},
      {"unknown object", [](Json& j) { j["tensors"][0]["frames"][0]["object"] = "nope"; },
       "unknown object 'nope'"},
      {"beyond object", [](Json& j) { j["tensors"][0]["frames"][1]["compressed_length"] = 41; },
       "beyond object 's1'"},
      {"offset overflow",
       [](Json& j) { j["tensors"][0]["frames"][1]["object_offset"] = UINT64_MAX; },
       "beyond object"},
      {"empty frame", [](Json& j) { j["tensors"][1]["frames"][0]["compressed_length"] = 0; },
       "compressed_length is 0"},
      {"frames type", [](Json& j) { j["tensors"][0]["frames"] = "x"; }, "must be an array"},
      {"xor_digest short",
       [](Json& j) { j["tensors"][1]["frames"][0]["xor_digest"] = "0123"; },
       "frames[0]: xor_digest must be 32 lowercase hex digits"},
      {"xor_digest upper",
       [](Json& j) {
         j["tensors"][1]["frames"][0]["xor_digest"] = "0123456789ABCDEF000000000000002a";
       },
       "xor_digest must be 32 lowercase hex digits"},
      {"xor_digest type", [](Json& j) { j["tensors"][1]["frames"][0]["xor_digest"] = 7; },
       "xor_digest"},
      {"length type", [](Json& j) { j["tensors"][0]["length"] = "4096"; }, "non-negative integer"},
      {"section unknown file",
       [](Json& j) {
         j["checkpoint"] = {{"files", {{{"name", "a.safetensors"}, {"header", "{}"}}}},
                            {"tensors",
                             {{{"name", "t"},
                               {"dtype", "U8"},
                               {"shape", {1}},
                               {"file", "b.safetensors"},
                               {"byte_range", {8, 9}},
                               {"adler32", "00020002"}}}}};
       },
       "names unknown file 'b.safetensors'"},
      {"section dtype",
       [](Json& j) {
         j["checkpoint"] = {{"files", {{{"name", "a.safetensors"}, {"header", "{}"}}}},
                            {"tensors",
                             {{{"name", "t"},
                               {"dtype", "Q7"},
                               {"shape", {1}},
                               {"file", "a.safetensors"},
                               {"byte_range", {8, 9}},
                               {"adler32", "00020002"}}}}};
       },
       "unknown dtype 'Q7'"},
  };
  const std::string good = DeltaManifestToJson(Sample());
  for (const BadCase& c : cases) {
    Json j = Json::parse(good);
    c.edit(j);
    auto r = ParseDeltaManifest(j.dump());
    ASSERT_FALSE(r.ok()) << c.label;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << c.label;
    EXPECT_NE(r.status().message().find(c.message), std::string::npos)
        << c.label << ": " << r.status().message();
  }
}

TEST(DeltaManifest, RejectsNonObjectsAndGarbage) {
  for (const char* text : {"", "[]", "null", "42", "{", "{\"format\": 1}", "\xff\xfe"}) {
    auto r = ParseDeltaManifest(text);
    EXPECT_FALSE(r.ok()) << text;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  }
}

TEST(DeltaManifest, SafeNames) {
  EXPECT_TRUE(IsSafeObjectName("shard-00000.zst"));
  EXPECT_TRUE(IsSafeObjectName("model.safetensors"));
  for (const char* bad : {"", ".", "..", "a/b", "a b", "x\\y", "\xc3\xa9"}) {
    EXPECT_FALSE(IsSafeObjectName(bad)) << bad;
  }
  EXPECT_FALSE(IsSafeObjectName(std::string(256, 'a')));
}

TEST(DeltaManifest, ChecksumText) {
  EXPECT_EQ(FormatChecksum(0x0001ab0f), "0001ab0f");
  EXPECT_EQ(*ParseChecksum("DEADbeef", "x"), 0xdeadbeefu);
}

TEST(CheckpointManifest, RoundTripAndErrors) {
  CheckpointManifest m;
  m.version = "v7";
  m.files = {{"a.safetensors", 100, 40}};
  m.tensors = {{"t", DType::kBF16, {2, 3}, "a.safetensors", 48, 60, 0x12345678}};
  std::string text = CheckpointManifestToJson(m);
  auto back = ParseCheckpointManifest(text);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(CheckpointManifestToJson(*back), text);

  Json j = Json::parse(text);
  j["tensors"][0]["byte_range"] = {90, 102};
  EXPECT_NE(ParseCheckpointManifest(j.dump()).status().message().find("beyond file"),
            std::string::npos);
  // FORMAT.md 1.1/1.2: the range holds dtype x shape bytes, after the header, in order, apart.
  auto refused = [&](const Json& bad, const std::string& needle) {
    auto r = ParseCheckpointManifest(bad.dump());
    ASSERT_FALSE(r.ok()) << needle;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().ToString();
  };
  j = Json::parse(text);
  j["tensors"][0]["byte_range"] = {48, 61};
  refused(j, "holds 13 bytes, its dtype and shape 12");
  j = Json::parse(text);
  j["tensors"][0]["shape"] = {uint64_t{1} << 40, uint64_t{1} << 40};
  refused(j, "shape overflows");
  j = Json::parse(text);
  j["tensors"][0]["byte_range"] = {0, 12};
  refused(j, "inside the header");
  j = Json::parse(text);
  j["files"][0]["header_size"] = 95;
  refused(j, "does not fit");
  j = Json::parse(text);
  j["files"].push_back(j["files"][0]);
  refused(j, "duplicate file");
  j = Json::parse(text);
  j["tensors"].push_back(j["tensors"][0]);
  j["tensors"][1]["name"] = "u";
  refused(j, "overlaps");  // the same bytes twice
  j["tensors"][1]["byte_range"] = {60, 72};
  EXPECT_TRUE(ParseCheckpointManifest(j.dump()).ok());
  std::swap(j["tensors"][0], j["tensors"][1]);
  refused(j, "out of order");
  j = Json::parse(text);
  j["tensors"][0]["byte_range"] = {60, 48};
  EXPECT_NE(ParseCheckpointManifest(j.dump()).status().message().find("begin > end"),
            std::string::npos);
  j = Json::parse(text);
  j["tensors"][0]["file"] = "b.safetensors";
  EXPECT_NE(ParseCheckpointManifest(j.dump()).status().message().find("unknown file"),
            std::string::npos);
  j = Json::parse(text);
  j["format"] = "other";
  EXPECT_FALSE(ParseCheckpointManifest(j.dump()).ok());
}

// A trainer rewriting a checkpoint in place can shrink a file while it is read: the manifest
// fails with an IoError naming the file, where reading past the new end raised SIGBUS.
TEST(CheckpointManifest, AFileThatShrinksWhileItIsReadIsAnIoError) {
  testing::TempDir tmp;
  const std::vector<SyntheticFile> layout = {{"a.safetensors", {{"w", DType::kF32, {64, 1024}}}},
                                             {"b.safetensors", {{"v", DType::kF32, {64, 1024}}}}};
  ASSERT_TRUE(GenerateCheckpoint(tmp / "c", layout, 1).ok());
  auto ckpt = Checkpoint::Open(tmp / "c", MappedFile::Shrink::kReadZeros);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  EXPECT_TRUE(ckpt->CheckUnchanged().ok());
  ASSERT_EQ(truncate((tmp / "c/b.safetensors").c_str(), 4096), 0);
  auto m = ComputeCheckpointManifest(*ckpt, "v", 2, false);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kIoError);
  EXPECT_NE(m.status().message().find("b.safetensors' changed while being read"), std::string::npos)
      << m.status().ToString();
}

}  // namespace
}  // namespace deltakv::deltasync
