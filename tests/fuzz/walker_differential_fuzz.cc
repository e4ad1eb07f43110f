// Differential fuzzer: the sparse zstd walker against libzstd (one-shot and streaming) plus a
// nonzero scan. Aborts when the verdicts or the nonzero bytes differ (rules in
// CompareWithLibzstd: libzstd counts only when its two APIs agree).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>

#include "deltasync/walker_test_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string verdict = deltakv::deltasync::walker_test::CompareWithLibzstd(
      std::span<const uint8_t>(data, size), 1 << 20);
  if (!verdict.empty()) {
    std::fprintf(stderr, "walker/libzstd mismatch: %s\n", verdict.c_str());
    std::abort();
  }
  return 0;
}
