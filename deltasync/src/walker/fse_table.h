// FSE (tANS) decoding tables: reading a table description (normalized counts) and building the
// state table, as used by the sequence section (LL/OF/ML codes) and by Huffman weights.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

#include "base/status.h"

namespace deltakv::deltasync::walker {

inline constexpr uint32_t kFseMaxLog = 9;
inline constexpr uint32_t kFseMaxSymbols = 256;
// Upper bound on the bytes of one sequence-table description (4 + 53 symbols x 10 bits, plus
// zero-run flags), used to keep a copy for reuse.
inline constexpr size_t kFseMaxDescriptionBytes = 128;

// One decoding state: emit `symbol`, then next state = base + read(nb_bits).
struct FseCell {
  uint16_t base;
  uint8_t symbol;
  uint8_t nb_bits;
};

struct FseTable {
  uint32_t log = 0;  // accuracy log; the table has 1 << log cells
  std::array<FseCell, 1u << kFseMaxLog> cells;
};

// A sequence-code decoding state with its code resolved (the layout libzstd's decoder uses):
// the value is value_base + read(extra_bits), then next state = next_base + read(nb_bits). One
// load per table per sequence, no second lookup of the code's base and extra bits.
struct SequenceCell {
  uint32_t value_base;
  uint8_t extra_bits;
  uint8_t nb_bits;
  uint16_t next_base;
};

struct SequenceCodeTable {
  uint32_t log = 0;
  std::array<SequenceCell, 1u << kFseMaxLog> cells;
};

// Normalized counts read from a table description; -1 means "less than 1".
struct FseCounts {
  uint32_t log = 0;
  uint32_t num_symbols = 0;  // symbols 0..num_symbols-1 are described
  std::array<int16_t, kFseMaxSymbols> prob;
};

// Reads an FSE table description from the start of `in`. On success stores the counts and
// the number of bytes used. Fails (DataLoss message, no offset) when the accuracy log exceeds
// `max_log`, a symbol exceeds `max_symbol`, the counts do not sum to 1 << log, or the
// description runs past `in`.
Status ReadFseCounts(std::span<const uint8_t> in, uint32_t max_symbol, uint32_t max_log,
                     FseCounts* counts, size_t* consumed);

// Builds the decoding table for valid counts (as produced by ReadFseCounts).
void BuildFseTable(const FseCounts& counts, FseTable* table);

// Builds the decoding table for valid counts with each symbol's code resolved through
// `value_base` and `extra_bits` (indexed by symbol; every symbol the counts use must be listed).
void BuildSequenceCodeTable(const FseCounts& counts, const uint32_t* value_base,
                            const uint8_t* extra_bits, SequenceCodeTable* table);

// A one-state table that always yields `symbol`'s value and reads no state bits (RLE mode).
void BuildRleSequenceCodeTable(uint8_t symbol, const uint32_t* value_base,
                               const uint8_t* extra_bits, SequenceCodeTable* table);

// A one-state table that always yields `symbol` and reads no bits (RLE mode).
void BuildRleFseTable(uint8_t symbol, FseTable* table);

}  // namespace deltakv::deltasync::walker
