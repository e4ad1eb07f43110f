#include "base/mapped_file.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <random>
#include <utility>
#include <vector>

#include "base/file_util.h"

namespace deltakv {

// A watched mapping [begin, end) (end rounded up to a page). Entries live in blocks that are
// never freed, so the SIGBUS handler can walk them without locks: an entry is in use while end
// is nonzero; Watch() stores begin before end, Unwatch() clears end first.
struct MappedFileWatch {
  std::atomic<uintptr_t> begin{0};
  std::atomic<uintptr_t> end{0};
  std::atomic<bool> shrank{false};  // a read went past the end of the shrunken file
};

namespace {

struct WatchBlock {
  static constexpr size_t kEntries = 256;
  MappedFileWatch entries[kEntries];
  WatchBlock* next = nullptr;  // set before the block is published
};

std::atomic<WatchBlock*> g_watch_blocks{nullptr};  // newest first; never freed
std::mutex g_watch_mu;
std::vector<MappedFileWatch*>* g_free_watches = nullptr;  // GUARDED_BY(g_watch_mu)
struct sigaction g_previous_sigbus;                       // written once, before the handler runs
uintptr_t g_page_size = 4096;

// A fault in a watched mapping: the file shrank under it. The pages from the faulting one to
// the end of the mapping are replaced by zero pages, and the read is retried. Anything else
// gets the SIGBUS action that was in place before this handler.
void OnSigbus(int sig, siginfo_t* info, void* context) {
  if (info->si_code > 0) {  // raised by the kernel for a memory access, not sent by a process
    const auto addr = reinterpret_cast<uintptr_t>(info->si_addr);
    for (WatchBlock* b = g_watch_blocks.load(std::memory_order_acquire); b != nullptr;
         b = b->next) {
      for (MappedFileWatch& w : b->entries) {
        const uintptr_t end = w.end.load(std::memory_order_acquire);
        if (end == 0 || addr >= end || addr < w.begin.load(std::memory_order_relaxed)) continue;
        const uintptr_t page = addr & ~(g_page_size - 1);
        void* p = mmap(reinterpret_cast<void*>(page), end - page, PROT_READ,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
        if (p == MAP_FAILED) break;  // cannot recover: fall through to the old action
        w.shrank.store(true, std::memory_order_relaxed);
        return;
      }
    }
  }
  if ((g_previous_sigbus.sa_flags & SA_SIGINFO) != 0) {
    if (g_previous_sigbus.sa_sigaction != nullptr) {
      g_previous_sigbus.sa_sigaction(sig, info, context);
      return;
    }
  } else if (g_previous_sigbus.sa_handler != SIG_DFL && g_previous_sigbus.sa_handler != SIG_IGN) {
    g_previous_sigbus.sa_handler(sig);
    return;
  }
  // The default action: a fault re-runs the access, which raises SIGBUS again, now fatal; a
  // signal sent by a process is raised again.
  sigaction(SIGBUS, &g_previous_sigbus, nullptr);
  if (info->si_code <= 0) raise(sig);
}

void InstallSigbusHandler() {
  static std::once_flag once;
  std::call_once(once, [] {
    const long page = sysconf(_SC_PAGESIZE);
    if (page > 0) g_page_size = static_cast<uintptr_t>(page);
    struct sigaction sa {};
    sa.sa_sigaction = OnSigbus;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGBUS, &sa, &g_previous_sigbus);
  });
}

MappedFileWatch* Watch(const uint8_t* data, uint64_t size) {
  InstallSigbusHandler();
  std::lock_guard<std::mutex> lock(g_watch_mu);
  if (g_free_watches == nullptr) g_free_watches = new std::vector<MappedFileWatch*>();
  if (g_free_watches->empty()) {
    auto* block = new WatchBlock();
    for (MappedFileWatch& w : block->entries) g_free_watches->push_back(&w);
    block->next = g_watch_blocks.load(std::memory_order_relaxed);
    g_watch_blocks.store(block, std::memory_order_release);
  }
  MappedFileWatch* w = g_free_watches->back();
  g_free_watches->pop_back();
  const auto begin = reinterpret_cast<uintptr_t>(data);
  w->shrank.store(false, std::memory_order_relaxed);
  w->begin.store(begin, std::memory_order_relaxed);
  w->end.store((begin + size + g_page_size - 1) & ~(g_page_size - 1), std::memory_order_release);
  return w;
}

void Unwatch(MappedFileWatch* w) {
  if (w == nullptr) return;
  w->end.store(0, std::memory_order_release);
  std::lock_guard<std::mutex> lock(g_watch_mu);
  g_free_watches->push_back(w);
}

int64_t MtimeNs(const struct stat& st) {
  return static_cast<int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
}

}  // namespace

MappedFile::MappedFile(MappedFile&& other) noexcept
    : path_(std::move(other.path_)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      watch_(std::exchange(other.watch_, nullptr)),
      device_(other.device_),
      inode_(other.inode_),
      mtime_ns_(other.mtime_ns_) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    Unwatch(watch_);
    if (data_ != nullptr) munmap(data_, size_);
    path_ = std::move(other.path_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    watch_ = std::exchange(other.watch_, nullptr);
    device_ = other.device_;
    inode_ = other.inode_;
    mtime_ns_ = other.mtime_ns_;
  }
  return *this;
}

MappedFile::~MappedFile() {
  Unwatch(watch_);
  if (data_ != nullptr) munmap(data_, size_);
}

StatusOr<MappedFile> MappedFile::OpenReadOnly(const std::string& path, Shrink shrink) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return IoError(ErrnoMessage("open", path, errno));
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    int err = errno;
    close(fd);
    return IoError(ErrnoMessage("stat", path, err));
  }
  if (!S_ISREG(st.st_mode)) {
    close(fd);
    return IoError("'" + path + "' is not a regular file");
  }
  MappedFile out;
  out.path_ = path;
  out.size_ = static_cast<uint64_t>(st.st_size);
  out.device_ = st.st_dev;
  out.inode_ = st.st_ino;
  out.mtime_ns_ = MtimeNs(st);
  if (out.size_ > 0) {
    void* p = mmap(nullptr, out.size_, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
      int err = errno;
      close(fd);
      out.size_ = 0;
      return IoError(ErrnoMessage("mmap", path, err));
    }
    out.data_ = static_cast<uint8_t*>(p);
    if (shrink == Shrink::kReadZeros) out.watch_ = Watch(out.data_, out.size_);
  }
  close(fd);
  return out;
}

void MappedFile::AdviseSequential() const {
  if (data_ != nullptr) madvise(data_, size_, MADV_SEQUENTIAL);
}

Status MappedFile::CheckUnchanged() const {
  const std::string what = "'" + path_ + "' changed while being read";
  if (watch_ != nullptr && watch_->shrank.load(std::memory_order_relaxed)) {
    return IoError(what + " (it shrank below its " + std::to_string(size_) +
                   " bytes; the bytes past its new end read as zeros)");
  }
  struct stat st {};
  if (stat(path_.c_str(), &st) != 0 || st.st_dev != device_ || st.st_ino != inode_) {
    return Status::Ok();  // removed or replaced: the mapping still holds the file as it was
  }
  if (static_cast<uint64_t>(st.st_size) != size_) {
    return IoError(what + " (it was " + std::to_string(size_) + " bytes, now " +
                   std::to_string(st.st_size) + ")");
  }
  if (MtimeNs(st) != mtime_ns_) return IoError(what + " (it was written to)");
  return Status::Ok();
}

}  // namespace deltakv

namespace deltakv {
namespace {

// posix_fallocate returns the error instead of setting errno.
int ReserveSpace(int fd, uint64_t size) {
  int err;
  do {
    err = posix_fallocate(fd, 0, static_cast<off_t>(size));
  } while (err == EINTR);
  return err;
}

}  // namespace

MappedOutputFile::MappedOutputFile(MappedOutputFile&& o) noexcept
    : path_(std::move(o.path_)),
      temp_(std::move(o.temp_)),
      fd_(std::exchange(o.fd_, -1)),
      data_(std::exchange(o.data_, nullptr)),
      size_(std::exchange(o.size_, 0)),
      committed_(std::exchange(o.committed_, true)),
      space_reserved_(o.space_reserved_) {}

MappedOutputFile::~MappedOutputFile() {
  if (data_ != nullptr) munmap(data_, size_);
  if (fd_ >= 0) close(fd_);
  if (!committed_ && !temp_.empty()) unlink(temp_.c_str());
}

StatusOr<MappedOutputFile> MappedOutputFile::Create(const std::string& path, uint64_t size) {
  MappedOutputFile f;
  f.path_ = path;
  // A new file: one already at the name (not made by this process) is left alone.
  const std::string first = path + ".tmp." + std::to_string(getpid());
  std::string temp = first;
  std::random_device random;
  for (int attempt = 0;; ++attempt) {
    f.fd_ = open(temp.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (f.fd_ >= 0) break;
    if (errno != EEXIST || attempt == 100) return IoError(ErrnoMessage("create", temp, errno));
    char suffix[16];
    std::snprintf(suffix, sizeof(suffix), ".%08x", static_cast<unsigned>(random()));
    temp = first + suffix;
  }
  f.temp_ = temp;
  // posix_fallocate also sets the file size. EOPNOTSUPP and EINVAL mean this filesystem cannot
  // reserve (glibc emulates fallocate where it can); the file is then sized sparse.
  int err = size > 0 ? ReserveSpace(f.fd_, size) : 0;
  if (err == ENOSPC || err == EDQUOT) return NoSpaceError(path, f.fd_, size, err);
  if (err == EOPNOTSUPP || err == EINVAL) {
    f.space_reserved_ = false;
    std::fprintf(stderr,
                 "warning: no space reserved for '%s' (posix_fallocate: %s); if the filesystem "
                 "fills up while it is written, the process stops with SIGBUS\n",
                 path.c_str(), std::strerror(err));
    if (ftruncate(f.fd_, static_cast<off_t>(size)) != 0) {
      return IoError(ErrnoMessage("resize", f.temp_, errno));
    }
  } else if (err != 0) {
    return IoError(ErrnoMessage("reserve " + std::to_string(size) + " bytes for", f.temp_, err));
  }
  f.size_ = size;
  if (size > 0) {
    void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, f.fd_, 0);
    if (p == MAP_FAILED) {
      f.size_ = 0;
      return IoError(ErrnoMessage("mmap", f.temp_, errno));
    }
    f.data_ = static_cast<uint8_t*>(p);
  }
  return f;
}

Status MappedOutputFile::Commit() {
  if (committed_) return FailedPrecondition("'" + path_ + "' already committed");
  if (data_ != nullptr) {
    if (msync(data_, size_, MS_SYNC) != 0) return IoError(ErrnoMessage("msync", temp_, errno));
    munmap(data_, size_);
    data_ = nullptr;
  }
  if (fsync(fd_) != 0) return IoError(ErrnoMessage("fsync", temp_, errno));
  close(fd_);
  fd_ = -1;
  if (rename(temp_.c_str(), path_.c_str()) != 0) {
    return IoError(RenameErrorMessage(temp_, path_, errno));
  }
  committed_ = true;
  return Status::Ok();
}

}  // namespace deltakv
