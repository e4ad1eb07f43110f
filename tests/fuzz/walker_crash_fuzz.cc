// Crash fuzzer of the sparse zstd walker over mutated valid frames (seed corpus:
// tests/fuzz/corpus/walker). The input size picks the options and the chunking of Feed, so
// streaming reassembly is exercised too. Sanitizers (ASan/UBSan) are the oracle, and one
// property: the same input walked with WalkerOptions::decode_only (every check but the
// checksums, nothing executed) fails with the full walk's message wherever the full walk fails
// on something other than a checksum or the work cap, and where the full walk succeeds it
// succeeds too, counting the same bytes and sequences and delivering nothing.
#include <algorithm>
#include <cstdint>
#include <span>
#include <string>

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
  const size_t chunk = (config >> 4) == 0 ? input.size() + 1 : (config >> 4) * 7;
  auto walk = [&](deltakv::deltasync::SparseZstdWalker& walker) {
    for (size_t pos = 0; pos < input.size(); pos += chunk) {
      const size_t n = std::min(chunk, input.size() - pos);
      if (deltakv::Status s = walker.Feed(input.subspan(pos, n)); !s.ok()) return s;
    }
    return walker.Finish();
  };
  CountingSink sink;
  deltakv::deltasync::SparseZstdWalker walker(sink, options);
  const deltakv::Status full = walk(walker);
  // Work units count delivered bytes too, so the decode-only walk has no work cap to match.
  deltakv::deltasync::WalkerOptions decode_options = options;
  decode_options.decode_only = true;
  decode_options.max_work = UINT64_MAX;
  CountingSink none;
  deltakv::deltasync::SparseZstdWalker decoder(none, decode_options);
  const deltakv::Status decoded = walk(decoder);
  const bool full_failed_on_checksum =
      full.message().find("content checksum mismatch") != std::string::npos;
  const bool full_failed_on_work = full.code() == deltakv::StatusCode::kResourceExhausted &&
                                   full.message().find("work limit") != std::string::npos;
  if (full.ok()) {
    if (!decoded.ok() || decoder.stats().sequences != walker.stats().sequences ||
        decoder.stats().decoded_length != walker.stats().decoded_length ||
        decoder.stats().nonzero_bytes != 0) {
      __builtin_trap();
    }
  } else if (!full_failed_on_checksum && !full_failed_on_work &&
             decoded.message() != full.message()) {
    // (After a checksum mismatch the decode-only walk goes on, and may fail later.)
    __builtin_trap();
  }
  return 0;
}
