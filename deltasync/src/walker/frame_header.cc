#include "walker/frame_header.h"

#include <algorithm>

namespace deltakv::deltasync::walker {
namespace {

constexpr size_t kDictionaryIdBytes[4] = {0, 1, 2, 4};

size_t ContentSizeBytes(uint8_t fhd) {
  const unsigned flag = fhd >> 6;
  if (flag == 0) return (fhd & 0x20) ? 1 : 0;
  return size_t{1} << flag;  // 2, 4, 8
}

uint64_t LoadLE(const uint8_t* p, size_t n) {
  uint64_t v = 0;
  for (size_t i = 0; i < n; ++i) v |= uint64_t{p[i]} << (8 * i);
  return v;
}

}  // namespace

Status FrameHeaderSize(uint8_t fhd, size_t* size) {
  if (fhd & 0x08) return DataLoss("reserved bit set in the frame header descriptor");
  const bool single_segment = (fhd & 0x20) != 0;
  *size = 1 + (single_segment ? 0 : 1) + kDictionaryIdBytes[fhd & 3] + ContentSizeBytes(fhd);
  return Status::Ok();
}

Status ParseFrameHeader(std::span<const uint8_t> header, FrameHeader* out) {
  const uint8_t fhd = header[0];
  size_t pos = 1;
  *out = FrameHeader{};
  out->single_segment = (fhd & 0x20) != 0;
  out->has_checksum = (fhd & 0x04) != 0;
  if (!out->single_segment) {
    const uint8_t wd = header[pos++];
    const unsigned log = 10 + (wd >> 3);
    const uint64_t base = uint64_t{1} << log;
    out->window_size = base + (base / 8) * (wd & 7);
  }
  const size_t did_bytes = kDictionaryIdBytes[fhd & 3];
  out->dictionary_id = static_cast<uint32_t>(LoadLE(header.data() + pos, did_bytes));
  pos += did_bytes;
  const size_t fcs_bytes = ContentSizeBytes(fhd);
  if (fcs_bytes > 0) {
    out->has_content_size = true;
    out->content_size = LoadLE(header.data() + pos, fcs_bytes);
    if (fcs_bytes == 2) out->content_size += 256;
    pos += fcs_bytes;
  }
  if (out->single_segment) out->window_size = out->content_size;
  out->block_max = std::min<uint64_t>(out->window_size, kMaxBlockSize);
  return Status::Ok();
}

}  // namespace deltakv::deltasync::walker
