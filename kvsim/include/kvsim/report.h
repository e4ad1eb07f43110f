// Reports of replays and plans: an aligned text table, one JSON object per replay arm, and an
// SVG plot (self-contained, no external assets) whose series are tagged so tools and tests
// can find them: each series is a <g class="series" data-series="NAME"> element.
//
// Thread-safety: stateless functions.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "kvsim/replay.h"

namespace deltakv::kvsim {

// One replay of a comparison: a concurrency and a host tier size (0 = no host tier).
struct ReplayArm {
  std::string label;               // e.g. "gpu only", "gpu + host 512 GiB"
  uint32_t concurrency = 0;
  double host_kv_gib = 0;          // modelled host tier size per replica (real bytes), GiB
  uint64_t host_kv_tokens = 0;
  uint64_t gpu_kv_tokens = 0;
  ReplayResult result;
};

// The arms as a table (one row each) with a header line.
std::string FormatReplayTable(const std::vector<ReplayArm>& arms);
// One arm as a one-line JSON object (every ReplayResult field, rates as fractions).
std::string ReplayArmJson(const ReplayArm& arm);

struct PlotSeries {
  std::string name;
  std::vector<std::pair<double, double>> points;  // (x, y), drawn in x order
};

struct PlotPanel {
  std::string title;
  std::string x_label;
  std::string y_label;
  std::vector<PlotSeries> series;
  bool y_percent = false;  // y in [0, 1] drawn as 0..100 %
};

// Panels stacked vertically under one title.
std::string RenderSvgPlot(const std::string& title, const std::vector<PlotPanel>& panels);

// The standard plot of a set of arms: hit rates (GPU + host, GPU only, theoretical) and output
// throughput per GPU against the host tier size, one series per concurrency.
std::string RenderReplayPlot(const std::string& title, const std::vector<ReplayArm>& arms);

}  // namespace deltakv::kvsim
