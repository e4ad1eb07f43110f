#include "mount/volume_reader.h"

#include <gtest/gtest.h>

#include "fake_chunks.h"
#include "test_util.h"

namespace deltakv::mount {
namespace {

using testing::ChunkOf;
using testing::FakeSource;

struct Fixture {
  deltakv::testing::TempDir tmp;
  FakeSource src;
  deltasync::VolumeManifest manifest;
  std::string content;
  std::vector<std::string> errors;

  // One file of `n` chunks of 100 bytes each, chunk i filled with 'a' + i.
  explicit Fixture(int n) {
    deltasync::VolumeFile f;
    f.path = "dir/f.bin";
    for (int i = 0; i < n; ++i) {
      std::string bytes(100, static_cast<char>('a' + i));
      src.Add(bytes);
      f.chunks.push_back(ChunkOf(bytes, content.size()));
      content += bytes;
    }
    f.size = content.size();
    manifest.files.push_back(f);
  }
  std::string Join(const std::vector<ReadSlice>& slices) {
    std::string out;
    for (const auto& s : slices) out += s.chunk->substr(s.offset, s.size);
    return out;
  }
};

TEST(VolumeReader, ReadsAnyRangeClippedToTheFile) {
  Fixture fx(5);
  auto cache = ChunkCache::Open({fx.tmp.path(), 1 << 20, 1 << 20}, fx.src.source());
  ASSERT_TRUE(cache.ok());
  VolumeReader reader(fx.manifest, **cache, nullptr, {}, nullptr);
  for (uint64_t off : {0, 1, 99, 100, 150, 399, 499}) {
    for (uint64_t size : {1, 50, 100, 101, 250, 1000}) {
      auto got = reader.Read(0, off, size, nullptr);
      ASSERT_TRUE(got.ok());
      EXPECT_EQ(fx.Join(*got), fx.content.substr(off, size)) << off << "+" << size;
    }
  }
  auto past = reader.Read(0, 500, 10, nullptr);
  ASSERT_TRUE(past.ok());
  EXPECT_TRUE(past->empty());
}

TEST(VolumeReader, SequentialReadsPrefetchTheNextChunks) {
  Fixture fx(10);
  auto cache = ChunkCache::Open({fx.tmp.path(), 1 << 20, 1 << 20}, fx.src.source());
  ASSERT_TRUE(cache.ok());
  Prefetcher prefetcher(**cache, {2, 1 << 20});
  VolumeReader reader(fx.manifest, **cache, &prefetcher, {.chunks = 3}, nullptr);
  ReadStream stream;
  ASSERT_TRUE(reader.Read(0, 0, 100, &stream).ok());  // chunk 0, prefetches 1..3
  prefetcher.WaitIdle();
  EXPECT_EQ(fx.src.fetches(), 4);
  for (int i = 1; i <= 3; ++i) EXPECT_TRUE((*cache)->Has(fx.manifest.files[0].chunks[i].digest));
  EXPECT_FALSE((*cache)->Has(fx.manifest.files[0].chunks[4].digest));
  ASSERT_TRUE(reader.Read(0, 100, 100, &stream).ok());  // chunk 1: sequential, adds chunk 4
  prefetcher.WaitIdle();
  EXPECT_EQ(fx.src.fetches(), 5);
  // A jump far ahead is not sequential: nothing past it is prefetched.
  ASSERT_TRUE(reader.Read(0, 800, 10, &stream).ok());
  prefetcher.WaitIdle();
  EXPECT_EQ(fx.src.fetches(), 6);
  EXPECT_FALSE((*cache)->Has(fx.manifest.files[0].chunks[9].digest));
}

TEST(VolumeReader, ReadaheadByBytesCoversTheBudget) {
  Fixture fx(10);
  auto cache = ChunkCache::Open({fx.tmp.path(), 1 << 20, 1 << 20}, fx.src.source());
  ASSERT_TRUE(cache.ok());
  Prefetcher prefetcher(**cache, {2, 1 << 20});
  VolumeReader reader(fx.manifest, **cache, &prefetcher, {.chunks = 0, .bytes = 250}, nullptr);
  ReadStream stream;
  ASSERT_TRUE(reader.Read(0, 0, 10, &stream).ok());
  prefetcher.WaitIdle();
  EXPECT_EQ(fx.src.fetches(), 4);  // chunk 0, then 1..3 (300 bytes >= 250)
}

TEST(VolumeReader, AFailedChunkFailsTheReadAndIsReportedWithFileAndChunk) {
  Fixture fx(3);
  const auto& bad = fx.manifest.files[0].chunks[1];
  fx.src.Remove(bad.digest);
  auto cache = ChunkCache::Open({fx.tmp.path(), 1 << 20, 1 << 20}, fx.src.source());
  ASSERT_TRUE(cache.ok());
  VolumeReader reader(fx.manifest, **cache, nullptr, {},
                      [&](const std::string& line) { fx.errors.push_back(line); });
  auto got = reader.Read(0, 50, 100, nullptr);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), StatusCode::kNotFound);
  ASSERT_EQ(fx.errors.size(), 1u);
  EXPECT_NE(fx.errors[0].find("dir/f.bin"), std::string::npos);
  EXPECT_NE(fx.errors[0].find("sha256:" + bad.digest), std::string::npos);
  ASSERT_TRUE(reader.Read(0, 0, 100, nullptr).ok());    // chunk 0 alone is fine
  ASSERT_TRUE(reader.Read(0, 200, 100, nullptr).ok());  // and so is chunk 2
}

}  // namespace
}  // namespace deltakv::mount
