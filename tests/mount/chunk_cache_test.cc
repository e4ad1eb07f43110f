#include "mount/chunk_cache.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <thread>
#include <vector>

#include "fake_chunks.h"
#include "mount/prefetcher.h"
#include "test_util.h"

namespace deltakv::mount {
namespace {

namespace fs = std::filesystem;
using testing::ChunkOf;
using testing::FakeSource;

// Sum of the sizes of the regular files under the cache's sha256/ directory.
uint64_t DiskUsage(const std::string& dir, uint64_t* files = nullptr) {
  uint64_t bytes = 0, n = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir + "/sha256")) {
    if (e.is_regular_file()) {
      bytes += e.file_size();
      ++n;
    }
  }
  if (files != nullptr) *files = n;
  return bytes;
}

std::string CachePath(const std::string& dir, const std::string& digest) {
  return dir + "/sha256/" + digest.substr(0, 2) + "/" + digest;
}

std::unique_ptr<ChunkCache> OpenCache(const std::string& dir, FakeSource& src,
                                      uint64_t disk_bytes = 1 << 20,
                                      uint64_t memory_bytes = 1 << 20) {
  auto cache = ChunkCache::Open({dir, disk_bytes, memory_bytes}, src.source());
  EXPECT_TRUE(cache.ok()) << cache.status().ToString();
  return cache.ok() ? std::move(cache).value() : nullptr;
}

TEST(ChunkCache, ServesFromSourceThenMemoryThenDisk) {
  deltakv::testing::TempDir tmp;
  FakeSource src;
  const std::string a(1000, 'a');
  src.Add(a);
  {
    auto cache = OpenCache(tmp.path(), src);
    auto first = cache->Get(ChunkOf(a));
    ASSERT_TRUE(first.ok()) << first.status().ToString();
    EXPECT_EQ(**first, a);
    auto second = cache->Get(ChunkOf(a));
    ASSERT_TRUE(second.ok());
    EXPECT_EQ(src.fetches(), 1);
    EXPECT_EQ(cache->stats().memory_hits, 1u);
    EXPECT_EQ(testing::Sha256Hex(deltakv::testing::ReadAll(CachePath(tmp.path(), ChunkOf(a).digest))),
              ChunkOf(a).digest);
  }
  auto reopened = OpenCache(tmp.path(), src);
  EXPECT_EQ(reopened->stats().disk_files, 1u);
  auto third = reopened->Get(ChunkOf(a));
  ASSERT_TRUE(third.ok());
  EXPECT_EQ(**third, a);
  EXPECT_EQ(src.fetches(), 1);
  EXPECT_EQ(reopened->stats().disk_hits, 1u);
}

TEST(ChunkCache, DiskStaysUnderItsBoundEvictingLeastRecentlyUsed) {
  deltakv::testing::TempDir tmp;
  FakeSource src;
  std::vector<std::string> chunks;
  for (char c = 'a'; c <= 'h'; ++c) {
    chunks.emplace_back(1000, c);
    src.Add(chunks.back());
  }
  // Room for three chunks on disk; memory holds none, so every re-read goes to disk.
  auto cache = OpenCache(tmp.path(), src, 3000, 0);
  ASSERT_TRUE(cache->Get(ChunkOf(chunks[0])).ok());
  ASSERT_TRUE(cache->Get(ChunkOf(chunks[1])).ok());
  ASSERT_TRUE(cache->Get(ChunkOf(chunks[2])).ok());
  ASSERT_TRUE(cache->Get(ChunkOf(chunks[0])).ok());  // now b is the least recently used
  ASSERT_TRUE(cache->Get(ChunkOf(chunks[3])).ok());
  EXPECT_TRUE(fs::exists(CachePath(tmp.path(), ChunkOf(chunks[0]).digest)));
  EXPECT_FALSE(fs::exists(CachePath(tmp.path(), ChunkOf(chunks[1]).digest)));
  EXPECT_EQ(src.fetches(), 4);
  for (const std::string& c : chunks) {
    ASSERT_TRUE(cache->Get(ChunkOf(c)).ok());
    uint64_t files = 0;
    EXPECT_LE(DiskUsage(tmp.path(), &files), 3000u);
    EXPECT_LE(files, 3u);
  }
  EXPECT_EQ(cache->stats().disk_bytes, DiskUsage(tmp.path()));
  // A chunk larger than the whole bound is served but never stored.
  const std::string big(5000, 'z');
  src.Add(big);
  auto got = cache->Get(ChunkOf(big));
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(**got, big);
  EXPECT_FALSE(fs::exists(CachePath(tmp.path(), ChunkOf(big).digest)));
  EXPECT_LE(DiskUsage(tmp.path()), 3000u);
}

// Regression: an eviction used to drop the reservation of a chunk whose temporary file was
// still being written; the file then sat on disk uncounted and the directory went over its
// bound (three 256 KiB chunks under a 600,000-byte bound).
TEST(ChunkCache, ConcurrentWritersNeverTakeTheDirectoryOverItsBound) {
  deltakv::testing::TempDir tmp;
  FakeSource src;
  std::vector<std::string> chunks;
  for (int i = 0; i < 24; ++i) {
    chunks.emplace_back(256 << 10, static_cast<char>('A' + i));
    src.Add(chunks.back());
  }
  const uint64_t limit = 600000;
  auto cache = OpenCache(tmp.path(), src, limit, 0);
  std::atomic<bool> done{false};
  std::atomic<uint64_t> worst{0};
  // The cache's own count (files plus the space reserved by files being written), sampled
  // under its lock. A walk of the directory cannot be the monitor: it is not a snapshot, and it
  // would add a file evicted early in the walk to one written later.
  std::thread monitor([&] {
    while (!done) worst = std::max(worst.load(), cache->stats().disk_bytes);
  });
  std::vector<std::thread> readers;
  for (int t = 0; t < 4; ++t) {
    readers.emplace_back([&, t] {
      for (int round = 0; round < 3; ++round) {
        for (size_t i = t; i < chunks.size(); i += 2) {
          auto got = cache->Get(ChunkOf(chunks[i]));
          EXPECT_TRUE(got.ok() && **got == chunks[i]);
        }
      }
    });
  }
  for (auto& r : readers) r.join();
  done = true;
  monitor.join();
  EXPECT_LE(worst.load(), limit);
  EXPECT_LE(DiskUsage(tmp.path()), limit);
  EXPECT_EQ(cache->stats().disk_bytes, DiskUsage(tmp.path()));
}

TEST(ChunkCache, ReopeningWithASmallerBoundEvictsDownToIt) {
  deltakv::testing::TempDir tmp;
  FakeSource src;
  std::vector<std::string> chunks;
  for (char c = 'a'; c <= 'e'; ++c) {
    chunks.emplace_back(1000, c);
    src.Add(chunks.back());
  }
  {
    auto cache = OpenCache(tmp.path(), src, 10000);
    for (const auto& c : chunks) ASSERT_TRUE(cache->Get(ChunkOf(c)).ok());
  }
  // A temporary file left by a process that died mid-write is removed too.
  std::ofstream(tmp.path() + "/sha256/" + ChunkOf(chunks[0]).digest.substr(0, 2) + "/.x.tmp.1.2")
      << "partial";
  auto cache = OpenCache(tmp.path(), src, 2500);
  EXPECT_LE(DiskUsage(tmp.path()), 2500u);
  EXPECT_EQ(cache->stats().disk_files, 2u);
}

TEST(ChunkCache, CorruptCacheFileIsDeletedAndRefetchedNeverServed) {
  deltakv::testing::TempDir tmp;
  FakeSource src;
  const std::string a(4096, 'q');
  src.Add(a);
  const auto chunk = ChunkOf(a);
  { ASSERT_TRUE(OpenCache(tmp.path(), src)->Get(chunk).ok()); }
  const std::string path = CachePath(tmp.path(), chunk.digest);
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);
    f.put('X');  // same size, wrong bytes
  }
  auto cache = OpenCache(tmp.path(), src);
  auto got = cache->Get(chunk);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(**got, a);
  EXPECT_EQ(src.fetches(), 2);
  EXPECT_EQ(cache->stats().corrupt_files, 1u);
  EXPECT_EQ(deltakv::testing::ReadAll(path), a);  // rewritten with verified bytes
}

TEST(ChunkCache, TruncatedCacheFileIsRefetched) {
  deltakv::testing::TempDir tmp;
  FakeSource src;
  const std::string a(4096, 'r');
  src.Add(a);
  { ASSERT_TRUE(OpenCache(tmp.path(), src)->Get(ChunkOf(a)).ok()); }
  fs::resize_file(CachePath(tmp.path(), ChunkOf(a).digest), 10);
  auto cache = OpenCache(tmp.path(), src);
  auto got = cache->Get(ChunkOf(a));
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(**got, a);
  EXPECT_EQ(src.fetches(), 2);
}

TEST(ChunkCache, SourceErrorsAreReturnedAndNothingIsCached) {
  deltakv::testing::TempDir tmp;
  FakeSource src;
  const std::string a(100, 'm');
  auto cache = OpenCache(tmp.path(), src);
  auto got = cache->Get(ChunkOf(a));
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), StatusCode::kNotFound);
  EXPECT_FALSE(cache->Has(ChunkOf(a).digest));
  EXPECT_EQ(DiskUsage(tmp.path()), 0u);
  src.Add(a);  // a later Get tries again
  ASSERT_TRUE(cache->Get(ChunkOf(a)).ok());
  EXPECT_EQ(src.fetches(), 2);
  // A source that returns the wrong number of bytes is refused as DataLoss.
  deltasync::VolumeChunk wrong = ChunkOf(std::string(50, 'n'));
  src.Add(std::string(50, 'n'));
  wrong.size = 49;
  auto bad = cache->Get(wrong);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kDataLoss);
}

TEST(ChunkCache, ConcurrentGetsOfOneChunkFetchOnce) {
  deltakv::testing::TempDir tmp;
  FakeSource src;
  const std::string a(10000, 'c');
  src.Add(a);
  auto cache = OpenCache(tmp.path(), src);
  src.Hold();
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&] {
      auto got = cache->Get(ChunkOf(a));
      if (got.ok() && **got == a) ++ok;
    });
  }
  while (src.waiting() < 1) std::this_thread::yield();
  EXPECT_TRUE(cache->Has(ChunkOf(a).digest));  // in flight
  src.Release();
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok.load(), 8);
  EXPECT_EQ(src.fetches(), 1);
}

TEST(ChunkCache, SecondProcessOnTheSameDirectoryIsRefused) {
  deltakv::testing::TempDir tmp;
  FakeSource src;
  auto first = OpenCache(tmp.path(), src);
  // flock(2) locks belong to the open file description, so a second open in this process
  // conflicts like another process would.
  auto second = ChunkCache::Open({tmp.path(), 1 << 20, 1 << 20}, src.source());
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(second.status().message().find("in use"), std::string::npos);
}

TEST(Prefetcher, FetchesAheadOnceAndBoundsInflightBytes) {
  deltakv::testing::TempDir tmp;
  FakeSource src;
  std::vector<std::string> chunks;
  for (char c = 'a'; c <= 'j'; ++c) {
    chunks.emplace_back(1000, c);
    src.Add(chunks.back());
  }
  auto cache = OpenCache(tmp.path(), src, 1 << 20, 1 << 20);
  Prefetcher prefetcher(*cache, {2, 3000});
  src.Hold();
  int queued = 0;
  for (const auto& c : chunks) queued += prefetcher.Schedule(ChunkOf(c)) ? 1 : 0;
  EXPECT_EQ(queued, 3);  // the in-flight budget holds three chunks
  EXPECT_FALSE(prefetcher.Schedule(ChunkOf(chunks[0])));  // already queued
  src.Release();
  prefetcher.WaitIdle();
  EXPECT_LE(prefetcher.peak_inflight_bytes(), 3000u);
  EXPECT_EQ(src.fetches(), 3);
  // A foreground read of a prefetched chunk does not fetch again.
  ASSERT_TRUE(cache->Get(ChunkOf(chunks[1])).ok());
  EXPECT_EQ(src.fetches(), 3);
  EXPECT_FALSE(prefetcher.Schedule(ChunkOf(chunks[1])));  // cached
}

}  // namespace
}  // namespace deltakv::mount
