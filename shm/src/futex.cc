#include "shm/futex.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>

namespace deltakv::shm {
namespace {

long Futex(std::atomic<uint32_t>* word, int op, uint32_t value, const timespec* timeout) {
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, value, timeout, nullptr, 0);
}

}  // namespace

FutexWaitResult FutexWait(std::atomic<uint32_t>* word, uint32_t expected,
                          std::chrono::nanoseconds timeout) {
  if (timeout.count() <= 0) {
    return word->load(std::memory_order_acquire) == expected ? FutexWaitResult::kTimedOut
                                                             : FutexWaitResult::kValueMismatch;
  }
  timespec ts{};
  ts.tv_sec = static_cast<time_t>(timeout.count() / 1'000'000'000);
  ts.tv_nsec = static_cast<long>(timeout.count() % 1'000'000'000);
  // FUTEX_WAIT (shared): the timeout is relative, measured on CLOCK_MONOTONIC.
  if (Futex(word, FUTEX_WAIT, expected, &ts) == 0) return FutexWaitResult::kWoken;
  switch (errno) {
    case EAGAIN:
      return FutexWaitResult::kValueMismatch;
    case ETIMEDOUT:
      return FutexWaitResult::kTimedOut;
    case EINTR:
      return FutexWaitResult::kInterrupted;
    default:
      // EFAULT/EINVAL would be programmer errors (unmapped or misaligned word); report as a
      // wake so the caller re-checks its condition instead of sleeping on a broken word.
      return FutexWaitResult::kWoken;
  }
}

int FutexWake(std::atomic<uint32_t>* word, int count) {
  long woken = Futex(word, FUTEX_WAKE, static_cast<uint32_t>(count), nullptr);
  return woken < 0 ? 0 : static_cast<int>(woken);
}

}  // namespace deltakv::shm
