// Prefetcher: background threads that pull chunks into a ChunkCache ahead of sequential reads.
//
// Schedule(chunk) queues a chunk unless the cache already has it (in memory, on disk or being
// fetched), it is already queued, or queueing it would take the bytes queued plus being
// fetched above `max_inflight_bytes` (then it is dropped: read-ahead is a hint, and the
// foreground read fetches what it needs). Workers call ChunkCache::Get, so a prefetch and a
// foreground read of the same chunk share one fetch. Errors are not reported here: a chunk
// that fails to fetch is not cached, and the read that needs it fails and reports it.
//
// Ownership: borrows the cache, which must outlive the prefetcher. The destructor drops the
// queue and joins the workers after their current fetch.
// Thread-safety: Schedule may be called from any number of threads at once.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

#include "mount/chunk_cache.h"

namespace deltakv::mount {

struct PrefetcherOptions {
  int threads = 4;
  uint64_t max_inflight_bytes = 256ull << 20;
};

class Prefetcher {
 public:
  // REQUIRES: options.threads >= 1.
  Prefetcher(ChunkCache& cache, PrefetcherOptions options);
  ~Prefetcher();
  Prefetcher(const Prefetcher&) = delete;
  Prefetcher& operator=(const Prefetcher&) = delete;

  // Returns true if the chunk was queued; false if skipped (cached, queued, or over budget).
  bool Schedule(const deltasync::VolumeChunk& chunk);

  // Blocks until nothing is queued or being fetched (for tests and orderly shutdown).
  void WaitIdle();

  // The most bytes that were ever queued or being fetched at once.
  uint64_t peak_inflight_bytes();

 private:
  void Work();

  ChunkCache& cache_;
  const PrefetcherOptions options_;
  std::mutex mu_;
  std::condition_variable wake_;   // workers wait for work or stop
  std::condition_variable idle_;   // WaitIdle waits for inflight_bytes_ == 0
  std::deque<deltasync::VolumeChunk> queue_;  // GUARDED_BY(mu_)
  std::unordered_set<std::string> pending_;      // queued or fetching; GUARDED_BY(mu_)
  uint64_t inflight_bytes_ = 0;                  // GUARDED_BY(mu_)
  uint64_t peak_inflight_bytes_ = 0;             // GUARDED_BY(mu_)
  bool stop_ = false;                            // GUARDED_BY(mu_)
  std::vector<std::thread> workers_;
};

}  // namespace deltakv::mount
