// Private: a NonzeroSink that XORs decoded runs into a destination span and accumulates the
// incremental Adler-32 partial sums over canonical positions.
#pragma once

#include <cstdint>
#include <span>

#include "deltasync/adler32.h"
#include "deltasync/xor_decoder.h"

namespace deltakv::deltasync {

class XorApplySink final : public NonzeroSink {
 public:
  // `dst` is the destination range; `canonical_base` is the canonical tensor offset of dst[0].
  XorApplySink(std::span<uint8_t> dst, uint64_t canonical_base, AdlerDelta* delta)
      : dst_(dst), base_(canonical_base), delta_(delta) {}

  Status OnRun(uint64_t position, std::span<const uint8_t> bytes) override {
    if (position > dst_.size() || bytes.size() > dst_.size() - position) {
      return DataLoss("decoded bytes at " + std::to_string(position) + " (+" +
                      std::to_string(bytes.size()) + ") fall outside the " +
                      std::to_string(dst_.size()) + "-byte range they patch");
    }
    uint8_t* d = dst_.data() + position;
    delta_->AddXorRun(base_ + position, std::span<const uint8_t>(d, bytes.size()), bytes);
    for (size_t i = 0; i < bytes.size(); ++i) d[i] ^= bytes[i];
    return Status::Ok();
  }

 private:
  std::span<uint8_t> dst_;
  uint64_t base_;
  AdlerDelta* delta_;
};

}  // namespace deltakv::deltasync
