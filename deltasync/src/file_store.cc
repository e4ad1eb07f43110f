#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "base/file_util.h"
#include "deltasync/delta_manifest.h"
#include "deltasync/object_store.h"

namespace deltakv::deltasync {
namespace {

class FileStore final : public ObjectStore {
 public:
  explicit FileStore(std::string dir) : dir_(std::move(dir)) {}

  StatusOr<uint64_t> Size(const std::string& name) override {
    ASSIGN_OR_RETURN(std::string path, PathOf(name));
    struct stat st {};
    if (stat(path.c_str(), &st) != 0) return Missing(path, errno);
    return static_cast<uint64_t>(st.st_size);
  }

  StatusOr<std::string> ReadRange(const std::string& name, uint64_t offset,
                                  uint64_t length) override {
    ASSIGN_OR_RETURN(std::string path, PathOf(name));
    int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return Missing(path, errno);
    // The object's size first: a range past its end is DataLoss before any buffer is made
    // (a hostile or corrupt length would otherwise ask for exabytes).
    struct stat st {};
    if (fstat(fd, &st) != 0) {
      const int err = errno;
      close(fd);
      return IoError(ErrnoMessage("stat", path, err));
    }
    const uint64_t size = static_cast<uint64_t>(st.st_size);
    if (offset > size || length > size - offset) {
      close(fd);
      return DataLoss("object '" + name + "' in " + Describe() + " ends at " +
                      std::to_string(size) + ", before byte " +
                      (length > UINT64_MAX - offset ? std::string("2^64 or more")
                                                    : std::to_string(offset + length)) +
                      " (truncated?)");
    }
    std::string out(length, '\0');
    uint64_t done = 0;
    while (done < length) {
      ssize_t n = pread(fd, out.data() + done, length - done, static_cast<off_t>(offset + done));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        int err = errno;
        close(fd);
        return IoError(ErrnoMessage("read", path, err));
      }
      if (n == 0) break;
      done += static_cast<uint64_t>(n);
    }
    close(fd);
    if (done < length) {
      return DataLoss("object '" + name + "' in " + Describe() + " ends at " +
                      std::to_string(offset + done) + ", before byte " +
                      std::to_string(offset + length) + " (truncated?)");
    }
    return out;
  }

  StatusOr<std::string> ReadObject(const std::string& name, uint64_t max_bytes) override {
    ASSIGN_OR_RETURN(std::string path, PathOf(name));
    auto r = ReadFileToString(path, max_bytes);
    if (!r.ok() && r.status().code() == StatusCode::kIoError && access(path.c_str(), F_OK) != 0) {
      return NotFound("object '" + name + "' not found in " + Describe());
    }
    return r;
  }

  std::string Describe() const override { return "file://" + dir_; }

 private:
  StatusOr<std::string> PathOf(const std::string& name) const {
    if (!IsSafeObjectName(name)) return InvalidArgument("unsafe object name '" + name + "'");
    return dir_ + "/" + name;
  }
  Status Missing(const std::string& path, int err) const {
    if (err == ENOENT) return NotFound("'" + path + "' not found");
    return IoError(ErrnoMessage("open", path, err));
  }
  std::string dir_;
};

}  // namespace

std::unique_ptr<ObjectStore> MakeFileStore(const std::string& dir) {
  return std::make_unique<FileStore>(dir);
}

}  // namespace deltakv::deltasync
