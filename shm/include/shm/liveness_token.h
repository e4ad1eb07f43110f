// LivenessToken: proof of life that the kernel withdraws when its holder dies, valid across PID
// namespaces (shm/PROTOCOL.md §5.1).
//
// A pid names a process only inside one PID namespace: in a Kubernetes pod the sidecar and the
// engine containers each have their own, so kill(pid, 0) or /proc/<pid> tells one nothing about
// the other. What they do share is the directory that backs their shared memory (/dev/shm). A
// process that others depend on creates a small token file there, `dkvlive-<id>` with `id` a
// random 64-bit number (16 lowercase hex digits), and holds an exclusive open-file-description
// lock (fcntl F_OFD_SETLK) on it for as long as it lives. The kernel drops the lock when the
// last descriptor of that open file description closes, which happens when the process exits,
// however it exits. A peer tests the token with F_OFD_GETLK on a descriptor of its own: a lock
// that could be placed means the holder is gone. The file also records who holds it (pid in
// the holder's namespace, the inode of that namespace, start time), so a pid written into
// shared memory by a process of any namespace can be mapped back to tokens (LivenessDirectory).
//
// Ownership: a LivenessToken owns its file and descriptor; destroying it unlinks the file and
// releases the lock. ProcessLivenessToken() is the one token of this process, created on first
// use, recreated in a forked child (the child closes the parent's inherited descriptor, so the
// parent's token never outlives the parent), and removed by a normal exit. Tokens of processes
// that died are removed by whoever finds them released (RemoveReleasedTokens).
//
// Thread-safety: every function may be called from any thread. A LivenessDirectory is one
// caller's snapshot and is not shared between threads.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "shm/segment.h"

namespace deltakv::shm {

// The directory of token files: $DELTAKV_LIVENESS_DIR if set and non-empty, else /dev/shm (the
// directory that holds the POSIX shared-memory segments, so whoever shares the segments shares
// the tokens).
std::string LivenessDir();

// The inode of /proc/self/ns/pid: equal in two processes iff they share a PID namespace.
// 0 if it cannot be read.
uint64_t SelfPidNamespace();

// The file name of token `id` inside the directory: "dkvlive-" + 16 lowercase hex digits.
std::string TokenFileName(uint64_t id);

// What a token file holds: 32 bytes, host byte order.
struct TokenRecord {
  uint64_t magic;        // kTokenMagic "DKVLIVE1"
  uint32_t pid;          // the holder's pid in its own PID namespace
  uint32_t reserved;     // zero
  uint64_t pid_ns;       // SelfPidNamespace() of the holder (0 = unknown)
  uint64_t start_ticks;  // the holder's start time (ProcessIdentity), 0 = unknown
};
static_assert(sizeof(TokenRecord) == 32);
static_assert(offsetof(TokenRecord, pid_ns) == 16);
inline constexpr uint64_t kTokenMagic = MagicFromText("DKVLIVE1");

class LivenessToken {
 public:
  // Creates `dir`/dkvlive-<random id>, locks it and fills in the record. The file appears
  // under its final name only once it is locked (it is built under "<name>.tmp" and renamed),
  // so a peer never sees an unlocked token that is alive. Errors: the errno of the failing
  // call, with the path; nothing is left behind on failure.
  static StatusOr<std::unique_ptr<LivenessToken>> Create(const std::string& dir = LivenessDir());
  LivenessToken(const LivenessToken&) = delete;
  LivenessToken& operator=(const LivenessToken&) = delete;
  // Unlinks the file, then closes the descriptor (which releases the lock).
  ~LivenessToken();

  uint64_t id() const { return id_; }
  const std::string& path() const { return path_; }
  // Forgets the descriptor without unlinking or unlocking through it (a forked child's copy).
  void Abandon();

 private:
  LivenessToken() = default;
  uint64_t id_ = 0;
  int fd_ = -1;
  std::string path_;
};

// This process's token, created in LivenessDir() on first use. After fork() the child gets a
// token of its own on its first call. Error if it cannot be created (then the next call tries
// again). The returned id stays valid until the process exits.
StatusOr<uint64_t> ProcessLivenessToken();

enum class TokenState {
  kHeld,      // the file exists and its lock is held: the holder is alive
  kReleased,  // the file is gone, or its lock is free: the holder exited
  kUnknown,   // the file could not be tested (an error other than "no such file")
};

// Tests token `id` in `dir` without taking the lock. id 0 is kReleased.
TokenState CheckToken(uint64_t id, const std::string& dir = LivenessDir());

// Removes every token file in `dir` whose lock is free (its holder died without cleaning up),
// and "*.tmp" files of a creation that never finished. Returns how many files were removed.
size_t RemoveReleasedTokens(const std::string& dir = LivenessDir());

// Answers "may the process that wrote pid P into shared memory still be alive?" for a pid of
// any PID namespace, from the token files in `dir`. A process writes its pid into shared
// memory only after its token exists, so a pid that no held token names belongs to a process
// that has exited. Two namespaces may use the same pid: the answer is then "alive" while any
// of the holders is, which can only delay a reclaim, never cause a wrong one.
class LivenessDirectory {
 public:
  explicit LivenessDirectory(std::string dir = LivenessDir()) : dir_(std::move(dir)) {}

  // True while some held token names `pid`. The first call scans the directory; a pid the scan
  // did not see triggers one more scan (its token may be newer than the scan), so a process
  // is never judged dead for having attached after the snapshot. pid 0 is never alive.
  bool MayBeAlive(uint32_t pid);

 private:
  void Scan();

  std::string dir_;
  bool scanned_ = false;
  std::unordered_map<uint32_t, bool> alive_;       // pid -> some held token names it
  std::unordered_map<uint32_t, bool> known_dead_;  // pids a rescan did not find either
};

}  // namespace deltakv::shm
