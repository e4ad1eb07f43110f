// Bit readers for zstd: a forward little-endian reader (FSE table descriptions) and backward
// readers (Huffman streams and the sequence bitstream, read from the end toward the start):
// a byte-addressed one, the reference the tests hold the fast container reader to, and the
// fast one the decoder uses.
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

// The same stream read through a 64-bit container (the layout libzstd's decoder uses): a read
// is two shifts of a register and the container is refilled by Reload() between groups of
// reads of at most 56 bits. For hot loops (Huffman streams, the sequence bitstream). Past the
// start, reads return unspecified (but in-range for their width) values and overflowed() turns
// true.
class FastBackwardBitReader {
 public:
  // Returns false when the stream is empty or its last byte is 0 (no end marker).
  bool Init(const uint8_t* data, size_t size) {
    if (size == 0 || data[size - 1] == 0) return false;
    start_ = data;
    const unsigned marker = 9 - static_cast<unsigned>(std::bit_width(data[size - 1]));
    if (size >= 8) {
      ptr_ = data + size - 8;
      std::memcpy(&container_, ptr_, 8);
      consumed_ = marker;
    } else {
      // Short stream: its bytes at the bottom of the container, the missing top ones counted as
      // consumed.
      ptr_ = data;
      container_ = 0;
      std::memcpy(&container_, data, size);
      consumed_ = marker + 8 * static_cast<unsigned>(8 - size);
    }
    return true;
  }
  // REQUIRES: n <= 56, and at most 56 bits read since the last Reload().
  uint64_t Read(unsigned n) {
    const uint64_t v = ((container_ << (consumed_ & 63)) >> 1) >> (63 - n);
    consumed_ += n;
    return v;
  }
  // Read without consuming, and consuming without reading (Huffman: peek the table's width,
  // skip the code's length). Same requirements as Read.
  uint64_t Peek(unsigned n) const { return ((container_ << (consumed_ & 63)) >> 1) >> (63 - n); }
  void Skip(unsigned n) { consumed_ += n; }
  // Refills the container so that at least 56 unread bits are in it (or all that are left).
  void Reload() {
    if (ptr_ >= start_ + 8) [[likely]] {
      ptr_ -= consumed_ >> 3;
      consumed_ &= 7;
      std::memcpy(&container_, ptr_, 8);
      return;
    }
    if (ptr_ == start_ || consumed_ > 64) return;
    size_t back = consumed_ >> 3;
    if (back > static_cast<size_t>(ptr_ - start_)) back = static_cast<size_t>(ptr_ - start_);
    ptr_ -= back;
    consumed_ -= static_cast<unsigned>(8 * back);
    std::memcpy(&container_, ptr_, 8);
  }
  // Unread bits; negative once the reader went past the start.
  int64_t bits_left() const {
    return static_cast<int64_t>(ptr_ - start_) * 8 + 64 - static_cast<int64_t>(consumed_);
  }
  bool overflowed() const { return bits_left() < 0; }
  bool finished() const { return bits_left() == 0; }

 private:
  const uint8_t* start_ = nullptr;
  const uint8_t* ptr_ = nullptr;  // the container holds the 8 bytes at ptr_
  uint64_t container_ = 0;
  unsigned consumed_ = 0;  // bits of the container already read, from its top
};

}  // namespace deltakv::deltasync::walker
