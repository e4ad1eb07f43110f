// VolumeStore over a local directory: one file per key (see volume.h for the guarantees).
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <random>

#include "base/file_util.h"
#include "deltasync/volume.h"

namespace deltakv::deltasync {
namespace {

namespace fs = std::filesystem;

// A versioned object's file: "DKVG", u64 little-endian generation, then the data. Generations
// are random and never 0, so an object deleted and written again never takes a generation
// that a writer may still hold from before the delete.
constexpr char kVersionedMagic[4] = {'D', 'K', 'V', 'G'};
constexpr size_t kVersionedHeader = 12;

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd_ >= 0) close(fd_);
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

Status ValidateKey(const std::string& key) {
  if (key.empty()) return InvalidArgument("store key is empty");
  size_t start = 0;
  while (start <= key.size()) {
    size_t end = key.find('/', start);
    if (end == std::string::npos) end = key.size();
    if (end == start || key[start] == '.') {
      return InvalidArgument("store key '" + key +
                             "' has an empty component or one starting with '.'");
    }
    start = end + 1;
  }
  return Status::Ok();
}

Status WriteAll(int fd, std::span<const uint8_t> data, const std::string& path) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return IoError(ErrnoMessage("write", path, errno));
    done += static_cast<size_t>(n);
  }
  return Status::Ok();
}

Status SyncDir(const std::string& dir) {
  Fd fd(open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd.get() < 0) return IoError(ErrnoMessage("open", dir, errno));
  if (fsync(fd.get()) != 0) return IoError(ErrnoMessage("fsync", dir, errno));
  return Status::Ok();
}

StatusOr<std::string> ReadWholeFile(const std::string& path, const std::string& key,
                                    uint64_t max_bytes) {
  Fd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0 && errno == ENOENT) return NotFound("object '" + key + "' does not exist");
  if (fd.get() < 0) return IoError(ErrnoMessage("open", path, errno));
  struct stat st {};
  if (fstat(fd.get(), &st) != 0) return IoError(ErrnoMessage("stat", path, errno));
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size > max_bytes) {
    return ResourceExhausted("object '" + key + "' is " + std::to_string(size) +
                             " bytes, more than the limit of " + std::to_string(max_bytes));
  }
  std::string out(size, '\0');
  size_t done = 0;
  while (done < size) {
    const ssize_t n = read(fd.get(), out.data() + done, size - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return IoError(ErrnoMessage("read", path, errno));
    if (n == 0) return IoError("object '" + key + "' shrank while it was read");
    done += static_cast<size_t>(n);
  }
  return out;
}

std::string VersionedBytes(uint64_t generation, std::span<const uint8_t> data) {
  std::string out(kVersionedMagic, sizeof(kVersionedMagic));
  for (int i = 0; i < 8; ++i) out += static_cast<char>((generation >> (8 * i)) & 0xff);
  out.append(reinterpret_cast<const char*>(data.data()), data.size());
  return out;
}

StatusOr<uint64_t> VersionedGeneration(const std::string& bytes, const std::string& key) {
  if (bytes.size() < kVersionedHeader || std::memcmp(bytes.data(), kVersionedMagic, 4) != 0) {
    return DataLoss("object '" + key + "' is not a versioned object (no 'DKVG' header)");
  }
  uint64_t g = 0;
  for (int i = 0; i < 8; ++i) g |= uint64_t{static_cast<uint8_t>(bytes[4 + i])} << (8 * i);
  return g;
}

// A fresh generation: random, not 0 and not `current`.
uint64_t NextGeneration(uint64_t current) {
  thread_local std::mt19937_64 rng{(uint64_t{std::random_device{}()} << 32) ^
                                   std::random_device{}()};
  for (;;) {
    const uint64_t g = rng();
    if (g != 0 && g != current) return g;
  }
}

// Names the temporary files of every store object in this process apart.
std::atomic<uint64_t> g_temp_counter{0};

std::span<const uint8_t> AsBytes(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

class DirVolumeStore : public VolumeStore {
 public:
  explicit DirVolumeStore(std::string root) : root_(std::move(root)) {}

  Status Put(const std::string& key, std::span<const uint8_t> data) override {
    RETURN_IF_ERROR(ValidateKey(key));
    ASSIGN_OR_RETURN(std::string temp, WriteTemp(key, data));
    if (rename(temp.c_str(), PathOf(key).c_str()) != 0) {
      const int err = errno;
      unlink(temp.c_str());
      return IoError(ErrnoMessage("rename", temp, err));
    }
    return SyncDir(DirOf(key));
  }

  Status PutIfAbsent(const std::string& key, std::span<const uint8_t> data) override {
    RETURN_IF_ERROR(ValidateKey(key));
    ASSIGN_OR_RETURN(std::string temp, WriteTemp(key, data));
    const int rc = link(temp.c_str(), PathOf(key).c_str());
    const int err = errno;
    unlink(temp.c_str());
    if (rc != 0 && err == EEXIST) return FailedPrecondition("object '" + key + "' already exists");
    if (rc != 0) return IoError(ErrnoMessage("link", PathOf(key), err));
    return SyncDir(DirOf(key));
  }

  StatusOr<std::string> Get(const std::string& key, uint64_t max_bytes) override {
    RETURN_IF_ERROR(ValidateKey(key));
    return ReadWholeFile(PathOf(key), key, max_bytes);
  }

  StatusOr<bool> Exists(const std::string& key) override {
    auto size = Size(key);
    if (size.status().code() == StatusCode::kNotFound) return false;
    if (!size.ok()) return size.status();
    return true;
  }

  StatusOr<uint64_t> Size(const std::string& key) override {
    RETURN_IF_ERROR(ValidateKey(key));
    struct stat st {};
    if (stat(PathOf(key).c_str(), &st) == 0) return static_cast<uint64_t>(st.st_size);
    if (errno == ENOENT) return NotFound("object '" + key + "' does not exist");
    return IoError(ErrnoMessage("stat", PathOf(key), errno));
  }

  StatusOr<std::vector<std::string>> List(const std::string& prefix) override {
    const size_t slash = prefix.rfind('/');
    const std::string base = slash == std::string::npos ? "" : prefix.substr(0, slash);
    std::vector<std::string> keys;
    std::error_code ec;
    const fs::path start = base.empty() ? fs::path(root_) : fs::path(root_) / base;
    if (!fs::exists(start, ec)) return keys;
    fs::recursive_directory_iterator it(start, ec), end;
    for (; !ec && it != end; it.increment(ec)) {
      const std::string leaf = it->path().filename().string();
      if (leaf.starts_with(".")) {
        if (it->is_directory(ec)) it.disable_recursion_pending();
        continue;
      }
      if (!it->is_regular_file(ec)) continue;
      // Every path the iterator yields starts with "<root>/": it was started below the root.
      std::string key = it->path().string().substr(root_ == "/" ? 1 : root_.size() + 1);
      if (key.starts_with(prefix)) keys.push_back(std::move(key));
    }
    if (ec) return IoError("list '" + start.string() + "': " + ec.message());
    std::sort(keys.begin(), keys.end());
    return keys;
  }

  Status Delete(const std::string& key) override {
    RETURN_IF_ERROR(ValidateKey(key));
    // A versioned object is deleted under its lock, so that a conditional write in progress
    // either completes before the delete or sees the object gone.
    Fd lock(open(LockPathOf(key).c_str(), O_RDWR | O_CLOEXEC));
    if (lock.get() < 0 && errno != ENOENT) {
      return IoError(ErrnoMessage("open", LockPathOf(key), errno));
    }
    if (lock.get() >= 0) RETURN_IF_ERROR(LockExclusive(lock.get(), LockPathOf(key)));
    if (unlink(PathOf(key).c_str()) != 0 && errno != ENOENT) {
      return IoError(ErrnoMessage("unlink", PathOf(key), errno));
    }
    return Status::Ok();
  }

  StatusOr<VersionedObject> GetVersioned(const std::string& key, uint64_t max_bytes) override {
    ASSIGN_OR_RETURN(std::string bytes, Get(key, max_bytes + kVersionedHeader));
    ASSIGN_OR_RETURN(uint64_t generation, VersionedGeneration(bytes, key));
    return VersionedObject{bytes.substr(kVersionedHeader), std::to_string(generation)};
  }

  StatusOr<std::string> PutIfGeneration(const std::string& key, std::span<const uint8_t> data,
                                        const std::string& expected) override {
    RETURN_IF_ERROR(ValidateKey(key));
    RETURN_IF_ERROR(MakeParents(key));
    const std::string lock_path = LockPathOf(key);
    Fd lock(open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
    if (lock.get() < 0) return IoError(ErrnoMessage("open", lock_path, errno));
    RETURN_IF_ERROR(LockExclusive(lock.get(), lock_path));
    ASSIGN_OR_RETURN(uint64_t current, CurrentGeneration(key));
    const std::string found = current == 0 ? "" : std::to_string(current);
    if (found != expected) {
      return FailedPrecondition("versioned object '" + key + "': expected " +
                                (expected.empty() ? "no object" : "generation " + expected) +
                                ", found " + (found.empty() ? "no object" : "generation " + found));
    }
    const uint64_t next = NextGeneration(current);
    RETURN_IF_ERROR(Put(key, AsBytes(VersionedBytes(next, data))));
    return std::to_string(next);
  }

  std::string Describe() const override { return "dir://" + root_; }

 private:
  std::string PathOf(const std::string& key) const { return root_ + "/" + key; }
  std::string DirOf(const std::string& key) const {
    const size_t slash = key.rfind('/');
    return slash == std::string::npos ? root_ : root_ + "/" + key.substr(0, slash);
  }
  static std::string LeafOf(const std::string& key) { return key.substr(key.rfind('/') + 1); }
  std::string LockPathOf(const std::string& key) const {
    return DirOf(key) + "/." + LeafOf(key) + ".lock";
  }
  static Status LockExclusive(int fd, const std::string& path) {
    while (flock(fd, LOCK_EX) != 0) {
      if (errno != EINTR) return IoError(ErrnoMessage("flock", path, errno));
    }
    return Status::Ok();
  }

  Status MakeParents(const std::string& key) const {
    std::error_code ec;
    fs::create_directories(DirOf(key), ec);
    if (ec) return IoError("create directory '" + DirOf(key) + "': " + ec.message());
    return Status::Ok();
  }

  // 0 when the object does not exist (no generation is 0).
  StatusOr<uint64_t> CurrentGeneration(const std::string& key) {
    auto bytes = ReadWholeFile(PathOf(key), key, kVersionedHeader + (64u << 20));
    if (bytes.status().code() == StatusCode::kNotFound) return uint64_t{0};
    if (!bytes.ok()) return bytes.status();
    return VersionedGeneration(*bytes, key);
  }

  StatusOr<uint64_t> RemoveAbandonedTemporaries(int64_t before_unix) override {
    // WriteTemp's names: ".<leaf>.tmp.<pid>.<n>" beside the key, anywhere under the root.
    uint64_t removed = 0;
    std::error_code ec;
    fs::recursive_directory_iterator it(root_, ec), end;
    for (; !ec && it != end; it.increment(ec)) {
      const std::string leaf = it->path().filename().string();
      if (!leaf.starts_with(".") || leaf.find(".tmp.") == std::string::npos) continue;
      struct stat st {};
      if (lstat(it->path().c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
      if (st.st_mtime >= before_unix) continue;  // possibly a write still in progress
      if (unlink(it->path().c_str()) == 0) ++removed;
    }
    if (ec) return IoError("scan '" + root_ + "' for temporary files: " + ec.message());
    return removed;
  }

  // Writes `data` to a fresh fsynced temporary file next to the key; returns its path.
  StatusOr<std::string> WriteTemp(const std::string& key, std::span<const uint8_t> data) {
    RETURN_IF_ERROR(MakeParents(key));
    const std::string temp = DirOf(key) + "/." + LeafOf(key) + ".tmp." + std::to_string(getpid()) +
                             "." + std::to_string(++g_temp_counter);
    Fd fd(open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
    if (fd.get() < 0) return IoError(ErrnoMessage("create", temp, errno));
    Status st = WriteAll(fd.get(), data, temp);
    if (st.ok() && fsync(fd.get()) != 0) st = IoError(ErrnoMessage("fsync", temp, errno));
    if (!st.ok()) {
      unlink(temp.c_str());
      return st;
    }
    return temp;
  }

  const std::string root_;
};

}  // namespace

StatusOr<std::unique_ptr<VolumeStore>> MakeDirVolumeStore(const std::string& dir, bool create) {
  std::error_code ec;
  if (create) {
    fs::create_directories(dir, ec);
    if (ec) return IoError("create store directory '" + dir + "': " + ec.message());
  } else {
    const fs::file_status st = fs::status(dir, ec);
    if (!fs::exists(st)) {
      if (ec && ec != std::errc::no_such_file_or_directory && ec != std::errc::not_a_directory) {
        return IoError("volume store '" + dir + "': " + ec.message());
      }
      return NotFound("volume store '" + dir + "': no such directory");
    }
    if (!fs::is_directory(st)) return InvalidArgument("volume store '" + dir + "' is not a directory");
  }
  const fs::path root = fs::absolute(dir, ec).lexically_normal();
  if (ec) return IoError("resolve store directory '" + dir + "': " + ec.message());
  std::string text = root.string();
  while (text.size() > 1 && text.ends_with('/')) text.pop_back();
  return std::unique_ptr<VolumeStore>(std::make_unique<DirVolumeStore>(text));
}

StatusOr<std::unique_ptr<VolumeStore>> OpenVolumeStore(const std::string& url, bool create) {
  if (url.empty()) return InvalidArgument("volume store URL is empty");
  for (std::string_view scheme : {std::string_view("dir://"), std::string_view("file://")}) {
    if (!url.starts_with(scheme)) continue;
    const std::string path = url.substr(scheme.size());
    if (!path.starts_with('/')) {
      return InvalidArgument("volume store '" + url + "': a " + std::string(scheme) +
                             " URL names an absolute path");
    }
    return MakeDirVolumeStore(path, create);
  }
  const size_t scheme = url.find("://");
  if (scheme != std::string::npos) {
    return InvalidArgument("volume store '" + url + "': unknown scheme '" +
                           url.substr(0, scheme) + "' (dir://, file:// or a path)");
  }
  return MakeDirVolumeStore(url, create);
}

}  // namespace deltakv::deltasync
