// Bit readers for zstd: a forward little-endian reader (FSE table descriptions) and a backward
// reader (Huffman streams and the sequence bitstream, read from the end toward the start).
// Both read zeros past the edge of their data and report how far they went, so callers check
// bounds once instead of per read.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace deltakv::deltasync::walker {

static_assert(std::endian::native == std::endian::little,
              "the walker assumes a little-endian host");

inline uint64_t LowMask(unsigned n) { return n >= 64 ? ~uint64_t{0} : (uint64_t{1} << n) - 1; }

// Loads 8 little-endian bytes starting at `byte`; bytes past `size` read as zero.
inline uint64_t LoadLE64Padded(const uint8_t* data, size_t size, size_t byte) {
  uint64_t v = 0;
  if (byte + 8 <= size) {
    std::memcpy(&v, data + byte, 8);
  } else if (byte < size) {
    std::memcpy(&v, data + byte, size - byte);
  }
  return v;
}

// Reads bits from the start of a byte range upward, LSB first.
class ForwardBitReader {
 public:
  ForwardBitReader(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  // REQUIRES: n <= 56.
  uint64_t Peek(unsigned n) const {
    return (LoadLE64Padded(data_, size_, bit_pos_ >> 3) >> (bit_pos_ & 7)) & LowMask(n);
  }
  void Skip(unsigned n) { bit_pos_ += n; }
  uint64_t Read(unsigned n) {
    uint64_t v = Peek(n);
    Skip(n);
    return v;
  }
  // Bytes touched so far, rounded up; may exceed size() when the reader ran past the end.
  size_t BytesConsumed() const { return (bit_pos_ + 7) >> 3; }
  size_t size() const { return size_; }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t bit_pos_ = 0;
};

// Reads a zstd backward bitstream: the last byte's highest set bit marks the end, and reading
// proceeds from just below it toward bit 0 of the first byte. Bits below the start read as 0.
class BackwardBitReader {
 public:
  // Returns false when the stream is empty or its last byte is 0 (no end marker).
  bool Init(const uint8_t* data, size_t size) {
    if (size == 0 || data[size - 1] == 0) return false;
    data_ = data;
    size_ = size;
    bits_left_ = static_cast<int64_t>(size - 1) * 8 + (std::bit_width(data[size - 1]) - 1);
    return true;
  }
  // REQUIRES: n <= 56.
  uint64_t Peek(unsigned n) const {
    int64_t bottom = bits_left_ - static_cast<int64_t>(n);
    if (bottom >= 0) [[likely]] {
      uint64_t w = LoadLE64Padded(data_, size_, static_cast<size_t>(bottom >> 3));
      return (w >> (bottom & 7)) & LowMask(n);
    }
    if (bits_left_ <= 0) return 0;
    uint64_t w = LoadLE64Padded(data_, size_, 0) & LowMask(static_cast<unsigned>(bits_left_));
    return (w << static_cast<unsigned>(-bottom)) & LowMask(n);
  }
  void Skip(unsigned n) { bits_left_ -= n; }
  uint64_t Read(unsigned n) {
    uint64_t v = Peek(n);
    Skip(n);
    return v;
  }
  // Unread bits; negative once the reader went past the start (an over-read).
  int64_t bits_left() const { return bits_left_; }
  bool overflowed() const { return bits_left_ < 0; }
  bool finished() const { return bits_left_ == 0; }

 private:
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  int64_t bits_left_ = 0;
};

}  // namespace deltakv::deltasync::walker
