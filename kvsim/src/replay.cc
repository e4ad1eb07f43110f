// The replay loop of kvsim/replay.h: lanes of session trees, a timer heap, a waiting queue,
// admission into the GPU prefix cache (with host-tier reloads), and engine steps.
#include "kvsim/replay.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <deque>
#include <limits>
#include <memory>
#include <queue>
#include <unordered_set>
#include <vector>

#include "gpu_prefix_cache.h"
#include "host_tier.h"
#include "replay_keys.h"

namespace deltakv::kvsim {
namespace {

constexpr double kNever = std::numeric_limits<double>::infinity();
constexpr double kMaxDurationS = 1e9;  // about 32 years of simulated time

// The recorded end-to-start gap before `next`, whose predecessor is `prev`.
double Gap(const TraceRequest& prev, const TraceRequest& next) {
  if (prev.api_time_s >= 0) return std::max(0.0, next.t_s - (prev.t_s + prev.api_time_s));
  if (next.think_time_s >= 0) return next.think_time_s;
  return 0;
}

struct Timer {
  double t;
  uint64_t seq;
  uint32_t lane;
  uint32_t conv;
  uint32_t turn;
  bool warmup;
  bool operator>(const Timer& o) const { return t != o.t ? t > o.t : seq > o.seq; }
};

struct Pending {
  uint32_t lane, conv, turn;
  bool warmup;
  uint64_t play;
  double ready_t;
  uint64_t theoretical_blocks;
  BlockKeys keys;
};

enum class Phase : uint8_t { kLoading, kPrefill, kDecode };

struct Running {
  Pending q;
  const TraceRequest* tr = nullptr;
  Phase phase = Phase::kPrefill;
  double load_done = 0;
  double first_token_t = -1;
  std::vector<uint32_t> blocks;  // every GPU block the request references, in prompt order
  uint32_t publish_from = 0;     // blocks [publish_from, full) are computed: published at the end
  uint32_t full = 0;             // whole hashed blocks of the prompt
  uint64_t prefill_left = 0;
  uint64_t context = 0;
  uint64_t out_left = 0;
  uint64_t chunk = 0;  // prefill tokens of the current step
  uint32_t gpu_hit = 0, host_hit = 0;
};

struct ConvState {
  bool skipped = false;
  bool done = false;
  double last_end = 0;
};

struct Play {
  uint32_t trace = 0;
  uint32_t root = 0;  // conversation index of the root (Mooncake: the record)
  uint64_t salt = 0;
  uint64_t play = 0;
  std::vector<ConvState> convs;
  uint32_t outstanding = 0;  // timers pending + requests queued or running
  int32_t root_waiting = -1;  // root turn waiting for its subagents
};

struct TraceIndex {
  // Weka: children (conversation indexes) by the root turn that spawns / joins them.
  std::vector<std::vector<uint32_t>> spawned_after;
  std::vector<std::vector<uint32_t>> joined_before;
};

class Replay {
 public:
  Replay(const Corpus& corpus, const CostModel& cost, const ReplayOptions& o)
      : corpus_(corpus), cost_(cost), o_(o) {}

  Status Init();
  Status Run();
  ReplayResult Finish(double wall_s);

 private:
  uint32_t bs() const { return block_size_; }
  void StartPlay(uint32_t lane, double t, bool first);
  void Schedule(uint32_t lane, uint32_t conv, uint32_t turn, double t, bool warmup);
  void FireTimer(const Timer& tm);
  void OnTurnEnd(uint32_t lane, uint32_t conv, uint32_t turn, bool warmup, double t);
  Status Admit();
  Status AdmitOne(Pending& q, bool* admitted);
  void Step();
  void FinishRequest(Running& r);
  void Record(const Running& r, uint32_t gpu_hit, uint32_t host_hit);
  void ShiftTimers(double by);
  void FillPattern(uint32_t block, uint64_t key_lo);
  uint64_t CheckPattern(uint32_t block, uint64_t key_lo) const;

  const Corpus& corpus_;
  const CostModel& cost_;
  const ReplayOptions& o_;
  uint32_t block_size_ = 0;
  std::vector<TraceIndex> index_;
  // The sampler: units are Weka traces and Mooncake records, in corpus order.
  std::vector<std::pair<uint32_t, uint32_t>> units_;  // (trace, root conversation)
  uint64_t next_unit_ = 0;
  uint64_t plays_ = 0;
  std::vector<Play> lanes_;
  std::priority_queue<Timer, std::vector<Timer>, std::greater<Timer>> timers_;
  uint64_t timer_seq_ = 0;
  std::deque<Pending> waiting_;
  std::vector<std::unique_ptr<Running>> running_;
  double now_ = 0;
  double end_t_ = kNever;
  uint64_t warmup_left_ = 0;
  double link_free_ = 0;
  std::unique_ptr<GpuPrefixCache> gpu_;
  std::vector<uint8_t> arena_;
  std::unique_ptr<HostTier> host_;
  std::unordered_set<uint64_t> produced_;  // keys any finished request produced
  std::vector<EvictedBlock> evicted_;
  std::vector<double> ttft_, e2e_;
  double first_ready_ = kNever, last_end_ = 0;
  double idle_skipped_s_ = 0;
  ReplayResult res_;
};

Status Replay::Init() {
  if (corpus_.traces.empty()) return InvalidArgument("replay: the corpus is empty");
  if (o_.concurrency == 0) return InvalidArgument("replay: concurrency must be >= 1");
  if (o_.gpu_kv_tokens == 0) return InvalidArgument("replay: the GPU KV capacity is 0");
  if (!(o_.warmup_min >= 0 && o_.warmup_min <= o_.warmup_max && o_.warmup_max <= 1)) {
    return InvalidArgument("replay: the warmup range must satisfy 0 <= min <= max <= 1");
  }
  if (!(o_.duration_s > 0 && o_.duration_s <= kMaxDurationS)) {
    return InvalidArgument("replay: duration_s must be above 0 and at most 1e9 seconds");
  }
  if (!(o_.idle_cap_s >= 0)) {
    return InvalidArgument("replay: idle_cap_s must be 0 or more (infinity: no cap)");
  }
  if (o_.sim_block_bytes < 64 || o_.sim_block_bytes % 8 != 0) {
    return InvalidArgument("replay: sim_block_bytes must be a multiple of 8, >= 64");
  }
  if (o_.max_batched_tokens == 0 || o_.max_running == 0) {
    return InvalidArgument("replay: max_batched_tokens and max_running must be >= 1");
  }
  block_size_ = corpus_.traces[0].block_size;
  for (const Trace& t : corpus_.traces) {
    if (t.block_size != block_size_) {
      return InvalidArgument("replay: traces with different block sizes (" +
                                     std::to_string(block_size_) + " and " +
                                     std::to_string(t.block_size) + " in " + t.file +
                                     "): replay one kind at a time");
    }
  }
  if (block_size_ == 0) return InvalidArgument("replay: block size 0");
  index_.resize(corpus_.traces.size());
  for (uint32_t ti = 0; ti < corpus_.traces.size(); ++ti) {
    const Trace& t = corpus_.traces[ti];
    if (t.sessions_independent) {
      for (uint32_t c = 0; c < t.conversations.size(); ++c) {
        if (!t.conversations[c].turns.empty()) units_.emplace_back(ti, c);
      }
      continue;
    }
    if (t.conversations.empty() || t.conversations[0].turns.empty()) continue;
    const size_t n = t.conversations[0].turns.size();
    index_[ti].spawned_after.resize(n);
    index_[ti].joined_before.resize(n + 1);
    for (uint32_t c = 1; c < t.conversations.size(); ++c) {
      const Conversation& ch = t.conversations[c];
      if (ch.turns.empty() || ch.spawn_after < 0 || static_cast<size_t>(ch.spawn_after) >= n) {
        continue;
      }
      index_[ti].spawned_after[ch.spawn_after].push_back(c);
      if (ch.join_before > ch.spawn_after && static_cast<size_t>(ch.join_before) < n) {
        index_[ti].joined_before[ch.join_before].push_back(c);
      }
    }
    units_.emplace_back(ti, 0);
  }
  if (units_.empty()) return InvalidArgument("replay: the corpus has no requests");

  const uint64_t gpu_blocks = o_.gpu_kv_tokens / bs();
  if (gpu_blocks == 0 || gpu_blocks > UINT32_MAX) {
    return InvalidArgument("replay: GPU KV capacity of " +
                                   std::to_string(o_.gpu_kv_tokens) + " tokens is not 1.." +
                                   std::to_string(uint64_t{UINT32_MAX}) + " blocks of " +
                                   std::to_string(bs()) + " tokens");
  }
  const uint64_t host_blocks = o_.host_kv_tokens / bs();
  const uint64_t need = (gpu_blocks + host_blocks) * o_.sim_block_bytes;
  if (need > o_.max_sim_bytes) {
    return InvalidArgument(
        "replay: " + std::to_string(gpu_blocks) + " GPU + " + std::to_string(host_blocks) +
        " host blocks of " + std::to_string(o_.sim_block_bytes) + " bytes need " +
        std::to_string(need >> 20) + " MiB, over the cap of " +
        std::to_string(o_.max_sim_bytes >> 20) + " MiB (lower the simulated block bytes)");
  }
  gpu_ = std::make_unique<GpuPrefixCache>(static_cast<uint32_t>(gpu_blocks));
  arena_.assign(gpu_blocks * o_.sim_block_bytes, 0);
  res_.gpu_capacity_blocks = gpu_blocks;
  res_.host_capacity_blocks = host_blocks;
  if (host_blocks > 0) {
    static std::atomic<uint32_t> counter{0};
    std::string name = o_.pool_name.empty()
                           ? "deltakv-replay-" + std::to_string(getpid()) + "-" +
                                 std::to_string(counter.fetch_add(1))
                           : o_.pool_name;
    ASSIGN_OR_RETURN(host_, HostTier::Create(name, host_blocks, o_.sim_block_bytes,
                                             arena_.data(), gpu_blocks));
    res_.pool_bytes = host_->pool_bytes();
  }
  lanes_.resize(o_.concurrency);
  for (uint32_t l = 0; l < o_.concurrency; ++l) StartPlay(l, 0, true);
  return Status::Ok();
}

void Replay::StartPlay(uint32_t lane, double t, bool first) {
  const uint64_t u = next_unit_++;
  const auto [ti, root] = units_[u % units_.size()];
  const Trace& tr = corpus_.traces[ti];
  Play& p = lanes_[lane];
  p = Play{};
  p.trace = ti;
  p.root = root;
  // Mooncake records of one pass over a file share a salt; every tree play gets its own.
  p.play = tr.sessions_independent ? u / units_.size() : plays_++;
  p.salt = MixSalt(o_.seed, ti, p.play, tr.sessions_independent ? 1 : 0);
  p.convs.assign(tr.sessions_independent ? 1 : tr.conversations.size(), ConvState{});
  const size_t n = tr.conversations[root].turns.size();
  uint32_t start = 0;
  if (first && !tr.sessions_independent && n >= 2) {
    // t* in [warmup_min, warmup_max] of the root turns, leaving one turn to profile; the turn
    // before it is the warmup request.
    SplitMix rng(MixSalt(o_.seed, lane, 0x57a7, 2));
    const double frac = o_.warmup_min + (o_.warmup_max - o_.warmup_min) * rng.NextDouble();
    size_t k = static_cast<size_t>(std::floor(frac * static_cast<double>(n)));
    k = std::clamp<size_t>(k, 1, n - 1);
    start = static_cast<uint32_t>(k - 1);
    for (uint32_t c = 1; c < tr.conversations.size(); ++c) {
      if (tr.conversations[c].spawn_after < static_cast<int32_t>(start)) {
        p.convs[c].skipped = true;
        p.convs[c].done = true;
      }
    }
  }
  if (first) ++warmup_left_;
  Schedule(lane, tr.sessions_independent ? 0 : 0, start, t, first);
}

void Replay::Schedule(uint32_t lane, uint32_t conv, uint32_t turn, double t, bool warmup) {
  ++lanes_[lane].outstanding;
  timers_.push(Timer{t, timer_seq_++, lane, conv, turn, warmup});
}

void Replay::FireTimer(const Timer& tm) {
  Play& p = lanes_[tm.lane];
  if (!tm.warmup && tm.t > end_t_) {  // the run is over: the tree stops here
    --p.outstanding;
    return;
  }
  const Trace& tr = corpus_.traces[p.trace];
  const uint32_t ci = tr.sessions_independent ? p.root : tm.conv;
  const TraceRequest& r = tr.conversations[ci].turns[tm.turn];
  Pending q{tm.lane, tm.conv, tm.turn, tm.warmup, p.play, tm.t, 0, {}};
  const uint32_t full = static_cast<uint32_t>(
      std::min<uint64_t>(r.hash_ids.size(), r.input_tokens / bs()));
  ChainKeys(p.salt, std::span(r.hash_ids).first(full), &q.keys);
  uint64_t th = 0;
  while (th < full && produced_.count(q.keys.lo[th]) != 0) ++th;
  q.theoretical_blocks = th;
  waiting_.push_back(std::move(q));
}

void Replay::OnTurnEnd(uint32_t lane, uint32_t conv, uint32_t turn, bool warmup, double t) {
  Play& p = lanes_[lane];
  const Trace& tr = corpus_.traces[p.trace];
  if (warmup && --warmup_left_ == 0) end_t_ = t + o_.duration_s;
  if (!tr.sessions_independent) {
    const std::vector<TraceRequest>& root = tr.conversations[0].turns;
    const TraceIndex& ix = index_[p.trace];
    p.convs[conv].last_end = t;
    if (conv == 0) {
      for (uint32_t c : ix.spawned_after[turn]) {
        if (p.convs[c].skipped) continue;
        Schedule(lane, c, 0, t + Gap(root[turn], tr.conversations[c].turns[0]), false);
      }
      const uint32_t k = turn + 1;
      if (k < root.size()) {
        bool wait = false;
        for (uint32_t c : ix.joined_before[k]) wait |= !p.convs[c].done;
        if (wait) {
          p.root_waiting = static_cast<int32_t>(k);
        } else {
          Schedule(lane, 0, k, t + Gap(root[turn], root[k]), false);
        }
      }
    } else {
      const std::vector<TraceRequest>& turns = tr.conversations[conv].turns;
      if (turn + 1 < turns.size()) {
        Schedule(lane, conv, turn + 1, t + Gap(turns[turn], turns[turn + 1]), false);
      } else {
        p.convs[conv].done = true;
        const int32_t k = tr.conversations[conv].join_before;
        if (k >= 0 && p.root_waiting == k) {
          bool wait = false;
          for (uint32_t c : ix.joined_before[k]) wait |= !p.convs[c].done;
          if (!wait) {
            p.root_waiting = -1;
            const double ready = std::max(
                t, p.convs[0].last_end + Gap(root[static_cast<size_t>(k) - 1], root[k]));
            Schedule(lane, 0, static_cast<uint32_t>(k), ready, false);
          }
        }
      }
    }
  }
  if (--p.outstanding == 0 && t <= end_t_) StartPlay(lane, t, false);
}

void Replay::ShiftTimers(double by) {
  std::vector<Timer> all;
  all.reserve(timers_.size());
  while (!timers_.empty()) {
    all.push_back(timers_.top());
    timers_.pop();
  }
  for (Timer& t : all) {
    t.t -= by;
    timers_.push(t);
  }
  idle_skipped_s_ += by;
}

void Replay::FillPattern(uint32_t block, uint64_t key_lo) {
  uint8_t* d = arena_.data() + static_cast<size_t>(block) * o_.sim_block_bytes;
  for (uint32_t i = 0; i < o_.sim_block_bytes; i += 8) {
    const uint64_t w = PatternWord(key_lo, i);
    std::memcpy(d + i, &w, 8);
  }
}

uint64_t Replay::CheckPattern(uint32_t block, uint64_t key_lo) const {
  const uint8_t* d = arena_.data() + static_cast<size_t>(block) * o_.sim_block_bytes;
  uint64_t wrong = 0;
  for (uint32_t i = 0; i < o_.sim_block_bytes; i += 8) {
    uint64_t w;
    std::memcpy(&w, d + i, 8);
    const uint64_t x = w ^ PatternWord(key_lo, i);
    for (int b = 0; b < 8; ++b) wrong += ((x >> (8 * b)) & 0xff) != 0;
  }
  return wrong;
}

Status Replay::AdmitOne(Pending& q, bool* admitted) {
  *admitted = false;
  Play& p = lanes_[q.lane];
  const Trace& tr = corpus_.traces[p.trace];
  const uint32_t ci = tr.sessions_independent ? p.root : q.conv;
  const TraceRequest& r = tr.conversations[ci].turns[q.turn];
  const uint64_t out = std::max<uint64_t>(1, r.output_tokens);
  const uint64_t need_total = (r.input_tokens + out + bs() - 1) / bs();
  const uint32_t full = static_cast<uint32_t>(q.keys.lo.size());
  if (need_total > gpu_->capacity()) {
    if (!q.warmup) ++res_.overflow_requests;
    if (o_.on_request) {
      RequestRecord rec;
      rec.lane = q.lane;
      rec.trace = p.trace;
      rec.conversation = ci;
      rec.turn = q.turn;
      rec.play = q.play;
      rec.warmup = q.warmup;
      rec.overflow = true;
      rec.ready_s = rec.first_token_s = rec.end_s = now_;
      rec.input_tokens = r.input_tokens;
      rec.output_tokens = r.output_tokens;
      o_.on_request(rec);
    }
    *admitted = true;
    OnTurnEnd(q.lane, q.conv, q.turn, q.warmup, now_);
    return Status::Ok();
  }
  const uint32_t g = static_cast<uint32_t>(gpu_->MatchPrefix(q.keys.lo));
  uint32_t idle_hits = 0;
  for (uint32_t i = 0; i < g; ++i) idle_hits += gpu_->IsIdle(gpu_->BlockOf(q.keys.lo[i]));
  const uint64_t need_new = need_total - g;
  if (gpu_->available() - idle_hits < need_new) return Status::Ok();  // head of line waits

  auto run = std::make_unique<Running>();
  Running& x = *run;
  x.tr = &r;
  x.full = full;
  x.blocks.reserve(need_total);
  for (uint32_t i = 0; i < g; ++i) {
    const uint32_t b = gpu_->BlockOf(q.keys.lo[i]);
    gpu_->Ref(b);
    x.blocks.push_back(b);
  }
  evicted_.clear();
  for (uint64_t i = 0; i < need_new; ++i) x.blocks.push_back(gpu_->Take(&evicted_));
  if (host_ != nullptr && !evicted_.empty()) {
    // The evicted blocks still hold their bytes: store them before they are overwritten.
    std::vector<kvtier::PoolKey> keys;
    std::vector<uint64_t> blocks;
    keys.reserve(evicted_.size());
    blocks.reserve(evicted_.size());
    for (const EvictedBlock& e : evicted_) {
      keys.push_back(kvtier::PoolKey{e.lo, e.hi});
      blocks.push_back(e.block);
    }
    RETURN_IF_ERROR(host_->Store(keys, blocks));
  }
  uint32_t h = 0;
  if (host_ != nullptr && g < full) {
    std::vector<kvtier::PoolKey> keys(full - g);
    for (uint32_t i = g; i < full; ++i) keys[i - g] = kvtier::PoolKey{q.keys.lo[i], q.keys.hi[i]};
    h = static_cast<uint32_t>(host_->Lookup(keys));
    if (h > 0) {
      std::vector<uint64_t> dst(x.blocks.begin() + g, x.blocks.begin() + g + h);
      RETURN_IF_ERROR(host_->Load(std::span(keys).first(h), dst));
      for (uint32_t i = 0; i < h; ++i) {
        const uint32_t b = x.blocks[g + i];
        res_.wrong_bytes += CheckPattern(b, q.keys.lo[g + i]);
        gpu_->Publish(b, q.keys.lo[g + i], q.keys.hi[g + i]);
      }
    }
  }
  for (uint32_t i = g + h; i < full; ++i) FillPattern(x.blocks[i], q.keys.lo[i]);
  x.publish_from = g + h;
  const uint64_t cached = static_cast<uint64_t>(g + h) * bs();
  x.context = cached;
  x.prefill_left = std::max<uint64_t>(1, r.input_tokens - std::min(cached, r.input_tokens));
  x.out_left = out;
  if (h > 0) {
    x.phase = Phase::kLoading;
    x.load_done = std::max(now_, link_free_) + cost_.ReloadSeconds(uint64_t{h} * bs());
    link_free_ = x.load_done;
  }
  x.q = std::move(q);
  x.gpu_hit = g;
  x.host_hit = h;
  Record(x, g, h);
  running_.push_back(std::move(run));
  *admitted = true;
  return Status::Ok();
}

void Replay::Record(const Running& r, uint32_t gpu_hit, uint32_t host_hit) {
  if (r.q.warmup) {
    ++res_.warmup_requests;
    return;
  }
  const uint64_t in = r.tr->input_tokens;
  const uint64_t gt = std::min<uint64_t>(in, uint64_t{gpu_hit} * bs());
  const uint64_t ht = std::min<uint64_t>(in - gt, uint64_t{host_hit} * bs());
  ++res_.requests;
  res_.input_tokens += in;
  res_.gpu_hit_tokens += gt;
  res_.host_hit_tokens += ht;
  res_.miss_tokens += in - gt - ht;
  res_.theoretical_hit_tokens += std::min<uint64_t>(in, r.q.theoretical_blocks * bs());
  first_ready_ = std::min(first_ready_, r.q.ready_t);
}

Status Replay::Admit() {
  while (!waiting_.empty() && running_.size() < o_.max_running) {
    bool admitted = false;
    RETURN_IF_ERROR(AdmitOne(waiting_.front(), &admitted));
    if (!admitted) break;
    waiting_.pop_front();
  }
  return Status::Ok();
}

void Replay::Step() {
  uint64_t decodes = 0, decode_ctx = 0;
  for (const auto& r : running_) {
    if (r->phase == Phase::kDecode) {
      ++decodes;
      decode_ctx += r->context;
    }
  }
  uint64_t budget = o_.max_batched_tokens > decodes ? o_.max_batched_tokens - decodes : 0;
  uint64_t prefill = 0;
  double attn = 0;
  for (const auto& r : running_) {
    r->chunk = 0;
    if (r->phase != Phase::kPrefill || budget == 0) continue;
    r->chunk = std::min(r->prefill_left, budget);
    budget -= r->chunk;
    prefill += r->chunk;
    attn += cost_.ChunkAttentionFlops(r->context, r->chunk);
  }
  now_ += cost_.StepSeconds(prefill, attn, decodes, decode_ctx);
  ++res_.steps;
  // Finished requests leave without reordering the rest: the prefill budget goes to running
  // requests in admission order (FCFS), so the oldest prefill always advances and no request
  // starves behind later ones.
  size_t kept = 0;
  for (size_t i = 0; i < running_.size(); ++i) {
    Running& r = *running_[i];
    bool done = false;
    if (r.phase == Phase::kDecode) {
      ++r.context;
      done = --r.out_left == 0;
    } else if (r.phase == Phase::kPrefill && r.chunk > 0) {
      r.context += r.chunk;
      r.prefill_left -= r.chunk;
      if (r.prefill_left == 0) {
        r.first_token_t = now_;
        r.phase = Phase::kDecode;
        done = --r.out_left == 0;
      }
    }
    if (done) {
      FinishRequest(r);
    } else {
      if (kept != i) running_[kept] = std::move(running_[i]);
      ++kept;
    }
  }
  running_.resize(kept);
}

void Replay::FinishRequest(Running& r) {
  for (uint32_t i = r.publish_from; i < r.full; ++i) {
    gpu_->Publish(r.blocks[i], r.q.keys.lo[i], r.q.keys.hi[i]);
  }
  for (uint32_t i = 0; i < r.full; ++i) produced_.insert(r.q.keys.lo[i]);
  for (size_t i = r.blocks.size(); i > 0; --i) gpu_->Unref(r.blocks[i - 1]);  // tail first
  if (!r.q.warmup) {
    res_.output_tokens += r.tr->output_tokens;
    ttft_.push_back(r.first_token_t - r.q.ready_t);
    e2e_.push_back(now_ - r.q.ready_t);
    last_end_ = std::max(last_end_, now_);
  }
  if (o_.on_request) {
    const Play& p = lanes_[r.q.lane];
    const uint64_t in = r.tr->input_tokens;
    RequestRecord rec;
    rec.lane = r.q.lane;
    rec.trace = p.trace;
    rec.conversation = corpus_.traces[p.trace].sessions_independent ? p.root : r.q.conv;
    rec.turn = r.q.turn;
    rec.play = r.q.play;
    rec.warmup = r.q.warmup;
    rec.ready_s = r.q.ready_t;
    rec.first_token_s = r.first_token_t;
    rec.end_s = now_;
    rec.input_tokens = in;
    rec.output_tokens = r.tr->output_tokens;
    rec.gpu_hit_tokens = std::min<uint64_t>(in, uint64_t{r.gpu_hit} * bs());
    rec.host_hit_tokens = std::min<uint64_t>(in - rec.gpu_hit_tokens, uint64_t{r.host_hit} * bs());
    rec.theoretical_hit_tokens = std::min<uint64_t>(in, r.q.theoretical_blocks * bs());
    o_.on_request(rec);
  }
  OnTurnEnd(r.q.lane, r.q.conv, r.q.turn, r.q.warmup, now_);
}

Status Replay::Run() {
  double last_progress = -1;
  for (;;) {
    while (!timers_.empty() && timers_.top().t <= now_) {
      Timer tm = timers_.top();
      timers_.pop();
      FireTimer(tm);
    }
    for (auto& r : running_) {
      if (r->phase == Phase::kLoading && r->load_done <= now_) r->phase = Phase::kPrefill;
    }
    RETURN_IF_ERROR(Admit());
    bool busy = false, loading = false;
    double next_load = kNever;
    for (const auto& r : running_) {
      if (r->phase == Phase::kLoading) {
        loading = true;
        next_load = std::min(next_load, r->load_done);
      } else {
        busy = true;
      }
    }
    if (o_.progress && end_t_ != kNever) {
      // 100 % only once the requests in flight at the end have finished too.
      const double f = std::clamp(1.0 - (end_t_ - now_) / o_.duration_s, 0.0, 0.99);
      if (f - last_progress >= 0.01) {
        o_.progress(f);
        last_progress = f;
      }
    }
    if (busy) {
      Step();
      continue;
    }
    const double next_timer = timers_.empty() ? kNever : timers_.top().t;
    const double next = std::min(next_timer, next_load);
    if (next == kNever) {
      if (!waiting_.empty()) {
        return Internal("replay: requests wait with nothing running (GPU blocks leaked)");
      }
      break;
    }
    if (!loading && waiting_.empty() && next_timer - now_ > o_.idle_cap_s) {
      ShiftTimers(next_timer - now_ - o_.idle_cap_s);  // the whole system is idle
      now_ = std::max(now_, timers_.top().t);
      continue;
    }
    now_ = std::max(now_, next);
  }
  if (o_.progress) o_.progress(1.0);
  return Status::Ok();
}

LatencySummary Summarize(std::vector<double> v) {
  LatencySummary s;
  s.count = v.size();
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  double sum = 0;
  for (double x : v) sum += x;
  s.mean = sum / static_cast<double>(v.size());
  auto pct = [&](double q) {
    const double pos = q * static_cast<double>(v.size() - 1);
    const size_t lo = static_cast<size_t>(std::floor(pos));
    const size_t hi = std::min(v.size() - 1, lo + 1);
    return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
  };
  s.p50 = pct(0.5);
  s.p90 = pct(0.9);
  s.p99 = pct(0.99);
  return s;
}

ReplayResult Replay::Finish(double wall_s) {
  ReplayResult& r = res_;
  auto rate = [&](uint64_t n) {
    return r.input_tokens ? static_cast<double>(n) / static_cast<double>(r.input_tokens) : 0.0;
  };
  r.gpu_hit_rate = rate(r.gpu_hit_tokens);
  r.host_hit_rate = rate(r.host_hit_tokens);
  r.miss_rate = rate(r.miss_tokens);
  r.theoretical_hit_rate = rate(r.theoretical_hit_tokens);
  r.window_s = r.requests > 0 && last_end_ > first_ready_ ? last_end_ - first_ready_ : 0;
  if (r.window_s > 0) {
    const double gpus = static_cast<double>(cost_.tp);
    r.output_tokens_per_s_per_gpu = static_cast<double>(r.output_tokens) / r.window_s / gpus;
    r.total_tokens_per_s_per_gpu =
        static_cast<double>(r.input_tokens + r.output_tokens) / r.window_s / gpus;
  }
  r.ttft_s = Summarize(std::move(ttft_));
  r.e2e_s = Summarize(std::move(e2e_));
  r.simulated_s = now_;
  r.idle_skipped_s = idle_skipped_s_;
  r.gpu_evictions = gpu_->evictions();
  if (host_ != nullptr) {
    r.pool_lookups = host_->lookups();
    r.pool_hit_blocks = host_->hit_blocks();
    r.pool_loaded_blocks = host_->loaded_blocks();
    r.pool_stored_blocks = host_->stored_blocks();
    r.pool_refused_blocks = host_->refused_blocks();
    r.pool_evictions = host_->evictions();
  }
  r.wall_s = wall_s;
  if (wall_s > 0) {
    r.simulated_requests_per_wall_s =
        static_cast<double>(r.requests + r.warmup_requests) / wall_s;
    r.pool_lookups_per_wall_s = static_cast<double>(r.pool_lookups) / wall_s;
    r.pool_loads_per_wall_s = static_cast<double>(host_ ? host_->loads() : 0) / wall_s;
  }
  return r;
}

}  // namespace

StatusOr<ReplayResult> RunReplay(const Corpus& corpus, const CostModel& cost,
                                 const ReplayOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  Replay replay(corpus, cost, options);
  RETURN_IF_ERROR(replay.Init());
  RETURN_IF_ERROR(replay.Run());
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return replay.Finish(wall);
}

}  // namespace deltakv::kvsim
