// agentx_replay_bench: the speed of the AgentX replay (kvsim/replay.h) and of the real pool
// inside it, and how close the replay's hit rate comes to the theoretical maximum when the host
// tier is larger than the working set.
//
// Workload: a synthetic agentic corpus (kvsim/synthetic.h) on a Kimi-K3-like model on two
// GB300 trays, concurrency 16 and 48. Per concurrency it prints one JSON line with:
//   - simulated requests per wall second with the host tier, and the same replay without it
//     (the baseline: the cost the real pool adds to the replay);
//   - the pool's lookups and loads per wall second during the replay, and lookups per second
//     of the same pool driven directly with the same number of keys per call (the baseline);
//   - hit (GPU + host) over theoretical with a host tier larger than the working set
//     (target >= 0.95).
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "bench_util.h"
#include "kvsim/capacity.h"
#include "kvsim/cost_model.h"
#include "kvsim/replay.h"
#include "kvsim/synthetic.h"
#include "kvtier/slot_pool.h"

using namespace deltakv;
using namespace deltakv::kvsim;

namespace {

// Lookups per second of a pool holding `blocks` keys, `keys_per_call` keys per Lookup (all
// stored, so each call walks the whole prefix).
double DirectLookupsPerSecond(uint64_t blocks, size_t keys_per_call, uint32_t block_bytes) {
  kvtier::SlotPoolOptions po;
  po.block_bytes = block_bytes;
  po.capacity_slots = blocks;
  po.event_capacity = 0;
  po.if_exists = shm::IfExists::kReplace;
  auto pool = kvtier::SlotPool::Create("deltakv-bench-lookup-" + std::to_string(getpid()), po);
  if (!pool.ok()) return -1;
  std::vector<kvtier::PoolKey> keys(std::min<uint64_t>(blocks, keys_per_call));
  for (size_t i = 0; i < keys.size(); ++i) keys[i] = kvtier::PoolKey{i * 0x9E37 + 1, i + 7};
  for (size_t i = 0; i < keys.size(); i += 256) {
    auto n = std::min<size_t>(256, keys.size() - i);
    auto r = pool->PrepareStore(std::span(keys).subspan(i, n));
    if (!r.ok()) return -1;
    for (const auto& s : r->slots) {
      if (s.outcome == kvtier::StoreOutcome::kAllocated) (void)pool->CommitStore(s.ref);
    }
  }
  const auto start = std::chrono::steady_clock::now();
  uint64_t calls = 0;
  double secs = 0;
  do {
    for (int i = 0; i < 100; ++i) {
      if (pool->Lookup(keys) != keys.size()) return -1;
    }
    calls += 100;
    secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  } while (secs < 0.5);
  return static_cast<double>(calls) / secs;
}

}  // namespace

int main(int argc, char** argv) {
  uint32_t traces = 24;
  double duration = 1800;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--traces") traces = static_cast<uint32_t>(std::stoul(argv[i + 1]));
    else if (a == "--duration-s") duration = std::stod(argv[i + 1]);
    else {
      std::fprintf(stderr, "usage: agentx_replay_bench [--traces N] [--duration-s S]\n");
      return 1;
    }
  }
  bench::PrintEnvironment("agentx_replay_bench");
  SyntheticOptions so;
  so.traces = traces;
  so.seed = 7;
  auto corpus = GenerateSyntheticCorpus(so);
  CapacityInputs in;
  in.model = *ModelPreset("kimi-k3");
  in.node = *NodePreset("gb300x4");
  auto plan = PlanCapacity(in);
  CostModelOptions co;
  co.tp = plan->tp;
  co.fp8_compute = true;
  auto cost = DeriveCostModel(in.model, in.node, co);
  if (!corpus.ok() || !plan.ok() || !cost.ok()) {
    std::fprintf(stderr, "setup failed\n");
    return 3;
  }
  int rc = 0;
  for (uint32_t c : {16u, 48u}) {
    ReplayOptions o;
    o.concurrency = c;
    o.duration_s = duration;
    o.gpu_kv_tokens = plan->gpu_kv_tokens;
    auto base = RunReplay(*corpus, *cost, o);
    o.host_kv_tokens = plan->host_kv_tokens;
    auto host = RunReplay(*corpus, *cost, o);
    // A host tier larger than everything the corpus can produce.
    o.host_kv_tokens = 0;
    for (const Trace& t : corpus->traces) {
      for (const Conversation& cv : t.conversations) {
        for (const TraceRequest& r : cv.turns) o.host_kv_tokens += r.input_tokens;
      }
    }
    o.host_kv_tokens = std::min<uint64_t>(o.host_kv_tokens * 2, 64ull << 20);
    auto big = RunReplay(*corpus, *cost, o);
    if (!base.ok() || !host.ok() || !big.ok()) {
      std::fprintf(stderr, "replay failed\n");
      return 3;
    }
    const double per_call =
        host->pool_lookups ? static_cast<double>(host->pool_hit_blocks) / host->pool_lookups : 0;
    const double direct = DirectLookupsPerSecond(
        std::max<uint64_t>(1024, static_cast<uint64_t>(per_call) + 1),
        std::max<size_t>(1, static_cast<size_t>(per_call)), o.sim_block_bytes);
    const double hit = big->gpu_hit_rate + big->host_hit_rate;
    const double ratio = big->theoretical_hit_rate > 0 ? hit / big->theoretical_hit_rate : 0;
    nlohmann::json j = {
        {"bench", "agentx_replay_bench"},
        {"concurrency", c},
        {"traces", traces},
        {"simulated_s", host->simulated_s},
        {"requests", host->requests + host->warmup_requests},
        {"simulated_requests_per_wall_s", host->simulated_requests_per_wall_s},
        {"baseline_gpu_only_requests_per_wall_s", base->simulated_requests_per_wall_s},
        {"host_tier_replay_speed_ratio",
         host->simulated_requests_per_wall_s / base->simulated_requests_per_wall_s},
        {"pool_lookups_per_wall_s", host->pool_lookups_per_wall_s},
        {"pool_loads_per_wall_s", host->pool_loads_per_wall_s},
        {"pool_hit_blocks_per_lookup", per_call},
        {"baseline_direct_lookups_per_s", direct},
        {"host_hit_rate", host->host_hit_rate},
        {"gpu_only_hit_rate", base->gpu_hit_rate},
        {"big_host_hit_rate", hit},
        {"big_host_theoretical_hit_rate", big->theoretical_hit_rate},
        {"hit_over_theoretical", ratio},
        {"target_hit_over_theoretical", 0.95},
        {"meets_target", ratio >= 0.95},
        {"wrong_bytes", host->wrong_bytes + big->wrong_bytes},
    };
    std::printf("%s\n", j.dump().c_str());
    std::fflush(stdout);
    if (host->wrong_bytes + big->wrong_bytes != 0 || direct <= 0) rc = 2;
  }
  return rc;
}
