// Streaming and robustness tests: chunked Feed equals one-shot, and mutated frames give the
// same verdict as libzstd (error vs error, or the same nonzero bytes).
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "walker_test_util.h"

namespace deltakv::deltasync {
namespace {

std::vector<std::vector<uint8_t>> SampleFrames() {
  std::vector<std::vector<uint8_t>> frames;
  const auto sparse = walker_test::ScatteredSparse(300000, 0.005, 1);
  const auto bf16 = walker_test::Bf16XorLike(200000, 0.05, 2);
  const auto dense = walker_test::DenseRandom(3000, 3);
  for (int level : {-5, 1, 3, 9, 19}) {
    walker_test::CompressOptions o;
    o.level = level;
    o.checksum = level % 2 != 0;
    o.content_size = level != 9;
    frames.push_back(walker_test::Compress(sparse, o));
    frames.push_back(walker_test::Compress(bf16, o));
  }
  walker_test::CompressOptions small;
  small.target_cblock_size = 1340;
  small.checksum = true;
  frames.push_back(walker_test::Compress(bf16, small));
  frames.push_back(walker_test::Compress(dense, {}));
  return frames;
}

// Feeds `frame` in chunks of `min_chunk` + [0, span) random bytes; true if every Feed is OK.
bool FeedInChunks(SparseZstdWalker& walker, const std::vector<uint8_t>& frame,
                  std::mt19937_64& rng, size_t min_chunk, size_t span) {
  for (size_t pos = 0; pos < frame.size();) {
    const size_t n = std::min(frame.size() - pos, min_chunk + static_cast<size_t>(rng() % span));
    if (!walker.Feed(std::span(frame).subspan(pos, n)).ok()) return false;
    pos += n;
  }
  return true;
}

TEST(WalkerStream, ChunkedFeedEqualsOneShot) {
  std::mt19937_64 rng(42);
  for (const auto& frame : SampleFrames()) {
    const auto expected = walker_test::Walk(frame);
    ASSERT_TRUE(expected.status.ok()) << expected.status.ToString();
    for (int trial = 0; trial < 8; ++trial) {
      walker_test::CollectingSink sink;
      SparseZstdWalker walker(sink, {});
      const size_t max_chunk = trial < 2 ? 3 : (trial < 5 ? 200 : 70000);
      ASSERT_TRUE(FeedInChunks(walker, frame, rng, 0, max_chunk));
      ASSERT_TRUE(walker.Finish().ok());
      EXPECT_EQ(sink.nonzeros(), expected.nonzeros);
      EXPECT_EQ(walker.stats().decoded_length, expected.stats.decoded_length);
      EXPECT_EQ(walker.stats().sequences, expected.stats.sequences);
      EXPECT_EQ(walker.stats().input_bytes, frame.size());
    }
  }
}

// One walker restarted over many inputs (including a failing one and chunked feeds) delivers
// what a fresh walker delivers for each: nothing of an earlier walk leaks into the next.
TEST(WalkerStream, RestartedWalkerEqualsFreshWalkers) {
  const auto frames = SampleFrames();
  walker_test::CollectingSink first;
  SparseZstdWalker walker(first, {});
  std::mt19937_64 rng(3);
  for (int round = 0; round < 3; ++round) {
    for (size_t i = 0; i < frames.size(); ++i) {
      const auto& frame = frames[(i * 7 + static_cast<size_t>(round)) % frames.size()];
      const auto expected = walker_test::Walk(frame);
      walker_test::CollectingSink sink;
      walker.Restart(sink, {});
      ASSERT_TRUE(FeedInChunks(walker, frame, rng, 1, 90000));
      ASSERT_TRUE(walker.Finish().ok());
      EXPECT_EQ(sink.nonzeros(), expected.nonzeros);
      EXPECT_EQ(walker.stats().decoded_length, expected.stats.decoded_length);
      EXPECT_EQ(walker.stats().sequences, expected.stats.sequences);
      EXPECT_EQ(walker.stats().frames, expected.stats.frames);
      EXPECT_EQ(walker.stats().input_bytes, frame.size());
      // A truncated input fails, and the next restart starts clean.
      walker_test::CollectingSink broken;
      walker.Restart(broken, {});
      ASSERT_TRUE(walker.Feed(std::span(frame).first(frame.size() / 2)).ok());
      EXPECT_FALSE(walker.Finish().ok());
    }
  }
}

TEST(WalkerStream, TruncationAtEveryUnitBoundaryFails) {
  const auto data = walker_test::ScatteredSparse(50000, 0.01, 5);
  walker_test::CompressOptions o;
  o.checksum = true;
  o.target_cblock_size = 2000;
  const auto frame = walker_test::Compress(data, o);
  for (size_t cut = 1; cut < frame.size(); cut += std::max<size_t>(1, frame.size() / 300)) {
    auto walked = walker_test::Walk(std::span(frame).first(cut));
    ASSERT_EQ(walked.status.code(), StatusCode::kDataLoss) << "cut " << cut;
  }
}

void Mutate(std::vector<uint8_t>& f, std::mt19937_64& rng) {
  const int kind = static_cast<int>(rng() % 5);
  const size_t at = rng() % f.size();
  switch (kind) {
    case 0:
      f[at] ^= static_cast<uint8_t>(1u << (rng() % 8));
      break;
    case 1:
      f[at] = static_cast<uint8_t>(rng());
      break;
    case 2:
      f.resize(at);
      break;
    case 3:
      f.insert(f.begin() + static_cast<ptrdiff_t>(at), static_cast<uint8_t>(rng()));
      break;
    default:
      f.erase(f.begin() + static_cast<ptrdiff_t>(at));
      break;
  }
}

TEST(WalkerStream, MutatedFramesAgreeWithLibzstd) {
  std::mt19937_64 rng(7);
  int checked = 0;
  for (const auto& frame : SampleFrames()) {
    for (int trial = 0; trial < 150; ++trial) {
      auto f = frame;
      const int edits = 1 + static_cast<int>(rng() % 3);
      for (int e = 0; e < edits && !f.empty(); ++e) Mutate(f, rng);
      const std::string verdict = walker_test::CompareWithLibzstd(f, 1 << 20);
      ASSERT_EQ(verdict, "") << "trial " << trial;
      ++checked;
    }
  }
  EXPECT_GT(checked, 1000);
}

}  // namespace
}  // namespace deltakv::deltasync
