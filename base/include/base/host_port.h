// Hosts as URLs and HOST:PORT addresses write them: an IPv6 address in brackets ("[::1]:8470"),
// which the socket layer takes without them.
//
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <string_view>

namespace deltakv {

// Takes the brackets off a bracketed host ("[::1]" -> "::1"); leaves any other host as it is.
// False for a host with unbalanced, empty or stray brackets ("[]", "[::1", "a]", "[[::1]]").
inline bool UnbracketHost(std::string& host) {
  if (host.empty() || host.front() != '[') return host.find_first_of("[]") == std::string::npos;
  if (host.size() < 3 || host.back() != ']' || host.find_first_of("[]", 1) != host.size() - 1) {
    return false;
  }
  host = host.substr(1, host.size() - 2);
  return true;
}

// The host as URLs and messages write it: an IPv6 address (a host with a colon) in brackets.
inline std::string UrlHost(std::string_view host) {
  return host.find(':') != std::string_view::npos ? "[" + std::string(host) + "]"
                                                  : std::string(host);
}

}  // namespace deltakv
