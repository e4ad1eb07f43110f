// The setup shared by `deltakv bench agentx` and `deltakv plan`: the trace corpus, the model,
// the node, the capacity plan and the replay's cost model, from command-line flags.
#pragma once

#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "cli/cli_common.h"
#include "kvsim/capacity.h"
#include "kvsim/cost_model.h"
#include "kvsim/replay.h"
#include "kvsim/report.h"
#include "kvsim/trace.h"

namespace deltakv::cli {

struct KvSetupFlags {
  std::vector<std::string> traces;  // files or directories
  uint32_t synthetic = 0;           // or: this many synthetic traces
  uint64_t synthetic_seed = 1;
  double synthetic_scale = 1.0;
  std::string model = "kimi-k3";
  std::string model_config;  // a Hugging Face config.json instead of a preset
  std::optional<double> weights_gib;  // override the checkpoint size (above 0)
  std::string node = "gb300x4";
  uint32_t tp = 0;  // GPUs per replica (0: the fewest whole nodes that hold the weights)
  std::string kv_dtype;  // default: the model's
  bool dcp = false;      // MLA latents sharded across ranks (decode context parallel)
  double gpu_memory_utilization = 0.9;
  double gpu_reserve_gib = 4;
  std::optional<double> host_ram_gib;  // default: the node's (0 included: no host RAM)
  double container_limit_gib = 0;
  double host_reserve_gib = 64;
  bool cpu_copy = false;  // the engine keeps a CPU copy of its checkpoint
  bool detect_host = false;  // host RAM (hwloc), cgroup limit and /dev/shm of this machine
  std::optional<uint64_t> gpu_kv_tokens;  // override the GPU KV capacity (at least 1)
  uint32_t sim_block_bytes = 256;
  uint64_t max_sim_mib = 4096;
  double prefill_mfu = 0.45;
  double hbm_efficiency = 0.7;
  double step_overhead_ms = 2;
};

struct KvSetup {
  kvsim::Corpus corpus;
  kvsim::ModelSpec model;
  kvsim::NodeSpec node;
  kvsim::KvDtype kv_dtype = kvsim::KvDtype::kBf16;
  kvsim::CapacityInputs inputs;
  kvsim::CapacityPlan plan;       // with the CPU copy as flagged
  kvsim::CapacityPlan plan_copy;  // with a CPU copy
  kvsim::CapacityPlan plan_free;  // without one
  kvsim::CostModel cost;
  uint64_t gpu_kv_tokens = 0;
  uint32_t sim_block_bytes = 0;
  uint64_t max_sim_bytes = 0;
  std::string title;
};

void AddKvSetupFlags(CLI::App* cmd, KvSetupFlags* f);
StatusOr<KvSetup> ResolveKvSetup(const KvSetupFlags& f);
// "0" is prepended; "auto" = the host KV budget without a CPU copy, "copy" = beside one; a
// number is GiB in [0, 1e9] (InvalidArgument for anything else, infinity and NaN included).
StatusOr<std::vector<double>> ResolveHostSizes(const std::vector<std::string>& sizes,
                                               const KvSetup& s);
// Tokens a host tier of `gib` GiB (real KV bytes, per replica) holds.
uint64_t HostTokensForGib(const KvSetup& s, double gib);
std::string DescribeKvSetup(const KvSetup& s);
void WriteRequestRecord(std::FILE* f, const kvsim::ReplayArm& arm, const KvSetup& s,
                        const kvsim::RequestRecord& r);
Status WriteTextFile(const std::string& path, const std::string& text);

// A one-line progress bar on stderr (only when enabled; redrawn at most every 1 %).
class ProgressBar {
 public:
  ProgressBar(std::string label, bool enabled) : label_(std::move(label)), enabled_(enabled) {}
  void Update(double fraction);
  void Done();

 private:
  std::string label_;
  bool enabled_;
  int last_ = -1;
};

}  // namespace deltakv::cli
