// Liveness: heartbeats in shared memory and a checker that decides whether a peer is dead.
//
// A process that others depend on (the sidecar, each engine rank) owns a Heartbeat in a
// segment and bumps it from a background HeartbeatThread: the counter is incremented and the
// timestamp set to CLOCK_MONOTONIC (system-wide on Linux, so comparable across processes).
// It also holds a LivenessToken (shm/liveness_token.h): a locked file in the shared directory
// that the kernel unlocks when the process dies, whichever PID namespace it lives in. A peer
// records its pid, PID namespace, start time and token id next to its heartbeat (PeerIdentity).
// It is dead when its token is released, or (only when it shares the checker's PID namespace,
// where a pid means the same process to both) when its pid is gone, a zombie or reused, or when
// its heartbeat is older than `stale_after` (default 1 s; a stopped or wedged process counts as
// dead: it keeps its token but stops beating). With the default 100 ms period, a death is
// noticed within about a second, usually at once through the token. See shm/PROTOCOL.md §5.
//
// Ownership: a Heartbeat lives in shared memory and has exactly one writer, its owner.
// HeartbeatThread owns its thread and joins it on destruction. Checks never write.
//
// Thread-safety: Beat and the checks are lock-free and may run concurrently in any processes.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace deltakv::shm {

// Nanoseconds of CLOCK_MONOTONIC.
uint64_t MonotonicNowNs();

// 16 bytes in shared memory. Written only by its owner.
struct Heartbeat {
  std::atomic<uint64_t> counter;       // incremented on every beat
  std::atomic<uint64_t> timestamp_ns;  // MonotonicNowNs() of the last beat; 0 = never
};
static_assert(sizeof(Heartbeat) == 16);
static_assert(offsetof(Heartbeat, timestamp_ns) == 8);

// Records one beat: release-stores the timestamp, then bumps the counter.
void Beat(Heartbeat* heartbeat, uint64_t now_ns = MonotonicNowNs());

// Who a process is: its pid plus its start time (field 22 of /proc/<pid>/stat, clock ticks since
// boot), which tells a live owner from an unrelated process that reused the pid. 16 bytes.
struct ProcessIdentity {
  uint32_t pid;
  uint32_t reserved;          // zero
  uint64_t start_time_ticks;  // 0 = unknown (then only the pid is checked)
};
static_assert(sizeof(ProcessIdentity) == 16);
static_assert(offsetof(ProcessIdentity, start_time_ticks) == 8);

// This process's identity.
ProcessIdentity SelfIdentity();
// Start time of `pid` from /proc, or 0 if it cannot be read.
uint64_t ProcessStartTimeTicks(pid_t pid);

// True while `pid` names a running process: kill(pid, 0) succeeds or fails with EPERM, and
// /proc does not show it as a zombie. pid <= 0 is never alive.
bool IsProcessAlive(pid_t pid);
// As IsProcessAlive, and the process's start time matches the identity's (when recorded).
bool IsProcessAlive(const ProcessIdentity& identity);

struct LivenessOptions {
  std::chrono::nanoseconds stale_after = std::chrono::seconds(1);
};

enum class PeerState {
  kAlive,
  kProcessGone,     // token released, or (same PID namespace) no such pid, a zombie, or reused
  kHeartbeatStale,  // the process exists but has not beaten for longer than stale_after
};
std::string PeerStateName(PeerState state);

// Judges a peer from its identity and heartbeat, as of `now_ns` (injectable for tests). The
// process is checked first; a heartbeat that never beat (timestamp 0) is stale.
// Only valid for a peer in the caller's PID namespace; see PeerIdentity for any other.
PeerState CheckPeer(const ProcessIdentity& identity, const Heartbeat& heartbeat,
                    const LivenessOptions& options = {}, uint64_t now_ns = MonotonicNowNs());

// A peer as it records itself in shared memory, valid from any PID namespace.
struct PeerIdentity {
  uint32_t pid = 0;               // in the peer's own PID namespace
  uint64_t start_time_ticks = 0;  // 0 = unknown
  uint64_t pid_ns = 0;            // SelfPidNamespace() of the peer; 0 = unknown
  uint64_t token_id = 0;          // its LivenessToken; 0 = none recorded
};

// The peer's process evidence (PROTOCOL.md §5 rules 1-4): false if it shares this process's PID
// namespace and its pid is gone, a zombie or reused (the fast path: no file is opened), or if
// its token is released. A peer of another namespace with no token recorded gives no process
// evidence (true): its heartbeat alone decides.
bool PeerProcessAlive(const PeerIdentity& peer);

// As above for a peer of any PID namespace: kProcessGone if PeerProcessAlive is false, else
// the heartbeat decides. pid 0 is never alive.
PeerState CheckPeer(const PeerIdentity& peer, const Heartbeat& heartbeat,
                    const LivenessOptions& options = {}, uint64_t now_ns = MonotonicNowNs());

// Bumps a Heartbeat every `period` from its own thread until destroyed. Beats once in the
// constructor, so the heartbeat is fresh when construction returns.
// REQUIRES: the Heartbeat outlives this object; no other writer.
class HeartbeatThread {
 public:
  static constexpr std::chrono::milliseconds kDefaultPeriod{100};

  HeartbeatThread() = default;
  // Beats once now, then every `period`. With `still_owner`, each later beat first asks it and
  // the thread stops beating for good once it says false: another process has taken the
  // heartbeat over (this one was judged dead while stopped, say), and a heartbeat has one writer.
  explicit HeartbeatThread(Heartbeat* heartbeat, std::chrono::nanoseconds period = kDefaultPeriod,
                           std::function<bool()> still_owner = {});
  HeartbeatThread(const HeartbeatThread&) = delete;
  HeartbeatThread& operator=(const HeartbeatThread&) = delete;
  ~HeartbeatThread();

  // Stops and joins the thread (idempotent). The heartbeat then goes stale.
  void Stop();
  bool running() const { return thread_.joinable(); }

 private:
  void Run();

  Heartbeat* heartbeat_ = nullptr;
  std::chrono::nanoseconds period_{kDefaultPeriod};
  std::function<bool()> still_owner_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;  // GUARDED_BY(mu_)
  std::thread thread_;
};

}  // namespace deltakv::shm
