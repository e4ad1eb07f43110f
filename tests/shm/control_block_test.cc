// ControlBlock: registration (validation, races between real processes, duplicates), reclaim of
// SIGKILLed ranks, layout refusal, rings between sidecar and rank, the 2PC decision with the
// sidecar alive or killed before/after deciding, and sidecar restart (adopt / recreate).
#include "shm/control_block.h"

#include <gtest/gtest.h>

#include <set>
#include <thread>

#include "shm/futex.h"
#include "shm/messages.h"
#include "shm_test_util.h"

namespace deltakv::shm {
namespace {

using namespace std::chrono_literals;
using testing::ForkChild;
using testing::ScopedUnlink;
using testing::StaysStill;
using testing::UniqueName;
using testing::WaitChild;
using testing::WaitFor;

ControlBlockOptions SmallOptions(uint32_t max_ranks = 8) {
  ControlBlockOptions o;
  o.max_ranks = max_ranks;
  o.command_ring_capacity = 4096;
  o.command_max_message = 1024;
  o.response_ring_capacity = 8192;
  o.response_max_message = 2048;
  return o;
}

// Words shared with children, in a scratch segment of their own.
class Words {
 public:
  Words() : name_(UniqueName("words")) {
    segment_ = Segment::Create(name_, 4096, SegmentKind::kScratch).value();
    segment_.Publish();
  }
  std::atomic<uint32_t>& operator[](int i) const {
    return *reinterpret_cast<std::atomic<uint32_t>*>(segment_.data() + 64 + 4 * i);
  }
  // Blocks until word i becomes nonzero (futex, bounded).
  bool AwaitNonzero(int i, std::chrono::seconds timeout = 60s) const {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while ((*this)[i].load() == 0) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      FutexWait(&(*this)[i], 0, 100ms);
    }
    return true;
  }
  void Set(int i, uint32_t v) const {
    (*this)[i].store(v);
    FutexWakeAll(&(*this)[i]);
  }

 private:
  std::string name_;
  Segment segment_;  // mapped before fork, so children share it
};

std::vector<uint8_t> Encoded(const Message& m) { return EncodeMessage(m).value(); }

TEST(ControlBlockTest, RegisterTalkAndUnregister) {
  const std::string name = UniqueName("ctl");
  ScopedUnlink cleanup(name);
  auto sidecar = ControlBlock::Create(name, SmallOptions()).value();
  EXPECT_EQ(sidecar->instance_generation(), 1u);
  EXPECT_EQ(sidecar->CheckSidecar().state, PeerState::kAlive);
  auto engine = ControlBlock::Attach(name).value();
  EXPECT_EQ(engine->max_ranks(), 8u);
  EXPECT_EQ(engine->CheckSidecar().pid, static_cast<uint32_t>(getpid()));

  RankHandle rank = engine->RegisterRank(1, 2).value();
  EXPECT_EQ(rank.rank(), 1u);
  EXPECT_EQ(rank.epoch(), 1u);
  EXPECT_TRUE(rank.StillRegistered());
  std::vector<RankInfo> active = sidecar->ActiveRanks();
  ASSERT_EQ(active.size(), 1u);
  EXPECT_EQ(active[0].rank, 1u);
  EXPECT_EQ(active[0].world_size, 2u);
  EXPECT_EQ(active[0].slot, rank.slot());
  EXPECT_EQ(active[0].pid, static_cast<uint32_t>(getpid()));

  RankChannel channel = sidecar->OpenChannel(active[0]).value();
  ASSERT_TRUE(channel.commands.TryPush(Encoded(MakePing(99))).ok());
  std::vector<uint8_t> bytes;
  ASSERT_TRUE(rank.commands().Pop(&bytes, 60s).value());
  Message ping = DecodeMessage(bytes).value();
  EXPECT_EQ(ParseNonce(ping).value(), 99u);
  ASSERT_TRUE(rank.responses().TryPush(Encoded(MakePong(99))).ok());
  ASSERT_TRUE(channel.responses.Pop(&bytes, 60s).value());
  EXPECT_EQ(DecodeMessage(bytes).value().type, MessageType::kPong);

  rank.SetLivePolicyVersion(5);
  rank.SetStagedSyncId(3);
  active = sidecar->ActiveRanks();
  EXPECT_EQ(active[0].live_policy_version, 5u);
  EXPECT_EQ(active[0].staged_sync_id, 3u);

  ASSERT_TRUE(engine->UnregisterRank(rank).ok());
  EXPECT_TRUE(rank.Unregister().ok());  // idempotent
  EXPECT_FALSE(rank.StillRegistered());
  EXPECT_TRUE(sidecar->ActiveRanks().empty());
  EXPECT_FALSE(sidecar->IsCurrent(active[0]));
  EXPECT_EQ(sidecar->OpenChannel(active[0]).status().code(), StatusCode::kFailedPrecondition);

  // The slot's next incarnation starts with empty rings and a new epoch.
  RankHandle again = engine->RegisterRank(1, 2).value();
  EXPECT_EQ(again.slot(), active[0].slot);
  EXPECT_EQ(again.epoch(), 2u);
  EXPECT_FALSE(again.commands().TryPop(&bytes).value());
}

TEST(ControlBlockTest, AttachRefusesOtherLayoutVersionAndCorruptGeometry) {
  const std::string name = UniqueName("ctl");
  ScopedUnlink cleanup(name);
  auto sidecar = ControlBlock::Create(name, SmallOptions()).value();
  Segment raw = Segment::Open(name, SegmentKind::kControl).value();
  auto* control = reinterpret_cast<ControlHeader*>(raw.data() + kControlHeaderOffset);
  auto* slots = reinterpret_cast<RankSlot*>(raw.data() + kSlotsOffset);

  raw.header()->layout_version = kLayoutVersion + 1;
  Status s = ControlBlock::Attach(name).status();
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("layout version"), std::string::npos) << s.message();
  raw.header()->layout_version = kLayoutVersion;

  raw.header()->magic.store(0xDEADBEEF);
  EXPECT_EQ(ControlBlock::Attach(name).status().code(), StatusCode::kDataLoss);
  raw.header()->magic.store(kSegmentMagic);

  control->magic ^= 1;
  EXPECT_EQ(ControlBlock::Attach(name).status().code(), StatusCode::kDataLoss);
  control->magic ^= 1;
  control->layout_version = kLayoutVersion + 7;
  EXPECT_EQ(ControlBlock::Attach(name).status().code(), StatusCode::kFailedPrecondition);
  control->layout_version = kLayoutVersion;
  control->max_ranks = 9;
  EXPECT_EQ(ControlBlock::Attach(name).status().code(), StatusCode::kDataLoss);
  control->max_ranks = 0;
  EXPECT_EQ(ControlBlock::Attach(name).status().code(), StatusCode::kDataLoss);
  control->max_ranks = 8;
  control->response_ring_capacity = 8000;
  EXPECT_EQ(ControlBlock::Attach(name).status().code(), StatusCode::kDataLoss);
  control->response_ring_capacity = 8192;
  slots[3].response_ring_offset += 64;
  EXPECT_EQ(ControlBlock::Attach(name).status().code(), StatusCode::kDataLoss);
  slots[3].response_ring_offset -= 64;
  EXPECT_TRUE(ControlBlock::Attach(name).ok());
  EXPECT_EQ(ControlBlock::Attach(UniqueName("none")).status().code(), StatusCode::kNotFound);
}

TEST(ControlBlockTest, RegistrationRules) {
  const std::string name = UniqueName("ctl");
  ScopedUnlink cleanup(name);
  auto sidecar = ControlBlock::Create(name, SmallOptions(2)).value();
  auto engine = ControlBlock::Attach(name).value();
  EXPECT_EQ(engine->RegisterRank(2, 2).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(engine->RegisterRank(0, 0).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(engine->RegisterRank(70000, 80000).status().code(), StatusCode::kInvalidArgument);

  RankHandle r0 = engine->RegisterRank(0, 4).value();
  Status dup = engine->RegisterRank(0, 4).status();
  EXPECT_EQ(dup.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(dup.message().find("already registered by live pid " + std::to_string(getpid())),
            std::string::npos)
      << dup.message();
  RankHandle r1 = engine->RegisterRank(1, 4).value();
  EXPECT_NE(r0.slot(), r1.slot());
  EXPECT_EQ(engine->RegisterRank(2, 4).status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(sidecar->ActiveRanks().size(), 2u);
  RankHandle moved = std::move(r1);
  EXPECT_TRUE(moved.StillRegistered());
  EXPECT_EQ(sidecar->ActiveRanks().size(), 2u);
}

// Several processes register different ranks at the same instant.
TEST(ControlBlockTest, ConcurrentRegistrationsGetDistinctSlots) {
  constexpr int kRanks = 16;
  const std::string name = UniqueName("ctl");
  ScopedUnlink cleanup(name);
  auto sidecar = ControlBlock::Create(name, SmallOptions(32)).value();
  Words words;  // 0: go, 1: release, 10+i: slot+1 of child i, 40+i: error code
  std::vector<pid_t> children;
  for (int i = 0; i < kRanks; ++i) {
    children.push_back(ForkChild([&, i] {
      auto engine = ControlBlock::Attach(name);
      if (!engine.ok()) return 1;
      if (!words.AwaitNonzero(0)) return 2;
      StatusOr<RankHandle> handle = (*engine)->RegisterRank(i, kRanks);
      if (!handle.ok()) {
        words.Set(40 + i, static_cast<uint32_t>(handle.status().code()));
        return 3;
      }
      words.Set(10 + i, handle->slot() + 1);
      if (!words.AwaitNonzero(1)) return 4;
      return handle->Unregister().ok() ? 0 : 5;
    }));
  }
  words.Set(0, 1);
  ASSERT_TRUE(WaitFor(
      [&] {
        for (int i = 0; i < kRanks; ++i) {
          if (words[10 + i].load() == 0 && words[40 + i].load() == 0) return false;
        }
        return true;
      },
      120s));
  std::set<uint32_t> slots;
  for (int i = 0; i < kRanks; ++i) {
    EXPECT_EQ(words[40 + i].load(), 0u) << "child " << i;
    slots.insert(words[10 + i].load());
  }
  EXPECT_EQ(slots.size(), static_cast<size_t>(kRanks));
  std::vector<RankInfo> active = sidecar->ActiveRanks();
  ASSERT_EQ(active.size(), static_cast<size_t>(kRanks));
  for (const RankInfo& info : active) {
    EXPECT_EQ(info.pid, static_cast<uint32_t>(children[info.rank]));
    EXPECT_EQ(info.slot + 1, words[10 + static_cast<int>(info.rank)].load());
  }
  words.Set(1, 1);
  for (pid_t c : children) EXPECT_EQ(WaitChild(c), 0);
  EXPECT_TRUE(sidecar->ActiveRanks().empty());
}

// Several processes claim the same rank at once: exactly one wins, the rest are refused.
TEST(ControlBlockTest, ConcurrentSameRankHasExactlyOneWinner) {
  constexpr int kContenders = 8;
  const std::string name = UniqueName("ctl");
  ScopedUnlink cleanup(name);
  auto sidecar = ControlBlock::Create(name, SmallOptions(16)).value();
  for (int round = 0; round < 5; ++round) {
    Words words;  // 0: go, 1: release, 10+i: 1 won / 2 refused / 3 other error
    std::vector<pid_t> children;
    for (int i = 0; i < kContenders; ++i) {
      children.push_back(ForkChild([&, i] {
        auto engine = ControlBlock::Attach(name);
        if (!engine.ok()) return 1;
        if (!words.AwaitNonzero(0)) return 2;
        StatusOr<RankHandle> handle = (*engine)->RegisterRank(3, 4);
        if (!handle.ok()) {
          bool refused = handle.status().code() == StatusCode::kFailedPrecondition;
          words.Set(10 + i, refused ? 2 : 3);
          return 0;
        }
        words.Set(10 + i, 1);
        if (!words.AwaitNonzero(1)) return 4;
        return handle->Unregister().ok() ? 0 : 5;
      }));
    }
    words.Set(0, 1);
    ASSERT_TRUE(WaitFor(
        [&] {
          for (int i = 0; i < kContenders; ++i) {
            if (words[10 + i].load() == 0) return false;
          }
          return true;
        },
        120s));
    int won = 0, refused = 0;
    for (int i = 0; i < kContenders; ++i) {
      won += words[10 + i].load() == 1;
      refused += words[10 + i].load() == 2;
    }
    EXPECT_EQ(won, 1) << "round " << round;
    EXPECT_EQ(refused, kContenders - 1) << "round " << round;
    EXPECT_EQ(sidecar->ActiveRanks().size(), 1u);
    words.Set(1, 1);
    for (pid_t c : children) EXPECT_EQ(WaitChild(c), 0);
  }
}

// A child process that registers `rank` of `world`, sets word `rank`, and waits to be killed.
pid_t SpawnIdleRank(const std::string& name, const Words& words, uint32_t rank, uint32_t world) {
  return ForkChild([&, rank, world] {
    auto engine = ControlBlock::Attach(name);
    if (!engine.ok()) return 1;
    StatusOr<RankHandle> handle = (*engine)->RegisterRank(rank, world);
    if (!handle.ok()) return 2;
    words.Set(static_cast<int>(rank), 1);
    pause();
    return 0;
  });
}

TEST(ControlBlockTest, SigkilledRankIsReclaimed) {
  const std::string name = UniqueName("ctl");
  ScopedUnlink cleanup(name);
  auto sidecar = ControlBlock::Create(name, SmallOptions()).value();
  Words words;
  auto spawn_rank = [&](uint32_t rank) { return SpawnIdleRank(name, words, rank, 4); };
  // Rank 0 dies; the sidecar's ReclaimDead notices (zombie or reaped, either way).
  pid_t victim = spawn_rank(0);
  ASSERT_TRUE(words.AwaitNonzero(0));
  ASSERT_EQ(sidecar->ActiveRanks().size(), 1u);
  ASSERT_EQ(kill(victim, SIGKILL), 0);
  const auto killed = std::chrono::steady_clock::now();
  std::vector<RankInfo> reclaimed;
  ASSERT_TRUE(WaitFor(
      [&] {
        reclaimed = sidecar->ReclaimDead();
        return !reclaimed.empty();
      },
      60s));
  EXPECT_LT(std::chrono::steady_clock::now() - killed, 10s);
  ASSERT_EQ(reclaimed.size(), 1u);
  EXPECT_EQ(reclaimed[0].rank, 0u);
  EXPECT_EQ(reclaimed[0].pid, static_cast<uint32_t>(victim));
  EXPECT_TRUE(sidecar->ActiveRanks().empty());
  EXPECT_EQ(WaitChild(victim), 128 + SIGKILL);

  // Rank 1 dies; a new process registering rank 1 reclaims the slot itself.
  pid_t victim1 = spawn_rank(1);
  ASSERT_TRUE(words.AwaitNonzero(1));
  ASSERT_EQ(kill(victim1, SIGKILL), 0);
  EXPECT_EQ(WaitChild(victim1), 128 + SIGKILL);
  auto engine = ControlBlock::Attach(name).value();
  StatusOr<RankHandle> replacement = engine->RegisterRank(1, 4);
  ASSERT_TRUE(replacement.ok()) << replacement.status().ToString();
  std::vector<RankInfo> active = sidecar->ActiveRanks();
  ASSERT_EQ(active.size(), 1u);
  EXPECT_EQ(active[0].pid, static_cast<uint32_t>(getpid()));
}

// CheckRank judges a rank the way a sync must: a stopped rank (SIGSTOP: its heartbeat thread
// stops too) within about the stale threshold, a SIGKILLed rank that is not yet reaped (a
// zombie) at once, and a live one as alive.
TEST(ControlBlockTest, CheckRankSeesStoppedAndZombieRanksQuickly) {
  const std::string name = UniqueName("ctl");
  ScopedUnlink cleanup(name);
  auto sidecar = ControlBlock::Create(name, SmallOptions()).value();
  Words words;
  auto spawn_rank = [&](uint32_t rank) { return SpawnIdleRank(name, words, rank, 2); };
  pid_t stopped = spawn_rank(0);
  pid_t zombie = spawn_rank(1);
  ASSERT_TRUE(words.AwaitNonzero(0));
  ASSERT_TRUE(words.AwaitNonzero(1));
  std::vector<RankInfo> ranks = sidecar->ActiveRanks();
  ASSERT_EQ(ranks.size(), 2u);
  const RankInfo& r0 = ranks[0].rank == 0 ? ranks[0] : ranks[1];
  const RankInfo& r1 = ranks[0].rank == 0 ? ranks[1] : ranks[0];
  EXPECT_EQ(sidecar->CheckRank(r0), PeerState::kAlive);
  EXPECT_EQ(sidecar->CheckRank(r1), PeerState::kAlive);

  ASSERT_EQ(kill(zombie, SIGKILL), 0);
  EXPECT_TRUE(WaitFor([&] { return sidecar->CheckRank(r1) == PeerState::kProcessGone; }, 2s))
      << "a killed, unreaped rank counts as gone";

  ASSERT_EQ(kill(stopped, SIGSTOP), 0);
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(WaitFor([&] { return sidecar->CheckRank(r0) != PeerState::kAlive; }, 10s));
  const auto noticed = std::chrono::steady_clock::now() - t0;
  EXPECT_EQ(sidecar->CheckRank(r0), PeerState::kHeartbeatStale);
  EXPECT_LT(noticed, 2500ms) << "a stopped rank is judged by its heartbeat within ~1 s";
  ASSERT_EQ(kill(stopped, SIGKILL), 0);
  EXPECT_EQ(WaitChild(stopped), 128 + SIGKILL);
  EXPECT_EQ(WaitChild(zombie), 128 + SIGKILL);
}

// A rank judged dead while alive (here: a stale threshold of 1 ns) finds out it was dropped.
TEST(ControlBlockTest, ReclaimedLiveRankNoticesItWasDropped) {
  const std::string name = UniqueName("ctl");
  ScopedUnlink cleanup(name);
  ControlBlockOptions options = SmallOptions();
  options.liveness.stale_after = 1ns;
  options.heartbeat_period = 1h;  // so our own sidecar heartbeat does not matter either
  auto sidecar = ControlBlock::Create(name, options).value();
  auto engine = ControlBlock::Attach(name).value();
  RankHandle handle = engine->RegisterRank(0, 1).value();
  std::this_thread::sleep_for(1ms);
  std::vector<RankInfo> reclaimed = sidecar->ReclaimDead();
  ASSERT_EQ(reclaimed.size(), 1u);
  EXPECT_FALSE(handle.StillRegistered());
  EXPECT_EQ(handle.Unregister().code(), StatusCode::kFailedPrecondition);
}

// A rank judged dead whose slot went to another rank neither beats that rank's heartbeat nor
// writes its fields.
TEST(ControlBlockTest, ReclaimedRankLeavesTheSlotsNextOwnerAlone) {
  const std::string name = UniqueName("ctl");
  ScopedUnlink cleanup(name);
  ControlBlockOptions options = SmallOptions(1);
  options.liveness.stale_after = 1ns;  // every rank's heartbeat is stale: ReclaimDead frees it
  options.heartbeat_period = 1h;
  auto sidecar = ControlBlock::Create(name, options).value();
  AttachOptions fast;
  fast.heartbeat_period = 1ms;
  auto engine = ControlBlock::Attach(name, fast).value();
  RankHandle old_rank = engine->RegisterRank(0, 1).value();
  Segment raw = Segment::Open(name, SegmentKind::kControl).value();
  auto* slot = reinterpret_cast<RankSlot*>(raw.data() + kSlotsOffset);
  const uint64_t first = slot->heartbeat.counter.load();
  EXPECT_TRUE(WaitFor([&] { return slot->heartbeat.counter.load() >= first + 3; }));
  // A beat stamped after ReclaimDead read the clock counts as fresh, and this rank beats every
  // millisecond: ask again until a check falls between two beats.
  ASSERT_TRUE(WaitFor([&] { return sidecar->ReclaimDead().size() == 1u; }));
  EXPECT_FALSE(old_rank.StillRegistered());
  // A beat already under way may land late on a loaded machine; then nothing more beats.
  ASSERT_TRUE(StaysStill(slot->heartbeat.counter));
  const uint64_t after = slot->heartbeat.counter.load();
  slot->live_policy_version.store(77);  // as the slot's next owner would
  slot->staged_sync_id.store(88);
  old_rank.SetLivePolicyVersion(5);
  old_rank.SetStagedSyncId(6);
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(slot->heartbeat.counter.load(), after);
  EXPECT_EQ(slot->live_policy_version.load(), 77u);
  EXPECT_EQ(slot->staged_sync_id.load(), 88u);
}

TEST(ControlBlockTest, DecisionWakesWaitingRanks) {
  const std::string name = UniqueName("ctl");
  ScopedUnlink cleanup(name);
  auto sidecar = ControlBlock::Create(name, SmallOptions()).value();
  const uint64_t commit_id = sidecar->AllocateSyncId();
  const uint64_t abort_id = sidecar->AllocateSyncId();
  EXPECT_EQ(commit_id, 1u);
  EXPECT_EQ(abort_id, 2u);
  Words words;
  auto waiter = [&](uint64_t id, int flag) {
    return ForkChild([&, id, flag] {
      auto engine = ControlBlock::Attach(name);
      if (!engine.ok()) return 1;
      words.Set(flag, 1);
      AwaitOutcome outcome = (*engine)->AwaitDecision(id, 60s);
      return outcome == AwaitOutcome::kCommit ? 10 : outcome == AwaitOutcome::kAbort ? 11 : 12;
    });
  };
  pid_t a = waiter(commit_id, 0);
  pid_t b = waiter(abort_id, 1);
  ASSERT_TRUE(words.AwaitNonzero(0));
  ASSERT_TRUE(words.AwaitNonzero(1));
  EXPECT_EQ(sidecar->ReadDecision(commit_id), Decision::kPending);
  ASSERT_TRUE(sidecar->DecideCommit(commit_id).ok());
  ASSERT_TRUE(sidecar->DecideAbort(abort_id).ok());
  EXPECT_EQ(WaitChild(a), 10);
  EXPECT_EQ(WaitChild(b), 11);
  EXPECT_EQ(sidecar->ReadDecision(commit_id), Decision::kCommit);
  EXPECT_EQ(sidecar->ReadDecision(abort_id), Decision::kAbort);
  EXPECT_EQ(sidecar->DecideAbort(commit_id).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(sidecar->DecideCommit(abort_id).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(sidecar->DecideCommit(0).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(sidecar->AwaitDecision(99, 1ms), AwaitOutcome::kTimedOut);
}

// A rank that staged sync S but reads the decision words only after a newer sync was decided
// (S timed out and was aborted, then S+1 aborted too: abort_sync_id no longer names S) must
// see S as aborted, not wait forever; and S can no longer be committed.
TEST(ControlBlockTest, StagedSyncOlderThanTheNewestDecisionCountsAsAborted) {
  const std::string name = UniqueName("ctl");
  ScopedUnlink cleanup(name);
  auto sidecar = ControlBlock::Create(name).value();
  const uint64_t s1 = sidecar->AllocateSyncId();
  const uint64_t s2 = sidecar->AllocateSyncId();
  const uint64_t s3 = sidecar->AllocateSyncId();
  ASSERT_TRUE(sidecar->DecideAbort(s1).ok());
  ASSERT_TRUE(sidecar->DecideAbort(s2).ok());
  auto engine = ControlBlock::Attach(name).value();
  EXPECT_EQ(engine->ReadDecision(s1), Decision::kAbort);
  EXPECT_EQ(engine->AwaitDecision(s1, 10s), AwaitOutcome::kAbort);
  EXPECT_EQ(engine->ReadDecision(s3), Decision::kPending);
  ASSERT_TRUE(sidecar->DecideCommit(s3).ok());
  // A commit stays readable for its own id, and every older undecided id is aborted.
  const uint64_t s4 = sidecar->AllocateSyncId();
  EXPECT_EQ(engine->ReadDecision(s3), Decision::kCommit);
  EXPECT_EQ(engine->ReadDecision(s2), Decision::kAbort);
  EXPECT_EQ(engine->ReadDecision(s4), Decision::kPending);
  EXPECT_EQ(sidecar->DecideCommit(s1).code(), StatusCode::kFailedPrecondition);
}

// The sidecar runs in a child that is SIGKILLed after (or before) deciding the sync.
AwaitOutcome AwaitAfterSidecarDeath(bool decide_commit, std::chrono::nanoseconds* noticed) {
  const std::string name = UniqueName("ctl");
  ScopedUnlink cleanup(name);
  Words words;
  pid_t sidecar = ForkChild([&] {
    auto block = ControlBlock::Create(name, SmallOptions());
    if (!block.ok()) return 1;
    uint64_t id = (*block)->AllocateSyncId();
    if (decide_commit && !(*block)->DecideCommit(id).ok()) return 2;
    words.Set(0, static_cast<uint32_t>(id));
    pause();
    return 0;
  });
  EXPECT_TRUE(words.AwaitNonzero(0));
  const uint64_t id = words[0].load();
  auto engine = ControlBlock::Attach(name);
  EXPECT_TRUE(engine.ok()) << engine.status().ToString();
  EXPECT_EQ((*engine)->CheckSidecar().state, PeerState::kAlive);
  kill(sidecar, SIGKILL);  // left a zombie until WaitChild below
  const auto killed = std::chrono::steady_clock::now();
  AwaitOutcome outcome = (*engine)->AwaitDecision(id, 60s);
  *noticed = std::chrono::steady_clock::now() - killed;
  EXPECT_EQ(WaitChild(sidecar), 128 + SIGKILL);
  return outcome;
}

TEST(ControlBlockTest, SidecarDeathAfterDecisionStillCommits) {
  std::chrono::nanoseconds noticed{};
  EXPECT_EQ(AwaitAfterSidecarDeath(true, &noticed), AwaitOutcome::kCommit);
}

TEST(ControlBlockTest, SidecarDeathBeforeDecisionIsNoticedAndDropsTheSync) {
  std::chrono::nanoseconds noticed{};
  EXPECT_EQ(AwaitAfterSidecarDeath(false, &noticed), AwaitOutcome::kSidecarDead);
  EXPECT_LT(noticed, 10s);  // ~1 s by contract; generous for loaded machines
}

TEST(ControlBlockTest, RestartedSidecarAdoptsAndRanksStayRegistered) {
  const std::string name = UniqueName("ctl");
  ScopedUnlink cleanup(name);
  Words words;
  pid_t first = ForkChild([&] {
    auto block = ControlBlock::Create(name, SmallOptions());
    if (!block.ok()) return 1;
    (*block)->AllocateSyncId();  // sync 1, never decided
    words.Set(0, 1);
    pause();
    return 0;
  });
  ASSERT_TRUE(words.AwaitNonzero(0));
  auto engine = ControlBlock::Attach(name).value();
  RankHandle rank = engine->RegisterRank(0, 1).value();
  rank.SetStagedSyncId(1);
  const uint64_t generation = engine->instance_generation();
  ASSERT_EQ(kill(first, SIGKILL), 0);
  ASSERT_EQ(WaitChild(first), 128 + SIGKILL);

  pid_t second = ForkChild([&] {
    auto block = ControlBlock::Create(name, SmallOptions());  // kAdoptOrRecreate
    if (!block.ok()) return 1;
    if ((*block)->instance_generation() != generation + 1) return 2;
    std::vector<RankInfo> active = (*block)->ActiveRanks();
    if (active.size() != 1 || active[0].pid != static_cast<uint32_t>(getppid())) return 3;
    if (active[0].staged_sync_id != 1) return 4;
    if ((*block)->ReadDecision(1) != Decision::kAbort) return 5;  // left undecided: aborted
    if ((*block)->AllocateSyncId() != 2) return 6;
    return 0;
  });
  EXPECT_EQ(WaitChild(second), 0);
  EXPECT_TRUE(rank.StillRegistered());
  EXPECT_EQ(engine->instance_generation(), generation + 1);
  EXPECT_EQ(engine->ReadDecision(1), Decision::kAbort);
  EXPECT_FALSE(engine->IsSuperseded().value());
  // The second sidecar exited cleanly: ranks see it gone at once.
  EXPECT_EQ(engine->CheckSidecar().state, PeerState::kProcessGone);
}

// A sidecar killed between its COMMIT's CAS of `decided` and its store of commit_sync_id: the
// sidecar that adopts the segment completes the store, so the sync still reads as committed
// once a newer sync is decided.
TEST(ControlBlockTest, AdoptingSidecarCompletesAnInterruptedCommit) {
  const std::string name = UniqueName("ctl");
  ScopedUnlink cleanup(name);
  Words words;
  pid_t first = ForkChild([&] {
    auto block = ControlBlock::Create(name, SmallOptions());
    if (!block.ok()) return 1;
    const uint64_t id = (*block)->AllocateSyncId();
    Segment raw = Segment::Open(name, SegmentKind::kControl).value();
    auto* control = reinterpret_cast<ControlHeader*>(raw.data() + kControlHeaderOffset);
    control->decided.store(id << 1 | 1);  // the CAS made, commit_sync_id not yet stored
    words.Set(0, static_cast<uint32_t>(id));
    pause();
    return 0;
  });
  ASSERT_TRUE(words.AwaitNonzero(0));
  const uint64_t committed = words[0].load();
  ASSERT_EQ(kill(first, SIGKILL), 0);
  ASSERT_EQ(WaitChild(first), 128 + SIGKILL);
  auto second = ControlBlock::Create(name, SmallOptions()).value();  // adopts
  EXPECT_EQ(second->ReadDecision(committed), Decision::kCommit);
  const uint64_t next = second->AllocateSyncId();
  ASSERT_TRUE(second->DecideAbort(next).ok());
  EXPECT_EQ(second->ReadDecision(committed), Decision::kCommit);
  EXPECT_EQ(second->ReadDecision(next), Decision::kAbort);
}

TEST(ControlBlockTest, LiveSidecarCannotBeReplaced) {
  const std::string name = UniqueName("ctl");
  ScopedUnlink cleanup(name);
  auto sidecar = ControlBlock::Create(name, SmallOptions()).value();
  for (OnExisting mode :
       {OnExisting::kAdopt, OnExisting::kAdoptOrRecreate, OnExisting::kRecreate}) {
    ControlBlockOptions o = SmallOptions();
    o.on_existing = mode;
    Status s = ControlBlock::Create(name, o).status();
    EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
    EXPECT_NE(s.message().find("still alive"), std::string::npos) << s.message();
  }
  ControlBlockOptions o = SmallOptions();
  o.on_existing = OnExisting::kFail;
  Status s = ControlBlock::Create(name, o).status();
  EXPECT_NE(s.message().find("already exists"), std::string::npos) << s.message();
  EXPECT_EQ(sidecar->instance_generation(), 1u);
  EXPECT_TRUE(sidecar->IsCurrentSidecar());
}

// A sidecar stopped past the stale threshold while a rank waits for the decision: the rank
// decides ABORT itself and drops the sync, so the resumed sidecar can no longer decide COMMIT
// (it would commit a sync no rank holds any more); its own ABORT is accepted.
TEST(ControlBlockTest, RankThatJudgedTheSidecarDeadDecidesAbortForAResumedSidecar) {
  const std::string name = UniqueName("ctl");
  ScopedUnlink cleanup(name);
  Words words;
  pid_t sidecar = ForkChild([&] {
    auto block = ControlBlock::Create(name, SmallOptions());
    if (!block.ok()) return 1;
    const uint64_t id = (*block)->AllocateSyncId();
    words.Set(0, static_cast<uint32_t>(id));
    raise(SIGSTOP);  // stalled (throttled, paused in a debugger) until the rank gave up
    Status commit = (*block)->DecideCommit(id);
    if (commit.ok()) return 3;
    if (commit.message().find("already aborted") == std::string::npos) return 4;
    if ((*block)->ReadDecision(id) != Decision::kAbort) return 5;
    if (!(*block)->DecideAbort(id).ok()) return 6;
    return 0;
  });
  ASSERT_TRUE(words.AwaitNonzero(0));
  const uint64_t id = words[0].load();
  auto engine = ControlBlock::Attach(name).value();
  EXPECT_EQ(engine->AwaitDecision(id, 60s), AwaitOutcome::kSidecarDead);
  EXPECT_EQ(engine->ReadDecision(id), Decision::kAbort);
  // A second rank waiting on the same sync sees the abort the first one decided.
  EXPECT_EQ(engine->AwaitDecision(id, 1s), AwaitOutcome::kAbort);
  kill(sidecar, SIGCONT);
  EXPECT_EQ(WaitChild(sidecar), 0);
}

// A sidecar that was stalled while another took over must not decide anything any more.
TEST(ControlBlockTest, SupersededSidecarCannotDecide) {
  const std::string name = UniqueName("ctl");
  ScopedUnlink cleanup(name);
  auto sidecar = ControlBlock::Create(name, SmallOptions()).value();
  auto engine = ControlBlock::Attach(name).value();
  EXPECT_FALSE(engine->IsCurrentSidecar());
  const uint64_t id = sidecar->AllocateSyncId();
  Segment raw = Segment::Open(name, SegmentKind::kControl).value();
  auto* control = reinterpret_cast<ControlHeader*>(raw.data() + kControlHeaderOffset);
  control->instance_generation.fetch_add(1);  // what an adopting sidecar does
  EXPECT_FALSE(sidecar->IsCurrentSidecar());
  EXPECT_EQ(sidecar->DecideCommit(id).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(sidecar->DecideAbort(id).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(engine->ReadDecision(id), Decision::kPending);
}

// ... nor beat the sidecar heartbeat, which is the new sidecar's: were the new one stopped in
// turn, the old one's beats would make it look alive to every rank.
TEST(ControlBlockTest, SupersededSidecarStopsBeating) {
  const std::string name = UniqueName("ctl");
  ScopedUnlink cleanup(name);
  ControlBlockOptions options = SmallOptions();
  options.heartbeat_period = 1ms;
  auto sidecar = ControlBlock::Create(name, options).value();
  Segment raw = Segment::Open(name, SegmentKind::kControl).value();
  auto* control = reinterpret_cast<ControlHeader*>(raw.data() + kControlHeaderOffset);
  const uint64_t at_start = control->sidecar_heartbeat.counter.load();
  EXPECT_TRUE(WaitFor([&] { return control->sidecar_heartbeat.counter.load() >= at_start + 5; }));
  control->instance_generation.fetch_add(1);  // what an adopting sidecar does
  // A beat already under way may land late on a loaded machine; then nothing more beats.
  ASSERT_TRUE(StaysStill(control->sidecar_heartbeat.counter));
  const uint64_t after = control->sidecar_heartbeat.counter.load();
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(control->sidecar_heartbeat.counter.load(), after);
}

TEST(ControlBlockTest, RecreateSupersedesTheOldSegment) {
  const std::string name = UniqueName("ctl");
  ScopedUnlink cleanup(name);
  auto first = ControlBlock::Create(name, SmallOptions()).value();
  auto engine = ControlBlock::Attach(name).value();
  RankHandle rank = engine->RegisterRank(0, 1).value();
  EXPECT_EQ(engine->CheckSidecar().state, PeerState::kAlive);
  first.reset();  // clean exit
  EXPECT_EQ(engine->CheckSidecar().state, PeerState::kProcessGone);
  EXPECT_FALSE(engine->IsSuperseded().value());

  ControlBlockOptions different = SmallOptions(4);
  different.on_existing = OnExisting::kAdopt;
  EXPECT_EQ(ControlBlock::Create(name, different).status().code(),
            StatusCode::kFailedPrecondition);  // geometry differs: cannot adopt
  different.on_existing = OnExisting::kAdoptOrRecreate;
  auto second = ControlBlock::Create(name, different).value();
  EXPECT_EQ(second->instance_generation(), 2u);
  EXPECT_TRUE(second->ActiveRanks().empty());
  EXPECT_TRUE(engine->IsSuperseded().value());
  auto fresh = ControlBlock::Attach(name).value();
  EXPECT_EQ(fresh->max_ranks(), 4u);
  EXPECT_EQ(fresh->instance_generation(), 2u);
  EXPECT_FALSE(fresh->IsSuperseded().value());
}

TEST(ControlBlockTest, RejectsBadOptions) {
  ControlBlockOptions o = SmallOptions();
  o.max_ranks = 0;
  EXPECT_EQ(ControlBlock::Create(UniqueName("ctl"), o).status().code(),
            StatusCode::kInvalidArgument);
  o = SmallOptions();
  o.command_ring_capacity = 1000;
  EXPECT_EQ(ControlBlock::Create(UniqueName("ctl"), o).status().code(),
            StatusCode::kInvalidArgument);
  o = SmallOptions();
  o.response_max_message = 8192;
  EXPECT_EQ(ControlBlock::Create(UniqueName("ctl"), o).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(ControlBlock::SegmentBytes(o), 0u);
  EXPECT_GT(ControlBlock::SegmentBytes(ControlBlockOptions{}), 64u * (256u << 10));
  // The largest message must fit as one record: 8 + round8(m) <= capacity (section 3).
  o = SmallOptions();
  o.command_ring_capacity = 64;
  o.command_max_message = 56;  // 8 + 56 = 64: fits exactly
  {
    const std::string name = UniqueName("ctl");
    ScopedUnlink cleanup(name);
    EXPECT_TRUE(ControlBlock::Create(name, o).ok());
  }
  o.command_max_message = 57;  // 8 + 64 > 64
  EXPECT_EQ(ControlBlock::Create(UniqueName("ctl"), o).status().code(),
            StatusCode::kInvalidArgument);
  o = SmallOptions();
  o.command_ring_capacity = uint64_t{1} << 31;  // above a control block's 2^30
  EXPECT_EQ(ControlBlock::Create(UniqueName("ctl"), o).status().code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace deltakv::shm
