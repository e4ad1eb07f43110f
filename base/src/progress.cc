#include "base/progress.h"

#include <cstdio>

namespace deltakv {

namespace {
int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
}  // namespace

Progress::Progress(std::string label, uint64_t total, bool enabled,
                   std::chrono::milliseconds interval)
    : label_(std::move(label)),
      total_(total),
      enabled_(enabled),
      interval_(interval),
      start_(std::chrono::steady_clock::now()),
      next_print_ns_(NowNs() + std::chrono::nanoseconds(interval).count()) {}

void Progress::Add(uint64_t amount) {
  uint64_t done = done_.fetch_add(amount, std::memory_order_relaxed) + amount;
  if (!enabled_) return;
  int64_t now = NowNs();
  int64_t due = next_print_ns_.load(std::memory_order_relaxed);
  if (now < due) return;
  if (!next_print_ns_.compare_exchange_strong(due,
                                              now + std::chrono::nanoseconds(interval_).count())) {
    return;
  }
  Print(done, false);
}

void Progress::Finish() {
  if (!enabled_) return;
  std::lock_guard<std::mutex> lock(print_mu_);
  if (!printed_) return;
  printed_ = false;
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  std::fprintf(stderr, "%s: done, %.1f MiB in %.2f s\n", label_.c_str(),
               static_cast<double>(done_.load()) / (1 << 20), secs);
}

void Progress::Print(uint64_t done, bool /*final*/) {
  std::lock_guard<std::mutex> lock(print_mu_);
  printed_ = true;
  double pct =
      total_ == 0 ? 100.0 : 100.0 * static_cast<double>(done) / static_cast<double>(total_);
  std::fprintf(stderr, "%s: %.1f/%.1f MiB (%.0f%%)\n", label_.c_str(),
               static_cast<double>(done) / (1 << 20), static_cast<double>(total_) / (1 << 20), pct);
}

}  // namespace deltakv
