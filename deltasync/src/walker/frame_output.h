// FrameOutput: the decoded stream of one frame, kept virtually. It advances the frame position
// over literals, repeated bytes and matches and records every nonzero byte in the NonzeroIndex;
// that is all the per-sequence work. At the end of each block (EndBlock) one pass over the
// block's new entries hands them to the RunEmitter at their global positions and feeds the
// content checksum from them (zero gaps go to Xxh64::UpdateZeros), so neither costs anything
// inside the sequence loop.
#pragma once

#include <cstdint>
#include <span>

#include "deltasync/xor_digest.h"
#include "walker/nonzero_index.h"
#include "walker/run_emitter.h"
#include "walker/xxh64.h"

namespace deltakv::deltasync::walker {

class FrameOutput {
 public:
  explicit FrameOutput(RunEmitter& emitter) : emitter_(emitter) {}

  // Starts a frame whose first byte has global position `global_start`.
  void StartFrame(uint64_t global_start, uint64_t window, bool hash);

  uint64_t position() const { return pos_; }
  uint64_t nonzeros() const { return index_.end(); }  // indices count from the frame start

  // Brackets every block: BeginBlock before its first byte (`max_output` bounds what it may
  // write), EndBlock after its last (delivers its nonzeros and hashes them).
  void BeginBlock(uint64_t max_output) { index_.BeginBlock(pos_, max_output); }
  void EndBlock();

  // Appends bytes as they are (raw blocks, literals).
  void AppendBytes(const uint8_t* data, size_t size);
  // The same for a few bytes (a sequence's literals): no call, no branch per byte.
  [[gnu::always_inline]] void AppendFew(const uint8_t* data, size_t size) {
    for (size_t i = 0; i < size; ++i) index_.AppendIfNonzero(pos_ + i, data[i]);
    pos_ += size;
  }
  // The same for `n` of 0 or 1 bytes, without a branch on n. REQUIRES: data[0] is readable
  // (Literals::bytes[size] is).
  [[gnu::always_inline]] void AppendAtMostOne(const uint8_t* data, uint64_t n) {
    // A zero byte appends nothing; at n == 0 only the page of the current position is
    // covered, which a later append at or after it would cover anyway.
    index_.AppendIfNonzero(pos_, static_cast<uint8_t>(data[0] & (0u - static_cast<unsigned>(n))));
    pos_ += n;
  }
  // A sequence whose literals are 2 to 8 bytes, held in the low `n` bytes of `word` (the rest
  // zero), then its match: AppendFew and AppendMatch in one, with the per-byte work done on the
  // word. A match that starts inside these literals (offset <= n; a run and a zero copied at
  // offset 1 is how sparse deltas are parsed, FORMAT.md §2.1) repeats their last `offset`
  // bytes, so it produces only zeros when those bytes are zero: known from the word, with no
  // look at the index. REQUIRES: as AppendMatch, for the position after the literals.
  [[gnu::always_inline]] void AppendWordAndMatch(uint64_t word, uint64_t n, uint64_t offset,
                                                 uint64_t length) {
    index_.AppendWord(pos_, word);
    pos_ += n;
    if (offset <= n) [[likely]] {
      if ((word >> (8 * (n - offset))) == 0) [[likely]] {
        pos_ += length;
        return;
      }
      CopyMatch(offset, length);
      return;
    }
    AppendMatch(offset, length);
  }
  // Appends `count` copies of `value`.
  void AppendRepeated(uint8_t value, uint64_t count);
  // Advances the position by `count` bytes without looking at them: they are taken as zeros
  // (WalkerOptions::decode_only).
  void Skip(uint64_t count) { pos_ += count; }
  // Appends a match. REQUIRES: 1 <= offset <= position(), offset <= window.
  [[gnu::always_inline]] void AppendMatch(uint64_t offset, uint64_t length) {
    // Common case on sparse data: the source (or, when overlapping, its first period) holds
    // no nonzero byte, so the match produces only zeros.
    const uint64_t source = pos_ - offset;
    const uint64_t source_end = source + length;
    if (index_.EmptyRange(source, source_end < pos_ ? source_end : pos_, pos_)) {
      pos_ += length;
      return;
    }
    CopyMatch(offset, length);
  }

  // Drops index memory older than the window. Call between blocks.
  void PruneToWindow() {
    if (pos_ > window_) index_.Prune(pos_ - window_, pos_);
  }

  // Hashes the trailing zeros and returns the frame's XXH64.
  uint64_t FinishHash();

  // Starts (or, with false, stops) the xor_digest of everything delivered from now on, over
  // the global positions of all frames until the next call.
  void StartDigest(bool on) {
    digesting_ = on;
    digest_ = XorDigestBuilder();
  }
  XorDigest digest() const { return digest_.value(); }

 private:
  void CopyMatch(uint64_t offset, uint64_t length);
  void AddNonzero(uint64_t position, uint8_t value) { index_.Append(position, value); }

  RunEmitter& emitter_;
  NonzeroIndex index_;
  Xxh64 hash_;
  bool hashing_ = false;
  XorDigestBuilder digest_;
  bool digesting_ = false;
  uint64_t delivered_ = 0;  // absolute index of the first entry EndBlock has not handled
  uint64_t global_start_ = 0;
  uint64_t window_ = 0;
  uint64_t pos_ = 0;
};

}  // namespace deltakv::deltasync::walker
