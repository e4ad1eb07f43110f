// The sidecar's log lines (sidecar/src/log/log.h): text and JSON forms, fields, timestamps.
#include "log/log.h"

#include <gtest/gtest.h>

namespace deltakv::log {
namespace {

constexpr int64_t kNs = 1735787045678901234;  // 2025-01-02T03:04:05.678901234Z

TEST(LogTest, Rfc3339UtcWithMilliseconds) {
  EXPECT_EQ(Rfc3339Utc(kNs), "2025-01-02T03:04:05.678Z");
  EXPECT_EQ(Rfc3339Utc(0), "1970-01-01T00:00:00.000Z");
}

TEST(LogTest, JsonLineHasTsLevelMsgThenFields) {
  std::string line = FormatLine(Format::kJson, Level::kWarn, "sync aborted",
                                {{"sync_id", "s000002"}, {"ms", 1.5}, {"msg", "ignored"}}, kNs);
  EXPECT_EQ(line,
            R"({"ts":"2025-01-02T03:04:05.678Z","level":"warn","msg":"sync aborted",)"
            R"("sync_id":"s000002","ms":1.5})");
}

TEST(LogTest, TextLineQuotesValuesWithSpaces) {
  EXPECT_EQ(FormatLine(Format::kText, Level::kInfo, "sync live", {{"sync_id", "s1"}, {"ms", 3}},
                       kNs),
            "deltakv sidecar: sync live sync_id=s1 ms=3");
  EXPECT_EQ(FormatLine(Format::kText, Level::kError, "sync diverged", {{"error", "rank 1: gone"}},
                       kNs),
            "deltakv sidecar: error: sync diverged error=\"rank 1: gone\"");
}

TEST(LogTest, ParseFormat) {
  EXPECT_EQ(*ParseFormat("json"), Format::kJson);
  EXPECT_EQ(*ParseFormat("text"), Format::kText);
  EXPECT_FALSE(ParseFormat("xml").ok());
}

}  // namespace
}  // namespace deltakv::log
