// Safetensors: write -> open round trips, byte-exact agreement with the reference layout, and
// one test per malformed-input rule of ParseSafetensorsHeader.
#include "deltasync/safetensors.h"

#include <dirent.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "base/file_util.h"

namespace deltakv::deltasync {
namespace {

std::span<const uint8_t> Bytes(std::string_view s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

// A file image: u64 little-endian header length, the header, the data section.
std::string FileImage(std::string_view header, std::string_view data) {
  std::string out;
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((n >> (8 * i)) & 0xFF));
  out += header;
  out += data;
  return out;
}

StatusOr<SafetensorsHeader> Parse(std::string_view header, std::string_view data) {
  const std::string image = FileImage(header, data);
  return ParseSafetensorsHeader(Bytes(image), image.size());
}

// Expects InvalidArgument whose message contains `needle`.
void ExpectInvalid(const StatusOr<SafetensorsHeader>& r, std::string_view needle) {
  ASSERT_FALSE(r.ok()) << "expected an error containing: " << needle;
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().ToString();
  EXPECT_NE(r.status().message().find(needle), std::string::npos)
      << "message: " << r.status().message() << "\nexpected to contain: " << needle;
}

std::string Hex(std::string_view hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    out.push_back(static_cast<char>(std::stoi(std::string(hex.substr(i, 2)), nullptr, 16)));
  }
  return out;
}

class TempDir {
 public:
  TempDir() {
    std::string tmpl = ::testing::TempDir() + "safetensors_test.XXXXXX";
    char* made = mkdtemp(tmpl.data());
    EXPECT_NE(made, nullptr);
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::vector<std::string> Entries() const {
    std::vector<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(path_)) {
      names.push_back(e.path().filename().string());
    }
    return names;
  }

 private:
  std::string path_;
};

// A file laid out as the reference writer does (compact JSON, "__metadata__" first, fields in
// the order dtype, shape, data_offsets, spaces padding the header to a multiple of 8), produced
// once with python3 (json.dumps(separators=(',', ':')) and numpy little-endian arrays):
// a = F32 [1.5, -2.0], b = BF16 [[1.0, 2.0]], c = I64 scalar -7.
constexpr std::string_view kReferenceFileHex =
    "c8000000000000007b225f5f6d657461646174615f5f223a7b22666f726d6174223a227074227d2c2261223a7b"
    "226474797065223a22463332222c227368617065223a5b325d2c22646174615f6f666673657473223a5b302c38"
    "5d7d2c2262223a7b226474797065223a2242463136222c227368617065223a5b312c325d2c22646174615f6f66"
    "6673657473223a5b382c31325d7d2c2263223a7b226474797065223a22493634222c227368617065223a5b5d2c"
    "22646174615f6f666673657473223a5b31322c32305d7d7d202020200000c03f000000c0803f0040f9ffffffff"
    "ffffff";

TEST(SafetensorsTest, ParsesTheReferenceFile) {
  const std::string image = Hex(kReferenceFileHex);
  StatusOr<SafetensorsHeader> h = ParseSafetensorsHeader(Bytes(image), image.size());
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_EQ(h->raw.size(), 200u);
  EXPECT_EQ(h->data_offset(), 208u);
  EXPECT_EQ(h->data_size, 20u);
  EXPECT_EQ(h->metadata, (std::map<std::string, std::string>{{"format", "pt"}}));
  ASSERT_EQ(h->tensors.size(), 3u);
  EXPECT_EQ(h->tensors[0].name, "a");
  EXPECT_EQ(h->tensors[0].dtype, DType::kF32);
  EXPECT_EQ(h->tensors[0].shape, (std::vector<uint64_t>{2}));
  EXPECT_EQ(h->tensors[1].name, "b");
  EXPECT_EQ(h->tensors[1].dtype, DType::kBF16);
  EXPECT_EQ(h->tensors[1].begin, 8u);
  EXPECT_EQ(h->tensors[1].end, 12u);
  const TensorInfo* c = h->Find("c");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->dtype, DType::kI64);
  EXPECT_TRUE(c->shape.empty());
  EXPECT_EQ(c->size(), 8u);
  int64_t value = 0;
  std::memcpy(&value, image.data() + h->data_offset() + c->begin, 8);
  EXPECT_EQ(value, -7);
  EXPECT_EQ(h->Find("missing"), nullptr);
}

TEST(SafetensorsTest, BuildsTheReferenceHeaderByteForByte) {
  const std::string image = Hex(kReferenceFileHex);
  const std::string data = image.substr(208);
  std::vector<TensorToWrite> tensors = {
      {"a", DType::kF32, {2}, Bytes(std::string_view(data).substr(0, 8))},
      {"b", DType::kBF16, {1, 2}, Bytes(std::string_view(data).substr(8, 4))},
      {"c", DType::kI64, {}, Bytes(std::string_view(data).substr(12, 8))},
  };
  StatusOr<std::string> header = BuildSafetensorsHeader(tensors, {{"format", "pt"}});
  ASSERT_TRUE(header.ok()) << header.status().ToString();
  EXPECT_EQ(*header, image.substr(8, 200));

  TempDir dir;
  const std::string path = dir.path() + "/ref.safetensors";
  ASSERT_TRUE(WriteSafetensors(path, tensors, {{"format", "pt"}}).ok());
  StatusOr<std::string> written = ReadFileToString(path);
  ASSERT_TRUE(written.ok());
  EXPECT_EQ(*written, image);
}

TEST(SafetensorsTest, RoundTripsDTypesZeroSizeTensorsAndMetadata) {
  std::vector<uint8_t> f32(2 * 3 * 4), bf16(4 * 2), u8(5), i64(8), f8(7), boolean(3), f64(16);
  for (auto* v : {&f32, &bf16, &u8, &i64, &f8, &boolean, &f64}) {
    for (size_t i = 0; i < v->size(); ++i) (*v)[i] = static_cast<uint8_t>(i * 37 + v->size());
  }
  const std::vector<TensorToWrite> tensors = {
      {"model.layers.0.weight", DType::kF32, {2, 3}, f32},
      {"empty_u8", DType::kU8, {0}, {}},
      {"bf16", DType::kBF16, {4}, bf16},
      {"zero_middle_dim", DType::kF8E4M3, {3, 0, 5}, {}},
      {"u8", DType::kU8, {5}, u8},
      {"scalar", DType::kI64, {}, i64},
      {"f8", DType::kF8E5M2, {7}, f8},
      {"mask", DType::kBool, {3, 1}, boolean},
      {"f64", DType::kF64, {1, 2}, f64},
      {"trailing_empty", DType::kI32, {0, 4}, {}},
  };
  const std::map<std::string, std::string> metadata = {{"format", "pt"},
                                                       {"note", "quote \" and \\ ü"}};
  TempDir dir;
  const std::string path = dir.path() + "/model.safetensors";
  ASSERT_TRUE(WriteSafetensors(path, tensors, metadata).ok());
  EXPECT_EQ(dir.Entries(), std::vector<std::string>{"model.safetensors"});  // no temp left

  StatusOr<SafetensorsFile> file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  const SafetensorsHeader& h = file->header();
  EXPECT_EQ(h.raw.size() % 8, 0u);
  EXPECT_EQ(h.metadata, metadata);
  uint64_t total = 0;
  for (const TensorToWrite& t : tensors) total += t.data.size();
  EXPECT_EQ(h.data_size, total);
  EXPECT_EQ(file->file_size(), 8 + h.raw.size() + total);
  ASSERT_EQ(h.tensors.size(), tensors.size());
  for (size_t i = 1; i < h.tensors.size(); ++i) {
    EXPECT_LE(h.tensors[i - 1].end, h.tensors[i].begin) << "sorted by offset";
  }
  for (const TensorToWrite& t : tensors) {
    const TensorInfo* info = h.Find(t.name);
    ASSERT_NE(info, nullptr) << t.name;
    EXPECT_EQ(info->dtype, t.dtype) << t.name;
    EXPECT_EQ(info->shape, t.shape) << t.name;
    std::span<const uint8_t> got = file->TensorBytes(*info);
    EXPECT_TRUE(std::equal(got.begin(), got.end(), t.data.begin(), t.data.end())) << t.name;
  }
  EXPECT_EQ(file->path(), path);
}

TEST(SafetensorsTest, WriteReplacesAnExistingFileAndLeavesNothingOnFailure) {
  TempDir dir;
  const std::string path = dir.path() + "/x.safetensors";
  const uint8_t one[4] = {1, 2, 3, 4};
  ASSERT_TRUE(WriteSafetensors(path, {{"a", DType::kU8, {4}, one}}, {}).ok());
  ASSERT_TRUE(WriteSafetensors(path, {{"b", DType::kU16, {2}, one}}, {}).ok());
  StatusOr<SafetensorsFile> file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok());
  EXPECT_NE(file->header().Find("b"), nullptr);
  EXPECT_EQ(file->header().Find("a"), nullptr);

  Status bad = WriteSafetensors(dir.path() + "/no/such/dir/y.safetensors",
                                {{"a", DType::kU8, {4}, one}}, {});
  EXPECT_EQ(bad.code(), StatusCode::kIoError) << bad.ToString();
  Status mismatch =
      WriteSafetensors(dir.path() + "/z.safetensors", {{"a", DType::kU8, {5}, one}}, {});
  EXPECT_EQ(mismatch.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(dir.Entries(), std::vector<std::string>{"x.safetensors"});
}

TEST(SafetensorsTest, BuildRejectsBadTensors) {
  const uint8_t four[4] = {};
  auto build = [](const std::vector<TensorToWrite>& t) { return BuildSafetensorsHeader(t, {}); };
  StatusOr<std::string> r = build({{"w", DType::kBF16, {3}, four}});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("tensor 'w': dtype BF16 x shape [3] = 6 bytes but data "
                                      "holds 4"),
            std::string::npos)
      << r.status().message();
  r = build({{"w", DType::kU8, {4}, four}, {"w", DType::kU8, {4}, four}});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("name repeats"), std::string::npos);
  r = build({{"__metadata__", DType::kU8, {4}, four}});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("reserved"), std::string::npos);
  r = build({{"bad\xff", DType::kU8, {4}, four}});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("UTF-8"), std::string::npos);
  r = build({{"huge", DType::kF32, {uint64_t{1} << 62}, four}});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("overflows"), std::string::npos);
}

TEST(SafetensorsTest, OpenReportsIoErrorsAndPrefixesThePath) {
  TempDir dir;
  StatusOr<SafetensorsFile> missing = SafetensorsFile::Open(dir.path() + "/absent");
  EXPECT_EQ(missing.status().code(), StatusCode::kIoError);
  const std::string path = dir.path() + "/bad.safetensors";
  ASSERT_TRUE(WriteFileAtomic(path, std::string_view("\x02\0\0\0\0\0\0\0[]", 10)).ok());
  StatusOr<SafetensorsFile> bad = SafetensorsFile::Open(path);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find(path), std::string::npos) << bad.status().message();
  EXPECT_NE(bad.status().message().find("must be an object"), std::string::npos);
}

// Valid edge cases ---------------------------------------------------------------------------

TEST(SafetensorsParseTest, AcceptsAnEmptyHeaderWithNoData) {
  StatusOr<SafetensorsHeader> h = Parse("{}", "");
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_TRUE(h->tensors.empty());
  EXPECT_EQ(h->data_size, 0u);
}

TEST(SafetensorsParseTest, AcceptsZeroSizeTensorsAtTheSameOffsetAndAtTheEnd) {
  StatusOr<SafetensorsHeader> h =
      Parse(R"({"z1":{"dtype":"F32","shape":[0],"data_offsets":[4,4]},)"
            R"("a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
            R"("z2":{"dtype":"BF16","shape":[2,0],"data_offsets":[4,4]},)"
            R"("b":{"dtype":"U8","shape":[2],"data_offsets":[4,6]},)"
            R"("z3":{"dtype":"I8","shape":[0],"data_offsets":[6,6]}})",
            "abcdef");
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  ASSERT_EQ(h->tensors.size(), 5u);
  EXPECT_EQ(h->tensors[0].name, "a");
  EXPECT_EQ(h->tensors[1].name, "z1");
  EXPECT_EQ(h->tensors[2].name, "z2");
  EXPECT_EQ(h->tensors[3].name, "b");
  EXPECT_EQ(h->tensors[4].name, "z3");
}

TEST(SafetensorsParseTest, AcceptsPaddingNullMetadataAndUnknownFields) {
  StatusOr<SafetensorsHeader> h = Parse(
      R"({"__metadata__":null,"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"x":[1]}}   )",
      "z");
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_TRUE(h->metadata.empty());
  EXPECT_EQ(h->raw.back(), ' ');
}

TEST(SafetensorsParseTest, ScalarShapeHasOneElement) {
  ASSERT_TRUE(Parse(R"({"s":{"dtype":"F64","shape":[],"data_offsets":[0,8]}})", "12345678").ok());
  ExpectInvalid(Parse(R"({"s":{"dtype":"F64","shape":[],"data_offsets":[0,0]}})", ""),
                "tensor 's': dtype F64 x shape [] = 8 bytes but data_offsets span 0");
}

TEST(SafetensorsParseTest, AcceptsEveryDType) {
  for (const char* name : {"BOOL", "U8", "I8", "F8_E4M3", "F8_E5M2", "F8_E8M0", "I16", "U16", "F16",
                           "BF16", "I32", "U32", "F32", "I64", "U64", "F64"}) {
    std::optional<DType> d = ParseDType(name);
    ASSERT_TRUE(d.has_value()) << name;
    EXPECT_EQ(DTypeName(*d), name);
    const uint32_t size = DTypeSize(*d);
    const std::string header = std::string(R"({"t":{"dtype":")") + name +
                               R"(","shape":[3],"data_offsets":[0,)" + std::to_string(3 * size) +
                               "]}}";
    EXPECT_TRUE(Parse(header, std::string(3 * size, 'x')).ok()) << name;
  }
  EXPECT_FALSE(ParseDType("bf16").has_value());
  EXPECT_FALSE(ParseDType("F4").has_value());
}

// Malformed input: one test per rule ---------------------------------------------------------

TEST(SafetensorsParseTest, RejectsFilesShorterThanTheLengthField) {
  const std::string image("\x02\0\0\0", 4);
  ExpectInvalid(ParseSafetensorsHeader(Bytes(image), 4), "too short for the 8-byte header length");
  ExpectInvalid(ParseSafetensorsHeader({}, 0), "file is 0 bytes");
}

TEST(SafetensorsParseTest, RejectsHeaderLargerThanTheCap) {
  const std::string image =
      FileImage(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})", "x");
  ExpectInvalid(ParseSafetensorsHeader(Bytes(image), image.size(), 16),
                "exceeds the limit of 16 bytes");
  std::string huge(8, '\0');
  huge[7] = 0x7F;  // N ~ 2^62
  ExpectInvalid(ParseSafetensorsHeader(Bytes(huge), huge.size()), "exceeds the limit of");
}

TEST(SafetensorsParseTest, RejectsHeaderLargerThanTheFile) {
  std::string image = FileImage(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})", "x");
  image.resize(30);  // truncated inside the header
  ExpectInvalid(ParseSafetensorsHeader(Bytes(image), image.size()),
                "header length 53 is larger than the 22 bytes that follow it");
}

TEST(SafetensorsParseTest, RejectsTruncatedDataSection) {
  std::string image = FileImage(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}})", "xyzw");
  image.pop_back();
  ExpectInvalid(ParseSafetensorsHeader(Bytes(image), image.size()),
                "tensor 'a': data_offsets [0, 4] end beyond the data section of 3 bytes");
}

TEST(SafetensorsParseTest, RejectsAPrefixThatStopsInsideTheHeader) {
  const std::string image = FileImage(R"({})", "");
  ExpectInvalid(ParseSafetensorsHeader(Bytes(image).first(9), image.size()),
                "prefix holds 9 bytes but the header ends at byte 10");
  ExpectInvalid(ParseSafetensorsHeader(Bytes(image).first(5), image.size()), "prefix holds 5");
  ExpectInvalid(ParseSafetensorsHeader(Bytes(image), 9), "longer than the file size 9");
}

TEST(SafetensorsParseTest, RejectsInvalidJson) {
  ExpectInvalid(Parse(R"({"a":)", ""), "not valid JSON");
  ExpectInvalid(Parse(R"({} x)", ""), "not valid JSON");
  ExpectInvalid(Parse("", ""), "not valid JSON");
  ExpectInvalid(Parse("{\"a\xff\":1}", ""), "not valid JSON");  // invalid UTF-8
  // nlohmann stops at a NUL byte; anything after one must not be ignored.
  ExpectInvalid(Parse(std::string_view("{}\0", 3), ""), "NUL byte at header offset 2");
  ExpectInvalid(Parse(std::string_view("{}\0\"x\":1}", 10), ""), "NUL byte at header offset 2");
  ExpectInvalid(Parse(std::string_view("{\"a\0\":1}", 8), ""), "NUL byte at header offset 3");
}

TEST(SafetensorsBuild, RefusesADataSectionOver64Bits) {
  const std::vector<TensorDecl> big = {{"a", DType::kU8, {UINT64_MAX}}, {"b", DType::kU8, {2}}};
  auto h = BuildSafetensorsLayoutHeader(big, {});
  ASSERT_FALSE(h.ok());
  EXPECT_EQ(h.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(h.status().message().find("overflows 64 bits"), std::string::npos)
      << h.status().ToString();
  EXPECT_TRUE(BuildSafetensorsLayoutHeader({{"a", DType::kU8, {UINT64_MAX}}}, {}).ok());
}

// As the reference reader: no byte-order mark before the JSON (the JSON parser would skip one).
TEST(SafetensorsParseTest, RejectsAByteOrderMark) {
  ExpectInvalid(Parse("\xef\xbb\xbf{}", ""), "header starts with a byte-order mark");
  // Whitespace around the object is JSON's (the reference reads it too).
  EXPECT_TRUE(Parse(" {}", "").ok());
  EXPECT_TRUE(Parse("\n\t{}", "").ok());
  EXPECT_TRUE(Parse("{}   ", "").ok());
}

TEST(SafetensorsParseTest, RejectsJsonThatIsNotAnObject) {
  ExpectInvalid(Parse("[]", ""), "header JSON must be an object, got [] (array)");
  ExpectInvalid(Parse(R"("x")", ""), "must be an object");
  ExpectInvalid(Parse("7", ""), "must be an object");
}

TEST(SafetensorsParseTest, RejectsEntryThatIsNotAnObject) {
  ExpectInvalid(Parse(R"({"w":[1,2]})", ""), "tensor 'w': entry must be an object");
}

TEST(SafetensorsParseTest, RejectsMissingFields) {
  ExpectInvalid(Parse(R"({"w":{"shape":[1],"data_offsets":[0,1]}})", "x"),
                "tensor 'w': missing field 'dtype'");
  ExpectInvalid(Parse(R"({"w":{"dtype":"U8","data_offsets":[0,1]}})", "x"),
                "tensor 'w': missing field 'shape'");
  ExpectInvalid(Parse(R"({"w":{"dtype":"U8","shape":[1]}})", "x"),
                "tensor 'w': missing field 'data_offsets'");
}

TEST(SafetensorsParseTest, RejectsUnknownDType) {
  ExpectInvalid(Parse(R"({"w":{"dtype":"F4","shape":[2],"data_offsets":[0,1]}})", "x"),
                "tensor 'w': unknown dtype 'F4'");
  ExpectInvalid(Parse(R"({"w":{"dtype":7,"shape":[1],"data_offsets":[0,1]}})", "x"),
                "tensor 'w': dtype must be a string, got 7 (number)");
}

TEST(SafetensorsParseTest, RejectsBadShapes) {
  ExpectInvalid(Parse(R"({"w":{"dtype":"U8","shape":3,"data_offsets":[0,3]}})", "xyz"),
                "tensor 'w': shape must be an array");
  ExpectInvalid(Parse(R"({"w":{"dtype":"U8","shape":[3,-1],"data_offsets":[0,3]}})", "xyz"),
                "tensor 'w': shape[1] = -1 (number) is not a non-negative integer");
  ExpectInvalid(Parse(R"({"w":{"dtype":"U8","shape":[3.0],"data_offsets":[0,3]}})", "xyz"),
                "tensor 'w': shape[0] = 3.0 (number) is not a non-negative integer");
  ExpectInvalid(Parse(R"({"w":{"dtype":"U8","shape":["3"],"data_offsets":[0,3]}})", "xyz"),
                "shape[0] = \"3\" (string) is not a non-negative integer");
  ExpectInvalid(
      Parse(R"({"w":{"dtype":"U8","shape":[18446744073709551616],"data_offsets":[0,3]}})", "xyz"),
      "tensor 'w': shape[0] = ");
}

TEST(SafetensorsParseTest, RejectsElementCountOverflow) {
  ExpectInvalid(
      Parse(R"({"w":{"dtype":"U8","shape":[4294967296,4294967296],"data_offsets":[0,0]}})", ""),
      "tensor 'w': dtype U8 x shape [4294967296,4294967296] overflows 64 bits");
  // The element count fits but the byte count does not.
  ExpectInvalid(
      Parse(R"({"w":{"dtype":"F64","shape":[4611686018427387904],"data_offsets":[0,0]}})", ""),
      "tensor 'w': dtype F64 x shape [4611686018427387904] overflows 64 bits");
}

TEST(SafetensorsParseTest, RejectsByteCountMismatch) {
  ExpectInvalid(
      Parse(R"({"w":{"dtype":"BF16","shape":[3,4],"data_offsets":[0,20]}})", std::string(20, 'x')),
      "tensor 'w': dtype BF16 x shape [3,4] = 24 bytes but data_offsets span 20");
}

TEST(SafetensorsParseTest, RejectsBadDataOffsets) {
  ExpectInvalid(Parse(R"({"w":{"dtype":"U8","shape":[0],"data_offsets":[4,2]}})", "xxxx"),
                "tensor 'w': data_offsets [4, 2] begin > end");
  ExpectInvalid(Parse(R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[0]}})", "x"),
                "tensor 'w': data_offsets must be an array [begin, end], got [0] (array)");
  ExpectInvalid(Parse(R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1,2]}})", "x"),
                "data_offsets must be an array [begin, end]");
  ExpectInvalid(Parse(R"({"w":{"dtype":"U8","shape":[1],"data_offsets":{"a":1}}})", "x"),
                "data_offsets must be an array [begin, end]");
  ExpectInvalid(Parse(R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[-1,0]}})", "x"),
                "tensor 'w': data_offsets[0] = -1 (number) is not a non-negative integer");
}

TEST(SafetensorsParseTest, RejectsEndBeyondTheDataSection) {
  ExpectInvalid(Parse(R"({"w":{"dtype":"U8","shape":[8],"data_offsets":[2,10]}})", "xxxxxxxx"),
                "tensor 'w': data_offsets [2, 10] end beyond the data section of 8 bytes");
  ExpectInvalid(Parse(R"({"w":{"dtype":"U8","shape":[1],)"
                      R"("data_offsets":[18446744073709551615,18446744073709551616]}})",
                      "x"),
                "tensor 'w': data_offsets[1]");
}

TEST(SafetensorsParseTest, RejectsOverlappingTensors) {
  ExpectInvalid(Parse(R"({"a":{"dtype":"U8","shape":[6],"data_offsets":[0,6]},)"
                      R"("b":{"dtype":"U8","shape":[4],"data_offsets":[4,8]}})",
                      "xxxxxxxx"),
                "tensor 'b': data_offsets [4, 8] overlap tensor 'a' at [0, 6]");
  // A zero-size tensor strictly inside another one overlaps it too.
  ExpectInvalid(Parse(R"({"a":{"dtype":"U8","shape":[6],"data_offsets":[0,6]},)"
                      R"("z":{"dtype":"U8","shape":[0],"data_offsets":[3,3]}})",
                      "xxxxxx"),
                "tensor 'z': data_offsets [3, 3] overlap tensor 'a'");
  // Two tensors on the same bytes.
  ExpectInvalid(Parse(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
                      R"("b":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}})",
                      "xxxx"),
                "overlap");
}

TEST(SafetensorsParseTest, RejectsGaps) {
  ExpectInvalid(Parse(R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},)"
                      R"("b":{"dtype":"U8","shape":[2],"data_offsets":[4,6]}})",
                      "xxxxxx"),
                "data section bytes [2, 4) before tensor 'b' are not covered by any tensor");
  ExpectInvalid(Parse(R"({"b":{"dtype":"U8","shape":[2],"data_offsets":[1,3]}})", "xxx"),
                "data section bytes [0, 1) before tensor 'b'");
  ExpectInvalid(Parse(R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}})", "xxxxx"),
                "data section is 5 bytes but tensors cover only 2");
  ExpectInvalid(Parse("{}", "x"), "data section is 1 bytes but tensors cover only 0");
}

TEST(SafetensorsParseTest, RejectsBadMetadata) {
  ExpectInvalid(Parse(R"({"__metadata__":{"format":"pt","n":3}})", ""),
                "'__metadata__' key 'n': value must be a string, got 3 (number)");
  ExpectInvalid(Parse(R"({"__metadata__":{"x":null}})", ""), "key 'x': value must be a string");
  ExpectInvalid(Parse(R"({"__metadata__":["pt"]})", ""),
                "'__metadata__' must be an object of strings");
}

TEST(SafetensorsParseTest, RejectsDuplicateKeys) {
  ExpectInvalid(Parse(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
                      R"("a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})",
                      "xx"),
                "duplicate tensor name 'a'");
  ExpectInvalid(Parse(R"({"a":{"dtype":"U8","dtype":"I8","shape":[1],"data_offsets":[0,1]}})", "x"),
                "duplicate key 'dtype' inside 'a'");
  ExpectInvalid(Parse(R"({"__metadata__":{"k":"1","k":"2"}})", ""),
                "duplicate key 'k' inside '__metadata__'");
  // The same key in different objects is fine.
  EXPECT_TRUE(Parse(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
                    R"("b":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})",
                    "xx")
                  .ok());
}

TEST(SafetensorsParseTest, RejectsDeepNesting) {
  ExpectInvalid(Parse(std::string(100000, '[') + std::string(100000, ']'), ""),
                "nested more than 8 levels deep");
  ExpectInvalid(Parse(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1],)"
                      R"("x":[[[[[[[[1]]]]]]]]}})",
                      "x"),
                "nested more than");
}

// A header's parse time grows as n log n in its tensor count: 50,000 tensors took about 90 s
// when the parser scanned the whole header object at the end of each tensor entry, and take
// well under a second now. The bound leaves a wide margin for slow or loaded machines.
TEST(SafetensorsParseTest, ParsesFiftyThousandTensorsQuickly) {
  constexpr size_t kTensors = 50'000;
  std::string header = "{";
  for (size_t i = 0; i < kTensors; ++i) {
    if (i > 0) header += ",";
    header += "\"t" + std::to_string(i) + R"(":{"dtype":"U8","shape":[1],"data_offsets":[)" +
              std::to_string(i) + "," + std::to_string(i + 1) + "]}";
  }
  header += "}";
  const auto start = std::chrono::steady_clock::now();
  StatusOr<SafetensorsHeader> h = Parse(header, std::string(kTensors, 'x'));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  ASSERT_EQ(h->tensors.size(), kTensors);
  EXPECT_EQ(h->tensors.back().end, kTensors);
  EXPECT_LT(seconds, 10.0);
}

}  // namespace
}  // namespace deltakv::deltasync
