// ParallelFor: runs fn(i) for i in [0, n) on up to `threads` threads and returns the first error.
//
// Work is handed out in index order from a shared counter, so earlier items start first. After
// an item fails, no new items start; items already running finish. The returned Status is the
// error of the lowest-index failed item, so the result does not depend on scheduling.
//
// Thread-safety: fn must be safe to call concurrently for distinct i.
#pragma once

#include <sched.h>

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "base/status.h"

namespace deltakv {

Status ParallelFor(size_t n, unsigned threads, const std::function<Status(size_t)>& fn);

// As ParallelFor, but fn also receives the worker's index in [0, min(threads, n)), so callers
// can keep per-worker scratch state (no two concurrent calls share a worker index).
Status ParallelForWorkers(size_t n, unsigned threads,
                          const std::function<Status(size_t item, unsigned worker)>& fn);

// WorkerCrew: helper threads created once and kept asleep between jobs, for work that must
// start on several CPUs at once without creating threads on its path (the cpu backend's commit
// scatter, which runs inside the engine's pause).
//
// Run(n, fn) calls fn(0), ..., fn(n - 1), up to size() of them at once: fn(0) on the calling
// thread, fn(1) ... on helpers (worker w makes calls w, w + size(), ... when n > size()), and
// returns when every call has returned. The helpers run on the CPUs the caller may use,
// except the one the caller is on: left to itself, the kernel often places a new or woken
// thread on its waker's CPU (it skips the idle-CPU search when the CPUs were recently busy),
// where one waits behind the other for up to a load-balancing tick while another CPU idles.
// When the caller may use only its own CPU, it makes every call itself, one after another.
//
// Thread-safety: Run may be called from any thread; concurrent Runs take turns.
class WorkerCrew {
 public:
  // Starts `helpers` threads (0: Run calls fn(0) alone).
  explicit WorkerCrew(unsigned helpers);
  ~WorkerCrew();  // wakes and joins the helpers
  WorkerCrew(const WorkerCrew&) = delete;
  WorkerCrew& operator=(const WorkerCrew&) = delete;

  // Workers a Run can use: the caller and the helpers.
  unsigned size() const { return static_cast<unsigned>(helpers_.size()) + 1; }
  // REQUIRES: fn must not call Run on this crew.
  void Run(unsigned n, const std::function<void(unsigned worker)>& fn);

 private:
  void Helper(unsigned index);
  // Sets the affinity of helpers 0..helpers-1 to the CPUs the caller may use but the one it is
  // on; false when that leaves none. REQUIRES: run_mu_ held.
  bool KeepHelpersOffThisCpu(unsigned helpers);

  std::mutex run_mu_;  // one Run at a time
  std::mutex mu_;
  std::condition_variable wake_;  // a new job or stop
  std::condition_variable done_;  // the job's last helper finished
  const std::function<void(unsigned)>* job_ = nullptr;
  unsigned job_calls_ = 0;    // n of the current Run
  unsigned job_workers_ = 0;  // threads it uses: worker w makes calls w, w + job_workers_, ...
  uint64_t generation_ = 0;
  unsigned running_ = 0;  // helpers of the current job still working
  bool stop_ = false;
  std::vector<cpu_set_t> helper_cpus_;  // each helper's affinity as Run last set it (empty: unset)
  std::vector<std::thread> helpers_;
};

// Threads to use when the caller asked for 0 ("all"): the number of online CPUs, at least 1.
unsigned DefaultThreads();

}  // namespace deltakv
