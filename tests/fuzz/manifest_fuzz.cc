// Fuzzes the delta and checkpoint manifest parsers: any input either parses into a manifest
// that serializes and re-parses to the same text, or is rejected with InvalidArgument.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "deltasync/checkpoint.h"
#include "deltasync/delta_manifest.h"

using namespace deltakv;
using namespace deltakv::deltasync;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto d = ParseDeltaManifest(text);
  if (d.ok()) {
    std::string once = DeltaManifestToJson(*d);
    auto again = ParseDeltaManifest(once);
    if (!again.ok() || DeltaManifestToJson(*again) != once) std::abort();
  } else if (d.status().code() != StatusCode::kInvalidArgument) {
    std::abort();
  }
  auto c = ParseCheckpointManifest(text);
  if (c.ok()) {
    std::string once = CheckpointManifestToJson(*c);
    auto again = ParseCheckpointManifest(once);
    if (!again.ok() || CheckpointManifestToJson(*again) != once) std::abort();
  } else if (c.status().code() != StatusCode::kInvalidArgument) {
    std::abort();
  }
  return 0;
}
