#include "base/parallel.h"

#include <pthread.h>
#include <sched.h>

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

WorkerCrew::WorkerCrew(unsigned helpers) {
  helpers_.reserve(helpers);
  helper_cpus_.resize(helpers);  // all empty: unset
  for (unsigned i = 0; i < helpers; ++i) {
    helpers_.emplace_back([this, i] { Helper(i + 1); });
    (void)pthread_setname_np(helpers_.back().native_handle(), "deltakv-crew");
  }
}

WorkerCrew::~WorkerCrew() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  for (std::thread& t : helpers_) t.join();
}

bool WorkerCrew::KeepHelpersOffThisCpu(unsigned helpers) {
  // Left to itself, the kernel often wakes a helper onto the waker's CPU (a wakeup that skips
  // the idle-CPU search when the CPUs were recently busy) and leaves it queued there behind
  // the caller, or the caller behind it, for up to a load-balancing tick while another CPU
  // idles.
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  const int here = sched_getcpu();
  if (here < 0 || here >= CPU_SETSIZE || sched_getaffinity(0, sizeof(allowed), &allowed) != 0) {
    return true;  // unknown: the helpers keep the affinity they have
  }
  CPU_CLR(here, &allowed);
  if (CPU_COUNT(&allowed) == 0) return false;
  // Only where a helper's set changed (a syscall each).
  for (unsigned i = 0; i < helpers; ++i) {
    if (CPU_EQUAL(&allowed, &helper_cpus_[i])) continue;
    (void)pthread_setaffinity_np(helpers_[i].native_handle(), sizeof(allowed), &allowed);
    helper_cpus_[i] = allowed;
  }
  return true;
}

void WorkerCrew::Run(unsigned n, const std::function<void(unsigned)>& fn) {
  // One call, no helper, or only this CPU (the helpers could only take turns with the caller).
  auto alone = [&] {
    for (unsigned i = 0; i < n; ++i) fn(i);
  };
  if (n <= 1 || helpers_.empty()) return alone();
  std::lock_guard<std::mutex> run(run_mu_);
  if (!KeepHelpersOffThisCpu(std::min(n, size()) - 1)) return alone();
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_ = &fn;
    job_calls_ = n;
    job_workers_ = std::min(n, size());
    running_ = job_workers_ - 1;
    ++generation_;
  }
  wake_.notify_all();
  for (unsigned i = 0; i < n; i += job_workers_) fn(i);
  std::unique_lock<std::mutex> lock(mu_);
  done_.wait(lock, [&] { return running_ == 0; });
  job_ = nullptr;
}

void WorkerCrew::Helper(unsigned index) {
  uint64_t seen = 0;
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
    if (stop_) return;
    seen = generation_;
    if (index >= job_workers_) continue;  // this job needs fewer helpers
    const std::function<void(unsigned)>* job = job_;
    const unsigned calls = job_calls_, stride = job_workers_;
    lock.unlock();
    for (unsigned i = index; i < calls; i += stride) (*job)(i);
    lock.lock();
    if (--running_ == 0) done_.notify_one();
  }
}

}  // namespace deltakv
