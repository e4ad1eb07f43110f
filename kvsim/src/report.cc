// Tables, JSON lines and SVG plots of kvsim/report.h.
#include "kvsim/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

namespace deltakv::kvsim {
namespace {

std::string Fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

std::string Escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '&': o += "&amp;"; break;
      case '"': o += "&quot;"; break;
      default: o += c;
    }
  }
  return o;
}

nlohmann::json Latency(const LatencySummary& l) {
  return {{"count", l.count}, {"mean", l.mean}, {"p50", l.p50}, {"p90", l.p90}, {"p99", l.p99}};
}

// A "nice" step for about `n` ticks over `span`.
double NiceStep(double span, int n) {
  if (span <= 0) return 1;
  const double raw = span / n;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0}) {
    if (raw <= m * mag) return m * mag;
  }
  return 10 * mag;
}

const char* kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd",
                         "#ff7f0e", "#8c564b", "#e377c2", "#17becf"};

}  // namespace

std::string FormatReplayTable(const std::vector<ReplayArm>& arms) {
  std::ostringstream o;
  char line[512];
  std::snprintf(line, sizeof line,
                "%-22s %5s %9s %7s %7s %7s %7s %9s %9s %10s %8s %8s %8s %7s\n", "arm", "conc",
                "host GiB", "gpu %", "host %", "miss %", "max %", "reload M", "recomp M",
                "out/s/GPU", "ttft p50", "ttft p90", "ttft p99", "reqs");
  o << line;
  for (const ReplayArm& a : arms) {
    const ReplayResult& r = a.result;
    std::snprintf(line, sizeof line,
                  "%-22s %5u %9.1f %7.1f %7.1f %7.1f %7.1f %9.2f %9.2f %10.1f %7.2fs %7.2fs "
                  "%7.2fs %7llu\n",
                  a.label.c_str(), a.concurrency, a.host_kv_gib, 100 * r.gpu_hit_rate,
                  100 * r.host_hit_rate, 100 * r.miss_rate, 100 * r.theoretical_hit_rate,
                  static_cast<double>(r.host_hit_tokens) / 1e6,
                  static_cast<double>(r.miss_tokens) / 1e6, r.output_tokens_per_s_per_gpu,
                  r.ttft_s.p50, r.ttft_s.p90, r.ttft_s.p99,
                  static_cast<unsigned long long>(r.requests));
    o << line;
  }
  return o.str();
}

std::string ReplayArmJson(const ReplayArm& a) {
  const ReplayResult& r = a.result;
  nlohmann::json j = {
      {"arm", a.label},
      {"concurrency", a.concurrency},
      {"host_kv_gib", a.host_kv_gib},
      {"host_kv_tokens", a.host_kv_tokens},
      {"gpu_kv_tokens", a.gpu_kv_tokens},
      {"requests", r.requests},
      {"warmup_requests", r.warmup_requests},
      {"overflow_requests", r.overflow_requests},
      {"input_tokens", r.input_tokens},
      {"output_tokens", r.output_tokens},
      {"gpu_hit_tokens", r.gpu_hit_tokens},
      {"host_hit_tokens", r.host_hit_tokens},
      {"miss_tokens", r.miss_tokens},
      {"reloaded_tokens", r.host_hit_tokens},
      {"recomputed_tokens", r.miss_tokens},
      {"theoretical_hit_tokens", r.theoretical_hit_tokens},
      {"gpu_hit_rate", r.gpu_hit_rate},
      {"host_hit_rate", r.host_hit_rate},
      {"hit_rate", r.gpu_hit_rate + r.host_hit_rate},
      {"miss_rate", r.miss_rate},
      {"theoretical_hit_rate", r.theoretical_hit_rate},
      {"window_s", r.window_s},
      {"output_tokens_per_s_per_gpu", r.output_tokens_per_s_per_gpu},
      {"total_tokens_per_s_per_gpu", r.total_tokens_per_s_per_gpu},
      {"ttft_s", Latency(r.ttft_s)},
      {"e2e_s", Latency(r.e2e_s)},
      {"steps", r.steps},
      {"simulated_s", r.simulated_s},
      {"idle_skipped_s", r.idle_skipped_s},
      {"gpu_capacity_blocks", r.gpu_capacity_blocks},
      {"gpu_evictions", r.gpu_evictions},
      {"pool",
       {{"capacity_blocks", r.host_capacity_blocks},
        {"bytes", r.pool_bytes},
        {"lookups", r.pool_lookups},
        {"hit_blocks", r.pool_hit_blocks},
        {"loaded_blocks", r.pool_loaded_blocks},
        {"stored_blocks", r.pool_stored_blocks},
        {"evictions", r.pool_evictions},
        {"refused_blocks", r.pool_refused_blocks},
        {"wrong_bytes", r.wrong_bytes}}},
      {"wall_s", r.wall_s},
      {"simulated_requests_per_wall_s", r.simulated_requests_per_wall_s},
      {"pool_lookups_per_wall_s", r.pool_lookups_per_wall_s},
      {"pool_loads_per_wall_s", r.pool_loads_per_wall_s},
  };
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string RenderSvgPlot(const std::string& title, const std::vector<PlotPanel>& panels) {
  const int w = 760, ph = 320, top = 40, left = 80, right = 200, pad = 50;
  const int h = top + static_cast<int>(panels.size()) * (ph + pad);
  std::ostringstream o;
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << w << "\" height=\"" << h
    << "\" viewBox=\"0 0 " << w << ' ' << h << "\" font-family=\"sans-serif\" font-size=\"12\">\n"
    << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
    << "<text x=\"" << w / 2 << "\" y=\"22\" text-anchor=\"middle\" font-size=\"15\">"
    << Escape(title) << "</text>\n";
  for (size_t p = 0; p < panels.size(); ++p) {
    const PlotPanel& pn = panels[p];
    const int y0 = top + static_cast<int>(p) * (ph + pad);
    const int pw = w - left - right, inner = ph - 40;
    double xmin = INFINITY, xmax = -INFINITY, ymax = pn.y_percent ? 1.0 : 0.0;
    for (const PlotSeries& s : pn.series) {
      for (auto [x, y] : s.points) {
        xmin = std::min(xmin, x);
        xmax = std::max(xmax, x);
        ymax = std::max(ymax, y);
      }
    }
    if (!(xmin <= xmax)) xmin = 0, xmax = 1;
    if (xmax == xmin) xmax = xmin + 1;
    if (ymax <= 0) ymax = 1;
    const double ystep = NiceStep(ymax, 5);
    ymax = std::ceil(ymax / ystep) * ystep;
    auto X = [&](double x) { return left + (x - xmin) / (xmax - xmin) * pw; };
    auto Y = [&](double y) { return y0 + 20 + inner - y / ymax * inner; };
    o << "<g class=\"panel\" data-title=\"" << Escape(pn.title) << "\">\n"
      << "<text x=\"" << left << "\" y=\"" << y0 + 12 << "\" font-size=\"13\">"
      << Escape(pn.title) << "</text>\n"
      << "<rect x=\"" << left << "\" y=\"" << y0 + 20 << "\" width=\"" << pw << "\" height=\""
      << inner << "\" fill=\"none\" stroke=\"#888\"/>\n";
    for (double y = 0; y <= ymax + 1e-9; y += ystep) {
      o << "<line x1=\"" << left << "\" x2=\"" << left + pw << "\" y1=\"" << Y(y) << "\" y2=\""
        << Y(y) << "\" stroke=\"#eee\"/><text x=\"" << left - 6 << "\" y=\"" << Y(y) + 4
        << "\" text-anchor=\"end\">"
        << (pn.y_percent ? Fmt("%.0f%%", 100 * y) : Fmt("%g", y)) << "</text>\n";
    }
    const double xstep = NiceStep(xmax - xmin, 6);
    for (double x = std::ceil(xmin / xstep) * xstep; x <= xmax + 1e-9; x += xstep) {
      o << "<text x=\"" << X(x) << "\" y=\"" << y0 + 20 + inner + 16
        << "\" text-anchor=\"middle\">" << Fmt("%g", x) << "</text>\n";
    }
    o << "<text x=\"" << left + pw / 2 << "\" y=\"" << y0 + 20 + inner + 34
      << "\" text-anchor=\"middle\">" << Escape(pn.x_label) << "</text>\n"
      << "<text transform=\"translate(" << 18 << ',' << y0 + 20 + inner / 2
      << ") rotate(-90)\" text-anchor=\"middle\">" << Escape(pn.y_label) << "</text>\n";
    for (size_t si = 0; si < pn.series.size(); ++si) {
      PlotSeries s = pn.series[si];
      std::sort(s.points.begin(), s.points.end());
      const char* color = kColors[si % (sizeof kColors / sizeof kColors[0])];
      o << "<g class=\"series\" data-series=\"" << Escape(s.name) << "\" stroke=\"" << color
        << "\" fill=\"" << color << "\">\n<polyline fill=\"none\" stroke-width=\"2\" points=\"";
      for (auto [x, y] : s.points) o << Fmt("%.1f", X(x)) << ',' << Fmt("%.1f", Y(y)) << ' ';
      o << "\"/>\n";
      for (auto [x, y] : s.points) {
        o << "<circle cx=\"" << Fmt("%.1f", X(x)) << "\" cy=\"" << Fmt("%.1f", Y(y))
          << "\" r=\"3\"><title>" << Escape(s.name) << ": " << Fmt("%g", x) << ", "
          << Fmt("%g", y) << "</title></circle>\n";
      }
      const int ly = y0 + 30 + static_cast<int>(si) * 18;
      o << "<line x1=\"" << left + pw + 12 << "\" x2=\"" << left + pw + 32 << "\" y1=\"" << ly
        << "\" y2=\"" << ly << "\" stroke-width=\"2\"/><text x=\"" << left + pw + 38
        << "\" y=\"" << ly + 4 << "\" stroke=\"none\" fill=\"black\">" << Escape(s.name)
        << "</text>\n</g>\n";
    }
    o << "</g>\n";
  }
  o << "</svg>\n";
  return o.str();
}

std::string RenderReplayPlot(const std::string& title, const std::vector<ReplayArm>& arms) {
  std::map<uint32_t, std::vector<const ReplayArm*>> by_c;
  for (const ReplayArm& a : arms) by_c[a.concurrency].push_back(&a);
  PlotPanel hits{"Prefix hit rate (GPU + host tier) against host tier size", "host tier, GiB",
                 "hit rate", {}, true};
  PlotPanel thr{"Output throughput per GPU", "host tier, GiB", "tokens/s/GPU", {}, false};
  for (const auto& [c, as] : by_c) {
    const std::string cs = "c" + std::to_string(c);
    PlotSeries all{cs + " hit (gpu+host)", {}}, gpu{cs + " gpu hit", {}},
        th{cs + " theoretical", {}}, out{cs + " output tok/s/GPU", {}};
    for (const ReplayArm* a : as) {
      const ReplayResult& r = a->result;
      all.points.emplace_back(a->host_kv_gib, r.gpu_hit_rate + r.host_hit_rate);
      gpu.points.emplace_back(a->host_kv_gib, r.gpu_hit_rate);
      th.points.emplace_back(a->host_kv_gib, r.theoretical_hit_rate);
      out.points.emplace_back(a->host_kv_gib, r.output_tokens_per_s_per_gpu);
    }
    hits.series.push_back(all);
    hits.series.push_back(gpu);
    hits.series.push_back(th);
    thr.series.push_back(out);
  }
  return RenderSvgPlot(title, {hits, thr});
}

}  // namespace deltakv::kvsim
