// Huffman literal coding: reading a tree description (direct or FSE-compressed weights),
// building the canonical decoding table, and decoding 1 or 4 interleaved backward streams.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

#include "base/status.h"

namespace deltakv::deltasync::walker {

// RFC 8878 caps code lengths at 11 bits; libzstd accepts 12, and so do we.
inline constexpr uint32_t kHuffmanMaxLog = 12;

struct HuffmanCell {
  uint8_t symbol;
  uint8_t nb_bits;
};

struct HuffmanTable {
  uint32_t log = 0;  // maximum code length; the table has 1 << log cells
  std::array<HuffmanCell, (1u << kHuffmanMaxLog) + 4> cells;  // + 4: room for whole 8-byte stores
};

// Reads a Huffman tree description from the start of `in` and builds `table`. Stores the bytes
// used in `consumed`. Fails with a DataLoss message (no offset) on any malformed field.
Status ReadHuffmanTable(std::span<const uint8_t> in, HuffmanTable* table, size_t* consumed);

// Decodes `out.size()` literals from `in` (the streams after the tree description): one stream,
// or four with a 6-byte jump table. Every stream must end exactly at its start.
Status DecodeHuffmanLiterals(const HuffmanTable& table, std::span<const uint8_t> in,
                             bool four_streams, std::span<uint8_t> out);

}  // namespace deltakv::deltasync::walker
