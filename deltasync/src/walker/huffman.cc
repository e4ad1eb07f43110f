#include "walker/huffman.h"

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstring>
#include <string>

#include "walker/bit_reader.h"
#include "walker/fse_table.h"

namespace deltakv::deltasync::walker {
namespace {

constexpr uint32_t kMaxWeights = 255;  // explicit weights; the last symbol's weight is implied
constexpr uint32_t kWeightsFseMaxLog = 6;

// Decodes FSE-compressed weights: two interleaved states over one backward stream.
Status DecodeFseWeights(std::span<const uint8_t> in, uint8_t* weights, uint32_t* count) {
  FseCounts counts;
  size_t header = 0;
  RETURN_IF_ERROR(
      ReadFseCounts(in, 255, kWeightsFseMaxLog, &counts, &header).WithPrefix("Huffman weights"));
  FseTable table;
  BuildFseTable(counts, &table);
  FastBackwardBitReader br;
  if (!br.Init(in.data() + header, in.size() - header)) {
    return DataLoss("Huffman weights: FSE bitstream empty or without end marker");
  }
  uint32_t state1 = static_cast<uint32_t>(br.Read(table.log));
  uint32_t state2 = static_cast<uint32_t>(br.Read(table.log));
  uint32_t n = 0;
  for (;;) {
    br.Reload();  // each turn reads at most 2 x 6 bits
    if (n + 2 > kMaxWeights) return DataLoss("Huffman weights: more than 255 weights");
    const FseCell& c1 = table.cells[state1];
    weights[n++] = c1.symbol;
    state1 = c1.base + static_cast<uint32_t>(br.Read(c1.nb_bits));
    if (br.overflowed()) {
      weights[n++] = table.cells[state2].symbol;
      break;
    }
    if (n + 2 > kMaxWeights) return DataLoss("Huffman weights: more than 255 weights");
    const FseCell& c2 = table.cells[state2];
    weights[n++] = c2.symbol;
    state2 = c2.base + static_cast<uint32_t>(br.Read(c2.nb_bits));
    if (br.overflowed()) {
      weights[n++] = table.cells[state1].symbol;
      break;
    }
  }
  *count = n;
  return Status::Ok();
}

// libzstd 1.5.4's fast 4-stream loop checks neither the end marker nor the exact end of each
// stream (it only counts symbols, and a stream may read into its neighbour), and its
// double-symbol decoder clamps an over-read of the last symbol. RFC 8878 streams carry an end
// marker and end exactly, so those errors are flagged as tolerated by libzstd.
Status NoEndMarker(int stream, bool four_streams) {
  return DataLoss("Huffman stream " + std::to_string(stream) + ": empty or without end marker" +
                  (four_streams ? " (libzstd tolerates)" : ""));
}

// One symbol: the table cell of the next `log` bits, then its code length consumed.
inline uint8_t DecodeSymbol(const HuffmanTable& table, FastBackwardBitReader& br, unsigned log) {
  const HuffmanCell cell = table.cells[br.Peek(log)];
  br.Skip(cell.nb_bits);
  return cell.symbol;
}

// Decodes n symbols from `br`. Codes are at most kHuffmanMaxLog (12) bits: four symbols per
// refill of the container's 56 bits, with room to peek the table's width after the fourth.
inline void DecodeSymbols(const HuffmanTable& table, FastBackwardBitReader& br, uint8_t* out,
                          size_t n) {
  static_assert(4 * kHuffmanMaxLog + kHuffmanMaxLog <= 64);
  const unsigned log = table.log;
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    br.Reload();
    for (size_t k = 0; k < 4; ++k) {
      out[i + k] = DecodeSymbol(table, br, log);
    }
  }
  br.Reload();
  for (; i < n; ++i) {
    out[i] = DecodeSymbol(table, br, log);
  }
}

// The stream's end: exactly at its start.
Status CheckStreamEnd(const FastBackwardBitReader& br, int stream, bool four_streams) {
  if (br.overflowed()) {
    return DataLoss("Huffman stream " + std::to_string(stream) +
                    ": read past its start (libzstd tolerates)");
  }
  if (!br.finished()) {
    return DataLoss("Huffman stream " + std::to_string(stream) + ": not fully consumed" +
                    (four_streams ? " (libzstd tolerates)" : ""));
  }
  return Status::Ok();
}

Status DecodeStream(const HuffmanTable& table, std::span<const uint8_t> in, uint8_t* out, size_t n,
                    int stream, bool four_streams) {
  FastBackwardBitReader br;
  if (!br.Init(in.data(), in.size())) return NoEndMarker(stream, four_streams);
  DecodeSymbols(table, br, out, n);
  return CheckStreamEnd(br, stream, four_streams);
}

}  // namespace

Status ReadHuffmanTable(std::span<const uint8_t> in, HuffmanTable* table, size_t* consumed) {
  if (in.empty()) return DataLoss("Huffman tree description missing");
  std::array<uint8_t, kMaxWeights + 1> weights{};
  uint32_t count = 0;
  const uint8_t header = in[0];
  if (header < 128) {
    if (header == 0 || static_cast<size_t>(header) + 1 > in.size()) {
      return DataLoss("Huffman tree description: compressed weights size " +
                      std::to_string(header) + " invalid or past the literals section");
    }
    RETURN_IF_ERROR(DecodeFseWeights(in.subspan(1, header), weights.data(), &count));
    *consumed = 1 + static_cast<size_t>(header);
  } else {
    count = header - 127u;
    const size_t bytes = (count + 1) / 2;
    if (1 + bytes > in.size()) return DataLoss("Huffman tree description: weights truncated");
    for (uint32_t i = 0; i < count; ++i) {
      const uint8_t b = in[1 + i / 2];
      weights[i] = (i % 2 == 0) ? static_cast<uint8_t>(b >> 4) : static_cast<uint8_t>(b & 15);
    }
    *consumed = 1 + bytes;
  }
  // The largest weight first (a byte maximum the compiler vectorizes), so that the rank counts
  // below can index by weight.
  uint8_t max_weight = 0;
  for (uint32_t i = 0; i < weights.size(); ++i) max_weight = std::max(max_weight, weights[i]);
  if (max_weight > kHuffmanMaxLog) {
    for (uint32_t i = 0; i < count; ++i) {
      if (weights[i] > kHuffmanMaxLog) {
        return DataLoss("Huffman weight " + std::to_string(weights[i]) + " above maximum " +
                        std::to_string(kHuffmanMaxLog));
      }
    }
  }
  // Rank counts per quarter of the symbols (0-63, 64-127, ...), the four quarters in lockstep:
  // one histogram would chain every increment through the same counter. The slots past
  // `count` hold weight 0.
  constexpr uint32_t kQuarter = (kMaxWeights + 1) / 4;
  constexpr uint32_t kRanks = kHuffmanMaxLog + 2;
  std::array<std::array<uint32_t, kRanks>, 4> quarter_count{};
  for (uint32_t i = 0; i < kQuarter; ++i) {
#pragma GCC unroll 4
    for (uint32_t q = 0; q < 4; ++q) ++quarter_count[q][weights[q * kQuarter + i]];
  }
  std::array<uint32_t, kRanks> rank_count;
  for (uint32_t w = 0; w < kRanks; ++w) {
    rank_count[w] =
        quarter_count[0][w] + quarter_count[1][w] + quarter_count[2][w] + quarter_count[3][w];
  }
  // Weight sum: 2^(w-1) per symbol of weight w > 0.
  uint64_t total = 0;
  for (uint32_t w = 1; w <= kHuffmanMaxLog; ++w) total += uint64_t{rank_count[w]} << (w - 1);
  if (total == 0) return DataLoss("Huffman weights are all zero");
  const uint32_t log = static_cast<uint32_t>(std::bit_width(total));  // highbit + 1
  if (log > kHuffmanMaxLog) {
    return DataLoss("Huffman code length " + std::to_string(log) + " above maximum");
  }
  const uint64_t rest = (uint64_t{1} << log) - total;
  if (!std::has_single_bit(rest)) {
    return DataLoss("Huffman weights do not complete a prefix code");
  }
  const uint32_t last_weight = static_cast<uint32_t>(std::bit_width(rest));
  weights[count] = static_cast<uint8_t>(last_weight);  // was 0
  --quarter_count[count / kQuarter][0];
  ++quarter_count[count / kQuarter][last_weight];
  --rank_count[0];
  ++rank_count[last_weight];
  if (rank_count[1] < 2 || (rank_count[1] & 1) != 0) {
    return DataLoss("Huffman weights: odd or too small count of weight-1 symbols");
  }
  // Canonical assignment: lower weights (longer codes) take the lower table indices. Symbols in
  // canonical order, each quarter from where its weight's earlier quarters end, again four
  // chains in lockstep.
  table->log = log;
  std::array<uint32_t, kRanks + 1> rank_start{};  // canonical order: by weight, then symbol
  for (uint32_t w = 0; w < kRanks; ++w) rank_start[w + 1] = rank_start[w] + rank_count[w];
  std::array<std::array<uint32_t, kRanks>, 4> next;
  for (uint32_t w = 0; w < kRanks; ++w) {
    uint32_t at = rank_start[w];
    for (uint32_t q = 0; q < 4; ++q) {
      next[q][w] = at;
      at += quarter_count[q][w];
    }
  }
  std::array<uint8_t, kMaxWeights + 1> order;
  for (uint32_t i = 0; i < kQuarter; ++i) {
#pragma GCC unroll 4
    for (uint32_t q = 0; q < 4; ++q) {
      const uint32_t s = q * kQuarter + i;
      order[next[q][weights[s]]++] = static_cast<uint8_t>(s);
    }
  }
  // The cells in increasing address order, weight by weight, so that the length of a symbol's
  // cells is the same across the inner loop: symbols of up to four cells are one whole 8-byte
  // store of four cells each (the cells a short run writes past its end belong to the symbols
  // that follow and are rewritten).
  HuffmanCell* out = table->cells.data();
  for (uint32_t w = 1; w <= log; ++w) {
    const uint32_t len = (1u << w) >> 1;
    static_assert(sizeof(HuffmanCell) == 2 && offsetof(HuffmanCell, nb_bits) == 1);
    const uint64_t bits = uint64_t{log + 1 - w} << 8;  // HuffmanCell{symbol, nb_bits}
    for (uint32_t k = rank_start[w]; k < rank_start[w + 1]; ++k) {
      const uint64_t four = (order[k] | bits) * 0x0001000100010001ull;
      for (uint32_t i = 0; i < len; i += 4) std::memcpy(out + i, &four, 8);
      out += len;
    }
  }
  return Status::Ok();
}

Status DecodeHuffmanLiterals(const HuffmanTable& table, std::span<const uint8_t> in,
                             bool four_streams, std::span<uint8_t> out) {
  if (!four_streams) return DecodeStream(table, in, out.data(), out.size(), 1, false);
  if (in.size() < 10) return DataLoss("Huffman 4-stream literals shorter than 10 bytes");
  if (out.size() < 6) return DataLoss("Huffman 4-stream literals with fewer than 6 symbols");
  const size_t s1 = in[0] | (size_t{in[1]} << 8);
  const size_t s2 = in[2] | (size_t{in[3]} << 8);
  const size_t s3 = in[4] | (size_t{in[5]} << 8);
  if (6 + s1 + s2 + s3 >= in.size()) {
    return DataLoss("Huffman jump table: stream sizes exceed the literals section");
  }
  const size_t s4 = in.size() - 6 - s1 - s2 - s3;
  const size_t segment = (out.size() + 3) / 4;
  const size_t sizes[4] = {s1, s2, s3, s4};
  std::span<const uint8_t> streams[4];
  size_t counts[4];
  FastBackwardBitReader br[4];
  bool marked = true;
  for (size_t i = 0, in_pos = 6; i < 4; in_pos += sizes[i], ++i) {
    streams[i] = in.subspan(in_pos, sizes[i]);
    counts[i] = i < 3 ? segment : out.size() - 3 * segment;
    marked = marked && br[i].Init(streams[i].data(), streams[i].size());
  }
  if (!marked) {
    // Decode one by one, so the first stream at fault is the one reported.
    for (int i = 0; i < 4; ++i) {
      RETURN_IF_ERROR(DecodeStream(table, streams[i], out.data() + segment * i, counts[i], i + 1,
                                   true));
    }
    return Status::Ok();
  }
  // The four streams in lockstep (independent dependency chains), four symbols each per
  // refill, as long as every stream has four left; then each stream's rest on its own.
  const unsigned log = table.log;
  const size_t common = std::min(counts[3], segment) & ~size_t{3};
  uint8_t* dst[4] = {out.data(), out.data() + segment, out.data() + 2 * segment,
                     out.data() + 3 * segment};
  {
    // One local reader per stream, so that their containers stay in registers (through an
    // array the compiler loads and stores each reader's position around every symbol).
    FastBackwardBitReader r0 = br[0], r1 = br[1], r2 = br[2], r3 = br[3];
    uint8_t* const o = out.data();
    const size_t at2 = 2 * segment, at3 = 3 * segment;
    for (size_t i = 0; i < common; i += 4) {
      r0.Reload();
      r1.Reload();
      r2.Reload();
      r3.Reload();
#pragma GCC unroll 4
      for (size_t k = i; k < i + 4; ++k) {
        o[k] = DecodeSymbol(table, r0, log);
        o[segment + k] = DecodeSymbol(table, r1, log);
        o[at2 + k] = DecodeSymbol(table, r2, log);
        o[at3 + k] = DecodeSymbol(table, r3, log);
      }
    }
    br[0] = r0;
    br[1] = r1;
    br[2] = r2;
    br[3] = r3;
  }
  for (int s = 0; s < 4; ++s) DecodeSymbols(table, br[s], dst[s] + common, counts[s] - common);
  for (int s = 0; s < 4; ++s) RETURN_IF_ERROR(CheckStreamEnd(br[s], s + 1, true));
  return Status::Ok();
}

}  // namespace deltakv::deltasync::walker
