#include "deltasync/xor_digest.h"

namespace deltakv::deltasync {

namespace {

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

}  // namespace

std::string FormatXorDigest(const XorDigest& d) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out(32, '0');
  for (int i = 0; i < 16; ++i) {
    out[15 - i] = kHex[(d.hi >> (4 * i)) & 15];
    out[31 - i] = kHex[(d.lo >> (4 * i)) & 15];
  }
  return out;
}

StatusOr<XorDigest> ParseXorDigest(std::string_view text, std::string_view what) {
  if (text.size() != 32) {
    return InvalidArgument(std::string(what) + " must be 32 lowercase hex digits, got " +
                           std::to_string(text.size()) + " characters");
  }
  XorDigest d;
  for (size_t i = 0; i < 32; ++i) {
    const int v = HexValue(text[i]);
    if (v < 0) return InvalidArgument(std::string(what) + " must be 32 lowercase hex digits");
    uint64_t& half = i < 16 ? d.hi : d.lo;
    half = (half << 4) | static_cast<uint64_t>(v);
  }
  return d;
}

void XorDigestBuilder::AddLong(uint64_t position, const uint8_t* p, size_t n) {
  uint64_t j = position >> 3;
  const unsigned shift = static_cast<unsigned>(position & 7);
  if (shift != 0) {
    // The run starts inside word j: its first bytes occupy the word's high bytes.
    const size_t take = 8 - shift;
    sum_ += static_cast<U128>(LoadShortLE(p, take) << (8 * shift)) * XorDigestKey(j);
    p += take;
    n -= take;
    ++j;
  }
  for (; n >= 8; n -= 8, p += 8, ++j) {
    const uint64_t w = LoadLE64(p);
    if (w != 0) sum_ += static_cast<U128>(w) * XorDigestKey(j);
  }
  if (n != 0) sum_ += static_cast<U128>(LoadShortLE(p, n)) * XorDigestKey(j);
}

XorDigest ComputeXorDigest(std::span<const uint8_t> x) {
  XorDigestBuilder b;
  // Skip zero stretches 64 bytes at a time, then add the words of each nonzero stretch.
  const uint8_t* base = x.data();
  const size_t n = x.size();
  size_t i = 0;
  while (i + 64 <= n) {
    uint64_t any = 0;
    for (size_t k = 0; k < 64; k += 8) any |= LoadLE64(base + i + k);
    if (any != 0) b.Add(i, x.subspan(i, 64));
    i += 64;
  }
  if (i < n) b.Add(i, x.subspan(i));
  return b.value();
}

}  // namespace deltakv::deltasync
