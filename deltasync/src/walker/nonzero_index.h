// NonzeroIndex: the walker's only memory of earlier output. A position-sorted list of the
// nonzero bytes written in the current frame, packed as (position << 8 | value), plus a page
// index first_[p] = index of the first entry at a position >= p << kPageShift, so that finding the
// nonzeros of a match source is one page lookup and a short binary search.
//
// A ring bitmap with one bit per byte of the window ("is nonzero") answers the most common
// question, "is this short match source all zero?", exactly from one or two words in cache,
// without touching the entries (window / 8 bytes of memory).
//
// Entries and pages older than the window are dropped in amortized O(1), so memory is bounded
// by the nonzeros, pages and chunk bits inside the window. Indices handed out are absolute
// (they stay valid across pruning as long as the entry itself is still inside the window).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace deltakv::deltasync::walker {

class NonzeroIndex {
 public:
  static constexpr unsigned kPageShift = 12;
  static constexpr uint64_t kMaxPosition = (uint64_t{1} << 56) - 1;

  // Starts an empty frame whose matches reach at most `window` bytes back.
  void Reset(uint64_t window);

  // REQUIRES: position > every earlier position, position <= kMaxPosition, value != 0.
  void Append(uint64_t position, uint8_t value) {
    const uint64_t page = position >> kPageShift;
    if (page >= page_base_ + first_.size()) ExtendPages(page);
    entries_.push_back(position << 8 | value);
    const uint64_t chunk = position >> kChunkShift;
    if (chunk >= clean_until_) CleanChunks(chunk);
    chunk_bits_[(chunk >> 6) & word_mask_] |= uint64_t{1} << (chunk & 63);
  }

  // Absolute index of the first entry at a position >= `position`.
  // REQUIRES: floor() <= position <= frontier, where frontier is the current output position.
  uint64_t LowerBound(uint64_t position, uint64_t frontier);

  // Returns true only if no entry lies in [begin, end). Exact for ranges under 1 KiB; longer
  // ranges are answered at page granularity (false then means "maybe").
  // REQUIRES: floor() <= begin < end <= frontier.
  [[gnu::always_inline]] bool EmptyRange(uint64_t begin, uint64_t end, uint64_t frontier) {
    const uint64_t first_chunk = begin >> kChunkShift;
    const uint64_t last_chunk = (end - 1) >> kChunkShift;
    if (last_chunk < clean_until_ && (last_chunk >> 6) - (first_chunk >> 6) <= 1) {
      // At most two words: straight-line code.
      const uint64_t w0 = first_chunk >> 6, w1 = last_chunk >> 6;
      const uint64_t lo_mask = ~uint64_t{0} << (first_chunk & 63);
      const uint64_t hi_mask = ~uint64_t{0} >> (63 - (last_chunk & 63));
      if (w0 == w1) return (chunk_bits_[w0 & word_mask_] & lo_mask & hi_mask) == 0;
      return ((chunk_bits_[w0 & word_mask_] & lo_mask) |
              (chunk_bits_[w1 & word_mask_] & hi_mask)) == 0;
    }
    if (last_chunk - first_chunk < 1024) {
      // Chunks below clean_until_ are current; chunks at or above it hold no nonzero yet.
      if (first_chunk >= clean_until_) return true;
      const uint64_t last = last_chunk < clean_until_ ? last_chunk : clean_until_ - 1;
      for (uint64_t word = first_chunk >> 6; word <= (last >> 6); ++word) {
        uint64_t bits = chunk_bits_[word & word_mask_];
        if (word == (first_chunk >> 6)) bits &= ~uint64_t{0} << (first_chunk & 63);
        if (word == (last >> 6)) bits &= ~uint64_t{0} >> (63 - (last & 63));
        if (bits != 0) return false;
      }
      return true;
    }
    const uint64_t frontier_page = frontier >> kPageShift;
    if (frontier_page >= page_base_ + first_.size()) ExtendPages(frontier_page);
    uint64_t first_page = begin >> kPageShift;
    if (first_page < page_base_) first_page = page_base_;
    const uint64_t last_slot = ((end - 1) >> kPageShift) - page_base_;
    const uint64_t hi = last_slot + 1 < first_.size() ? first_[last_slot + 1] : this->end();
    return first_[first_page - page_base_] == hi;
  }

  // Absolute index one past the last entry.
  uint64_t end() const { return base_ + entries_.size(); }
  // Packed entry at absolute index `i`. REQUIRES: LowerBound-derived i < end().
  uint64_t at(uint64_t i) const { return entries_[i - base_]; }

  // Declares positions below `floor` unreachable; memory for them is released in batches.
  void Prune(uint64_t floor, uint64_t frontier);

  size_t live_entries() const { return entries_.size(); }
  size_t live_pages() const { return first_.size(); }

 private:
  static constexpr unsigned kChunkShift = 0;  // one bit per byte: exact

  void ExtendPages(uint64_t page);
  // Clears the ring words that chunks up to `chunk` (and the rest of its word) will reuse.
  void CleanChunks(uint64_t chunk);

  std::vector<uint64_t> entries_;     // packed, sorted by position
  uint64_t base_ = 0;                 // absolute index of entries_[0]
  std::vector<uint64_t> first_;       // absolute entry index per page
  uint64_t page_base_ = 0;            // page number of first_[0]
  std::vector<uint64_t> chunk_bits_;  // ring: bit (c & 63) of word (c >> 6) & word_mask_
  uint64_t word_mask_ = 0;
  uint64_t max_words_ = 1;    // ring size needed for the window
  uint64_t clean_until_ = 0;  // chunks below this are current (a multiple of 64)
};

}  // namespace deltakv::deltasync::walker
