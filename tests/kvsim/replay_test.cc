// Tests of the replay rules (kvsim/replay.h) on hand-built traces, with a cost model whose step
// time is a constant so that every time is exact.
#include "kvsim/replay.h"

#include <gtest/gtest.h>

#include <limits>
#include <map>
#include <utility>
#include <vector>

namespace deltakv::kvsim {
namespace {

constexpr double kStep = 0.01;

CostModel FixedCost(double step_s = kStep, double reload_tokens_per_s = 1e12) {
  CostModel c;
  c.tp = 1;
  c.kv_bytes_per_token = 1;
  c.kv_bytes_per_token_per_rank = 1;
  c.flops_per_token = 0;
  c.attention_flops_coef = 0;
  c.compute_flops_per_s = 1;
  c.attention_flops_per_s = 1;
  c.hbm_bytes_per_s = 1e300;  // no memory time
  c.step_overhead_s = step_s;
  c.reload_bytes_per_s = reload_tokens_per_s;
  return c;
}

// A request of `blocks` whole 64-token blocks with ids base..base+blocks-1.
TraceRequest Req(double t, uint64_t blocks, uint64_t out = 1, double api = 1, uint64_t base = 1) {
  TraceRequest r;
  r.t_s = t;
  r.input_tokens = blocks * 64;
  r.output_tokens = out;
  for (uint64_t i = 0; i < blocks; ++i) r.hash_ids.push_back(base + i);
  r.api_time_s = api;
  return r;
}

Trace Tree(std::vector<TraceRequest> root, std::string id = "t") {
  Trace t;
  t.id = id;
  t.file = id + ".json";
  t.block_size = 64;
  Conversation c;
  c.id = id;
  c.turns = std::move(root);
  t.conversations.push_back(std::move(c));
  return t;
}

ReplayOptions Opts(uint32_t concurrency = 1) {
  ReplayOptions o;
  o.concurrency = concurrency;
  o.gpu_kv_tokens = 64 * 1000;
  o.duration_s = 1000;
  o.idle_cap_s = 1e9;
  o.warmup_min = o.warmup_max = 0;  // the warmup request is turn 0
  o.sim_block_bytes = 64;
  return o;
}

std::vector<RequestRecord> Replay(const Corpus& corpus, ReplayOptions o, ReplayResult* out = nullptr,
                               CostModel cost = FixedCost()) {
  std::vector<RequestRecord> recs;
  o.on_request = [&](const RequestRecord& r) { recs.push_back(r); };
  auto r = RunReplay(corpus, cost, o);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  if (out != nullptr && r.ok()) *out = *r;
  return recs;
}

TEST(ReplayRules, ClosedLoopWithEndToStartGaps) {
  Corpus c;
  // Turn 1 starts 95 s after turn 0 ended in the trace (t 100 - (0 + api 5)); turn 2 20 s.
  c.traces.push_back(Tree({Req(0, 1, 1, 5), Req(100, 2, 1, 10), Req(130, 3, 1, 1)}));
  auto o = Opts();
  o.duration_s = 150;  // the second play of the tree would start after the run
  ReplayResult res;
  auto recs = Replay(c, o, &res);
  ASSERT_GE(recs.size(), 3u);
  EXPECT_TRUE(recs[0].warmup);
  EXPECT_DOUBLE_EQ(recs[0].ready_s, 0);
  EXPECT_NEAR(recs[0].end_s, kStep, 1e-12);  // one block of prefill and one output token
  EXPECT_FALSE(recs[1].warmup);
  EXPECT_NEAR(recs[1].ready_s, kStep + 95, 1e-9);
  EXPECT_NEAR(recs[2].ready_s, recs[1].end_s + 20, 1e-9);
  EXPECT_EQ(res.warmup_requests, 1u);
}

TEST(ReplayRules, WholeSystemIdleCapShortensLongGaps) {
  Corpus c;
  c.traces.push_back(Tree({Req(0, 1, 1, 5), Req(100, 2, 1, 10), Req(130, 3, 1, 1)}));
  auto o = Opts();
  o.idle_cap_s = 10;
  o.duration_s = 100;
  auto recs = Replay(c, o);
  ASSERT_GE(recs.size(), 3u);
  EXPECT_NEAR(recs[1].ready_s, kStep + 10, 1e-9);          // 95 s capped at 10
  EXPECT_NEAR(recs[2].ready_s, recs[1].end_s + 10, 1e-9);  // 20 s capped at 10
}

TEST(ReplayRules, IdleCapZeroSkipsEveryGapAndBadValuesAreRefused) {
  Corpus c;
  c.traces.push_back(Tree({Req(0, 1, 1, 5), Req(100, 2, 1, 10), Req(130, 3, 1, 1)}));
  auto o = Opts();
  o.idle_cap_s = 0;
  o.duration_s = 100;
  auto recs = Replay(c, o);
  ASSERT_GE(recs.size(), 3u);
  EXPECT_NEAR(recs[1].ready_s, kStep, 1e-9);
  EXPECT_NEAR(recs[2].ready_s, recs[1].end_s, 1e-9);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  for (auto [idle, duration] : {std::pair{-1.0, 100.0}, {nan, 100.0}, {10.0, 0.0},
                                {10.0, -1.0}, {10.0, nan}, {10.0, inf}, {10.0, 2e9}}) {
    o.idle_cap_s = idle;
    o.duration_s = duration;
    auto r = RunReplay(c, FixedCost(), o);
    ASSERT_FALSE(r.ok()) << idle << " " << duration;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(idle == 10.0 ? "duration_s" : "idle_cap_s"),
              std::string::npos)
        << r.status().ToString();
  }
  o.idle_cap_s = inf;  // no cap
  o.duration_s = 100;
  EXPECT_TRUE(RunReplay(c, FixedCost(), o).ok());
}

TEST(ReplayRules, IdleCapDoesNotApplyWhileAnotherLaneIsBusy) {
  Corpus c;
  c.traces.push_back(Tree({Req(0, 1, 1, 0), Req(50, 1, 1, 0)}, "a"));
  // Lane 2 decodes 2000 tokens (20 s) while lane 1 waits 50 s: no skip until lane 2 is idle.
  c.traces.push_back(Tree({Req(0, 1, 1, 0), Req(1, 1, 2000, 0)}, "b"));
  auto o = Opts(2);
  o.idle_cap_s = 5;
  o.duration_s = 60;
  auto recs = Replay(c, o);
  double ready_a1 = -1, end_b1 = -1;
  for (const auto& r : recs) {
    if (r.trace == 0 && r.turn == 1 && r.play == 0) ready_a1 = r.ready_s;
    if (r.trace == 1 && r.turn == 1 && r.play == 1) end_b1 = r.end_s;
  }
  ASSERT_GT(ready_a1, 0);
  ASSERT_GT(end_b1, 0);
  // Lane b keeps the system busy until end_b1; then its lane recycles to trace a, whose turn 0
  // runs one step; after that the system is idle and at most 5 s of idle pass.
  EXPECT_NEAR(ready_a1, end_b1 + kStep + 5, 1e-6);
}

TEST(ReplayRules, WarmupStartsEachLaneInsideItsTrace) {
  Corpus c;
  std::vector<TraceRequest> turns;
  for (int i = 0; i < 20; ++i) turns.push_back(Req(i * 10.0, 1 + i, 1, 1));
  c.traces.push_back(Tree(turns));
  auto o = Opts(4);
  o.warmup_min = 0.25;
  o.warmup_max = 0.75;
  o.duration_s = 30;
  auto recs = Replay(c, o);
  std::map<uint32_t, uint32_t> warmup_turn;
  for (const auto& r : recs) {
    if (r.warmup) warmup_turn[r.lane] = r.turn;
  }
  ASSERT_EQ(warmup_turn.size(), 4u);
  for (auto [lane, turn] : warmup_turn) {
    EXPECT_GE(turn + 1, 5u) << lane;   // t* >= 25 % of 20 turns
    EXPECT_LE(turn + 1, 15u) << lane;  // t* <= 75 %
  }
  // Every warmup request is sent at time 0 and none is profiled.
  for (const auto& r : recs) {
    if (r.warmup) {
      EXPECT_DOUBLE_EQ(r.ready_s, 0);
    }
  }
  // The same seed draws the same turns; another seed draws others.
  auto again = Replay(c, o);
  ASSERT_EQ(again.size(), recs.size());
  for (size_t i = 0; i < recs.size(); ++i) EXPECT_EQ(again[i].turn, recs[i].turn);
  o.seed = 7;
  std::map<uint32_t, uint32_t> other;
  for (const auto& r : Replay(c, o)) {
    if (r.warmup) other[r.lane] = r.turn;
  }
  EXPECT_NE(other, warmup_turn);
}

TEST(ReplayRules, WarmupRequestCarriesTheFullPrefixAndIsExcluded) {
  Corpus c;
  c.traces.push_back(Tree({Req(0, 10), Req(10, 20), Req(20, 30)}));
  auto o = Opts();
  o.warmup_min = o.warmup_max = 0.5;  // t* = turn 1: warmup = turn 0
  o.duration_s = 25;
  ReplayResult res;
  auto recs = Replay(c, o, &res);
  ASSERT_GE(recs.size(), 2u);
  EXPECT_TRUE(recs[0].warmup);
  EXPECT_EQ(recs[0].turn, 0u);
  EXPECT_EQ(recs[1].turn, 1u);
  EXPECT_EQ(recs[1].gpu_hit_tokens, 10u * 64);  // turn 1 reuses the warmup's 10 blocks
  EXPECT_EQ(res.requests + res.warmup_requests, recs.size());
  EXPECT_EQ(res.warmup_requests, 1u);
}

TEST(ReplayRules, CacheBustGivesEveryPlayItsOwnPrefix) {
  Corpus c;
  c.traces.push_back(Tree({Req(0, 8), Req(2, 10)}));
  auto o = Opts();
  o.duration_s = 100;
  auto recs = Replay(c, o);
  // Plays recycle: turn 0 of every later play misses entirely; turn 1 hits its own turn 0.
  uint32_t first_turns = 0;
  for (const auto& r : recs) {
    if (r.turn == 0 && !r.warmup) {
      ++first_turns;
      EXPECT_EQ(r.gpu_hit_tokens, 0u);
      EXPECT_EQ(r.theoretical_hit_tokens, 0u);
    }
    if (r.turn == 1) {
      EXPECT_EQ(r.gpu_hit_tokens, 8u * 64);
    }
  }
  EXPECT_GT(first_turns, 3u);
}

TEST(ReplayRules, SubagentStartsAfterItsSpawnTurnAndIsJoined) {
  Corpus c;
  Trace t = Tree({Req(0, 4, 1, 1), Req(50, 6, 1, 1), Req(60, 7, 1, 1)});
  Conversation sa;
  sa.id = "t::sa:x";
  sa.spawn_after = 0;
  sa.join_before = 1;
  sa.spawn_t_s = 2;
  sa.turns = {Req(3, 4, 500, 1, 1), Req(5, 5, 1, 1, 1)};  // 2 s after the root turn ended
  t.conversations.push_back(sa);
  c.traces.push_back(t);
  auto o = Opts();
  o.warmup_min = o.warmup_max = 0.0;  // warmup = root turn 0, which spawns the subagent
  o.duration_s = 200;
  auto recs = Replay(c, o);
  const RequestRecord *root0 = nullptr, *sa0 = nullptr, *sa1 = nullptr, *root1 = nullptr;
  for (const auto& r : recs) {
    if (r.play != 0) continue;
    if (r.conversation == 0 && r.turn == 0) root0 = &r;
    if (r.conversation == 1 && r.turn == 0) sa0 = &r;
    if (r.conversation == 1 && r.turn == 1) sa1 = &r;
    if (r.conversation == 0 && r.turn == 1) root1 = &r;
  }
  ASSERT_TRUE(root0 && sa0 && sa1 && root1);
  EXPECT_NEAR(sa0->ready_s, root0->end_s + 2, 1e-9);  // 3 - (0 + 1)
  EXPECT_EQ(sa0->gpu_hit_tokens, 4u * 64);            // shares the root's prefix (one scope)
  EXPECT_NEAR(sa1->ready_s, sa0->end_s + 1, 1e-9);    // 5 - (3 + 1)
  // The subagent ends about 8 s after root turn 0; the root's own gap (50 - 1 = 49 s) is
  // longer, so it decides when root turn 1 becomes ready.
  EXPECT_GE(root1->ready_s, sa1->end_s);
  EXPECT_NEAR(root1->ready_s, root0->end_s + 49, 1e-9);
}

TEST(ReplayRules, JoinWaitsForALongSubagent) {
  Corpus c;
  Trace t = Tree({Req(0, 4, 1, 1), Req(3, 6, 1, 1)});
  Conversation sa;
  sa.id = "t::sa:x";
  sa.spawn_after = 0;
  sa.join_before = 1;
  sa.turns = {Req(1, 4, 3000, 1, 1)};  // 30 s of decode
  t.conversations.push_back(sa);
  c.traces.push_back(t);
  auto o = Opts();
  o.duration_s = 100;
  auto recs = Replay(c, o);
  const RequestRecord *sa0 = nullptr, *root1 = nullptr;
  for (const auto& r : recs) {
    if (r.play != 0) continue;
    if (r.conversation == 1) sa0 = &r;
    if (r.conversation == 0 && r.turn == 1) root1 = &r;
  }
  ASSERT_TRUE(sa0 && root1);
  EXPECT_NEAR(root1->ready_s, sa0->end_s, 1e-9);
}

TEST(ReplayRules, BackgroundSubagentHoldsTheLaneUntilItEnds) {
  Corpus c;
  Trace t = Tree({Req(0, 4, 1, 1), Req(2, 5, 1, 1)});
  Conversation sa;
  sa.id = "t::sa:bg";
  sa.spawn_after = 1;
  sa.join_before = -1;  // nobody waits for it
  sa.turns = {Req(4, 4, 2000, 1, 1)};
  t.conversations.push_back(sa);
  c.traces.push_back(t);
  auto o = Opts();
  o.duration_s = 60;
  auto recs = Replay(c, o);
  const RequestRecord *root1 = nullptr, *bg = nullptr, *next0 = nullptr;
  for (const auto& r : recs) {
    if (r.play == 0 && r.conversation == 0 && r.turn == 1) root1 = &r;
    if (r.play == 0 && r.conversation == 1) bg = &r;
    if (r.play == 1 && r.turn == 0 && r.conversation == 0) next0 = &r;
  }
  ASSERT_TRUE(root1 && bg && next0);
  EXPECT_GT(bg->end_s, root1->end_s + 10);
  EXPECT_NEAR(next0->ready_s, bg->end_s, 1e-9);  // the lane recycles when the tree drained
}

TEST(ReplayRules, OverflowingRequestsAreCountedNotRun) {
  Corpus c;
  c.traces.push_back(Tree({Req(0, 2), Req(1, 50), Req(2, 3)}));
  auto o = Opts();
  o.gpu_kv_tokens = 64 * 20;
  o.duration_s = 5;
  ReplayResult res;
  auto recs = Replay(c, o, &res);
  EXPECT_GT(res.overflow_requests, 0u);
  bool saw = false;
  for (const auto& r : recs) saw |= r.overflow && r.turn == 1;
  EXPECT_TRUE(saw);
}

// Two traces whose working sets together exceed the GPU cache but fit with the host tier.
Corpus Thrashing() {
  Corpus c;
  for (int tr = 0; tr < 4; ++tr) {
    std::vector<TraceRequest> turns;
    for (int i = 0; i < 12; ++i) turns.push_back(Req(i * 5.0, 100 + 10 * i, 20, 1, 1));
    c.traces.push_back(Tree(turns, "t" + std::to_string(tr)));
  }
  return c;
}

TEST(ReplayHostTier, HostTierRecoversWhatTheGpuEvicts) {
  Corpus c = Thrashing();
  auto o = Opts(4);
  o.gpu_kv_tokens = 64 * 400;  // one tree's context is up to 210 blocks: 4 trees do not fit
  o.duration_s = 600;
  o.sim_block_bytes = 128;
  ReplayResult gpu_only, with_host;
  Replay(c, o, &gpu_only);
  o.host_kv_tokens = 64 * 100000;
  Replay(c, o, &with_host);
  EXPECT_EQ(gpu_only.host_hit_tokens, 0u);
  EXPECT_GT(with_host.host_hit_tokens, 0u);
  EXPECT_GT(with_host.pool_stored_blocks, 0u);
  EXPECT_GT(with_host.pool_loaded_blocks, 0u);
  EXPECT_EQ(with_host.wrong_bytes, 0u);
  EXPECT_EQ(with_host.pool_refused_blocks, 0u);
  EXPECT_LT(with_host.miss_rate, gpu_only.miss_rate);
  // A host tier larger than the working set gets (nearly) every block an infinite cache has.
  EXPECT_GE(with_host.gpu_hit_rate + with_host.host_hit_rate,
            0.95 * with_host.theoretical_hit_rate);
  EXPECT_LT(gpu_only.gpu_hit_rate, 0.9 * gpu_only.theoretical_hit_rate);
}

TEST(ReplayHostTier, ReloadTimeDelaysTheFirstToken) {
  Corpus c = Thrashing();
  auto o = Opts(4);
  o.gpu_kv_tokens = 64 * 400;
  o.host_kv_tokens = 64 * 100000;
  o.duration_s = 200;
  o.sim_block_bytes = 128;
  ReplayResult fast, slow;
  Replay(c, o, &fast, FixedCost(kStep, 1e12));
  Replay(c, o, &slow, FixedCost(kStep, 1e3));  // 1,000 tokens/s: a 6,400-token reload takes 6.4 s
  EXPECT_GT(slow.ttft_s.p90, fast.ttft_s.p90 + 1);
}

TEST(ReplayHostTier, SmallHostTierEvictsAndStaysCorrect) {
  Corpus c = Thrashing();
  auto o = Opts(4);
  o.gpu_kv_tokens = 64 * 400;
  o.host_kv_tokens = 64 * 300;
  o.duration_s = 300;
  o.sim_block_bytes = 64;
  ReplayResult res;
  Replay(c, o, &res);
  EXPECT_GT(res.pool_evictions, 0u);
  EXPECT_EQ(res.wrong_bytes, 0u);
  EXPECT_GT(res.host_hit_tokens, 0u);
}

TEST(ReplayMooncake, RecordsShareTheFileScopeWithinAPass) {
  Corpus c;
  Trace t;
  t.id = "mc";
  t.file = "mc.jsonl";
  t.format = TraceFormat::kMooncake;
  t.block_size = 512;
  t.sessions_independent = true;
  for (int i = 0; i < 6; ++i) {
    Conversation conv;
    conv.id = "mc:" + std::to_string(i);
    TraceRequest r;
    r.t_s = i;
    r.input_tokens = 512 * 4 + 100;  // 4 whole blocks and a partial one
    r.output_tokens = 5;
    r.hash_ids = {1, 2, 3, 4, static_cast<uint64_t>(100 + i)};
    conv.turns.push_back(r);
    t.conversations.push_back(conv);
  }
  c.traces.push_back(t);
  auto o = Opts(1);
  o.gpu_kv_tokens = 512 * 100;
  o.duration_s = 0.3;
  auto recs = Replay(c, o);
  ASSERT_GE(recs.size(), 6u);
  EXPECT_TRUE(recs[0].warmup);
  for (size_t i = 1; i < 6; ++i) {
    EXPECT_EQ(recs[i].gpu_hit_tokens, 4u * 512) << i;  // the partial block is never cached
    EXPECT_EQ(recs[i].theoretical_hit_tokens, 4u * 512) << i;
  }
  for (size_t i = 6; i < recs.size(); ++i) {
    if (recs[i].conversation == 0) {
      EXPECT_EQ(recs[i].gpu_hit_tokens, 0u);  // a new pass over the file: a new salt
    }
  }
}

TEST(ReplayErrors, BadOptionsAreRefused) {
  Corpus c;
  auto o = Opts();
  EXPECT_FALSE(RunReplay(c, FixedCost(), o).ok());  // empty corpus
  c.traces.push_back(Tree({Req(0, 1), Req(1, 2)}));
  o.concurrency = 0;
  EXPECT_FALSE(RunReplay(c, FixedCost(), o).ok());
  o = Opts();
  o.gpu_kv_tokens = 0;
  EXPECT_FALSE(RunReplay(c, FixedCost(), o).ok());
  o = Opts();
  o.warmup_min = 0.8;
  o.warmup_max = 0.2;
  EXPECT_FALSE(RunReplay(c, FixedCost(), o).ok());
  o = Opts();
  o.host_kv_tokens = 64ull << 30;
  auto r = RunReplay(c, FixedCost(), o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("over the cap"), std::string::npos);
  Trace other = Tree({Req(0, 1)}, "other");
  other.block_size = 512;
  c.traces.push_back(other);
  EXPECT_FALSE(RunReplay(c, FixedCost(), Opts()).ok());
}

TEST(ReplayDeterminism, SameSeedSameResult) {
  Corpus c = Thrashing();
  auto o = Opts(3);
  o.gpu_kv_tokens = 64 * 400;
  o.host_kv_tokens = 64 * 5000;
  o.warmup_min = 0.25;
  o.warmup_max = 0.75;
  o.duration_s = 300;
  ReplayResult a, b;
  Replay(c, o, &a);
  Replay(c, o, &b);
  EXPECT_EQ(a.requests, b.requests);
  EXPECT_EQ(a.gpu_hit_tokens, b.gpu_hit_tokens);
  EXPECT_EQ(a.host_hit_tokens, b.host_hit_tokens);
  EXPECT_DOUBLE_EQ(a.ttft_s.p99, b.ttft_s.p99);
}

}  // namespace
}  // namespace deltakv::kvsim
