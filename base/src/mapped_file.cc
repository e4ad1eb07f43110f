#include "base/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
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
