// deltakv bench agentx
#include "cli/cli_common.h"

namespace deltakv::cli {

void AddBenchCommands(CLI::App& app, int* rc) {
  (void)app;
  (void)rc;
}

}  // namespace deltakv::cli
