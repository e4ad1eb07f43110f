// Flags and setup shared by `deltakv bench agentx` and `deltakv plan`.
#include "cli/kv_setup.h"

#include <hwloc.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "base/file_util.h"
#include "kvsim/synthetic.h"
#include "kvtier/host_memory.h"

namespace deltakv::cli {
namespace {

constexpr double kGiB = 1024.0 * 1024 * 1024;
// The largest host tier size `bench agentx --host-kv-gib` takes (a finite number, as every
// other GiB option's range ends at 1e9).
constexpr double kMaxHostKvGib = 1e9;
// The most --gpu-kv-tokens takes: a trillion tokens, far beyond any replica.
constexpr uint64_t kMaxGpuKvTokens = 1'000'000'000'000;

std::string Join(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

// This machine's host memory as hwloc sees it (the root object's total), its cgroup memory
// limit, and the size of /dev/shm.
Status DetectHost(kvsim::CapacityInputs* in) {
  hwloc_topology_t topo;
  if (hwloc_topology_init(&topo) != 0 || hwloc_topology_load(topo) != 0) {
    return IoError("hwloc cannot read this machine's topology");
  }
  const hwloc_obj_t root = hwloc_get_root_obj(topo);
  uint64_t ram = root != nullptr ? root->total_memory : 0;
  hwloc_topology_destroy(topo);
  // Some virtual machines hand memory to the guest outside the NUMA nodes hwloc sums; the
  // kernel's MemTotal counts it.
  if (std::FILE* f = std::fopen("/proc/meminfo", "r")) {  // a proc file: no size to read by
    char line[256];
    while (std::fgets(line, sizeof line, f) != nullptr) {
      unsigned long long kib = 0;
      if (std::sscanf(line, "MemTotal: %llu kB", &kib) == 1) {
        ram = std::max<uint64_t>(ram, kib * 1024);
        break;
      }
    }
    std::fclose(f);
  }
  if (ram == 0) return IoError("hwloc reports no host memory");
  in->host_ram_bytes = ram;
  auto mem = kvtier::ProbeHostMemory();
  if (mem.ok() && mem->cgroup_limit != 0) in->container_limit_bytes = mem->cgroup_limit;
  struct statvfs st;
  if (statvfs("/dev/shm", &st) == 0) {
    in->shm_bytes = static_cast<uint64_t>(st.f_blocks) * st.f_frsize;
  }
  return Status::Ok();
}

}  // namespace

void AddKvSetupFlags(CLI::App* cmd, KvSetupFlags* f) {
  cmd->add_option("TRACES", f->traces,
                  "Trace files or directories (Weka/AgentX .json/.jsonl, Mooncake .jsonl)");
  cmd->add_option("--synthetic", f->synthetic,
                  "Replay this many generated agentic traces instead of files");
  cmd->add_option("--synthetic-seed", f->synthetic_seed)->capture_default_str();
  cmd->add_option("--synthetic-scale", f->synthetic_scale,
                  "Scale the generated token counts (0..1]")
      ->check(FiniteRange(0.0, 1.0, /*lo_open=*/true))
      ->capture_default_str();
  cmd->add_option("--model", f->model, "Model preset: " + Join(kvsim::ModelPresetNames()))
      ->capture_default_str();
  cmd->add_option("--model-config", f->model_config, "A Hugging Face config.json instead");
  cmd->add_option("--weights-gib", f->weights_gib, "Checkpoint size (default: the model's)")
      ->check(FiniteRange(0.0, 1e9, /*lo_open=*/true));
  cmd->add_option("--node", f->node, "Node preset: " + Join(kvsim::NodePresetNames()))
      ->capture_default_str();
  cmd->add_option("--tp", f->tp, "GPUs per replica (default: the fewest whole nodes that hold "
                                 "the weights; a multiple of a node's GPUs spans nodes)");
  cmd->add_option("--kv-dtype", f->kv_dtype, "KV dtype: bf16, fp8, fp8_ds_mla, fp32");
  cmd->add_flag("--dcp", f->dcp, "MLA latents sharded across ranks (decode context parallel)");
  cmd->add_option("--gpu-memory-utilization", f->gpu_memory_utilization)
      ->check(FiniteRange(0.0, 1.0, /*lo_open=*/true))
      ->capture_default_str();
  cmd->add_option("--gpu-reserve-gib", f->gpu_reserve_gib,
                  "Per GPU: activations, CUDA graphs, NCCL")
      ->check(FiniteRange(0.0, 1e9))
      ->capture_default_str();
  cmd->add_option("--host-ram-gib", f->host_ram_gib, "Host RAM per node (default: the node's)")
      ->check(FiniteRange(0.0, 1e9));
  cmd->add_option("--container-limit-gib", f->container_limit_gib,
                  "Memory limit of the pod per node")
      ->check(FiniteRange(0.0, 1e9));
  cmd->add_option("--host-reserve-gib", f->host_reserve_gib,
                  "Per node: OS, engine and sidecar processes")
      ->check(FiniteRange(0.0, 1e9))
      ->capture_default_str();
  cmd->add_flag("--detect-host", f->detect_host,
                "Use this machine's host RAM (hwloc, or the kernel's MemTotal when larger), "
                "cgroup memory limit and /dev/shm size");
  cmd->add_flag("--cpu-copy", f->cpu_copy,
                "The engine keeps a CPU copy of its checkpoint in host RAM");
  cmd->add_option("--gpu-kv-tokens", f->gpu_kv_tokens,
                  "GPU KV capacity per replica in tokens (default: from the formula)")
      ->check(CLI::Range(uint64_t{1}, kMaxGpuKvTokens));
  cmd->add_option("--sim-block-bytes", f->sim_block_bytes,
                  "Bytes per block copied in the replay's real pool (scaled down)")
      ->capture_default_str();
  cmd->add_option("--max-sim-mib", f->max_sim_mib, "Cap on the replay's pool + arena memory")
      ->check(CLI::Range(uint64_t{0}, kMaxMib))
      ->capture_default_str();
  cmd->add_option("--prefill-mfu", f->prefill_mfu)
      ->check(FiniteRange(0.0, 1.0, /*lo_open=*/true))
      ->capture_default_str();
  cmd->add_option("--hbm-efficiency", f->hbm_efficiency)
      ->check(FiniteRange(0.0, 1.0, /*lo_open=*/true))
      ->capture_default_str();
  cmd->add_option("--step-overhead-ms", f->step_overhead_ms)
      ->check(FiniteRange(0.0, 1e6))
      ->capture_default_str();
}

StatusOr<KvSetup> ResolveKvSetup(const KvSetupFlags& f) {
  KvSetup s;
  if (f.synthetic > 0 && !f.traces.empty()) {
    return InvalidArgument("give trace paths or --synthetic, not both");
  }
  if (f.synthetic > 0) {
    kvsim::SyntheticOptions so;
    so.traces = f.synthetic;
    so.seed = f.synthetic_seed;
    so.scale = f.synthetic_scale;
    ASSIGN_OR_RETURN(s.corpus, kvsim::GenerateSyntheticCorpus(so));
  } else if (!f.traces.empty()) {
    for (const std::string& p : f.traces) {
      ASSIGN_OR_RETURN(kvsim::Corpus c, kvsim::LoadCorpus(p));
      for (kvsim::Trace& t : c.traces) s.corpus.traces.push_back(std::move(t));
    }
  }
  if (!f.model_config.empty()) {
    ASSIGN_OR_RETURN(std::string text, ReadFileToString(f.model_config, 16 << 20));
    ASSIGN_OR_RETURN(s.model, kvsim::ParseHfConfig(text, f.model_config));
  } else {
    ASSIGN_OR_RETURN(s.model, kvsim::ModelPreset(f.model));
  }
  if (f.weights_gib) s.model.weight_bytes = static_cast<uint64_t>(*f.weights_gib * kGiB);
  ASSIGN_OR_RETURN(s.node, kvsim::NodePreset(f.node));
  s.kv_dtype = s.model.default_kv_dtype;
  if (!f.kv_dtype.empty()) {
    ASSIGN_OR_RETURN(s.kv_dtype, kvsim::ParseKvDtype(f.kv_dtype));
  }
  kvsim::CapacityInputs& in = s.inputs;
  in.model = s.model;
  in.node = s.node;
  in.tp = f.tp;
  in.kv_dtype = s.kv_dtype;
  in.mla_replicated = !f.dcp;
  in.gpu_memory_utilization = f.gpu_memory_utilization;
  in.gpu_reserve_bytes = static_cast<uint64_t>(f.gpu_reserve_gib * kGiB);
  if (f.host_ram_gib) in.host_ram_bytes = static_cast<uint64_t>(*f.host_ram_gib * kGiB);
  in.container_limit_bytes = static_cast<uint64_t>(f.container_limit_gib * kGiB);
  in.host_reserve_bytes = static_cast<uint64_t>(f.host_reserve_gib * kGiB);
  in.cpu_checkpoint_copy = f.cpu_copy;
  in.block_tokens = s.corpus.traces.empty() ? 64 : s.corpus.traces[0].block_size;
  in.gpu_kv_tokens = f.gpu_kv_tokens;
  if (f.detect_host) {
    if (f.host_ram_gib || f.container_limit_gib > 0) {
      return InvalidArgument("--detect-host and --host-ram-gib/--container-limit-gib exclude each other");
    }
    RETURN_IF_ERROR(DetectHost(&in));
  }
  ASSIGN_OR_RETURN(s.plan, kvsim::PlanCapacity(in));
  kvsim::CapacityInputs alt = in;
  alt.cpu_checkpoint_copy = true;
  ASSIGN_OR_RETURN(s.plan_copy, kvsim::PlanCapacity(alt));
  alt.cpu_checkpoint_copy = false;
  ASSIGN_OR_RETURN(s.plan_free, kvsim::PlanCapacity(alt));
  s.gpu_kv_tokens = s.plan.gpu_kv_tokens;  // --gpu-kv-tokens when given
  kvsim::CostModelOptions co;
  co.tp = s.plan.tp;
  co.kv_dtype = s.kv_dtype;
  co.mla_replicated = !f.dcp;
  co.fp8_compute = s.model.weight_bytes < s.model.total_params * 2;  // fp8 or fp4 weights
  co.prefill_mfu = f.prefill_mfu;
  co.hbm_efficiency = f.hbm_efficiency;
  co.step_overhead_s = f.step_overhead_ms / 1000;
  ASSIGN_OR_RETURN(s.cost, kvsim::DeriveCostModel(s.model, s.node, co));
  s.sim_block_bytes = f.sim_block_bytes;
  s.max_sim_bytes = f.max_sim_mib << 20;
  s.title = s.model.name + " " + std::string(kvsim::KvDtypeName(s.kv_dtype)) + " on " +
            std::to_string(s.plan.nodes_per_replica) + "x " + s.node.name + " (TP" +
            std::to_string(s.plan.tp) + ")";
  return s;
}

StatusOr<std::vector<double>> ResolveHostSizes(const std::vector<std::string>& sizes,
                                               const KvSetup& s) {
  std::vector<double> out{0};
  auto gib_of = [&](const kvsim::CapacityPlan& p) {
    return std::floor(static_cast<double>(p.host_kv_tokens) *
                      static_cast<double>(s.plan.kv_bytes_per_token_per_rank) * s.plan.tp / kGiB);
  };
  for (const std::string& x : sizes) {
    double v;
    if (x == "auto") {
      v = gib_of(s.plan_free);
    } else if (x == "copy") {
      v = gib_of(s.plan_copy);
    } else {
      char* end = nullptr;
      v = std::strtod(x.c_str(), &end);
      if (end == x.c_str() || *end != '\0' || !(v >= 0 && v <= kMaxHostKvGib)) {
        return InvalidArgument("host size '" + x + "': expected GiB (0 to 1e9), 'auto' or 'copy'");
      }
    }
    if (v > 0 && std::find(out.begin(), out.end(), v) == out.end()) out.push_back(v);
  }
  return out;
}

uint64_t HostTokensForGib(const KvSetup& s, double gib) {
  const double per_token = static_cast<double>(s.plan.kv_bytes_per_token_per_rank) * s.plan.tp;
  return static_cast<uint64_t>(gib * kGiB / per_token);
}

std::string DescribeKvSetup(const KvSetup& s) {
  char b[1024];
  std::snprintf(
      b, sizeof b,
      "%s: %llu B/token (%llu per rank), GPU KV %.2fM tokens per replica; host KV per replica "
      "%.0f GiB freed (%.0f GiB beside a CPU copy of the checkpoint); corpus %zu traces, %llu "
      "requests",
      s.title.c_str(), static_cast<unsigned long long>(s.plan.kv_bytes_per_token),
      static_cast<unsigned long long>(s.plan.kv_bytes_per_token_per_rank),
      static_cast<double>(s.gpu_kv_tokens) / 1e6,
      static_cast<double>(s.plan_free.host_kv_tokens) * s.plan.kv_bytes_per_token_per_rank *
          s.plan.tp / kGiB,
      static_cast<double>(s.plan_copy.host_kv_tokens) * s.plan.kv_bytes_per_token_per_rank *
          s.plan.tp / kGiB,
      s.corpus.traces.size(), static_cast<unsigned long long>(s.corpus.requests()));
  return b;
}

void WriteRequestRecord(std::FILE* f, const kvsim::ReplayArm& arm, const KvSetup& s,
                        const kvsim::RequestRecord& r) {
  nlohmann::json j = {{"arm", arm.label},
                      {"concurrency", arm.concurrency},
                      {"host_kv_gib", arm.host_kv_gib},
                      {"lane", r.lane},
                      {"trace", s.corpus.traces[r.trace].id},
                      {"conversation", s.corpus.traces[r.trace].conversations[r.conversation].id},
                      {"turn", r.turn},
                      {"play", r.play},
                      {"warmup", r.warmup},
                      {"overflow", r.overflow},
                      {"ready_s", r.ready_s},
                      {"ttft_s", r.first_token_s - r.ready_s},
                      {"end_s", r.end_s},
                      {"input_tokens", r.input_tokens},
                      {"output_tokens", r.output_tokens},
                      {"gpu_hit_tokens", r.gpu_hit_tokens},
                      {"host_hit_tokens", r.host_hit_tokens},
                      {"theoretical_hit_tokens", r.theoretical_hit_tokens}};
  std::fprintf(f, "%s\n", j.dump().c_str());
}

Status WriteTextFile(const std::string& path, const std::string& text) {
  return WriteFileAtomic(path, std::string_view(text));
}

void ProgressBar::Update(double fraction) {
  if (!enabled_) return;
  const int pct = static_cast<int>(fraction * 100);
  if (pct == last_) return;
  if (!isatty(STDERR_FILENO)) {  // a log: one line per quarter
    if (pct / 25 != last_ / 25 || last_ < 0) {
      std::fprintf(stderr, "%s: %d%%\n", label_.c_str(), pct);
    }
    last_ = pct;
    return;
  }
  last_ = pct;
  const int filled = pct / 4;
  std::fprintf(stderr, "\r%s [%s%s] %3d%%", label_.c_str(), std::string(filled, '#').c_str(),
               std::string(25 - filled, '.').c_str(), pct);
  std::fflush(stderr);
}

void ProgressBar::Done() {
  if (enabled_ && last_ >= 0 && isatty(STDERR_FILENO)) std::fprintf(stderr, "\n");
}

}  // namespace deltakv::cli
