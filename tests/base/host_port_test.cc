// UnbracketHost and UrlHost: IPv6 hosts in brackets, as URLs write them.
#include "base/host_port.h"

#include <gtest/gtest.h>

namespace deltakv {
namespace {

TEST(HostPort, BracketsComeOffAnIpv6HostOnly) {
  for (const auto& [in, out] : {std::pair<std::string, std::string>{"[::1]", "::1"},
                                {"[fd00::7]", "fd00::7"},
                                {"::1", "::1"},
                                {"10.0.0.7", "10.0.0.7"},
                                {"node-b.example", "node-b.example"},
                                {"", ""}}) {
    std::string host = in;
    EXPECT_TRUE(UnbracketHost(host)) << in;
    EXPECT_EQ(host, out) << in;
  }
  for (const char* bad : {"[]", "[", "[::1", "::1]", "a]", "[[::1]]", "[::1]x", "a[b"}) {
    std::string host = bad;
    EXPECT_FALSE(UnbracketHost(host)) << bad;
  }
}

TEST(HostPort, UrlHostBracketsAHostWithAColon) {
  EXPECT_EQ(UrlHost("::1"), "[::1]");
  EXPECT_EQ(UrlHost("10.0.0.7"), "10.0.0.7");
  EXPECT_EQ(UrlHost("localhost"), "localhost");
  EXPECT_EQ(UrlHost(""), "");
}

}  // namespace
}  // namespace deltakv
