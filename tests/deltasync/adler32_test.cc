// Adler-32: differential tests against zlib (adler32, adler32_combine64) for every
// implementation this CPU runs, and AdlerDelta against a full recompute.
#include "deltasync/adler32.h"

#include <gtest/gtest.h>
#include <zlib.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

namespace deltakv::deltasync {
namespace {

constexpr uint32_t kMod = kAdlerModulus;

uint32_t ZlibAdler(std::span<const uint8_t> data, uint32_t adler = 1) {
  // A non-null pointer even for empty input: zlib answers 1 for a null buffer.
  static const uint8_t kEmpty = 0;
  const uint8_t* p = data.empty() ? &kEmpty : data.data();
  return static_cast<uint32_t>(adler32(adler, p, static_cast<uInt>(data.size())));
}

std::vector<uint8_t> RandomBytes(size_t n, std::mt19937_64& rng) {
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

// Lengths that cross every internal boundary: small, the 5552-byte scalar chunk, vector block
// sizes, the 32 KiB vector chunk, and their multiples.
std::vector<size_t> BoundaryLengths() {
  std::vector<size_t> lengths;
  for (size_t n = 0; n <= 300; ++n) lengths.push_back(n);
  for (size_t base : {size_t{5552}, size_t{2 * 5552}, size_t{3 * 5552}, size_t{32768},
                      size_t{65536}, size_t{65521}, size_t{2 * 32768}, size_t{100000}}) {
    for (size_t d = 0; d <= 70; ++d) {
      lengths.push_back(base + d);
      if (base >= d) lengths.push_back(base - d);
    }
  }
  return lengths;
}

class Adler32ImplTest : public ::testing::TestWithParam<Adler32Impl> {};

TEST_P(Adler32ImplTest, MatchesZlibOnBoundaryLengths) {
  std::mt19937_64 rng(1);
  std::vector<uint8_t> buf = RandomBytes(200000, rng);
  for (size_t n : BoundaryLengths()) {
    std::span<const uint8_t> data(buf.data(), n);
    ASSERT_EQ(Adler32With(GetParam(), data), ZlibAdler(data)) << "length " << n;
  }
}

TEST_P(Adler32ImplTest, MatchesZlibOnAllOnesFromLargestState) {
  // 0xFF bytes from a = b = M - 1 push every sum to its bound.
  std::vector<uint8_t> buf(300000, 0xFF);
  for (uint32_t start : {1u, 0xFFF0FFF0u, 0xFFF00000u, 0x0000FFF0u, 0xFFF00001u}) {
    for (size_t n : BoundaryLengths()) {
      std::span<const uint8_t> data(buf.data(), n);
      ASSERT_EQ(Adler32With(GetParam(), data, start), ZlibAdler(data, start))
          << "length " << n << " start " << std::hex << start;
    }
    std::span<const uint8_t> all(buf);
    ASSERT_EQ(Adler32With(GetParam(), all, start), ZlibAdler(all, start));
  }
}

TEST_P(Adler32ImplTest, MatchesZlibOnRandomLengthsUpToSeveralMiB) {
  std::mt19937_64 rng(2);
  std::vector<uint8_t> buf = RandomBytes(6 << 20, rng);
  for (int i = 0; i < 40; ++i) {
    const size_t offset = rng() % 64;  // unaligned starts
    const size_t n = rng() % (buf.size() - offset);
    const uint32_t start =
        static_cast<uint32_t>(rng() % kMod) << 16 | static_cast<uint32_t>(rng() % kMod);
    std::span<const uint8_t> data(buf.data() + offset, n);
    ASSERT_EQ(Adler32With(GetParam(), data, start), ZlibAdler(data, start))
        << "length " << n << " offset " << offset;
  }
  std::span<const uint8_t> all(buf);
  EXPECT_EQ(Adler32With(GetParam(), all), ZlibAdler(all));
}

TEST_P(Adler32ImplTest, ContinuesFromInitialValuesNearTheModulus) {
  std::mt19937_64 rng(3);
  std::vector<uint8_t> buf = RandomBytes(70000, rng);
  const uint32_t halves[] = {0, 1, 2, 255, 65519, 65520};
  for (uint32_t hi : halves) {
    for (uint32_t lo : halves) {
      const uint32_t start = hi << 16 | lo;
      for (size_t n :
           {0, 1, 2, 15, 16, 17, 31, 32, 33, 63, 64, 65, 5551, 5552, 5553, 65521, 70000}) {
        std::span<const uint8_t> data(buf.data(), n);
        ASSERT_EQ(Adler32With(GetParam(), data, start), ZlibAdler(data, start))
            << "length " << n << " start " << std::hex << start;
      }
    }
  }
}

TEST_P(Adler32ImplTest, MatchesZlibForUnreducedInitialValues) {
  // Halves in [M, 0xFFFF] are not valid checksums, but zlib gives a defined answer; so do we.
  std::mt19937_64 rng(4);
  std::vector<uint8_t> buf = RandomBytes(40000, rng);
  std::vector<uint8_t> ones(40000, 0xFF);
  const uint32_t halves[] = {0, 65520, 65521, 65522, 65534, 65535};
  for (uint32_t hi : halves) {
    for (uint32_t lo : halves) {
      const uint32_t start = hi << 16 | lo;
      for (size_t n = 0; n <= 40; ++n) {
        for (const auto* b : {&buf, &ones}) {
          std::span<const uint8_t> data(b->data(), n);
          ASSERT_EQ(Adler32With(GetParam(), data, start), ZlibAdler(data, start))
              << "length " << n << " start " << std::hex << start;
        }
      }
      for (size_t n : {5552, 5553, 40000}) {
        std::span<const uint8_t> data(ones.data(), n);
        ASSERT_EQ(Adler32With(GetParam(), data, start), ZlibAdler(data, start));
      }
    }
  }
  for (int i = 0; i < 2000; ++i) {
    const uint32_t start = static_cast<uint32_t>(rng());
    std::span<const uint8_t> data(buf.data(), rng() % 100);
    ASSERT_EQ(Adler32With(GetParam(), data, start), ZlibAdler(data, start));
  }
}

TEST_P(Adler32ImplTest, SplitAnywhereContinuesToTheSameChecksum) {
  std::mt19937_64 rng(5);
  std::vector<uint8_t> buf = RandomBytes(1 << 20, rng);
  const uint32_t whole = Adler32With(GetParam(), buf);
  for (int i = 0; i < 50; ++i) {
    const size_t cut = rng() % buf.size();
    std::span<const uint8_t> all(buf);
    const uint32_t first = Adler32With(GetParam(), all.first(cut));
    ASSERT_EQ(Adler32With(GetParam(), all.subspan(cut), first), whole) << "cut " << cut;
  }
}

std::string ImplTestName(const ::testing::TestParamInfo<Adler32Impl>& param_info) {
  return std::string(Adler32ImplName(param_info.param));
}

INSTANTIATE_TEST_SUITE_P(Supported, Adler32ImplTest, ::testing::ValuesIn(SupportedAdler32Impls()),
                         ImplTestName);

TEST(Adler32Test, DispatchedMatchesZlib) {
  std::mt19937_64 rng(6);
  std::vector<uint8_t> buf = RandomBytes(3 << 20, rng);
  EXPECT_EQ(Adler32(buf), ZlibAdler(buf));
  EXPECT_EQ(Adler32({}), 1u);
  EXPECT_EQ(Adler32({}, 0x12345678u), 0x12345678u);
  EXPECT_EQ(Adler32(std::span<const uint8_t>(buf.data(), 0), 0xFFFFFFFFu),
            ZlibAdler(std::span<const uint8_t>(buf.data(), 0), 0xFFFFFFFFu));
}

TEST(Adler32Test, KnownValues) {
  const std::string_view wiki = "Wikipedia";
  EXPECT_EQ(Adler32({reinterpret_cast<const uint8_t*>(wiki.data()), wiki.size()}), 0x11E60398u);
  EXPECT_EQ(Adler32({}), 1u);
}

TEST(Adler32Test, SupportedImplsStartWithScalar) {
  std::vector<Adler32Impl> impls = SupportedAdler32Impls();
  ASSERT_FALSE(impls.empty());
  EXPECT_EQ(impls.front(), Adler32Impl::kScalar);
}

uint32_t ZlibCombine(uint32_t a1, uint32_t a2, uint64_t len2) {
  return static_cast<uint32_t>(adler32_combine64(a1, a2, static_cast<z_off64_t>(len2)));
}

TEST(Adler32CombineTest, MatchesZlibOnRandomAndEdgeInputs) {
  std::mt19937_64 rng(7);
  const uint64_t lengths[] = {0,
                              1,
                              65520,
                              65521,
                              65522,
                              2 * 65521,
                              uint64_t{1} << 32,
                              (uint64_t{1} << 63) - 1,
                              uint64_t{1} << 63,
                              ~uint64_t{0}};
  const uint32_t values[] = {0,           1,           0xFFF0FFF0u, 0xFFF00001u,
                             0x0001FFF0u, 0xFFFFFFFFu, 0xFFF1FFF1u, 0x12345678u};
  for (uint32_t a1 : values) {
    for (uint32_t a2 : values) {
      for (uint64_t len2 : lengths) {
        ASSERT_EQ(Adler32Combine(a1, a2, len2), ZlibCombine(a1, a2, len2))
            << std::hex << a1 << " " << a2 << " " << std::dec << len2;
      }
    }
  }
  for (int i = 0; i < 200000; ++i) {
    const uint32_t a1 = static_cast<uint32_t>(rng());
    const uint32_t a2 = static_cast<uint32_t>(rng());
    const uint64_t len2 = i % 2 ? rng() : rng() % 1000000;
    ASSERT_EQ(Adler32Combine(a1, a2, len2), ZlibCombine(a1, a2, len2))
        << std::hex << a1 << " " << a2 << " " << std::dec << len2;
  }
}

TEST(Adler32CombineTest, CombinesChecksumsOfPieces) {
  std::mt19937_64 rng(8);
  std::vector<uint8_t> buf = RandomBytes(1 << 20, rng);
  std::span<const uint8_t> all(buf);
  const uint32_t whole = Adler32(all);
  for (size_t cut :
       {size_t{0}, size_t{1}, size_t{65521}, size_t{5552}, buf.size() - 1, buf.size()}) {
    EXPECT_EQ(Adler32Combine(Adler32(all.first(cut)), Adler32(all.subspan(cut)), buf.size() - cut),
              whole)
        << "cut " << cut;
  }
}

// AdlerDelta ---------------------------------------------------------------------------------

// Picks `k` distinct positions in [0, n), sorted.
std::vector<uint64_t> RandomPositions(uint64_t n, size_t k, std::mt19937_64& rng) {
  std::vector<uint64_t> pos;
  if (k * 2 > n) {
    pos.resize(n);
    std::iota(pos.begin(), pos.end(), 0);
    std::shuffle(pos.begin(), pos.end(), rng);
    pos.resize(std::min<uint64_t>(k, n));
  } else {
    std::vector<bool> used(n);
    while (pos.size() < k) {
      const uint64_t p = rng() % n;
      if (!used[p]) {
        used[p] = true;
        pos.push_back(p);
      }
    }
  }
  std::sort(pos.begin(), pos.end());
  return pos;
}

TEST(AdlerDeltaTest, AddByteMatchesFullRecompute) {
  std::mt19937_64 rng(9);
  for (size_t n : {size_t{1}, size_t{100}, size_t{65520}, size_t{65521}, size_t{65522},
                   size_t{200000}, size_t{1} << 20}) {
    for (size_t k : {size_t{0}, size_t{1}, size_t{10}, size_t{1000}, n}) {
      if (k > n || k > 300000) continue;
      std::vector<uint8_t> buf = RandomBytes(n, rng);
      const uint32_t before = Adler32(buf);
      AdlerDelta delta;
      for (uint64_t p : RandomPositions(n, k, rng)) {
        const uint8_t v = static_cast<uint8_t>(rng());
        delta.AddByte(p, buf[p], v);
        buf[p] = v;
      }
      ASSERT_EQ(delta.Apply(before, n), Adler32(buf)) << "n " << n << " k " << k;
    }
  }
}

TEST(AdlerDeltaTest, ExtremeChangesAtPositionsPastTheModulus) {
  // All bytes 0 -> 0xFF and back at positions >= M, where (i mod M) wraps.
  const size_t n = 3 * 65521 + 17;
  for (uint8_t from : {uint8_t{0}, uint8_t{0xFF}}) {
    std::vector<uint8_t> buf(n, from);
    const uint32_t before = Adler32(buf);
    AdlerDelta delta;
    for (size_t p = 65521 - 3; p < n; p += 7) {
      delta.AddByte(p, from, static_cast<uint8_t>(~from));
      buf[p] = static_cast<uint8_t>(~from);
    }
    ASSERT_EQ(delta.Apply(before, n), Adler32(buf));
  }
}

TEST(AdlerDeltaTest, AddXorRunMatchesAddByteAndFullRecompute) {
  std::mt19937_64 rng(10);
  const size_t n = 300000;  // runs cross several multiples of M
  std::vector<uint8_t> old_buf = RandomBytes(n, rng);
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<uint8_t> xor_buf(n, 0);
    // A few runs, some long enough to wrap positions past M more than once, with zero bytes
    // inside them.
    std::vector<std::pair<size_t, size_t>> runs;
    size_t at = rng() % 1000;
    while (at < n) {
      const size_t len = std::min<size_t>(n - at, trial % 3 == 0 ? rng() % 150000 : rng() % 300);
      for (size_t i = at; i < at + len; ++i) {
        if (rng() % 4) xor_buf[i] = static_cast<uint8_t>(rng());
      }
      runs.emplace_back(at, len);
      at += len + rng() % 5000;
    }
    AdlerDelta by_run;
    AdlerDelta by_byte;
    std::vector<uint8_t> new_buf = old_buf;
    for (auto [begin, len] : runs) {
      by_run.AddXorRun(begin, std::span(old_buf).subspan(begin, len),
                       std::span(xor_buf).subspan(begin, len));
      for (size_t i = begin; i < begin + len; ++i) {
        new_buf[i] = old_buf[i] ^ xor_buf[i];
        if (xor_buf[i] != 0) by_byte.AddByte(i, old_buf[i], new_buf[i]);
      }
    }
    EXPECT_EQ(by_run.s1(), by_byte.s1());
    EXPECT_EQ(by_run.s2(), by_byte.s2());
    const uint32_t before = Adler32(old_buf);
    ASSERT_EQ(by_run.Apply(before, n), Adler32(new_buf)) << "trial " << trial;
  }
}

TEST(AdlerDeltaTest, AddXorRunAgreesWithAddByteAtEveryLengthAndHugePositions) {
  // Lengths around the short-run threshold and the internal chunk size; positions far past
  // 2^32 (a byte offset deep in a large tensor) and just below a multiple of M.
  std::mt19937_64 rng(12);
  std::vector<uint8_t> old_buf = RandomBytes(20000, rng);
  std::vector<uint8_t> xor_buf = RandomBytes(20000, rng);
  for (size_t i = 0; i < xor_buf.size(); i += 3) xor_buf[i] = 0;
  for (uint64_t position :
       {uint64_t{0}, uint64_t{65521} - 100, uint64_t{5000000007}, uint64_t{65521} * 1000003 - 1}) {
    for (size_t len : {1, 2, 255, 256, 257, 8191, 8192, 8193, 16385, 20000}) {
      AdlerDelta by_run;
      AdlerDelta by_byte;
      by_run.AddXorRun(position, std::span(old_buf).first(len), std::span(xor_buf).first(len));
      for (size_t i = 0; i < len; ++i) {
        by_byte.AddByte(position + i, old_buf[i], static_cast<uint8_t>(old_buf[i] ^ xor_buf[i]));
      }
      ASSERT_EQ(by_run.s1(), by_byte.s1()) << "position " << position << " len " << len;
      ASSERT_EQ(by_run.s2(), by_byte.s2()) << "position " << position << " len " << len;
    }
  }
}

TEST(AdlerDeltaTest, AddXorRunOfZerosChangesNothing) {
  std::vector<uint8_t> old_buf(100000, 0x5A);
  std::vector<uint8_t> zeros(100000, 0);
  AdlerDelta delta;
  delta.AddXorRun(12345, old_buf, zeros);
  EXPECT_EQ(delta.s1(), 0u);
  EXPECT_EQ(delta.s2(), 0u);
  EXPECT_EQ(delta.Apply(0xABCD1234u, 1 << 20), 0xABCD1234u);
}

TEST(AdlerDeltaTest, MergeOfDisjointPartsEqualsTheWhole) {
  std::mt19937_64 rng(11);
  const size_t n = 1 << 20;
  std::vector<uint8_t> buf = RandomBytes(n, rng);
  const uint32_t before = Adler32(buf);
  AdlerDelta whole;
  AdlerDelta parts[4];  // owner = position / (n / 4), like tensor-parallel ranks
  for (uint64_t p : RandomPositions(n, 50000, rng)) {
    const uint8_t v = static_cast<uint8_t>(rng());
    whole.AddByte(p, buf[p], v);
    parts[p / (n / 4)].AddByte(p, buf[p], v);
    buf[p] = v;
  }
  AdlerDelta merged;
  for (const AdlerDelta& part : parts) merged.Merge(part);
  EXPECT_EQ(merged.s1(), whole.s1());
  EXPECT_EQ(merged.s2(), whole.s2());
  EXPECT_EQ(merged.Apply(before, n), Adler32(buf));
  // Merging in a different grouping gives the same sums.
  AdlerDelta left = parts[0];
  left.Merge(parts[1]);
  AdlerDelta right = parts[2];
  right.Merge(parts[3]);
  left.Merge(right);
  EXPECT_EQ(left.Apply(before, n), Adler32(buf));
}

TEST(AdlerDeltaTest, SumsAreReducedAndSignedDeltasCancel) {
  AdlerDelta delta;
  delta.AddByte(70000, 0, 200);
  delta.AddByte(70000 + 65521, 200, 0);  // same residue, opposite change
  EXPECT_EQ(delta.s1(), 0u);
  EXPECT_EQ(delta.s2(), 0u);
  delta.AddByte(3, 10, 0);
  EXPECT_EQ(delta.s1(), kMod - 10);
  EXPECT_EQ(delta.s2(), kMod - 30);
}

TEST(AdlerDeltaTest, ManyLargeTermsStayExact) {
  // 2 million changes of -255 at positions with residue M - 1: sums far beyond 32 bits.
  AdlerDelta delta;
  int64_t s1 = 0;
  int64_t s2 = 0;
  for (uint64_t i = 0; i < 2000000; ++i) {
    const uint64_t p = i * kMod + kMod - 1;
    delta.AddByte(p, 0xFF, 0);
    s1 -= 255;
    s2 -= static_cast<int64_t>(kMod - 1) * 255;
  }
  const auto mod = [](int64_t v) { return static_cast<uint32_t>(((v % kMod) + kMod) % kMod); };
  EXPECT_EQ(delta.s1(), mod(s1));
  EXPECT_EQ(delta.s2(), mod(s2));
}

// AddBytes over every position of a buffer, applied to the checksum of n zero bytes, is the
// buffer's Adler-32 (zlib), however the positions are split into runs and in whatever order
// the runs are added; each run agrees with AddXorRun from zero bytes at any position.
TEST(AdlerDeltaTest, AddBytesOverAllPositionsIsTheFullChecksum) {
  std::mt19937_64 rng(77);
  for (size_t n : {size_t{0}, size_t{1}, size_t{255}, size_t{256}, size_t{8193}, size_t{300000}}) {
    std::vector<uint8_t> data(n);
    for (auto& b : data) b = static_cast<uint8_t>(rng());
    std::vector<std::pair<size_t, size_t>> runs;
    for (size_t at = 0; at < n;) {
      size_t len = std::min<size_t>(n - at, 1 + rng() % 20000);
      runs.push_back({at, len});
      at += len;
    }
    std::shuffle(runs.begin(), runs.end(), rng);
    AdlerDelta total;
    for (auto [at, len] : runs) {
      AdlerDelta part, reference;
      std::span<const uint8_t> bytes(data.data() + at, len);
      part.AddBytes(at, bytes);
      std::vector<uint8_t> zeros(len, 0);
      reference.AddXorRun(at, zeros, bytes);
      EXPECT_EQ(part.s1(), reference.s1());
      EXPECT_EQ(part.s2(), reference.s2());
      total.Merge(part);
    }
    const uint32_t zeros_adler = static_cast<uint32_t>(((n % 65521) << 16) | 1u);
    const uint32_t want = static_cast<uint32_t>(adler32(1, data.data(), static_cast<uInt>(n)));
    EXPECT_EQ(total.Apply(zeros_adler, n), want) << "n=" << n;
  }
  // Positions past the modulus and past 2^32 reduce like single bytes do.
  std::vector<uint8_t> run(5000);
  for (auto& b : run) b = static_cast<uint8_t>(rng());
  for (uint64_t pos : {uint64_t{65520}, uint64_t{1} << 33, ~uint64_t{0} - 6000}) {
    AdlerDelta fast, slow;
    fast.AddBytes(pos, run);
    for (size_t i = 0; i < run.size(); ++i) slow.AddByte(pos + i, 0, run[i]);
    EXPECT_EQ(fast.s1(), slow.s1());
    EXPECT_EQ(fast.s2(), slow.s2());
  }
}

}  // namespace
}  // namespace deltakv::deltasync
