// Fuzzes the volume manifest and reference parsers: any input either parses into a value that
// prints back to exactly the input bytes (both forms are canonical), or is rejected with
// InvalidArgument.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "deltasync/volume.h"

using namespace deltakv;
using namespace deltakv::deltasync;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto m = ParseVolumeManifest(text);
  if (m.ok()) {
    auto again = SerializeVolumeManifest(*m);
    if (!again.ok() || *again != text) std::abort();
  } else if (m.status().code() != StatusCode::kInvalidArgument) {
    std::abort();
  }
  auto ref = ParseVolumeRef(text);
  if (ref.ok()) {
    if (ref->ToString() != text) std::abort();
  } else if (ref.status().code() != StatusCode::kInvalidArgument) {
    std::abort();
  }
  return 0;
}
