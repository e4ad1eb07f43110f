// XorDigest: a digest of the decoded bytes X of one delta frame entry that a reader checks in
// time proportional to X's nonzero bytes (deltasync/FORMAT.md §2.5, with test vectors).
//
// X is read as little-endian 64-bit words w_j = X[8j .. 8j+8) (the last one zero-padded) and
//   D = sum over j of w_j * K(j)   (mod 2^128, w_j and K(j) as unsigned integers)
// where K(j) is the splitmix64 output for j:
//   z = j + 0x9E3779B97F4A7C15 (mod 2^64); z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9;
//   z = (z ^ (z >> 27)) * 0x94D049BB133111EB; K(j) = z ^ (z >> 31).
// A zero word adds nothing, so a decoder that never materializes zero runs (the sparse walker)
// feeds it only the runs it delivers, in any segmentation: bytes of one word split over
// several runs add up to the same product, because the sum is linear and the parts occupy
// disjoint bytes. Any change confined to one word changes D (|d| * K < 2^128); it is a check
// against corruption and decoder faults, not a cryptographic hash (the objects' sha256 is).
//
// Written as 32 lowercase hex digits, the most significant first.
//
// Thread-safety: values; a builder is used by one thread at a time.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "base/le_bytes.h"
#include "base/status.h"

namespace deltakv::deltasync {

struct XorDigest {
  uint64_t hi = 0;
  uint64_t lo = 0;
  friend bool operator==(const XorDigest&, const XorDigest&) = default;
};

// K(j) above.
inline uint64_t XorDigestKey(uint64_t j) {
  uint64_t z = j + 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// 32 lowercase hex digits; parsing accepts exactly that (InvalidArgument naming `what`).
std::string FormatXorDigest(const XorDigest& d);
StatusOr<XorDigest> ParseXorDigest(std::string_view text, std::string_view what);

class XorDigestBuilder {
 public:
  // Adds `bytes` found at `position` of X. The byte ranges of distinct calls must not overlap;
  // calls may come in any order. Zero bytes may be included or left out.
  void Add(uint64_t position, std::span<const uint8_t> bytes) {
    if (bytes.size() <= 8) {
      AddShort(position, bytes.data(), bytes.size());
    } else {
      AddLong(position, bytes.data(), bytes.size());
    }
  }
  // Adds one byte found at `position` (a decoder's nonzero bytes in output order): bytes of one
  // word are gathered and multiplied once, when a byte of another word comes. REQUIRES:
  // positions increase from call to call, and Add covers none of them.
  void AddByte(uint64_t position, uint8_t value) {
    const uint64_t j = position >> 3;
    if (j != word_) {
      sum_ += static_cast<U128>(pending_) * XorDigestKey(word_);
      word_ = j;
      pending_ = 0;
    }
    pending_ |= uint64_t{value} << (8 * (position & 7));
  }
  // Adds one byte found at `position` on its own: one product per byte and no branch, for
  // bytes whose words are too scattered for AddByte's gathering to pay (a branch per byte that
  // mispredicts). REQUIRES: as Add; may be mixed with AddByte for other positions.
  void AddLoose(uint64_t position, uint8_t value) {
    sum_ +=
        static_cast<U128>(uint64_t{value} << (8 * (position & 7))) * XorDigestKey(position >> 3);
  }
  XorDigest value() const {
    const U128 sum = sum_ + static_cast<U128>(pending_) * XorDigestKey(word_);
    return {static_cast<uint64_t>(sum >> 64), static_cast<uint64_t>(sum)};
  }

 private:
  __extension__ typedef unsigned __int128 U128;

  // Up to 8 bytes (the common run): they land in word j and maybe j + 1.
  void AddShort(uint64_t position, const uint8_t* p, size_t n) {
    if (n == 0) return;
    const uint64_t j = position >> 3;
    const U128 v = static_cast<U128>(LoadShortLE(p, n)) << (8 * (position & 7));
    sum_ += static_cast<U128>(static_cast<uint64_t>(v)) * XorDigestKey(j);
    const uint64_t spill = static_cast<uint64_t>(v >> 64);
    if (spill != 0) sum_ += static_cast<U128>(spill) * XorDigestKey(j + 1);
  }
  void AddLong(uint64_t position, const uint8_t* p, size_t n);

  U128 sum_ = 0;  // the running sum mod 2^128
  // AddByte's word in progress: index and the bytes gathered so far.
  uint64_t word_ = 0;
  uint64_t pending_ = 0;
};

// The digest of a whole dense X (its zero words are skipped at memory speed).
XorDigest ComputeXorDigest(std::span<const uint8_t> x);

}  // namespace deltakv::deltasync
