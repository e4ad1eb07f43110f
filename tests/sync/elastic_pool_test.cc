// ElasticPool, the HTTP API's worker threads: a job that finds no idle thread gets a new one up
// to the cap, jobs past the cap wait their turn (in order), threads above the minimum end when
// idle, and Shutdown runs what is queued before it joins.
#include "server/elastic_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <vector>

namespace deltakv::sidecar {
namespace {

using namespace std::chrono_literals;

// A gate jobs wait at until it opens, counting those that arrived.
class Gate {
 public:
  void Wait() {
    std::unique_lock<std::mutex> lock(mu_);
    ++arrived_;
    changed_.notify_all();
    changed_.wait(lock, [&] { return open_; });
  }
  void Open() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = true;
    changed_.notify_all();
  }
  // True once `n` jobs wait here (false after `limit`).
  bool WaitArrived(int n, std::chrono::milliseconds limit) {
    std::unique_lock<std::mutex> lock(mu_);
    return changed_.wait_for(lock, limit, [&] { return arrived_ >= n; });
  }
  int arrived() {
    std::lock_guard<std::mutex> lock(mu_);
    return arrived_;
  }

 private:
  std::mutex mu_;
  std::condition_variable changed_;
  int arrived_ = 0;
  bool open_ = false;
};

template <typename Pred>
bool WaitFor(Pred pred, std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(2ms);
  }
  return true;
}

TEST(ElasticPool, StartsAThreadForEachJobThatFindsNoneIdle) {
  ElasticPool pool(2, 16, 10s);
  EXPECT_EQ(pool.threads(), 2u);
  Gate gate;
  for (int i = 0; i < 12; ++i) pool.Enqueue([&] { gate.Wait(); });
  // All twelve run at once: ten threads were started beside the two kept ones.
  EXPECT_TRUE(gate.WaitArrived(12, 10s)) << gate.arrived();
  EXPECT_EQ(pool.threads(), 12u);
  // A job queued while all are busy still runs at once.
  std::atomic<bool> ran{false};
  pool.Enqueue([&] { ran = true; });
  EXPECT_TRUE(WaitFor([&] { return ran.load(); }, 10s));
  gate.Open();
}

TEST(ElasticPool, JobsPastTheCapWaitForAFreeThread) {
  ElasticPool pool(1, 4, 10s);
  Gate gate;
  for (int i = 0; i < 4; ++i) pool.Enqueue([&] { gate.Wait(); });
  ASSERT_TRUE(gate.WaitArrived(4, 10s));
  std::mutex mu;
  std::vector<int> order;
  for (int i = 0; i < 6; ++i) {
    pool.Enqueue([&, i] {
      std::lock_guard<std::mutex> lock(mu);
      order.push_back(i);
    });
  }
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(pool.threads(), 4u);  // the cap
  {
    std::lock_guard<std::mutex> lock(mu);
    EXPECT_TRUE(order.empty());  // every thread is held at the gate
  }
  gate.Open();
  ASSERT_TRUE(WaitFor(
      [&] {
        std::lock_guard<std::mutex> lock(mu);
        return order.size() == 6;
      },
      10s));
  EXPECT_EQ(pool.threads(), 4u);
}

TEST(ElasticPool, ThreadsAboveTheMinimumEndWhenIdle) {
  ElasticPool pool(3, 32, 50ms);
  Gate gate;
  for (int i = 0; i < 10; ++i) pool.Enqueue([&] { gate.Wait(); });
  ASSERT_TRUE(gate.WaitArrived(10, 10s));
  EXPECT_EQ(pool.threads(), 10u);
  gate.Open();
  EXPECT_TRUE(WaitFor([&] { return pool.threads() == 3; }, 10s)) << pool.threads();
  // The kept three never end, and the pool grows again when needed.
  std::this_thread::sleep_for(200ms);
  EXPECT_EQ(pool.threads(), 3u);
  Gate again;
  for (int i = 0; i < 5; ++i) pool.Enqueue([&] { again.Wait(); });
  EXPECT_TRUE(again.WaitArrived(5, 10s));
  again.Open();
}

TEST(ElasticPool, ShutdownRunsWhatIsQueuedThenJoins) {
  std::atomic<int> ran{0};
  {
    ElasticPool pool(1, 1, 10s);
    Gate gate;
    pool.Enqueue([&] { gate.Wait(); });
    ASSERT_TRUE(gate.WaitArrived(1, 10s));
    std::vector<int> order;  // one thread: jobs run in the order queued
    for (int i = 0; i < 20; ++i) {
      pool.Enqueue([&, i] {
        order.push_back(i);
        ++ran;
      });
    }
    EXPECT_EQ(ran.load(), 0);
    std::thread opener([&] {
      std::this_thread::sleep_for(50ms);
      gate.Open();
    });
    pool.Shutdown();
    opener.join();
    EXPECT_EQ(ran.load(), 20);
    for (int i = 0; i < 20; ++i) EXPECT_EQ(order[static_cast<size_t>(i)], i);
    EXPECT_EQ(pool.threads(), 0u);
    pool.Enqueue([&] { ran += 100; });  // after Shutdown: dropped
    pool.Shutdown();                    // again: nothing to do
  }
  EXPECT_EQ(ran.load(), 20);
}

}  // namespace
}  // namespace deltakv::sidecar
