// `deltakv volume mount REF DIR`: the options and the command body (registered by
// cmd_volume.cc, which opens the store).
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "base/status.h"
#include "deltasync/volume.h"

namespace deltakv::cli {

struct VolumeMountArgs {
  std::string ref, dir;
  std::string cache_dir;              // default: $XDG_CACHE_HOME or ~/.cache, + /deltakv/chunks
  std::string cache_bytes = "8GiB";   // disk bound
  std::string memory_bytes = "256MiB";
  std::string readahead = "4";        // chunks, or bytes with a unit suffix ("64MiB"); 0 = off
  std::string readahead_inflight = "256MiB";
  int readahead_threads = 4;
  std::string log_file;               // read errors go here instead of stderr
  bool allow_other = false;           // FUSE allow_other: other users may read the mount
};

void AddVolumeMountOptions(CLI::App& cmd, VolumeMountArgs& args);

// Mounts the version and serves it until unmounted or signalled. Prints one line (or, with
// json, one JSON object) on stdout when the mount is ready. Errors: as Volumes::Show for the
// reference, InvalidArgument for bad sizes, FailedPrecondition for a bad mount point or a
// cache directory in use, IoError if the mount fails.
Status RunVolumeMount(deltasync::Volumes& volumes, const VolumeMountArgs& args, bool json);

}  // namespace deltakv::cli
