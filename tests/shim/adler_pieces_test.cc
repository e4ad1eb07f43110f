// The cuda checksum kernel's per-thread split (shim/src/adler_pieces.h), run on the host: for
// every alignment, length and thread count, the threads' shares add up to the Adler-32 partial
// sums of the piece, and each byte is counted by exactly one thread.
#include "adler_pieces.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace deltakv::shim::adler_pieces {
namespace {

constexpr uint64_t kM = 65521;
__extension__ typedef unsigned __int128 U128;

struct Sums {
  uint64_t s1 = 0, s2 = 0;
};

Sums Reference(const uint8_t* src, uint32_t length, uint64_t position) {
  Sums r;
  for (uint32_t j = 0; j < length; ++j) {
    r.s1 = (r.s1 + src[j]) % kM;
    r.s2 = (r.s2 + ((position + j) % kM) * src[j]) % kM;
  }
  return r;
}

Sums AllThreads(const uint8_t* src, uint32_t length, uint64_t position, uint32_t threads) {
  Sums total;
  for (uint32_t t = 0; t < threads; ++t) {
    uint64_t s1 = 0, s2 = 0;
    ThreadShare(src, length, position, t, threads, &s1, &s2);
    // As the kernel does: each thread reduces, then the block adds the reduced values.
    total.s1 = (total.s1 + s1 % kM) % kM;
    total.s2 = (total.s2 + s2 % kM) % kM;
  }
  return total;
}

TEST(AdlerPiecesTest, Dot4AndWordSums) {
  EXPECT_EQ(Dot4(0x04030201u, 0x01010101u, 5), 15u);
  EXPECT_EQ(Dot4(0xffffffffu, 0xffffffffu, 0), 4u * 255 * 255);
  uint32_t w[4] = {0x04030201u, 0x08070605u, 0x0c0b0a09u, 0x100f0e0du};  // bytes 1..16
  uint32_t plain = 0, weighted = 0;
  SumWord16(w, &plain, &weighted);
  EXPECT_EQ(plain, 136u);                       // 1 + ... + 16
  uint32_t want = 0;
  for (uint32_t i = 0; i < 16; ++i) want += i * (i + 1);
  EXPECT_EQ(weighted, want);
}

TEST(AdlerPiecesTest, SharesAddUpForEveryAlignmentAndLength) {
  std::mt19937_64 rng(7);
  std::vector<uint8_t> buf((64 << 10) + 64);
  for (auto& b : buf) b = static_cast<uint8_t>(rng());
  const uint32_t lengths[] = {0, 1, 2, 15, 16, 17, 31, 32, 33, 100, 255, 256, 4095, 4096, 4097,
                              65535, 65536};
  for (uint32_t threads : {16u, 32u, 256u}) {
    for (uint32_t align = 0; align < 16; ++align) {
      for (uint32_t length : lengths) {
        for (uint64_t position : {uint64_t{0}, uint64_t{65520}, uint64_t{12345}, uint64_t{1} << 31}) {
          const uint8_t* src = buf.data() + (16 - (reinterpret_cast<uintptr_t>(buf.data()) & 15)) +
                               align;
          const Sums want = Reference(src, length, position);
          const Sums got = AllThreads(src, length, position, threads);
          ASSERT_EQ(got.s1, want.s1) << threads << " threads, align " << align << ", length "
                                     << length << ", position " << position;
          ASSERT_EQ(got.s2, want.s2) << threads << " threads, align " << align << ", length "
                                     << length << ", position " << position;
        }
      }
    }
  }
}

TEST(AdlerPiecesTest, EveryByteCountedOnce) {
  // All bytes 1 at positions 0: s1 counts the bytes, s2 sums the offsets.
  std::vector<uint8_t> ones(5000 + 32, 1);
  for (uint32_t align = 0; align < 16; ++align) {
    const uint8_t* src = ones.data() + align;
    for (uint32_t length : {0u, 7u, 16u, 999u, 5000u}) {
      uint64_t s1 = 0, s2 = 0;
      for (uint32_t t = 0; t < 64; ++t) ThreadShare(src, length, 0, t, 64, &s1, &s2);
      EXPECT_EQ(s1, length);
      EXPECT_EQ(s2, uint64_t{length} * (length == 0 ? 0 : length - 1) / 2);
    }
  }
}

TEST(AdlerPiecesTest, WorstCaseSumsDoNotOverflow) {
  // 64 KiB of 0xff at the largest position the kernel passes (below M), one thread per 16
  // bytes of a 256-thread block: exact against 128-bit arithmetic.
  std::vector<uint8_t> buf((64 << 10) + 16, 0xff);
  const uint8_t* src = buf.data() + (16 - (reinterpret_cast<uintptr_t>(buf.data()) & 15));
  const uint32_t length = 64 << 10;
  const uint64_t position = kM - 1;
  for (uint32_t t = 0; t < 256; ++t) {
    uint64_t s1 = 0, s2 = 0;
    ThreadShare(src, length, position, t, 256, &s1, &s2);
    U128 w1 = 0, w2 = 0;
    for (uint32_t k = t; k < length / 16; k += 256) {
      for (uint32_t i = 0; i < 16; ++i) {
        w1 += 255;
        w2 += static_cast<U128>(position + 16 * k + i) * 255;
      }
    }
    ASSERT_EQ(s1, static_cast<uint64_t>(w1));
    ASSERT_EQ(s2, static_cast<uint64_t>(w2));
    ASSERT_EQ(w2 >> 64, 0u);
  }
}

}  // namespace
}  // namespace deltakv::shim::adler_pieces
