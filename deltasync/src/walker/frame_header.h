// Frame-level constants and Frame_Header parsing (RFC 8878 section 3.1.1.1).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "base/status.h"

namespace deltakv::deltasync::walker {

inline constexpr uint32_t kZstdMagic = 0xFD2FB528u;
inline constexpr uint32_t kSkippableMagicMask = 0xFFFFFFF0u;
inline constexpr uint32_t kSkippableMagic = 0x184D2A50u;
inline constexpr uint32_t kLegacyMagicFirst = 0xFD2FB522u;  // zstd v0.2 .. v0.7
inline constexpr uint32_t kLegacyMagicLast = 0xFD2FB527u;
inline constexpr uint64_t kMaxBlockSize = 128 * 1024;

struct FrameHeader {
  uint64_t window_size = 0;
  uint64_t block_max = 0;     // min(window_size, 128 KiB)
  uint64_t content_size = 0;  // valid when has_content_size
  bool has_content_size = false;
  bool single_segment = false;
  bool has_checksum = false;
  uint32_t dictionary_id = 0;
};

// Size of the Frame_Header (descriptor included) implied by its descriptor byte `fhd`.
// Fails when the reserved bit is set.
Status FrameHeaderSize(uint8_t fhd, size_t* size);

// Parses a complete Frame_Header (descriptor first, without the magic). `header.size()` must
// be FrameHeaderSize(header[0]).
Status ParseFrameHeader(std::span<const uint8_t> header, FrameHeader* out);

}  // namespace deltakv::deltasync::walker
