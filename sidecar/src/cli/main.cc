// deltakv: the command-line entry point. Each subcommand lives in its own cmd_*.cc file.
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "cli/cli_common.h"

namespace {

// CLI11 reads "-1" into an unsigned option by wrapping it around (and a number past 64 bits as
// the largest one): every unsigned option takes decimal digits that fit 64 bits, or it is a
// usage error (exit 1) like any value of the wrong type.
void CheckUnsignedOptions(CLI::App& app) {
  static const CLI::Validator kUnsigned(
      [](std::string& text) -> std::string {
        if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos) {
          return "'" + text + "' is not a non-negative integer";
        }
        errno = 0;
        (void)std::strtoull(text.c_str(), nullptr, 10);
        return errno == ERANGE ? "'" + text + "' does not fit 64 bits" : std::string();
      },
      "");
  for (CLI::Option* o : app.get_options()) {
    // "UINT", or "UINT:..." once a range check is on it.
    if (o->get_type_name().rfind("UINT", 0) == 0) o->check(kUnsigned);
  }
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) {
    CheckUnsignedOptions(*sub);
  }
}

// "checkpoint manifest": the subcommands that ran, or "" when none did.
std::string CommandName(const CLI::App& app) {
  std::string name;
  const CLI::App* at = &app;
  for (;;) {
    const std::vector<CLI::App*> ran = at->get_subcommands();
    if (ran.empty()) return name;
    at = ran.front();
    name += (name.empty() ? "" : " ") + at->get_name();
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "deltakv: sparse delta weight sync and host KV tier for LLM inference servers.\n"
      "Exit codes: 0 ok, 1 usage error, 2 bad input or verification failure, "
      "3 I/O or internal error."};
  app.require_subcommand(1);
  int rc = deltakv::cli::kExitOk;
  deltakv::cli::AddCheckpointCommands(app, &rc);
  deltakv::cli::AddPublishCommand(app, &rc);
  deltakv::cli::AddApplyCommand(app, &rc);
  deltakv::cli::AddFrameCommands(app, &rc);
  deltakv::cli::AddSidecarCommand(app, &rc);
  deltakv::cli::AddTraceCommands(app, &rc);
  deltakv::cli::AddBenchCommands(app, &rc);
  deltakv::cli::AddPlanCommand(app, &rc);
  deltakv::cli::AddVolumeCommands(app, &rc);
  CheckUnsignedOptions(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);  // --help prints to stdout too
    return deltakv::cli::FinishStdout(CommandName(app), code == 0 ? 0 : deltakv::cli::kExitUsage);
  }
  // Every command's results: a write to stdout that failed is an error (exit code 3).
  return deltakv::cli::FinishStdout(CommandName(app), rc);
}
