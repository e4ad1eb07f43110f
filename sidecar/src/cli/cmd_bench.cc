// deltakv bench agentx: replay agentic traces through the real host KV pool (kvsim/replay.h),
// with and without the host tier, at one or more concurrencies.
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "base/file_util.h"
#include "cli/cli_common.h"
#include "cli/kv_setup.h"
#include "kvsim/report.h"

namespace deltakv::cli {
namespace {

struct BenchOpts {
  KvSetupFlags setup;
  std::vector<uint32_t> concurrency{16, 48};
  std::vector<std::string> host_sizes{"auto"};
  double duration_s = 3600;
  double idle_cap_s = 10;
  double warmup_min = 0.25, warmup_max = 0.75;
  uint64_t seed = 42;
  uint32_t max_batched_tokens = 8192;
  std::string plot, records;
  bool json = false;
  bool no_progress = false;
};

Status RunBench(const BenchOpts& o) {
  ASSIGN_OR_RETURN(KvSetup setup, ResolveKvSetup(o.setup));
  if (setup.corpus.traces.empty()) {
    return InvalidArgument("no traces: give trace files or directories, or --synthetic N");
  }
  ASSIGN_OR_RETURN(std::vector<double> host_gib, ResolveHostSizes(o.host_sizes, setup));
  if (!o.plot.empty()) RETURN_IF_ERROR(CheckWritableAtomic(o.plot));
  std::FILE* records = nullptr;
  if (!o.records.empty()) {
    records = std::fopen(o.records.c_str(), "w");
    if (records == nullptr) return IoError("cannot write '" + o.records + "'");
  }
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> records_closer(records, [](std::FILE* f) {
    return f ? std::fclose(f) : 0;
  });
  if (!o.json) std::printf("%s\n", DescribeKvSetup(setup).c_str());
  std::vector<kvsim::ReplayArm> arms;
  for (uint32_t c : o.concurrency) {
    for (double gib : host_gib) {
      kvsim::ReplayOptions ro;
      ro.concurrency = c;
      ro.duration_s = o.duration_s;
      ro.idle_cap_s = o.idle_cap_s;
      ro.warmup_min = o.warmup_min;
      ro.warmup_max = o.warmup_max;
      ro.seed = o.seed;
      ro.max_batched_tokens = o.max_batched_tokens;
      ro.gpu_kv_tokens = setup.gpu_kv_tokens;
      ro.host_kv_tokens = HostTokensForGib(setup, gib);
      ro.sim_block_bytes = setup.sim_block_bytes;
      ro.max_sim_bytes = setup.max_sim_bytes;
      kvsim::ReplayArm arm;
      arm.label = gib == 0 ? "gpu only" : "gpu + host";
      arm.concurrency = c;
      arm.host_kv_gib = gib;
      arm.host_kv_tokens = ro.host_kv_tokens;
      arm.gpu_kv_tokens = ro.gpu_kv_tokens;
      ProgressBar bar("replay c" + std::to_string(c) + " " + arm.label, !o.no_progress);
      ro.progress = [&bar](double f) { bar.Update(f); };
      if (records != nullptr) {
        ro.on_request = [records, &arm, &setup](const kvsim::RequestRecord& r) {
          WriteRequestRecord(records, arm, setup, r);
        };
      }
      ASSIGN_OR_RETURN(arm.result, kvsim::RunReplay(setup.corpus, setup.cost, ro));
      bar.Done();
      if (arm.result.requests == 0) {
        return InvalidArgument("replay at concurrency " + std::to_string(c) +
                               " profiled no request: run longer (--duration-s)");
      }
      if (o.json) std::printf("%s\n", kvsim::ReplayArmJson(arm).c_str());
      arms.push_back(std::move(arm));
    }
  }
  if (!o.json) std::printf("%s", kvsim::FormatReplayTable(arms).c_str());
  if (!o.plot.empty()) {
    RETURN_IF_ERROR(WriteTextFile(
        o.plot, kvsim::RenderReplayPlot("deltakv bench agentx: " + setup.title, arms)));
    if (!o.json) std::printf("plot: %s\n", o.plot.c_str());
  }
  return Status::Ok();
}

}  // namespace

void AddBenchCommands(CLI::App& app, int* rc) {
  CLI::App* bench = app.add_subcommand("bench", "Benchmarks of the host KV tier");
  bench->require_subcommand(1);
  CLI::App* ax = bench->add_subcommand(
      "agentx",
      "Replay agentic traces (Weka/AgentX JSON, Mooncake JSONL) through a real host KV pool "
      "against a model of the GPU side, with and without the host tier");
  auto o = std::make_shared<BenchOpts>();
  AddKvSetupFlags(ax, &o->setup);
  ax->add_option("--concurrency", o->concurrency, "Live session trees, e.g. 16,48")
      ->delimiter(',')
      ->capture_default_str();
  ax->add_option("--host-kv-gib", o->host_sizes,
                 "Host tier sizes per replica in GiB of real KV bytes (0 to 1e9; 'auto': what "
                 "the node has free; 'copy': what is left beside a CPU copy of the checkpoint); "
                 "a gpu-only arm is always run first")
      ->delimiter(',')
      ->capture_default_str();
  ax->add_option("--duration-s", o->duration_s, "Simulated seconds profiled after the warmup")
      ->check(FiniteRange(0.0, 1e9, /*lo_open=*/true))
      ->capture_default_str();
  ax->add_option("--idle-cap-s", o->idle_cap_s, "Whole-system idle cap")
      ->check(FiniteRange(0.0, 1e9))
      ->capture_default_str();
  ax->add_option("--warmup-min", o->warmup_min, "Warmup start, fraction of a lane's trace")
      ->check(FiniteRange(0.0, 1.0))
      ->capture_default_str();
  ax->add_option("--warmup-max", o->warmup_max)->check(FiniteRange(0.0, 1.0))->capture_default_str();
  ax->add_option("--seed", o->seed, "Seed of the warmup draws")->capture_default_str();
  ax->add_option("--max-batched-tokens", o->max_batched_tokens, "Tokens per engine step")
      ->capture_default_str();
  ax->add_option("--plot", o->plot, "Write an SVG plot here");
  ax->add_option("--records", o->records, "Write one JSON line per request here");
  ax->add_flag("--json", o->json, "One JSON line per arm on stdout");
  ax->add_flag("--no-progress", o->no_progress, "No progress bar on stderr");
  ax->callback([o, rc] {
    Status s = RunBench(*o);
    if (!s.ok()) *rc = ReportError("bench agentx", s, o->json);
  });
}

}  // namespace deltakv::cli
