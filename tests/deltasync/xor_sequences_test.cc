// The publisher's XOR-run sequence parse (deltasync/src/xor_sequences.h): every parse is a
// valid one that rebuilds its block, each run of nonzero bytes gets one sequence, and the
// frames it gives decode to the same bytes through libzstd and the sparse walker.
#include "xor_sequences.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "walker_test_util.h"

namespace deltakv::deltasync {
namespace {

using walker_test::Bf16XorLike;
using walker_test::CompareWithLibzstd;
using walker_test::LibzstdOneShot;
using walker_test::ScatteredSparse;
using walker_test::Walk;

// Checks `seqs` against the sequence producer's contract and rebuilds the block from them
// (literals from the block, matches at offset 1 copying the byte before).
void ExpectValidParse(std::span<const uint8_t> block, std::span<const ZSTD_Sequence> seqs) {
  ASSERT_FALSE(seqs.empty());
  std::vector<uint8_t> rebuilt;
  for (size_t k = 0; k < seqs.size(); ++k) {
    const ZSTD_Sequence& s = seqs[k];
    ASSERT_LE(rebuilt.size() + s.litLength, block.size()) << "sequence " << k;
    rebuilt.insert(rebuilt.end(), block.begin() + rebuilt.size(),
                   block.begin() + rebuilt.size() + s.litLength);
    if (k + 1 == seqs.size()) {
      EXPECT_EQ(s.matchLength, 0u);
      EXPECT_EQ(s.offset, 0u);
      break;
    }
    EXPECT_EQ(s.offset, 1u) << "sequence " << k;
    EXPECT_GE(s.matchLength, unsigned{ZSTD_MINMATCH_MIN}) << "sequence " << k;
    ASSERT_FALSE(rebuilt.empty()) << "a match at offset 1 needs a byte before it";
    for (unsigned i = 0; i < s.matchLength; ++i) rebuilt.push_back(rebuilt.back());
  }
  EXPECT_EQ(rebuilt, std::vector<uint8_t>(block.begin(), block.end()));
}

// Runs of nonzero bytes.
size_t RunsOf(std::span<const uint8_t> b) {
  size_t runs = 0;
  for (size_t i = 0; i < b.size(); ++i) runs += b[i] != 0 && (i == 0 || b[i - 1] == 0);
  return runs;
}

std::vector<ZSTD_Sequence> Parse(std::span<const uint8_t> block) {
  std::vector<ZSTD_Sequence> seqs(ZSTD_sequenceBound(block.size()));
  const size_t n = ParseXorRuns(block, seqs.data(), seqs.size());
  EXPECT_LE(n, seqs.size()) << "error";
  seqs.resize(std::min(n, seqs.size()));
  return seqs;
}

TEST(XorRuns, EveryShapeParsesValidly) {
  std::vector<std::vector<uint8_t>> blocks = {
      {0},
      {7},
      {0, 0, 0, 0},
      {0, 0, 0, 0, 0},
      {5, 0, 0, 0, 0, 9},
      {5, 0, 0, 0, 9},
      std::vector<uint8_t>(ZSTD_BLOCKSIZE_MAX, 0),
      std::vector<uint8_t>(ZSTD_BLOCKSIZE_MAX, 0xAB),
  };
  std::vector<uint8_t> alternating(1000);
  for (size_t i = 0; i < alternating.size(); ++i) alternating[i] = i % 2 ? 0 : 3;
  blocks.push_back(alternating);
  // Gaps of every length from 0 to 40, at the start, the middle and the end.
  for (size_t gap = 0; gap <= 40; ++gap) {
    std::vector<uint8_t> b(gap, 0);
    b.push_back(1);
    b.insert(b.end(), gap, 0);
    b.push_back(2);
    b.push_back(3);
    b.insert(b.end(), gap, 0);
    blocks.push_back(b);
  }
  for (double density : {0.0005, 0.005, 0.05, 0.5, 0.95}) {
    blocks.push_back(ScatteredSparse(ZSTD_BLOCKSIZE_MAX, density, 3));
  }
  for (const auto& b : blocks) {
    SCOPED_TRACE("block of " + std::to_string(b.size()) + " bytes");
    ExpectValidParse(b, Parse(b));
  }
}

TEST(XorRuns, OneSequencePerRunWhenEveryGapIsLong) {
  std::mt19937_64 rng(5);
  std::vector<uint8_t> b(ZSTD_BLOCKSIZE_MAX, 0);
  for (size_t i = 10; i + 8 < b.size(); i += kXorRunMinZeros + 3 + rng() % 200) {
    const size_t len = 1 + rng() % 3;
    for (size_t j = 0; j < len; ++j) b[i + j] = static_cast<uint8_t>(1 + rng() % 255);
  }
  const auto seqs = Parse(b);
  ExpectValidParse(b, seqs);
  // One per run (its literals end with the gap's first zero), one for the zeros the block
  // starts with (a zero literal and its match), and the last literals.
  ASSERT_EQ(b[0], 0);
  EXPECT_EQ(seqs.size(), 1 + RunsOf(b) + 1);
}

TEST(XorRuns, TooLittleRoomOrTooLargeABlockIsAnError) {
  std::vector<uint8_t> b = {1, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 3};
  std::vector<ZSTD_Sequence> seqs(8);
  EXPECT_EQ(ParseXorRuns(b, seqs.data(), 2), ZSTD_SEQUENCE_PRODUCER_ERROR);
  EXPECT_EQ(ParseXorRuns(b, seqs.data(), 3), 3u);
  std::vector<uint8_t> big(ZSTD_BLOCKSIZE_MAX + 1, 0);
  EXPECT_EQ(ParseXorRuns(big, seqs.data(), seqs.size()), ZSTD_SEQUENCE_PRODUCER_ERROR);
  EXPECT_EQ(ParseXorRuns({}, seqs.data(), seqs.size()), 0u);
}

// A frame as the publisher writes it (checksum, content size), with libzstd validating the
// parse too.
std::vector<uint8_t> RunsFrame(std::span<const uint8_t> data, int level = 3) {
  ZSTD_CCtx* cctx = ZSTD_createCCtx();
  ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, level);
  ZSTD_CCtx_setParameter(cctx, ZSTD_c_checksumFlag, 1);
  ZSTD_CCtx_setParameter(cctx, ZSTD_c_validateSequences, 1);
  // Without the fallback, a parse libzstd refuses fails the compression instead of hiding.
  EXPECT_TRUE(UseXorRunSequences(cctx).ok());
  ZSTD_CCtx_setParameter(cctx, ZSTD_c_enableSeqProducerFallback, 0);
  std::vector<uint8_t> out(ZSTD_compressBound(data.size()));
  const size_t n = ZSTD_compress2(cctx, out.data(), out.size(), data.data(), data.size());
  ZSTD_freeCCtx(cctx);
  EXPECT_FALSE(ZSTD_isError(n)) << ZSTD_getErrorName(n);
  out.resize(ZSTD_isError(n) ? 0 : n);
  return out;
}

TEST(XorRuns, FramesDecodeThroughLibzstdAndTheWalker) {
  std::vector<std::vector<uint8_t>> inputs = {
      {0}, {9}, std::vector<uint8_t>(3 << 20, 0), std::vector<uint8_t>(300000, 0x11)};
  for (double density : {0.0005, 0.005, 0.025, 0.3}) {
    inputs.push_back(Bf16XorLike(3 << 20, density, 17));
    inputs.push_back(ScatteredSparse(1 << 20, density, 19));
  }
  for (const auto& in : inputs) {
    for (int level : {1, 3, 19}) {
      SCOPED_TRACE(std::to_string(in.size()) + " bytes, level " + std::to_string(level));
      const auto frame = RunsFrame(in, level);
      ASSERT_FALSE(frame.empty());
      const auto libzstd = LibzstdOneShot(frame, in.size());
      ASSERT_TRUE(libzstd.ok) << libzstd.error;
      EXPECT_EQ(libzstd.data, in);
      EXPECT_EQ(CompareWithLibzstd(frame, in.size()), "");
      const auto walked = Walk(frame);
      ASSERT_TRUE(walked.status.ok()) << walked.status.ToString();
      EXPECT_EQ(walked.stats.checksums_verified, 1u);
      if (level == 19) break;  // slow on the larger inputs; one pass proves the entropy stage
    }
  }
}

TEST(XorRuns, FewerSequencesAndSmallerFramesThanLibzstdOnASparseDelta) {
  for (double density : {0.005, 0.025}) {
    const auto in = Bf16XorLike(4 << 20, density, 23);
    const auto runs = RunsFrame(in);
    walker_test::CompressOptions o;
    o.checksum = true;
    const auto zstd = walker_test::Compress(in, o);
    const auto walk_runs = Walk(runs), walk_zstd = Walk(zstd);
    ASSERT_TRUE(walk_runs.status.ok() && walk_zstd.status.ok());
    EXPECT_EQ(walk_runs.nonzeros, walk_zstd.nonzeros);
    // One sequence per run of nonzero bytes, and at most two more per block (the zeros it
    // starts with, its last literals).
    EXPECT_LE(walk_runs.stats.sequences, RunsOf(in) + 2 * walk_runs.stats.blocks) << density;
    EXPECT_LT(walk_runs.stats.sequences * 3, walk_zstd.stats.sequences * 2) << density;
    EXPECT_LT(runs.size(), zstd.size()) << density;
  }
}

}  // namespace
}  // namespace deltakv::deltasync
