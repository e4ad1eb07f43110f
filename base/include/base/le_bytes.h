// Little-endian loads of a few bytes, for hot paths that pack bytes into 64-bit words.
//
// Thread-safety: pure functions.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace deltakv {

// The 8 bytes at p as a little-endian word.
inline uint64_t LoadLE64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  if constexpr (std::endian::native == std::endian::big) v = __builtin_bswap64(v);
  return v;
}

// Writes `v` as 8 little-endian bytes at p.
inline void StoreLE64(uint8_t* p, uint64_t v) {
  if constexpr (std::endian::native == std::endian::big) v = __builtin_bswap64(v);
  std::memcpy(p, &v, 8);
}

// The `n` (1 to 8) bytes at p as the low bytes of a little-endian word, the rest zero. Reads
// only those bytes and has no loop: two overlapping 4-byte loads for 4..8 bytes, three single
// bytes (some the same) below.
inline uint64_t LoadShortLE(const uint8_t* p, size_t n) {
  if (n >= 4) {
    uint32_t a, b;
    std::memcpy(&a, p, 4);
    std::memcpy(&b, p + n - 4, 4);
    if constexpr (std::endian::native == std::endian::big) {
      a = __builtin_bswap32(a);
      b = __builtin_bswap32(b);
    }
    return uint64_t{a} | (uint64_t{b} << (8 * (n - 4)));
  }
  return uint64_t{p[0]} | (uint64_t{p[n / 2]} << (8 * (n / 2))) |
         (uint64_t{p[n - 1]} << (8 * (n - 1)));
}

}  // namespace deltakv
