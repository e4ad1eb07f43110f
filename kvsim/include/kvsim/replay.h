// Replay of agentic traces through the real host KV pool, against a model of the GPU side, in
// simulated time.
//
// The host tier is a real kvtier pool segment (SlotPool::Create) used through a real
// KvTierClient with the cpu copy engine: every host lookup, store and load of the replay is a
// pool call, and every block stored or loaded is copied for real, at `sim_block_bytes` per block
// (scaled down from the model's real block size so that a pool of many GiB fits in a test
// machine). Each block's bytes are a pattern derived from its key; every load is checked
// against it (ReplayResult::wrong_bytes). The GPU side is a model: a block-granular prefix cache
// of `gpu_kv_tokens` with LRU eviction (the blocks a finished request frees are put back tail
// first, so a prefix outlives its tail), whose evictions are stored into the host tier; and an
// engine that runs steps of continuous batching with chunked prefill, timed by a CostModel.
//
// Replay rules (AgentX; docs/REPLAY.md):
//   - concurrency N = N lanes, each playing one session tree (a root conversation and its
//     subagents) at a time; a lane takes the next trace (in corpus order, wrapping) when its
//     tree has drained.
//   - closed loop: turn k becomes ready when turn k-1 ended plus the recorded end-to-start gap
//     max(0, t_k - (t_{k-1} + api_time_{k-1})) (think_time when api_time is absent, else 0).
//     A subagent's first turn becomes ready the same gap after the root turn that spawns it;
//     the root turn that joins it (Conversation::join_before) also waits for it to finish (a
//     background subagent is not waited for, but its tree has not drained until it ends).
//   - a whole-system idle cap: when no request is queued, loading or running, every pending
//     timer moves earlier by the same amount so that the next one fires idle_cap_s from now.
//   - warmup: each lane's first tree starts at a turn drawn uniformly between warmup_min and
//     warmup_max of its root turns; the turn before it is sent at time 0 as the lane's warmup
//     request (with the whole prefix) and is excluded from every metric; subagents spawned
//     before it are skipped. Mooncake files have no trees: each record is a session, lanes take
//     records in file order, and each lane's first record is its warmup request.
//   - cache-bust: every play of a tree (Mooncake: every pass over a file) gets a fresh salt
//     mixed into its block keys, so recycled plays share no prefix; a root and its subagents
//     share one salt.
//   - the run ends `duration_s` after the last warmup request finished: no request becomes
//     ready after that, and those in flight finish.
//   - each step's prefill budget goes to the running requests in admission order (FCFS).
//   - a seed makes runs reproducible (the warmup draws; nothing else is random).
//
// Thread-safety: RunReplay may be called from several threads with distinct pool names.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "base/status.h"
#include "kvsim/cost_model.h"
#include "kvsim/trace.h"

namespace deltakv::kvsim {

// One finished (or overflowed) request, as the replay ran it.
struct RequestRecord {
  uint32_t lane = 0;
  uint32_t trace = 0;         // index in the corpus
  uint32_t conversation = 0;  // index in the trace's conversations
  uint32_t turn = 0;
  uint64_t play = 0;  // which play of a tree (recycled plays differ); Mooncake: the file pass
  bool warmup = false;
  bool overflow = false;  // needed more KV than the GPU cache: not run
  double ready_s = 0;        // became ready (simulated seconds)
  double first_token_s = 0;  // end of the step that finished its prefill
  double end_s = 0;
  uint64_t input_tokens = 0;
  uint64_t output_tokens = 0;
  uint64_t gpu_hit_tokens = 0;
  uint64_t host_hit_tokens = 0;
  uint64_t theoretical_hit_tokens = 0;
};

struct ReplayOptions {
  uint32_t concurrency = 16;
  double duration_s = 3600;  // simulated seconds of profiling after the warmup
  // Longest simulated idle gap kept when nothing is queued, loading or running (0: none kept).
  double idle_cap_s = 10;
  double warmup_min = 0.25;
  double warmup_max = 0.75;
  uint64_t seed = 42;
  uint64_t gpu_kv_tokens = 0;   // GPU KV capacity of the replica in tokens; required
  uint64_t host_kv_tokens = 0;  // host tier capacity in tokens; 0 = no host tier
  uint32_t sim_block_bytes = 256;  // bytes per block in the real pool and the GPU arena
  uint64_t max_sim_bytes = 4ull << 30;  // cap on pool + GPU arena memory of the replay
  uint32_t max_batched_tokens = 8192;   // tokens per engine step (prefill chunks + decodes)
  uint32_t max_running = 512;           // requests admitted at once
  std::string pool_name;  // shared-memory name of the pool; "" = "deltakv-replay-<pid>-<n>"
  // Called now and then with the fraction of the run done (simulated time after the warmup;
  // at most 0.99 until the requests in flight at the end have finished, then 1), from the
  // calling thread.
  std::function<void(double)> progress;
  // When set, called for every request as it finishes, from the calling thread.
  std::function<void(const RequestRecord&)> on_request;
};

struct LatencySummary {
  uint64_t count = 0;
  double mean = 0, p50 = 0, p90 = 0, p99 = 0;  // seconds
};

struct ReplayResult {
  // Profiled requests (warmup excluded).
  uint64_t requests = 0;
  uint64_t warmup_requests = 0;
  uint64_t overflow_requests = 0;  // needed more KV than the whole GPU cache: not run
  uint64_t input_tokens = 0;
  uint64_t output_tokens = 0;
  uint64_t gpu_hit_tokens = 0;   // prompt tokens found in the GPU prefix cache
  uint64_t host_hit_tokens = 0;  // prompt tokens reloaded from the host tier
  uint64_t miss_tokens = 0;      // prompt tokens recomputed (prefilled)
  // Prompt tokens an infinite cache would have held when the request became ready: whole
  // blocks of the longest prefix that an earlier finished request (of the same play) produced.
  uint64_t theoretical_hit_tokens = 0;
  double gpu_hit_rate = 0, host_hit_rate = 0, miss_rate = 0, theoretical_hit_rate = 0;
  double window_s = 0;  // first ready .. last end of the profiled requests (simulated)
  double output_tokens_per_s_per_gpu = 0;
  double total_tokens_per_s_per_gpu = 0;  // (input + output) / window / GPUs
  LatencySummary ttft_s;
  LatencySummary e2e_s;
  uint64_t steps = 0;
  double simulated_s = 0;
  double idle_skipped_s = 0;  // idle time the idle cap removed
  // GPU model.
  uint64_t gpu_capacity_blocks = 0;
  uint64_t gpu_evictions = 0;  // cached blocks evicted from the GPU cache
  // The real pool (all of the replay, warmup included).
  uint64_t host_capacity_blocks = 0;
  uint64_t pool_lookups = 0;       // Lookup calls
  uint64_t pool_hit_blocks = 0;    // blocks those lookups found
  uint64_t pool_loaded_blocks = 0;
  uint64_t pool_stored_blocks = 0;
  uint64_t pool_evictions = 0;
  uint64_t pool_refused_blocks = 0;
  uint64_t wrong_bytes = 0;        // loaded bytes that differ from what was stored
  uint64_t pool_bytes = 0;         // bytes of the pool's slots (what it maps)
  // Speed of the replay itself.
  double wall_s = 0;
  double simulated_requests_per_wall_s = 0;
  double pool_lookups_per_wall_s = 0;
  double pool_loads_per_wall_s = 0;  // load calls (PrepareLoad + Load + CompleteLoad)
};

// Replays `corpus`. InvalidArgument for an empty corpus, concurrency 0, gpu_kv_tokens 0, a
// block size that differs between traces, a warmup range outside [0, 1], duration_s not in
// (0, 1e9], idle_cap_s below 0 or NaN (infinity: no cap), or memory over
// max_sim_bytes (with the sizes); errors of the pool (creating the segment) as returned.
StatusOr<ReplayResult> RunReplay(const Corpus& corpus, const CostModel& cost,
                                 const ReplayOptions& options);

}  // namespace deltakv::kvsim
