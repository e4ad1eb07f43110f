// Tests of the replay's GPU prefix cache model (kvsim/src/gpu_prefix_cache.h): LRU eviction of
// unreferenced cached blocks only, tail-first release, publish conflicts.
#include "gpu_prefix_cache.h"

#include <gtest/gtest.h>

namespace deltakv::kvsim {
namespace {

TEST(GpuPrefixCache, FreeBlocksFirstThenLeastRecentlyReleased) {
  GpuPrefixCache c(4);
  std::vector<EvictedBlock> ev;
  uint32_t b[4];
  for (int i = 0; i < 4; ++i) b[i] = c.Take(&ev);
  EXPECT_TRUE(ev.empty());
  EXPECT_EQ(c.available(), 0u);
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(c.Publish(b[i], 100 + i, 200 + i));
  // A request releases its blocks tail first: block 3, 2, 1, 0 (0 is the most recent).
  for (int i = 3; i >= 0; --i) c.Unref(b[i]);
  EXPECT_EQ(c.available(), 4u);
  const uint64_t keys[] = {100, 101, 102, 103};
  EXPECT_EQ(c.MatchPrefix(keys), 4u);
  const uint32_t got = c.Take(&ev);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].lo, 103u);  // the tail goes first; the prefix stays matchable
  EXPECT_EQ(ev[0].hi, 203u);
  EXPECT_EQ(ev[0].block, got);
  EXPECT_EQ(c.MatchPrefix(keys), 3u);
  EXPECT_EQ(c.evictions(), 1u);
}

TEST(GpuPrefixCache, ReferencedBlocksAreNeverEvicted) {
  GpuPrefixCache c(2);
  std::vector<EvictedBlock> ev;
  const uint32_t a = c.Take(&ev), b = c.Take(&ev);
  ASSERT_TRUE(c.Publish(a, 1, 1));
  ASSERT_TRUE(c.Publish(b, 2, 2));
  c.Unref(a);
  c.Unref(b);
  c.Ref(a);  // a running request uses a again
  EXPECT_TRUE(c.IsIdle(b));
  EXPECT_FALSE(c.IsIdle(a));
  EXPECT_EQ(c.available(), 1u);
  c.Take(&ev);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].lo, 2u);
  EXPECT_EQ(c.BlockOf(1), a);
}

TEST(GpuPrefixCache, PublishConflictsAndUncachedBlocksGoFree) {
  GpuPrefixCache c(3);
  std::vector<EvictedBlock> ev;
  const uint32_t a = c.Take(&ev), b = c.Take(&ev);
  EXPECT_TRUE(c.Publish(a, 7, 7));
  EXPECT_FALSE(c.Publish(b, 7, 7));  // the key is cached elsewhere
  EXPECT_FALSE(c.Publish(a, 8, 8));  // the block already holds a key
  c.Unref(b);                        // never published: free, not cached
  c.Unref(a);
  EXPECT_EQ(c.available(), 3u);
  c.Take(&ev);
  c.Take(&ev);
  EXPECT_TRUE(ev.empty());  // free blocks before any cached one
  c.Take(&ev);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].lo, 7u);
}

}  // namespace
}  // namespace deltakv::kvsim
