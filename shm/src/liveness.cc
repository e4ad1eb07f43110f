#include "shm/liveness.h"

#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <iterator>
#include <sstream>

#include "shm/liveness_token.h"

namespace deltakv::shm {
namespace {

// The state letter and start time of `pid` from /proc/<pid>/stat; false if unreadable.
bool ReadProcStat(pid_t pid, char* state, uint64_t* start_ticks) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  if (!in) return false;
  std::string line((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // "pid (comm) S ppid ...": comm may hold spaces and parentheses, so split after the last ')'.
  size_t close = line.rfind(')');
  if (close == std::string::npos) return false;
  std::istringstream fields(line.substr(close + 1));
  std::string field;
  // Field 3 is the state; field 22 the start time.
  for (int index = 3; index <= 22; ++index) {
    if (!(fields >> field)) return false;
    if (index == 3) *state = field.empty() ? '?' : field[0];
  }
  char* end = nullptr;
  *start_ticks = std::strtoull(field.c_str(), &end, 10);
  return end != field.c_str();
}

}  // namespace

uint64_t MonotonicNowNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

void Beat(Heartbeat* heartbeat, uint64_t now_ns) {
  heartbeat->timestamp_ns.store(now_ns, std::memory_order_release);
  heartbeat->counter.fetch_add(1, std::memory_order_release);
}

uint64_t ProcessStartTimeTicks(pid_t pid) {
  char state = '?';
  uint64_t start = 0;
  return ReadProcStat(pid, &state, &start) ? start : 0;
}

ProcessIdentity SelfIdentity() {
  pid_t pid = getpid();
  return ProcessIdentity{static_cast<uint32_t>(pid), 0, ProcessStartTimeTicks(pid)};
}

bool IsProcessAlive(pid_t pid) {
  if (pid <= 0) return false;
  if (kill(pid, 0) != 0 && errno == ESRCH) return false;
  char state = '?';
  uint64_t start = 0;
  // A zombie ('Z') or dying ('X') process has exited; only its parent has not reaped it yet.
  if (ReadProcStat(pid, &state, &start) && (state == 'Z' || state == 'X')) return false;
  return true;
}

bool IsProcessAlive(const ProcessIdentity& identity) {
  auto pid = static_cast<pid_t>(identity.pid);
  if (pid <= 0 || static_cast<uint32_t>(pid) != identity.pid) return false;
  if (kill(pid, 0) != 0 && errno == ESRCH) return false;
  char state = '?';
  uint64_t start = 0;
  if (!ReadProcStat(pid, &state, &start)) {
    // /proc unreadable (e.g. hidepid): trust kill().
    return true;
  }
  if (state == 'Z' || state == 'X') return false;
  if (identity.start_time_ticks != 0 && start != identity.start_time_ticks) return false;
  return true;
}

std::string PeerStateName(PeerState state) {
  switch (state) {
    case PeerState::kAlive:
      return "alive";
    case PeerState::kProcessGone:
      return "process gone";
    case PeerState::kHeartbeatStale:
      return "heartbeat stale";
  }
  return "unknown";
}

namespace {

PeerState CheckHeartbeat(const Heartbeat& heartbeat, const LivenessOptions& options,
                         uint64_t now_ns) {
  uint64_t last = heartbeat.timestamp_ns.load(std::memory_order_acquire);
  if (last == 0) return PeerState::kHeartbeatStale;
  // A beat stamped after `now_ns` (the caller read the clock first) is fresh.
  if (now_ns > last && now_ns - last > static_cast<uint64_t>(options.stale_after.count())) {
    return PeerState::kHeartbeatStale;
  }
  return PeerState::kAlive;
}

}  // namespace

PeerState CheckPeer(const ProcessIdentity& identity, const Heartbeat& heartbeat,
                    const LivenessOptions& options, uint64_t now_ns) {
  if (!IsProcessAlive(identity)) return PeerState::kProcessGone;
  return CheckHeartbeat(heartbeat, options, now_ns);
}

bool PeerProcessAlive(const PeerIdentity& peer) {
  if (peer.pid == 0) return false;
  if (peer.pid_ns != 0 && peer.pid_ns == SelfPidNamespace()) {
    // Same namespace: the pid means the same process to both of us.
    if (!IsProcessAlive(ProcessIdentity{peer.pid, 0, peer.start_time_ticks})) return false;
  }
  // kUnknown (the file could not be tested) is no evidence either way.
  return peer.token_id == 0 || CheckToken(peer.token_id) != TokenState::kReleased;
}

PeerState CheckPeer(const PeerIdentity& peer, const Heartbeat& heartbeat,
                    const LivenessOptions& options, uint64_t now_ns) {
  if (!PeerProcessAlive(peer)) return PeerState::kProcessGone;
  return CheckHeartbeat(heartbeat, options, now_ns);
}

HeartbeatThread::HeartbeatThread(Heartbeat* heartbeat, std::chrono::nanoseconds period,
                                 std::function<bool()> still_owner)
    : heartbeat_(heartbeat), period_(period), still_owner_(std::move(still_owner)) {
  Beat(heartbeat_);
  thread_ = std::thread([this] { Run(); });
}

HeartbeatThread::~HeartbeatThread() { Stop(); }

void HeartbeatThread::Stop() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void HeartbeatThread::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!cv_.wait_for(lock, period_, [this] { return stop_; })) {
    if (still_owner_ && !still_owner_()) return;  // someone else's heartbeat now
    Beat(heartbeat_);
  }
}

}  // namespace deltakv::shm
