// deltakv trace generate|stats
#include "cli/cli_common.h"

namespace deltakv::cli {

void AddTraceCommands(CLI::App& app, int* rc) {
  (void)app;
  (void)rc;
}

}  // namespace deltakv::cli
