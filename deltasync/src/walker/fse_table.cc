#include "walker/fse_table.h"

#include <bit>
#include <cstring>
#include <string>

#include "walker/bit_reader.h"

namespace deltakv::deltasync::walker {

Status ReadFseCounts(std::span<const uint8_t> in, uint32_t max_symbol, uint32_t max_log,
                     FseCounts* counts, size_t* consumed) {
  if (in.empty()) return DataLoss("FSE table description is empty");
  ForwardBitReader br(in.data(), in.size());
  const uint32_t log = static_cast<uint32_t>(br.Read(4)) + 5;
  if (log > max_log) {
    return DataLoss("FSE accuracy log " + std::to_string(log) + " above maximum " +
                    std::to_string(max_log));
  }
  counts->log = log;
  int32_t threshold = 1 << log;
  unsigned nb_bits = log + 1;
  int32_t remaining = threshold + 1;
  uint32_t symbol = 0;
  bool previous_zero = false;
  while (remaining > 1 && symbol <= max_symbol) {
    if (previous_zero) {
      uint32_t next = symbol;
      for (;;) {
        uint32_t repeat = static_cast<uint32_t>(br.Read(2));
        next += repeat;
        if (repeat != 3) break;
        if (next > max_symbol) break;  // reported below
        if (br.BytesConsumed() > in.size()) break;
      }
      if (next > max_symbol) {
        return DataLoss("FSE table description: zero-probability run past symbol " +
                        std::to_string(max_symbol));
      }
      while (symbol < next) counts->prob[symbol++] = 0;
    }
    const int32_t max = 2 * threshold - 1 - remaining;
    const uint64_t v = br.Peek(nb_bits);
    int32_t count;
    if (static_cast<int32_t>(v & static_cast<uint64_t>(threshold - 1)) < max) {
      count = static_cast<int32_t>(v & static_cast<uint64_t>(threshold - 1));
      br.Skip(nb_bits - 1);
    } else {
      count = static_cast<int32_t>(v & static_cast<uint64_t>(2 * threshold - 1));
      if (count >= threshold) count -= max;
      br.Skip(nb_bits);
    }
    --count;
    remaining -= count < 0 ? -count : count;
    counts->prob[symbol++] = static_cast<int16_t>(count);
    previous_zero = count == 0;
    while (remaining < threshold) {
      --nb_bits;
      threshold >>= 1;
    }
    if (br.BytesConsumed() > in.size()) break;
  }
  if (br.BytesConsumed() > in.size()) return DataLoss("FSE table description truncated");
  if (remaining != 1) {
    return DataLoss("FSE table description: probabilities do not sum to " +
                    std::to_string(1u << log));
  }
  counts->num_symbols = symbol;
  *consumed = br.BytesConsumed();
  return Status::Ok();
}

namespace {

// Spreads the symbols over the cells (the RFC 8878 order) and hands each cell's symbol, state
// bits and next-state base to `fill(u, symbol, nb_bits, base)`.
template <class Fill>
void SpreadCells(const FseCounts& counts, Fill fill) {
  const uint32_t size = 1u << counts.log;
  const uint32_t mask = size - 1;
  std::array<uint16_t, kFseMaxSymbols> next;
  uint8_t symbols[(1u << kFseMaxLog) + 8];
  uint32_t high = size - 1;
  for (uint32_t s = 0; s < counts.num_symbols; ++s) {
    if (counts.prob[s] == -1) {
      symbols[high--] = static_cast<uint8_t>(s);
      next[s] = 1;
    } else {
      next[s] = static_cast<uint16_t>(counts.prob[s] > 0 ? counts.prob[s] : 0);
    }
  }
  const uint32_t step = (size >> 1) + (size >> 3) + 3;
  if (high == size - 1) {
    // No "less than 1" symbols (the common case): lay the symbols out in order, 8 at a time,
    // then deal them to the cells at stride `step`. No branch depends on the counts.
    uint8_t spread[(1u << kFseMaxLog) + 8];
    uint32_t at = 0;
    for (uint32_t s = 0; s < counts.num_symbols; ++s) {
      const uint64_t eight = uint64_t{s} * 0x0101010101010101ull;
      const int32_t n = counts.prob[s];
      for (int32_t i = 0; i < n; i += 8) std::memcpy(spread + at + i, &eight, 8);
      at += static_cast<uint32_t>(n > 0 ? n : 0);
    }
    // Four cells per turn from independent positions (size is a multiple of 32), so the
    // position's add-and-mask chain is a quarter as long.
    const uint32_t step2 = 2 * step, step3 = 3 * step, step4 = 4 * step;
    uint32_t pos = 0;
    for (uint32_t i = 0; i < size; i += 4) {
      symbols[pos] = spread[i];
      symbols[(pos + step) & mask] = spread[i + 1];
      symbols[(pos + step2) & mask] = spread[i + 2];
      symbols[(pos + step3) & mask] = spread[i + 3];
      pos = (pos + step4) & mask;
    }
  } else {
    uint32_t pos = 0;
    for (uint32_t s = 0; s < counts.num_symbols; ++s) {
      for (int32_t i = 0; i < counts.prob[s]; ++i) {
        symbols[pos] = static_cast<uint8_t>(s);
        do {
          pos = (pos + step) & mask;
        } while (pos > high);
      }
    }
  }
  for (uint32_t u = 0; u < size; ++u) {
    const uint8_t symbol = symbols[u];
    const uint32_t x = next[symbol]++;
    const uint32_t nb = counts.log - (std::bit_width(x) - 1);
    fill(u, symbol, nb, static_cast<uint16_t>((x << nb) - size));
  }
}

}  // namespace

void BuildFseTable(const FseCounts& counts, FseTable* table) {
  table->log = counts.log;
  SpreadCells(counts, [&](uint32_t u, uint8_t symbol, uint32_t nb, uint16_t base) {
    table->cells[u] = FseCell{base, symbol, static_cast<uint8_t>(nb)};
  });
}

void BuildSequenceCodeTable(const FseCounts& counts, const uint32_t* value_base,
                            const uint8_t* extra_bits, SequenceCodeTable* table) {
  table->log = counts.log;
  SpreadCells(counts, [&](uint32_t u, uint8_t symbol, uint32_t nb, uint16_t base) {
    table->cells[u] =
        SequenceCell{value_base[symbol], extra_bits[symbol], static_cast<uint8_t>(nb), base};
  });
}

void BuildRleSequenceCodeTable(uint8_t symbol, const uint32_t* value_base,
                               const uint8_t* extra_bits, SequenceCodeTable* table) {
  table->log = 0;
  table->cells[0] = SequenceCell{value_base[symbol], extra_bits[symbol], 0, 0};
}

void BuildRleFseTable(uint8_t symbol, FseTable* table) {
  table->log = 0;
  table->cells[0] = FseCell{0, symbol, 0};
}

}  // namespace deltakv::deltasync::walker
