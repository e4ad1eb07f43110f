#include "cli/cli_common.h"

#include <cstdio>
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

int ReportError(std::string_view command, const Status& s, bool json) {
  std::fprintf(stderr, "deltakv %.*s: error: %s\n", static_cast<int>(command.size()),
               command.data(), s.message().c_str());
  if (json) {
    PrintJson(
        {{"ok", false},
         {"error", {{"code", std::string(StatusCodeName(s.code()))}, {"message", s.message()}}}});
  }
  return ExitCodeFor(s);
}

void PrintJson(const nlohmann::json& j) { std::cout << log::JsonText(j) << std::endl; }

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
