// Adler-32 partial sums of a piece of device memory, split over the threads of one CUDA block,
// with 16-byte loads and no division per byte. Written once for the device (cuda_backend.cu's
// checksum kernel) and the host, so the split, the alignment handling and the arithmetic are
// tested on any machine (tests/shim/adler_pieces_test.cc) by running every thread's share
// in a loop.
//
// A piece is `length` bytes at `src` whose first byte has canonical position `position`
// (any value below 2^32). Thread t of n adds, over the bytes it owns,
//   s1 += b_j      s2 += (position + j) * b_j
// without reducing modulo 65521: only the sums modulo M matter, and (position + j) ≡
// ((position + j) mod M), so the caller reduces once per thread. Bounds: a piece of at most
// 2^17 bytes and position < 2^32 keep each term below 2^50 and a thread's sums below 2^64 for
// up to 2^14 terms per thread.
//
// Ownership of the bytes: the piece is cut at the first 16-byte-aligned address (the head,
// at most 15 bytes), then whole 16-byte words, then the tail (at most 15 bytes). Thread t takes
// head byte t and tail byte t (when t < 15) and words t, t + n, t + 2n, ...
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define DELTAKV_HOST_DEVICE __host__ __device__
#else
#define DELTAKV_HOST_DEVICE
#endif

namespace deltakv::shim::adler_pieces {

// sum over k of byte k of a times byte k of b (four unsigned bytes each) plus c: the device's
// __dp4a on the GPU, a loop on the host.
DELTAKV_HOST_DEVICE inline uint32_t Dot4(uint32_t a, uint32_t b, uint32_t c) {
#if defined(__CUDA_ARCH__)
  return __dp4a(a, b, c);
#else
  for (int k = 0; k < 4; ++k) c += ((a >> (8 * k)) & 0xff) * ((b >> (8 * k)) & 0xff);
  return c;
#endif
}

// The 16 bytes w[0..3] (little-endian words, byte i of the word at offset 4k + i): their sum
// and sum of i * b_i.
DELTAKV_HOST_DEVICE inline void SumWord16(const uint32_t w[4], uint32_t* plain, uint32_t* weighted) {
  // Byte weights 0..15 packed four per word, in memory order.
  constexpr uint32_t kWeights[4] = {0x03020100u, 0x07060504u, 0x0b0a0908u, 0x0f0e0d0cu};
  uint32_t p = 0, q = 0;
  for (int k = 0; k < 4; ++k) {
    p = Dot4(w[k], 0x01010101u, p);
    q = Dot4(w[k], kWeights[k], q);
  }
  *plain = p;
  *weighted = q;
}

// Bytes before the first 16-byte boundary at or after `address`, at most `length`.
DELTAKV_HOST_DEVICE inline uint32_t HeadBytes(uint64_t address, uint32_t length) {
  const uint32_t to_boundary = static_cast<uint32_t>((16 - (address & 15)) & 15);
  return to_boundary < length ? to_boundary : length;
}

// Thread `t` of `n` (n >= 16): adds its share of the piece to *s1 and *s2.
DELTAKV_HOST_DEVICE inline void ThreadShare(const uint8_t* src, uint32_t length, uint64_t position,
                                            uint32_t t, uint32_t n, uint64_t* s1, uint64_t* s2) {
  const uint32_t head = HeadBytes(reinterpret_cast<uint64_t>(src), length);
  const uint32_t words = (length - head) / 16;
  const uint32_t tail_at = head + 16 * words;
  uint64_t a = *s1, b = *s2;
  if (t < head) {
    a += src[t];
    b += (position + t) * src[t];
  }
  for (uint32_t k = t; k < words; k += n) {
    const uint32_t at = head + 16 * k;
    uint32_t w[4];
    // 16-byte aligned by construction of `head`.
    const uint32_t* p = reinterpret_cast<const uint32_t*>(src + at);
#if defined(__CUDA_ARCH__)
    const uint4 v = *reinterpret_cast<const uint4*>(p);
    w[0] = v.x;
    w[1] = v.y;
    w[2] = v.z;
    w[3] = v.w;
#else
    for (int k4 = 0; k4 < 4; ++k4) {
      w[k4] = uint32_t{src[at + 4 * k4]} | (uint32_t{src[at + 4 * k4 + 1]} << 8) |
              (uint32_t{src[at + 4 * k4 + 2]} << 16) | (uint32_t{src[at + 4 * k4 + 3]} << 24);
    }
    (void)p;
#endif
    uint32_t plain, weighted;
    SumWord16(w, &plain, &weighted);
    a += plain;
    b += (position + at) * plain + weighted;
  }
  if (tail_at + t < length) {
    const uint32_t j = tail_at + t;
    a += src[j];
    b += (position + j) * src[j];
  }
  *s1 = a;
  *s2 = b;
}

}  // namespace deltakv::shim::adler_pieces
