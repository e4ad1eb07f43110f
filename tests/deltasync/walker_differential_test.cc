// Differential tests of the sparse zstd walker against libzstd + a nonzero scan, over sparse
// data of many shapes, densities and sizes, compressed at many settings.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <tuple>

#include "walker_test_util.h"

namespace deltakv::deltasync {
namespace {

using walker_test::CompressOptions;

enum class Shape { kScattered, kClustered, kBf16, kZeros, kDense };

std::vector<uint8_t> MakeData(Shape shape, size_t size, double density, uint64_t seed) {
  switch (shape) {
    case Shape::kScattered:
      return walker_test::ScatteredSparse(size, density, seed);
    case Shape::kClustered:
      return walker_test::ClusteredSparse(size, density, seed);
    case Shape::kBf16:
      return walker_test::Bf16XorLike(size, density, seed);
    case Shape::kZeros:
      return std::vector<uint8_t>(size, 0);
    case Shape::kDense:
      return walker_test::DenseRandom(size, seed);
  }
  return {};
}

void ExpectMatchesLibzstd(std::span<const uint8_t> frame, std::span<const uint8_t> original,
                          const WalkerOptions& options = {}) {
  auto oracle = walker_test::LibzstdOneShot(frame, original.size() + 64);
  ASSERT_TRUE(oracle.ok) << oracle.error;
  ASSERT_EQ(oracle.data.size(), original.size());
  auto walked = walker_test::Walk(frame, options);
  ASSERT_TRUE(walked.status.ok()) << walked.status.ToString();
  EXPECT_EQ(walked.stats.decoded_length, original.size());
  const auto expected = walker_test::ScanNonzeros(original);
  EXPECT_EQ(walked.stats.nonzero_bytes, expected.size());
  ASSERT_EQ(walked.nonzeros.size(), expected.size());
  EXPECT_TRUE(walked.nonzeros == expected) << "nonzero bytes differ";
}

// (shape, density, size, level)
using Param = std::tuple<Shape, double, size_t, int>;

class WalkerDifferentialTest : public ::testing::TestWithParam<Param> {};

TEST_P(WalkerDifferentialTest, MatchesLibzstdAtDefaults) {
  const auto [shape, density, size, level] = GetParam();
  const auto data = MakeData(shape, size, density, size * 31 + static_cast<uint64_t>(level));
  CompressOptions o;
  o.level = level;
  const auto frame = walker_test::Compress(data, o);
  ASSERT_FALSE(frame.empty());
  ExpectMatchesLibzstd(frame, data);
}

TEST_P(WalkerDifferentialTest, MatchesLibzstdWithChecksumNoContentSize) {
  const auto [shape, density, size, level] = GetParam();
  const auto data = MakeData(shape, size, density, size * 17 + static_cast<uint64_t>(level));
  CompressOptions o;
  o.level = level;
  o.checksum = true;
  o.content_size = false;
  const auto frame = walker_test::Compress(data, o);
  ASSERT_FALSE(frame.empty());
  EXPECT_EQ(ZSTD_getFrameContentSize(frame.data(), frame.size()), ZSTD_CONTENTSIZE_UNKNOWN);
  ExpectMatchesLibzstd(frame, data);
  auto walked = walker_test::Walk(frame);
  EXPECT_EQ(walked.stats.checksums_verified, 1u);
}

std::string ParamName(const ::testing::TestParamInfo<Param>& info) {
  const auto [shape, density, size, level] = info.param;
  static const char* kShapes[] = {"Scattered", "Clustered", "Bf16", "Zeros", "Dense"};
  std::string name = kShapes[static_cast<int>(shape)];
  name += "_d" + std::to_string(static_cast<int>(density * 100000));
  name += "_n" + std::to_string(size);
  name += level < 0 ? "_Lm" + std::to_string(-level) : "_L" + std::to_string(level);
  return name;
}

INSTANTIATE_TEST_SUITE_P(
    Sparse, WalkerDifferentialTest,
    ::testing::Combine(::testing::Values(Shape::kScattered, Shape::kClustered, Shape::kBf16),
                       ::testing::Values(0.0001, 0.001, 0.01, 0.1),
                       ::testing::Values(size_t{1000}, size_t{300000}, size_t{1} << 20),
                       ::testing::Values(-5, 1, 3, 9, 19)),
    ParamName);

INSTANTIATE_TEST_SUITE_P(Edge, WalkerDifferentialTest,
                         ::testing::Combine(::testing::Values(Shape::kZeros, Shape::kDense),
                                            ::testing::Values(0.0),
                                            ::testing::Values(size_t{0}, size_t{1}, size_t{7},
                                                              size_t{131072}, size_t{131075},
                                                              size_t{700000}),
                                            ::testing::Values(-5, 1, 3, 19)),
                         ParamName);

TEST(WalkerDifferential, ManySizes) {
  for (size_t size = 0; size < 3000; size += 37) {
    const auto data = walker_test::ScatteredSparse(size, 0.05, size);
    for (int level : {1, 9}) {
      CompressOptions o;
      o.level = level;
      o.checksum = (size % 2) == 0;
      ExpectMatchesLibzstd(walker_test::Compress(data, o), data);
    }
  }
}

TEST(WalkerDifferential, LongDistanceMatching) {
  // A 1 MiB pattern repeated 4 times: only long-distance matching finds the repeats.
  const auto unit = walker_test::ScatteredSparse(1 << 20, 0.01, 7);
  std::vector<uint8_t> data;
  for (int i = 0; i < 4; ++i) data.insert(data.end(), unit.begin(), unit.end());
  for (int level : {3, 19}) {
    CompressOptions o;
    o.level = level;
    o.long_distance = true;
    o.window_log = 24;
    o.checksum = true;
    ExpectMatchesLibzstd(walker_test::Compress(data, o), data);
  }
}

TEST(WalkerDifferential, SmallTargetBlocks) {
  const auto data = walker_test::Bf16XorLike(500000, 0.05, 3);
  for (size_t target : {size_t{1340}, size_t{4096}}) {
    for (int level : {1, 3, 19}) {
      CompressOptions o;
      o.level = level;
      o.target_cblock_size = target;
      o.checksum = true;
      ExpectMatchesLibzstd(walker_test::Compress(data, o), data);
    }
  }
}

TEST(WalkerDifferential, SmallWindows) {
  const auto data = walker_test::ScatteredSparse(600000, 0.01, 11);
  for (int wlog : {10, 12, 17}) {
    CompressOptions o;
    o.level = 19;
    o.window_log = wlog;
    o.content_size = false;
    ExpectMatchesLibzstd(walker_test::Compress(data, o), data);
  }
}

TEST(WalkerDifferential, MultiFrameWithSkippable) {
  const auto a = walker_test::ScatteredSparse(200000, 0.01, 1);
  const auto b = walker_test::Bf16XorLike(300000, 0.02, 2);
  const auto c = walker_test::DenseRandom(1000, 3);
  CompressOptions o1, o2, o3;
  o1.level = 1;
  o2.level = 19;
  o2.checksum = true;
  o3.level = 3;
  o3.content_size = false;
  const auto fa = walker_test::Compress(a, o1);
  const auto fb = walker_test::Compress(b, o2);
  const auto fc = walker_test::Compress(c, o3);
  const uint8_t skippable[] = {0x5A, 0x2A, 0x4D, 0x18, 3, 0, 0, 0, 1, 2, 3};
  const uint8_t empty_skippable[] = {0x50, 0x2A, 0x4D, 0x18, 0, 0, 0, 0};
  const auto frames = walker_test::Concat({fa, skippable, fb, empty_skippable, fc});
  const auto data = walker_test::Concat({a, b, c});
  ExpectMatchesLibzstd(frames, data);
  auto walked = walker_test::Walk(frames);
  EXPECT_EQ(walked.stats.frames, 3u);
  EXPECT_EQ(walked.stats.skippable_frames, 2u);
  EXPECT_EQ(walked.stats.checksums_verified, 1u);
}

TEST(WalkerDifferential, RawAndRleBlocks) {
  // Dense random data gives raw blocks; a long zero run after the first block gives RLE blocks.
  auto data = walker_test::DenseRandom(300000, 8);
  data.resize(data.size() + 500000, 0);
  const auto tail = walker_test::ScatteredSparse(100000, 0.01, 9);
  data.insert(data.end(), tail.begin(), tail.end());
  for (int level : {1, 19}) {
    walker_test::CompressOptions o;
    o.level = level;
    o.checksum = true;
    const auto frame = walker_test::Compress(data, o);
    ExpectMatchesLibzstd(frame, data);
    auto walked = walker_test::Walk(frame);
    EXPECT_GT(walked.stats.raw_blocks, 0u);
    EXPECT_GT(walked.stats.rle_blocks, 0u);
    EXPECT_GT(walked.stats.blocks, walked.stats.raw_blocks + walked.stats.rle_blocks);
  }
}

TEST(WalkerDifferential, ChecksumSkippedWhenDisabled) {
  const auto data = walker_test::ScatteredSparse(100000, 0.01, 5);
  CompressOptions o;
  o.checksum = true;
  auto frame = walker_test::Compress(data, o);
  frame.back() ^= 0x55;  // corrupt the checksum
  WalkerOptions options;
  options.limits.verify_checksum = false;
  auto walked = walker_test::Walk(frame, options);
  ASSERT_TRUE(walked.status.ok()) << walked.status.ToString();
  EXPECT_EQ(walked.stats.checksums_skipped, 1u);
  EXPECT_EQ(walked.nonzeros, walker_test::ScanNonzeros(data));
  auto strict = walker_test::Walk(frame);
  EXPECT_EQ(strict.status.code(), StatusCode::kDataLoss);
  EXPECT_NE(strict.status.message().find("checksum"), std::string::npos);
}

TEST(WalkerDifferential, DecoderInterfaceMatches) {
  const auto data = walker_test::Bf16XorLike(400000, 0.01, 9);
  const auto frame = walker_test::Compress(data, {});
  auto decoder = MakeSparseWalkerDecoder();
  EXPECT_EQ(decoder->name(), "sparse-walker");
  walker_test::CollectingSink sink;
  auto result = decoder->Decode(frame, DecodeLimits{}, sink);
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  EXPECT_EQ(result->decoded_length, data.size());
  EXPECT_EQ(result->frames, 1u);
  EXPECT_EQ(sink.nonzeros(), walker_test::ScanNonzeros(data));
  EXPECT_EQ(result->nonzero_bytes, sink.nonzeros().size());
}

TEST(WalkerDifferential, MergeGapKeepsEveryNonzero) {
  const auto data = walker_test::Bf16XorLike(200000, 0.2, 4);
  const auto frame = walker_test::Compress(data, {});
  WalkerOptions options;
  options.merge_gap = 8;
  auto merged = walker_test::Walk(frame, options);
  auto plain = walker_test::Walk(frame);
  ASSERT_TRUE(merged.status.ok());
  EXPECT_EQ(merged.nonzeros, walker_test::ScanNonzeros(data));
  EXPECT_LT(merged.stats.runs, plain.stats.runs);
}

// Frames of chosen sequences: 2 to 8 literals (the walker loads them as one word) followed by a
// match whose source starts inside them (offset <= literal length, its bytes zero or not) or
// before them, with Huffman-coded and raw literals (raw ones are read in place, up to the block's
// end). The walker must give libzstd's bytes and xor_digest.
TEST(WalkerDifferential, ShortLiteralRunsWithMatchesFromInsideThem) {
  for (const bool raw_literals : {false, true}) {
    for (uint64_t seed = 1; seed <= 6; ++seed) {
      std::mt19937_64 rng(seed);
      std::vector<uint8_t> data;
      std::vector<ZSTD_Sequence> seqs;
      while (data.size() < 300'000) {
        const unsigned literals = 2 + static_cast<unsigned>(rng() % 7);
        const double zero_share = (seed % 3) * 0.4;  // 0, 0.4 or 0.8 of the literals zero
        for (unsigned i = 0; i < literals; ++i) {
          const bool zero = static_cast<double>(rng() % 1000) < zero_share * 1000;
          data.push_back(zero ? 0 : static_cast<uint8_t>(1 + rng() % 255));
        }
        // Mostly sources inside the literals (offset 1 .. literals), sometimes far ones.
        const uint64_t far = 9 + rng() % 5000;
        const uint64_t offset = rng() % 4 != 0 || far > data.size() ? 1 + rng() % literals : far;
        const unsigned match = 4 + static_cast<unsigned>(rng() % 60);
        for (unsigned i = 0; i < match; ++i) data.push_back(data[data.size() - offset]);
        seqs.push_back(ZSTD_Sequence{static_cast<unsigned>(offset), literals, match, 0});
      }
      ZSTD_CCtx* cctx = ZSTD_createCCtx();
      ZSTD_CCtx_setParameter(cctx, ZSTD_c_checksumFlag, 1);
      ZSTD_CCtx_setParameter(cctx, ZSTD_c_validateSequences, 1);
      if (raw_literals) {
        ZSTD_CCtx_setParameter(cctx, ZSTD_c_literalCompressionMode, ZSTD_ps_disable);
      }
      std::vector<uint8_t> frame(ZSTD_compressBound(data.size()));
      const size_t n = ZSTD_compressSequences(cctx, frame.data(), frame.size(), seqs.data(),
                                              seqs.size(), data.data(), data.size());
      ZSTD_freeCCtx(cctx);
      ASSERT_FALSE(ZSTD_isError(n)) << ZSTD_getErrorName(n);
      frame.resize(n);
      const auto oracle = walker_test::LibzstdOneShot(frame, data.size());
      ASSERT_TRUE(oracle.ok) << oracle.error;
      ASSERT_TRUE(oracle.data == data) << "the frame does not hold the chosen data";
      EXPECT_EQ(walker_test::CompareWithLibzstd(frame, data.size()), "")
          << "seed " << seed << (raw_literals ? " raw literals" : " Huffman literals");
    }
  }
}

}  // namespace
}  // namespace deltakv::deltasync
