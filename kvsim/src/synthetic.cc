// The synthetic agentic trace generator of kvsim/synthetic.h.
#include "kvsim/synthetic.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

namespace deltakv::kvsim {
namespace {

// splitmix64 (Steele, Lea, Flood 2014) and distributions built on it, so that the output does
// not depend on the standard library's <random> distributions.
class Rng {
 public:
  explicit Rng(uint64_t seed) : s_(seed) {}
  uint64_t Next() {
    uint64_t z = (s_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }  // [0, 1)
  uint32_t Below(uint32_t n) { return static_cast<uint32_t>(Uniform() * n); }
  double Normal() {                                     // Box-Muller, one value per call
    const double u1 = 1.0 - Uniform(), u2 = Uniform();  // u1 in (0, 1]
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }
  // Lognormal with the given median and 90th percentile.
  double LogNormal(double median, double p90) {
    const double sigma = std::log(p90 / median) / 1.2815515655446004;
    return median * std::exp(sigma * Normal());
  }
  bool Chance(double p) { return Uniform() < p; }

 private:
  uint64_t s_;
};

uint64_t SeedFor(uint64_t seed, uint64_t trace) {
  Rng r(seed ^ (trace * 0xD1B54A32D192ED03ull));
  r.Next();
  return r.Next();
}

constexpr uint32_t kBlock = 64;

double Round2(double v) { return std::round(v * 100) / 100; }

// A conversation's context as whole-block hash ids (floor(tokens / 64) of them).
struct Context {
  uint64_t* next_id;
  uint64_t max_tokens;
  std::vector<uint64_t> ids;
  uint64_t tokens = 0;

  void Truncate(size_t blocks) {
    if (ids.size() > blocks) ids.resize(blocks);
    tokens = std::min<uint64_t>(tokens, ids.size() * kBlock);
  }
  // Grows to `t` tokens (capped): the whole blocks kept, fresh ids after them.
  void GrowTo(uint64_t t) {
    tokens = std::min(t, max_tokens);
    const size_t blocks = tokens / kBlock;
    if (ids.size() > blocks) ids.resize(blocks);
    while (ids.size() < blocks) ids.push_back((*next_id)++);
  }
};

struct Gen {
  Rng& rng;
  double scale;
  uint64_t max_in;
  uint64_t next_id = 1;

  uint64_t Scaled(double v) const {
    return std::max<uint64_t>(1, static_cast<uint64_t>(std::llround(v * scale)));
  }
  // Recorded server time: grows with the output (~50 tokens/s) and the prompt (median ~6 s).
  double ApiTime(uint64_t in, uint64_t out) const {
    return Round2(1.0 + static_cast<double>(out) / scale / 50.0 +
                  static_cast<double>(in) / scale / 200000.0);
  }
  // New tokens a turn adds after the previous output: a tool result or user message, with a
  // heavy tail (file reads, pastes).
  uint64_t NewTokens() {
    double v = rng.LogNormal(250, 2200);
    if (rng.Chance(0.035)) v += rng.LogNormal(15000, 60000);
    return Scaled(std::min(v, 400000.0));
  }

  // One conversation of `turns` turns starting at `t0` with a first prompt of `first_in`
  // tokens, the first `prefix` of which are its tool + system prefix.
  std::vector<TraceRequest> Conversation(uint32_t turns, double t0, uint64_t first_in,
                                         uint64_t prefix, uint64_t compact_at) {
    std::vector<TraceRequest> out;
    Context cx{&next_id, max_in, {}, 0};
    cx.GrowTo(std::max(first_in, prefix));
    const size_t prefix_blocks = prefix / kBlock;
    double t = t0;
    for (uint32_t k = 0; k < turns; ++k) {
      double think = -1;
      if (k > 0) {
        const TraceRequest& prev = out.back();
        uint64_t next = prev.input_tokens + prev.output_tokens + NewTokens();
        if (next > compact_at || rng.Chance(0.001)) {
          // Compaction (automatic near the context limit, or asked for): the context shrinks
          // to the prefix plus a summary.
          cx.Truncate(prefix_blocks);
          next = prefix + Scaled(rng.LogNormal(8000, 20000));
        } else if (rng.Chance(0.065)) {
          // The end of the previous context is not kept: mostly 1-2 blocks, sometimes many.
          const size_t lose = rng.Chance(0.67)
                                  ? 1 + rng.Below(2)
                                  : 1 + static_cast<size_t>(rng.LogNormal(40, 2000) * scale);
          const size_t n = cx.ids.size();
          cx.Truncate(std::max(n > lose ? n - lose : 0, std::min(n, prefix_blocks)));
        }
        cx.GrowTo(next);
        think = std::min(3600.0, std::round(rng.LogNormal(10, 160)));
        t = prev.t_s + prev.api_time_s + think;
      }
      TraceRequest r;
      r.t_s = t;
      r.input_tokens = cx.tokens;
      r.output_tokens = Scaled(std::min(16000.0, rng.LogNormal(216, 899)));
      r.hash_ids = cx.ids;
      r.api_time_s = ApiTime(r.input_tokens, r.output_tokens);
      r.think_time_s = think;
      out.push_back(std::move(r));
    }
    return out;
  }
};

// Delays root turns from `k` on by `delta` seconds (the parent waited for a subagent).
void DelayFrom(std::vector<TraceRequest>& turns, size_t k, double delta) {
  for (size_t i = k; i < turns.size(); ++i) turns[i].t_s = Round2(turns[i].t_s + delta);
  if (k > 0 && k < turns.size()) {
    const TraceRequest& p = turns[k - 1];
    turns[k].think_time_s = std::max(0.0, Round2(turns[k].t_s - (p.t_s + p.api_time_s)));
  }
}

void AddSubagents(Gen& g, Trace& t) {
  const uint32_t n = 1 + g.rng.Below(3);
  // Room for the subagents first: `root` lives in t.conversations, which must not move.
  t.conversations.reserve(t.conversations.size() + n);
  std::vector<TraceRequest>& root = t.conversations[0].turns;
  const uint32_t turns = static_cast<uint32_t>(root.size());
  std::vector<int32_t> after;
  for (uint32_t s = 0; s < n; ++s) after.push_back(static_cast<int32_t>(g.rng.Below(turns - 1)));
  std::sort(after.begin(), after.end());
  for (uint32_t s = 0; s < n; ++s) {
    const TraceRequest& spawn = root[after[s]];
    Conversation sa;
    sa.id = t.id + "::sa:agent_" + std::to_string(s + 1);
    sa.spawn_after = after[s];
    sa.spawn_t_s = Round2(spawn.t_s + spawn.api_time_s);
    const uint32_t inner = 4 + g.rng.Below(17);
    const uint64_t prefix = g.Scaled(g.rng.LogNormal(9000, 13000));
    sa.turns = g.Conversation(inner, sa.spawn_t_s + 1,
                              prefix + g.Scaled(g.rng.LogNormal(14000, 32000)), prefix, g.max_in);
    const TraceRequest& last = sa.turns.back();
    const double end = last.t_s + last.api_time_s;
    // Most run in the foreground: the parent's next turn comes after the subagent's end.
    if (g.rng.Chance(0.8)) {
      const size_t k = static_cast<size_t>(after[s]) + 1;
      const double delta = end + 1 + std::round(g.rng.LogNormal(2, 10)) - root[k].t_s;
      if (delta > 0) DelayFrom(root, k, delta);
    }
    t.conversations.push_back(std::move(sa));
  }
  // Joins as ParseWekaTrace computes them: the first later root turn at or after the end.
  for (size_t c = 1; c < t.conversations.size(); ++c) {
    Conversation& sa = t.conversations[c];
    const TraceRequest& last = sa.turns.back();
    const double end = last.t_s + last.api_time_s;
    sa.join_before = -1;
    for (size_t k = static_cast<size_t>(sa.spawn_after) + 1; k < root.size(); ++k) {
      if (root[k].t_s + 1e-6 >= end) {
        sa.join_before = static_cast<int32_t>(k);
        break;
      }
    }
  }
}

}  // namespace

StatusOr<Corpus> GenerateSyntheticCorpus(const SyntheticOptions& o) {
  if (o.traces == 0) return InvalidArgument("synthetic: at least one trace");
  if (!(o.scale > 0 && o.scale <= 1)) return InvalidArgument("synthetic: scale must be in (0, 1]");
  if (!(o.subagent_fraction >= 0 && o.subagent_fraction <= 1)) {
    return InvalidArgument("synthetic: subagent_fraction must be in [0, 1]");
  }
  if (o.max_turns < 3) return InvalidArgument("synthetic: max_turns must be at least 3");
  if (o.max_input_tokens < 4096) {
    return InvalidArgument("synthetic: max_input_tokens must be at least 4096");
  }
  Corpus c;
  for (uint32_t i = 0; i < o.traces; ++i) {
    Rng rng(SeedFor(o.seed, i));
    Gen g{rng, o.scale,
          std::max<uint64_t>(
              kBlock, static_cast<uint64_t>(static_cast<double>(o.max_input_tokens) * o.scale))};
    Trace t;
    char id[32];
    std::snprintf(id, sizeof id, "trace_%04u", i);
    t.id = id;
    t.file = t.id + ".json";
    t.block_size = kBlock;
    t.tool_tokens = g.Scaled(rng.LogNormal(12262, 16000));
    t.system_tokens = g.Scaled(rng.LogNormal(2772, 3500));
    const uint64_t prefix = t.tool_tokens + t.system_tokens;
    const uint32_t turns = static_cast<uint32_t>(
        std::clamp(std::llround(rng.LogNormal(45, 155)), 3LL, static_cast<long long>(o.max_turns)));
    // A fresh session starts at the prefix plus a first message; a resumed one with the
    // history of an earlier one.
    const uint64_t first = rng.Chance(0.38) ? prefix + g.Scaled(rng.LogNormal(95000, 240000))
                                            : prefix + g.Scaled(rng.LogNormal(5000, 12000));
    Conversation root;
    root.id = t.id;
    // Most sessions run a model with a 200k-token window and compact when
    // over it; the others have
    // a 1M one.
    const uint64_t window = rng.Chance(0.75) ? g.Scaled(220000) : g.max_in;
    root.turns = g.Conversation(turns, 0, first, prefix, std::max(window, first));
    t.conversations.push_back(std::move(root));
    if (rng.Chance(o.subagent_fraction)) AddSubagents(g, t);
    c.traces.push_back(std::move(t));
  }
  return c;
}

}  // namespace deltakv::kvsim
