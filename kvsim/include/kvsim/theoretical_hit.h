// The theoretical maximum prefix-cache hit rate of a trace corpus in recorded time: an infinite
// cache per trace (hash scope), requests consumed in order of their start time, and a hit is
// the longest prefix of a request's hash ids that is available, in whole blocks (capped at its
// input). Availability:
//   kCausal  (default) a block counts only once a request that had it finished before this one
//            arrived (t + api_time <= t'): what AgentX reports;
//   kArrival a block counts once a request that had it arrived before this one (ties in file
//            order): aiperf 0.13's compute_shared_prefix_cache_metrics, the independent check.
// docs/TRACES.md, "Theoretical hit rate", gives the details.
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

enum class Availability : uint8_t { kCausal, kArrival };

TheoreticalHit ComputeTheoreticalHit(const Corpus& corpus,
                                     Availability availability = Availability::kCausal);

}  // namespace deltakv::kvsim
