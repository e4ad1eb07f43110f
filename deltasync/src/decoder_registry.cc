#include "deltasync/xor_decoder.h"
#include "deltasync/zstd_walker.h"

#include <cstdint>
#include <vector>

namespace deltakv::deltasync {

Status NonzeroSink::OnBytes(const uint64_t* entries, size_t count, uint64_t base) {
  std::vector<uint8_t> run;
  size_t i = 0;
  while (i < count) {
    const uint64_t start = base + (entries[i] >> 8);
    run.clear();
    do {
      run.push_back(static_cast<uint8_t>(entries[i]));
      ++i;
    } while (i < count && base + (entries[i] >> 8) == start + run.size());
    RETURN_IF_ERROR(OnRun(start, run));
  }
  return Status::Ok();
}

StatusOr<std::unique_ptr<XorDecoder>> MakeXorDecoder(std::string_view name) {
  // The sparse walker is the default: its memory does not depend on the decoded size.
  if (name.empty() || name == "walker" || name == "sparse-walker") return MakeSparseWalkerDecoder();
  if (name == "libzstd") return MakeLibzstdXorDecoder();
  return InvalidArgument("unknown decoder '" + std::string(name) +
                         "' (known: walker, also called sparse-walker, and libzstd)");
}

namespace {

// Passes runs through to the caller's sink and adds them to a digest.
class DigestingSink final : public NonzeroSink {
 public:
  explicit DigestingSink(NonzeroSink& inner) : inner_(inner) {}
  Status OnRun(uint64_t position, std::span<const uint8_t> bytes) override {
    digest_.Add(position, bytes);
    return inner_.OnRun(position, bytes);
  }
  XorDigest value() const { return digest_.value(); }

 private:
  NonzeroSink& inner_;
  XorDigestBuilder digest_;
};

}  // namespace

StatusOr<DecodeResult> DecodeDeltaFrame(XorDecoder& decoder, std::span<const uint8_t> input,
                                        uint64_t expected_length, uint32_t max_window_log,
                                        NonzeroSink& sink, const std::string& where,
                                        const std::optional<XorDigest>& expected_digest) {
  DecodeLimits limits;
  limits.max_output = expected_length;
  limits.max_window_log = max_window_log;
  limits.verify_checksum = !expected_digest.has_value();
  // The digest comes from the decoder when it computes one, else from the delivered runs.
  const bool own_digest = expected_digest.has_value() && decoder.computes_digest();
  limits.compute_digest = own_digest;
  DigestingSink digesting(sink);
  auto r = decoder.Decode(input, limits, expected_digest && !own_digest ? digesting : sink);
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
  if (expected_digest) {
    if (own_digest && !r->digest.has_value()) {
      return Internal(where + ": the " + std::string(decoder.name()) + " decoder gave no digest");
    }
    const XorDigest got = own_digest ? *r->digest : digesting.value();
    if (got != *expected_digest) {
      return DataLoss(where + ": decoded bytes have xor_digest " + FormatXorDigest(got) +
                      ", the manifest says " + FormatXorDigest(*expected_digest));
    }
  }
  return r;
}

}  // namespace deltakv::deltasync
