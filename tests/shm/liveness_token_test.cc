// Liveness tokens: a held token reads held, a SIGKILLed holder's token reads released within a
// second (before it is even reaped), a SIGSTOPped holder keeps its token but goes heartbeat-stale,
// a forked child never keeps its parent's token alive, released files are cleaned up, and the
// pid → token directory answers for pids written by processes that attached after its scan.
#include "shm/liveness_token.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>

#include "shm/liveness.h"
#include "shm_test_util.h"

namespace deltakv::shm {
namespace {

using namespace std::chrono_literals;
using testing::ForkChild;
using testing::WaitChild;
using testing::WaitFor;

// A fresh directory for token files, removed with everything in it.
class TokenDir {
 public:
  TokenDir() {
    std::string templ = "/dev/shm/dkvtest-tokens-XXXXXX";
    path_ = mkdtemp(templ.data()) != nullptr ? templ : std::string();
  }
  ~TokenDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  const std::string& path() const { return path_; }
  size_t Files() const {
    size_t n = 0;
    for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(path_)) ++n;
    return n;
  }

 private:
  std::string path_;
};

// Anonymous shared memory visible to forked children.
template <typename T>
T* SharedObject() {
  void* p = mmap(nullptr, sizeof(T), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? nullptr : new (p) T{};
}

// A child that creates a token in `dir`, publishes its id and (optionally) beats `heartbeat`
// every 10 ms until killed.
struct ChildToken {
  std::atomic<uint64_t> id{0};
  Heartbeat heartbeat{};
};

pid_t SpawnHolder(const std::string& dir, ChildToken* shared) {
  return ForkChild([dir, shared] {
    StatusOr<std::unique_ptr<LivenessToken>> token = LivenessToken::Create(dir);
    if (!token.ok()) return 1;
    HeartbeatThread beats(&shared->heartbeat, 10ms);
    shared->id.store((*token)->id());
    for (;;) pause();
  });
}

TEST(LivenessTokenTest, HeldWhileOwnedAndRemovedOnDestruction) {
  TokenDir dir;
  ASSERT_FALSE(dir.path().empty());
  StatusOr<std::unique_ptr<LivenessToken>> token = LivenessToken::Create(dir.path());
  ASSERT_TRUE(token.ok()) << token.status().ToString();
  const uint64_t id = (*token)->id();
  EXPECT_NE(id, 0u);
  EXPECT_EQ((*token)->path(), dir.path() + "/" + TokenFileName(id));
  EXPECT_EQ(TokenFileName(0x0123456789abcdefull), "dkvlive-0123456789abcdef");
  EXPECT_EQ(CheckToken(id, dir.path()), TokenState::kHeld);  // also from the holder's process
  EXPECT_EQ(RemoveReleasedTokens(dir.path()), 0u);           // a held token is never removed
  EXPECT_EQ(dir.Files(), 1u);
  token->reset();
  EXPECT_EQ(CheckToken(id, dir.path()), TokenState::kReleased);
  EXPECT_EQ(dir.Files(), 0u);
  EXPECT_EQ(CheckToken(0, dir.path()), TokenState::kReleased);
}

TEST(LivenessTokenTest, SigkilledHolderIsReleasedWithinASecond) {
  TokenDir dir;
  auto* shared = SharedObject<ChildToken>();
  ASSERT_NE(shared, nullptr);
  pid_t child = SpawnHolder(dir.path(), shared);
  ASSERT_TRUE(WaitFor([&] { return shared->id.load() != 0; }, 10s));
  const uint64_t id = shared->id.load();
  EXPECT_EQ(CheckToken(id, dir.path()), TokenState::kHeld);
  ASSERT_EQ(kill(child, SIGKILL), 0);
  // Not reaped yet: the kernel closes a dying process's files before it becomes a zombie.
  EXPECT_TRUE(WaitFor([&] { return CheckToken(id, dir.path()) == TokenState::kReleased; }, 1s));
  EXPECT_EQ(dir.Files(), 1u);  // the dead holder could not remove its file
  EXPECT_EQ(RemoveReleasedTokens(dir.path()), 1u);
  EXPECT_EQ(dir.Files(), 0u);
  EXPECT_EQ(CheckToken(id, dir.path()), TokenState::kReleased);
  EXPECT_EQ(WaitChild(child), 128 + SIGKILL);
  munmap(shared, sizeof(ChildToken));
}

TEST(LivenessTokenTest, StoppedHolderKeepsItsTokenButGoesHeartbeatStale) {
  TokenDir dir;
  auto* shared = SharedObject<ChildToken>();
  ASSERT_NE(shared, nullptr);
  pid_t child = SpawnHolder(dir.path(), shared);
  ASSERT_TRUE(WaitFor([&] { return shared->id.load() != 0; }, 10s));
  // The holder as a peer of another PID namespace sees it: a token, no usable pid.
  PeerIdentity peer;
  peer.pid = static_cast<uint32_t>(child);
  peer.pid_ns = SelfPidNamespace() + 1;
  peer.token_id = shared->id.load();
  setenv("DELTAKV_LIVENESS_DIR", dir.path().c_str(), 1);
  LivenessOptions options;
  options.stale_after = 200ms;
  EXPECT_EQ(CheckPeer(peer, shared->heartbeat, options), PeerState::kAlive);

  ASSERT_EQ(kill(child, SIGSTOP), 0);
  EXPECT_TRUE(WaitFor(
      [&] { return CheckPeer(peer, shared->heartbeat, options) == PeerState::kHeartbeatStale; },
      5s));
  EXPECT_EQ(CheckToken(peer.token_id, dir.path()), TokenState::kHeld);
  EXPECT_TRUE(PeerProcessAlive(peer));

  ASSERT_EQ(kill(child, SIGCONT), 0);
  EXPECT_TRUE(WaitFor(
      [&] { return CheckPeer(peer, shared->heartbeat, options) == PeerState::kAlive; }, 5s));
  ASSERT_EQ(kill(child, SIGKILL), 0);
  EXPECT_TRUE(WaitFor(
      [&] { return CheckPeer(peer, shared->heartbeat, options) == PeerState::kProcessGone; }, 1s));
  unsetenv("DELTAKV_LIVENESS_DIR");
  EXPECT_EQ(WaitChild(child), 128 + SIGKILL);
  munmap(shared, sizeof(ChildToken));
}

// Same namespace: the pid is a fast path and catches an exited peer without any token; another
// namespace with no token recorded leaves the decision to the heartbeat.
TEST(LivenessTokenTest, PidIsOnlyEvidenceInsideOnePidNamespace) {
  pid_t child = ForkChild([] { return 0; });
  ASSERT_EQ(WaitChild(child), 0);
  PeerIdentity peer;
  peer.pid = static_cast<uint32_t>(child);
  peer.pid_ns = SelfPidNamespace();
  ASSERT_NE(peer.pid_ns, 0u);
  EXPECT_FALSE(PeerProcessAlive(peer));
  peer.pid_ns = SelfPidNamespace() + 1;  // "the same number names someone else over there"
  EXPECT_TRUE(PeerProcessAlive(peer));
  peer.pid = 0;
  EXPECT_FALSE(PeerProcessAlive(peer));
}

// A forked child closes its copy of the parent's token: when the parent dies, its token is
// released even though the child lives on.
TEST(LivenessTokenTest, ForkedChildDoesNotKeepItsParentsTokenAlive) {
  TokenDir dir;
  auto* shared = SharedObject<ChildToken>();
  auto* grandchild = SharedObject<std::atomic<pid_t>>();
  ASSERT_NE(shared, nullptr);
  ASSERT_NE(grandchild, nullptr);
  pid_t parent = ForkChild([&] {
    setenv("DELTAKV_LIVENESS_DIR", dir.path().c_str(), 1);
    StatusOr<uint64_t> id = ProcessLivenessToken();
    if (!id.ok()) return 1;
    pid_t g = fork();
    if (g == 0) {
      // The child gets a token of its own, distinct from its parent's.
      StatusOr<uint64_t> own = ProcessLivenessToken();
      if (!own.ok() || *own == *id) _exit(2);
      for (;;) pause();
    }
    grandchild->store(g);
    shared->id.store(*id);
    for (;;) pause();
  });
  ASSERT_TRUE(WaitFor([&] { return shared->id.load() != 0; }, 10s));
  const uint64_t id = shared->id.load();
  EXPECT_EQ(CheckToken(id, dir.path()), TokenState::kHeld);
  ASSERT_EQ(kill(parent, SIGKILL), 0);
  EXPECT_TRUE(WaitFor([&] { return CheckToken(id, dir.path()) == TokenState::kReleased; }, 1s));
  EXPECT_EQ(kill(grandchild->load(), 0), 0);  // still running
  kill(grandchild->load(), SIGKILL);
  EXPECT_EQ(WaitChild(parent), 128 + SIGKILL);
  munmap(shared, sizeof(ChildToken));
  munmap(grandchild, sizeof(std::atomic<pid_t>));
}

TEST(LivenessTokenTest, DirectoryMapsPidsToLiveTokensAndRescansForNewOnes) {
  TokenDir dir;
  LivenessDirectory tokens(dir.path());
  EXPECT_FALSE(tokens.MayBeAlive(0));
  EXPECT_FALSE(tokens.MayBeAlive(0x7FFFFFF0u));  // scans the (empty) directory
  auto* shared = SharedObject<ChildToken>();
  ASSERT_NE(shared, nullptr);
  pid_t child = SpawnHolder(dir.path(), shared);
  ASSERT_TRUE(WaitFor([&] { return shared->id.load() != 0; }, 10s));
  // The token is newer than the first scan: the miss rescans and finds it.
  EXPECT_TRUE(tokens.MayBeAlive(static_cast<uint32_t>(child)));
  ASSERT_EQ(kill(child, SIGKILL), 0);
  EXPECT_EQ(WaitChild(child), 128 + SIGKILL);
  EXPECT_FALSE(LivenessDirectory(dir.path()).MayBeAlive(static_cast<uint32_t>(child)));
  munmap(shared, sizeof(ChildToken));
}

TEST(LivenessTokenTest, AbandonedCreationsAndForeignFilesAreHandled) {
  TokenDir dir;
  // A creation killed before its lock: an unlocked ".tmp" file; it is removed.
  const std::string tmp = dir.path() + "/" + TokenFileName(42) + ".tmp";
  FILE* f = fopen(tmp.c_str(), "w");
  ASSERT_NE(f, nullptr);
  fclose(f);
  // Files that are not tokens are never touched; a short garbage token reads as no one.
  const std::string other = dir.path() + "/dkvlive-notatoken";
  f = fopen(other.c_str(), "w");
  ASSERT_NE(f, nullptr);
  fclose(f);
  const std::string garbage = dir.path() + "/" + TokenFileName(7);
  f = fopen(garbage.c_str(), "w");
  ASSERT_NE(f, nullptr);
  fputs("junk", f);
  fclose(f);
  EXPECT_FALSE(LivenessDirectory(dir.path()).MayBeAlive(static_cast<uint32_t>(getpid())));
  EXPECT_EQ(RemoveReleasedTokens(dir.path()), 2u);
  EXPECT_TRUE(std::filesystem::exists(other));
  EXPECT_FALSE(std::filesystem::exists(tmp));
}

TEST(LivenessTokenTest, CreateFailsCleanlyInAMissingDirectory) {
  StatusOr<std::unique_ptr<LivenessToken>> token =
      LivenessToken::Create("/dev/shm/dkvtest-no-such-dir/x");
  EXPECT_FALSE(token.ok());
}

}  // namespace
}  // namespace deltakv::shm
