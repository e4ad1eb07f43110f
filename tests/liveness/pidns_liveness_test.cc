// Liveness across PID namespaces. In a Kubernetes pod the sidecar and the engine containers have
// PID namespaces of their own and share only /dev/shm. These tests start an engine-like process
// (liveness_peer) under `unshare --pid --fork`, where it is pid 1 of its own namespace, and check
// from this process that:
//   - its WRITING slot and its pin in the KV pool are not reclaimed while it lives, and are
//     reclaimed within about a second once it is SIGKILLed;
//   - its rank stays registered and CheckRank sees it alive (and it sees the sidecar alive),
//     and CheckRank sees it gone within about a second once it is SIGKILLed.
// Its pid (1) means nothing here: in this namespace pid 1 is this container's init, alive for
// good, so judging by the raw pid would never reclaim the dead engine's slots; and the sidecar's
// pid means nothing to the engine (a pid it does not have), so it would judge a live sidecar
// dead. Needs root (or user namespaces) for unshare; skipped with a message otherwise.
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "kvtier/pool_test_util.h"
#include "kvtier/slot_pool.h"
#include "shm/control_block.h"
#include "shm/liveness.h"

namespace deltakv {
namespace {

using namespace std::chrono_literals;

// The helper in a PID namespace of its own, with its stdout on a pipe. Killing it kills the
// `unshare` process, whose --kill-child then SIGKILLs the helper.
class NamespacedPeer {
 public:
  explicit NamespacedPeer(const std::vector<std::string>& args) {
    int fds[2];
    if (pipe(fds) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      dup2(fds[1], STDOUT_FILENO);
      dup2(fds[1], STDERR_FILENO);
      close(fds[0]);
      close(fds[1]);
      std::vector<std::string> all = {"unshare", "--pid", "--fork", "--kill-child",
                                      LIVENESS_PEER_PATH};
      all.insert(all.end(), args.begin(), args.end());
      std::vector<char*> argv;
      for (std::string& a : all) argv.push_back(a.data());
      argv.push_back(nullptr);
      execvp("unshare", argv.data());
      std::printf("exec unshare failed: %s\n", std::strerror(errno));
      std::fflush(stdout);
      _exit(127);
    }
    close(fds[1]);
    out_ = fds[0];
  }
  ~NamespacedPeer() {
    Kill();
    if (out_ >= 0) close(out_);
  }

  // The next line of output, or "" after `timeout` or at end of output.
  std::string ReadLine(std::chrono::milliseconds timeout = 10s) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      size_t nl = buffer_.find('\n');
      if (nl != std::string::npos) {
        std::string line = buffer_.substr(0, nl);
        buffer_.erase(0, nl + 1);
        return line;
      }
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0 || out_ < 0) return "";
      pollfd p{out_, POLLIN, 0};
      if (poll(&p, 1, static_cast<int>(left.count())) <= 0) return "";
      char chunk[256];
      ssize_t n = read(out_, chunk, sizeof(chunk));
      if (n <= 0) return "";
      buffer_.append(chunk, static_cast<size_t>(n));
    }
  }
  // Output that is already there, without waiting.
  std::string Pending() {
    std::string line = ReadLine(1ms);
    return line.empty() ? buffer_ : line;
  }

  void Kill() {
    if (pid_ <= 0) return;
    kill(pid_, SIGKILL);
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
  }
  bool started() const { return pid_ > 0; }

 private:
  pid_t pid_ = -1;
  int out_ = -1;
  std::string buffer_;
};

// Starts the peer and waits for its "ready" line; skips the test if namespaces are unavailable.
#define START_PEER_OR_SKIP(peer, line)                                               \
  ASSERT_TRUE((peer).started());                                                     \
  std::string line = (peer).ReadLine();                                              \
  if (line.rfind("unshare:", 0) == 0 || line.rfind("exec unshare failed", 0) == 0) { \
    GTEST_SKIP() << "cannot create a PID namespace here (needs root): " << line;     \
  }                                                                                  \
  ASSERT_EQ(line.rfind("ready 1 ", 0), 0u) << "peer said: '" << line << "'"

bool WaitFor(const std::function<bool()>& condition, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!condition()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(10ms);
  }
  return true;
}

TEST(PidNamespaceLivenessTest, PoolSlotsAndPinsOfAnEngineInAnotherNamespace) {
  using namespace kvtier;
  kvtier::SlotPoolOptions options;
  options.block_bytes = 4096;
  options.capacity_slots = 64;
  options.chunk_bytes = 64 * 4096;
  const std::string name = kvtier::testing::UniquePoolName("pidns");
  StatusOr<SlotPool> pool = SlotPool::Create(name, options);
  ASSERT_TRUE(pool.ok()) << pool.status().ToString();
  const PoolKey ready = kvtier::testing::KeyOf(0);
  StatusOr<PrepareStoreResult> stored = pool->PrepareStore(std::span<const PoolKey>(&ready, 1));
  ASSERT_TRUE(stored.ok());
  ASSERT_TRUE(pool->CommitStore(stored->slots[0].ref).ok());

  NamespacedPeer engine({"pool", name, "0"});
  START_PEER_OR_SKIP(engine, line);
  const uint32_t writing_slot = static_cast<uint32_t>(std::stoul(line.substr(line.rfind(' ') + 1)));
  ASSERT_EQ(pool->InspectSlot(writing_slot).state, SlotState::kWriting);
  ASSERT_EQ(pool->InspectSlot(writing_slot).pid, 1u);  // its pid, in its namespace
  ASSERT_EQ(pool->Stats().pinned_slots, 1u);
  // Raw pid 1 here is this namespace's init: a pid check would call the engine alive forever.
  EXPECT_TRUE(shm::IsProcessAlive(1));

  // Alive: a sidecar reclaiming every 100 ms for 1.5 s takes nothing from it.
  for (int i = 0; i < 15; ++i) {
    StatusOr<ReclaimReport> report = pool->ReclaimDead();
    ASSERT_TRUE(report.ok());
    EXPECT_EQ(report->writes, 0u);
    EXPECT_EQ(report->pins, 0u);
    std::this_thread::sleep_for(100ms);
  }
  EXPECT_EQ(pool->InspectSlot(writing_slot).state, SlotState::kWriting);
  EXPECT_EQ(pool->Stats().pinned_slots, 1u);

  // SIGKILLed: its slot and pin come back within about a second.
  engine.Kill();
  uint64_t writes = 0;
  uint64_t pins = 0;
  EXPECT_TRUE(WaitFor(
      [&] {
        StatusOr<ReclaimReport> report = pool->ReclaimDead();
        if (report.ok()) {
          writes += report->writes;
          pins += report->pins;
        }
        return writes == 1 && pins == 1;
      },
      2s))
      << "writes " << writes << " pins " << pins;
  EXPECT_EQ(pool->InspectSlot(writing_slot).state, SlotState::kFree);
  EXPECT_EQ(pool->Stats().pinned_slots, 0u);
}

TEST(PidNamespaceLivenessTest, RankInAnotherNamespaceStaysRegisteredUntilKilled) {
  const std::string name = kvtier::testing::UniquePoolName("pidns-ctrl");
  shm::ControlBlockOptions options;
  options.max_ranks = 4;
  options.unlink_on_destroy = true;
  auto sidecar = shm::ControlBlock::Create(name, options);
  ASSERT_TRUE(sidecar.ok()) << sidecar.status().ToString();

  NamespacedPeer rank({"rank", name, "0", "1"});
  START_PEER_OR_SKIP(rank, line);
  // The rank judged this process (a pid it cannot see) alive by its token and heartbeat.
  EXPECT_EQ(line, "ready 1 sidecar alive");
  std::vector<shm::RankInfo> ranks = (*sidecar)->ActiveRanks();
  ASSERT_EQ(ranks.size(), 1u);
  EXPECT_EQ(ranks[0].pid, 1u);

  // Alive for longer than the stale threshold: never reclaimed, never judged dead.
  for (int i = 0; i < 15; ++i) {
    EXPECT_EQ((*sidecar)->CheckRank(ranks[0]), shm::PeerState::kAlive);
    EXPECT_TRUE((*sidecar)->ReclaimDead().empty());
    EXPECT_EQ((*sidecar)->CheckSidecar().state, shm::PeerState::kAlive);
    std::this_thread::sleep_for(100ms);
  }
  EXPECT_TRUE((*sidecar)->IsCurrent(ranks[0]));
  EXPECT_EQ(rank.Pending(), "");  // it never printed "lost"

  rank.Kill();
  EXPECT_TRUE(
      WaitFor([&] { return (*sidecar)->CheckRank(ranks[0]) == shm::PeerState::kProcessGone; }, 2s));
  std::vector<shm::RankInfo> reclaimed = (*sidecar)->ReclaimDead();
  ASSERT_EQ(reclaimed.size(), 1u);
  EXPECT_EQ(reclaimed[0].slot, ranks[0].slot);
  EXPECT_TRUE((*sidecar)->ActiveRanks().empty());
}

}  // namespace
}  // namespace deltakv
