// IsValidUtf8: whether text is well-formed UTF-8 (RFC 3629: no overlong forms, no surrogates,
// nothing above U+10FFFF), as JSON text must be. Names that end up in a JSON manifest (versions,
// file and tensor names) are checked with it, so that a name that cannot be written is refused
// up front instead of failing half way through a write.
#pragma once

#include <cstdint>
#include <string_view>

namespace deltakv {

inline bool IsValidUtf8(std::string_view text) {
  const auto* p = reinterpret_cast<const uint8_t*>(text.data());
  const uint8_t* const end = p + text.size();
  while (p < end) {
    const uint8_t c = *p;
    if (c < 0x80) {
      ++p;
      continue;
    }
    int extra;
    uint8_t lo = 0x80, hi = 0xBF;  // range of the byte after the lead
    if (c >= 0xC2 && c <= 0xDF) {
      extra = 1;
    } else if (c >= 0xE0 && c <= 0xEF) {
      extra = 2;
      if (c == 0xE0) lo = 0xA0;  // no overlong forms
      if (c == 0xED) hi = 0x9F;  // no surrogates
    } else if (c >= 0xF0 && c <= 0xF4) {
      extra = 3;
      if (c == 0xF0) lo = 0x90;  // no overlong forms
      if (c == 0xF4) hi = 0x8F;  // nothing above U+10FFFF
    } else {
      return false;  // a continuation byte, an overlong lead (C0, C1) or F5..FF
    }
    if (end - p <= extra) return false;
    if (p[1] < lo || p[1] > hi) return false;
    for (int k = 2; k <= extra; ++k) {
      if (p[k] < 0x80 || p[k] > 0xBF) return false;
    }
    p += extra + 1;
  }
  return true;
}

}  // namespace deltakv
