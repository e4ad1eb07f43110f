// Sequences_Section of a compressed block: the header (count, table modes, table
// descriptions), the backward FSE bitstream, repeat-offset resolution and execution of each
// sequence against the literals and the FrameOutput.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "base/status.h"
#include "walker/frame_output.h"
#include "walker/fse_table.h"
#include "walker/literals.h"

namespace deltakv::deltasync::walker {

// One of the three sequence tables (literal lengths, offsets, match lengths) as a block uses
// it: the predefined table, an RLE table, or one built from a description. A built table is
// kept with the description it came from, so a later block that repeats the same description
// bytes (common: consecutive blocks of a delta have the same statistics) reuses it unbuilt.
struct SequenceTable {
  const SequenceCodeTable* current = nullptr;  // what the block decodes with
  SequenceCodeTable built;                     // from the description in `description`
  SequenceCodeTable rle;
  uint8_t description[kFseMaxDescriptionBytes];
  size_t description_size = 0;  // 0: `built` holds nothing reusable
};

// Sequence decoding state carried across the compressed blocks of a frame.
struct SequenceState {
  SequenceTable ll, of, ml;
  bool has_tables = false;  // set by the first block with sequences (for Repeat mode)
  uint64_t rep[3] = {1, 4, 8};
  void Reset() {
    has_tables = false;
    rep[0] = 1;
    rep[1] = 4;
    rep[2] = 8;
  }
};

struct SequenceLimits {
  uint64_t window = 0;       // largest offset allowed by the spec
  uint64_t block_max = 0;    // Block_Maximum_Size
  uint64_t output_room = 0;  // bytes the frame may still produce (max_output, FCS)
  // false: decode and check every sequence as usual, but only advance the output position over
  // the block (FrameOutput::Skip): nothing is recorded (WalkerOptions::decode_only).
  bool execute = true;
};

struct SequenceResult {
  uint64_t sequences = 0;
  uint64_t block_output = 0;  // bytes produced by the block, remaining literals included
  uint32_t compat_flags = 0;
};

// Decodes the sequences section `in` (the block after its literals section) and executes it,
// appending the block's output to `out` (or, with limits.execute false, skipping over it). Fails
// with a DataLoss message (no offset) on corrupt input, ResourceExhausted when `output_room` is
// exceeded.
Status DecodeAndExecuteSequences(std::span<const uint8_t> in, const Literals& literals,
                                 const SequenceLimits& limits, SequenceState* state,
                                 FrameOutput* out, SequenceResult* result);

}  // namespace deltakv::deltasync::walker
