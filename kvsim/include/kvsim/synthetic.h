// A synthetic agentic trace generator calibrated to published statistics of Claude-Code traces
// (docs/TRACES.md, "Synthetic corpus", gives the targets and what the generator measures):
// turns per trace lognormal (median 45), a first prompt of ~20k tokens or, for resumed
// sessions, ~110k; ~700 new tokens per turn (heavy tail); output median ~216 tokens; think
// time median ~10 s with a long tail; a few partial context resets and compactions; and some
// traces with subagents that have their own prefix. Block size 64, hash ids floor(in / 64).
//
// Deterministic: the same options give the same corpus on every platform of one build (own
// PRNG and distributions; no <random>).
// Thread-safety: stateless.
#pragma once

#include <cstdint>

#include "kvsim/trace.h"

namespace deltakv::kvsim {

struct SyntheticOptions {
  uint32_t traces = 32;
  uint64_t seed = 1;
  double scale = 1.0;                // multiplies every token count (0.01 .. 1)
  double subagent_fraction = 0.1;    // traces with subagents
  uint32_t max_turns = 500;
  uint64_t max_input_tokens = 990000;  // before scaling
};

// InvalidArgument for 0 traces, a scale outside (0, 1] or a fraction outside [0, 1].
StatusOr<Corpus> GenerateSyntheticCorpus(const SyntheticOptions& options);

}  // namespace deltakv::kvsim
