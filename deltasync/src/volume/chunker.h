// Private: the steps of ChunkFile (deltasync/volume.h) for a reader that sees a file's bytes in
// order rather than all at once (volume/source_chunk_stream.h).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "deltasync/safetensors.h"
#include "deltasync/volume.h"

namespace deltakv::deltasync {

// Returns the length of the content-defined chunk that starts at data[0] (0 for empty data).
// The cut depends on at most kCdcMaxChunk bytes: `data` must hold the rest of the file or at
// least that many bytes for the cut ChunkFile makes.
uint64_t CdcCutLength(std::span<const uint8_t> data);

// Returns the chunks of a safetensors file with this (validated) header: the header chunk,
// then each tensor's bytes in data order in pieces of at most piece_size; zero-size tensors
// add none. REQUIRES: piece_size > 0.
std::vector<ChunkSpan> SafetensorsChunks(const SafetensorsHeader& header, uint64_t piece_size);

}  // namespace deltakv::deltasync
