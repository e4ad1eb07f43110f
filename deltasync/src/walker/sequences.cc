#include "walker/sequences.h"

#include <cstring>
#include <string>

#include "deltasync/xor_decoder.h"
#include "walker/bit_reader.h"
#include "walker/nonzero_index.h"

namespace deltakv::deltasync::walker {
namespace {

constexpr uint32_t kMaxLiteralCode = 35;
constexpr uint32_t kMaxMatchCode = 52;
constexpr uint32_t kMaxOffsetCode = 31;

constexpr uint32_t kLiteralBase[kMaxLiteralCode + 1] = {
    0,  1,  2,  3,  4,  5,  6,  7,  8,   9,   10,  11,   12,   13,   14,   15,    16,    18,
    20, 22, 24, 28, 32, 40, 48, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536};
constexpr uint8_t kLiteralBits[kMaxLiteralCode + 1] = {0, 0, 0, 0, 0, 0,  0,  0,  0,  0,  0,  0,
                                                       0, 0, 0, 0, 1, 1,  1,  1,  2,  2,  3,  3,
                                                       4, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
constexpr uint32_t kMatchBase[kMaxMatchCode + 1] = {
    3,  4,  5,  6,  7,  8,  9,  10,  11,  12,  13,   14,   15,   16,   17,    18,    19,   20,
    21, 22, 23, 24, 25, 26, 27, 28,  29,  30,  31,   32,   33,   34,   35,    37,    39,   41,
    43, 47, 51, 59, 67, 83, 99, 131, 259, 515, 1027, 2051, 4099, 8195, 16387, 32771, 65539};
constexpr uint8_t kMatchBits[kMaxMatchCode + 1] = {
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,  0,  0,  0,  0,  0,  0, 0,
    0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 3, 3, 4, 4, 5, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};

constexpr uint32_t kOffsetBase[kMaxOffsetCode + 1] = {
    1u << 0,  1u << 1,  1u << 2,  1u << 3,  1u << 4,  1u << 5,  1u << 6,  1u << 7,
    1u << 8,  1u << 9,  1u << 10, 1u << 11, 1u << 12, 1u << 13, 1u << 14, 1u << 15,
    1u << 16, 1u << 17, 1u << 18, 1u << 19, 1u << 20, 1u << 21, 1u << 22, 1u << 23,
    1u << 24, 1u << 25, 1u << 26, 1u << 27, 1u << 28, 1u << 29, 1u << 30, 1u << 31};
constexpr uint8_t kOffsetBits[kMaxOffsetCode + 1] = {0,  1,  2,  3,  4,  5,  6,  7,  8,  9,  10,
                                                     11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21,
                                                     22, 23, 24, 25, 26, 27, 28, 29, 30, 31};
// Each table's code values (indexed by LL = 0, OF = 1, ML = 2).
constexpr const uint32_t* kCodeBase[3] = {kLiteralBase, kOffsetBase, kMatchBase};
constexpr const uint8_t* kCodeBits[3] = {kLiteralBits, kOffsetBits, kMatchBits};

constexpr int16_t kLiteralDefault[36] = {4, 3, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 1, 1,  1,  2,  2,
                                         2, 2, 2, 2, 2, 2, 2, 3, 2, 1, 1, 1, 1, 1, -1, -1, -1, -1};
constexpr int16_t kMatchDefault[53] = {1, 4, 3, 2, 2, 2, 2, 2, 2, 1, 1,  1,  1,  1,  1,  1,  1, 1,
                                       1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,  1,  1,  1,  1,  1,  1, 1,
                                       1, 1, 1, 1, 1, 1, 1, 1, 1, 1, -1, -1, -1, -1, -1, -1, -1};
constexpr int16_t kOffsetDefault[29] = {1, 1, 1, 1, 1, 1, 2, 2, 2, 1,  1,  1,  1,  1, 1,
                                        1, 1, 1, 1, 1, 1, 1, 1, 1, -1, -1, -1, -1, -1};

SequenceCodeTable MakeDefault(int which, const int16_t* prob, uint32_t n, uint32_t log) {
  FseCounts counts;
  counts.log = log;
  counts.num_symbols = n;
  for (uint32_t i = 0; i < n; ++i) counts.prob[i] = prob[i];
  SequenceCodeTable table;
  BuildSequenceCodeTable(counts, kCodeBase[which], kCodeBits[which], &table);
  return table;
}

const SequenceCodeTable& DefaultTable(int which) {
  static const SequenceCodeTable kLiteral = MakeDefault(0, kLiteralDefault, 36, 6);
  static const SequenceCodeTable kOffset = MakeDefault(1, kOffsetDefault, 29, 5);
  static const SequenceCodeTable kMatch = MakeDefault(2, kMatchDefault, 53, 6);
  return which == 0 ? kLiteral : which == 1 ? kOffset : kMatch;
}

const char* const kTableNames[3] = {"literal lengths", "offsets", "match lengths"};

// Reads one table according to `mode`; advances `pos` within `in`.
Status ReadTable(int which, unsigned mode, std::span<const uint8_t> in, size_t* pos,
                 bool has_previous, SequenceTable* table) {
  static constexpr uint32_t kMaxSymbol[3] = {kMaxLiteralCode, kMaxOffsetCode, kMaxMatchCode};
  static constexpr uint32_t kMaxLog[3] = {9, 8, 9};
  switch (mode) {
    case 0:
      table->current = &DefaultTable(which);
      return Status::Ok();
    case 1: {
      if (*pos >= in.size()) {
        return DataLoss(std::string(kTableNames[which]) + ": RLE symbol missing");
      }
      const uint8_t symbol = in[*pos];
      if (symbol > kMaxSymbol[which]) {
        return DataLoss(std::string(kTableNames[which]) + ": RLE symbol " + std::to_string(symbol) +
                        " above maximum code");
      }
      BuildRleSequenceCodeTable(symbol, kCodeBase[which], kCodeBits[which], &table->rle);
      table->current = &table->rle;
      ++*pos;
      return Status::Ok();
    }
    case 2: {
      // A description is self-delimiting: the same leading bytes parse to the same table.
      const size_t known = table->description_size;
      if (known > 0 && in.size() - *pos >= known &&
          std::memcmp(in.data() + *pos, table->description, known) == 0) {
        table->current = &table->built;
        *pos += known;
        return Status::Ok();
      }
      FseCounts counts;
      size_t used = 0;
      table->description_size = 0;
      RETURN_IF_ERROR(
          ReadFseCounts(in.subspan(*pos), kMaxSymbol[which], kMaxLog[which], &counts, &used)
              .WithPrefix(kTableNames[which]));
      BuildSequenceCodeTable(counts, kCodeBase[which], kCodeBits[which], &table->built);
      table->current = &table->built;
      if (used <= sizeof(table->description)) {
        std::memcpy(table->description, in.data() + *pos, used);
        table->description_size = used;
      }
      *pos += used;
      return Status::Ok();
    }
    default:
      if (!has_previous || table->current == nullptr) {
        return DataLoss(std::string(kTableNames[which]) +
                        ": Repeat mode without an earlier table in the frame");
      }
      return Status::Ok();
  }
}

// Appends the next `n` literals to the output.
[[gnu::always_inline]] inline void EmitLiterals(const Literals& literals, uint64_t n,
                                                uint64_t* lit_pos, FrameOutput* out) {
  if (literals.bytes != nullptr) {
    // Sparse frames alternate between literal lengths 0 and 1 at random: those take no branch
    // on the length (a loop over 0 or 1 bytes mispredicts its exit about every other sequence).
    if (n <= 1) [[likely]] {
      out->AppendAtMostOne(literals.bytes + *lit_pos, n);
    } else if (n <= 16) {
      out->AppendFew(literals.bytes + *lit_pos, n);
    } else {
      out->AppendBytes(literals.bytes + *lit_pos, n);
    }
  } else {
    out->AppendRepeated(literals.rle_value, n);
  }
  *lit_pos += n;
}

// LowMask for widths below 64 (every width the sequence loop uses).
inline uint64_t SmallMask(unsigned n) { return (uint64_t{1} << n) - 1; }

// The error of a sequence that failed one of the loop's checks, in the order the checks are
// defined: the bitstream, the offset, the literals, the block's output, the match source.
[[gnu::noinline, gnu::cold]] Status SequenceError(uint32_t n, bool overflowed, uint64_t offset,
                                                 uint64_t literal_length, uint64_t lit_left,
                                                 uint64_t produced, uint64_t room,
                                                 uint64_t source_limit,
                                                 const SequenceLimits& limits) {
  if (overflowed) {
    return DataLoss("sequence bitstream read past its start at sequence " + std::to_string(n) +
                    " (libzstd tolerates)");
  }
  if (offset == 0) {
    return DataLoss("sequence " + std::to_string(n) +
                    ": offset 0 from repeat offset 1 minus 1 (libzstd tolerates)");
  }
  if (literal_length > lit_left) {
    return DataLoss("sequence " + std::to_string(n) + ": literal length " +
                    std::to_string(literal_length) + " exceeds the " + std::to_string(lit_left) +
                    " literals left");
  }
  if (produced > room) {
    if (produced > limits.output_room) {
      return ResourceExhausted(std::string(kOutputLimitMessage) + ": block output passes the limit");
    }
    return DataLoss("block output above Block_Maximum_Size " + std::to_string(limits.block_max) +
                    " (libzstd tolerates)");
  }
  if (offset > source_limit) {
    return DataLoss("sequence " + std::to_string(n) + ": offset " + std::to_string(offset) +
                    " reaches before the frame start (position " + std::to_string(source_limit) +
                    ")");
  }
  return DataLoss("sequence " + std::to_string(n) + ": offset " + std::to_string(offset) +
                  " beyond the window of " + std::to_string(limits.window) +
                  " bytes (libzstd tolerates)");
}

// The sequences section; kExecute false decodes and checks every sequence but only advances
// the output position over it (SequenceLimits::execute).
template <bool kExecute>
Status DecodeSequences(std::span<const uint8_t> in, const Literals& literals,
                       const SequenceLimits& limits, SequenceState* state, FrameOutput* out,
                       SequenceResult* result) {
  if (in.empty()) return DataLoss("sequences section missing");
  size_t pos = 0;
  uint32_t count = in[pos++];
  bool long_form = false;
  if (count >= 128) {
    long_form = true;
    if (count == 255) {
      if (pos + 2 > in.size()) return DataLoss("sequence count truncated");
      count = (in[pos] | (uint32_t{in[pos + 1]} << 8)) + 0x7F00;
      pos += 2;
    } else {
      if (pos + 1 > in.size()) return DataLoss("sequence count truncated");
      count = ((count - 128) << 8) + in[pos];
      pos += 1;
    }
  }
  uint64_t lit_pos = 0;
  auto emit_literals = [&](uint64_t n) {
    if constexpr (kExecute) {
      EmitLiterals(literals, n, &lit_pos, out);
    } else {
      lit_pos += n;
      out->Skip(n);
    }
  };
  result->sequences = 0;
  result->compat_flags = 0;
  if (count == 0) {
    if (pos != in.size()) {
      return DataLoss("bytes after a zero sequence count (libzstd tolerates)");
    }
    if (long_form) result->compat_flags |= 1u;  // kCompatZeroSequencesLongForm
    if (literals.size > limits.output_room) {
      return ResourceExhausted(std::string(kOutputLimitMessage) + ": block output passes the limit");
    }
    emit_literals(literals.size);
    result->block_output = literals.size;
    return Status::Ok();
  }
  if (pos >= in.size()) return DataLoss("sequence table modes missing");
  const uint8_t modes = in[pos++];
  if ((modes & 3) != 0) {
    return DataLoss("reserved bits set in sequence table modes (libzstd tolerates)");
  }
  RETURN_IF_ERROR(ReadTable(0, modes >> 6, in, &pos, state->has_tables, &state->ll));
  RETURN_IF_ERROR(ReadTable(1, (modes >> 4) & 3, in, &pos, state->has_tables, &state->of));
  RETURN_IF_ERROR(ReadTable(2, (modes >> 2) & 3, in, &pos, state->has_tables, &state->ml));
  state->has_tables = true;

  FastBackwardBitReader br;
  if (!br.Init(in.data() + pos, in.size() - pos)) {
    return DataLoss("sequence bitstream empty or without end marker");
  }
  const SequenceCell* ll_cells = state->ll.current->cells.data();
  const SequenceCell* of_cells = state->of.current->cells.data();
  const SequenceCell* ml_cells = state->ml.current->cells.data();
  uint32_t ll_state = static_cast<uint32_t>(br.Read(state->ll.current->log));
  uint32_t of_state = static_cast<uint32_t>(br.Read(state->of.current->log));
  uint32_t ml_state = static_cast<uint32_t>(br.Read(state->ml.current->log));
  br.Reload();
  uint64_t rep0 = state->rep[0], rep1 = state->rep[1], rep2 = state->rep[2];
  uint64_t produced = 0;
  const uint64_t room =
      limits.output_room < limits.block_max ? limits.output_room : limits.block_max;
  const uint64_t window = limits.window;
  uint64_t skipped = 0;  // !kExecute: output the sequences so far would have produced
  for (uint32_t n = 0; n < count; ++n) {
    const SequenceCell ll_cell = ll_cells[ll_state];
    const SequenceCell of_cell = of_cells[of_state];
    const SequenceCell ml_cell = ml_cells[ml_state];
    // Extra bits in stream order offset, match length, literal length, then the state updates
    // in order LL, ML, OF (none after the last sequence): one read each, one refill, when the
    // whole sequence fits the container's 56 bits (nearly always).
    const unsigned of_bits = of_cell.extra_bits;
    const unsigned ml_bits = ml_cell.extra_bits;
    const unsigned ll_bits = ll_cell.extra_bits;
    const unsigned extra_bits = of_bits + ml_bits + ll_bits;
    const unsigned ll_n = ll_cell.nb_bits, ml_n = ml_cell.nb_bits, of_n = of_cell.nb_bits;
    const bool update = n + 1 < count;
    const unsigned state_bits = update ? ll_n + ml_n + of_n : 0;
    uint64_t offset_extra, ml_extra, ll_extra;
    uint64_t state_value;  // the state update's bits (0 after the last sequence)
    if (extra_bits + state_bits <= 56) [[likely]] {
      // The extra bits and the state bits follow each other in the stream: one read for both.
      const uint64_t all = br.Read(extra_bits + state_bits);
      const uint64_t v = all >> state_bits;
      ll_extra = v & SmallMask(ll_bits);
      ml_extra = (v >> ll_bits) & SmallMask(ml_bits);
      offset_extra = v >> (ll_bits + ml_bits);
      state_value = all & SmallMask(state_bits);
    } else {
      if (extra_bits <= 56) {
        const uint64_t v = br.Read(extra_bits);
        ll_extra = v & SmallMask(ll_bits);
        ml_extra = (v >> ll_bits) & SmallMask(ml_bits);
        offset_extra = v >> (ll_bits + ml_bits);
      } else {
        offset_extra = br.Read(of_bits);  // at most 31 bits
        br.Reload();
        ml_extra = br.Read(ml_bits);  // at most 16 + 16 bits
        ll_extra = br.Read(ll_bits);
      }
      br.Reload();
      state_value = br.Read(state_bits);
    }
    if (update) {
      of_state = of_cell.next_base + static_cast<uint32_t>(state_value & SmallMask(of_n));
      ml_state = ml_cell.next_base + static_cast<uint32_t>((state_value >> of_n) & SmallMask(ml_n));
      ll_state = ll_cell.next_base + static_cast<uint32_t>(state_value >> (of_n + ml_n));
    }
    br.Reload();
    const uint64_t offset_value = of_cell.value_base + offset_extra;
    const uint64_t match_length = ml_cell.value_base + ml_extra;
    const uint64_t literal_length = ll_cell.value_base + ll_extra;
    // Repeat offsets without data-dependent branches (sparse frames alternate between the
    // LL > 0 and LL == 0 forms): index 0..2 = rep0..rep2, 3 = rep0 - 1, 4 = a new offset.
    const unsigned index =
        offset_value > 3 ? 4u
                         : static_cast<unsigned>(offset_value) - 1 + (literal_length == 0 ? 1 : 0);
    // A table lookup, not a chain of conditionals (which compilers make branches that
    // mispredict on sparse frames).
    const uint64_t reps[4] = {rep0, rep1, rep2, rep0 - 1};
    const uint64_t repeat = reps[index & 3];
    const uint64_t offset = index == 4 ? offset_value - 3 : repeat;
    rep2 = index <= 1 ? rep2 : rep1;
    rep1 = index == 0 ? rep1 : rep0;
    rep0 = offset;
    // Every check of the sequence in one branch; the slow path names the first that failed.
    const uint64_t lit_left = literals.size - lit_pos;
    produced += literal_length + match_length;
    const uint64_t source_limit = out->position() + skipped + literal_length;
    const bool bad = br.overflowed() | (offset == 0) | (literal_length > lit_left) |
                     (produced > room) | (offset > source_limit) | (offset > window);
    if (bad) [[unlikely]] {
      return SequenceError(n, br.overflowed(), offset, literal_length, lit_left, produced, room,
                           source_limit, limits);
    }
    if constexpr (kExecute) {
      if (literals.bytes != nullptr && literal_length - 2 <= 6 && lit_pos + 8 <= literals.readable)
          [[likely]] {
        // 2 to 8 literals (a nonzero run and a zero in frames parsed one sequence per run,
        // FORMAT.md §2.1), loaded as one word.
        uint64_t word;
        std::memcpy(&word, literals.bytes + lit_pos, 8);
        out->AppendWordAndMatch(word & (~uint64_t{0} >> (64 - 8 * literal_length)), literal_length,
                                offset, match_length);
        lit_pos += literal_length;
      } else {
        EmitLiterals(literals, literal_length, &lit_pos, out);
        out->AppendMatch(offset, match_length);
      }
    } else {
      lit_pos += literal_length;
      skipped += literal_length + match_length;
    }
  }
  if constexpr (!kExecute) out->Skip(skipped);
  // RFC 8878 requires the sequence bitstream to end exactly; libzstd 1.5.4's prefetching
  // sequence decoder only counts sequences and accepts leftover bits.
  if (!br.finished()) {
    return DataLoss("sequence bitstream not fully consumed (libzstd tolerates)");
  }
  state->rep[0] = rep0;
  state->rep[1] = rep1;
  state->rep[2] = rep2;
  const uint64_t rest = literals.size - lit_pos;
  produced += rest;
  if (produced > room) {
    if (produced > limits.output_room) {
      return ResourceExhausted(std::string(kOutputLimitMessage) + ": block output passes the limit");
    }
    return DataLoss("block output above Block_Maximum_Size " + std::to_string(limits.block_max) +
                    " (libzstd tolerates)");
  }
  emit_literals(rest);
  result->sequences = count;
  result->block_output = produced;
  return Status::Ok();
}

}  // namespace

Status DecodeAndExecuteSequences(std::span<const uint8_t> in, const Literals& literals,
                                 const SequenceLimits& limits, SequenceState* state,
                                 FrameOutput* out, SequenceResult* result) {
  return limits.execute ? DecodeSequences<true>(in, literals, limits, state, out, result)
                        : DecodeSequences<false>(in, literals, limits, state, out, result);
}

}  // namespace deltakv::deltasync::walker
