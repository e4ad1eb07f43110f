#include "nonzero_scan.h"

#include <bit>
#include <cstring>

namespace deltakv::deltasync {

namespace {
constexpr size_t kMergeGap = 16;

inline uint64_t Load64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
}  // namespace

Status ScanNonzeroRuns(std::span<const uint8_t> bytes, uint64_t base, NonzeroSink& sink,
                       uint64_t* nonzero) {
  const uint8_t* p = bytes.data();
  const size_t n = bytes.size();
  size_t i = 0;
  uint64_t count = 0;
  while (i < n) {
    // Skip zeros quickly.
    while (i + 8 <= n && Load64(p + i) == 0) i += 8;
    while (i < n && p[i] == 0) ++i;
    if (i >= n) break;
    size_t start = i;
    size_t last_nonzero = i;
    // Extend while the gap of zeros stays below kMergeGap.
    while (i < n) {
      if (p[i] != 0) {
        last_nonzero = i;
        ++count;
        ++i;
      } else if (i - last_nonzero > kMergeGap) {
        break;
      } else {
        ++i;
      }
    }
    RETURN_IF_ERROR(sink.OnRun(base + start, bytes.subspan(start, last_nonzero + 1 - start)));
  }
  *nonzero += count;
  return Status::Ok();
}

}  // namespace deltakv::deltasync
