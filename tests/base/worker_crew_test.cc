#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "base/parallel.h"

namespace deltakv {
namespace {

int AllowedCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return 0;
  return CPU_COUNT(&set);
}

// Each of the n calls happens exactly once, whatever n is next to the crew's size.
TEST(WorkerCrew, MakesEveryCallOnce) {
  for (unsigned helpers : {0u, 1u, 3u}) {
    WorkerCrew crew(helpers);
    EXPECT_EQ(crew.size(), helpers + 1);
    for (unsigned n : {0u, 1u, 2u, helpers + 1, 3 * (helpers + 1) + 1, 17u}) {
      std::vector<std::atomic<int>> calls(n);
      crew.Run(n, [&](unsigned i) { calls[i].fetch_add(1); });
      for (unsigned i = 0; i < n; ++i) {
        EXPECT_EQ(calls[i].load(), 1) << "helpers " << helpers << " n " << n << " call " << i;
      }
    }
  }
}

// Call 0 is the caller's; with room on another CPU the others run at the same time on helper
// threads: call 0 waits for call 1 to have started, which could not happen if they took turns.
TEST(WorkerCrew, RunsCallsAtOnceOnHelperThreads) {
  if (AllowedCpus() < 2) GTEST_SKIP() << "needs two CPUs";
  WorkerCrew crew(1);
  for (int round = 0; round < 50; ++round) {
    std::atomic<bool> started{false};
    std::thread::id caller = std::this_thread::get_id(), ran0, ran1;
    bool saw_other = false;
    crew.Run(2, [&](unsigned i) {
      if (i == 1) {
        ran1 = std::this_thread::get_id();
        started.store(true);
        return;
      }
      ran0 = std::this_thread::get_id();
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (!started.load() && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::yield();
      }
      saw_other = started.load();
    });
    ASSERT_TRUE(saw_other) << "round " << round;
    EXPECT_EQ(ran0, caller);
    EXPECT_NE(ran1, caller);
  }
}

// The helpers may use every CPU the caller may, except the one the caller is on.
TEST(WorkerCrew, KeepsHelpersOffTheCallersCpu) {
  const int allowed = AllowedCpus();
  if (allowed < 2) GTEST_SKIP() << "needs two CPUs";
  WorkerCrew crew(2);
  std::mutex mu;
  std::vector<int> helper_counts;
  crew.Run(3, [&](unsigned i) {
    if (i == 0) return;
    cpu_set_t set;
    CPU_ZERO(&set);
    ASSERT_EQ(sched_getaffinity(0, sizeof(set), &set), 0);
    std::lock_guard<std::mutex> lock(mu);
    helper_counts.push_back(CPU_COUNT(&set));
  });
  ASSERT_EQ(helper_counts.size(), 2u);
  for (int c : helper_counts) EXPECT_EQ(c, allowed - 1);
}

// A caller that may use only its own CPU makes every call itself.
TEST(WorkerCrew, CallerConfinedToOneCpuMakesEveryCall) {
  WorkerCrew crew(2);
  std::thread pinned([&] {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(sched_getcpu(), &one);
    ASSERT_EQ(sched_setaffinity(0, sizeof(one), &one), 0);
    const std::thread::id self = std::this_thread::get_id();
    std::vector<std::thread::id> who(5);
    crew.Run(5, [&](unsigned i) { who[i] = std::this_thread::get_id(); });
    for (unsigned i = 0; i < who.size(); ++i) EXPECT_EQ(who[i], self) << "call " << i;
  });
  pinned.join();
  // The crew still works for an unconfined caller afterwards.
  std::atomic<int> calls{0};
  crew.Run(3, [&](unsigned) { calls.fetch_add(1); });
  EXPECT_EQ(calls.load(), 3);
}

// Runs from several threads take turns; none loses or repeats a call.
TEST(WorkerCrew, ConcurrentRunsTakeTurns) {
  WorkerCrew crew(2);
  std::atomic<uint64_t> total{0};
  std::vector<std::thread> callers;
  for (int c = 0; c < 4; ++c) {
    callers.emplace_back([&] {
      for (int r = 0; r < 200; ++r) {
        std::vector<std::atomic<int>> calls(5);
        crew.Run(5, [&](unsigned i) { calls[i].fetch_add(1); });
        for (auto& k : calls) {
          EXPECT_EQ(k.load(), 1);
          total.fetch_add(static_cast<uint64_t>(k.load()));
        }
      }
    });
  }
  for (auto& t : callers) t.join();
  EXPECT_EQ(total.load(), 4u * 200u * 5u);
}

}  // namespace
}  // namespace deltakv
