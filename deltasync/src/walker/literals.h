// Literals_Section of a compressed block: header parsing and decoding of raw, RLE, Huffman
// (1 or 4 streams) and treeless literals. Raw literals are referenced in place.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "base/status.h"
#include "walker/huffman.h"

namespace deltakv::deltasync::walker {

// The literals of one block: `size` bytes, either at `bytes` or `size` copies of `rle_value`.
struct Literals {
  // Null for RLE literals. bytes[size] is readable too when a sequences section follows (raw
  // literals are followed by it in the block; decoded ones have a byte of room after them).
  const uint8_t* bytes = nullptr;
  uint8_t rle_value = 0;
  size_t size = 0;
  // Bytes readable from `bytes` on (at least `size`): decoded literals have 8 bytes of room
  // after them, raw ones the rest of their block, so short runs can be loaded as whole words.
  size_t readable = 0;
};

// Huffman state carried across the blocks of a frame (for treeless literals).
struct LiteralsState {
  HuffmanTable huffman;
  bool has_huffman = false;
  // The tree description `huffman` was built from (self-delimiting, at most 129 bytes): a block
  // that repeats it reuses the table unbuilt. 0: nothing reusable.
  uint8_t description[160];
  size_t description_size = 0;
  std::vector<uint8_t> buffer;  // decoded Huffman literals of the current block
};

// Decodes the literals section at the start of `block`. `block_max` is the frame's
// Block_Maximum_Size. On success sets `out` (valid until the next call or while `block` lives)
// and `consumed` (section size). DataLoss messages carry no offset.
Status DecodeLiterals(std::span<const uint8_t> block, size_t block_max, LiteralsState* state,
                      Literals* out, size_t* consumed);

}  // namespace deltakv::deltasync::walker
