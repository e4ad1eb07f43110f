// NonzeroIndex: the walker's only memory of earlier output. A position-sorted list of the
// nonzero bytes written in the current frame, packed as (position << 8 | value), plus a page
// index first_[p] = index of the first entry at a position >= p << kPageShift, so that finding the
// nonzeros of a match source is a branch-free search of the last 64 entries when it is that
// recent, otherwise one page lookup and a search around the position's share of the page (a
// binary search of the page where that guess misses).
//
// A ring bitmap with one bit per byte of the window ("is nonzero") answers the most common
// question, "is this short match source all zero?", exactly from one or two words in cache,
// without touching the entries (window / 8 bytes of memory). Bits are cleared as entries fall a
// whole ring behind: entry by entry, or a block's words at once where the entries outnumber an
// eighth of them, so the ring costs O(nonzeros) on sparse frames and at most one store per 64
// output bytes on dense ones. A summary with
// one bit per bitmap word answers long ranges (a zero run matched from an earlier zero run) in
// a few words as well.
//
// A frame starts without the bitmap (and without its stores and clearing): EmptyRange answers
// from the entries until it is asked often, then builds the bitmap from the entries inside the
// ring and keeps it for the rest of the frame.
//
// Entries and pages older than the window are dropped in amortized O(1) (entries once their ring
// bits are cleared), so memory is bounded by the nonzeros, pages and chunk bits inside the ring
// (the window plus one block, rounded up to a power of two). Indices handed out are absolute
// (they stay valid across pruning as long as the entry itself is still inside the window).
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

namespace deltakv::deltasync::walker {

// A growable array of packed entries that keeps writable room past its size: BeginBlock makes
// room for a whole block, so appends inside a block need no capacity check and a branch-free
// append can write a slot and count it only when its byte is nonzero.
class EntryBuffer {
 public:
  size_t size() const { return size_; }
  const uint64_t* data() const { return data_.get(); }
  uint64_t operator[](size_t i) const { return data_[i]; }
  void clear() { size_ = 0; }
  // Capacity for at least `n` entries; contents kept.
  void Reserve(size_t n) {
    if (n <= capacity_) return;
    size_t grown = std::max<size_t>(n, capacity_ + capacity_ / 2);
    auto bigger = std::make_unique_for_overwrite<uint64_t[]>(grown);
    if (size_ > 0) std::memcpy(bigger.get(), data_.get(), size_ * sizeof(uint64_t));
    data_ = std::move(bigger);
    capacity_ = grown;
  }
  // REQUIRES: size() < capacity (after Reserve).
  void Push(uint64_t v) { data_[size_++] = v; }
  void PushIf(uint64_t v, bool keep) {
    data_[size_] = v;
    size_ += keep ? 1 : 0;
  }
  // The writable room past the end, and counting `n` entries written there as added.
  uint64_t* tail() { return data_.get() + size_; }
  void Grow(size_t n) { size_ += n; }
  void EraseFront(size_t n) {
    std::memmove(data_.get(), data_.get() + n, (size_ - n) * sizeof(uint64_t));
    size_ -= n;
  }

 private:
  std::unique_ptr<uint64_t[]> data_;
  size_t size_ = 0;
  size_t capacity_ = 0;
};

// kBitsBelow[n][k]: the bits of word k (of four) below bit n of the four words' 256.
struct BitsBelowTable {
  uint64_t rows[4 * 64 + 1][4];
  constexpr BitsBelowTable() : rows() {
    for (unsigned n = 0; n <= 4 * 64; ++n) {
      for (unsigned k = 0; k < 4; ++k) {
        const unsigned bits = n <= 64 * k ? 0 : (n - 64 * k >= 64 ? 64 : n - 64 * k);
        rows[n][k] = bits == 64 ? ~uint64_t{0} : (uint64_t{1} << bits) - 1;
      }
    }
  }
  const uint64_t* operator[](uint64_t n) const { return rows[n]; }
};
inline constexpr BitsBelowTable kBitsBelow{};

class NonzeroIndex {
 public:
  static constexpr unsigned kPageShift = 12;
  static constexpr uint64_t kMaxPosition = (uint64_t{1} << 56) - 1;

  // Starts an empty frame whose matches reach at most `window` bytes back.
  void Reset(uint64_t window);

  // Prepares for a block that writes at most `max_output` bytes from `position` on: grows the
  // ring while it has not wrapped, and clears the ring bits the block's writes will reuse (those
  // of entries a whole ring behind): entry by entry when they are few, so the bitmap of a
  // sparse frame costs O(nonzeros), never O(output); by whole words when they outnumber an
  // eighth of the block's words.
  void BeginBlock(uint64_t position, uint64_t max_output);

  // REQUIRES: position > every earlier position, position <= kMaxPosition, value != 0, and
  // position below the limit of the last BeginBlock.
  [[gnu::always_inline]] void Append(uint64_t position, uint8_t value) {
    const uint64_t page = position >> kPageShift;
    if (page >= page_base_ + first_.size()) ExtendPages(page);
    entries_.Push(position << 8 | value);
    if (bitmap_) SetBit(position);
  }
  // Append(position, value) when value != 0, nothing otherwise, without a branch on value.
  [[gnu::always_inline]] void AppendIfNonzero(uint64_t position, uint8_t value) {
    const uint64_t page = position >> kPageShift;
    if (page >= page_base_ + first_.size()) ExtendPages(page);
    const uint64_t bit = value != 0 ? 1 : 0;
    entries_.PushIf(position << 8 | value, bit != 0);
    if (!bitmap_) return;
    const uint64_t word = position >> 6;
    chunk_bits_[word & word_mask_] |= bit << (position & 63);
    summary_[(word >> 6) & summary_mask_] |= bit << (word & 63);
  }

  // AppendIfNonzero for each of the 8 bytes of `word` (little-endian) at `position` ..
  // `position` + 7, with the per-byte work done on the word: one page check, at most one store
  // per ring word and summary word, and the entries of the first two nonzero bytes written
  // without a branch on their count (a literal run of a sparse delta rarely holds more).
  // REQUIRES: the same as AppendIfNonzero for the positions of the nonzero bytes.
  [[gnu::always_inline]] void AppendWord(uint64_t position, uint64_t word) {
    // Bit i of `mask`: byte i is nonzero.
    constexpr uint64_t kLow7 = 0x7F7F7F7F7F7F7F7Full;
    const uint64_t high = (((word & kLow7) + kLow7) | word) & ~kLow7;
    const uint64_t mask = ((high >> 7) * 0x0102040810204080ull) >> 56;
    if (mask == 0) return;
    if (((position + 7) >> kPageShift) != (position >> kPageShift)) [[unlikely]] {
      // Across a page boundary: byte by byte, so each page starts at the right entry.
      for (uint64_t bits = mask; bits != 0; bits &= bits - 1) {
        const unsigned i = static_cast<unsigned>(std::countr_zero(bits));
        Append(position + i, static_cast<uint8_t>(word >> (8 * i)));
      }
      return;
    }
    const uint64_t page = position >> kPageShift;
    if (page >= page_base_ + first_.size()) ExtendPages(page);
    // Locals: stores of entries (uint64_t) may alias the members as far as the compiler knows.
    uint64_t* tail = entries_.tail();
    const uint64_t rest = mask & (mask - 1);
    const unsigned first = static_cast<unsigned>(std::countr_zero(mask));
    const unsigned second = static_cast<unsigned>(std::countr_zero(rest)) & 7;
    tail[0] = (position + first) << 8 | ((word >> (8 * first)) & 0xFF);
    tail[1] = (position + second) << 8 | ((word >> (8 * second)) & 0xFF);
    size_t count = rest != 0 ? 2 : 1;
    for (uint64_t bits = rest & (rest - 1); bits != 0; bits &= bits - 1) {
      const unsigned i = static_cast<unsigned>(std::countr_zero(bits));
      tail[count++] = (position + i) << 8 | ((word >> (8 * i)) & 0xFF);
    }
    entries_.Grow(count);
    if (!bitmap_) return;
    uint64_t* chunk = chunk_bits_.data();
    uint64_t* summary = summary_.data();
    const uint64_t w = position >> 6;
    const unsigned shift = static_cast<unsigned>(position & 63);
    const uint64_t low_bits = mask << shift;
    const uint64_t high_bits = (mask >> 1) >> (63 - shift);  // the bytes in word w + 1
    chunk[w & word_mask_] |= low_bits;
    chunk[(w + 1) & word_mask_] |= high_bits;
    summary[(w >> 6) & summary_mask_] |= uint64_t{low_bits != 0} << (w & 63);
    summary[((w + 1) >> 6) & summary_mask_] |= uint64_t{high_bits != 0} << ((w + 1) & 63);
  }

  // Absolute index of the first entry at a position >= `position`.
  // REQUIRES: floor() <= position <= frontier, where frontier is the current output position.
  uint64_t LowerBound(uint64_t position, uint64_t frontier);

  // Returns true only if no entry lies in [begin, end). Exact for ranges up to 256 KiB (from the
  // bitmap and its summary); longer ranges are answered at page granularity (false then means
  // "maybe").
  // REQUIRES: floor() <= begin < end <= frontier.
  [[gnu::always_inline]] bool EmptyRange(uint64_t begin, uint64_t end, uint64_t frontier) {
    if (!bitmap_) [[unlikely]]
      return EmptyRangeWithoutBitmap(begin, end, frontier);
    // Ring bits for positions in [frontier - ring, frontier) are current (BeginBlock).
    const uint64_t w0 = begin >> 6;
    const uint64_t first_bit = begin & 63;
    const uint64_t stop = first_bit + (end - begin);  // end, in bits from the start of word w0
    if (stop <= 4 * 64) [[likely]] {
      // Up to four words (ranges of ~200 bytes and less) without a branch on the span: word k
      // is masked to the bits below `stop` by a table row (all-zero rows past the range).
      const uint64_t* below = kBitsBelow[stop];
      return ((chunk_bits_[w0 & word_mask_] & (~uint64_t{0} << first_bit) & below[0]) |
              (chunk_bits_[(w0 + 1) & word_mask_] & below[1]) |
              (chunk_bits_[(w0 + 2) & word_mask_] & below[2]) |
              (chunk_bits_[(w0 + 3) & word_mask_] & below[3])) == 0;
    }
    const uint64_t last = end - 1;
    const uint64_t w1 = last >> 6;
    const uint64_t lo_mask = ~uint64_t{0} << first_bit;
    const uint64_t hi_mask = ~uint64_t{0} >> (63 - (last & 63));
    // Longer: the two edge words, then the interior words through the summary (one bit per
    // word), up to 256 KiB of interior in at most 64 summary words.
    if (((chunk_bits_[w0 & word_mask_] & lo_mask) | (chunk_bits_[w1 & word_mask_] & hi_mask)) !=
        0) {
      return false;
    }
    const uint64_t i0 = w0 + 1, i1 = w1 - 1;  // interior words, inclusive
    const uint64_t s0 = i0 >> 6, s1 = i1 >> 6;
    if (s1 - s0 < 64) {
      const uint64_t first_mask = ~uint64_t{0} << (i0 & 63);
      const uint64_t last_mask = ~uint64_t{0} >> (63 - (i1 & 63));
      if (s0 == s1) return (summary_[s0 & summary_mask_] & first_mask & last_mask) == 0;
      uint64_t bits = (summary_[s0 & summary_mask_] & first_mask) |
                      (summary_[s1 & summary_mask_] & last_mask);
      for (uint64_t sw = s0 + 1; sw < s1; ++sw) bits |= summary_[sw & summary_mask_];
      return bits == 0;
    }
    const uint64_t frontier_page = frontier >> kPageShift;
    if (frontier_page >= page_base_ + first_.size()) ExtendPages(frontier_page);
    uint64_t first_page = begin >> kPageShift;
    if (first_page < page_base_) first_page = page_base_;
    const uint64_t last_slot = ((end - 1) >> kPageShift) - page_base_;
    const uint64_t hi = last_slot + 1 < first_.size() ? first_[last_slot + 1] : this->end();
    return first_[first_page - page_base_] == hi;
  }

  // Starts keeping the bitmap now (EmptyRange turns it on by itself once it is asked often):
  // sets the bits of the entries inside the ring. Answers are the same either way.
  void EnableBitmap();
  bool bitmap() const { return bitmap_; }

  // Absolute index one past the last entry.
  uint64_t end() const { return base_ + entries_.size(); }
  // Packed entry at absolute index `i`. REQUIRES: LowerBound-derived i < end().
  uint64_t at(uint64_t i) const { return entries_[i - base_]; }
  // The packed entries from absolute index `i` on, contiguous up to end().
  const uint64_t* data_at(uint64_t i) const { return entries_.data() + (i - base_); }

  // Declares positions below `floor` unreachable; memory for them is released in batches.
  void Prune(uint64_t floor, uint64_t frontier);

  size_t live_entries() const { return entries_.size(); }
  size_t live_pages() const { return first_.size(); }

 private:
  // EmptyRange before the bitmap is kept: from the entries (two searches), until the questions
  // outnumber an eighth of the entries (then EnableBitmap).
  bool EmptyRangeWithoutBitmap(uint64_t begin, uint64_t end, uint64_t frontier);
  // Entries PagedLowerBound searches around its interpolated guess before it halves a page.
  static constexpr uint64_t kGuessSpan = 16;
  // LowerBound through the page index (sources far behind the frontier).
  uint64_t PagedLowerBound(uint64_t position, uint64_t frontier);
  void ExtendPages(uint64_t page) {
    // Pages not yet covered hold no entry, so each starts at the current end.
    const uint64_t covered = page_base_ + first_.size();
    if (page == covered) {
      first_.push_back(end());
    } else if (page > covered) {
      first_.resize(first_.size() + (page - covered + 1), end());
    }
  }
  // Sets the ring bit of `position` and its word's summary bit.
  void SetBit(uint64_t position) {
    const uint64_t word = position >> 6;
    chunk_bits_[word & word_mask_] |= uint64_t{1} << (position & 63);
    summary_[(word >> 6) & summary_mask_] |= uint64_t{1} << (word & 63);
  }
  // Clears the ring bit of `position` (and its summary bit when the word empties).
  void Clear(uint64_t position);
  // Clears the summary bit of ring word `word` if the word holds no bit any more, without a
  // branch on it (sparse frames empty a word on most clears, dense ones on few, at random).
  void DropSummaryIfEmpty(uint64_t word) {
    const uint64_t emptied = chunk_bits_[word & word_mask_] == 0 ? 1 : 0;
    summary_[(word >> 6) & summary_mask_] &= ~(emptied << (word & 63));
  }
  // Clears the ring bits of entries with an absolute index below `index`.
  void RetireBelow(uint64_t index);
  // Clears the ring slots of positions [begin, end) (their words and summary bits), keeping
  // the bits of positions below `begin` in its word. REQUIRES: end - begin <= ring; no entry
  // at or after `begin` yet.
  void ClearSlots(uint64_t begin, uint64_t end);

  EntryBuffer entries_;               // packed, sorted by position
  uint64_t base_ = 0;                 // absolute index of entries_[0]
  std::vector<uint64_t> first_;       // absolute entry index per page
  uint64_t page_base_ = 0;            // page number of first_[0]
  std::vector<uint64_t> chunk_bits_;  // ring: bit (p & 63) of word (p >> 6) & word_mask_
  uint64_t word_mask_ = 0;
  // One bit per ring word: set while the word holds a nonzero bit (same ring indexing).
  std::vector<uint64_t> summary_;
  uint64_t summary_mask_ = 0;
  uint64_t max_words_ = 1;  // ring size needed for the window plus one block
  uint64_t retired_ = 0;    // absolute index: entries below it have their ring bits cleared
  // Whether the ring bitmap is kept. A frame starts without it: frames parsed one sequence per
  // nonzero run (FORMAT.md §2.1) copy every match from the literals just written
  // (FrameOutput::AppendWordAndMatch), so they never ask EmptyRange and the bitmap would cost
  // its stores and its clearing for nothing. The first frames that ask often turn it on.
  bool bitmap_ = false;
  uint64_t questions_ = 0;  // EmptyRange calls answered without the bitmap in this frame
};

}  // namespace deltakv::deltasync::walker
