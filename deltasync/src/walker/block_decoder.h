// Compressed_Block decoding: the entropy state a frame carries across its blocks (Huffman
// table, FSE tables, repeat offsets) and the decode of one block into the FrameOutput.
#pragma once

#include <cstdint>
#include <span>

#include "base/status.h"
#include "walker/frame_output.h"
#include "walker/literals.h"
#include "walker/sequences.h"

namespace deltakv::deltasync::walker {

struct BlockStats {
  uint64_t sequences = 0;
  uint64_t literal_bytes = 0;
  uint64_t output = 0;
  uint32_t compat_flags = 0;
};

class BlockDecoder {
 public:
  // Forgets all entropy state (start of a frame).
  void ResetFrame() {
    literals_.has_huffman = false;
    sequences_.Reset();
  }

  // Decodes one compressed block `block` and appends its output to `out`.
  Status Decode(std::span<const uint8_t> block, const SequenceLimits& limits, FrameOutput* out,
                BlockStats* stats);

 private:
  LiteralsState literals_;
  SequenceState sequences_;
};

}  // namespace deltakv::deltasync::walker
