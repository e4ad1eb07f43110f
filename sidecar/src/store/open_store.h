// OpenStore: the object store behind a sync request's "delta" location.
//   "/abs/dir" or "file:///abs/dir"  -> a directory
//   "http://host[:port]/prefix"      -> HTTP Range GETs under the prefix, retried with backoff
// InvalidArgument for other schemes (https:// is not supported by this build: put a TLS
// terminator in front or use file://).
#pragma once

#include <memory>
#include <string>

#include "base/status.h"
#include "deltasync/object_store.h"

namespace deltakv::sidecar {

struct HttpStoreOptions {
  int attempts = 4;              // tries per request
  int initial_backoff_ms = 100;  // doubled after each failed try
  int timeout_seconds = 30;
};

StatusOr<std::unique_ptr<deltasync::ObjectStore>> OpenStore(const std::string& location,
                                                            const HttpStoreOptions& http = {});

}  // namespace deltakv::sidecar
