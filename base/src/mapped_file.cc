#include "base/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <random>
#include <utility>

#include "base/file_util.h"

namespace deltakv {

MappedFile::MappedFile(MappedFile&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) munmap(data_, size_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) munmap(data_, size_);
}

StatusOr<MappedFile> MappedFile::OpenReadOnly(const std::string& path) {
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
  out.size_ = static_cast<uint64_t>(st.st_size);
  if (out.size_ > 0) {
    void* p = mmap(nullptr, out.size_, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
      int err = errno;
      close(fd);
      out.size_ = 0;
      return IoError(ErrnoMessage("mmap", path, err));
    }
    out.data_ = static_cast<uint8_t*>(p);
  }
  close(fd);
  return out;
}

void MappedFile::AdviseSequential() const {
  if (data_ != nullptr) madvise(data_, size_, MADV_SEQUENTIAL);
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
