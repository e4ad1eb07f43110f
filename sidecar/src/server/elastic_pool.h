// ElasticPool: the HTTP API's worker threads. The server runs each connection as one job for
// as long as the connection lasts (keep-alive included), so a fixed pool lets as many idle,
// slow or half-sent clients hold every thread while a health probe waits behind them. This
// pool keeps `min_threads` threads and starts another, up to `max_threads`, whenever a job
// arrives while no thread is idle; a thread above the minimum ends after `idle_exit` without
// work. At the cap, jobs wait in order for the next free thread.
//
// Thread-safety: Enqueue from any thread; Shutdown once everything that enqueues has stopped.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <list>
#include <mutex>
#include <thread>

namespace deltakv::sidecar {

class ElasticPool {
 public:
  // REQUIRES: 1 <= min_threads <= max_threads. Starts the minimum at once.
  ElasticPool(size_t min_threads, size_t max_threads, std::chrono::milliseconds idle_exit);
  ~ElasticPool();  // Shutdown()
  ElasticPool(const ElasticPool&) = delete;
  ElasticPool& operator=(const ElasticPool&) = delete;

  // Queues `job`, starting a thread for it when none is idle and the cap allows. A job queued
  // after Shutdown began is dropped.
  void Enqueue(std::function<void()> job);
  // Runs every job queued so far, then joins all threads. Idempotent.
  void Shutdown();

  // Threads alive now (running a job or idle).
  size_t threads() const;

 private:
  using ThreadList = std::list<std::thread>;
  void StartLocked();
  void Worker(ThreadList::iterator self);

  const size_t min_threads_;
  const size_t max_threads_;
  const std::chrono::milliseconds idle_exit_;
  mutable std::mutex mu_;
  std::condition_variable wake_;
  std::deque<std::function<void()>> jobs_;
  ThreadList threads_;   // alive
  ThreadList finished_;  // ended on idle, to be joined
  size_t idle_ = 0;      // threads not running a job
  bool stop_ = false;
};

}  // namespace deltakv::sidecar
