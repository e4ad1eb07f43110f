// Tests of replay reports (kvsim/report.h): table, JSON lines, SVG plot series.
#include "kvsim/report.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <regex>

namespace deltakv::kvsim {
namespace {

std::vector<ReplayArm> Arms() {
  std::vector<ReplayArm> arms;
  for (uint32_t c : {16u, 48u}) {
    for (double gib : {0.0, 256.0, 1024.0}) {
      ReplayArm a;
      a.label = gib == 0 ? "gpu only" : "gpu + host";
      a.concurrency = c;
      a.host_kv_gib = gib;
      a.result.requests = 100;
      a.result.input_tokens = 1000;
      a.result.gpu_hit_tokens = 500;
      a.result.host_hit_tokens = static_cast<uint64_t>(gib / 4);
      a.result.miss_tokens = 1000 - 500 - a.result.host_hit_tokens;
      a.result.gpu_hit_rate = 0.5;
      a.result.host_hit_rate = static_cast<double>(a.result.host_hit_tokens) / 1000;
      a.result.miss_rate = 1 - a.result.gpu_hit_rate - a.result.host_hit_rate;
      a.result.theoretical_hit_rate = 0.96;
      a.result.output_tokens_per_s_per_gpu = 100 + gib / 10;
      a.result.ttft_s = {100, 1.0, 0.5, 2.0, 4.0};
      arms.push_back(a);
    }
  }
  return arms;
}

TEST(ReplayReport, TableHasAHeaderAndOneRowPerArm) {
  auto t = FormatReplayTable(Arms());
  EXPECT_EQ(std::count(t.begin(), t.end(), '\n'), 7);
  EXPECT_NE(t.find("ttft p99"), std::string::npos);
  EXPECT_NE(t.find("gpu + host"), std::string::npos);
}

TEST(ReplayReport, JsonLineCarriesEveryFigure) {
  auto arms = Arms();
  auto j = nlohmann::json::parse(ReplayArmJson(arms[4]));
  EXPECT_EQ(j["concurrency"], 48);
  EXPECT_DOUBLE_EQ(j["host_kv_gib"].get<double>(), 256.0);
  EXPECT_EQ(j["host_hit_tokens"], 64);
  EXPECT_EQ(j["reloaded_tokens"], 64);
  EXPECT_EQ(j["recomputed_tokens"], 436);
  EXPECT_DOUBLE_EQ(j["hit_rate"].get<double>(), 0.564);
  EXPECT_DOUBLE_EQ(j["ttft_s"]["p99"].get<double>(), 4.0);
  for (const char* k : {"gpu_hit_rate", "host_hit_rate", "miss_rate", "theoretical_hit_rate",
                        "output_tokens_per_s_per_gpu", "pool", "simulated_requests_per_wall_s",
                        "pool_lookups_per_wall_s"}) {
    EXPECT_TRUE(j.contains(k)) << k;
  }
}

TEST(ReplayReport, PlotHasOneSeriesPerConcurrencyAndMeasure) {
  auto svg = RenderReplayPlot("test", Arms());
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  std::regex series("data-series=\"([^\"]+)\"");
  std::set<std::string> names;
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), series); it != std::sregex_iterator();
       ++it) {
    names.insert((*it)[1]);
  }
  EXPECT_EQ(names, (std::set<std::string>{"c16 hit (gpu+host)", "c16 gpu hit", "c16 theoretical",
                                          "c16 output tok/s/GPU", "c48 hit (gpu+host)",
                                          "c48 gpu hit", "c48 theoretical",
                                          "c48 output tok/s/GPU"}));
  // Three points per series (one per host size).
  auto pos = svg.find("data-series=\"c48 gpu hit\"");
  auto end = svg.find("</g>", pos);
  std::string g = svg.substr(pos, end - pos);
  size_t circles = 0;
  for (size_t p = g.find("<circle"); p != std::string::npos; p = g.find("<circle", p + 1)) {
    ++circles;
  }
  EXPECT_EQ(circles, 3u);
}

TEST(ReplayReport, PlotEscapesNamesAndHandlesEmptyPanels) {
  PlotPanel p{"a<b", "x", "y", {{"s&t", {{1, 2}}}}, false};
  auto svg = RenderSvgPlot("t\"q", {p, PlotPanel{"empty", "x", "y", {}, true}});
  EXPECT_NE(svg.find("a&lt;b"), std::string::npos);
  EXPECT_NE(svg.find("data-series=\"s&amp;t\""), std::string::npos);
  EXPECT_EQ(svg.find("t\"q"), std::string::npos);
}

}  // namespace
}  // namespace deltakv::kvsim
