// Unit tests of the walker's building blocks (XXH64 with zero runs, the nonzero index, the
// backward bit reader) and of its limits and sink contract.
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "walker/bit_reader.h"
#include "walker/nonzero_index.h"
#include "walker/xxh64.h"
#include "walker_test_util.h"

namespace deltakv::deltasync {
namespace {

using walker::Xxh64;
using walker::Xxh64Digest;

// Reference values from libxxhash 0.8.1 (XXH64, seed 0 unless noted).
TEST(WalkerXxh64, KnownVectors) {
  EXPECT_EQ(Xxh64Digest(nullptr, 0), 0xef46db3751d8e999ull);
  EXPECT_EQ(Xxh64Digest(reinterpret_cast<const uint8_t*>("a"), 1), 0xd24ec4f1a98c6e5bull);
  EXPECT_EQ(Xxh64Digest(reinterpret_cast<const uint8_t*>("abc"), 3), 0x44bc2cf5ad770999ull);
  EXPECT_EQ(Xxh64Digest(reinterpret_cast<const uint8_t*>("abc"), 3, 12345), 0x1700e64f6f23509ull);
  std::vector<uint8_t> zeros(1 << 20, 0);
  EXPECT_EQ(Xxh64Digest(zeros.data(), 31), 0xfaf43dd52deb083aull);
  EXPECT_EQ(Xxh64Digest(zeros.data(), 32), 0xf6e9be5d70632cf5ull);
  EXPECT_EQ(Xxh64Digest(zeros.data(), 100), 0x17bb1103c92c502full);
  EXPECT_EQ(Xxh64Digest(zeros.data(), zeros.size()), 0x87d2a1b6e1163ef1ull);
  std::vector<uint8_t> mixed;
  for (int r = 0; r < 3; ++r) {
    for (int i = 0; i < 256; ++i) mixed.push_back(static_cast<uint8_t>(i));
  }
  mixed.resize(mixed.size() + 1000, 0);
  mixed.insert(mixed.end(), {'x', 'y', 'z'});
  EXPECT_EQ(Xxh64Digest(mixed.data(), mixed.size()), 0xcecc42b039acce95ull);
}

TEST(WalkerXxh64, ZeroRunsEqualZeroBytesAtAnySplit) {
  std::mt19937_64 rng(1);
  for (int trial = 0; trial < 600; ++trial) {
    // Half the trials on the portable zero-stripe path, half on the fastest this CPU has.
    walker::Xxh64ForcePortableForTesting(trial % 2 == 0);
    Xxh64 sparse, dense;
    std::vector<uint8_t> all;
    const int pieces = 1 + static_cast<int>(rng() % 8);
    for (int p = 0; p < pieces; ++p) {
      const size_t zeros = rng() % (trial % 3 == 0 ? 5000 : 200);  // some long runs (AVX-512)
      sparse.UpdateZeros(zeros);
      all.insert(all.end(), zeros, 0);
      std::vector<uint8_t> bytes(rng() % 40);
      for (auto& b : bytes) b = static_cast<uint8_t>(rng());
      sparse.Update(bytes.data(), bytes.size());
      all.insert(all.end(), bytes.begin(), bytes.end());
    }
    dense.Update(all.data(), all.size());
    ASSERT_EQ(sparse.Digest(), dense.Digest()) << "trial " << trial;
    ASSERT_EQ(sparse.Digest(), Xxh64Digest(all.data(), all.size()));
  }
  walker::Xxh64ForcePortableForTesting(false);
}

TEST(WalkerXxh64, SparseUpdatesEqualTheDenseStream) {
  std::mt19937_64 rng(11);
  for (int trial = 0; trial < 600; ++trial) {
    walker::Xxh64ForcePortableForTesting(trial % 2 == 0);  // both zero-stripe paths
    const uint64_t length = rng() % 5000;
    std::vector<uint8_t> dense(length, 0);
    walker::Xxh64 sparse;
    uint64_t at = 0;
    // Several calls, mixing dense Update, zero runs and sparse ranges of varied density.
    while (at < length) {
      const uint64_t end = std::min<uint64_t>(length, at + 1 + rng() % 700);
      if (rng() % 4 == 0) {
        for (uint64_t p = at; p < end; ++p) dense[p] = static_cast<uint8_t>(rng());
        sparse.Update(dense.data() + at, end - at);
      } else {
        std::vector<uint64_t> entries;
        const uint64_t gap = rng() % 5 == 0 ? 100000 : 1 + rng() % 80;  // some zero runs
        for (uint64_t p = at + rng() % gap; p < end; p += 1 + rng() % gap) {
          dense[p] = static_cast<uint8_t>(1 + rng() % 255);
          entries.push_back(p << 8 | dense[p]);
        }
        sparse.UpdateSparse(entries.data(), entries.size(), end);
      }
      ASSERT_EQ(sparse.length(), end);
      at = end;
    }
    ASSERT_EQ(sparse.Digest(), Xxh64Digest(dense.data(), dense.size())) << "trial " << trial;
  }
  walker::Xxh64ForcePortableForTesting(false);
}

// Every position around and among the last entries, for indexes of fewer, exactly and more
// entries than the searched tail: the answer is the first entry at or after the position.
TEST(WalkerNonzeroIndex, LowerBoundNearTheFrontier) {
  for (const size_t count : {0u, 1u, 2u, 63u, 64u, 65u, 66u, 127u, 128u, 200u}) {
    walker::NonzeroIndex index;
    index.Reset(1 << 20);
    index.BeginBlock(0, 1 << 17);
    std::vector<uint64_t> positions;
    uint64_t p = 3;
    for (size_t i = 0; i < count; ++i) {
      positions.push_back(p);
      index.Append(p, static_cast<uint8_t>(i | 1));
      p += 1 + (i * 37) % 11;  // gaps of 1 to 11 bytes
    }
    const uint64_t frontier = p + 5;
    for (uint64_t a = 0; a <= frontier; ++a) {
      const uint64_t i = index.LowerBound(a, frontier);
      const size_t want = static_cast<size_t>(
          std::lower_bound(positions.begin(), positions.end(), a) - positions.begin());
      ASSERT_EQ(i, want) << "count " << count << " position " << a;
      if (want < count) {
        ASSERT_EQ(index.at(i) >> 8, positions[want]);
      }
    }
  }
}

// Far behind the frontier a page's entries are searched around the position's share of the
// page first: pages whose entries are spread evenly (the guess holds), bunched at one end or in
// the middle (it misses either way), or just over and under the guessed span, all answer
// exactly at every position.
TEST(WalkerNonzeroIndex, LowerBoundInCrowdedPagesFarBehind) {
  constexpr uint64_t kPage = uint64_t{1} << walker::NonzeroIndex::kPageShift;
  std::vector<uint64_t> positions;
  for (uint64_t p = 1; p < kPage; p += 3) positions.push_back(p);                   // even
  for (uint64_t i = 0; i < 200; ++i) positions.push_back(kPage + i);                // at the start
  for (uint64_t i = 0; i < 200; ++i) positions.push_back(3 * kPage - 200 + i);      // at the end
  for (uint64_t i = 0; i < 40; ++i) positions.push_back(3 * kPage + 2000 + i * 7);  // middle
  for (uint64_t i = 0; i < 17; ++i) positions.push_back(4 * kPage + 100 * i);
  for (uint64_t i = 0; i < 16; ++i) positions.push_back(5 * kPage + 250 * i + 3);
  for (uint64_t i = 0; i < 300; ++i) positions.push_back(6 * kPage + (i * 2654435761u) % kPage);
  std::sort(positions.begin(), positions.end());
  positions.erase(std::unique(positions.begin(), positions.end()), positions.end());
  const uint64_t far = 7 * kPage;  // sources up to here are behind the last 64 entries
  for (uint64_t i = 0; i < 100; ++i) positions.push_back(far + 10 * i);
  walker::NonzeroIndex index;
  index.Reset(1 << 20);
  index.BeginBlock(0, 1 << 17);
  for (const uint64_t p : positions) index.Append(p, 1);
  const uint64_t frontier = positions.back() + 1;
  for (uint64_t a = 0; a < far; ++a) {
    const uint64_t i = index.LowerBound(a, frontier);
    const auto want = static_cast<uint64_t>(
        std::lower_bound(positions.begin(), positions.end(), a) - positions.begin());
    ASSERT_EQ(i, want) << "position " << a;
  }
}

TEST(WalkerNonzeroIndex, LowerBoundAcrossPagesAndPruning) {
  walker::NonzeroIndex index;
  const uint64_t window = 1 << 20;
  index.Reset(window);
  std::vector<uint64_t> positions;
  for (uint64_t p = 5; p < 3'000'000; p += 1 + (p * 7919) % 9000) positions.push_back(p);
  size_t next = 0;
  std::mt19937_64 rng(2);
  for (uint64_t frontier = 0; frontier < 3'000'000; frontier += 50'000) {
    if (frontier > 0) index.BeginBlock(frontier - 50'000, 50'000);
    while (next < positions.size() && positions[next] < frontier) {
      index.Append(positions[next], static_cast<uint8_t>(positions[next] | 1));
      ++next;
    }
    if (frontier > window) index.Prune(frontier - window, frontier);
    for (int q = 0; q < 50; ++q) {
      const uint64_t lo = frontier > window ? frontier - window : 0;
      const uint64_t a = lo + rng() % (frontier - lo + 1);
      const uint64_t i = index.LowerBound(a, frontier);
      const auto it = std::lower_bound(positions.begin(), positions.begin() + next, a);
      if (it == positions.begin() + next) {
        ASSERT_EQ(i, index.end());
      } else {
        ASSERT_LT(i, index.end());
        ASSERT_EQ(index.at(i) >> 8, *it);
      }
      const uint64_t b = std::min(frontier, a + 1 + rng() % 3000);
      if (a < b) {
        const bool empty = std::lower_bound(positions.begin(), positions.begin() + next, a) ==
                           std::lower_bound(positions.begin(), positions.begin() + next, b);
        if (!empty) {
          ASSERT_FALSE(index.EmptyRange(a, b, frontier)) << a << " " << b;
        } else if (b - a < 1024) {
          ASSERT_TRUE(index.EmptyRange(a, b, frontier)) << a << " " << b;  // exact when short
        }
      }
    }
  }
  EXPECT_LT(index.live_entries(), positions.size());  // pruning released memory
}

// Blocks of any size starting anywhere, dense and sparse mixed, over many turns of the ring:
// the ring bits a block reuses are cleared entry by entry (sparse) or word by word (dense), and
// EmptyRange and LowerBound stay exact over the window either way.
// With the bitmap from the start, and without it until the questions turn it on mid-frame (its
// bits then rebuilt from the entries).
class WalkerNonzeroIndexBitmap : public ::testing::TestWithParam<bool> {};

TEST_P(WalkerNonzeroIndexBitmap, RingReuseIsExactForDenseAndSparseBlocks) {
  walker::NonzeroIndex index;
  const uint64_t window = 64 << 10;
  index.Reset(window);
  EXPECT_FALSE(index.bitmap());
  if (GetParam()) index.EnableBitmap();
  bool turned_on = GetParam();
  std::vector<uint64_t> positions;
  std::mt19937_64 rng(9);
  uint64_t pos = 0;
  for (int block = 0; block < 400; ++block) {
    const uint64_t max_output = 1 + rng() % (128 << 10);
    const uint64_t written = rng() % 4 == 0 ? max_output : rng() % (max_output + 1);
    index.BeginBlock(pos, max_output);
    const int kind = static_cast<int>(rng() % 3);  // none, sparse, dense
    for (uint64_t p = pos; p < pos + written; ++p) {
      const bool nonzero = kind == 2 ? rng() % 4 == 0 : (kind == 1 && rng() % 3000 == 0);
      if (!nonzero) continue;
      index.Append(p, static_cast<uint8_t>(1 + rng() % 255));
      positions.push_back(p);
    }
    pos += written;
    if (pos > window) index.Prune(pos - window, pos);
    const uint64_t lo = pos > window ? pos - window : 0;
    // Without the bitmap: a question per block for the first 150 blocks.
    const int questions = turned_on ? 40 : (block < 150 ? 1 : 40);
    for (int q = 0; q < questions && pos > lo; ++q) {
      const uint64_t a = lo + rng() % (pos - lo);
      const uint64_t b = std::min(pos, a + 1 + (q % 2 == 0 ? rng() % 300 : rng() % window));
      const bool empty = std::lower_bound(positions.begin(), positions.end(), a) ==
                         std::lower_bound(positions.begin(), positions.end(), b);
      ASSERT_EQ(index.EmptyRange(a, b, pos), empty) << "block " << block << ": " << a << " " << b;
      // LowerBound too: a far position's page is counted in the ring (from either end).
      const auto it = std::lower_bound(positions.begin(), positions.end(), a);
      const uint64_t i = index.LowerBound(a, pos);
      if (it == positions.end()) {
        ASSERT_EQ(i, index.end()) << "block " << block << ": " << a;
      } else {
        ASSERT_LT(i, index.end()) << "block " << block << ": " << a;
        ASSERT_EQ(index.at(i) >> 8, *it) << "block " << block << ": " << a;
      }
    }
    if (block == 149) {
      EXPECT_EQ(index.bitmap(), GetParam()) << "a question a block turned it on";
      index.EnableBitmap();  // mid-frame: its bits rebuilt from the entries
    }
    turned_on = index.bitmap();
  }
}

// AppendWord (up to 8 bytes at once) leaves the index exactly as AppendIfNonzero byte by byte
// would: the same entries, pages, ring bits and summary, also for words across a ring word or a
// page boundary and for every count of nonzero bytes.
TEST(WalkerNonzeroIndex, AppendWordEqualsBytesAppendedOneByOne) {
  constexpr uint64_t kPage = uint64_t{1} << walker::NonzeroIndex::kPageShift;
  const uint64_t window = 64 << 10;
  walker::NonzeroIndex by_word, by_byte;
  by_word.Reset(window);
  by_byte.Reset(window);
  std::vector<uint64_t> positions;
  std::mt19937_64 rng(21);
  uint64_t pos = 0;
  for (int block = 0; block < 300; ++block) {
    const uint64_t max_output = 1 + rng() % (32 << 10);
    by_word.BeginBlock(pos, max_output);
    by_byte.BeginBlock(pos, max_output);
    const uint64_t end = pos + max_output;
    while (pos + 8 <= end) {
      // Sometimes jump to just before a page or ring-word boundary.
      const uint64_t kind = rng() % 8;
      uint64_t next = pos + rng() % 200;
      if (kind == 0) next = std::max(pos, (pos / kPage + 1) * kPage - 1 - rng() % 8);
      if (kind == 1) next = std::max(pos, (pos / 64 + 1) * 64 - 1 - rng() % 8);
      if (next + 8 > end) break;
      pos = next;
      const unsigned n = 2 + static_cast<unsigned>(rng() % 7);  // 2..8 bytes
      uint64_t word = 0;
      for (unsigned i = 0; i < n; ++i) {
        const uint64_t r = rng();
        const uint8_t b = r % 3 == 0 ? 0 : static_cast<uint8_t>(1 + (r >> 8) % 255);
        word |= uint64_t{b} << (8 * i);
      }
      by_word.AppendWord(pos, word);
      for (unsigned i = 0; i < n; ++i) {
        const uint8_t b = static_cast<uint8_t>(word >> (8 * i));
        by_byte.AppendIfNonzero(pos + i, b);
        if (b != 0) positions.push_back(pos + i);
      }
      pos += n;
    }
    pos = end;
    if (pos > window) {
      by_word.Prune(pos - window, pos);
      by_byte.Prune(pos - window, pos);
    }
    ASSERT_EQ(by_word.end(), by_byte.end()) << "block " << block;
    const uint64_t lo = pos > window ? pos - window : 0;
    for (int q = 0; q < 60 && pos > lo; ++q) {
      const uint64_t a = lo + rng() % (pos - lo);
      const uint64_t b = std::min(pos, a + 1 + (q % 2 == 0 ? rng() % 300 : rng() % window));
      const bool empty = std::lower_bound(positions.begin(), positions.end(), a) ==
                         std::lower_bound(positions.begin(), positions.end(), b);
      ASSERT_EQ(by_word.EmptyRange(a, b, pos), empty) << "block " << block << ": " << a << " " << b;
      const uint64_t i = by_word.LowerBound(a, pos);
      ASSERT_EQ(i, by_byte.LowerBound(a, pos)) << "block " << block << ": " << a;
      if (i < by_word.end()) {
        ASSERT_EQ(by_word.at(i), by_byte.at(i)) << "block " << block;
      }
    }
  }
  ASSERT_GT(positions.size(), 10000u);
}

// EmptyRange answers from the entries until its questions outnumber 64 + an eighth of them.
TEST(WalkerNonzeroIndex, FrequentQuestionsTurnTheBitmapOn) {
  walker::NonzeroIndex index;
  index.Reset(1 << 20);
  index.BeginBlock(0, 1 << 17);
  for (uint64_t p = 0; p < 800; ++p) index.Append(p * 100, 1);  // 800 entries: 64 + 100
  for (int q = 0; q < 164; ++q) {
    ASSERT_FALSE(index.EmptyRange(q * 100, q * 100 + 1, 80'000));
    ASSERT_TRUE(index.EmptyRange(q * 100 + 1, q * 100 + 100, 80'000));
  }
  EXPECT_TRUE(index.bitmap());
  walker::NonzeroIndex few;
  few.Reset(1 << 20);
  few.BeginBlock(0, 1 << 17);
  for (uint64_t p = 0; p < 800; ++p) few.Append(p * 100, 1);
  for (int q = 0; q < 82; ++q) ASSERT_TRUE(few.EmptyRange(q * 100 + 1, q * 100 + 100, 80'000));
  EXPECT_FALSE(few.bitmap());
}

INSTANTIATE_TEST_SUITE_P(FromStartOrWhenAsked, WalkerNonzeroIndexBitmap, ::testing::Bool());

// Reset keeps the ring of the last frame (same, smaller or larger window), few or many of its
// bits still set: the next frame sees none of them (EmptyRange exact from its first block).
TEST(WalkerNonzeroIndex, ResetLeavesNoBitOfTheLastFrame) {
  walker::NonzeroIndex index;
  std::mt19937_64 rng(11);
  const uint64_t windows[] = {64 << 10, 1 << 20, 8 << 20, 256 << 10};
  for (int frame = 0; frame < 24; ++frame) {
    index.Reset(windows[frame % 4]);
    const uint64_t block = 128 << 10;
    const uint64_t length = block * (1 + rng() % 24);
    const int every = frame % 3 == 0 ? 3 : (frame % 3 == 1 ? 500 : 40000);  // left set: many..few
    std::vector<uint64_t> positions;
    for (uint64_t pos = 0; pos < length; pos += block) {
      index.BeginBlock(pos, block);
      for (uint64_t p = pos + rng() % every; p < pos + block; p += 1 + rng() % every) {
        index.Append(p, static_cast<uint8_t>(1 + rng() % 255));
        positions.push_back(p);
      }
      if (pos + block > windows[frame % 4])
        index.Prune(pos + block - windows[frame % 4], pos + block);
    }
    const uint64_t end = length;
    for (int q = 0; q < 200; ++q) {
      const uint64_t lo = end > windows[frame % 4] ? end - windows[frame % 4] : 0;
      const uint64_t a = lo + rng() % (end - lo);
      const uint64_t b = std::min(end, a + 1 + rng() % 4000);
      const bool empty = std::lower_bound(positions.begin(), positions.end(), a) ==
                         std::lower_bound(positions.begin(), positions.end(), b);
      ASSERT_EQ(index.EmptyRange(a, b, end), empty) << "frame " << frame;
    }
  }
}

TEST(WalkerBitReader, FastReaderAgreesWithTheByteReader) {
  std::mt19937_64 rng(5);
  for (int trial = 0; trial < 2000; ++trial) {
    std::vector<uint8_t> data(1 + rng() % 40);
    for (auto& b : data) b = static_cast<uint8_t>(rng());
    if (data.back() == 0) data.back() = 1;
    walker::BackwardBitReader slow;
    walker::FastBackwardBitReader fast;
    ASSERT_TRUE(slow.Init(data.data(), data.size()));
    ASSERT_TRUE(fast.Init(data.data(), data.size()));
    ASSERT_EQ(fast.bits_left(), slow.bits_left());
    // Groups of reads of at most 56 bits between reloads, until past the start.
    while (!slow.overflowed()) {
      unsigned budget = 56;
      while (budget > 0) {
        const unsigned n = static_cast<unsigned>(rng() % (std::min(budget, 26u) + 1));
        const uint64_t expected = slow.Read(n);
        const uint64_t got = fast.Read(n);
        budget -= n;
        ASSERT_EQ(fast.bits_left(), slow.bits_left());
        if (slow.overflowed()) break;
        ASSERT_EQ(got, expected) << "trial " << trial << " n " << n;
        if (n == 0) break;
      }
      ASSERT_EQ(fast.finished(), slow.finished());
      ASSERT_EQ(fast.overflowed(), slow.overflowed());
      fast.Reload();
    }
  }
}

TEST(WalkerBitReader, BackwardReadsAndZeroFill) {
  const uint8_t data[] = {0b10110010, 0b00000101};  // marker at bit 2 of the last byte
  walker::BackwardBitReader br;
  ASSERT_TRUE(br.Init(data, 2));
  EXPECT_EQ(br.bits_left(), 10);
  EXPECT_EQ(br.Read(2), 0b01u);
  EXPECT_EQ(br.Read(4), 0b1011u);
  EXPECT_EQ(br.Read(4), 0b0010u);
  EXPECT_TRUE(br.finished());
  EXPECT_EQ(br.Read(3), 0u);
  EXPECT_TRUE(br.overflowed());
  const uint8_t no_marker[] = {1, 0};
  EXPECT_FALSE(br.Init(no_marker, 2));
  EXPECT_FALSE(br.Init(no_marker, 0));
}

class FailingSink : public NonzeroSink {
 public:
  Status OnRun(uint64_t, std::span<const uint8_t>) override {
    ++calls;
    return calls > 2 ? FailedPrecondition("sink says stop") : Status::Ok();
  }
  int calls = 0;
};

TEST(WalkerLimits, SinkErrorIsReturnedUnchangedAndSticky) {
  const auto data = walker_test::ScatteredSparse(1 << 20, 0.01, 1);
  const auto frame = walker_test::Compress(data, {});
  FailingSink sink;
  SparseZstdWalker walker(sink, {});
  Status s = walker.Feed(frame);
  if (s.ok()) s = walker.Finish();
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(), "sink says stop");
  EXPECT_EQ(sink.calls, 3);
  EXPECT_EQ(walker.Feed(frame).message(), "sink says stop");
}

TEST(WalkerLimits, MaxOutput) {
  const auto data = walker_test::ScatteredSparse(500000, 0.01, 2);
  const auto frame = walker_test::Compress(data, {});
  WalkerOptions options;
  options.limits.max_output = 400000;
  auto walked = walker_test::Walk(frame, options);
  EXPECT_EQ(walked.status.code(), StatusCode::kResourceExhausted) << walked.status.ToString();
  EXPECT_TRUE(IsOutputLimitError(walked.status)) << walked.status.ToString();
  // Raw blocks take the other path to the limit.
  std::vector<uint8_t> dense(300000);
  for (size_t i = 0; i < dense.size(); ++i) dense[i] = static_cast<uint8_t>(i * 2654435761u >> 13);
  const auto raw = walker_test::Compress(dense, {});
  options.limits.max_output = 1000;
  auto raw_walked = walker_test::Walk(raw, options);
  EXPECT_TRUE(IsOutputLimitError(raw_walked.status)) << raw_walked.status.ToString();
  options.limits.max_output = 500000;
  EXPECT_TRUE(walker_test::Walk(frame, options).status.ok());
}

TEST(WalkerLimits, MaxWindowLog) {
  const auto data = walker_test::ScatteredSparse(1 << 20, 0.01, 3);
  walker_test::CompressOptions o;
  o.level = 19;
  o.content_size = false;  // window from the descriptor (8 MiB at level 19)
  const auto frame = walker_test::Compress(data, o);
  WalkerOptions options;
  options.limits.max_window_log = 20;
  auto walked = walker_test::Walk(frame, options);
  EXPECT_EQ(walked.status.code(), StatusCode::kResourceExhausted) << walked.status.ToString();
  EXPECT_NE(walked.status.message().find("window"), std::string::npos);
  options.limits.max_window_log = 27;
  EXPECT_TRUE(walker_test::Walk(frame, options).status.ok());
}

TEST(WalkerLimits, MaxWork) {
  const auto data = walker_test::ScatteredSparse(1 << 20, 0.01, 4);
  const auto frame = walker_test::Compress(data, {});
  auto unlimited = walker_test::Walk(frame);
  ASSERT_TRUE(unlimited.status.ok());
  EXPECT_GT(unlimited.stats.work, unlimited.stats.sequences);
  WalkerOptions options;
  options.max_work = unlimited.stats.work / 2;
  auto walked = walker_test::Walk(frame, options);
  EXPECT_EQ(walked.status.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(walked.status.message().find("work"), std::string::npos);
}

TEST(WalkerLimits, ZeroBitSequenceBombIsBounded) {
  // 98303 sequences that cost 0 bits each (all tables RLE, LL 0, ML 3, repeat offset 4) in a
  // 10-byte block: the walker stops at Block_Maximum_Size instead of producing 295 KB.
  const std::vector<uint8_t> frame = {
      0x28, 0xB5, 0x2F, 0xFD, 0x00, (17 - 10) << 3,  // magic, FHD, window 128 KiB
      0x20, 0x00, 0x00, 'a',  'b',  'c',
      'd',                     // raw block "abcd"
      0x4D, 0x00, 0x00,        // last compressed block of 9 bytes:
      0x00,                    //   raw literals, size 0
      0xFF, 0xFF, 0xFF,        //   98303 sequences
      0x54, 0x00, 0x00, 0x00,  //   RLE tables: LL 0, OF 0, ML 0
      0x01};                   //   bitstream: end marker only
  auto walked = walker_test::Walk(frame);
  EXPECT_EQ(walked.status.code(), StatusCode::kDataLoss) << walked.status.ToString();
  EXPECT_NE(walked.status.message().find("Block_Maximum_Size"), std::string::npos)
      << walked.status.ToString();
  EXPECT_LE(walked.nonzeros.size(), 4u + 128u * 1024u);
}

TEST(WalkerLimits, EmptyInputIsNothing) {
  auto walked = walker_test::Walk({});
  EXPECT_TRUE(walked.status.ok());
  EXPECT_EQ(walked.stats.frames, 0u);
}

TEST(WalkerLimits, LegacyMagicIsUnimplemented) {
  const uint8_t legacy[] = {0x27, 0xB5, 0x2F, 0xFD, 0, 0, 0, 0};
  EXPECT_EQ(walker_test::Walk(legacy).status.code(), StatusCode::kUnimplemented);
}

TEST(WalkerLimits, WorkDoesNotScaleWithZeroRuns) {
  // 64 MiB of zeros with a few nonzero bytes: work stays tiny (no per-byte work).
  std::vector<uint8_t> data(64 << 20, 0);
  data[12345] = 1;
  data[40 << 20] = 2;
  const auto frame = walker_test::Compress(data, {});
  auto walked = walker_test::Walk(frame);
  ASSERT_TRUE(walked.status.ok());
  EXPECT_EQ(walked.stats.nonzero_bytes, 2u);
  EXPECT_LT(walked.stats.work, 10000u);
}

// WalkerOptions::decode_only: the same frames, blocks and sequences as a full walk, nothing
// delivered, no checksum checked; input errors are still found.
TEST(WalkerDecodeOnly, CountsWhatAFullWalkCountsAndDeliversNothing) {
  walker_test::CompressOptions checked;
  checked.checksum = true;
  const auto sparse =
      walker_test::Compress(walker_test::ScatteredSparse(3 << 20, 0.01, 5), checked);
  walker_test::CompressOptions level19;
  level19.level = 19;
  const auto bf16 = walker_test::Compress(walker_test::Bf16XorLike(1 << 20, 0.02, 6), level19);
  const auto raw = walker_test::Compress(walker_test::DenseRandom(300000, 7), checked);
  const std::vector<uint8_t> sevens(200000, 7);
  const auto rle = walker_test::Compress(sevens, {});
  const auto input = walker_test::Concat({sparse, bf16, raw, rle});
  const auto full = walker_test::Walk(input);
  ASSERT_TRUE(full.status.ok()) << full.status.ToString();
  ASSERT_GT(full.stats.raw_blocks, 0u);
  ASSERT_GT(full.stats.rle_blocks, 0u);
  ASSERT_EQ(full.stats.checksums_verified, 2u);
  WalkerOptions options;
  options.decode_only = true;
  options.limits.compute_digest = true;
  const auto decoded = walker_test::Walk(input, options);
  ASSERT_TRUE(decoded.status.ok()) << decoded.status.ToString();
  EXPECT_EQ(decoded.stats.decoded_length, full.stats.decoded_length);
  EXPECT_EQ(decoded.stats.frames, 4u);
  EXPECT_EQ(decoded.stats.blocks, full.stats.blocks);
  EXPECT_EQ(decoded.stats.raw_blocks, full.stats.raw_blocks);
  EXPECT_EQ(decoded.stats.rle_blocks, full.stats.rle_blocks);
  EXPECT_EQ(decoded.stats.sequences, full.stats.sequences);
  EXPECT_EQ(decoded.stats.nonzero_bytes, 0u);
  EXPECT_EQ(decoded.stats.runs, 0u);
  EXPECT_TRUE(decoded.nonzeros.empty());
  EXPECT_EQ(decoded.stats.checksums_verified, 0u);
  EXPECT_EQ(decoded.stats.checksums_skipped, 2u);
  EXPECT_EQ(decoded.digest, XorDigestBuilder().value());  // of nothing delivered
}

TEST(WalkerDecodeOnly, FindsInputErrorsButNotChecksumMismatches) {
  WalkerOptions options;
  options.decode_only = true;
  walker_test::CompressOptions checked;
  checked.checksum = true;
  auto frame = walker_test::Compress(walker_test::ScatteredSparse(1 << 20, 0.01, 8), checked);
  frame.back() ^= 1;  // the content checksum: nothing decode_only looks at
  EXPECT_EQ(walker_test::Walk(frame).status.code(), StatusCode::kDataLoss);
  EXPECT_TRUE(walker_test::Walk(frame, options).status.ok());
  // A sequence section that outgrows Block_Maximum_Size (see ZeroBitSequenceBombIsBounded).
  const std::vector<uint8_t> bomb = {0x28, 0xB5, 0x2F, 0xFD, 0x00, (17 - 10) << 3, 0x20, 0x00, 0x00,
                                     'a',  'b',  'c',  'd',  0x4D, 0x00,           0x00, 0x00, 0xFF,
                                     0xFF, 0xFF, 0x54, 0x00, 0x00, 0x00,           0x01};
  const auto bombed = walker_test::Walk(bomb, options);
  EXPECT_EQ(bombed.status.code(), StatusCode::kDataLoss);
  EXPECT_EQ(bombed.status.message(), walker_test::Walk(bomb).status.message());
  // Corrupt sequence bitstreams and a truncated frame fail as in a full walk.
  const auto good = walker_test::Compress(walker_test::ScatteredSparse(1 << 20, 0.01, 9), {});
  for (size_t at : {good.size() / 2, good.size() - 3}) {
    auto bad = good;
    bad[at] ^= 0x5A;
    const auto full = walker_test::Walk(bad);
    const auto decoded = walker_test::Walk(bad, options);
    if (!full.status.ok()) {
      EXPECT_EQ(decoded.status.code(), full.status.code()) << full.status.ToString();
    }
  }
  const std::span<const uint8_t> cut(good.data(), good.size() - 10);
  EXPECT_EQ(walker_test::Walk(cut, options).status.code(), StatusCode::kDataLoss);
}

}  // namespace
}  // namespace deltakv::deltasync
