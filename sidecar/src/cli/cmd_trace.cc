// deltakv trace generate | stats: synthetic agentic traces, and statistics of a corpus
// (including its theoretical prefix-cache hit rate).
#include <algorithm>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>

#include "base/file_util.h"
#include "cli/cli_common.h"
#include "kvsim/synthetic.h"
#include "kvsim/theoretical_hit.h"
#include "kvsim/trace.h"

namespace deltakv::cli {
namespace {

nlohmann::json HitJson(const kvsim::HitCount& h) {
  return {{"requests", h.requests},      {"input_tokens", h.input_tokens},
          {"hit_tokens", h.hit_tokens},  {"total_blocks", h.total_blocks},
          {"hit_blocks", h.hit_blocks},  {"token_rate", h.token_rate()},
          {"block_rate", h.block_rate()}};
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

Status Stats(const std::string& path, const std::string& availability, bool json) {
  kvsim::Availability mode;
  if (availability == "causal") {
    mode = kvsim::Availability::kCausal;
  } else if (availability == "arrival") {
    mode = kvsim::Availability::kArrival;
  } else {
    return InvalidArgument("--availability must be 'causal' or 'arrival', not '" + availability +
                           "'");
  }
  ASSIGN_OR_RETURN(kvsim::Corpus c, kvsim::LoadCorpus(path));
  const kvsim::TheoreticalHit th = kvsim::ComputeTheoreticalHit(c, mode);
  std::vector<double> turns, in, out, think, api, fresh;
  uint64_t subagents = 0;
  for (const kvsim::Trace& t : c.traces) {
    if (!t.sessions_independent)
      turns.push_back(static_cast<double>(t.conversations[0].turns.size()));
    subagents += t.sessions_independent ? 0 : t.conversations.size() - 1;
    for (const kvsim::Conversation& cv : t.conversations) {
      for (size_t i = 0; i < cv.turns.size(); ++i) {
        const kvsim::TraceRequest& r = cv.turns[i];
        in.push_back(static_cast<double>(r.input_tokens));
        out.push_back(static_cast<double>(r.output_tokens));
        if (r.think_time_s >= 0) think.push_back(r.think_time_s);
        if (r.api_time_s >= 0) api.push_back(r.api_time_s);
        if (i > 0) {
          const auto& a = cv.turns[i - 1].hash_ids;
          const auto& b = r.hash_ids;
          size_t l = 0;
          while (l < a.size() && l < b.size() && a[l] == b[l]) ++l;
          const double kept = static_cast<double>(l * t.block_size);
          fresh.push_back(std::max(0.0, static_cast<double>(r.input_tokens) - kept));
        }
      }
    }
  }
  if (json) {
    nlohmann::json per = nlohmann::json::array();
    for (size_t i = 0; i < c.traces.size(); ++i) {
      nlohmann::json h = HitJson(th.per_trace[i]);
      h["id"] = c.traces[i].id;
      h["file"] = c.traces[i].file;
      h["format"] = std::string(kvsim::TraceFormatName(c.traces[i].format));
      per.push_back(h);
    }
    PrintJson({{"ok", true},
               {"traces", c.traces.size()},
               {"requests", c.requests()},
               {"subagents", subagents},
               {"median",
                {{"turns_per_trace", Median(turns)},
                 {"input_tokens", Median(in)},
                 {"output_tokens", Median(out)},
                 {"new_tokens_per_turn", Median(fresh)},
                 {"think_time_s", Median(think)},
                 {"api_time_s", Median(api)}}},
               {"availability", availability},
               {"theoretical", HitJson(th.total)},
               {"per_trace", per}});
    return Status::Ok();
  }
  std::printf("%zu traces, %llu requests, %llu subagents\n", c.traces.size(),
              static_cast<unsigned long long>(c.requests()),
              static_cast<unsigned long long>(subagents));
  std::printf(
      "medians: %.0f turns/trace, input %.0f, output %.0f, new tokens/turn %.0f, "
      "think %.1f s, api %.1f s\n",
      Median(turns), Median(in), Median(out), Median(fresh), Median(think), Median(api));
  std::printf(
      "theoretical prefix hit (infinite cache, %s): %.2f %% of tokens, %.2f %% of "
      "blocks\n",
      availability.c_str(), 100 * th.total.token_rate(), 100 * th.total.block_rate());
  return Status::Ok();
}

Status Generate(const std::string& out, const kvsim::SyntheticOptions& o, bool json) {
  ASSIGN_OR_RETURN(kvsim::Corpus c, kvsim::GenerateSyntheticCorpus(o));
  ASSIGN_OR_RETURN(StagingDir dir, StagingDir::Create(out));
  uint64_t bytes = 0;
  for (size_t i = 0; i < c.traces.size(); ++i) {
    const kvsim::Trace& t = c.traces[i];
    const std::string text = kvsim::WriteWekaTrace(t);
    bytes += text.size();
    RETURN_IF_ERROR(WriteFileAtomic(dir.path() + "/" + t.file, std::string_view(text)));
    if ((i + 1) % 16 == 0 || i + 1 == c.traces.size()) {
      std::fprintf(stderr, "\rtrace generate: %zu/%zu traces, %s", i + 1, c.traces.size(),
                   HumanBytes(bytes).c_str());
      if (i + 1 == c.traces.size()) std::fprintf(stderr, "\n");
    }
  }
  RETURN_IF_ERROR(dir.Commit());
  const kvsim::TheoreticalHit th = kvsim::ComputeTheoreticalHit(c);
  if (json) {
    PrintJson({{"ok", true},
               {"out", out},
               {"traces", c.traces.size()},
               {"requests", c.requests()},
               {"bytes", bytes},
               {"theoretical", HitJson(th.total)}});
  } else {
    std::printf("wrote %zu traces (%llu requests, %s) to %s; theoretical hit %.1f %%\n",
                c.traces.size(), static_cast<unsigned long long>(c.requests()),
                HumanBytes(bytes).c_str(), out.c_str(), 100 * th.total.token_rate());
  }
  return Status::Ok();
}

}  // namespace

void AddTraceCommands(CLI::App& app, int* rc) {
  CLI::App* trace = app.add_subcommand("trace", "Agentic request traces (docs/TRACES.md)");
  trace->require_subcommand(1);
  {
    CLI::App* gen = trace->add_subcommand(
        "generate", "Write a synthetic agentic corpus (Weka/AgentX JSON, one trace per file)");
    struct Opts {
      std::string out;
      kvsim::SyntheticOptions s;
      bool json = false;
    };
    auto o = std::make_shared<Opts>();
    gen->add_option("--out", o->out, "Output directory (must not exist)")->required();
    gen->add_option("--traces", o->s.traces)->capture_default_str();
    gen->add_option("--seed", o->s.seed)->capture_default_str();
    gen->add_option("--scale", o->s.scale, "Scale every token count (0..1]")
        ->check(FiniteRange(0.0, 1.0, /*lo_open=*/true))
        ->capture_default_str();
    gen->add_option("--subagent-fraction", o->s.subagent_fraction, "Traces with subagents")
        ->check(FiniteRange(0.0, 1.0))
        ->capture_default_str();
    gen->add_option("--max-turns", o->s.max_turns, "Root turns per trace at most")
        ->check(CLI::Range(uint32_t{3}, uint32_t{1'000'000'000}))
        ->capture_default_str();
    gen->add_option("--max-input-tokens", o->s.max_input_tokens,
                    "Cap on a prompt's tokens, before --scale")
        ->capture_default_str();
    gen->add_flag("--json", o->json, "Print a JSON summary");
    gen->callback([o, rc] {
      Status s = Generate(o->out, o->s, o->json);
      if (!s.ok()) *rc = ReportError("trace generate", s, o->json);
    });
  }
  {
    CLI::App* st = trace->add_subcommand(
        "stats", "Statistics and the theoretical prefix-cache hit rate of a trace corpus");
    struct Opts {
      std::string path;
      std::string availability = "causal";
      bool json = false;
    };
    auto o = std::make_shared<Opts>();
    st->add_option("PATH", o->path, "A trace file or a directory of them")->required();
    st->add_option("--availability", o->availability,
                   "When a block counts for a later request: 'causal' (its producer finished) or "
                   "'arrival' (its producer arrived; aiperf's definition)")
        ->capture_default_str();
    st->add_flag("--json", o->json, "Print one JSON line");
    st->callback([o, rc] {
      Status s = Stats(o->path, o->availability, o->json);
      if (!s.ok()) *rc = ReportError("trace stats", s, o->json);
    });
  }
}

}  // namespace deltakv::cli
