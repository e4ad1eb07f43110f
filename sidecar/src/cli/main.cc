// deltakv: the command-line entry point. Each subcommand lives in its own cmd_*.cc file.
#include <cstdio>

#include "cli/cli_common.h"

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
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);
    return code == 0 ? 0 : deltakv::cli::kExitUsage;
  }
  return rc;
}
