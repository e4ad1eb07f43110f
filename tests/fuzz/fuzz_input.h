// FuzzInput: numbers drawn from a fuzz input front to back, kBytes bytes (big-endian) each.
#pragma once

#include <cstddef>
#include <cstdint>

template <unsigned kBytes>
struct FuzzInput {
  const uint8_t* data;
  size_t size;
  size_t pos = 0;
  // A value below `bound` (0 when the input ran out or bound is 0).
  uint64_t Next(uint64_t bound) {
    uint64_t v = 0;
    for (unsigned i = 0; i < kBytes && pos < size; ++i) v = v << 8 | data[pos++];
    return bound == 0 ? 0 : v % bound;
  }
  bool done() const { return pos >= size; }
};
