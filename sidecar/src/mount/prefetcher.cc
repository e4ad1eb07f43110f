#include "mount/prefetcher.h"

#include <algorithm>

namespace deltakv::mount {

Prefetcher::Prefetcher(ChunkCache& cache, PrefetcherOptions options)
    : cache_(cache), options_(options) {
  for (int i = 0; i < std::max(1, options_.threads); ++i) workers_.emplace_back([this] { Work(); });
}

Prefetcher::~Prefetcher() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    for (const auto& c : queue_) inflight_bytes_ -= c.size;
    for (const auto& c : queue_) pending_.erase(c.digest);
    queue_.clear();
  }
  wake_.notify_all();
  for (std::thread& t : workers_) t.join();
}

bool Prefetcher::Schedule(const deltasync::VolumeChunk& chunk) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_ || pending_.count(chunk.digest) != 0) return false;
    if (inflight_bytes_ + chunk.size > options_.max_inflight_bytes) return false;
    if (cache_.Has(chunk.digest)) return false;
    pending_.insert(chunk.digest);
    queue_.push_back(chunk);
    inflight_bytes_ += chunk.size;
    peak_inflight_bytes_ = std::max(peak_inflight_bytes_, inflight_bytes_);
  }
  wake_.notify_one();
  return true;
}

void Prefetcher::Work() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    wake_.wait(lock, [this] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping
    deltasync::VolumeChunk chunk = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    (void)cache_.Get(chunk);  // a failure is reported by the read that needs the chunk
    lock.lock();
    pending_.erase(chunk.digest);
    inflight_bytes_ -= chunk.size;
    if (inflight_bytes_ == 0) idle_.notify_all();
  }
}

void Prefetcher::WaitIdle() {
  std::unique_lock<std::mutex> lock(mu_);
  idle_.wait(lock, [this] { return inflight_bytes_ == 0; });
}

uint64_t Prefetcher::peak_inflight_bytes() {
  std::lock_guard<std::mutex> lock(mu_);
  return peak_inflight_bytes_;
}

}  // namespace deltakv::mount
