// The KV tier C ABI across processes. The test process plays the sidecar (it creates the pool
// and runs ReclaimDead); forked engine processes use only deltakv/deltakv_kv.h:
// - one engine stores a prompt's blocks, another opens its own client (another layout) and
//   loads them back byte for byte;
// - an engine SIGKILLed in the middle of a store (copy started, never completed) leaves no
//   readable block: no lookup hit, no pin, the keys read as in flight; the blocks it completed
//   before stay readable; after ReclaimDead the keys can be stored and loaded again;
// - a client is refused, not corrupted, in a child forked after it was opened.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "deltakv/deltakv_kv.h"
#include "kv_c_test_util.h"
#include "kvtier/slot_pool.h"
#include "kvtier/tier_test_util.h"
#include "test_util.h"

namespace deltakv {
namespace {

using kvtier::testing::FakeEngineKv;
using kvtier::testing::FakeLayoutKind;
using kvtier::testing::ImageForKey;
using kvtier::testing::UniquePoolName;
using testing::CLayout;
using testing::DescribeLayout;
using testing::FromCKey;
using testing::Iota;
using testing::Spawn;
using testing::WaitExit;

constexpr uint32_t kBlockTokens = 16;
constexpr unsigned kChildAlarmSeconds = 60;  // a wedged child fails the test instead of hanging

// Real keys of docs/KEYS.md for a prompt of `blocks` full blocks (and a partial one).
std::vector<deltakv_kv_key> PromptKeys(size_t blocks, uint32_t first_token = 1000) {
  deltakv_kv_key_context ctx = deltakv_kv_default_key_context();
  ctx.model_fingerprint = "test/model@1";
  ctx.kv_dtype = "bfloat16";
  ctx.kv_layout = "per-layer-kv";
  std::vector<uint32_t> tokens(blocks * kBlockTokens + 5);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = first_token + static_cast<uint32_t>(i);
  std::vector<deltakv_kv_key> keys(blocks);
  size_t n = 0;
  if (deltakv_kv_chain_keys(&ctx, tokens.data(), tokens.size(), kBlockTokens, nullptr, keys.data(),
                            keys.size(), &n) != DELTAKV_OK ||
      n != blocks) {
    return {};
  }
  return keys;
}

kvtier::SlotPool CreatePool(const std::string& name, uint64_t block_bytes, uint64_t slots) {
  kvtier::SlotPoolOptions o;
  o.block_bytes = block_bytes;
  o.capacity_slots = slots;
  o.poison_freed = true;
  StatusOr<kvtier::SlotPool> pool = kvtier::SlotPool::Create(name, o);
  EXPECT_TRUE(pool.ok()) << pool.status().ToString();
  return std::move(pool).value();
}

deltakv_kv_client* OpenClient(const std::string& pool, const CLayout& layout, uint32_t threads) {
  deltakv_kv_client_params p = deltakv_kv_client_default_params();
  p.pool_name = pool.c_str();
  p.layout = layout.layout;
  p.copy_threads = threads;
  deltakv_kv_client* c = nullptr;
  if (deltakv_kv_client_open(&p, &c) != DELTAKV_OK) {
    std::fprintf(stderr, "open: %s\n", deltakv_last_error());
    return nullptr;
  }
  return c;
}

// Stores keys[i] (its image written to engine block blocks[i]) and completes. 0 on success.
int StoreAll(deltakv_kv_client* c, FakeEngineKv& mem, const std::vector<deltakv_kv_key>& keys,
             const std::vector<uint64_t>& blocks) {
  for (size_t i = 0; i < keys.size(); ++i) {
    mem.WriteBlock(blocks[i], ImageForKey(FromCKey(keys[i]), mem.block_bytes()));
  }
  deltakv_kv_store_handle* h = nullptr;
  std::vector<uint8_t> outcomes(keys.size());
  if (deltakv_kv_prepare_store(c, keys.data(), nullptr, keys.size(), outcomes.data(), &h) != 0) {
    return 1;
  }
  for (uint8_t o : outcomes) {
    if (o != DELTAKV_KV_STORE_ALLOCATED) return 2;
  }
  if (deltakv_kv_store(c, h, blocks.data(), blocks.size()) != 0) return 3;
  if (deltakv_kv_complete_store(c, h) != 0) return 4;
  return deltakv_kv_store_free(h) == 0 ? 0 : 5;
}

// Loads keys into engine blocks `blocks` and counts the blocks that differ from their image.
// Returns -1 if a call failed.
long LoadAndCount(deltakv_kv_client* c, FakeEngineKv& mem, const std::vector<deltakv_kv_key>& keys,
                  const std::vector<uint64_t>& blocks) {
  deltakv_kv_load_handle* h = nullptr;
  if (deltakv_kv_prepare_load(c, keys.data(), keys.size(), &h) != 0) return -1;
  if (deltakv_kv_load(c, h, blocks.data(), blocks.size()) != 0) return -1;
  if (deltakv_kv_complete_load(c, h) != 0) return -1;
  if (deltakv_kv_load_free(h) != 0) return -1;
  long bad = 0;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (mem.ReadBlock(blocks[i]) != ImageForKey(FromCKey(keys[i]), mem.block_bytes())) ++bad;
  }
  return bad;
}

void WriteByte(int fd, char c = 1) { (void)!write(fd, &c, 1); }
int ReadByte(int fd) {
  char c = 0;
  return read(fd, &c, 1) == 1 ? c : -1;
}

TEST(KvCApiMultiProcessTest, SecondEngineLoadsWhatTheFirstStoredByteForByte) {
  constexpr uint64_t kLayers = 6, kTensorBytes = 1024;
  constexpr uint64_t kBlockBytes = kLayers * 2 * kTensorBytes;
  const std::string name = UniquePoolName("capi-mp");
  kvtier::SlotPool pool = CreatePool(name, kBlockBytes, 64);
  const std::vector<deltakv_kv_key> keys = PromptKeys(24);
  ASSERT_EQ(keys.size(), 24u);
  int stored[2], done[2];
  ASSERT_EQ(pipe(stored), 0);
  ASSERT_EQ(pipe(done), 0);

  pid_t writer = Spawn([&]() -> int {
    alarm(kChildAlarmSeconds);
    FakeEngineKv mem(FakeLayoutKind::kPerLayerKV, kLayers, 40, kTensorBytes, 16);
    CLayout layout = DescribeLayout(mem, FakeLayoutKind::kPerLayerKV, DELTAKV_KV_LAYOUT_PER_LAYER);
    deltakv_kv_client* c = OpenClient(name, layout, 2);
    if (c == nullptr) return 10;
    if (int rc = StoreAll(c, mem, keys, Iota(10, keys.size())); rc != 0) return 10 + rc;
    WriteByte(stored[1]);
    const bool ok = ReadByte(done[0]) >= 0;  // stay alive while the reader loads
    return deltakv_kv_client_close(c) == 0 && ok ? 0 : 19;
  });
  pid_t reader = Spawn([&]() -> int {
    alarm(kChildAlarmSeconds);
    if (ReadByte(stored[0]) < 0) return 20;
    // Another engine layout with the same slot image: cross-layer blocks.
    FakeEngineKv mem(FakeLayoutKind::kCrossLayer, kLayers * 2, 30, kTensorBytes, 128);
    CLayout layout =
        DescribeLayout(mem, FakeLayoutKind::kCrossLayer, DELTAKV_KV_LAYOUT_CROSS_LAYER);
    deltakv_kv_client* c = OpenClient(name, layout, 1);
    if (c == nullptr) return 21;
    std::vector<deltakv_kv_key> longer = keys;
    longer.push_back(deltakv_kv_key{1, 2});  // a request one block longer than what is stored
    size_t hits = 0;
    if (deltakv_kv_lookup(c, longer.data(), longer.size(), &hits) != 0 || hits != keys.size()) {
      return 22;
    }
    const long bad = LoadAndCount(c, mem, keys, Iota(3, keys.size()));
    WriteByte(done[1]);
    if (bad != 0) return 23;
    if (!mem.CanariesIntact()) return 24;
    return deltakv_kv_client_close(c) == 0 ? 0 : 25;
  });
  EXPECT_EQ(WaitExit(writer), 0);
  EXPECT_EQ(WaitExit(reader), 0);
  for (int fd : {stored[0], stored[1], done[0], done[1]}) close(fd);
  kvtier::PoolStats s = pool.Stats();
  EXPECT_EQ(s.ready_slots, keys.size());
  EXPECT_EQ(s.pinned_slots, 0u);
  EXPECT_EQ(s.writing_slots, 0u);
}

TEST(KvCApiMultiProcessTest, EngineKilledMidStoreLeavesNoReadableBlock) {
  // Blocks of 1 MiB, so that the copy of a 48-block store takes milliseconds and the kill
  // usually lands while it runs (the child reports whether it was still running; either way
  // the store was never completed, so nothing may be readable).
  constexpr uint64_t kLayers = 8, kTensorBytes = 64 << 10;
  constexpr uint64_t kBlockBytes = kLayers * 2 * kTensorBytes;
  constexpr size_t kCommitted = 4, kKilled = 48;
  const std::string name = UniquePoolName("capi-kill");
  kvtier::SlotPool pool = CreatePool(name, kBlockBytes, 64);
  const std::vector<deltakv_kv_key> all = PromptKeys(kCommitted + kKilled);
  ASSERT_EQ(all.size(), kCommitted + kKilled);
  const std::vector<deltakv_kv_key> committed(all.begin(), all.begin() + kCommitted);
  const std::vector<deltakv_kv_key> killed(all.begin() + kCommitted, all.end());
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);

  pid_t child = Spawn([&]() -> int {
    alarm(kChildAlarmSeconds);
    FakeEngineKv mem(FakeLayoutKind::kPerLayerKV, kLayers, kKilled, kTensorBytes);
    CLayout layout = DescribeLayout(mem, FakeLayoutKind::kPerLayerKV, DELTAKV_KV_LAYOUT_PER_LAYER);
    deltakv_kv_client* c = OpenClient(name, layout, 1);
    if (c == nullptr) return 10;
    if (StoreAll(c, mem, committed, Iota(0, kCommitted)) != 0) return 11;
    for (size_t i = 0; i < kKilled; ++i) {
      mem.WriteBlock(i, ImageForKey(FromCKey(killed[i]), kBlockBytes));
    }
    deltakv_kv_store_handle* h = nullptr;
    if (deltakv_kv_prepare_store(c, killed.data(), nullptr, kKilled, nullptr, &h) != 0) return 12;
    const std::vector<uint64_t> blocks = Iota(0, kKilled);
    if (deltakv_kv_store(c, h, blocks.data(), kKilled) != 0) return 13;
    int done = 0;
    if (deltakv_kv_store_query(h, &done) != 0) return 14;
    WriteByte(ready[1], done ? 'D' : 'R');  // copy Done / still Running
    pause();                                // never completes the store: killed here
    return 15;
  });
  const int state = ReadByte(ready[0]);
  ASSERT_TRUE(state == 'D' || state == 'R') << state;
  kill(child, SIGKILL);
  EXPECT_EQ(WaitExit(child), 128 + SIGKILL);
  close(ready[0]);
  close(ready[1]);
  std::printf("killed with the copy %s\n", state == 'R' ? "still running" : "finished");

  EXPECT_EQ(pool.Stats().writing_slots, kKilled);
  EXPECT_EQ(pool.Stats().ready_slots, kCommitted);
  // Another engine process's view (this one, through its own client).
  FakeEngineKv mem(FakeLayoutKind::kPerLayerKV, kLayers, kKilled, kTensorBytes);
  CLayout layout = DescribeLayout(mem, FakeLayoutKind::kPerLayerKV, DELTAKV_KV_LAYOUT_PER_LAYER);
  deltakv_kv_client* c = OpenClient(name, layout, 2);
  ASSERT_NE(c, nullptr);
  size_t hits = 99;
  ASSERT_EQ(deltakv_kv_lookup(c, all.data(), all.size(), &hits), DELTAKV_OK);
  EXPECT_EQ(hits, kCommitted);  // the completed blocks, and not one block more
  ASSERT_EQ(deltakv_kv_lookup(c, killed.data(), 1, &hits), DELTAKV_OK);
  EXPECT_EQ(hits, 0u);
  deltakv_kv_load_handle* load = nullptr;
  EXPECT_EQ(deltakv_kv_prepare_load(c, killed.data(), 1, &load), DELTAKV_ERR_NOT_FOUND);
  EXPECT_EQ(load, nullptr);
  EXPECT_EQ(pool.Stats().pinned_slots, 0u);
  {
    std::vector<uint8_t> outcomes(kKilled);
    deltakv_kv_store_handle* h = nullptr;
    ASSERT_EQ(deltakv_kv_prepare_store(c, killed.data(), nullptr, kKilled, outcomes.data(), &h),
              DELTAKV_OK);
    for (uint8_t o : outcomes) EXPECT_EQ(o, DELTAKV_KV_STORE_IN_FLIGHT);
    EXPECT_EQ(deltakv_kv_store_free(h), DELTAKV_OK);
  }
  EXPECT_EQ(LoadAndCount(c, mem, committed, Iota(0, kCommitted)), 0);

  // The sidecar reclaims the dead writer's slots (poisoned on the way out).
  StatusOr<kvtier::ReclaimReport> report = pool.ReclaimDead();
  ASSERT_TRUE(report.ok());
  EXPECT_EQ(report->writes, kKilled);
  EXPECT_EQ(pool.Stats().writing_slots, 0u);
  ASSERT_EQ(deltakv_kv_lookup(c, killed.data(), kKilled, &hits), DELTAKV_OK);
  EXPECT_EQ(hits, 0u);

  // The keys can be stored and loaded again, with the right bytes.
  EXPECT_EQ(StoreAll(c, mem, killed, Iota(0, kKilled)), 0) << deltakv_last_error();
  FakeEngineKv other(FakeLayoutKind::kPerLayerKV, kLayers, kKilled, kTensorBytes, 64);
  CLayout other_layout =
      DescribeLayout(other, FakeLayoutKind::kPerLayerKV, DELTAKV_KV_LAYOUT_PER_LAYER);
  deltakv_kv_client* reader = OpenClient(name, other_layout, 2);
  ASSERT_NE(reader, nullptr);
  std::vector<uint64_t> reversed = Iota(0, kKilled);
  std::reverse(reversed.begin(), reversed.end());
  EXPECT_EQ(LoadAndCount(reader, other, killed, reversed), 0);
  EXPECT_TRUE(other.CanariesIntact());
  EXPECT_EQ(deltakv_kv_client_close(reader), DELTAKV_OK);
  EXPECT_EQ(deltakv_kv_client_close(c), DELTAKV_OK);
  EXPECT_EQ(pool.Stats().pinned_slots, 0u);
}

TEST(KvCApiMultiProcessTest, ClientOpenedBeforeForkIsRefusedInTheChild) {
  constexpr uint64_t kLayers = 2, kTensorBytes = 4096;
  const std::string name = UniquePoolName("capi-fork");
  kvtier::SlotPool pool = CreatePool(name, kLayers * kTensorBytes, 16);
  FakeEngineKv mem(FakeLayoutKind::kCrossLayer, kLayers, 8, kTensorBytes);
  CLayout layout = DescribeLayout(mem, FakeLayoutKind::kCrossLayer, DELTAKV_KV_LAYOUT_CROSS_LAYER);
  deltakv_kv_client* c = OpenClient(name, layout, 2);
  ASSERT_NE(c, nullptr);
  const std::vector<deltakv_kv_key> keys = PromptKeys(3);
  ASSERT_EQ(StoreAll(c, mem, keys, Iota(0, 3)), 0);
  deltakv_kv_load_handle* pinned = nullptr;
  ASSERT_EQ(deltakv_kv_prepare_load(c, keys.data(), 2, &pinned), DELTAKV_OK);

  pid_t child = Spawn([&]() -> int {
    alarm(kChildAlarmSeconds);
    size_t hits = 0;
    if (deltakv_kv_lookup(c, keys.data(), keys.size(), &hits) !=
        DELTAKV_ERR_FAILED_PRECONDITION) {
      return 10;
    }
    if (std::strstr(deltakv_last_error(), "fork") == nullptr) return 11;
    int done = 0;
    if (deltakv_kv_load_query(pinned, &done) != DELTAKV_ERR_FAILED_PRECONDITION) return 12;
    // Releasing the parent's objects here neither hangs nor touches the parent's pins.
    if (deltakv_kv_load_free(pinned) != DELTAKV_OK) return 13;
    if (deltakv_kv_client_close(c) != DELTAKV_OK) return 14;
    // A client of its own works.
    FakeEngineKv own(FakeLayoutKind::kCrossLayer, kLayers, 8, kTensorBytes);
    CLayout own_layout =
        DescribeLayout(own, FakeLayoutKind::kCrossLayer, DELTAKV_KV_LAYOUT_CROSS_LAYER);
    deltakv_kv_client* mine = OpenClient(name, own_layout, 1);
    if (mine == nullptr) return 15;
    if (deltakv_kv_lookup(mine, keys.data(), keys.size(), &hits) != 0 || hits != 3) return 16;
    if (LoadAndCount(mine, own, keys, Iota(4, 3)) != 0) return 17;
    return deltakv_kv_client_close(mine) == 0 ? 0 : 18;
  });
  EXPECT_EQ(WaitExit(child), 0);
  EXPECT_EQ(pool.Stats().pinned_slots, 2u);  // the parent's pins are still the parent's
  size_t hits = 0;
  EXPECT_EQ(deltakv_kv_lookup(c, keys.data(), keys.size(), &hits), DELTAKV_OK);
  EXPECT_EQ(hits, 3u);
  EXPECT_EQ(deltakv_kv_load_free(pinned), DELTAKV_OK);
  EXPECT_EQ(pool.Stats().pinned_slots, 0u);
  EXPECT_EQ(deltakv_kv_client_close(c), DELTAKV_OK);
}

}  // namespace
}  // namespace deltakv
