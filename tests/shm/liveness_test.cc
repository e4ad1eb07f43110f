// Liveness: heartbeat thread, staleness with an injected clock, process death (exited, zombie,
// SIGKILL, pid reuse) and a stopped process going stale, across real processes.
#include "shm/liveness.h"

#include <gtest/gtest.h>

#include <thread>

#include "shm/segment.h"
#include "shm_test_util.h"

namespace deltakv::shm {
namespace {

using namespace std::chrono_literals;
using testing::ForkChild;
using testing::StaysStill;
using testing::UniqueName;
using testing::WaitChild;
using testing::WaitFor;

constexpr uint64_t kSecond = 1'000'000'000ull;

TEST(LivenessTest, HeartbeatThreadBeatsUntilStopped) {
  Heartbeat hb{};
  {
    HeartbeatThread thread(&hb, 1ms);
    EXPECT_GE(hb.counter.load(), 1u);  // beat once in the constructor
    EXPECT_NE(hb.timestamp_ns.load(), 0u);
    EXPECT_TRUE(WaitFor([&] { return hb.counter.load() >= 5; }));
    thread.Stop();
    EXPECT_FALSE(thread.running());
  }
  const uint64_t after = hb.counter.load();
  std::this_thread::sleep_for(10ms);
  EXPECT_EQ(hb.counter.load(), after);
}

TEST(LivenessTest, HeartbeatThreadStopsBeatingOnceNotTheOwner) {
  Heartbeat hb{};
  std::atomic<bool> owner{true};
  HeartbeatThread thread(&hb, 1ms, [&] { return owner.load(); });
  EXPECT_TRUE(WaitFor([&] { return hb.counter.load() >= 5; }));
  owner.store(false);
  ASSERT_TRUE(StaysStill(hb.counter));  // a beat already under way may land late
  const uint64_t after = hb.counter.load();
  std::this_thread::sleep_for(20ms);
  EXPECT_EQ(hb.counter.load(), after);
  owner.store(true);  // for good: it does not start again
  std::this_thread::sleep_for(20ms);
  EXPECT_EQ(hb.counter.load(), after);
  thread.Stop();  // still joins
  EXPECT_FALSE(thread.running());
}

TEST(LivenessTest, StalenessFollowsTheInjectedClock) {
  Heartbeat hb{};
  const ProcessIdentity self = SelfIdentity();
  LivenessOptions options;                                                           // 1 s
  EXPECT_EQ(CheckPeer(self, hb, options, 5 * kSecond), PeerState::kHeartbeatStale);  // never beat
  Beat(&hb, 10 * kSecond);
  EXPECT_EQ(hb.counter.load(), 1u);
  EXPECT_EQ(CheckPeer(self, hb, options, 10 * kSecond), PeerState::kAlive);
  EXPECT_EQ(CheckPeer(self, hb, options, 10 * kSecond + kSecond / 2), PeerState::kAlive);
  EXPECT_EQ(CheckPeer(self, hb, options, 11 * kSecond), PeerState::kAlive);  // exactly 1 s
  EXPECT_EQ(CheckPeer(self, hb, options, 11 * kSecond + 1), PeerState::kHeartbeatStale);
  EXPECT_EQ(CheckPeer(self, hb, options, 9 * kSecond), PeerState::kAlive);  // beat after "now"
  options.stale_after = 100ms;
  EXPECT_EQ(CheckPeer(self, hb, options, 10 * kSecond + kSecond / 5), PeerState::kHeartbeatStale);
}

TEST(LivenessTest, SelfIsAliveAndBogusPidsAreNot) {
  EXPECT_TRUE(IsProcessAlive(getpid()));
  EXPECT_TRUE(IsProcessAlive(SelfIdentity()));
  EXPECT_NE(SelfIdentity().start_time_ticks, 0u);
  EXPECT_FALSE(IsProcessAlive(0));
  EXPECT_FALSE(IsProcessAlive(-1));
  EXPECT_FALSE(IsProcessAlive(ProcessIdentity{0, 0, 0}));
  EXPECT_FALSE(IsProcessAlive(ProcessIdentity{0x80000000u, 0, 0}));
  EXPECT_TRUE(IsProcessAlive(1));  // init exists (EPERM or not, it is alive)
}

TEST(LivenessTest, ReusedPidIsDetectedByStartTime) {
  ProcessIdentity other = SelfIdentity();
  other.start_time_ticks += 1;
  EXPECT_FALSE(IsProcessAlive(other));
  Heartbeat hb{};
  Beat(&hb);
  EXPECT_EQ(CheckPeer(other, hb), PeerState::kProcessGone);
}

TEST(LivenessTest, ExitedChildIsGoneBeforeAndAfterReaping) {
  pid_t child = ForkChild([] { return 0; });
  // Until it is reaped it is a zombie, which must count as dead.
  EXPECT_TRUE(WaitFor([&] { return !IsProcessAlive(child); }));
  EXPECT_EQ(WaitChild(child), 0);
  EXPECT_FALSE(IsProcessAlive(child));
}

// A child beats a heartbeat in shared memory; SIGKILL makes it "process gone" at once.
TEST(LivenessTest, KilledHeartbeatOwnerIsNoticedWithinASecond) {
  const std::string name = UniqueName("live");
  Segment seg = Segment::Create(name, 4096, SegmentKind::kScratch).value();
  seg.Publish();
  auto* hb = reinterpret_cast<Heartbeat*>(seg.data() + 64);
  pid_t child = ForkChild([&] {
    Segment s = Segment::Open(name, SegmentKind::kScratch).value();
    HeartbeatThread beat(reinterpret_cast<Heartbeat*>(s.data() + 64));
    pause();
    return 0;
  });
  ASSERT_TRUE(WaitFor([&] { return hb->counter.load() >= 2; }));
  const ProcessIdentity identity{static_cast<uint32_t>(child), 0, ProcessStartTimeTicks(child)};
  EXPECT_EQ(CheckPeer(identity, *hb), PeerState::kAlive);
  ASSERT_EQ(kill(child, SIGKILL), 0);
  const auto killed = std::chrono::steady_clock::now();
  ASSERT_TRUE(WaitFor([&] { return CheckPeer(identity, *hb) != PeerState::kAlive; }, 30s));
  EXPECT_LT(std::chrono::steady_clock::now() - killed, 10s);
  EXPECT_EQ(WaitChild(child), 128 + SIGKILL);
  EXPECT_EQ(CheckPeer(identity, *hb), PeerState::kProcessGone);
}

// A stopped process still exists but stops beating: it goes stale after the threshold.
TEST(LivenessTest, StoppedHeartbeatOwnerGoesStale) {
  const std::string name = UniqueName("live");
  Segment seg = Segment::Create(name, 4096, SegmentKind::kScratch).value();
  seg.Publish();
  auto* hb = reinterpret_cast<Heartbeat*>(seg.data() + 64);
  pid_t child = ForkChild([&] {
    Segment s = Segment::Open(name, SegmentKind::kScratch).value();
    HeartbeatThread beat(reinterpret_cast<Heartbeat*>(s.data() + 64), 10ms);
    pause();
    return 0;
  });
  ASSERT_TRUE(WaitFor([&] { return hb->counter.load() >= 2; }));
  const ProcessIdentity identity{static_cast<uint32_t>(child), 0, ProcessStartTimeTicks(child)};
  LivenessOptions options;
  options.stale_after = 200ms;
  ASSERT_EQ(kill(child, SIGSTOP), 0);
  const auto stopped = std::chrono::steady_clock::now();
  ASSERT_TRUE(WaitFor([&] { return CheckPeer(identity, *hb, options) != PeerState::kAlive; }, 30s));
  EXPECT_GE(std::chrono::steady_clock::now() - stopped, 150ms);
  EXPECT_EQ(CheckPeer(identity, *hb, options), PeerState::kHeartbeatStale);
  kill(child, SIGKILL);
  EXPECT_EQ(WaitChild(child), 128 + SIGKILL);
}

}  // namespace
}  // namespace deltakv::shm
