// IsValidUtf8 against the well-formed byte sequences of RFC 3629 / Unicode table 3-7.
#include "base/utf8.h"

#include <gtest/gtest.h>

#include <string>

namespace deltakv {
namespace {

TEST(Utf8, AcceptsWellFormedText) {
  for (const std::string& s : {std::string(), std::string("plain ascii"), std::string(1, '\0'),
                              std::string("\xc2\x80"), std::string("caf\xc3\xa9"),
                              std::string("\xdf\xbf"), std::string("\xe0\xa0\x80"),
                              std::string("\xe2\x82\xac"), std::string("\xed\x9f\xbf"),
                              std::string("\xee\x80\x80"), std::string("\xef\xbf\xbf"),
                              std::string("\xf0\x90\x80\x80"), std::string("\xf0\x9f\x98\x80"),
                              std::string("\xf4\x8f\xbf\xbf")}) {
    EXPECT_TRUE(IsValidUtf8(s)) << s;
  }
}

TEST(Utf8, RefusesEveryKindOfIllFormedText) {
  for (const std::string& s : {
           std::string("\x80"),              // a lone continuation byte
           std::string("a\xbf"),             // another
           std::string("\xc0\xaf"),          // overlong '/'
           std::string("\xc1\xbf"),          // overlong
           std::string("\xe0\x9f\xbf"),      // overlong three-byte form
           std::string("\xf0\x8f\xbf\xbf"),  // overlong four-byte form
           std::string("\xed\xa0\x80"),      // a surrogate (U+D800)
           std::string("\xed\xbf\xbf"),      // a surrogate (U+DFFF)
           std::string("\xf4\x90\x80\x80"),  // above U+10FFFF
           std::string("\xf5\x80\x80\x80"),  // lead byte above F4
           std::string("\xff"),              // never in UTF-8
           std::string("\xc3"),              // truncated
           std::string("\xe2\x82"),          // truncated
           std::string("\xf0\x9f\x98"),      // truncated
           std::string("\xc3(") ,            // bad continuation
           std::string("\xe2\x28\xa1"),      // bad continuation
           std::string("\xf0\x9f\x28\x80"),  // bad continuation
           std::string("latin-1 caf\xe9"),   // the common case
       }) {
    EXPECT_FALSE(IsValidUtf8(s)) << s;
  }
}

}  // namespace
}  // namespace deltakv
