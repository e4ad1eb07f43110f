// CpuCopyEngine: batches land byte for byte, in any split, from many threads; bad regions are
// refused; the destructor finishes what it accepted.
#include "kvtier/copy_engine.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

namespace deltakv::kvtier {
namespace {

struct Batch {
  std::vector<uint8_t> src;
  std::vector<uint8_t> dst;
  std::vector<CopyRegion> regions;
};

// Regions of random sizes (some empty) copying src into dst at shuffled offsets.
Batch MakeBatch(std::mt19937_64& rng, size_t count, size_t max_bytes) {
  Batch b;
  std::vector<size_t> sizes(count);
  size_t total = 0;
  for (size_t& s : sizes) {
    s = rng() % 5 == 0 ? 0 : 1 + rng() % max_bytes;
    total += s;
  }
  b.src.resize(total);
  for (uint8_t& x : b.src) x = static_cast<uint8_t>(rng());
  b.dst.assign(total, 0);
  std::vector<size_t> order(count);
  for (size_t i = 0; i < count; ++i) order[i] = i;
  std::shuffle(order.begin(), order.end(), rng);
  // src offsets in index order, dst offsets in shuffled order.
  std::vector<size_t> src_off(count), dst_off(count);
  size_t off = 0;
  for (size_t i = 0; i < count; ++i) src_off[i] = off, off += sizes[i];
  off = 0;
  for (size_t i : order) dst_off[i] = off, off += sizes[i];
  for (size_t i = 0; i < count; ++i) {
    b.regions.push_back(CopyRegion{b.src.data() + src_off[i], b.dst.data() + dst_off[i], sizes[i]});
  }
  return b;
}

bool Landed(const Batch& b) {
  for (const CopyRegion& r : b.regions) {
    if (r.bytes > 0 && std::memcmp(r.src, r.dst, r.bytes) != 0) return false;
  }
  return true;
}

std::unique_ptr<CpuCopyEngine> MakeEngine(uint32_t threads, uint64_t piece = 4096,
                                          uint64_t cap = 0) {
  CpuCopyEngineOptions o;
  o.threads = threads;
  o.min_piece_bytes = piece;
  o.max_queued_bytes = cap;
  StatusOr<std::unique_ptr<CpuCopyEngine>> e = CpuCopyEngine::Create(o);
  EXPECT_TRUE(e.ok()) << e.status().ToString();
  return std::move(e).value();
}

class CpuCopyEngineTest : public ::testing::TestWithParam<uint32_t> {};

TEST_P(CpuCopyEngineTest, BatchesLandExactly) {
  auto engine = MakeEngine(GetParam());
  std::mt19937_64 rng(GetParam() + 1);
  for (int round = 0; round < 40; ++round) {
    Batch b = MakeBatch(rng, 1 + rng() % 64, 1 + rng() % 20000);
    StatusOr<CopyCompletion> c = engine->Submit(CopyDirection::kToPool, b.regions);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    ASSERT_TRUE(c->Wait().ok());
    EXPECT_TRUE(c->Done());
    EXPECT_TRUE(Landed(b)) << "round " << round;
    CopyTiming t = c->Timing();
    EXPECT_GE(t.done_ns, t.submit_ns);
    EXPECT_GT(t.done_ns, 0u);
  }
}

TEST_P(CpuCopyEngineTest, ConcurrentSubmittersFromManyThreads) {
  auto engine = MakeEngine(GetParam(), 1024);
  std::vector<std::thread> threads;
  std::atomic<int> bad{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(100 + t);
      for (int i = 0; i < 30; ++i) {
        std::vector<Batch> batches;
        std::vector<CopyCompletion> done;
        for (int k = 0; k < 4; ++k) batches.push_back(MakeBatch(rng, 16, 8192));
        for (Batch& b : batches) {
          StatusOr<CopyCompletion> c = engine->Submit(CopyDirection::kFromPool, b.regions);
          if (!c.ok()) {
            ++bad;
            continue;
          }
          done.push_back(*c);
        }
        for (CopyCompletion& c : done) {
          if (!c.Wait().ok()) ++bad;
        }
        for (Batch& b : batches) {
          if (!Landed(b)) ++bad;
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(bad.load(), 0);
}

INSTANTIATE_TEST_SUITE_P(Threads, CpuCopyEngineTest, ::testing::Values(0u, 1u, 4u));

TEST(CpuCopyEngine, EmptyBatchCompletesAtOnce) {
  auto engine = MakeEngine(2);
  StatusOr<CopyCompletion> c = engine->Submit(CopyDirection::kToPool, {});
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c->Done());
  EXPECT_TRUE(c->Wait().ok());
  CopyCompletion none;
  EXPECT_TRUE(none.Done());
  EXPECT_TRUE(none.Wait().ok());
}

TEST(CpuCopyEngine, RefusesBadRegions) {
  auto engine = MakeEngine(2);
  std::vector<uint8_t> buf(64);
  StatusOr<CopyCompletion> null_src =
      engine->Submit(CopyDirection::kToPool, {CopyRegion{nullptr, buf.data(), 4}});
  EXPECT_EQ(null_src.status().code(), StatusCode::kInvalidArgument);
  StatusOr<CopyCompletion> overlap =
      engine->Submit(CopyDirection::kToPool, {CopyRegion{buf.data(), buf.data() + 8, 16}});
  EXPECT_EQ(overlap.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(overlap.status().message().find("overlap"), std::string::npos);
  // Zero-byte regions need no pointers.
  StatusOr<CopyCompletion> empty =
      engine->Submit(CopyDirection::kToPool, {CopyRegion{nullptr, nullptr, 0}});
  EXPECT_TRUE(empty.ok());
  CpuCopyEngineOptions bad;
  bad.min_piece_bytes = 0;
  EXPECT_EQ(CpuCopyEngine::Create(bad).status().code(), StatusCode::kInvalidArgument);
}

TEST(CpuCopyEngine, QueueCapAppliesBackpressureWithoutDeadlock) {
  auto engine = MakeEngine(2, 1024, /*cap=*/16384);
  std::mt19937_64 rng(7);
  std::vector<Batch> batches;
  for (int i = 0; i < 32; ++i) batches.push_back(MakeBatch(rng, 8, 4096));
  batches.push_back(MakeBatch(rng, 64, 4096));  // larger than the cap: still accepted
  std::vector<CopyCompletion> done;
  for (Batch& b : batches) {
    StatusOr<CopyCompletion> c = engine->Submit(CopyDirection::kToPool, b.regions);
    ASSERT_TRUE(c.ok());
    done.push_back(*c);
  }
  for (CopyCompletion& c : done) EXPECT_TRUE(c.Wait().ok());
  for (Batch& b : batches) EXPECT_TRUE(Landed(b));
}

TEST(CpuCopyEngine, DestructorFinishesAcceptedBatches) {
  std::mt19937_64 rng(9);
  std::vector<Batch> batches;
  for (int i = 0; i < 16; ++i) batches.push_back(MakeBatch(rng, 32, 16384));
  std::vector<CopyCompletion> done;
  {
    auto engine = MakeEngine(3, 1024);
    for (Batch& b : batches) done.push_back(*engine->Submit(CopyDirection::kToPool, b.regions));
  }
  for (CopyCompletion& c : done) EXPECT_TRUE(c.Done());
  for (Batch& b : batches) EXPECT_TRUE(Landed(b));
}

}  // namespace
}  // namespace deltakv::kvtier
