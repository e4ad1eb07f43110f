// Streaming XXH64 (seed 0 by default) with a zero-run fast path: UpdateZeros(n) advances the
// four lanes over whole zero stripes in registers, touching no memory, so hashing a mostly-zero
// stream costs O(nonzero bytes + length / 32) cheap multiplies.
#pragma once

#include <cstddef>
#include <cstdint>

namespace deltakv::deltasync::walker {

class Xxh64 {
 public:
  explicit Xxh64(uint64_t seed = 0) { Reset(seed); }
  void Reset(uint64_t seed = 0);
  void Update(const uint8_t* data, size_t size);
  // Same result as Update() over `size` zero bytes.
  void UpdateZeros(uint64_t size);
  // Same result as Update() over the stream from length() up to `end` that is zero except at
  // `count` packed entries (position << 8 | value, positions increasing, in [length(), end)):
  // a sparse stream is hashed from its nonzero bytes alone, the lanes in registers throughout. REQUIRES: the stream's position 0 is
  // the first byte ever hashed (stripes are aligned to multiples of 32).
  void UpdateSparse(const uint64_t* entries, size_t count, uint64_t end);
  // Bytes hashed so far.
  uint64_t length() const { return total_; }
  uint64_t Digest() const;

 private:
  void ConsumeStripe(const uint8_t* p);
  void ClearBuffer() {
    __builtin_memset(buffer_, 0, sizeof(buffer_));
    buffered_ = 0;
  }

  uint64_t seed_ = 0;
  uint64_t lanes_[4] = {};
  uint64_t total_ = 0;
  uint8_t buffer_[32] = {};  // bytes at and past buffered_ are zero
  uint32_t buffered_ = 0;
};

// Makes zero stripes take the portable path even where AVX-512 is available (tests cover both).
void Xxh64ForcePortableForTesting(bool portable);

// One-shot XXH64 of a buffer.
uint64_t Xxh64Digest(const uint8_t* data, size_t size, uint64_t seed = 0);

}  // namespace deltakv::deltasync::walker
