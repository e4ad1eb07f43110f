#include "base/file_util.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>

namespace deltakv {

std::string ErrnoMessage(std::string_view what, const std::string& path, int err) {
  std::string m(what);
  m += " '";
  m += path;
  m += "': ";
  m += std::strerror(err);
  return m;
}

std::string RenameErrorMessage(const std::string& from, const std::string& to, int err) {
  return "cannot rename '" + from + "' to '" + to + "': " + std::strerror(err);
}

StatusOr<std::string> ReadFileToString(const std::string& path, uint64_t max_bytes) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return IoError(ErrnoMessage("open", path, errno));
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    int err = errno;
    close(fd);
    return IoError(ErrnoMessage("stat", path, err));
  }
  if (static_cast<uint64_t>(st.st_size) > max_bytes) {
    close(fd);
    return ResourceExhausted("'" + path + "' is " + std::to_string(st.st_size) +
                             " bytes, more than the limit of " + std::to_string(max_bytes));
  }
  // Up to end of file, whatever stat said: files under /proc and /sys report a size of 0 or
  // of a page and hold other amounts. The stat size is read into place; past it, reads go
  // through a small buffer, so a file of the size stat said costs no extra memory.
  std::string out(static_cast<size_t>(st.st_size), '\0');
  size_t done = 0;
  auto fail = [&](int err) {
    close(fd);
    return IoError(ErrnoMessage("read", path, err));
  };
  while (done < out.size()) {
    ssize_t n = read(fd, out.data() + done, out.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return fail(errno);
    if (n == 0) break;  // shorter than stat said
    done += static_cast<size_t>(n);
  }
  out.resize(done);
  if (done == static_cast<size_t>(st.st_size)) {
    char chunk[65536];
    for (;;) {
      ssize_t n = read(fd, chunk, sizeof(chunk));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return fail(errno);
      if (n == 0) break;
      if (static_cast<uint64_t>(n) > max_bytes - out.size()) {
        close(fd);
        return ResourceExhausted("'" + path + "' is more than the limit of " +
                                 std::to_string(max_bytes) + " bytes");
      }
      out.append(chunk, static_cast<size_t>(n));
    }
  }
  close(fd);
  return out;
}

Status NoSpaceError(const std::string& path, int fd, uint64_t size, int err) {
  std::string m = "no space left on '" + path + "': need " + std::to_string(size) + " bytes";
  if (err == EDQUOT) return IoError(m + ", over the disk quota");
  (void)ftruncate(fd, 0);
  struct statvfs fs {};
  if (fstatvfs(fd, &fs) == 0) {
    m += ", " + std::to_string(static_cast<uint64_t>(fs.f_bavail) * fs.f_frsize) + " available";
  }
  return IoError(m);
}

static Status WriteAll(int fd, const uint8_t* p, size_t n, const std::string& path) {
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return IoError(ErrnoMessage("write", path, errno));
    p += w;
    n -= static_cast<size_t>(w);
  }
  return Status::Ok();
}

// The temporary name WriteFileAtomic writes before it renames.
static std::string AtomicTempName(const std::string& path) {
  return path + ".tmp." + std::to_string(getpid());
}

Status CheckWritableAtomic(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    return IoError("cannot write '" + path + "': it is a directory");
  }
  const std::string probe = AtomicTempName(path);
  const int fd = open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return IoError(ErrnoMessage("create", probe, errno));
  close(fd);
  unlink(probe.c_str());
  return Status::Ok();
}

Status WriteFileAtomic(const std::string& path, std::span<const uint8_t> data) {
  std::string tmp = AtomicTempName(path);
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return IoError(ErrnoMessage("create", tmp, errno));
  Status s;
  // The space first, as the other writers reserve it: a full disk is reported as one.
  if (!data.empty()) {
    int err;
    do {
      err = posix_fallocate(fd, 0, static_cast<off_t>(data.size()));
    } while (err == EINTR);
    if (err == ENOSPC || err == EDQUOT) s = NoSpaceError(path, fd, data.size(), err);
  }
  if (s.ok()) s = WriteAll(fd, data.data(), data.size(), tmp);
  if (s.ok() && fsync(fd) != 0) s = IoError(ErrnoMessage("fsync", tmp, errno));
  if (close(fd) != 0 && s.ok()) s = IoError(ErrnoMessage("close", tmp, errno));
  if (s.ok() && rename(tmp.c_str(), path.c_str()) != 0) {
    s = IoError(RenameErrorMessage(tmp, path, errno));
  }
  if (!s.ok()) unlink(tmp.c_str());
  return s;
}

Status WriteFileAtomic(const std::string& path, std::string_view text) {
  return WriteFileAtomic(
      path, std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(text.data()), text.size()));
}

StatusOr<StagingDir> StagingDir::Create(const std::string& target_as_given) {
  if (target_as_given.empty()) return InvalidArgument("output path is empty");
  // "out/" names the directory "out".
  std::string target = target_as_given;
  while (target.size() > 1 && target.back() == '/') target.pop_back();
  std::error_code ec;
  // A symlink counts as existing, dangling or not (the rename would replace it).
  if (std::filesystem::exists(std::filesystem::symlink_status(target, ec))) {
    return FailedPrecondition("output '" + target + "' already exists; refusing to overwrite");
  }
  std::filesystem::path parent = std::filesystem::path(target).parent_path();
  if (!parent.empty()) {
    const std::filesystem::file_status st = std::filesystem::status(parent, ec);
    if (!std::filesystem::exists(st)) {
      return IoError("parent directory of '" + target + "' does not exist");
    }
    if (!std::filesystem::is_directory(st)) {
      return IoError("parent '" + parent.string() + "' of '" + target + "' is not a directory");
    }
  }
  // mkdir fails on an existing name, so a directory or file there (left by another process
  // that had this pid, or made by someone else) is never used or removed: another name is.
  const std::string first = target + ".partial." + std::to_string(getpid());
  std::string temp = first;
  std::random_device random;
  for (int attempt = 0; mkdir(temp.c_str(), 0755) != 0; ++attempt) {
    if (errno != EEXIST || attempt == 100) return IoError(ErrnoMessage("mkdir", temp, errno));
    char suffix[16];
    std::snprintf(suffix, sizeof(suffix), ".%08x", static_cast<unsigned>(random()));
    temp = first + suffix;
  }
  return StagingDir(target, temp);
}

StagingDir::StagingDir(StagingDir&& other) noexcept
    : target_(std::move(other.target_)), temp_(std::move(other.temp_)), done_(other.done_) {
  other.done_ = true;
}

StagingDir::~StagingDir() {
  if (done_) return;
  std::error_code ec;
  std::filesystem::remove_all(temp_, ec);
}

Status StagingDir::Commit() {
  if (done_) return FailedPrecondition("staging directory already committed");
  int fd = open(temp_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    fsync(fd);
    close(fd);
  }
  std::error_code ec;
  if (std::filesystem::exists(std::filesystem::symlink_status(target_, ec))) {
    return FailedPrecondition("output '" + target_ + "' appeared while it was being written");
  }
  if (rename(temp_.c_str(), target_.c_str()) != 0) {
    // Another writer's directory took the name between the check and the rename.
    if (errno == ENOTEMPTY || errno == EEXIST) {
      return FailedPrecondition("output '" + target_ + "' appeared while it was being written");
    }
    return IoError(RenameErrorMessage(temp_, target_, errno));
  }
  done_ = true;
  return Status::Ok();
}

StatusOr<std::vector<std::string>> ListFiles(const std::string& dir, std::string_view suffix,
                                             std::vector<std::string>* others) {
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return IoError(ErrnoMessage("open directory", dir, errno));
  std::vector<std::string> out;
  while (dirent* e = readdir(d)) {
    std::string name = e->d_name;
    if (name.size() < suffix.size() ||
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) {
      continue;
    }
    struct stat st {};
    std::string full = dir + "/" + name;
    if (stat(full.c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
      out.push_back(name);
    } else if (others != nullptr) {
      others->push_back(name);
    }
  }
  closedir(d);
  std::sort(out.begin(), out.end());
  if (others != nullptr) std::sort(others->begin(), others->end());
  return out;
}

}  // namespace deltakv
