// Private: finds runs of nonzero bytes in a dense buffer and hands them to a NonzeroSink.
#pragma once

#include <cstdint>
#include <span>

#include "deltasync/xor_decoder.h"

namespace deltakv::deltasync {

// Calls sink.OnRun(base + start, run) for each maximal run of nonzero bytes in `bytes`, where
// runs separated by fewer than 16 zero bytes are merged. Adds the number of nonzero bytes to
// *nonzero. Skips zero stretches 8 bytes at a time.
Status ScanNonzeroRuns(std::span<const uint8_t> bytes, uint64_t base, NonzeroSink& sink,
                       uint64_t* nonzero);

}  // namespace deltakv::deltasync
