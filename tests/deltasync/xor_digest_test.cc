// XorDigest: the test vectors of FORMAT.md §2.5 (computed with an independent big-integer
// implementation), invariance under any segmentation into runs, detection of every one-word
// change, hex parsing, and DecodeDeltaFrame checking it with both decoders.
#include "deltasync/xor_digest.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "deltasync/walker_test_util.h"
#include "deltasync/xor_decoder.h"

namespace deltakv::deltasync {
namespace {

std::vector<uint8_t> Bytes(std::initializer_list<int> v) {
  std::vector<uint8_t> out;
  for (int b : v) out.push_back(static_cast<uint8_t>(b));
  return out;
}

std::string Hex(std::span<const uint8_t> x) { return FormatXorDigest(ComputeXorDigest(x)); }

TEST(XorDigestTest, FormatVectors) {
  EXPECT_EQ(XorDigestKey(0), 0xE220A8397B1DCDAFull);  // splitmix64's first output for seed 0
  EXPECT_EQ(Hex({}), "00000000000000000000000000000000");
  EXPECT_EQ(Hex(Bytes({1})), "0000000000000000e220a8397b1dcdaf");
  EXPECT_EQ(Hex(Bytes({1, 2, 3, 4, 5, 6, 7, 8, 9, 10})), "07173977978b1eb7b360fcd5c47af878");
  std::vector<uint8_t> x(4100, 0);
  x[4097] = 0xff;
  x[4098] = 0xee;
  x[4099] = 0xdd;
  EXPECT_EQ(Hex(x), "00000000d943d8f0507fb0bae6f59a00");
  EXPECT_EQ(Hex(std::vector<uint8_t>(64, 0xff)), "1a35c72688984d21e5ca38d97767b2da");
}

TEST(XorDigestTest, TrailingZerosDoNotCount) {
  std::vector<uint8_t> x = Bytes({9, 0, 0, 7});
  std::vector<uint8_t> y = x;
  y.resize(1000, 0);
  EXPECT_EQ(ComputeXorDigest(x), ComputeXorDigest(y));
}

using walker_test::CollectingSink;
using walker_test::CompressOptions;
using walker_test::ScatteredSparse;

TEST(XorDigestTest, AnySegmentationGivesTheDenseDigest) {
  std::mt19937 rng(11);
  for (int round = 0; round < 200; ++round) {
    const size_t n = 1 + rng() % 3000;
    std::vector<uint8_t> x = ScatteredSparse(n, round % 2 ? 0.02 : 0.4, static_cast<uint64_t>(round));
    const XorDigest dense = ComputeXorDigest(x);
    // Random cut points; each piece is added whole, trimmed to its nonzero bytes, or split at
    // every zero byte, in a shuffled order.
    std::vector<std::pair<uint64_t, std::vector<uint8_t>>> pieces;
    size_t i = 0;
    while (i < n) {
      const size_t len = std::min<size_t>(n - i, 1 + rng() % 40);
      const int mode = static_cast<int>(rng() % 3);
      size_t b = i, e = i + len;
      if (mode == 0) {
        pieces.push_back({b, {x.begin() + b, x.begin() + e}});
      } else if (mode == 1) {  // trimmed to its first and last nonzero byte
        while (b < e && x[b] == 0) ++b;
        while (e > b && x[e - 1] == 0) --e;
        if (b < e) pieces.push_back({b, {x.begin() + b, x.begin() + e}});
      } else {  // maximal runs of nonzero bytes
        for (size_t k = b; k < e;) {
          if (x[k] == 0) {
            ++k;
            continue;
          }
          size_t r = k;
          while (r < e && x[r] != 0) ++r;
          pieces.push_back({k, {x.begin() + k, x.begin() + r}});
          k = r;
        }
      }
      i += len;
    }
    std::shuffle(pieces.begin(), pieces.end(), rng);
    XorDigestBuilder b;
    for (const auto& [pos, bytes] : pieces) b.Add(pos, bytes);
    ASSERT_EQ(b.value(), dense) << "round " << round;
  }
}

// AddByte (a decoder's nonzero bytes in output order, gathered per word) gives the dense
// digest, alone or mixed with Add over other positions, and value() may be read at any point.
TEST(XorDigestTest, BytesInOrderGiveTheDenseDigest) {
  std::mt19937 rng(12);
  for (int round = 0; round < 200; ++round) {
    const size_t n = 1 + rng() % 3000;
    std::vector<uint8_t> x = ScatteredSparse(n, round % 2 ? 0.02 : 0.5, 100 + round);
    XorDigestBuilder bytes_only, mixed, prefix, loose, loose_mixed;
    std::vector<uint8_t> seen(n, 0);
    for (size_t i = 0; i < n; ++i) {
      if (x[i] == 0) continue;
      bytes_only.AddByte(i, x[i]);
      loose.AddLoose(i, x[i]);
      // AddLoose for the bytes of odd words, AddByte for the rest.
      if ((i / 8) % 2 == 1) {
        loose_mixed.AddLoose(i, x[i]);
      } else {
        loose_mixed.AddByte(i, x[i]);
      }
      // Every third word goes through Add in mixed (a whole word's bytes at once).
      if ((i / 8) % 3 == 0) {
        if (i % 8 == 0 || seen[i - 1] == 0) {
          const size_t end = std::min(n, (i / 8 + 1) * 8);
          mixed.Add(i, std::span<const uint8_t>(x).subspan(i, end - i));
          std::fill(seen.begin() + i, seen.begin() + end, 1);
        }
      } else {
        mixed.AddByte(i, x[i]);
      }
      prefix.AddByte(i, x[i]);
      std::vector<uint8_t> head(x.begin(), x.begin() + i + 1);
      if (i % 97 == 0) {
        ASSERT_EQ(prefix.value(), ComputeXorDigest(head)) << i;
      }
    }
    const XorDigest dense = ComputeXorDigest(x);
    ASSERT_EQ(bytes_only.value(), dense) << "round " << round;
    ASSERT_EQ(mixed.value(), dense) << "round " << round;
    ASSERT_EQ(loose.value(), dense) << "round " << round;
    ASSERT_EQ(loose_mixed.value(), dense) << "round " << round;
  }
}

TEST(XorDigestTest, EveryOneWordChangeIsCaught) {
  std::mt19937_64 rng(5);
  std::vector<uint8_t> x = ScatteredSparse(4096, 0.05, 3);
  const XorDigest base = ComputeXorDigest(x);
  for (int round = 0; round < 5000; ++round) {
    std::vector<uint8_t> y = x;
    const size_t word = rng() % (y.size() / 8);
    // Flip a random nonempty set of bits inside one word (single bits, whole bytes, top bits).
    uint64_t mask = rng();
    if (round % 3 == 0) mask = uint64_t{1} << (rng() % 64);
    if (round % 3 == 1) mask = uint64_t{0x80} << (8 * (rng() % 8));
    if (mask == 0) mask = 1;
    for (int k = 0; k < 8; ++k) y[word * 8 + k] ^= static_cast<uint8_t>(mask >> (8 * k));
    ASSERT_NE(ComputeXorDigest(y), base) << "word " << word << " mask " << mask;
  }
}

TEST(XorDigestTest, TopBitsOfTwoWordsDoNotCancel) {
  // A sum mod 2^64 would miss this pair (2^63 * (K1 + K2) = 0 for odd keys); mod 2^128 not.
  std::vector<uint8_t> x(64, 0), y(64, 0);
  y[7] = 0x80;
  y[15] = 0x80;
  EXPECT_NE(ComputeXorDigest(x), ComputeXorDigest(y));
}

TEST(XorDigestTest, ParseAndFormat) {
  XorDigest d{0x0123456789abcdefull, 0xfedcba9876543210ull};
  EXPECT_EQ(FormatXorDigest(d), "0123456789abcdeffedcba9876543210");
  auto p = ParseXorDigest("0123456789abcdeffedcba9876543210", "d");
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(*p, d);
  for (const char* bad : {"", "0123456789abcdeffedcba987654321", "0123456789abcdeffedcba98765432100",
                          "0123456789ABCDEFfedcba9876543210", "0123456789abcdeffedcba987654321g",
                          " 123456789abcdeffedcba9876543210"}) {
    auto r = ParseXorDigest(bad, "frame 0: xor_digest");
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("frame 0: xor_digest"), std::string::npos);
  }
}

std::vector<uint8_t> Compress(const std::vector<uint8_t>& v, bool checksum) {
  CompressOptions o;
  o.checksum = checksum;
  return walker_test::Compress(v, o);
}

class DecodeWithDigestTest : public ::testing::TestWithParam<const char*> {};

TEST_P(DecodeWithDigestTest, ChecksTheDigestInsteadOfTheFrameChecksum) {
  auto decoder = MakeXorDecoder(GetParam());
  ASSERT_TRUE(decoder.ok());
  std::vector<uint8_t> x = ScatteredSparse(300000, 0.003, 9);
  std::vector<uint8_t> frame = Compress(x, /*checksum=*/true);
  const XorDigest good = ComputeXorDigest(x);
  // Each decode with a fresh sink (a sink checks that runs come in order).
  auto decode = [&](const std::vector<uint8_t>& in, const std::optional<XorDigest>& digest) {
    CollectingSink sink;
    return DecodeDeltaFrame(**decoder, in, x.size(), 27, sink, "frame 0", digest);
  };
  auto ok = decode(frame, good);
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();

  XorDigest wrong = good;
  wrong.lo ^= 1;
  auto bad = decode(frame, wrong);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(bad.status().message().find("frame 0: decoded bytes have xor_digest " +
                                        FormatXorDigest(good) + ", the manifest says " +
                                        FormatXorDigest(wrong)),
            std::string::npos)
      << bad.status().ToString();

  // A damaged XXH64 trailer: refused without a digest, accepted with the right one (the digest
  // checks the same bytes the trailer would).
  std::vector<uint8_t> trailer = frame;
  trailer.back() ^= 0x01;
  auto no_digest = decode(trailer, std::nullopt);
  ASSERT_FALSE(no_digest.ok());
  EXPECT_EQ(no_digest.status().code(), StatusCode::kDataLoss);
  EXPECT_TRUE(decode(trailer, good).ok());

  // Frames without a content checksum are still checked through the digest.
  std::vector<uint8_t> plain = Compress(x, /*checksum=*/false);
  EXPECT_TRUE(decode(plain, good).ok());
  EXPECT_FALSE(decode(plain, wrong).ok());

  // A frame for other content with the first content's digest.
  std::vector<uint8_t> other = x;
  other[12345] ^= 0x10;
  std::vector<uint8_t> other_frame = Compress(other, /*checksum=*/true);
  auto swapped = decode(other_frame, good);
  ASSERT_FALSE(swapped.ok());
  EXPECT_NE(swapped.status().message().find("xor_digest"), std::string::npos);
}

// The sparse walker computes the digest itself (DecodeLimits::compute_digest) over all frames
// of an input, at their concatenated positions, and from scratch on each Decode of a reused
// decoder; the libzstd decoder leaves it to the caller.
TEST(XorDigestTest, TheWalkerDigestsWhatItDecodes) {
  auto walker = MakeXorDecoder("walker");
  auto libzstd = MakeXorDecoder("libzstd");
  ASSERT_TRUE(walker.ok() && libzstd.ok());
  EXPECT_TRUE((*walker)->computes_digest());
  EXPECT_FALSE((*libzstd)->computes_digest());
  DecodeLimits limits;
  limits.compute_digest = true;
  for (int round = 0; round < 6; ++round) {
    std::vector<uint8_t> whole, input;
    for (int f = 0; f < 1 + round % 3; ++f) {
      std::vector<uint8_t> part = ScatteredSparse(1000 + 70000 * f + 333 * round,
                                                  round % 2 ? 0.001 : 0.05, 40 + 7 * round + f);
      std::vector<uint8_t> frame = Compress(part, /*checksum=*/round % 2 == 0);
      input.insert(input.end(), frame.begin(), frame.end());
      whole.insert(whole.end(), part.begin(), part.end());
    }
    CollectingSink sink;
    auto r = (*walker)->Decode(input, limits, sink);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ASSERT_TRUE(r->digest.has_value());
    EXPECT_EQ(*r->digest, ComputeXorDigest(whole)) << "round " << round;
    CollectingSink other;
    auto plain = (*libzstd)->Decode(input, limits, other);
    ASSERT_TRUE(plain.ok());
    EXPECT_FALSE(plain->digest.has_value());
  }
  DecodeLimits off;
  CollectingSink sink;
  auto none = (*walker)->Decode(Compress(std::vector<uint8_t>(100, 1), true), off, sink);
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->digest.has_value());
}

INSTANTIATE_TEST_SUITE_P(Decoders, DecodeWithDigestTest, ::testing::Values("walker", "libzstd"));

}  // namespace
}  // namespace deltakv::deltasync
