// Private: the chunk object format (VOLUME.md, "Chunk objects").
//
// A chunk object is a 16-byte header (magic "DKVC", version 1, codec 0 raw / 1 zstd, two zero
// bytes, u64 little-endian uncompressed size) followed by the payload.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "base/status.h"

namespace deltakv::deltasync {

inline constexpr size_t kChunkHeaderBytes = 16;

// Returns the object for `chunk`: zstd-compressed when that is smaller, raw otherwise.
std::string EncodeChunkObject(std::span<const uint8_t> chunk);

// Returns the largest object EncodeChunkObject makes for a chunk of `chunk_size` bytes.
uint64_t MaxChunkObjectBytes(uint64_t chunk_size);

// Returns the chunk bytes of `object`, checked against the manifest's size and digest (64 hex).
// DataLoss naming `key` for a bad header, a size other than `expected_size`, a payload that does
// not decompress to exactly that size, or bytes whose sha256 is not `expected_digest`.
StatusOr<std::string> DecodeChunkObject(const std::string& key, std::string_view object,
                                        uint64_t expected_size, std::string_view expected_digest);

// Returns a delta object (codec 2): the header for `chunk.size()` bytes, then one zstd frame
// (level 3, with a content checksum) of `base` XOR `chunk`, exactly the frames of a delta shard
// (FORMAT.md, section 2.1). REQUIRES: base.size() == chunk.size().
std::string EncodeXorChunkObject(std::span<const uint8_t> chunk, std::span<const uint8_t> base);

// Returns `base` XOR the bytes a delta object decodes to. DataLoss naming `key` for a bad
// header, a codec other than 2, a size other than base.size(), or a payload that does not
// decode to exactly that many bytes. The caller verifies the result's digest.
StatusOr<std::string> ApplyXorChunkObject(const std::string& key, std::string_view object,
                                          std::string_view base);

}  // namespace deltakv::deltasync
