// The synthetic agentic trace generator of kvsim/synthetic.h.
#include "kvsim/synthetic.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "replay_keys.h"

namespace deltakv::kvsim {
namespace {

class Rng {
 public:
  explicit Rng(uint64_t seed) : r_(seed) {}
  double Uniform() { return r_.NextDouble(); }
  double Normal() {  // Box-Muller
    const double u1 = std::max(Uniform(), 1e-300), u2 = Uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }
  // Lognormal with the given median and the value at the 90th percentile.
  double LogNormal(double median, double p90) {
    const double sigma = std::log(p90 / median) / 1.2815515655446004;
    return median * std::exp(sigma * Normal());
  }
  bool Chance(double p) { return Uniform() < p; }

 private:
  SplitMix r_;
};

constexpr uint32_t kBlock = 64;

struct Builder {
  Rng& rng;
  double scale;
  uint64_t max_in;
  uint64_t next_id = 1;
  std::vector<uint64_t> context;  // block ids of the conversation's context
  uint64_t tokens = 0;            // tokens of context (the ids cover floor(tokens / 64))

  uint64_t Scaled(double v) const {
    return std::max<uint64_t>(1, static_cast<uint64_t>(std::llround(v * scale)));
  }
  // Grows the context to `tokens` tokens: the whole blocks kept, new ids after them.
  void GrowTo(uint64_t t) {
    tokens = std::min(t, max_in);
    const size_t blocks = tokens / kBlock;
    if (context.size() > blocks) context.resize(blocks);
    while (context.size() < blocks) context.push_back(next_id++);
  }
  TraceRequest Request(double t, uint64_t out, double api) const {
    TraceRequest r;
    r.t_s = t;
    r.input_tokens = tokens;
    r.output_tokens = out;
    r.hash_ids = context;
    r.api_time_s = api;
    return r;
  }
};

double ApiTime(uint64_t in, uint64_t out, double scale) {
  // A server time that grows with the output (~50 tokens/s) and the prompt, as recorded
  // api_time does (median ~6 s).
  return std::round((1.5 + static_cast<double>(out) / scale / 50.0 +
                     static_cast<double>(in) / scale / 200000.0) * 100) / 100;
}

// One conversation of `turns` turns starting at `t0`, with a prefix of `prefix` tokens.
std::vector<TraceRequest> MakeConversation(Builder& b, uint32_t turns, double t0, uint64_t first_in,
                                       uint64_t prefix) {
  std::vector<TraceRequest> out;
  b.context.clear();
  b.tokens = 0;
  b.GrowTo(std::max(first_in, prefix));
  double t = t0;
  for (uint32_t k = 0; k < turns; ++k) {
    if (k > 0) {
      const TraceRequest& prev = out.back();
      uint64_t next = prev.input_tokens + prev.output_tokens +
                      b.Scaled(b.rng.LogNormal(350, 3500));
      if (b.rng.Chance(0.004)) {
        // Compaction: the context shrinks to the prefix plus a summary.
        b.context.resize(std::min<size_t>(b.context.size(), prefix / kBlock));
        b.tokens = b.context.size() * kBlock;
        next = prefix + b.Scaled(b.rng.LogNormal(12000, 25000));
      } else if (b.rng.Chance(0.07)) {
        // A partial reset: the end of the previous context is not kept.
        const uint64_t lose = b.rng.Chance(0.67)
                                  ? 1 + static_cast<uint64_t>(b.rng.Uniform() * 2)
                                  : static_cast<uint64_t>(b.rng.LogNormal(40, 2000) * b.scale) + 1;
        const size_t keep = b.context.size() > lose ? b.context.size() - lose : 0;
        b.context.resize(std::max<size_t>(keep, std::min<size_t>(b.context.size(), prefix / kBlock)));
        b.tokens = b.context.size() * kBlock;
      }
      // Keep the whole blocks of what the previous turn's prompt had.
      const size_t kept_blocks = std::min(b.context.size(), prev.hash_ids.size());
      b.context.resize(kept_blocks);
      b.tokens = std::max<uint64_t>(b.tokens, kept_blocks * kBlock);
      b.GrowTo(next);
      const double think = std::min(3600.0, std::round(b.rng.LogNormal(10, 160)));
      t = prev.t_s + prev.api_time_s + think;
    }
    const uint64_t o = std::min<uint64_t>(b.Scaled(std::min(16000.0, b.rng.LogNormal(216, 899))),
                                          b.Scaled(16000));
    const double api = ApiTime(b.tokens, o, b.scale);
    TraceRequest r = b.Request(t, o, api);
    if (k > 0) r.think_time_s = std::max(0.0, t - (out.back().t_s + out.back().api_time_s));
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace

StatusOr<Corpus> GenerateSyntheticCorpus(const SyntheticOptions& o) {
  if (o.traces == 0) return InvalidArgument("synthetic: at least one trace");
  if (!(o.scale > 0 && o.scale <= 1)) return InvalidArgument("synthetic: scale must be in (0, 1]");
  if (!(o.subagent_fraction >= 0 && o.subagent_fraction <= 1)) {
    return InvalidArgument("synthetic: subagent_fraction must be in [0, 1]");
  }
  if (o.max_turns < 3) return InvalidArgument("synthetic: max_turns must be at least 3");
  Corpus c;
  for (uint32_t i = 0; i < o.traces; ++i) {
    Rng rng(MixSalt(o.seed, i, 0x73796e, 7));
    Builder b{rng, o.scale, static_cast<uint64_t>(static_cast<double>(o.max_input_tokens) * o.scale)};
    Trace t;
    char id[32];
    std::snprintf(id, sizeof id, "synthetic_%04u", i);
    t.id = id;
    t.file = t.id + ".json";
    t.block_size = kBlock;
    t.tool_tokens = b.Scaled(rng.LogNormal(12262, 16000));
    t.system_tokens = b.Scaled(rng.LogNormal(2772, 3500));
    const uint64_t prefix = t.tool_tokens + t.system_tokens;
    const uint32_t turns = static_cast<uint32_t>(
        std::clamp(std::llround(rng.LogNormal(45, 155)), 3LL, static_cast<long long>(o.max_turns)));
    const bool resumed = rng.Chance(0.3);
    const uint64_t first = resumed ? b.Scaled(rng.LogNormal(110000, 260000))
                                   : prefix + b.Scaled(rng.LogNormal(6000, 14000));
    Conversation root;
    root.id = t.id;
    root.turns = MakeConversation(b, turns, 0, first, prefix);
    t.conversations.push_back(std::move(root));
    if (rng.Chance(o.subagent_fraction) && turns >= 4) {
      const uint32_t n = 1 + static_cast<uint32_t>(rng.Uniform() * 3);
      for (uint32_t s = 0; s < n; ++s) {
        const int32_t after = static_cast<int32_t>(rng.Uniform() * (turns - 2));
        const TraceRequest& spawn = t.conversations[0].turns[after];
        Conversation sa;
        sa.id = t.id + "::sa:agent_" + std::to_string(s + 1);
        sa.spawn_after = after;
        sa.join_before = after + 1;
        sa.spawn_t_s = spawn.t_s + spawn.api_time_s;
        const uint32_t inner = 3 + static_cast<uint32_t>(rng.Uniform() * 12);
        const uint64_t sp = b.Scaled(rng.LogNormal(10000, 14000));
        sa.turns = MakeConversation(b, inner, sa.spawn_t_s + 1, sp + b.Scaled(rng.LogNormal(3000, 8000)),
                                sp);
        t.conversations.push_back(std::move(sa));
      }
      // Subagents in spawn order; the parent's next turn starts after them (it waits anyway).
      std::stable_sort(t.conversations.begin() + 1, t.conversations.end(),
                       [](const auto& a, const auto& z) { return a.spawn_after < z.spawn_after; });
    }
    c.traces.push_back(std::move(t));
  }
  return c;
}

}  // namespace deltakv::kvsim
