#include "walker/literals.h"

#include <cstring>
#include <string>

namespace deltakv::deltasync::walker {
namespace {

constexpr size_t kLibzstdBlockMax = 128 * 1024;

Status CheckLiteralSize(size_t size, size_t block_max) {
  if (size <= block_max) return Status::Ok();
  if (size <= kLibzstdBlockMax) {
    return DataLoss("literals size " + std::to_string(size) + " above Block_Maximum_Size " +
                    std::to_string(block_max) + " (libzstd tolerates)");
  }
  return DataLoss("literals size " + std::to_string(size) + " above 128 KiB");
}

}  // namespace

Status DecodeLiterals(std::span<const uint8_t> block, size_t block_max, LiteralsState* state,
                      Literals* out, size_t* consumed) {
  if (block.empty()) return DataLoss("literals section missing");
  const uint8_t b0 = block[0];
  const unsigned type = b0 & 3;
  const unsigned size_format = (b0 >> 2) & 3;
  if (type <= 1) {  // raw or RLE
    size_t header;
    size_t size;
    if ((size_format & 1) == 0) {
      header = 1;
      size = b0 >> 3;
    } else if (size_format == 1) {
      if (block.size() < 2) return DataLoss("literals header truncated");
      header = 2;
      size = (b0 | (size_t{block[1]} << 8)) >> 4;
    } else {
      if (block.size() < 3) return DataLoss("literals header truncated");
      header = 3;
      size = (b0 | (size_t{block[1]} << 8) | (size_t{block[2]} << 16)) >> 4;
    }
    RETURN_IF_ERROR(CheckLiteralSize(size, block_max));
    if (type == 0) {
      if (header + size > block.size()) {
        return DataLoss("raw literals (" + std::to_string(size) + " bytes) past the block end");
      }
      *out = Literals{block.data() + header, 0, size, block.size() - header};
      *consumed = header + size;
    } else {
      if (header + 1 > block.size()) return DataLoss("RLE literals byte missing");
      *out = Literals{nullptr, block[header], size, 0};
      *consumed = header + 1;
    }
    return Status::Ok();
  }
  // Huffman-compressed (2) or treeless (3).
  if (block.size() < 5) return DataLoss("compressed literals in a block below 5 bytes");
  const uint64_t lhc =
      b0 | (uint64_t{block[1]} << 8) | (uint64_t{block[2]} << 16) | (uint64_t{block[3]} << 24);
  size_t header;
  size_t size;
  size_t compressed;
  bool four_streams = true;
  switch (size_format) {
    case 0:
      four_streams = false;
      [[fallthrough]];
    case 1:
      header = 3;
      size = (lhc >> 4) & 0x3FF;
      compressed = (lhc >> 14) & 0x3FF;
      break;
    case 2:
      header = 4;
      size = (lhc >> 4) & 0x3FFF;
      compressed = lhc >> 18;
      break;
    default:
      header = 5;
      size = (lhc >> 4) & 0x3FFFF;
      compressed = (lhc >> 22) + (size_t{block[4]} << 10);
      break;
  }
  RETURN_IF_ERROR(CheckLiteralSize(size, block_max));
  if (four_streams && size < 6) return DataLoss("4-stream literals with fewer than 6 bytes");
  if (header + compressed > block.size()) {
    return DataLoss("compressed literals (" + std::to_string(compressed) +
                    " bytes) past the block end");
  }
  std::span<const uint8_t> section = block.subspan(header, compressed);
  if (type == 2) {
    size_t tree = state->description_size;
    if (tree == 0 || section.size() < tree ||
        std::memcmp(section.data(), state->description, tree) != 0) {
      state->description_size = 0;
      RETURN_IF_ERROR(ReadHuffmanTable(section, &state->huffman, &tree));
      if (tree <= sizeof(state->description)) {
        std::memcpy(state->description, section.data(), tree);
        state->description_size = tree;
      }
    }
    state->has_huffman = true;
    section = section.subspan(tree);
  } else if (!state->has_huffman) {
    return DataLoss("treeless literals without an earlier Huffman table in the frame");
  }
  if (state->buffer.size() < size + 8) state->buffer.resize(size + 8);  // a word of room
  RETURN_IF_ERROR(DecodeHuffmanLiterals(state->huffman, section, four_streams,
                                        std::span<uint8_t>(state->buffer.data(), size)));
  *out = Literals{state->buffer.data(), 0, size, size + 8};
  *consumed = header + compressed;
  return Status::Ok();
}

}  // namespace deltakv::deltasync::walker
