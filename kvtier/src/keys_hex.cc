// BlockKey's canonical bytes and hex form (docs/KEYS.md §2).
#include <bit>
#include <cstring>
#include <string>

#include "kvtier/keys.h"

namespace deltakv::kvtier {
namespace {

// Whole-word loads and stores (not byte by byte): keys are written right before XXH3 reads
// them back as 64-bit words, and byte stores would stall store-to-load forwarding.
uint64_t ToBigEndian64(uint64_t v) {
  if constexpr (std::endian::native == std::endian::little) return __builtin_bswap64(v);
  return v;
}

uint64_t LoadBigEndian64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, sizeof(v));
  return ToBigEndian64(v);
}

void StoreBigEndian64(uint64_t v, uint8_t* p) {
  v = ToBigEndian64(v);
  std::memcpy(p, &v, sizeof(v));
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

std::array<uint8_t, 16> BlockKey::Bytes() const {
  std::array<uint8_t, 16> out;
  StoreBigEndian64(hi, out.data());
  StoreBigEndian64(lo, out.data() + 8);
  return out;
}

BlockKey BlockKey::FromBytes(std::span<const uint8_t, 16> bytes) {
  return BlockKey{LoadBigEndian64(bytes.data() + 8), LoadBigEndian64(bytes.data())};
}

std::string BlockKey::ToHex() const {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(32, '0');
  const std::array<uint8_t, 16> b = Bytes();
  for (size_t i = 0; i < b.size(); ++i) {
    out[2 * i] = kDigits[b[i] >> 4];
    out[2 * i + 1] = kDigits[b[i] & 0xf];
  }
  return out;
}

StatusOr<BlockKey> BlockKey::FromHex(std::string_view hex) {
  if (hex.size() != 32) {
    return InvalidArgument("block key: expected 32 hex digits, got " + std::to_string(hex.size()) +
                           " characters");
  }
  std::array<uint8_t, 16> b;
  for (size_t i = 0; i < 32; ++i) {
    const int v = HexValue(hex[i]);
    if (v < 0) {
      return InvalidArgument("block key: character " + std::to_string(i) + " is not a hex digit");
    }
    if (i % 2 == 0) {
      b[i / 2] = static_cast<uint8_t>(v << 4);
    } else {
      b[i / 2] = static_cast<uint8_t>(b[i / 2] | v);
    }
  }
  return FromBytes(b);
}

std::string_view HashKindName(HashKind kind) {
  switch (kind) {
    case HashKind::kXxh3:
      return "xxh3";
    case HashKind::kSha256:
      return "sha256";
  }
  return "unknown";
}

}  // namespace deltakv::kvtier
