// ParallelFor: runs fn(i) for i in [0, n) on up to `threads` threads and returns the first error.
//
// Work is handed out in index order from a shared counter, so earlier items start first. After
// an item fails, no new items start; items already running finish. The returned Status is the
// error of the lowest-index failed item, so the result does not depend on scheduling.
//
// Thread-safety: fn must be safe to call concurrently for distinct i.
#pragma once

#include <cstddef>
#include <functional>

#include "base/status.h"

namespace deltakv {

Status ParallelFor(size_t n, unsigned threads, const std::function<Status(size_t)>& fn);

// As ParallelFor, but fn also receives the worker's index in [0, min(threads, n)), so callers
// can keep per-worker scratch state (no two concurrent calls share a worker index).
Status ParallelForWorkers(size_t n, unsigned threads,
                          const std::function<Status(size_t item, unsigned worker)>& fn);

// Threads to use when the caller asked for 0 ("all"): the number of online CPUs, at least 1.
unsigned DefaultThreads();

}  // namespace deltakv
