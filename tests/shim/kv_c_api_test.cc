// The KV tier C ABI (deltakv/deltakv_kv.h) in one process: store and reload byte for byte in
// every layout kind and copy mode, then every kind of bad input (NULL client, handles, arrays
// and outputs; zero counts; unknown pool; layout mismatch; bad layouts and backends; handles
// completed twice, started twice, of another client or of the wrong kind; blocks out of range
// or repeated, in loads and among a store's allocated keys; repeated keys; caps), handles
// released in any order, keys against the key spec, events, stats versioning and the
// thread-local last error.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstddef>
#include <cstring>
#include <numeric>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "deltakv/deltakv.h"
#include "deltakv/deltakv_kv.h"
#include "kv_c_test_util.h"
#include "kvtier/keys.h"
#include "kvtier/slot_pool.h"
#include "kvtier/tier_test_util.h"

namespace deltakv {
namespace {

using kvtier::PoolKey;
using kvtier::testing::FakeEngineKv;
using kvtier::testing::FakeLayoutKind;
using kvtier::testing::ImageForKey;
using kvtier::testing::KeyOf;
using kvtier::testing::UniquePoolName;
using testing::CKey;
using testing::CKeys;
using testing::CLayout;
using testing::DescribeLayout;
using testing::Iota;

constexpr uint64_t kLayers = 4;
constexpr uint64_t kTensorBytes = 512;
constexpr uint64_t kEngineBlocks = 16;

uint64_t BlockBytes(FakeLayoutKind kind) {
  return kLayers * kTensorBytes * (kind == FakeLayoutKind::kPerLayerKV ? 2 : 1);
}

std::string LastError() { return deltakv_last_error(); }

class KvCApiTest : public ::testing::Test {
 protected:
  void MakePool(uint64_t slots, uint64_t block_bytes) {
    name_ = UniquePoolName("capi");
    kvtier::SlotPoolOptions o;
    o.block_bytes = block_bytes;
    o.capacity_slots = slots;
    o.poison_freed = true;
    StatusOr<kvtier::SlotPool> pool = kvtier::SlotPool::Create(name_, o);
    ASSERT_TRUE(pool.ok()) << pool.status().ToString();
    pool_ = std::make_unique<kvtier::SlotPool>(std::move(pool).value());
  }

  deltakv_kv_client_params Params(const CLayout& layout, uint32_t threads = 2) {
    deltakv_kv_client_params p = deltakv_kv_client_default_params();
    p.pool_name = name_.c_str();
    p.layout = layout.layout;
    p.copy_threads = threads;
    return p;
  }

  // Opens a client (closed at teardown).
  deltakv_kv_client* Open(const CLayout& layout, uint32_t threads = 2) {
    deltakv_kv_client_params p = Params(layout, threads);
    deltakv_kv_client* c = nullptr;
    EXPECT_EQ(deltakv_kv_client_open(&p, &c), DELTAKV_OK) << LastError();
    if (c != nullptr) clients_.push_back(c);
    return c;
  }

  void TearDown() override {
    for (deltakv_kv_client* c : clients_) EXPECT_EQ(deltakv_kv_client_close(c), DELTAKV_OK);
  }

  // Writes each key's image into engine block blocks[i] and stores it through the C ABI.
  void StoreAll(deltakv_kv_client* c, FakeEngineKv& mem, const std::vector<deltakv_kv_key>& keys,
                const std::vector<uint64_t>& blocks) {
    for (size_t i = 0; i < keys.size(); ++i) {
      mem.WriteBlock(blocks[i], ImageForKey(PoolKey{keys[i].lo, keys[i].hi}, mem.block_bytes()));
    }
    deltakv_kv_store_handle* h = nullptr;
    ASSERT_EQ(deltakv_kv_prepare_store(c, keys.data(), nullptr, keys.size(), nullptr, &h),
              DELTAKV_OK)
        << LastError();
    ASSERT_EQ(deltakv_kv_store(c, h, blocks.data(), blocks.size()), DELTAKV_OK) << LastError();
    ASSERT_EQ(deltakv_kv_complete_store(c, h), DELTAKV_OK) << LastError();
    ASSERT_EQ(deltakv_kv_store_free(h), DELTAKV_OK);
  }

  std::string name_;
  std::unique_ptr<kvtier::SlotPool> pool_;  // the sidecar's pool
  std::vector<deltakv_kv_client*> clients_;
};

// ---- Round trips ------------------------------------------------------------------------------

class KvCApiLayoutTest
    : public KvCApiTest,
      public ::testing::WithParamInterface<std::tuple<FakeLayoutKind, int32_t, uint32_t>> {};

TEST_P(KvCApiLayoutTest, StoreThenReloadIntoAnotherEngineMemory) {
  const auto [kind, c_kind, threads] = GetParam();
  MakePool(32, BlockBytes(kind));
  FakeEngineKv a(kind, kLayers, kEngineBlocks, kTensorBytes, 8);
  FakeEngineKv b(kind, kLayers, kEngineBlocks, kTensorBytes, 24);
  CLayout la = DescribeLayout(a, kind, c_kind);
  CLayout lb = DescribeLayout(b, kind, c_kind);
  deltakv_kv_client* writer = Open(la, threads);
  deltakv_kv_client* reader = Open(lb, threads);
  ASSERT_NE(writer, nullptr);
  ASSERT_NE(reader, nullptr);
  const std::vector<deltakv_kv_key> keys = CKeys(0, 10);
  StoreAll(writer, a, keys, Iota(5, 10));

  size_t hits = 0;
  ASSERT_EQ(deltakv_kv_lookup(reader, keys.data(), keys.size(), &hits), DELTAKV_OK);
  EXPECT_EQ(hits, 10u);
  deltakv_kv_load_handle* h = nullptr;
  ASSERT_EQ(deltakv_kv_prepare_load(reader, keys.data(), hits, &h), DELTAKV_OK) << LastError();
  std::vector<uint64_t> dst = Iota(0, 10);
  std::rotate(dst.begin(), dst.begin() + 3, dst.end());
  ASSERT_EQ(deltakv_kv_load(reader, h, dst.data(), dst.size()), DELTAKV_OK) << LastError();
  int done = 0;
  ASSERT_EQ(deltakv_kv_load_wait(h, 10000, &done), DELTAKV_OK);
  EXPECT_EQ(done, 1);
  ASSERT_EQ(deltakv_kv_complete_load(reader, h), DELTAKV_OK) << LastError();
  EXPECT_EQ(deltakv_kv_load_free(h), DELTAKV_OK);
  for (size_t i = 0; i < keys.size(); ++i) {
    EXPECT_EQ(b.ReadBlock(dst[i]), ImageForKey(KeyOf(i), b.block_bytes())) << i;
  }
  EXPECT_TRUE(b.CanariesIntact());
  EXPECT_EQ(pool_->Stats().pinned_slots, 0u);
  EXPECT_EQ(pool_->Stats().writing_slots, 0u);
}

std::string LayoutTestName(
    const ::testing::TestParamInfo<std::tuple<FakeLayoutKind, int32_t, uint32_t>>& info) {
  const auto [kind, c_kind, threads] = info.param;
  std::string name = kind == FakeLayoutKind::kPerLayerKV      ? "PerLayerKV"
                     : kind == FakeLayoutKind::kPerLayerFused ? "PerLayerFused"
                                                              : "CrossLayer";
  name += c_kind == DELTAKV_KV_LAYOUT_PER_LAYER     ? "AsPerLayer"
          : c_kind == DELTAKV_KV_LAYOUT_CROSS_LAYER ? "AsCrossLayer"
                                                    : "AsPieces";
  return name + "Threads" + std::to_string(threads);
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, KvCApiLayoutTest,
    ::testing::Values(
        std::make_tuple(FakeLayoutKind::kPerLayerKV, DELTAKV_KV_LAYOUT_PER_LAYER, 2u),
        std::make_tuple(FakeLayoutKind::kPerLayerKV, DELTAKV_KV_LAYOUT_PER_LAYER, 0u),
        std::make_tuple(FakeLayoutKind::kPerLayerFused, DELTAKV_KV_LAYOUT_PER_LAYER, 1u),
        std::make_tuple(FakeLayoutKind::kCrossLayer, DELTAKV_KV_LAYOUT_CROSS_LAYER, 2u),
        std::make_tuple(FakeLayoutKind::kCrossLayer, DELTAKV_KV_LAYOUT_CROSS_LAYER, 0u),
        std::make_tuple(FakeLayoutKind::kPerLayerKV, DELTAKV_KV_LAYOUT_PIECES, 2u)),
    LayoutTestName);

// ---- Opening ----------------------------------------------------------------------------------

TEST_F(KvCApiTest, OpenRejectsBadParams) {
  MakePool(8, BlockBytes(FakeLayoutKind::kCrossLayer));
  FakeEngineKv mem(FakeLayoutKind::kCrossLayer, kLayers, kEngineBlocks, kTensorBytes);
  CLayout good = DescribeLayout(mem, FakeLayoutKind::kCrossLayer, DELTAKV_KV_LAYOUT_CROSS_LAYER);
  deltakv_kv_client* c = reinterpret_cast<deltakv_kv_client*>(0x1);
  deltakv_kv_client_params p = Params(good);

  EXPECT_EQ(deltakv_kv_client_open(&p, nullptr), DELTAKV_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(deltakv_kv_client_open(nullptr, &c), DELTAKV_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(c, nullptr);  // *out is cleared on every failure past the NULL check
  EXPECT_NE(LastError().find("deltakv_kv_client_open: params is NULL"), std::string::npos);

  auto open = [&](const deltakv_kv_client_params& params) {
    deltakv_kv_client* out = nullptr;
    int rc = deltakv_kv_client_open(&params, &out);
    if (out != nullptr) clients_.push_back(out);
    return rc;
  };
  deltakv_kv_client_params q = p;
  q.struct_size = 0;  // a zeroed struct not started from the defaults
  EXPECT_EQ(open(q), DELTAKV_ERR_INVALID_ARGUMENT);
  EXPECT_NE(LastError().find("struct_size"), std::string::npos);

  q = p;
  q.pool_name = "dkv-no-such-kv-pool";
  EXPECT_EQ(open(q), DELTAKV_ERR_NOT_FOUND);
  EXPECT_NE(LastError().find("dkv-no-such-kv-pool"), std::string::npos) << LastError();
  EXPECT_NE(LastError().find("--kv-block-bytes"), std::string::npos) << LastError();
  q.pool_name = "";
  EXPECT_EQ(open(q), DELTAKV_ERR_INVALID_ARGUMENT);

  // Layout mismatch: per-layer K and V blocks are twice the pool's slot size.
  FakeEngineKv wide(FakeLayoutKind::kPerLayerKV, kLayers, kEngineBlocks, kTensorBytes);
  CLayout wrong = DescribeLayout(wide, FakeLayoutKind::kPerLayerKV, DELTAKV_KV_LAYOUT_PER_LAYER);
  EXPECT_EQ(open(Params(wrong)), DELTAKV_ERR_INVALID_ARGUMENT);
  EXPECT_NE(LastError().find(std::to_string(BlockBytes(FakeLayoutKind::kPerLayerKV))),
            std::string::npos)
      << LastError();
  EXPECT_NE(LastError().find(std::to_string(BlockBytes(FakeLayoutKind::kCrossLayer))),
            std::string::npos)
      << LastError();

  // Bad layouts.
  q = p;
  q.layout.kind = 0;
  EXPECT_EQ(open(q), DELTAKV_ERR_INVALID_ARGUMENT);
  EXPECT_NE(LastError().find("layout kind 0"), std::string::npos);
  q = p;
  q.layout.num_blocks = 0;
  EXPECT_EQ(open(q), DELTAKV_ERR_INVALID_ARGUMENT);
  q = p;
  q.layout.base = nullptr;
  EXPECT_EQ(open(q), DELTAKV_ERR_INVALID_ARGUMENT);
  q = p;
  q.layout.block_stride = q.layout.block_bytes - 1;  // runs would overlap
  EXPECT_EQ(open(q), DELTAKV_ERR_INVALID_ARGUMENT);
  CLayout per_layer =
      DescribeLayout(wide, FakeLayoutKind::kPerLayerKV, DELTAKV_KV_LAYOUT_PER_LAYER);
  q = Params(per_layer);
  q.layout.layers = nullptr;
  EXPECT_EQ(open(q), DELTAKV_ERR_INVALID_ARGUMENT);
  EXPECT_NE(LastError().find("layers is NULL"), std::string::npos);
  q = Params(per_layer);
  q.layout.num_layers = 0;
  EXPECT_EQ(open(q), DELTAKV_ERR_INVALID_ARGUMENT);
  per_layer.layers[1].k = nullptr;
  EXPECT_EQ(open(Params(per_layer)), DELTAKV_ERR_INVALID_ARGUMENT);
  EXPECT_NE(LastError().find("layer 1 has no K"), std::string::npos);
  q = p;
  q.layout.kind = DELTAKV_KV_LAYOUT_PIECES;
  q.layout.pieces = nullptr;
  q.layout.num_pieces = 3;
  EXPECT_EQ(open(q), DELTAKV_ERR_INVALID_ARGUMENT);
  q.layout.num_pieces = 0;
  EXPECT_EQ(open(q), DELTAKV_ERR_INVALID_ARGUMENT);

  // Copy backends.
  q = p;
  q.copy_backend = "cuda";
  EXPECT_EQ(open(q), DELTAKV_ERR_UNIMPLEMENTED);
  q.copy_backend = "gpu";
  EXPECT_EQ(open(q), DELTAKV_ERR_INVALID_ARGUMENT);
  EXPECT_NE(LastError().find("unknown copy backend 'gpu'"), std::string::npos);
  q.copy_backend = nullptr;  // the default
  q.copy_threads = 100000;
  EXPECT_EQ(open(q), DELTAKV_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(clients_.empty());

  // And the good one.
  EXPECT_EQ(open(p), DELTAKV_OK);
  EXPECT_EQ(LastError(), "");
  uint64_t block_bytes = 0, slots = 0;
  EXPECT_EQ(deltakv_kv_client_info(clients_.back(), &block_bytes, &slots), DELTAKV_OK);
  EXPECT_EQ(block_bytes, BlockBytes(FakeLayoutKind::kCrossLayer));
  EXPECT_EQ(slots, 8u);
  EXPECT_EQ(deltakv_kv_client_info(clients_.back(), nullptr, nullptr), DELTAKV_OK);
}

// ---- NULL and zero ----------------------------------------------------------------------------

TEST_F(KvCApiTest, NullClientAndHandlesAreRejectedByEveryCall) {
  const deltakv_kv_key key{1, 2};
  const uint64_t block = 0;
  size_t n = 0;
  int done = 0;
  uint64_t u = 0;
  deltakv_kv_load_handle* load = nullptr;
  deltakv_kv_store_handle* store = nullptr;
  deltakv_kv_event event{};
  deltakv_kv_stats stats{};
  stats.struct_size = sizeof(stats);
  const int kInvalid = DELTAKV_ERR_INVALID_ARGUMENT;

  EXPECT_EQ(deltakv_kv_client_info(nullptr, &u, &u), kInvalid);
  EXPECT_EQ(LastError(), "deltakv_kv_client_info: client is NULL");
  EXPECT_EQ(deltakv_kv_lookup(nullptr, &key, 1, &n), kInvalid);
  EXPECT_EQ(deltakv_kv_touch(nullptr, &key, 1, &n), kInvalid);
  EXPECT_EQ(deltakv_kv_remove(nullptr, key), kInvalid);
  EXPECT_EQ(deltakv_kv_prepare_load(nullptr, &key, 1, &load), kInvalid);
  EXPECT_EQ(deltakv_kv_load(nullptr, load, &block, 1), kInvalid);
  EXPECT_EQ(deltakv_kv_complete_load(nullptr, load), kInvalid);
  EXPECT_EQ(deltakv_kv_prepare_store(nullptr, &key, nullptr, 1, nullptr, &store), kInvalid);
  EXPECT_EQ(deltakv_kv_store(nullptr, store, &block, 1), kInvalid);
  EXPECT_EQ(deltakv_kv_complete_store(nullptr, store), kInvalid);
  EXPECT_EQ(deltakv_kv_drain_events(nullptr, &event, 1, &n), kInvalid);
  EXPECT_EQ(deltakv_kv_get_stats(nullptr, &stats), kInvalid);
  EXPECT_EQ(load, nullptr);
  EXPECT_EQ(store, nullptr);

  // NULL handles.
  EXPECT_EQ(deltakv_kv_load_query(nullptr, &done), kInvalid);
  EXPECT_EQ(LastError(), "deltakv_kv_load_query: load handle is NULL");
  EXPECT_EQ(deltakv_kv_load_wait(nullptr, 0, &done), kInvalid);
  EXPECT_EQ(deltakv_kv_load_size(nullptr, &n), kInvalid);
  EXPECT_EQ(deltakv_kv_store_query(nullptr, &done), kInvalid);
  EXPECT_EQ(deltakv_kv_store_wait(nullptr, -1, &done), kInvalid);
  EXPECT_EQ(deltakv_kv_store_info(nullptr, &n, &n, &n, &n, &n), kInvalid);
  EXPECT_EQ(deltakv_kv_store_outcome_at(nullptr, 0, &done), kInvalid);
  // Releasing NULL is a no-op, like free().
  EXPECT_EQ(deltakv_kv_load_free(nullptr), DELTAKV_OK);
  EXPECT_EQ(deltakv_kv_store_free(nullptr), DELTAKV_OK);
  EXPECT_EQ(deltakv_kv_client_close(nullptr), DELTAKV_OK);

  // With a live client: NULL handles.
  MakePool(8, BlockBytes(FakeLayoutKind::kCrossLayer));
  FakeEngineKv mem(FakeLayoutKind::kCrossLayer, kLayers, kEngineBlocks, kTensorBytes);
  deltakv_kv_client* c =
      Open(DescribeLayout(mem, FakeLayoutKind::kCrossLayer, DELTAKV_KV_LAYOUT_CROSS_LAYER));
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(deltakv_kv_load(c, nullptr, &block, 1), kInvalid);
  EXPECT_EQ(deltakv_kv_complete_load(c, nullptr), kInvalid);
  EXPECT_EQ(deltakv_kv_store(c, nullptr, &block, 1), kInvalid);
  EXPECT_EQ(deltakv_kv_complete_store(c, nullptr), kInvalid);
  EXPECT_EQ(LastError(), "deltakv_kv_complete_store: store handle is NULL");
}

TEST_F(KvCApiTest, NullArraysAndOutputsAreRejected) {
  MakePool(8, BlockBytes(FakeLayoutKind::kCrossLayer));
  FakeEngineKv mem(FakeLayoutKind::kCrossLayer, kLayers, kEngineBlocks, kTensorBytes);
  deltakv_kv_client* c =
      Open(DescribeLayout(mem, FakeLayoutKind::kCrossLayer, DELTAKV_KV_LAYOUT_CROSS_LAYER));
  ASSERT_NE(c, nullptr);
  const std::vector<deltakv_kv_key> keys = CKeys(0, 3);
  StoreAll(c, mem, keys, Iota(0, 3));
  const int kInvalid = DELTAKV_ERR_INVALID_ARGUMENT;
  size_t n = 0;

  EXPECT_EQ(deltakv_kv_lookup(c, nullptr, 3, &n), kInvalid);
  EXPECT_EQ(LastError(), "deltakv_kv_lookup: keys is NULL with a count of 3");
  EXPECT_EQ(deltakv_kv_lookup(c, keys.data(), 3, nullptr), kInvalid);
  EXPECT_EQ(LastError(), "deltakv_kv_lookup: hits is NULL");
  EXPECT_EQ(deltakv_kv_touch(c, nullptr, 2, &n), kInvalid);
  EXPECT_EQ(deltakv_kv_touch(c, keys.data(), 3, nullptr), DELTAKV_OK);  // found is optional

  deltakv_kv_load_handle* load = nullptr;
  EXPECT_EQ(deltakv_kv_prepare_load(c, nullptr, 3, &load), kInvalid);
  EXPECT_EQ(deltakv_kv_prepare_load(c, keys.data(), 3, nullptr), kInvalid);
  EXPECT_EQ(pool_->Stats().pinned_slots, 0u);
  ASSERT_EQ(deltakv_kv_prepare_load(c, keys.data(), 3, &load), DELTAKV_OK);
  EXPECT_EQ(deltakv_kv_load(c, load, nullptr, 3), kInvalid);
  EXPECT_EQ(LastError(), "deltakv_kv_load: engine_blocks is NULL with a count of 3");
  EXPECT_EQ(deltakv_kv_load_size(load, nullptr), kInvalid);
  const std::vector<uint64_t> dst = Iota(8, 3);
  ASSERT_EQ(deltakv_kv_load(c, load, dst.data(), 3), DELTAKV_OK);
  EXPECT_EQ(deltakv_kv_load_query(load, nullptr), kInvalid);
  EXPECT_EQ(deltakv_kv_load_wait(load, -1, nullptr), kInvalid);
  EXPECT_EQ(deltakv_kv_complete_load(c, load), DELTAKV_OK);
  EXPECT_EQ(deltakv_kv_load_free(load), DELTAKV_OK);

  deltakv_kv_store_handle* store = nullptr;
  const std::vector<deltakv_kv_key> fresh = CKeys(10, 2);
  EXPECT_EQ(deltakv_kv_prepare_store(c, nullptr, nullptr, 2, nullptr, &store), kInvalid);
  EXPECT_EQ(deltakv_kv_prepare_store(c, fresh.data(), nullptr, 2, nullptr, nullptr), kInvalid);
  EXPECT_EQ(pool_->Stats().writing_slots, 0u);
  ASSERT_EQ(deltakv_kv_prepare_store(c, fresh.data(), nullptr, 2, nullptr, &store), DELTAKV_OK);
  EXPECT_EQ(deltakv_kv_store(c, store, nullptr, 2), kInvalid);
  EXPECT_EQ(deltakv_kv_store_outcome_at(store, 0, nullptr), kInvalid);
  EXPECT_EQ(deltakv_kv_store_info(store, nullptr, nullptr, nullptr, nullptr, nullptr),
            DELTAKV_OK);                                // every count is optional
  EXPECT_EQ(deltakv_kv_store_free(store), DELTAKV_OK);  // never stored: aborted

  deltakv_kv_event events[2];
  EXPECT_EQ(deltakv_kv_drain_events(c, nullptr, 2, &n), kInvalid);
  EXPECT_EQ(deltakv_kv_drain_events(c, events, 2, nullptr), kInvalid);
  EXPECT_EQ(deltakv_kv_get_stats(c, nullptr), kInvalid);
  EXPECT_EQ(pool_->Stats().writing_slots, 0u);
  EXPECT_EQ(pool_->Stats().ready_slots, 3u);
}

TEST_F(KvCApiTest, ZeroCounts) {
  MakePool(8, BlockBytes(FakeLayoutKind::kCrossLayer));
  FakeEngineKv mem(FakeLayoutKind::kCrossLayer, kLayers, kEngineBlocks, kTensorBytes);
  deltakv_kv_client* c =
      Open(DescribeLayout(mem, FakeLayoutKind::kCrossLayer, DELTAKV_KV_LAYOUT_CROSS_LAYER));
  ASSERT_NE(c, nullptr);
  // A NULL array with a count of 0 is an empty array.
  size_t n = 99;
  EXPECT_EQ(deltakv_kv_lookup(c, nullptr, 0, &n), DELTAKV_OK);
  EXPECT_EQ(n, 0u);
  n = 99;
  EXPECT_EQ(deltakv_kv_touch(c, nullptr, 0, &n), DELTAKV_OK);
  EXPECT_EQ(n, 0u);

  deltakv_kv_load_handle* load = nullptr;
  ASSERT_EQ(deltakv_kv_prepare_load(c, nullptr, 0, &load), DELTAKV_OK);
  EXPECT_EQ(deltakv_kv_load_size(load, &n), DELTAKV_OK);
  EXPECT_EQ(n, 0u);
  EXPECT_EQ(deltakv_kv_load(c, load, nullptr, 0), DELTAKV_OK);
  int done = 0;
  EXPECT_EQ(deltakv_kv_load_query(load, &done), DELTAKV_OK);
  EXPECT_EQ(done, 1);
  EXPECT_EQ(deltakv_kv_complete_load(c, load), DELTAKV_OK);
  EXPECT_EQ(deltakv_kv_load_free(load), DELTAKV_OK);

  deltakv_kv_store_handle* store = nullptr;
  ASSERT_EQ(deltakv_kv_prepare_store(c, nullptr, nullptr, 0, nullptr, &store), DELTAKV_OK);
  size_t keys = 9, allocated = 9;
  EXPECT_EQ(deltakv_kv_store_info(store, &keys, &allocated, nullptr, nullptr, nullptr), DELTAKV_OK);
  EXPECT_EQ(keys, 0u);
  EXPECT_EQ(allocated, 0u);
  int outcome = 0;
  EXPECT_EQ(deltakv_kv_store_outcome_at(store, 0, &outcome), DELTAKV_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(deltakv_kv_store(c, store, nullptr, 0), DELTAKV_OK);
  EXPECT_EQ(deltakv_kv_complete_store(c, store), DELTAKV_OK);
  EXPECT_EQ(deltakv_kv_store_free(store), DELTAKV_OK);

  // Where 0 cannot mean anything it is an error.
  deltakv_kv_event event;
  EXPECT_EQ(deltakv_kv_drain_events(c, &event, 0, &n), DELTAKV_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(LastError(), "deltakv_kv_drain_events: capacity is 0");
  const deltakv_kv_key_context ctx = deltakv_kv_default_key_context();
  const uint32_t tokens[4] = {1, 2, 3, 4};
  deltakv_kv_key out[4];
  EXPECT_EQ(deltakv_kv_chain_keys(&ctx, tokens, 4, 0, nullptr, out, 4, &n),
            DELTAKV_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(deltakv_kv_engine_hash_keys(&ctx, tokens, 0, 1, out), DELTAKV_ERR_INVALID_ARGUMENT);
  // No tokens: no keys (and no output array needed).
  EXPECT_EQ(deltakv_kv_chain_keys(&ctx, nullptr, 0, 4, nullptr, nullptr, 0, &n), DELTAKV_OK);
  EXPECT_EQ(n, 0u);
  EXPECT_EQ(deltakv_kv_engine_hash_keys(&ctx, nullptr, 32, 0, nullptr), DELTAKV_OK);
}

// ---- Handles ----------------------------------------------------------------------------------

TEST_F(KvCApiTest, HandleMisuseIsRejectedAndLeavesTheHandleUsable) {
  MakePool(8, BlockBytes(FakeLayoutKind::kCrossLayer));
  FakeEngineKv mem(FakeLayoutKind::kCrossLayer, kLayers, kEngineBlocks, kTensorBytes);
  CLayout layout = DescribeLayout(mem, FakeLayoutKind::kCrossLayer, DELTAKV_KV_LAYOUT_CROSS_LAYER);
  deltakv_kv_client* c = Open(layout);
  deltakv_kv_client* other = Open(layout);
  ASSERT_NE(c, nullptr);
  ASSERT_NE(other, nullptr);
  const int kInvalid = DELTAKV_ERR_INVALID_ARGUMENT;
  const int kState = DELTAKV_ERR_FAILED_PRECONDITION;

  // Stores.
  const std::vector<deltakv_kv_key> dup = {CKey(KeyOf(1)), CKey(KeyOf(2)), CKey(KeyOf(1))};
  deltakv_kv_store_handle* store = nullptr;
  EXPECT_EQ(deltakv_kv_prepare_store(c, dup.data(), nullptr, 3, nullptr, &store), kInvalid);
  EXPECT_NE(LastError().find("repeated"), std::string::npos) << LastError();
  EXPECT_EQ(store, nullptr);
  const std::vector<deltakv_kv_key> keys = CKeys(0, 2);
  for (uint64_t i = 0; i < 2; ++i) mem.WriteBlock(i, ImageForKey(KeyOf(i), mem.block_bytes()));
  ASSERT_EQ(deltakv_kv_prepare_store(c, keys.data(), nullptr, 2, nullptr, &store), DELTAKV_OK);
  int done = 0;
  EXPECT_EQ(deltakv_kv_store_query(store, &done), kState);  // nothing started yet
  EXPECT_EQ(LastError(), "deltakv_kv_store_query: no store was started on this handle");
  const std::vector<uint64_t> one = {0};
  const std::vector<uint64_t> out_of_range = {0, kEngineBlocks};
  const std::vector<uint64_t> blocks = {0, 1};
  EXPECT_EQ(deltakv_kv_store(c, store, one.data(), 1), kInvalid);  // count mismatch
  EXPECT_EQ(deltakv_kv_store(c, store, out_of_range.data(), 2), kInvalid);
  EXPECT_EQ(deltakv_kv_store(other, store, blocks.data(), 2), kInvalid);
  EXPECT_EQ(LastError(), "deltakv_kv_store: store handle belongs to another client");
  EXPECT_EQ(deltakv_kv_complete_store(other, store), kInvalid);
  // A store handle passed where a load handle goes.
  auto* as_load = reinterpret_cast<deltakv_kv_load_handle*>(store);
  EXPECT_EQ(deltakv_kv_load(c, as_load, blocks.data(), 2), kInvalid);
  EXPECT_EQ(deltakv_kv_complete_load(c, as_load), kInvalid);
  EXPECT_EQ(deltakv_kv_load_free(as_load), kInvalid);
  EXPECT_NE(LastError().find("not a deltakv_kv_load handle"), std::string::npos);
  // The handle still works after every rejected call.
  ASSERT_EQ(deltakv_kv_store(c, store, blocks.data(), 2), DELTAKV_OK) << LastError();
  EXPECT_EQ(deltakv_kv_store(c, store, blocks.data(), 2), kState);  // started twice
  ASSERT_EQ(deltakv_kv_complete_store(c, store), DELTAKV_OK);
  EXPECT_EQ(deltakv_kv_complete_store(c, store), kState);  // completed twice
  EXPECT_EQ(LastError(), "deltakv_kv_complete_store: store handle was already completed");
  EXPECT_EQ(deltakv_kv_store(c, store, blocks.data(), 2), kState);
  EXPECT_EQ(deltakv_kv_store_query(store, &done), kState);
  size_t allocated = 0;  // the outcome stays readable after completion
  EXPECT_EQ(deltakv_kv_store_info(store, nullptr, &allocated, nullptr, nullptr, nullptr),
            DELTAKV_OK);
  EXPECT_EQ(allocated, 2u);
  EXPECT_EQ(deltakv_kv_store_free(store), DELTAKV_OK);

  // Loads.
  deltakv_kv_load_handle* load = nullptr;
  const std::vector<deltakv_kv_key> missing = {keys[0], CKey(KeyOf(50))};
  EXPECT_EQ(deltakv_kv_prepare_load(c, missing.data(), 2, &load), DELTAKV_ERR_NOT_FOUND);
  EXPECT_EQ(load, nullptr);
  EXPECT_EQ(pool_->Stats().pinned_slots, 0u);  // nothing pinned on failure
  ASSERT_EQ(deltakv_kv_prepare_load(c, keys.data(), 2, &load), DELTAKV_OK);
  EXPECT_EQ(deltakv_kv_load_query(load, &done), kState);
  const std::vector<uint64_t> same = {3, 3};
  const std::vector<uint64_t> three = {3, 4, 5};
  const std::vector<uint64_t> dst = {3, 4};
  EXPECT_EQ(deltakv_kv_load(c, load, same.data(), 2), kInvalid);
  EXPECT_NE(LastError().find("destination twice"), std::string::npos);
  EXPECT_EQ(deltakv_kv_load(c, load, three.data(), 3), kInvalid);
  EXPECT_EQ(deltakv_kv_load(c, load, out_of_range.data(), 2), kInvalid);
  EXPECT_EQ(deltakv_kv_load(other, load, dst.data(), 2), kInvalid);
  EXPECT_EQ(deltakv_kv_complete_load(other, load), kInvalid);
  auto* as_store = reinterpret_cast<deltakv_kv_store_handle*>(load);
  EXPECT_EQ(deltakv_kv_complete_store(c, as_store), kInvalid);
  EXPECT_EQ(deltakv_kv_store_free(as_store), kInvalid);
  // A pinned block cannot be removed.
  EXPECT_EQ(deltakv_kv_remove(c, keys[0]), kState);
  ASSERT_EQ(deltakv_kv_load(c, load, dst.data(), 2), DELTAKV_OK);
  EXPECT_EQ(deltakv_kv_load(c, load, dst.data(), 2), kState);
  EXPECT_EQ(LastError(), "deltakv_kv_load: kv tier: load already issued on this handle");
  ASSERT_EQ(deltakv_kv_complete_load(c, load), DELTAKV_OK);
  EXPECT_EQ(deltakv_kv_complete_load(c, load), kState);
  EXPECT_EQ(deltakv_kv_load_wait(load, 0, &done), kState);
  EXPECT_EQ(deltakv_kv_load_free(load), DELTAKV_OK);
  EXPECT_EQ(mem.ReadBlock(3), ImageForKey(KeyOf(0), mem.block_bytes()));
  EXPECT_EQ(deltakv_kv_remove(c, keys[0]), DELTAKV_OK);
  EXPECT_EQ(deltakv_kv_remove(c, keys[0]), DELTAKV_ERR_NOT_FOUND);
}

// deltakv_kv_store refuses an engine block given to two ALLOCATED keys, as deltakv_kv_load does
// a repeated destination; entries of keys that got no slot are not read.
TEST_F(KvCApiTest, StoreRejectsARepeatedEngineBlockOfAllocatedKeys) {
  MakePool(8, BlockBytes(FakeLayoutKind::kCrossLayer));
  FakeEngineKv mem(FakeLayoutKind::kCrossLayer, kLayers, kEngineBlocks, kTensorBytes);
  deltakv_kv_client* c =
      Open(DescribeLayout(mem, FakeLayoutKind::kCrossLayer, DELTAKV_KV_LAYOUT_CROSS_LAYER));
  ASSERT_NE(c, nullptr);
  StoreAll(c, mem, CKeys(0, 1), Iota(0, 1));
  const std::vector<deltakv_kv_key> keys = CKeys(0, 3);  // key 0 is stored already
  std::vector<uint8_t> outcomes(3, 0xEE);
  deltakv_kv_store_handle* store = nullptr;
  ASSERT_EQ(deltakv_kv_prepare_store(c, keys.data(), nullptr, 3, outcomes.data(), &store),
            DELTAKV_OK)
      << LastError();
  ASSERT_EQ(outcomes,
            (std::vector<uint8_t>{DELTAKV_KV_STORE_ALREADY_STORED, DELTAKV_KV_STORE_ALLOCATED,
                                  DELTAKV_KV_STORE_ALLOCATED}));
  for (uint64_t i = 1; i < 3; ++i) mem.WriteBlock(i + 3, ImageForKey(KeyOf(i), mem.block_bytes()));

  const std::vector<uint64_t> repeated = {1, 4, 4};
  EXPECT_EQ(deltakv_kv_store(c, store, repeated.data(), 3), DELTAKV_ERR_INVALID_ARGUMENT);
  EXPECT_NE(LastError().find("engine block 4"), std::string::npos) << LastError();
  int done = 0;  // nothing was started
  EXPECT_EQ(deltakv_kv_store_query(store, &done), DELTAKV_ERR_FAILED_PRECONDITION);
  size_t allocated = 0;
  EXPECT_EQ(deltakv_kv_store_info(store, nullptr, &allocated, nullptr, nullptr, nullptr),
            DELTAKV_OK);
  EXPECT_EQ(allocated, 2u);
  EXPECT_EQ(pool_->Stats().stores_committed, 1u);

  // The entry of the already stored key is not read: it may repeat a block, or be out of range.
  const std::vector<uint64_t> unread_repeat = {4, 4, 5};
  ASSERT_EQ(deltakv_kv_store(c, store, unread_repeat.data(), 3), DELTAKV_OK) << LastError();
  ASSERT_EQ(deltakv_kv_complete_store(c, store), DELTAKV_OK) << LastError();
  EXPECT_EQ(deltakv_kv_store_free(store), DELTAKV_OK);
  const std::vector<deltakv_kv_key> more = CKeys(2, 2);  // key 3 is the new one
  store = nullptr;
  ASSERT_EQ(deltakv_kv_prepare_store(c, more.data(), nullptr, 2, nullptr, &store), DELTAKV_OK);
  mem.WriteBlock(6, ImageForKey(KeyOf(3), mem.block_bytes()));
  const std::vector<uint64_t> unread_out_of_range = {kEngineBlocks + 9, 6};
  ASSERT_EQ(deltakv_kv_store(c, store, unread_out_of_range.data(), 2), DELTAKV_OK) << LastError();
  ASSERT_EQ(deltakv_kv_complete_store(c, store), DELTAKV_OK) << LastError();
  EXPECT_EQ(deltakv_kv_store_free(store), DELTAKV_OK);

  const std::vector<deltakv_kv_key> reload = CKeys(1, 3);
  deltakv_kv_load_handle* load = nullptr;
  ASSERT_EQ(deltakv_kv_prepare_load(c, reload.data(), 3, &load), DELTAKV_OK) << LastError();
  const std::vector<uint64_t> dst = {10, 11, 12};
  ASSERT_EQ(deltakv_kv_load(c, load, dst.data(), 3), DELTAKV_OK) << LastError();
  ASSERT_EQ(deltakv_kv_complete_load(c, load), DELTAKV_OK) << LastError();
  EXPECT_EQ(deltakv_kv_load_free(load), DELTAKV_OK);
  for (uint64_t i = 0; i < 3; ++i) {
    EXPECT_EQ(mem.ReadBlock(10 + i), ImageForKey(KeyOf(1 + i), mem.block_bytes())) << i;
  }
}

TEST_F(KvCApiTest, CapsOnKeysPerCall) {
  MakePool(8, BlockBytes(FakeLayoutKind::kCrossLayer));
  FakeEngineKv mem(FakeLayoutKind::kCrossLayer, kLayers, kEngineBlocks, kTensorBytes);
  deltakv_kv_client_params p =
      Params(DescribeLayout(mem, FakeLayoutKind::kCrossLayer, DELTAKV_KV_LAYOUT_CROSS_LAYER));
  p.max_keys_per_call = 2;
  deltakv_kv_client* c = nullptr;
  ASSERT_EQ(deltakv_kv_client_open(&p, &c), DELTAKV_OK);
  clients_.push_back(c);
  const std::vector<deltakv_kv_key> keys = CKeys(0, 3);
  deltakv_kv_store_handle* store = nullptr;
  EXPECT_EQ(deltakv_kv_prepare_store(c, keys.data(), nullptr, 3, nullptr, &store),
            DELTAKV_ERR_INVALID_ARGUMENT);
  EXPECT_NE(LastError().find("cap 2"), std::string::npos) << LastError();
  deltakv_kv_load_handle* load = nullptr;
  EXPECT_EQ(deltakv_kv_prepare_load(c, keys.data(), 3, &load), DELTAKV_ERR_INVALID_ARGUMENT);
}

TEST_F(KvCApiTest, StoreIsRefusedWhenEverythingIsPinned) {
  MakePool(4, BlockBytes(FakeLayoutKind::kCrossLayer));
  FakeEngineKv mem(FakeLayoutKind::kCrossLayer, kLayers, kEngineBlocks, kTensorBytes);
  deltakv_kv_client* c =
      Open(DescribeLayout(mem, FakeLayoutKind::kCrossLayer, DELTAKV_KV_LAYOUT_CROSS_LAYER));
  ASSERT_NE(c, nullptr);
  const std::vector<deltakv_kv_key> stored = CKeys(0, 4);
  StoreAll(c, mem, stored, Iota(0, 4));
  deltakv_kv_load_handle* pins = nullptr;
  ASSERT_EQ(deltakv_kv_prepare_load(c, stored.data(), 4, &pins), DELTAKV_OK);

  std::vector<deltakv_kv_key> wanted = CKeys(100, 2);
  wanted.insert(wanted.begin(), stored[1]);
  std::vector<uint8_t> outcomes(3, 0xEE);
  deltakv_kv_store_handle* store = nullptr;
  ASSERT_EQ(deltakv_kv_prepare_store(c, wanted.data(), nullptr, 3, outcomes.data(), &store),
            DELTAKV_OK)
      << LastError();
  EXPECT_EQ(outcomes, (std::vector<uint8_t>{DELTAKV_KV_STORE_ALREADY_STORED,
                                            DELTAKV_KV_STORE_REFUSED, DELTAKV_KV_STORE_REFUSED}));
  size_t already = 0, refused = 0, allocated = 9;
  EXPECT_EQ(deltakv_kv_store_info(store, nullptr, &allocated, &already, nullptr, &refused),
            DELTAKV_OK);
  EXPECT_EQ(allocated, 0u);
  EXPECT_EQ(already, 1u);
  EXPECT_EQ(refused, 2u);
  const std::vector<uint64_t> blocks = Iota(5, 3);
  EXPECT_EQ(deltakv_kv_store(c, store, blocks.data(), 3), DELTAKV_OK);  // nothing to copy
  int done = 0;
  EXPECT_EQ(deltakv_kv_store_query(store, &done), DELTAKV_OK);
  EXPECT_EQ(done, 1);
  EXPECT_EQ(deltakv_kv_complete_store(c, store), DELTAKV_OK);
  EXPECT_EQ(deltakv_kv_store_free(store), DELTAKV_OK);
  EXPECT_EQ(deltakv_kv_load_free(pins), DELTAKV_OK);  // never loaded: just unpins
  EXPECT_EQ(pool_->Stats().pinned_slots, 0u);

  // In flight: a second store of keys being written reports them, then the first finishes.
  deltakv_kv_store_handle* first = nullptr;
  deltakv_kv_store_handle* second = nullptr;
  const std::vector<deltakv_kv_key> fresh = CKeys(200, 2);
  ASSERT_EQ(deltakv_kv_prepare_store(c, fresh.data(), nullptr, 2, nullptr, &first), DELTAKV_OK);
  ASSERT_EQ(deltakv_kv_prepare_store(c, fresh.data(), nullptr, 2, outcomes.data(), &second),
            DELTAKV_OK);
  EXPECT_EQ(outcomes[0], DELTAKV_KV_STORE_IN_FLIGHT);
  EXPECT_EQ(outcomes[1], DELTAKV_KV_STORE_IN_FLIGHT);
  EXPECT_EQ(deltakv_kv_store_free(second), DELTAKV_OK);
  const std::vector<uint64_t> two = Iota(0, 2);
  ASSERT_EQ(deltakv_kv_store(c, first, two.data(), 2), DELTAKV_OK);
  ASSERT_EQ(deltakv_kv_complete_store(c, first), DELTAKV_OK);
  EXPECT_EQ(deltakv_kv_store_free(first), DELTAKV_OK);
  size_t hits = 0;
  EXPECT_EQ(deltakv_kv_lookup(c, fresh.data(), 2, &hits), DELTAKV_OK);
  EXPECT_EQ(hits, 2u);
}

// Handles and their client may be released in any order.
TEST_F(KvCApiTest, HandlesAndClientReleaseInAnyOrder) {
  MakePool(16, BlockBytes(FakeLayoutKind::kPerLayerKV));
  FakeEngineKv mem(FakeLayoutKind::kPerLayerKV, kLayers, kEngineBlocks, kTensorBytes);
  CLayout layout = DescribeLayout(mem, FakeLayoutKind::kPerLayerKV, DELTAKV_KV_LAYOUT_PER_LAYER);
  deltakv_kv_client_params p = Params(layout);
  deltakv_kv_client* keeper = Open(layout);
  ASSERT_NE(keeper, nullptr);
  const std::vector<deltakv_kv_key> stored = CKeys(0, 4);
  StoreAll(keeper, mem, stored, Iota(0, 4));

  // Freed before completion: the started store is aborted (nothing published), the load unpins.
  deltakv_kv_client* c = nullptr;
  ASSERT_EQ(deltakv_kv_client_open(&p, &c), DELTAKV_OK);
  const std::vector<deltakv_kv_key> fresh = CKeys(10, 3);
  deltakv_kv_store_handle* store = nullptr;
  ASSERT_EQ(deltakv_kv_prepare_store(c, fresh.data(), nullptr, 3, nullptr, &store), DELTAKV_OK);
  const std::vector<uint64_t> three = Iota(4, 3);
  ASSERT_EQ(deltakv_kv_store(c, store, three.data(), 3), DELTAKV_OK);
  deltakv_kv_load_handle* load = nullptr;
  ASSERT_EQ(deltakv_kv_prepare_load(c, stored.data(), 4, &load), DELTAKV_OK);
  const std::vector<uint64_t> four = Iota(8, 4);
  ASSERT_EQ(deltakv_kv_load(c, load, four.data(), 4), DELTAKV_OK);
  EXPECT_EQ(deltakv_kv_store_free(store), DELTAKV_OK);
  EXPECT_EQ(deltakv_kv_load_free(load), DELTAKV_OK);
  EXPECT_EQ(pool_->Stats().writing_slots, 0u);
  EXPECT_EQ(pool_->Stats().pinned_slots, 0u);
  size_t hits = 9;
  EXPECT_EQ(deltakv_kv_lookup(c, fresh.data(), 3, &hits), DELTAKV_OK);
  EXPECT_EQ(hits, 0u);

  // Client closed first, with a started store, a completed store, a pinned load and a loading
  // load alive: the client finishes them; they then refuse everything but free.
  deltakv_kv_store_handle* started = nullptr;
  deltakv_kv_store_handle* completed = nullptr;
  deltakv_kv_load_handle* pinned = nullptr;
  deltakv_kv_load_handle* loading = nullptr;
  ASSERT_EQ(deltakv_kv_prepare_store(c, fresh.data(), nullptr, 3, nullptr, &started), DELTAKV_OK);
  ASSERT_EQ(deltakv_kv_store(c, started, three.data(), 3), DELTAKV_OK);
  const std::vector<deltakv_kv_key> other = CKeys(20, 1);
  const std::vector<uint64_t> one = {7};
  ASSERT_EQ(deltakv_kv_prepare_store(c, other.data(), nullptr, 1, nullptr, &completed), DELTAKV_OK);
  ASSERT_EQ(deltakv_kv_store(c, completed, one.data(), 1), DELTAKV_OK);
  ASSERT_EQ(deltakv_kv_complete_store(c, completed), DELTAKV_OK);
  ASSERT_EQ(deltakv_kv_prepare_load(c, stored.data(), 2, &pinned), DELTAKV_OK);
  ASSERT_EQ(deltakv_kv_prepare_load(c, stored.data() + 2, 2, &loading), DELTAKV_OK);
  const std::vector<uint64_t> two = Iota(12, 2);
  ASSERT_EQ(deltakv_kv_load(c, loading, two.data(), 2), DELTAKV_OK);
  EXPECT_EQ(pool_->Stats().pinned_slots, 4u);
  EXPECT_EQ(pool_->Stats().writing_slots, 3u);

  ASSERT_EQ(deltakv_kv_client_close(c), DELTAKV_OK);
  EXPECT_EQ(pool_->Stats().pinned_slots, 0u);
  EXPECT_EQ(pool_->Stats().writing_slots, 0u);
  EXPECT_EQ(deltakv_kv_lookup(keeper, fresh.data(), 3, &hits), DELTAKV_OK);
  EXPECT_EQ(hits, 0u);  // the uncompleted store published nothing
  EXPECT_EQ(deltakv_kv_lookup(keeper, other.data(), 1, &hits), DELTAKV_OK);
  EXPECT_EQ(hits, 1u);  // the completed one stays
  int done = 0;
  size_t n = 9;
  EXPECT_EQ(deltakv_kv_store_query(started, &done), DELTAKV_ERR_FAILED_PRECONDITION);
  EXPECT_EQ(LastError(),
            "deltakv_kv_store_query: store handle's client was closed (only free it now)");
  EXPECT_EQ(deltakv_kv_load_wait(loading, -1, &done), DELTAKV_ERR_FAILED_PRECONDITION);
  EXPECT_EQ(deltakv_kv_load_size(pinned, &n), DELTAKV_OK);
  EXPECT_EQ(n, 0u);
  EXPECT_EQ(deltakv_kv_store_free(completed), DELTAKV_OK);
  EXPECT_EQ(deltakv_kv_load_free(loading), DELTAKV_OK);
  EXPECT_EQ(deltakv_kv_store_free(started), DELTAKV_OK);
  EXPECT_EQ(deltakv_kv_load_free(pinned), DELTAKV_OK);
  EXPECT_EQ(pool_->Stats().ready_slots, 5u);
}

// ---- Keys -------------------------------------------------------------------------------------

TEST_F(KvCApiTest, KeysFollowTheKeySpec) {
  deltakv_kv_key_context c = deltakv_kv_default_key_context();
  c.model_fingerprint = "meta-llama/Llama-3.1-8B@0e9e39f";
  c.kv_dtype = "bfloat16";
  c.kv_layout = "NHD";
  c.tp_rank = 0;
  c.tp_size = 2;
  // docs/KEYS.md §8: chain B xxh3 block=4 tokens=1..10.
  std::vector<uint32_t> tokens(10);
  std::iota(tokens.begin(), tokens.end(), 1u);
  deltakv_kv_key keys[3];
  size_t n = 0;
  ASSERT_EQ(deltakv_kv_chain_keys(&c, tokens.data(), tokens.size(), 4, nullptr, keys, 3, &n),
            DELTAKV_OK)
      << LastError();
  ASSERT_EQ(n, 2u);
  char hex[33];
  ASSERT_EQ(deltakv_kv_key_to_hex(keys[0], hex, sizeof(hex)), DELTAKV_OK);
  EXPECT_STREQ(hex, "6811a7517873892c0f2492ca0d09dda6");
  ASSERT_EQ(deltakv_kv_key_to_hex(keys[1], hex, sizeof(hex)), DELTAKV_OK);
  EXPECT_STREQ(hex, "988fe35c554d50f92303022707901e53");
  EXPECT_EQ(deltakv_kv_key_to_hex(keys[1], hex, 32), DELTAKV_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(deltakv_kv_key_to_hex(keys[1], nullptr, 33), DELTAKV_ERR_INVALID_ARGUMENT);

  // The same as the C++ implementation, continuing from a parent, and with extra keys.
  c.adapter_id = "sql-lora";
  c.salt = "tenant-42";
  c.hash_kind = DELTAKV_KV_HASH_SHA256;
  kvtier::KeyContext cc;
  cc.model_fingerprint = c.model_fingerprint;
  cc.kv_dtype = c.kv_dtype;
  cc.kv_layout = c.kv_layout;
  cc.tp_rank = 0;
  cc.tp_size = 2;
  cc.adapter_id = "sql-lora";
  cc.salt = "tenant-42";
  cc.kind = kvtier::HashKind::kSha256;
  const kvtier::BlockKey parent{7, 9};
  const deltakv_kv_key c_parent{7, 9};
  StatusOr<std::vector<kvtier::BlockKey>> want = kvtier::ChainKeys(cc, tokens, 3, &parent);
  ASSERT_TRUE(want.ok());
  ASSERT_EQ(deltakv_kv_chain_keys(&c, tokens.data(), tokens.size(), 3, &c_parent, keys, 3, &n),
            DELTAKV_OK);
  ASSERT_EQ(n, 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(keys[i].lo, (*want)[i].lo);
    EXPECT_EQ(keys[i].hi, (*want)[i].hi);
  }
  const uint8_t hashes[2][8] = {{1, 2, 3, 4, 5, 6, 7, 8}, {8, 7, 6, 5, 4, 3, 2, 1}};
  ASSERT_EQ(deltakv_kv_engine_hash_keys(&c, hashes, 8, 2, keys), DELTAKV_OK);
  for (size_t i = 0; i < 2; ++i) {
    StatusOr<kvtier::BlockKey> k = kvtier::KeyFromEngineHash(hashes[i], cc);
    ASSERT_TRUE(k.ok());
    EXPECT_EQ(keys[i].lo, k->lo);
    EXPECT_EQ(keys[i].hi, k->hi);
  }
  uint64_t fp = 0;
  ASSERT_EQ(deltakv_kv_token_fingerprint(tokens.data(), 4, &fp), DELTAKV_OK);
  EXPECT_EQ(fp, kvtier::TokenFingerprint(std::span<const uint32_t>(tokens.data(), 4)));
  EXPECT_EQ(deltakv_kv_token_fingerprint(nullptr, 4, &fp), DELTAKV_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(deltakv_kv_token_fingerprint(tokens.data(), 4, nullptr), DELTAKV_ERR_INVALID_ARGUMENT);

  // Too small an output: the count needed is still reported.
  n = 0;
  EXPECT_EQ(deltakv_kv_chain_keys(&c, tokens.data(), tokens.size(), 3, nullptr, keys, 2, &n),
            DELTAKV_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(n, 3u);
  EXPECT_NE(LastError().find("need 3"), std::string::npos) << LastError();
  EXPECT_EQ(deltakv_kv_chain_keys(&c, tokens.data(), tokens.size(), 3, nullptr, nullptr, 0, &n),
            DELTAKV_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(deltakv_kv_chain_keys(&c, tokens.data(), tokens.size(), 3, nullptr, keys, 3, nullptr),
            DELTAKV_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(deltakv_kv_chain_keys(&c, nullptr, 8, 4, nullptr, keys, 3, &n),
            DELTAKV_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(deltakv_kv_chain_keys(&c, tokens.data(), 10, 70000, nullptr, keys, 3, &n),
            DELTAKV_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(deltakv_kv_engine_hash_keys(&c, hashes, 257, 1, keys), DELTAKV_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(deltakv_kv_engine_hash_keys(&c, nullptr, 8, 2, keys), DELTAKV_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(deltakv_kv_engine_hash_keys(&c, hashes, 8, 2, nullptr), DELTAKV_ERR_INVALID_ARGUMENT);

  // Bad contexts.
  auto bad = [&](const deltakv_kv_key_context* ctx, const char* fragment) {
    EXPECT_EQ(deltakv_kv_chain_keys(ctx, tokens.data(), 4, 4, nullptr, keys, 3, &n),
              DELTAKV_ERR_INVALID_ARGUMENT);
    EXPECT_NE(LastError().find(fragment), std::string::npos) << LastError();
    EXPECT_EQ(deltakv_kv_engine_hash_keys(ctx, hashes, 8, 1, keys), DELTAKV_ERR_INVALID_ARGUMENT);
  };
  bad(nullptr, "key context is NULL");
  deltakv_kv_key_context b = c;
  b.tp_rank = 2;
  bad(&b, "tp_rank 2 is not in [0, tp_size 2)");
  b = c;
  b.tp_size = 0;
  b.tp_rank = 1;
  bad(&b, "without a tp_size");
  b = c;
  b.hash_kind = 7;
  bad(&b, "hash_kind 7");
  b = c;
  const std::string long_salt(5000, 's');
  b.salt = long_salt.c_str();
  bad(&b, "salt");
  // A zeroed context has no struct_size: refused, with the fix in the message.
  deltakv_kv_key_context zero;
  std::memset(&zero, 0, sizeof(zero));
  bad(&zero, "deltakv_kv_default_key_context");
  // A context from a newer header: accepted while its unknown tail is zero.
  struct Newer {
    deltakv_kv_key_context base;
    uint64_t extra;
  } newer{deltakv_kv_default_key_context(), 0};
  newer.base.struct_size = sizeof(Newer);
  deltakv_kv_key a_key, b_key;
  ASSERT_EQ(deltakv_kv_chain_keys(&newer.base, tokens.data(), 4, 4, nullptr, &a_key, 1, &n),
            DELTAKV_OK);
  newer.extra = 1;
  bad(&newer.base, "newer header");
  const deltakv_kv_key_context defaults = deltakv_kv_default_key_context();
  ASSERT_EQ(deltakv_kv_chain_keys(&defaults, tokens.data(), 4, 4, nullptr, &b_key, 1, &n),
            DELTAKV_OK);
  ASSERT_EQ(deltakv_kv_key_to_hex(a_key, hex, sizeof(hex)), DELTAKV_OK);
  EXPECT_STREQ(hex, "a4b5c1a5c0f384a78fa039e5cfef3a2a");  // docs/KEYS.md: chain A, 1..4
  EXPECT_EQ(a_key.lo, b_key.lo);
  EXPECT_EQ(a_key.hi, b_key.hi);
}

// ---- Events, stats, errors --------------------------------------------------------------------

TEST_F(KvCApiTest, EventsDrainInOrderAcrossCalls) {
  MakePool(4, BlockBytes(FakeLayoutKind::kCrossLayer));
  FakeEngineKv mem(FakeLayoutKind::kCrossLayer, kLayers, kEngineBlocks, kTensorBytes);
  CLayout layout = DescribeLayout(mem, FakeLayoutKind::kCrossLayer, DELTAKV_KV_LAYOUT_CROSS_LAYER);
  deltakv_kv_client* c = Open(layout);
  ASSERT_NE(c, nullptr);
  StoreAll(c, mem, CKeys(0, 4), Iota(0, 4));
  size_t found = 0;
  const std::vector<deltakv_kv_key> recent = CKeys(0, 2);
  ASSERT_EQ(deltakv_kv_touch(c, recent.data(), 2, &found), DELTAKV_OK);
  EXPECT_EQ(found, 2u);
  StoreAll(c, mem, CKeys(10, 2), Iota(4, 2));  // evicts 2 and 3 (least recently used)
  ASSERT_EQ(deltakv_kv_remove(c, CKey(KeyOf(0))), DELTAKV_OK);

  std::vector<std::pair<int32_t, uint64_t>> got;  // kind, key.lo
  deltakv_kv_event buf[3];
  size_t n = 0;
  do {
    ASSERT_EQ(deltakv_kv_drain_events(c, buf, 3, &n), DELTAKV_OK);
    for (size_t i = 0; i < n; ++i) {
      EXPECT_EQ(buf[i].raw_kind, static_cast<uint32_t>(buf[i].kind));
      EXPECT_EQ(buf[i].origin_pid, static_cast<uint32_t>(getpid()));
      EXPECT_EQ(buf[i].reserved, 0u);
      got.emplace_back(buf[i].kind, buf[i].key.lo);
    }
  } while (n == 3);
  const std::vector<std::pair<int32_t, uint64_t>> want = {
      {DELTAKV_KV_EVENT_STORED, KeyOf(0).lo},  {DELTAKV_KV_EVENT_STORED, KeyOf(1).lo},
      {DELTAKV_KV_EVENT_STORED, KeyOf(2).lo},  {DELTAKV_KV_EVENT_STORED, KeyOf(3).lo},
      {DELTAKV_KV_EVENT_EVICTED, KeyOf(2).lo}, {DELTAKV_KV_EVENT_EVICTED, KeyOf(3).lo},
      {DELTAKV_KV_EVENT_STORED, KeyOf(10).lo}, {DELTAKV_KV_EVENT_STORED, KeyOf(11).lo},
      {DELTAKV_KV_EVENT_REMOVED, KeyOf(0).lo}};
  EXPECT_EQ(got, want);

  // A bounded queue drops the oldest and counts them.
  deltakv_kv_client_params p = Params(layout);
  p.max_queued_events = 2;
  deltakv_kv_client* small = nullptr;
  ASSERT_EQ(deltakv_kv_client_open(&p, &small), DELTAKV_OK);
  clients_.push_back(small);
  for (uint64_t k : {1, 10, 11}) ASSERT_EQ(deltakv_kv_remove(small, CKey(KeyOf(k))), DELTAKV_OK);
  ASSERT_EQ(deltakv_kv_drain_events(small, buf, 1, &n), DELTAKV_OK);
  ASSERT_EQ(n, 1u);
  EXPECT_EQ(buf[0].key.lo, KeyOf(10).lo);
  deltakv_kv_stats s{};
  s.struct_size = sizeof(s);
  ASSERT_EQ(deltakv_kv_get_stats(small, &s), DELTAKV_OK);
  EXPECT_EQ(s.events_dropped, 1u);
  EXPECT_EQ(s.removals, 3u);
}

TEST_F(KvCApiTest, PoolEventsReportOtherClientsAndOldParamsStillOpen) {
  MakePool(4, BlockBytes(FakeLayoutKind::kCrossLayer));
  FakeEngineKv mem(FakeLayoutKind::kCrossLayer, kLayers, kEngineBlocks, kTensorBytes);
  CLayout layout = DescribeLayout(mem, FakeLayoutKind::kCrossLayer, DELTAKV_KV_LAYOUT_CROSS_LAYER);
  deltakv_kv_client_params p = Params(layout);
  p.pool_events = 1;
  deltakv_kv_client* watcher = nullptr;
  ASSERT_EQ(deltakv_kv_client_open(&p, &watcher), DELTAKV_OK);
  clients_.push_back(watcher);
  // A caller built against version 1 of the params struct: it ended at open_timeout_ms, and
  // its sizeof (136) took the 4 bytes after it as padding, which such a caller may leave
  // uninitialized; the fields after them are not the caller's.
  static_assert(offsetof(deltakv_kv_client_params, reserved0) ==
                offsetof(deltakv_kv_client_params, open_timeout_ms) + sizeof(uint32_t));
  static_assert(sizeof(void*) != 8 || offsetof(deltakv_kv_client_params, reserved0) == 132);
  deltakv_kv_client_params old = Params(layout);
  old.struct_size = offsetof(deltakv_kv_client_params, reserved0) + sizeof(uint32_t);
  old.reserved0 = 0xdeadbeef;
  old.pool_events = 1;
  deltakv_kv_client* writer = nullptr;
  ASSERT_EQ(deltakv_kv_client_open(&old, &writer), DELTAKV_OK) << LastError();
  clients_.push_back(writer);

  StoreAll(writer, mem, CKeys(0, 2), Iota(0, 2));
  ASSERT_EQ(deltakv_kv_remove(writer, CKey(KeyOf(1))), DELTAKV_OK);
  std::vector<std::pair<int32_t, uint64_t>> got;
  deltakv_kv_event buf[8];
  size_t n = 0;
  ASSERT_EQ(deltakv_kv_drain_events(watcher, buf, 8, &n), DELTAKV_OK);
  for (size_t i = 0; i < n; ++i) {
    EXPECT_EQ(buf[i].origin_pid, static_cast<uint32_t>(getpid()));
    got.emplace_back(buf[i].kind, buf[i].key.lo);
  }
  const std::vector<std::pair<int32_t, uint64_t>> want = {{DELTAKV_KV_EVENT_STORED, KeyOf(0).lo},
                                                          {DELTAKV_KV_EVENT_STORED, KeyOf(1).lo},
                                                          {DELTAKV_KV_EVENT_REMOVED, KeyOf(1).lo}};
  EXPECT_EQ(got, want);
  // The writer did not ask for pool events: it sees only its own (stored twice, removed).
  ASSERT_EQ(deltakv_kv_drain_events(writer, buf, 8, &n), DELTAKV_OK);
  EXPECT_EQ(n, 3u);

  deltakv_kv_stats s{};
  s.struct_size = sizeof(s);
  ASSERT_EQ(deltakv_kv_get_stats(watcher, &s), DELTAKV_OK);
  EXPECT_EQ(s.version, 2u);
  EXPECT_EQ(s.pool_events, 3u);
  EXPECT_EQ(s.events_lost, 0u);
  EXPECT_EQ(s.pool_bytes_in, 2 * BlockBytes(FakeLayoutKind::kCrossLayer));
  EXPECT_EQ(s.pool_bytes_out, 0u);
  EXPECT_GT(s.pool_copy_in_gb_per_s, 0.0);
}

TEST_F(KvCApiTest, StatsHonourTheCallersStructSize) {
  const uint64_t bb = BlockBytes(FakeLayoutKind::kPerLayerKV);
  MakePool(16, bb);
  FakeEngineKv mem(FakeLayoutKind::kPerLayerKV, kLayers, kEngineBlocks, kTensorBytes);
  deltakv_kv_client* c =
      Open(DescribeLayout(mem, FakeLayoutKind::kPerLayerKV, DELTAKV_KV_LAYOUT_PER_LAYER));
  ASSERT_NE(c, nullptr);
  StoreAll(c, mem, CKeys(0, 6), Iota(0, 6));
  size_t hits = 0;
  const std::vector<deltakv_kv_key> probe = CKeys(0, 10);
  ASSERT_EQ(deltakv_kv_lookup(c, probe.data(), 10, &hits), DELTAKV_OK);

  deltakv_kv_stats s;
  std::memset(&s, 0xAB, sizeof(s));
  s.struct_size = sizeof(s);
  ASSERT_EQ(deltakv_kv_get_stats(c, &s), DELTAKV_OK);
  EXPECT_EQ(s.struct_size, sizeof(s));
  EXPECT_EQ(s.version, static_cast<uint32_t>(DELTAKV_KV_STATS_VERSION));
  EXPECT_EQ(s.lookups, 1u);
  EXPECT_EQ(s.hit_blocks, 6u);
  EXPECT_EQ(s.miss_blocks, 4u);
  EXPECT_EQ(s.stores_allocated, 6u);
  EXPECT_EQ(s.stores_committed, 6u);
  EXPECT_EQ(s.store_blocks, 6u);
  EXPECT_EQ(s.store_bytes, 6 * bb);
  EXPECT_EQ(s.store_batches, 1u);
  EXPECT_EQ(s.load_batches, 0u);
  EXPECT_GE(s.store_busy_seconds, 0.0);
  EXPECT_EQ(s.pool_capacity_slots, 16u);
  EXPECT_EQ(s.pool_block_bytes, bb);
  EXPECT_EQ(s.pool_ready_slots, 6u);
  EXPECT_EQ(s.pool_ready_bytes, 6 * bb);
  EXPECT_EQ(s.pool_stores_committed, 6u);
  EXPECT_DOUBLE_EQ(s.occupancy, 6.0 / 16.0);

  // An older caller's smaller struct: only its bytes are written.
  struct Prefix {
    deltakv_kv_stats head;
    unsigned char guard[16];
  } older;
  std::memset(&older, 0xAB, sizeof(older));
  const uint32_t small = offsetof(deltakv_kv_stats, lookups) + 3 * sizeof(uint64_t);
  older.head.struct_size = small;
  ASSERT_EQ(deltakv_kv_get_stats(c, &older.head), DELTAKV_OK);
  EXPECT_EQ(older.head.struct_size, small);
  EXPECT_EQ(older.head.lookups, 1u);
  EXPECT_EQ(older.head.miss_blocks, 4u);
  const unsigned char* raw = reinterpret_cast<const unsigned char*>(&older);
  for (size_t i = small; i < sizeof(older); ++i) ASSERT_EQ(raw[i], 0xAB) << i;

  // A newer caller's larger struct: the unknown tail is zeroed.
  std::vector<unsigned char> newer(sizeof(deltakv_kv_stats) + 32, 0xAB);
  deltakv_kv_stats header{};
  header.struct_size = static_cast<uint32_t>(newer.size());
  std::memcpy(newer.data(), &header, sizeof(uint32_t));
  ASSERT_EQ(deltakv_kv_get_stats(c, reinterpret_cast<deltakv_kv_stats*>(newer.data())), DELTAKV_OK);
  uint32_t filled = 0;
  std::memcpy(&filled, newer.data(), sizeof(filled));
  EXPECT_EQ(filled, sizeof(deltakv_kv_stats));
  for (size_t i = sizeof(deltakv_kv_stats); i < newer.size(); ++i) EXPECT_EQ(newer[i], 0) << i;

  s.struct_size = 4;
  EXPECT_EQ(deltakv_kv_get_stats(c, &s), DELTAKV_ERR_INVALID_ARGUMENT);
  EXPECT_NE(LastError().find("struct_size"), std::string::npos);
}

TEST_F(KvCApiTest, LastErrorIsPerThreadAndClearedBySuccess) {
  size_t n = 0;
  EXPECT_EQ(deltakv_kv_lookup(nullptr, nullptr, 0, &n), DELTAKV_ERR_INVALID_ARGUMENT);
  const std::string mine = LastError();
  EXPECT_EQ(mine, "deltakv_kv_lookup: client is NULL");
  std::string theirs = "unset";
  std::thread other([&] {
    theirs = LastError();
    const deltakv_kv_key_context ctx = deltakv_kv_default_key_context();
    deltakv_kv_key k;
    (void)deltakv_kv_chain_keys(&ctx, nullptr, 0, 0, nullptr, &k, 1, &n);
  });
  other.join();
  EXPECT_EQ(theirs, "");         // another thread starts clean
  EXPECT_EQ(LastError(), mine);  // and its failure does not show here
  uint64_t fp = 0;
  const uint32_t t = 1;
  EXPECT_EQ(deltakv_kv_token_fingerprint(&t, 1, &fp), DELTAKV_OK);
  EXPECT_EQ(LastError(), "");

  EXPECT_STREQ(deltakv_status_name(DELTAKV_OK), "OK");
  EXPECT_STREQ(deltakv_status_name(DELTAKV_ERR_INVALID_ARGUMENT), "INVALID_ARGUMENT");
  EXPECT_STREQ(deltakv_status_name(DELTAKV_ERR_INTERNAL), "INTERNAL");
  EXPECT_STREQ(deltakv_status_name(DELTAKV_ERR_DATA_LOSS), "DATA_LOSS");
  EXPECT_STREQ(deltakv_status_name(-1), "UNKNOWN");
  EXPECT_STREQ(deltakv_status_name(9), "UNKNOWN");
  // One convention for the whole ABI: 0 and positive codes, the same for both halves.
  EXPECT_EQ(static_cast<int>(DELTAKV_ERR_NOT_FOUND), 2);
  EXPECT_EQ(static_cast<int>(DELTAKV_ERR_UNIMPLEMENTED), 7);
}

}  // namespace
}  // namespace deltakv
