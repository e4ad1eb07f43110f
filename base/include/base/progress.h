// Progress: rate-limited progress lines on stderr for long-running work.
//
// Prints "<label>: <done>/<total> <unit> (<pct>%)" at most once per `interval`, only after
// the work has run for at least `interval` (short commands stay quiet), and a final line from
// Finish() if anything was printed. Disabled objects print nothing.
//
// Thread-safety: Add() may be called from many threads.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>

namespace deltakv {

class Progress {
 public:
  Progress(std::string label, uint64_t total, bool enabled,
           std::chrono::milliseconds interval = std::chrono::milliseconds(1000));
  void Add(uint64_t amount);
  void Finish();

 private:
  void Print(uint64_t done, bool final);
  std::string label_;
  uint64_t total_;
  bool enabled_;
  std::chrono::milliseconds interval_;
  std::chrono::steady_clock::time_point start_;
  std::atomic<uint64_t> done_{0};
  std::atomic<int64_t> next_print_ns_;
  std::mutex print_mu_;
  bool printed_ = false;
};

}  // namespace deltakv
