// deltakv plan: the capacity plan of a model on a node (KV bytes per token, GPU and host KV
// capacity with and without a CPU checkpoint copy, the pool's real cost, the settings), and,
// with a trace corpus, the hit-rate and throughput curve against host-cache size from replays.
#include <cmath>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>

#include "base/file_util.h"
#include "cli/cli_common.h"
#include "cli/kv_setup.h"
#include "kvsim/report.h"

namespace deltakv::cli {
namespace {

constexpr double kGiB = 1024.0 * 1024 * 1024;

struct PlanOpts {
  KvSetupFlags setup;
  uint32_t concurrency = 48;
  uint32_t points = 6;
  double duration_s = 1800;
  uint64_t seed = 42;
  std::string plot;
  bool json = false;
  bool no_progress = false;
};

// `copy_bytes`: the node's share of a CPU checkpoint copy, shown whole even when it leaves no
// KV budget beside it.
void PrintPlan(const char* label, const kvsim::CapacityPlan& p, uint64_t copy_bytes) {
  std::printf("%s\n", label);
  std::printf("  KV: %llu B/token for the model, %llu B/token per rank (TP%u, %u node(s) per "
              "replica, %u replica(s) per node)\n",
              static_cast<unsigned long long>(p.kv_bytes_per_token),
              static_cast<unsigned long long>(p.kv_bytes_per_token_per_rank), p.tp,
              p.nodes_per_replica, p.replicas_per_node);
  if (p.fixed_state_bytes) {
    std::printf("  fixed per-request state: %.1f MiB\n", p.fixed_state_bytes / 1048576.0);
  }
  std::printf("  GPU: weights %.1f GiB/GPU, KV %.1f GiB/GPU = %.2fM tokens per replica%s\n",
              p.weight_bytes_per_gpu / kGiB, p.gpu_kv_bytes_per_gpu / kGiB,
              static_cast<double>(p.gpu_kv_tokens) / 1e6,
              p.gpu_kv_tokens_given ? " (given by --gpu-kv-tokens)" : "");
  std::printf(
      "  host per node: RAM %.0f GiB (limit %.0f), KV budget %.0f GiB without a CPU "
      "checkpoint copy, %.0f GiB beside one (copy %.0f GiB/node)\n",
      p.host_ram_bytes / kGiB, p.host_limit_bytes / kGiB, p.host_kv_budget_bytes / kGiB,
      p.host_kv_budget_with_copy_bytes / kGiB, copy_bytes / kGiB);
  std::printf("  pool per node: %llu slots of %llu B = %.1f GiB mapped (%.2fM tokens per "
              "replica)\n",
              static_cast<unsigned long long>(p.slots),
              static_cast<unsigned long long>(p.block_bytes), p.pool_segment_bytes / kGiB,
              static_cast<double>(p.host_kv_tokens) / 1e6);
  for (const kvsim::EngineFlag& f : p.flags) {
    std::printf("  %-16s %-48s %s%s%s\n", f.engine.c_str(), f.setting.c_str(), f.scope.c_str(),
                f.note.empty() ? "" : "; ", f.note.c_str());
  }
  for (const std::string& w : p.warnings) std::printf("  WARNING: %s\n", w.c_str());
}

Status RunPlan(const PlanOpts& o) {
  ASSIGN_OR_RETURN(KvSetup s, ResolveKvSetup(o.setup));
  if (!o.plot.empty()) RETURN_IF_ERROR(CheckWritableAtomic(o.plot));
  if (!o.json) {
    std::printf("%s\n", s.title.c_str());
    PrintPlan(
        o.setup.cpu_copy ? "plan (with a CPU checkpoint copy):" : "plan (no CPU checkpoint copy):",
        s.plan, s.plan_copy.checkpoint_copy_bytes);
  }
  std::vector<kvsim::ReplayArm> arms;
  if (!s.corpus.traces.empty()) {
    // Host sizes from 0 to the node's budget without a CPU copy, in equal steps, plus the
    // budget beside a copy.
    const double max_gib = static_cast<double>(s.plan_free.host_kv_tokens) *
                           s.plan.kv_bytes_per_token_per_rank * s.plan.tp / kGiB;
    const double copy_gib = static_cast<double>(s.plan_copy.host_kv_tokens) *
                            s.plan.kv_bytes_per_token_per_rank * s.plan.tp / kGiB;
    std::vector<double> sizes;
    const uint32_t n = std::max<uint32_t>(2, o.points);
    for (uint32_t i = 0; i < n; ++i) sizes.push_back(std::floor(max_gib * i / (n - 1)));
    if (copy_gib > 0) sizes.push_back(std::floor(copy_gib));
    std::sort(sizes.begin(), sizes.end());
    sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
    for (double gib : sizes) {
      kvsim::ReplayOptions ro;
      ro.concurrency = o.concurrency;
      ro.duration_s = o.duration_s;
      ro.seed = o.seed;
      ro.gpu_kv_tokens = s.gpu_kv_tokens;
      ro.host_kv_tokens = HostTokensForGib(s, gib);
      ro.sim_block_bytes = s.sim_block_bytes;
      ro.max_sim_bytes = s.max_sim_bytes;
      kvsim::ReplayArm arm;
      arm.label = gib == 0 ? "gpu only" : (std::fabs(gib - std::floor(copy_gib)) < 0.5
                                               ? "beside CPU copy"
                                               : "gpu + host");
      arm.concurrency = o.concurrency;
      arm.host_kv_gib = gib;
      arm.host_kv_tokens = ro.host_kv_tokens;
      arm.gpu_kv_tokens = ro.gpu_kv_tokens;
      ProgressBar bar("replay " + std::to_string(static_cast<int>(gib)) + " GiB", !o.no_progress);
      ro.progress = [&bar](double f) { bar.Update(f); };
      ASSIGN_OR_RETURN(arm.result, kvsim::RunReplay(s.corpus, s.cost, ro));
      bar.Done();
      arms.push_back(std::move(arm));
    }
  }
  // The recommendation: the smallest host size that reaches 98 % of the best hit rate seen.
  double best = 0, rec_gib = -1;
  for (const auto& a : arms) best = std::max(best, a.result.gpu_hit_rate + a.result.host_hit_rate);
  for (const auto& a : arms) {
    if (a.result.gpu_hit_rate + a.result.host_hit_rate >= 0.98 * best) {
      rec_gib = a.host_kv_gib;
      break;
    }
  }
  // The plot first: a failure to write it is the command's one answer, not a second one after
  // the summary.
  const bool plotted = !o.plot.empty() && !arms.empty();
  if (plotted) {
    RETURN_IF_ERROR(
        WriteTextFile(o.plot, kvsim::RenderReplayPlot("deltakv plan: " + s.title, arms)));
  }
  if (o.json) {
    nlohmann::json curve = nlohmann::json::array();
    for (const auto& a : arms) curve.push_back(nlohmann::json::parse(kvsim::ReplayArmJson(a)));
    nlohmann::json j = {{"ok", true},
                        {"setup", s.title},
                        {"plan", nlohmann::json::parse(kvsim::CapacityPlanJson(s.plan))},
                        {"plan_without_cpu_copy",
                         nlohmann::json::parse(kvsim::CapacityPlanJson(s.plan_free))},
                        {"plan_with_cpu_copy",
                         nlohmann::json::parse(kvsim::CapacityPlanJson(s.plan_copy))},
                        {"curve", curve}};
    if (rec_gib >= 0) j["recommended_host_kv_gib_per_replica"] = rec_gib;
    PrintJson(j);
  } else if (!arms.empty()) {
    std::printf("\nhit rate and throughput against host tier size (concurrency %u, %zu traces):\n%s",
                o.concurrency, s.corpus.traces.size(), kvsim::FormatReplayTable(arms).c_str());
    if (rec_gib >= 0) {
      std::printf("recommended: %.0f GiB of host KV per replica (the smallest size within 2 %% "
                  "of the best hit rate, %.1f %%)\n",
                  rec_gib, 100 * best);
    }
  }
  if (plotted && !o.json) std::printf("plot: %s\n", o.plot.c_str());
  return Status::Ok();
}

}  // namespace

void AddPlanCommand(CLI::App& app, int* rc) {
  CLI::App* plan = app.add_subcommand(
      "plan",
      "Size the host KV cache: KV bytes per token, GPU and host KV capacity, the pool's real "
      "cost and the flags that give it; with traces, the hit-rate curve from replays");
  auto o = std::make_shared<PlanOpts>();
  AddKvSetupFlags(plan, &o->setup);
  plan->add_option("--concurrency", o->concurrency, "Concurrency of the curve's replays")
      ->check(CLI::Range(1u, 1000000u))
      ->capture_default_str();
  plan->add_option("--points", o->points, "Host sizes on the curve")
      ->check(CLI::Range(1u, 1000u))
      ->capture_default_str();
  plan->add_option("--duration-s", o->duration_s, "Simulated seconds per replay")
      ->check(FiniteRange(0.0, 1e9, /*lo_open=*/true))
      ->capture_default_str();
  plan->add_option("--seed", o->seed)->capture_default_str();
  plan->add_option("--plot", o->plot, "Write an SVG plot of the curve here");
  plan->add_flag("--json", o->json, "Print one JSON object");
  plan->add_flag("--no-progress", o->no_progress, "No progress bar on stderr");
  plan->callback([o, rc] {
    Status s = RunPlan(*o);
    if (!s.ok()) *rc = ReportError("plan", s, o->json);
  });
}

}  // namespace deltakv::cli
