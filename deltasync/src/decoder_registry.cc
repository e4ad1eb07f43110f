#include "deltasync/xor_decoder.h"
#include "deltasync/zstd_walker.h"

namespace deltakv::deltasync {

StatusOr<std::unique_ptr<XorDecoder>> MakeXorDecoder(std::string_view name) {
  // The sparse walker is the default: its memory does not depend on the decoded size.
  if (name.empty() || name == "walker" || name == "sparse-walker") return MakeSparseWalkerDecoder();
  if (name == "libzstd") return MakeLibzstdXorDecoder();
  return InvalidArgument("unknown decoder '" + std::string(name) + "' (known: walker, libzstd)");
}

StatusOr<DecodeResult> DecodeDeltaFrame(XorDecoder& decoder, std::span<const uint8_t> input,
                                        uint64_t expected_length, uint32_t max_window_log,
                                        NonzeroSink& sink, const std::string& where) {
  DecodeLimits limits;
  limits.max_output = expected_length;
  limits.max_window_log = max_window_log;
  auto r = decoder.Decode(input, limits, sink);
  if (!r.ok()) {
    if (IsOutputLimitError(r.status())) {
      return DataLoss(where + ": decodes to more than its declared " +
                      std::to_string(expected_length) + " bytes");
    }
    return r.status().WithPrefix(where);
  }
  if (r->decoded_length != expected_length) {
    return DataLoss(where + ": decoded " + std::to_string(r->decoded_length) +
                    " bytes, expected " + std::to_string(expected_length));
  }
  return r;
}

}  // namespace deltakv::deltasync
