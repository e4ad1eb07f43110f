// RunEmitter: groups nonzero bytes, produced in increasing position order, into runs for a
// NonzeroSink. Adjacent bytes (or bytes at most `merge_gap` zeros apart) share a run; a run is
// delivered when the next byte does not extend it, when it reaches kMaxRun bytes, or on Flush().
// A sink that takes bytes (NonzeroSink::TakesBytes) gets each batch of entries as it is, through
// OnBytes, and does its own merging. The first sink error is kept; afterwards nothing more is
// delivered.
#pragma once

#include <cstdint>
#include <vector>

#include "base/status.h"
#include "deltasync/xor_decoder.h"

namespace deltakv::deltasync::walker {

class RunEmitter {
 public:
  static constexpr size_t kMaxRun = 64 * 1024;

  RunEmitter(NonzeroSink& sink, uint32_t merge_gap)
      : sink_(&sink), merge_gap_(merge_gap), bytes_(sink.TakesBytes()) {
    run_.reserve(kMaxRun);
  }

  // Starts over for another sink, keeping the run buffer.
  void Restart(NonzeroSink& sink, uint32_t merge_gap) {
    sink_ = &sink;
    bytes_ = sink.TakesBytes();
    merge_gap_ = merge_gap;
    run_.clear();
    start_ = 0;
    runs_ = 0;
    status_ = Status::Ok();
  }

  // REQUIRES: position > the position of every earlier Add.
  void Add(uint64_t position, uint8_t value) {
    if (!run_.empty()) {
      const uint64_t end = start_ + run_.size();
      if (position == end && run_.size() < kMaxRun) {
        run_.push_back(value);
        return;
      }
      if (position - end <= merge_gap_ && run_.size() + (position - end) < kMaxRun) {
        run_.resize(run_.size() + (position - end), 0);
        run_.push_back(value);
        return;
      }
      Flush();
    }
    start_ = position;
    run_.push_back(value);
  }

  // Add() for each of `count` packed entries (position << 8 | value) at `base` + position, in
  // one loop: the common step (the next byte extends the run) is one compare and one store.
  void AddEntries(const uint64_t* entries, size_t count, uint64_t base) {
    if (bytes_) {
      if (count == 0 || !status_.ok()) return;
      Status s = sink_->OnBytes(entries, count, base);
      if (!s.ok()) [[unlikely]] status_ = std::move(s);
      ++runs_;
      return;
    }
    size_t i = 0;
    while (i < count) {
      if (!run_.empty()) {
        // Extend the current run with adjacent bytes while it has room.
        uint64_t end = start_ + run_.size();
        while (i < count && base + (entries[i] >> 8) == end && run_.size() < kMaxRun) {
          run_.push_back(static_cast<uint8_t>(entries[i]));
          ++end;
          ++i;
        }
        if (i == count) return;
      }
      Add(base + (entries[i] >> 8), static_cast<uint8_t>(entries[i]));
      ++i;
    }
  }

  void Flush() {
    if (run_.empty()) return;
    if (status_.ok()) {
      Status s = sink_->OnRun(start_, run_);
      if (!s.ok()) [[unlikely]] status_ = std::move(s);  // no assignment on the common path
      ++runs_;
    }
    run_.clear();
  }

  const Status& status() const { return status_; }
  // OnRun calls made (OnBytes calls for a sink that takes bytes).
  uint64_t runs() const { return runs_; }

 private:
  NonzeroSink* sink_;
  uint64_t merge_gap_;
  bool bytes_;  // the sink takes bytes: entries go to OnBytes as they come
  std::vector<uint8_t> run_;
  uint64_t start_ = 0;
  uint64_t runs_ = 0;
  Status status_;
};

}  // namespace deltakv::deltasync::walker
