// The theoretical maximum prefix-cache hit rate of a trace corpus in recorded time: an infinite
// cache per trace (hash scope), requests consumed in arrival order, and causal availability: a
// block counts for a request only if a request that finished before it arrived (t + api_time
// <= t') had it in its prompt. A request's hit is the longest prefix of its hash ids that is
// available, in whole blocks (capped at its input). This is the definition AgentX reports
// (docs/TRACES.md, "Theoretical hit rate", gives the details and the independent check).
//
// Thread-safety: stateless.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kvsim/trace.h"

namespace deltakv::kvsim {

struct HitCount {
  uint64_t requests = 0;
  uint64_t input_tokens = 0;
  uint64_t hit_tokens = 0;
  uint64_t total_blocks = 0;  // hash ids
  uint64_t hit_blocks = 0;
  double token_rate() const { return input_tokens ? double(hit_tokens) / input_tokens : 0; }
  double block_rate() const { return total_blocks ? double(hit_blocks) / total_blocks : 0; }
};

struct TheoreticalHit {
  HitCount total;
  std::vector<HitCount> per_trace;  // in corpus order
};

TheoreticalHit ComputeTheoreticalHit(const Corpus& corpus);

}  // namespace deltakv::kvsim
