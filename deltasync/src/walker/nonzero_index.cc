#include "walker/nonzero_index.h"

#include <algorithm>
#include <cstring>

namespace deltakv::deltasync::walker {

void NonzeroIndex::Reset(uint64_t window) {
  // The ring keeps its size from the last frame (growing it again would zero it again, word by
  // word, for every frame of a many-frame delta); only the bits that frame left set are
  // cleared: entry by entry when they are few, the whole ring otherwise.
  const uint64_t live = end() - retired_;
  if (!bitmap_) {
    // The last frame set no bit.
  } else if (live * 8 <= chunk_bits_.size()) {
    RetireBelow(end());
  } else {
    std::fill(chunk_bits_.begin(), chunk_bits_.end(), 0);
    std::fill(summary_.begin(), summary_.end(), 0);
  }
  bitmap_ = false;
  questions_ = 0;
  entries_.clear();
  base_ = 0;
  first_.clear();
  page_base_ = 0;
  retired_ = 0;
  // The ring covers the window plus one block of lookahead, rounded up to a power of two.
  const uint64_t span = std::min<uint64_t>(window, kMaxPosition) + (256u << 10);
  max_words_ = 1;
  while (max_words_ * 64 < span) max_words_ <<= 1;
  // Start small (or at the last frame's size, up to this window's) and grow with the output
  // (before the ring first wraps), so a frame that declares a huge window but is short costs
  // little.
  const uint64_t words =
      std::min<uint64_t>(max_words_, std::max<uint64_t>(chunk_bits_.size(), 1024));
  // Capacity for the whole ring up front (address space only: pages are touched as the ring
  // grows), so growing never copies; capped at 16 MiB (windows up to 128 MiB), beyond which
  // a frame that declares a huge window but is short would reserve for nothing.
  const uint64_t reserve_words = std::min<uint64_t>(max_words_, uint64_t{1} << 21);
  chunk_bits_.reserve(reserve_words);
  summary_.reserve(reserve_words / 64);
  first_.reserve(reserve_words / 64 + 64);  // one page per 4 KiB (64 words) of window
  chunk_bits_.resize(words, 0);             // all zero: cleared above, or new
  word_mask_ = words - 1;
  summary_.resize(words / 64, 0);
  summary_mask_ = words / 64 - 1;
}

void NonzeroIndex::Clear(uint64_t position) {
  const uint64_t word = position >> 6;
  chunk_bits_[word & word_mask_] &= ~(uint64_t{1} << (position & 63));
  DropSummaryIfEmpty(word);
}

void NonzeroIndex::RetireBelow(uint64_t index) {
  for (; retired_ < index; ++retired_) Clear(entries_[retired_ - base_] >> 8);
}

void NonzeroIndex::BeginBlock(uint64_t position, uint64_t max_output) {
  const uint64_t limit = position + max_output;
  entries_.Reserve(entries_.size() + static_cast<size_t>(max_output) + 2);  // + 2: AppendWord
  if (limit > chunk_bits_.size() * 64 && chunk_bits_.size() < max_words_) {
    // Not wrapped yet (every position so far is below `ring`): slot == position, so growing
    // keeps every bit in place.
    uint64_t words = chunk_bits_.size();
    while (words * 64 < limit && words < max_words_) words <<= 1;
    chunk_bits_.resize(words, 0);
    word_mask_ = words - 1;
    summary_.resize(words / 64, 0);
    summary_mask_ = words / 64 - 1;
  }
  const uint64_t ring = chunk_bits_.size() * 64;
  if (limit <= ring) return;
  // Writes up to `limit` reuse the slots of positions below limit - ring: clear them. Matches
  // reach at most a window back, which stays inside the ring (ring >= window + max_output).
  const uint64_t horizon = limit - ring;
  const uint64_t* const first = entries_.data() + (retired_ - base_);
  const uint64_t* const last = entries_.data() + entries_.size();
  const uint64_t stale = static_cast<uint64_t>(
      std::lower_bound(first, last, horizon << 8) - first);  // entries below the horizon
  if (!bitmap_) {
    retired_ += stale;  // no bit to clear
    return;
  }
  // Entry by entry costs a few dependent operations each; clearing the block's slots whole
  // costs a store per 64 positions. Dense blocks take the second (O(output / 64), at most
  // 1/8 of the work per entry's share), sparse ones the first (O(nonzeros)).
  if (stale * 8 > max_output / 64) {
    ClearSlots(position, limit);
    retired_ += stale;
    return;
  }
  RetireBelow(retired_ + stale);
}

bool NonzeroIndex::EmptyRangeWithoutBitmap(uint64_t begin, uint64_t end, uint64_t frontier) {
  if (++questions_ > 64 + this->end() / 8) {
    EnableBitmap();
    return EmptyRange(begin, end, frontier);
  }
  return LowerBound(begin, frontier) == LowerBound(end, frontier);
}

void NonzeroIndex::EnableBitmap() {
  bitmap_ = true;
  // The ring holds no bit yet. Entries from retired_ on are those at or after the ring's
  // horizon (BeginBlock): exactly the ones whose bits the ring keeps.
  for (uint64_t i = retired_; i < end(); ++i) SetBit(at(i) >> 8);
}

void NonzeroIndex::ClearSlots(uint64_t begin, uint64_t end) {
  // Positions below `begin` in its word are written (this ring cycle); the rest of that word
  // and every later slot up to `end` hold only bits of positions a ring back, or none.
  uint64_t w = begin >> 6;
  const uint64_t last = (end - 1) >> 6;
  if ((begin & 63) != 0) {
    chunk_bits_[w & word_mask_] &= ~(~uint64_t{0} << (begin & 63));
    DropSummaryIfEmpty(w);
    ++w;
  }
  while (w <= last) {
    // Up to the end of the ring or of the summary word, whichever comes first.
    const uint64_t slot = w & word_mask_;
    const uint64_t n = std::min({last - w + 1, word_mask_ + 1 - slot, 64 - (w & 63)});
    std::memset(chunk_bits_.data() + slot, 0, n * sizeof(uint64_t));
    const uint64_t mask = (n == 64 ? ~uint64_t{0} : ((uint64_t{1} << n) - 1)) << (w & 63);
    summary_[(w >> 6) & summary_mask_] &= ~mask;
    w += n;
  }
}

namespace {

// The first of `len` sorted entries that is >= key, given that the last one is. A fixed number
// of halvings for a given length, each a conditional add, not a branch: match sources land
// anywhere among the entries, so a branch here mispredicts about every other step.
const uint64_t* BranchFreeLowerBound(const uint64_t* first, uint64_t len, uint64_t key) {
  while (len > 1) {
    const uint64_t half = len / 2;
    const uint64_t below = 0 - static_cast<uint64_t>(first[half - 1] < key);
    first += half & below;
    len -= half;
  }
  return first;
}

}  // namespace

uint64_t NonzeroIndex::LowerBound(uint64_t position, uint64_t frontier) {
  // Match sources are usually close behind the frontier, so the answer is usually among the
  // last entries: one probe tells whether it is among the last kNear, searched without a
  // branch; otherwise the page index finds it.
  constexpr size_t kNear = 64;
  const size_t n = entries_.size();
  const uint64_t key = position << 8;
  const uint64_t* const data = entries_.data();
  if (n == 0 || data[n - 1] < key) return end();  // every entry is below the position
  if (n <= kNear || data[n - kNear] < key) {
    const size_t lo = n <= kNear ? 0 : n - kNear + 1;  // the answer lies in [lo, n - 1]
    const uint64_t* first = BranchFreeLowerBound(data + lo, n - lo, key);
    return base_ + static_cast<uint64_t>(first - data);
  }
  return PagedLowerBound(position, frontier);
}

uint64_t NonzeroIndex::PagedLowerBound(uint64_t position, uint64_t frontier) {
  const uint64_t frontier_page = frontier >> kPageShift;
  if (frontier_page >= page_base_ + first_.size()) ExtendPages(frontier_page);
  uint64_t page = position >> kPageShift;
  if (page < page_base_) page = page_base_;  // pruned: nothing below the floor survives
  const uint64_t slot = page - page_base_;
  const uint64_t lo = first_[slot] - base_;
  const uint64_t hi = slot + 1 < first_.size() ? first_[slot + 1] - base_ : entries_.size();
  const uint64_t key = position << 8;
  const uint64_t* first = entries_.data() + lo;
  uint64_t n = hi - lo;
  if (n > kGuessSpan) {
    // A page's entries are spread over its positions, so the answer is usually within a few
    // entries of the position's share of the page. Two independent loads check that guess's
    // span, and a hit is searched inside it (one or two cache lines) instead of halving the
    // whole page through a chain of dependent loads, each a likely cache miss this far back.
    const uint64_t in_page = position > page << kPageShift ? position - (page << kPageShift) : 0;
    const uint64_t guess = (in_page * n) >> kPageShift;  // in [0, n)
    const uint64_t start =
        std::min<uint64_t>(guess > kGuessSpan / 2 ? guess - kGuessSpan / 2 : 0, n - kGuessSpan);
    if ((start == 0 || first[start - 1] < key) && first[start + kGuessSpan - 1] >= key) {
      const uint64_t* found = BranchFreeLowerBound(first + start, kGuessSpan, key);
      return base_ + static_cast<uint64_t>(found - entries_.data());
    }
  }
  // Branchless lower bound over [lo, hi): no mispredictions on random match sources.
  if (n > 0) {
    while (n > 1) {
      const uint64_t half = n / 2;
      first = first[half] < key ? first + half : first;
      n -= half;
    }
    first += *first < key;
  }
  return base_ + static_cast<uint64_t>(first - entries_.data());
}

void NonzeroIndex::Prune(uint64_t floor, uint64_t frontier) {
  const uint64_t floor_page = floor >> kPageShift;
  if (floor_page <= page_base_) return;
  const uint64_t frontier_page = frontier >> kPageShift;
  if (frontier_page >= page_base_ + first_.size()) ExtendPages(frontier_page);
  const uint64_t drop_pages = std::min<uint64_t>(floor_page - page_base_, first_.size() - 1);
  // Batch: release only when at least half of the pages (and a thousand) are stale.
  if (drop_pages < 1024 || drop_pages * 2 < first_.size()) return;
  // Only entries whose ring bits are already cleared go: those below the window but not yet
  // below the ring's horizon stay until BeginBlock retires them (with the block's other stale
  // entries, often as whole words), instead of being cleared one by one here and their words
  // cleared again there.
  const uint64_t new_base = std::min(first_[drop_pages], retired_);
  entries_.EraseFront(static_cast<size_t>(new_base - base_));
  base_ = new_base;
  first_.erase(first_.begin(), first_.begin() + static_cast<ptrdiff_t>(drop_pages));
  page_base_ += drop_pages;
}

}  // namespace deltakv::deltasync::walker
