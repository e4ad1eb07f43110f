// Golden frames written by the zstd CLI, python-zstandard and by hand
// (data/zstd/make_golden.py): good ones must match libzstd + a nonzero scan, bad ones must fail
// with the listed status code.
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <string>

#include "walker_test_util.h"

#ifndef DELTAKV_WALKER_TESTDATA
#error "DELTAKV_WALKER_TESTDATA must name tests/deltasync/data/zstd"
#endif

namespace deltakv::deltasync {
namespace {

std::vector<uint8_t> ReadGolden(const std::string& name) {
  std::ifstream f(std::string(DELTAKV_WALKER_TESTDATA) + "/" + name, std::ios::binary);
  EXPECT_TRUE(f.good()) << name;
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

class WalkerGoldenGood : public ::testing::TestWithParam<const char*> {};

TEST_P(WalkerGoldenGood, MatchesLibzstd) {
  const auto frame = ReadGolden(GetParam());
  ASSERT_FALSE(frame.empty());
  auto oracle = walker_test::LibzstdOneShot(frame, 4 << 20);
  ASSERT_TRUE(oracle.ok) << oracle.error;
  auto walked = walker_test::Walk(frame);
  ASSERT_TRUE(walked.status.ok()) << walked.status.ToString();
  EXPECT_EQ(walked.stats.decoded_length, oracle.data.size());
  EXPECT_TRUE(walked.nonzeros == walker_test::ScanNonzeros(oracle.data));
}

INSTANTIATE_TEST_SUITE_P(
    Golden, WalkerGoldenGood,
    ::testing::Values("good_cli_l3.zst", "good_cli_l19.zst", "good_cli_long_l9.zst",
                      "good_cli_stdin_nosize.zst", "good_cli_no_check.zst", "good_cli_multi.zst",
                      "good_cli_zeros.zst", "good_py_lm5.zst", "good_py_l1_nosize.zst",
                      "good_py_flushed_blocks.zst", "good_py_dense_raw.zst", "good_empty_frame.zst",
                      "good_skippable_only.zst", "good_rle_blocks.zst", "good_overlap_match.zst"));

TEST(WalkerGolden, OverlappingMatchRepeatsPattern) {
  auto walked = walker_test::Walk(ReadGolden("good_overlap_match.zst"));
  ASSERT_TRUE(walked.status.ok()) << walked.status.ToString();
  const walker_test::Nonzeros expected = {{0, 'a'}, {1, 'b'}, {2, 'a'}, {3, 'b'},
                                          {4, 'a'}, {5, 'b'}, {6, 'a'}};
  EXPECT_EQ(walked.nonzeros, expected);
}

TEST(WalkerGolden, RleBlocks) {
  auto walked = walker_test::Walk(ReadGolden("good_rle_blocks.zst"));
  ASSERT_TRUE(walked.status.ok()) << walked.status.ToString();
  EXPECT_EQ(walked.stats.decoded_length, 200000u);
  EXPECT_EQ(walked.stats.nonzero_bytes, 1000u);
  EXPECT_EQ(walked.stats.runs, 1u);
  EXPECT_EQ(walked.nonzeros.front().first, 100000u);
}

TEST(WalkerGolden, ZeroSequencesInTwoBytesIsValid) {
  // RFC 8878 allows it; libzstd 1.5.4 rejects it, so the walker flags it for differential use.
  auto walked = walker_test::Walk(ReadGolden("good_zero_seq_2byte.zst"));
  ASSERT_TRUE(walked.status.ok()) << walked.status.ToString();
  EXPECT_EQ(walked.stats.decoded_length, 3u);
  EXPECT_TRUE(walked.stats.compat_flags & kCompatZeroSequencesLongForm);
}

struct BadCase {
  const char* file;
  StatusCode code;
  const char* message_part;
};

class WalkerGoldenBad : public ::testing::TestWithParam<BadCase> {};

TEST_P(WalkerGoldenBad, FailsWithCode) {
  const BadCase c = GetParam();
  const auto frame = ReadGolden(c.file);
  auto walked = walker_test::Walk(frame);
  ASSERT_FALSE(walked.status.ok()) << c.file;
  EXPECT_EQ(walked.status.code(), c.code) << walked.status.ToString();
  EXPECT_NE(walked.status.message().find(c.message_part), std::string::npos)
      << walked.status.ToString();
}

INSTANTIATE_TEST_SUITE_P(
    Golden, WalkerGoldenBad,
    ::testing::Values(
        BadCase{"bad_truncated.zst", StatusCode::kDataLoss, "truncated"},
        BadCase{"bad_checksum.zst", StatusCode::kDataLoss, "checksum mismatch"},
        BadCase{"bad_reserved_block.zst", StatusCode::kDataLoss, "reserved block type"},
        BadCase{"bad_dictionary.zst", StatusCode::kUnimplemented, "dictionar"},
        BadCase{"bad_window_too_large.zst", StatusCode::kResourceExhausted, "window"},
        BadCase{"bad_content_size.zst", StatusCode::kDataLoss, "Frame_Content_Size"},
        BadCase{"bad_trailing_garbage.zst", StatusCode::kDataLoss, "truncated"},
        BadCase{"bad_unknown_magic.zst", StatusCode::kDataLoss, "magic"},
        BadCase{"bad_offset_before_start.zst", StatusCode::kDataLoss, "before the frame start"},
        BadCase{"bad_offset_zero_rep.zst", StatusCode::kDataLoss, "offset 0"},
        BadCase{"bad_zero_seq_extra.zst", StatusCode::kDataLoss, "zero sequence count"},
        BadCase{"bad_treeless_first.zst", StatusCode::kDataLoss, "treeless"}));

TEST(WalkerGolden, LibzstdAlsoRejectsBadFramesExceptDocumentedOnes) {
  // libzstd 1.5.4 quietly turns offset 0 into 1; every other bad frame fails there too.
  for (const char* name :
       {"bad_truncated.zst", "bad_checksum.zst", "bad_reserved_block.zst", "bad_dictionary.zst",
        "bad_window_too_large.zst", "bad_content_size.zst", "bad_trailing_garbage.zst",
        "bad_unknown_magic.zst", "bad_offset_before_start.zst", "bad_zero_seq_extra.zst",
        "bad_treeless_first.zst"}) {
    EXPECT_FALSE(walker_test::LibzstdOneShot(ReadGolden(name), 1 << 20).ok) << name;
  }
}

// Found by walker_differential_fuzz: 4-stream literals whose stream 2 has bits left over.
// libzstd 1.5.4's fast Huffman loop only counts symbols and accepts it; the walker refuses it
// and says that libzstd tolerates it.
TEST(WalkerGolden, RegressHuffman4Unconsumed) {
  const auto frame = ReadGolden("regress_huffman4_unconsumed.zst");
  auto walked = walker_test::Walk(frame);
  EXPECT_EQ(walked.status.code(), StatusCode::kDataLoss);
  EXPECT_NE(walked.status.message().find("not fully consumed (libzstd tolerates)"),
            std::string::npos)
      << walked.status.ToString();
  EXPECT_EQ(walker_test::CompareWithLibzstd(frame, 1 << 20), "");
}

// Found by walker_differential_fuzz: a frame that declares a 1.75 GiB window and 7 bytes of
// content. libzstd decodes it (its one-shot API has no window limit); the walker applies the
// caller's window limit to the declared window and refuses it, which the differential
// comparison counts as a limit, not a disagreement.
TEST(WalkerGolden, RegressHugeWindowSmallContentHitsTheLimit) {
  const auto frame = ReadGolden("regress_huge_window_small_content.zst");
  ASSERT_TRUE(walker_test::LibzstdOneShot(frame, 1 << 20).ok);
  auto walked = walker_test::Walk(frame);
  EXPECT_EQ(walked.status.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(walked.status.message().find("window of 1879048192 bytes above the limit 2^27"),
            std::string::npos)
      << walked.status.ToString();
  EXPECT_EQ(walker_test::CompareWithLibzstd(frame, 1 << 20), "");
  WalkerOptions wide;
  wide.limits.max_window_log = 31;
  auto allowed = walker_test::Walk(frame, wide);
  ASSERT_TRUE(allowed.status.ok()) << allowed.status.ToString();
  EXPECT_EQ(allowed.stats.decoded_length, 7u);
}

// Found by walker_differential_fuzz: a block whose sequence bitstream has one bit left after
// its last sequence. libzstd 1.5.4's prefetching sequence decoder (chosen for long offsets)
// does not check the end and accepts it; the walker refuses it and says libzstd tolerates it.
TEST(WalkerGolden, RegressSequencesUnconsumed) {
  const auto frame = ReadGolden("regress_sequences_unconsumed.zst");
  auto walked = walker_test::Walk(frame);
  EXPECT_EQ(walked.status.code(), StatusCode::kDataLoss);
  EXPECT_NE(walked.status.message().find("sequence bitstream not fully consumed (libzstd "
                                         "tolerates)"),
            std::string::npos)
      << walked.status.ToString();
  EXPECT_EQ(walker_test::CompareWithLibzstd(frame, 1 << 20), "");
}

// Found by walker_differential_fuzz: a 4-stream literal section whose stream 1 lacks its end
// marker (last byte 0). libzstd 1.5.4's fast Huffman loop does not check the marker.
TEST(WalkerGolden, RegressHuffman4NoEndMarker) {
  const auto frame = ReadGolden("regress_huffman4_no_end_marker.zst");
  auto walked = walker_test::Walk(frame);
  EXPECT_EQ(walked.status.code(), StatusCode::kDataLoss);
  EXPECT_NE(walked.status.message().find("without end marker (libzstd tolerates)"),
            std::string::npos)
      << walked.status.ToString();
  EXPECT_EQ(walker_test::CompareWithLibzstd(frame, 1 << 20), "");
}

TEST(WalkerGolden, ErrorsCarryInputOffset) {
  auto walked = walker_test::Walk(ReadGolden("bad_reserved_block.zst"));
  EXPECT_NE(walked.status.message().find("input offset 6"), std::string::npos)
      << walked.status.ToString();
}

}  // namespace
}  // namespace deltakv::deltasync
