// ReadFileToString reads to the end of the file, whatever stat says, within its limit.
#include "base/file_util.h"

#include <gtest/gtest.h>

#include <string>

#include "test_util.h"

namespace deltakv {
namespace {

using testing::TempDir;

TEST(ReadFileToString, ReadsFilesWhoseStatSizeIsNotTheirs) {
  // /proc files report size 0 and hold text.
  auto status = ReadFileToString("/proc/self/status");
  ASSERT_TRUE(status.ok()) << status.status().ToString();
  EXPECT_NE(status->find("Name:"), std::string::npos);
  auto limits = ReadFileToString("/proc/self/limits", 1 << 20);
  ASSERT_TRUE(limits.ok()) << limits.status().ToString();
  EXPECT_NE(limits->find("Max open files"), std::string::npos);
  // ... and over the limit is still refused.
  EXPECT_EQ(ReadFileToString("/proc/self/status", 10).status().code(),
            StatusCode::kResourceExhausted);
}

TEST(ReadFileToString, LimitsAndSizes) {
  TempDir dir;
  for (size_t n : {size_t{0}, size_t{1}, size_t{4095}, size_t{4096}, size_t{4097}, size_t{100000}}) {
    const std::string text(n, 'x');
    ASSERT_TRUE(WriteFileAtomic(dir / "f", text).ok());
    auto r = ReadFileToString(dir / "f");
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(*r, text) << n;
    auto exact = ReadFileToString(dir / "f", n);
    ASSERT_TRUE(exact.ok()) << n;
    EXPECT_EQ(exact->size(), n);
    if (n > 0) {
      EXPECT_EQ(ReadFileToString(dir / "f", n - 1).status().code(),
                StatusCode::kResourceExhausted)
          << n;
    }
  }
  EXPECT_EQ(ReadFileToString(dir / "missing").status().code(), StatusCode::kIoError);
}

}  // namespace
}  // namespace deltakv
