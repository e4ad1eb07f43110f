// MappedFile: a watched mapping of a file that shrinks reads zeros and reports the change
// instead of dying of SIGBUS; unwatched mappings and other SIGBUS keep the kernel's behaviour.
#include "base/mapped_file.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>
#include <string>
#include <vector>

#include "test_util.h"

namespace deltakv {
namespace {

using testing::TempDir;
using testing::WriteAll;

constexpr size_t kFileBytes = 256 << 10;

// Reads one byte the compiler cannot drop.
uint8_t ReadByte(const MappedFile& f, size_t offset) {
  return *static_cast<const volatile uint8_t*>(f.bytes().data() + offset);
}

TEST(MappedFile, AWatchedFileThatShrinksReadsZerosAndReportsTheChange) {
  TempDir dir;
  const std::string path = dir / "f";
  WriteAll(path, std::string(kFileBytes, '\xab'));
  auto f = MappedFile::OpenReadOnly(path, MappedFile::Shrink::kReadZeros);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_TRUE(f->CheckUnchanged().ok());
  ASSERT_EQ(truncate(path.c_str(), 4096), 0);

  EXPECT_EQ(ReadByte(*f, 0), 0xab);               // still in the file
  EXPECT_EQ(ReadByte(*f, kFileBytes - 1), 0x00);  // past its new end: SIGBUS unwatched
  EXPECT_EQ(ReadByte(*f, 100'000), 0x00);
  const Status s = f->CheckUnchanged();
  EXPECT_EQ(s.code(), StatusCode::kIoError);
  EXPECT_NE(s.message().find("'" + path + "' changed while being read"), std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("shrank"), std::string::npos) << s.message();

  // The watch moves with the mapping.
  MappedFile moved = std::move(f).value();
  EXPECT_EQ(moved.CheckUnchanged().code(), StatusCode::kIoError);
}

TEST(MappedFile, AnUnwatchedFileThatShrinksStillRaisesSigbus) {
  TempDir dir;
  WriteAll(dir / "watched", std::string(kFileBytes, 'w'));
  WriteAll(dir / "plain", std::string(kFileBytes, 'p'));
  EXPECT_EXIT(
      {
        // A watched mapping installs the handler; faults elsewhere still kill.
        auto watched = MappedFile::OpenReadOnly(dir / "watched", MappedFile::Shrink::kReadZeros);
        auto plain = MappedFile::OpenReadOnly(dir / "plain");
        if (!watched.ok() || !plain.ok() || truncate((dir / "plain").c_str(), 0) != 0) _exit(1);
        ReadByte(*plain, kFileBytes - 1);
        _exit(0);
      },
      ::testing::KilledBySignal(SIGBUS), "");
  // A SIGBUS sent by a process is not a fault of a watched mapping either.
  EXPECT_EXIT(
      {
        auto watched = MappedFile::OpenReadOnly(dir / "watched", MappedFile::Shrink::kReadZeros);
        if (!watched.ok()) _exit(1);
        raise(SIGBUS);
        _exit(0);
      },
      ::testing::KilledBySignal(SIGBUS), "");
}

TEST(MappedFile, CheckUnchangedSeesWritesAndSizeChangesButNotAReplacedFile) {
  TempDir dir;
  const std::string path = dir / "f";
  WriteAll(path, std::string(kFileBytes, 'a'));
  {
    auto f = MappedFile::OpenReadOnly(path, MappedFile::Shrink::kReadZeros);
    ASSERT_TRUE(f.ok());
    // Written in place, same size: the modification time says so (set apart explicitly, as
    // two writes within one clock tick can share a time stamp).
    const timespec times[2] = {{0, UTIME_OMIT}, {12345, 0}};
    ASSERT_EQ(utimensat(AT_FDCWD, path.c_str(), times, 0), 0);
    const Status s = f->CheckUnchanged();
    EXPECT_EQ(s.code(), StatusCode::kIoError);
    EXPECT_NE(s.message().find("written to"), std::string::npos) << s.message();
  }
  {
    auto f = MappedFile::OpenReadOnly(path, MappedFile::Shrink::kReadZeros);
    ASSERT_TRUE(f.ok());
    ASSERT_EQ(truncate(path.c_str(), kFileBytes + 1), 0);
    EXPECT_NE(f->CheckUnchanged().message().find("now " + std::to_string(kFileBytes + 1)),
              std::string::npos);
  }
  {
    // Replaced by a rename: the mapping still holds the old file, whole.
    auto f = MappedFile::OpenReadOnly(path, MappedFile::Shrink::kReadZeros);
    ASSERT_TRUE(f.ok());
    WriteAll(path + ".new", "x");
    ASSERT_EQ(rename((path + ".new").c_str(), path.c_str()), 0);
    EXPECT_TRUE(f->CheckUnchanged().ok());
    EXPECT_EQ(ReadByte(*f, kFileBytes - 1), 'a');
  }
}

TEST(MappedFile, ManyWatchedFilesAtOnceAndAfterwards) {
  TempDir dir;
  std::vector<MappedFile> maps;
  for (int i = 0; i < 600; ++i) {  // more than one block of watch entries
    const std::string path = dir / ("f" + std::to_string(i));
    WriteAll(path, std::string(8192, 'x'));
    auto f = MappedFile::OpenReadOnly(path, MappedFile::Shrink::kReadZeros);
    ASSERT_TRUE(f.ok());
    maps.push_back(std::move(f).value());
  }
  ASSERT_EQ(truncate((dir / "f599").c_str(), 0), 0);
  EXPECT_EQ(ReadByte(maps[599], 8191), 0);
  EXPECT_EQ(ReadByte(maps[598], 8191), 'x');
  EXPECT_FALSE(maps[599].CheckUnchanged().ok());
  EXPECT_TRUE(maps[598].CheckUnchanged().ok());
  maps.clear();  // the entries are reused
  WriteAll(dir / "again", std::string(8192, 'y'));
  auto f = MappedFile::OpenReadOnly(dir / "again", MappedFile::Shrink::kReadZeros);
  ASSERT_TRUE(f.ok());
  ASSERT_EQ(truncate((dir / "again").c_str(), 0), 0);
  EXPECT_EQ(ReadByte(*f, 0), 0);
  EXPECT_FALSE(f->CheckUnchanged().ok());
}

}  // namespace
}  // namespace deltakv
