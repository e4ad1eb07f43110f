// Verification of one tensor's staged change from the partial Adler-32 sums every rank
// returned (already merged with AdlerDelta::Merge).
//
// Incremental: A' = A + S1, B' = B + n*S1 - S2 from the parent checksum; must equal the
// delta's new checksum. Full (tensors planned in full, under 4 KiB): the merged sums of the
// new bytes against zero bytes, applied to the checksum of n zero bytes, must equal it too.
//
// Thread-safety: pure functions.
#pragma once

#include <string>

#include "base/status.h"
#include "deltasync/adler32.h"
#include "deltasync/write_plan.h"

namespace deltakv::deltasync {

// Adler-32 of `n` zero bytes: A = 1, B = n mod 65521.
uint32_t Adler32OfZeros(uint64_t n);

// DataLoss naming the tensor with expected and derived values on mismatch.
Status VerifyStagedTensor(const std::string& name, const PlanTensor& t,
                          const AdlerDelta& incremental, const AdlerDelta& full);

}  // namespace deltakv::deltasync
