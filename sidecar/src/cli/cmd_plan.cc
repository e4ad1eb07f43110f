// deltakv plan
#include "cli/cli_common.h"

namespace deltakv::cli {

void AddPlanCommand(CLI::App& app, int* rc) {
  (void)app;
  (void)rc;
}

}  // namespace deltakv::cli
