#include "cli/cli_common.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "log/log.h"

namespace deltakv::cli {

int ExitCodeFor(const Status& s) {
  switch (s.code()) {
    case StatusCode::kOk:
      return kExitOk;
    case StatusCode::kIoError:
    case StatusCode::kInternal:
      return kExitEnvironment;
    default:
      return kExitBadInput;
  }
}

int ReportError(std::string_view command, const Status& s, bool json, const nlohmann::json& extra) {
  std::fprintf(stderr, "deltakv %.*s: error: %s\n", static_cast<int>(command.size()),
               command.data(), s.message().c_str());
  if (json) {
    nlohmann::json j = extra;
    j["ok"] = false;
    j["error"] = {{"code", std::string(StatusCodeName(s.code()))}, {"message", s.message()}};
    PrintJson(j);
  }
  return ExitCodeFor(s);
}

void PrintJson(const nlohmann::json& j) { std::cout << log::JsonText(j) << std::endl; }

CLI::Validator FiniteRange(double lo, double hi, bool lo_open) {
  char range[96];
  std::snprintf(range, sizeof(range), "%s%g, %g]", lo_open ? "(" : "[", lo, hi);
  const std::string description = std::string("FLOAT in ") + range;
  return CLI::Validator(
      [lo, hi, lo_open, description](std::string& text) -> std::string {
        char* end = nullptr;
        const double v = std::strtod(text.c_str(), &end);
        const bool parsed = !text.empty() && end == text.c_str() + text.size();
        if (!parsed || !std::isfinite(v) || v < lo || (lo_open && v == lo) || v > hi) {
          return "Value " + text + " is not a finite number in " + description.substr(9);
        }
        return std::string();
      },
      description);
}

CLI::Validator NonEmpty() {
  return CLI::Validator(
      [](std::string& text) {
        return text.empty() ? std::string("Value is empty") : std::string();
      },
      "");
}

CLI::Option* AddThreadsOption(CLI::App* cmd, unsigned* threads) {
  return cmd
      ->add_option("--threads", *threads,
                   "Worker threads, at most " + std::to_string(kMaxThreads) + " (0 = all CPUs)")
      ->check(CLI::Range(0u, kMaxThreads));
}

std::string HumanBytes(uint64_t bytes) {
  char buf[64];
  double b = static_cast<double>(bytes);
  if (bytes >= (1ull << 30))
    std::snprintf(buf, sizeof(buf), "%.2f GiB", b / (1ull << 30));
  else if (bytes >= (1ull << 20))
    std::snprintf(buf, sizeof(buf), "%.2f MiB", b / (1ull << 20));
  else if (bytes >= (1ull << 10))
    std::snprintf(buf, sizeof(buf), "%.2f KiB", b / (1ull << 10));
  else
    std::snprintf(buf, sizeof(buf), "%llu B", static_cast<unsigned long long>(bytes));
  return buf;
}

}  // namespace deltakv::cli
