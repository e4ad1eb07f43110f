// Adler-32 (RFC 1950, zlib-compatible): full pass, combine, and incremental update.
//
// With bytes D_0..D_{n-1} and M = 65521:
//   A = 1 + sum D_j            (mod M)
//   B = n + sum (n - j) * D_j  (mod M)        adler = (B << 16) | A
// Changing byte i from o to v (delta d = v - o) moves A by d and B by (n - i) * d. Over a set
// of changed bytes, S1 = sum d_k and S2 = sum (i_k mod M) * d_k are enough:
//   A' = A + S1,   B' = B + (n mod M) * S1 - S2      (mod M)
// The partial sums (S1, S2) of disjoint sets of positions add, so several owners of parts of a
// tensor (threads, tensor-parallel ranks) each compute theirs over *canonical* positions and a
// single reduction checks the whole tensor, at O(1) per changed byte.
//
// Thread-safety: free functions are pure; an AdlerDelta is a value owned by one thread at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace deltakv::deltasync {

inline constexpr uint32_t kAdlerModulus = 65521;
inline constexpr uint32_t kAdlerInitial = 1;

// Returns the Adler-32 of `data` continued from `adler` (zlib's adler32(adler, data, len) with
// a non-null buffer; an empty `data` returns `adler` with each half reduced mod M, as zlib
// does). Vectorized where the CPU allows (chosen once, at first call); the result is identical
// to zlib's for every input, including initial values whose halves are >= M.
uint32_t Adler32(std::span<const uint8_t> data, uint32_t adler = kAdlerInitial);

// Returns the Adler-32 of X||Y given adler1 = Adler32(X), adler2 = Adler32(Y), len2 = |Y|
// (zlib's adler32_combine64, bit for bit; like zlib, a len2 >= 2^63, negative in zlib's signed
// type, gives 0xFFFFFFFF). O(1).
uint32_t Adler32Combine(uint32_t adler1, uint32_t adler2, uint64_t len2);

// The implementations behind Adler32, exposed so tests and benchmarks can run each one.
enum class Adler32Impl : uint8_t { kScalar, kSsse3, kAvx2 };
// The implementations this CPU can run, slowest first; Adler32 uses the last. Never empty.
std::vector<Adler32Impl> SupportedAdler32Impls();
std::string_view Adler32ImplName(Adler32Impl impl);
// Adler32 through one implementation. REQUIRES: `impl` is in SupportedAdler32Impls().
uint32_t Adler32With(Adler32Impl impl, std::span<const uint8_t> data,
                     uint32_t adler = kAdlerInitial);

// Partial sums of an incremental update over a set of changed byte positions.
// Positions are canonical byte offsets within one tensor. Adding the same position twice is a
// caller error (the sums would count it twice).
class AdlerDelta {
 public:
  AdlerDelta() = default;
  // Partial sums received from another owner (for example over shared memory), s1 and s2 as
  // returned by s1() and s2() (values >= 65521 are reduced).
  static AdlerDelta FromSums(uint32_t s1, uint32_t s2) {
    AdlerDelta d;
    d.s1_ = s1 % kAdlerModulus;
    d.s2_ = s2 % kAdlerModulus;
    return d;
  }

  // Byte at `position` changes from `old_byte` to `new_byte`. O(1).
  void AddByte(uint64_t position, uint8_t old_byte, uint8_t new_byte);
  // Bytes [position, position + old_bytes.size()) change from old_bytes[k] to
  // old_bytes[k] ^ xor_bytes[k]. REQUIRES: old_bytes.size() == xor_bytes.size().
  // O(run length): runs of a few hundred bytes or more go through the vectorized Adler-32
  // kernels (several GB/s). Zero XOR bytes contribute nothing, so a run may include unchanged
  // bytes.
  void AddXorRun(uint64_t position, std::span<const uint8_t> old_bytes,
                 std::span<const uint8_t> xor_bytes);
  // Bytes [position, position + bytes.size()) change from zero to bytes[k]: the sums of the
  // bytes themselves, so that over every position of a tensor Apply(Adler32 of n zero bytes, n)
  // is the tensor's Adler-32 (what a rank reports when it checksums its live weights). Runs of
  // a few hundred bytes or more go through the vectorized kernels.
  void AddBytes(uint64_t position, std::span<const uint8_t> bytes);
  // Adds another owner's partial sums (disjoint positions). O(1).
  void Merge(const AdlerDelta& other);

  // Both reduced to [0, M).
  uint32_t s1() const;
  uint32_t s2() const;

  // Returns the checksum after the update of a tensor of `length` bytes whose checksum
  // before the update was `adler_before`.
  uint32_t Apply(uint32_t adler_before, uint64_t length) const;

 private:
  // Signed running sums; each changed byte adds |term| < 2^24 to s2_ (pending_ counts the
  // terms since the last reduction), and Reduce() runs long before an overflow.
  int64_t s1_ = 0;
  int64_t s2_ = 0;
  uint64_t pending_ = 0;
  void Reduce();
};

}  // namespace deltakv::deltasync
