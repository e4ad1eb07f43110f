// Crash-only fuzzer of the sparse zstd walker over mutated valid frames (seed corpus:
// tests/fuzz/corpus/walker). The input size picks the options and the chunking of Feed, so
// streaming reassembly is exercised too. Sanitizers (ASan/UBSan) are the oracle.
#include <algorithm>
#include <cstdint>
#include <span>

#include "deltasync/zstd_walker.h"

namespace {

class CountingSink : public deltakv::deltasync::NonzeroSink {
 public:
  deltakv::Status OnRun(uint64_t position, std::span<const uint8_t> bytes) override {
    if (bytes.empty() || position < next_) __builtin_trap();  // contract violation
    next_ = position + bytes.size();
    for (uint8_t b : bytes) sum_ += b;
    return deltakv::Status::Ok();
  }

 private:
  uint64_t next_ = 0;
  uint64_t sum_ = 0;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const uint8_t config = static_cast<uint8_t>((size * 0x9E3779B1u) >> 24);
  std::span<const uint8_t> input(data, size);
  deltakv::deltasync::WalkerOptions options;
  options.limits.max_output = 64u << 20;
  options.limits.verify_checksum = (config & 1) == 0;
  options.merge_gap = (config >> 1) & 7;
  options.max_work = 1u << 24;
  CountingSink sink;
  deltakv::deltasync::SparseZstdWalker walker(sink, options);
  const size_t chunk = (config >> 4) == 0 ? input.size() + 1 : (config >> 4) * 7;
  for (size_t pos = 0; pos < input.size(); pos += chunk) {
    const size_t n = std::min(chunk, input.size() - pos);
    if (!walker.Feed(input.subspan(pos, n)).ok()) return 0;
  }
  (void)walker.Finish();
  return 0;
}
