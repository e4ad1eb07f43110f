// A synthetic agentic trace generator calibrated to published statistics of Claude-Code traces
// (docs/TRACES.md, "Synthetic corpus", gives the targets and what the generator measures):
// turns per trace lognormal (median 45, mean ~70), a tool + system prefix of ~15k tokens, a
// first prompt of ~20k tokens or, for resumed sessions, ~110k; ~700 new tokens per turn with a
// heavy tail; output median ~216 tokens; think time median ~10 s with a long tail; api_time
// from the output and input lengths (median ~6 s); ~7 % of turns drop the end of the previous
// context and ~0.4 % compact it; and a fraction of traces with subagents (their own prefix,
// ~45k-token prompts) that the parent mostly waits for. Block size 64, hash ids floor(in / 64),
// ids unique per trace. Theoretical hit ~96 %.
//
// Deterministic: the same options give the same corpus (own PRNG and distributions, no
// <random>; only std::log/exp/cos/sqrt of the platform's libm are used, and every value is
// rounded to whole tokens or 10 ms, so the written files match across IEEE-754 platforms).
// Thread-safety: stateless.
#pragma once

#include <cstdint>

#include "kvsim/trace.h"

namespace deltakv::kvsim {

struct SyntheticOptions {
  uint32_t traces = 32;  // trace_0000 .. trace_<traces-1>
  uint64_t seed = 1;
  double scale = 1.0;              // multiplies every token count, in (0, 1]: small quick corpora
  double subagent_fraction = 0.1;  // chance that a trace spawns 1-3 subagents (published: ~2 %)
  uint32_t max_turns = 500;        // root turns per trace, at least 3
  uint64_t max_input_tokens = 990000;  // cap on a prompt, before scaling (at least 4096)
};

// The corpus on success (traces in id order, each with file = "<id>.json"); InvalidArgument
// for 0 traces, a scale outside (0, 1], a fraction outside [0, 1], max_turns < 3 or
// max_input_tokens < 4096.
StatusOr<Corpus> GenerateSyntheticCorpus(const SyntheticOptions& options);

}  // namespace deltakv::kvsim
