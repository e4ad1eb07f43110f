// The theoretical maximum prefix-cache hit rate of a trace corpus in recorded time, by
// AgentX's definition (aiperf's compute_shared_prefix_cache_metrics): one infinite cache per
// trace (hash scope) shared by its root and subagents, requests consumed in order of their
// start time (ties in file order), and a request's hit the leading run of its hash ids that
// are available when it starts. Ids are matched by value. Availability:
//   kCausal  (default) a block counts once some request that had it has finished
//            (t + api_time <= t'; an absent api_time counts as 0): aiperf's current definition;
//   kArrival a block counts once some request that had it has arrived: aiperf 0.13 (PyPI).
// Hits are counted in blocks (over all hash ids) and in tokens (blocks x block_size, capped
// at the request's input); per trace and over the corpus. docs/TRACES.md, "Theoretical hit
// rate", gives the details and test vectors.
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

// Never fails; an empty corpus gives all-zero counts (and rates of 0).
TheoreticalHit ComputeTheoreticalHit(const Corpus& corpus,
                                     Availability availability = Availability::kCausal);

}  // namespace deltakv::kvsim
