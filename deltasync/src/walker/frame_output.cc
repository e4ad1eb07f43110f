#include "walker/frame_output.h"

#include <algorithm>
#include <cstring>

namespace deltakv::deltasync::walker {

void FrameOutput::StartFrame(uint64_t global_start, uint64_t window, bool hash) {
  index_.Reset(window);
  hash_.Reset();
  hashing_ = hash;
  delivered_ = 0;
  global_start_ = global_start;
  window_ = window;
  pos_ = 0;
}

void FrameOutput::EndBlock() {
  const uint64_t end = index_.end();
  emitter_.AddEntries(index_.data_at(delivered_), end - delivered_, global_start_);
  if (hashing_ && pos_ > hash_.length()) {
    hash_.UpdateSparse(index_.data_at(delivered_), end - delivered_, pos_);
  }
  if (digesting_) {
    const uint64_t* e = index_.data_at(delivered_);
    for (uint64_t i = 0, n = end - delivered_; i < n; ++i) {
      digest_.AddLoose(global_start_ + (e[i] >> 8), static_cast<uint8_t>(e[i]));
    }
  }
  delivered_ = end;
}

void FrameOutput::AppendBytes(const uint8_t* data, size_t size) {
  size_t i = 0;
  // Skip zero words quickly; inspect bytes only in words that hold a nonzero.
  while (i + 8 <= size) {
    uint64_t w;
    std::memcpy(&w, data + i, 8);
    if (w == 0) {
      i += 8;
      continue;
    }
    for (size_t j = 0; j < 8; ++j) {
      if (data[i + j] != 0) AddNonzero(pos_ + i + j, data[i + j]);
    }
    i += 8;
  }
  for (; i < size; ++i) {
    if (data[i] != 0) AddNonzero(pos_ + i, data[i]);
  }
  pos_ += size;
}

void FrameOutput::AppendRepeated(uint8_t value, uint64_t count) {
  if (value == 0) {
    pos_ += count;
    return;
  }
  for (uint64_t i = 0; i < count; ++i) AddNonzero(pos_ + i, value);
  pos_ += count;
}

void FrameOutput::CopyMatch(uint64_t offset, uint64_t length) {
  const uint64_t source = pos_ - offset;
  const uint64_t source_end = source + length;  // may exceed pos_: overlapping match
  // Entries appended during the loop are themselves visited when the match overlaps its own
  // output, which repeats the pattern exactly like a byte-by-byte copy, in O(nonzeros produced).
  for (uint64_t i = index_.LowerBound(source, pos_); i < index_.end(); ++i) {
    const uint64_t e = index_.at(i);
    const uint64_t p = e >> 8;
    if (p >= source_end) break;
    AddNonzero(p + offset, static_cast<uint8_t>(e));
  }
  pos_ += length;
}

uint64_t FrameOutput::FinishHash() {
  hash_.UpdateZeros(pos_ - hash_.length());
  return hash_.Digest();
}

}  // namespace deltakv::deltasync::walker
