#include "base/parallel.h"

#include <atomic>
#include <mutex>
#include <thread>
#include <vector>

namespace deltakv {

unsigned DefaultThreads() {
  unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : n;
}

Status ParallelFor(size_t n, unsigned threads, const std::function<Status(size_t)>& fn) {
  return ParallelForWorkers(n, threads, [&](size_t i, unsigned) { return fn(i); });
}

Status ParallelForWorkers(size_t n, unsigned threads,
                          const std::function<Status(size_t, unsigned)>& fn) {
  if (threads == 0) threads = DefaultThreads();
  if (threads > n) threads = static_cast<unsigned>(n);
  if (threads <= 1) {
    for (size_t i = 0; i < n; ++i) RETURN_IF_ERROR(fn(i, 0));
    return Status::Ok();
  }
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  std::mutex mu;
  size_t first_bad = n;
  Status first_status;
  auto worker = [&](unsigned id) {
    while (!failed.load(std::memory_order_relaxed)) {
      size_t i = next.fetch_add(1, std::memory_order_relaxed);
      if (i >= n) return;
      Status s = fn(i, id);
      if (!s.ok()) {
        std::lock_guard<std::mutex> lock(mu);
        if (i < first_bad) {
          first_bad = i;
          first_status = std::move(s);
        }
        failed.store(true, std::memory_order_relaxed);
      }
    }
  };
  std::vector<std::thread> pool;
  pool.reserve(threads - 1);
  for (unsigned t = 1; t < threads; ++t) pool.emplace_back(worker, t);
  worker(0);
  for (auto& t : pool) t.join();
  return first_status;
}

}  // namespace deltakv
