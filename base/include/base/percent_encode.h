// Percent-encoding (RFC 3986 section 2.1) for URL paths, query values and key parts.
//
// Thread-safety: pure function.
#pragma once

#include <string>
#include <string_view>

namespace deltakv {

// Every byte but the unreserved ones (A-Z a-z 0-9 - . _ ~) as %XX with upper-case hex digits;
// bytes in `also_escape` are encoded too (an unreserved byte a format must not let through).
inline std::string PercentEncode(std::string_view s, std::string_view also_escape = {}) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(s.size());
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    const bool unreserved = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
                            (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_' ||
                            c == '~';
    if (unreserved && also_escape.find(ch) == std::string_view::npos) {
      out += ch;
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

}  // namespace deltakv
