#include "deltasync/plan_verify.h"

#include "deltasync/delta_manifest.h"

namespace deltakv::deltasync {

uint32_t Adler32OfZeros(uint64_t n) {
  return (static_cast<uint32_t>(n % kAdlerModulus) << 16) | 1u;
}

Status VerifyStagedTensor(const std::string& name, const PlanTensor& t,
                          const AdlerDelta& incremental, const AdlerDelta& full) {
  uint32_t derived = incremental.Apply(t.parent_adler32, t.canonical_length);
  if (derived != t.adler32) {
    return DataLoss("tensor '" + name + "': new checksum mismatch: expected 0x" +
                    FormatChecksum(t.adler32) + ", derived 0x" + FormatChecksum(derived) +
                    " from the engine's current bytes (the engine does not hold the delta's "
                    "parent, or the delta is corrupt)");
  }
  if (t.flags & kPlanTensorFullVerify) {
    uint32_t whole = full.Apply(Adler32OfZeros(t.canonical_length), t.canonical_length);
    if (whole != t.adler32) {
      return DataLoss("tensor '" + name + "': full checksum of the staged tensor is 0x" +
                      FormatChecksum(whole) + ", expected 0x" + FormatChecksum(t.adler32));
    }
  }
  return Status::Ok();
}

}  // namespace deltakv::deltasync
