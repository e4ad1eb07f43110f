// Helpers for the multi-process shm tests: unique segment names, forked children, bounded waits.
//
// Children run a function and leave with _exit(its result), so no gtest state or destructor of
// the parent runs twice. Results: 0 = success; anything else names the failed step.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <string>
#include <string_view>
#include <thread>

#include "shm/segment.h"

namespace deltakv::shm::testing {

// "dkvtest-<tag>-<pid>-<n>": unique per process and call, so parallel test runs never collide.
inline std::string UniqueName(std::string_view tag) {
  static std::atomic<int> counter{0};
  return "dkvtest-" + std::string(tag) + "-" + std::to_string(getpid()) + "-" +
         std::to_string(counter.fetch_add(1));
}

// Unlinks a segment name on scope exit (ignoring "not found").
class ScopedUnlink {
 public:
  explicit ScopedUnlink(std::string name) : name_(std::move(name)) {}
  ~ScopedUnlink() { (void)Segment::Unlink(name_); }
  const std::string& name() const { return name_; }

 private:
  std::string name_;
};

// Forks; the child runs `fn` and _exits with its result (255 if it throws).
inline pid_t ForkChild(const std::function<int()>& fn) {
  pid_t pid = fork();
  if (pid == 0) {
    int rc = 255;
    try {
      rc = fn();
    } catch (...) {
    }
    _exit(rc);
  }
  return pid;
}

// Waits for `pid` up to `timeout`. Returns its exit code, 128 + signal if a signal ended it, or
// -1 if it did not finish in time (it is then SIGKILLed and reaped).
inline int WaitChild(pid_t pid, std::chrono::milliseconds timeout = std::chrono::seconds(120)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    int status = 0;
    pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) {
      if (WIFEXITED(status)) return WEXITSTATUS(status);
      if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
      return -2;
    }
    if (r < 0) return -3;
    if (std::chrono::steady_clock::now() >= deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

// True once `counter` has not moved for 20 ms (a heartbeat of 1 ms never stands that still),
// false if it keeps moving for 10 s: a stopped heartbeat, judged without betting on how late a
// beat already under way may land on a loaded machine.
inline bool StaysStill(const std::atomic<uint64_t>& counter) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    const uint64_t before = counter.load();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (counter.load() == before) return true;
  }
  return false;
}

// Polls `condition` every millisecond until it holds or `timeout` passes.
inline bool WaitFor(const std::function<bool()>& condition,
                    std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!condition()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

}  // namespace deltakv::shm::testing
