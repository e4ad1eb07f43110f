// Futex wait/wake on a 32-bit word in shared memory.
//
// These are *shared* futexes (no FUTEX_PRIVATE_FLAG): the kernel keys them by the physical
// page, so a waiter in one process is woken by a waker in another that maps the same segment
// at any address. A futex carries no state of its own: the word is the state. A waiter sleeps
// only while the word still holds the value it expects, so a wake that happens between reading
// the word and sleeping is never lost (the kernel compares before sleeping). A process that dies
// while waiting or before waking leaves nothing behind; waiters always pass a timeout so a dead
// waker costs at most that timeout.
//
// Thread-safety: all functions may be called concurrently from any thread of any process.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace deltakv::shm {

static_assert(sizeof(std::atomic<uint32_t>) == 4 && std::atomic<uint32_t>::is_always_lock_free,
              "futex words must be plain 32-bit words");

enum class FutexWaitResult {
  kWoken,          // a wake arrived (or a spurious wake-up: callers re-check the word)
  kValueMismatch,  // *word != expected when the kernel looked; nothing to wait for
  kTimedOut,       // the timeout elapsed
  kInterrupted,    // a signal arrived
};

// Sleeps while *word == expected, for at most `timeout` (CLOCK_MONOTONIC; a zero or negative
// timeout returns kTimedOut after the comparison). Spurious wake-ups are possible: callers loop
// on their own condition.
FutexWaitResult FutexWait(std::atomic<uint32_t>* word, uint32_t expected,
                          std::chrono::nanoseconds timeout);

// Wakes up to `count` waiters on `word`. Returns how many were woken (0 when none waited).
int FutexWake(std::atomic<uint32_t>* word, int count);
inline int FutexWakeAll(std::atomic<uint32_t>* word) { return FutexWake(word, INT32_MAX); }

}  // namespace deltakv::shm
