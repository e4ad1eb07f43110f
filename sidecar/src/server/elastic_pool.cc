#include "server/elastic_pool.h"

#include <iterator>
#include <system_error>
#include <utility>

namespace deltakv::sidecar {

ElasticPool::ElasticPool(size_t min_threads, size_t max_threads,
                         std::chrono::milliseconds idle_exit)
    : min_threads_(min_threads), max_threads_(max_threads), idle_exit_(idle_exit) {
  std::lock_guard<std::mutex> lock(mu_);
  while (threads_.size() < min_threads_) StartLocked();
}

ElasticPool::~ElasticPool() { Shutdown(); }

void ElasticPool::StartLocked() {
  threads_.emplace_back();
  const auto self = std::prev(threads_.end());
  try {
    // The thread takes mu_ before it looks at `self`, so the assignment below is seen.
    *self = std::thread(&ElasticPool::Worker, this, self);
    ++idle_;  // it takes a job as soon as it runs
  } catch (const std::system_error&) {
    threads_.erase(self);  // out of threads: the job waits for one that runs
    if (threads_.empty()) throw;
  }
}

void ElasticPool::Enqueue(std::function<void()> job) {
  ThreadList ended;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) return;
    jobs_.push_back(std::move(job));
    if (jobs_.size() > idle_ && threads_.size() < max_threads_) StartLocked();
    ended.splice(ended.end(), finished_);
  }
  wake_.notify_one();
  for (std::thread& t : ended) t.join();  // they have returned or are about to
}

void ElasticPool::Worker(ThreadList::iterator self) {
  std::unique_lock<std::mutex> lock(mu_);
  // Counted idle from its start (StartLocked) and whenever it runs no job.
  for (;;) {
    while (jobs_.empty() && !stop_) {
      const bool timed_out = wake_.wait_for(lock, idle_exit_) == std::cv_status::timeout;
      if (timed_out && jobs_.empty() && !stop_ && threads_.size() > min_threads_) {
        --idle_;
        finished_.splice(finished_.end(), threads_, self);  // joined by a later call
        return;
      }
    }
    if (jobs_.empty()) {  // stopping, and nothing left to run
      --idle_;
      return;
    }
    std::function<void()> job = std::move(jobs_.front());
    jobs_.pop_front();
    --idle_;
    lock.unlock();
    job();
    job = nullptr;  // whatever the job holds is released outside the lock
    lock.lock();
    ++idle_;
  }
}

void ElasticPool::Shutdown() {
  ThreadList all;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    // No thread starts or ends on idle from now on: these are all of them.
    all.splice(all.end(), threads_);
    all.splice(all.end(), finished_);
  }
  wake_.notify_all();
  for (std::thread& t : all) t.join();
}

size_t ElasticPool::threads() const {
  std::lock_guard<std::mutex> lock(mu_);
  return threads_.size();
}

}  // namespace deltakv::sidecar
