// Futex: value-mismatch and timeout behaviour, and a shared (cross-process) wake-up.
#include "shm/futex.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "shm/segment.h"
#include "shm_test_util.h"

namespace deltakv::shm {
namespace {

using namespace std::chrono_literals;
using testing::ForkChild;
using testing::UniqueName;
using testing::WaitChild;

TEST(FutexTest, MismatchReturnsAtOnce) {
  std::atomic<uint32_t> word{5};
  EXPECT_EQ(FutexWait(&word, 4, 10s), FutexWaitResult::kValueMismatch);
  EXPECT_EQ(FutexWait(&word, 4, 0ns), FutexWaitResult::kValueMismatch);
}

TEST(FutexTest, TimesOut) {
  std::atomic<uint32_t> word{5};
  EXPECT_EQ(FutexWait(&word, 5, 0ns), FutexWaitResult::kTimedOut);
  EXPECT_EQ(FutexWait(&word, 5, 5ms), FutexWaitResult::kTimedOut);
}

TEST(FutexTest, WakeWithoutWaitersWakesNobody) {
  std::atomic<uint32_t> word{0};
  EXPECT_EQ(FutexWake(&word, 1), 0);
  EXPECT_EQ(FutexWakeAll(&word), 0);
}

TEST(FutexTest, WakesAnotherThread) {
  std::atomic<uint32_t> word{0};
  std::thread waker([&] {
    std::this_thread::sleep_for(20ms);
    word.store(1);
    FutexWakeAll(&word);
  });
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  while (word.load() == 0 && std::chrono::steady_clock::now() < deadline) {
    FutexWait(&word, 0, 1s);
  }
  EXPECT_EQ(word.load(), 1u);
  waker.join();
}

// The waiter is a child process; the word lives in a shared segment mapped separately by each.
TEST(FutexTest, SharedWakeAcrossProcesses) {
  const std::string name = UniqueName("futex");
  StatusOr<Segment> seg = Segment::Create(name, 4096, SegmentKind::kScratch);
  ASSERT_TRUE(seg.ok());
  seg->Publish();
  auto* word = reinterpret_cast<std::atomic<uint32_t>*>(seg->data() + 64);
  auto* asleep = reinterpret_cast<std::atomic<uint32_t>*>(seg->data() + 128);
  word->store(0);
  asleep->store(0);

  pid_t child = ForkChild([&] {
    StatusOr<Segment> s = Segment::Open(name, SegmentKind::kScratch);
    if (!s.ok()) return 1;
    auto* w = reinterpret_cast<std::atomic<uint32_t>*>(s->data() + 64);
    auto* a = reinterpret_cast<std::atomic<uint32_t>*>(s->data() + 128);
    a->store(1);
    const auto deadline = std::chrono::steady_clock::now() + 60s;
    while (w->load() == 0) {
      if (std::chrono::steady_clock::now() > deadline) return 2;
      FutexWait(w, 0, 10s);
    }
    return w->load() == 7 ? 0 : 3;
  });
  ASSERT_TRUE(testing::WaitFor([&] { return asleep->load() == 1; }));
  std::this_thread::sleep_for(20ms);  // most likely asleep in the kernel by now
  word->store(7);
  FutexWakeAll(word);
  EXPECT_EQ(WaitChild(child), 0);
}

}  // namespace
}  // namespace deltakv::shm
