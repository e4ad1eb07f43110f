#include "walker/block_decoder.h"

namespace deltakv::deltasync::walker {

Status BlockDecoder::Decode(std::span<const uint8_t> block, const SequenceLimits& limits,
                            FrameOutput* out, BlockStats* stats) {
  if (block.size() < 2) return DataLoss("compressed block shorter than 2 bytes");
  Literals literals;
  size_t used = 0;
  RETURN_IF_ERROR(DecodeLiterals(block, limits.block_max, &literals_, &literals, &used));
  SequenceResult result;
  RETURN_IF_ERROR(
      DecodeAndExecuteSequences(block.subspan(used), literals, limits, &sequences_, out, &result));
  stats->sequences = result.sequences;
  stats->literal_bytes = literals.size;
  stats->output = result.block_output;
  stats->compat_flags = result.compat_flags;
  return Status::Ok();
}

}  // namespace deltakv::deltasync::walker
