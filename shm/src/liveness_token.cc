#include "shm/liveness_token.h"

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "shm/liveness.h"

namespace deltakv::shm {
namespace {

constexpr char kTokenPrefix[] = "dkvlive-";
constexpr size_t kTokenPrefixLength = sizeof(kTokenPrefix) - 1;
constexpr size_t kTokenNameLength = kTokenPrefixLength + 16;
constexpr char kTmpSuffix[] = ".tmp";
constexpr int kCreateAttempts = 8;

Status ErrnoStatus(const std::string& what, int err) {
  return Internal(what + ": " + std::strerror(err));
}

uint64_t RandomId() {
  uint64_t id = 0;
  while (id == 0) {
    if (getrandom(&id, sizeof(id), 0) != static_cast<ssize_t>(sizeof(id))) {
      // No entropy source: fall back to something unique enough on one host.
      id = (MonotonicNowNs() * 0x9E3779B97F4A7C15ull) ^ static_cast<uint64_t>(getpid());
    }
  }
  return id;
}

// 1 if an exclusive lock on `fd`'s file could be placed, 0 if another open file description
// holds a lock on it, -1 on error.
int LockIsFree(int fd) {
  struct flock lock {};
  lock.l_type = F_WRLCK;
  lock.l_whence = SEEK_SET;
  lock.l_start = 0;
  lock.l_len = 0;
  lock.l_pid = 0;
  if (fcntl(fd, F_OFD_GETLK, &lock) != 0) return -1;
  return lock.l_type == F_UNLCK ? 1 : 0;
}

std::string JoinPath(const std::string& dir, const std::string& name) {
  return dir.empty() || dir.back() == '/' ? dir + name : dir + "/" + name;
}

bool IsTokenName(const char* name) {
  return std::strncmp(name, kTokenPrefix, kTokenPrefixLength) == 0 &&
         std::strlen(name) == kTokenNameLength;
}

bool IsTmpName(const char* name) {
  const size_t length = std::strlen(name);
  return std::strncmp(name, kTokenPrefix, kTokenPrefixLength) == 0 &&
         length == kTokenNameLength + sizeof(kTmpSuffix) - 1 &&
         std::strcmp(name + kTokenNameLength, kTmpSuffix) == 0;
}

// The process-wide token. `mu` is held across fork() (pthread_atfork), so the child's view is
// consistent; the child closes its inherited descriptor without unlinking the parent's file.
struct ProcessToken {
  std::mutex mu;
  std::unique_ptr<LivenessToken> token;  // GUARDED_BY(mu)
  pid_t owner = 0;                       // GUARDED_BY(mu): the pid that created `token`

  ProcessToken() {
    pthread_atfork([] { Get().mu.lock(); }, [] { Get().mu.unlock(); },
                   [] {
                     ProcessToken& p = Get();
                     if (p.token != nullptr) p.token->Abandon();
                     p.token.reset();
                     p.owner = 0;
                     p.mu.unlock();
                   });
  }
  // A normal exit removes the file (the destructor of LivenessToken).
  ~ProcessToken() = default;

  static ProcessToken& Get() {
    static ProcessToken instance;
    return instance;
  }
};

}  // namespace

std::string LivenessDir() {
  const char* env = std::getenv("DELTAKV_LIVENESS_DIR");
  return env != nullptr && env[0] != '\0' ? std::string(env) : std::string("/dev/shm");
}

uint64_t SelfPidNamespace() {
  // A process never changes its own PID namespace (unshare/setns affect its children only).
  static const uint64_t ns = [] {
    struct stat st {};
    return stat("/proc/self/ns/pid", &st) == 0 ? static_cast<uint64_t>(st.st_ino) : uint64_t{0};
  }();
  return ns;
}

std::string TokenFileName(uint64_t id) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string name(kTokenPrefix);
  for (int shift = 60; shift >= 0; shift -= 4) name.push_back(kHex[(id >> shift) & 0xF]);
  return name;
}

StatusOr<std::unique_ptr<LivenessToken>> LivenessToken::Create(const std::string& dir) {
  const ProcessIdentity self = SelfIdentity();
  const TokenRecord record{kTokenMagic, self.pid, 0, SelfPidNamespace(), self.start_time_ticks};
  for (int attempt = 0;; ++attempt) {
    const uint64_t id = RandomId();
    const std::string path = JoinPath(dir, TokenFileName(id));
    const std::string tmp = path + kTmpSuffix;
    int fd = open(tmp.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) {
      if (errno == EEXIST && attempt + 1 < kCreateAttempts) continue;
      return ErrnoStatus("liveness token: create " + tmp, errno);
    }
    struct flock lock {};
    lock.l_type = F_WRLCK;
    lock.l_whence = SEEK_SET;
    bool ok = fcntl(fd, F_OFD_SETLK, &lock) == 0 &&
              pwrite(fd, &record, sizeof(record), 0) == static_cast<ssize_t>(sizeof(record));
    int err = ok ? 0 : errno;
    // The final name appears only now, locked: a scanner never sees it unlocked while alive.
    if (ok && rename(tmp.c_str(), path.c_str()) != 0) {
      ok = false;
      err = errno;
    }
    if (!ok) {
      (void)unlink(tmp.c_str());
      close(fd);
      // ENOENT: a cleaner removed the unlocked ".tmp" between open and lock; try a new id.
      if (err == ENOENT && attempt + 1 < kCreateAttempts) continue;
      return ErrnoStatus("liveness token: set up " + path, err);
    }
    std::unique_ptr<LivenessToken> token(new LivenessToken());
    token->id_ = id;
    token->fd_ = fd;
    token->path_ = path;
    return token;
  }
}

LivenessToken::~LivenessToken() {
  if (fd_ < 0) return;
  (void)unlink(path_.c_str());
  close(fd_);
}

void LivenessToken::Abandon() {
  if (fd_ >= 0) close(fd_);  // drops only this process's reference to the open description
  fd_ = -1;
}

StatusOr<uint64_t> ProcessLivenessToken() {
  ProcessToken& p = ProcessToken::Get();
  std::lock_guard<std::mutex> lock(p.mu);
  const pid_t self = getpid();
  if (p.token == nullptr || p.owner != self) {
    if (p.token != nullptr) p.token->Abandon();
    p.token.reset();
    ASSIGN_OR_RETURN(p.token, LivenessToken::Create(LivenessDir()));
    p.owner = self;
  }
  return p.token->id();
}

TokenState CheckToken(uint64_t id, const std::string& dir) {
  if (id == 0) return TokenState::kReleased;
  const std::string path = JoinPath(dir, TokenFileName(id));
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno == ENOENT ? TokenState::kReleased : TokenState::kUnknown;
  const int free = LockIsFree(fd);
  close(fd);
  if (free < 0) return TokenState::kUnknown;
  return free == 1 ? TokenState::kReleased : TokenState::kHeld;
}

size_t RemoveReleasedTokens(const std::string& dir) {
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return 0;
  size_t removed = 0;
  while (dirent* entry = readdir(d)) {
    if (!IsTokenName(entry->d_name) && !IsTmpName(entry->d_name)) continue;
    const std::string path = JoinPath(dir, entry->d_name);
    int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    // A released token is never locked again (ids are not reused), so removing it cannot race
    // with its holder. An unlocked ".tmp" is a creation in progress or abandoned; its creator
    // notices the removal at its rename and starts over.
    if (LockIsFree(fd) == 1 && unlink(path.c_str()) == 0) ++removed;
    close(fd);
  }
  closedir(d);
  return removed;
}

void LivenessDirectory::Scan() {
  alive_.clear();
  scanned_ = true;
  DIR* d = opendir(dir_.c_str());
  if (d == nullptr) return;
  while (dirent* entry = readdir(d)) {
    if (!IsTokenName(entry->d_name)) continue;
    int fd = open(JoinPath(dir_, entry->d_name).c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    TokenRecord record{};
    const bool read_ok =
        pread(fd, &record, sizeof(record), 0) == static_cast<ssize_t>(sizeof(record));
    if (read_ok && record.magic == kTokenMagic && record.pid != 0 && LockIsFree(fd) == 0) {
      alive_[record.pid] = true;
    }
    close(fd);
  }
  closedir(d);
}

bool LivenessDirectory::MayBeAlive(uint32_t pid) {
  if (pid == 0) return false;
  if (!scanned_) Scan();
  if (alive_.count(pid) != 0) return true;
  if (known_dead_.count(pid) != 0) return false;
  Scan();  // the pid's token may be newer than the last scan
  if (alive_.count(pid) != 0) return true;
  known_dead_[pid] = true;
  return false;
}

}  // namespace deltakv::shm
