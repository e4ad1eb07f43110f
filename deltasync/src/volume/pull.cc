// Volumes::Pull: rebuild a version's files in a temporary sibling directory, verify, rename.
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <mutex>

#include "base/file_util.h"
#include "base/mapped_file.h"
#include "base/parallel.h"
#include "deltasync/volume.h"
#include "sha256.h"
#include "volume/chunk_object.h"
#include "volume/names.h"
#include "volume/records.h"

namespace deltakv::deltasync {
namespace {

namespace fs = std::filesystem;

// A temporary directory removed with its contents unless Release() was called.
class TempTree {
 public:
  explicit TempTree(std::string path) : path_(std::move(path)) {}
  TempTree(const TempTree&) = delete;
  TempTree& operator=(const TempTree&) = delete;
  ~TempTree() {
    if (path_.empty()) return;
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  void Release() { path_.clear(); }

 private:
  std::string path_;
};

Status CheckTarget(const std::string& dir) {
  std::error_code ec;
  const fs::file_status st = fs::symlink_status(dir, ec);
  if (st.type() == fs::file_type::not_found) return Status::Ok();
  if (ec) return IoError("pull: stat '" + dir + "': " + ec.message());
  if (st.type() != fs::file_type::directory || !fs::is_empty(dir, ec)) {
    return FailedPrecondition("pull: '" + dir + "' exists and is not an empty directory");
  }
  return Status::Ok();
}

// "out/" and "out/." name the directory "out".
std::string WithoutTrailingSlash(const std::string& dir) {
  std::string path = fs::path(dir).lexically_normal().string();
  while (path.size() > 1 && path.ends_with('/')) path.pop_back();
  return path;
}

StatusOr<std::string> MakeTempSibling(const std::string& target) {
  std::string tmpl = target + ".partial.XXXXXX";
  if (mkdtemp(tmpl.data()) == nullptr) return IoError(ErrnoMessage("mkdtemp", tmpl, errno));
  if (chmod(tmpl.c_str(), 0755) != 0) {
    const int err = errno;
    rmdir(tmpl.c_str());
    return IoError(ErrnoMessage("chmod", tmpl, err));
  }
  return tmpl;
}

Status WriteAt(int fd, const std::string& bytes, uint64_t offset, const std::string& path) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = pwrite(fd, bytes.data() + done, bytes.size() - done,
                             static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return IoError(ErrnoMessage("write", path, errno));
    done += static_cast<size_t>(n);
  }
  return Status::Ok();
}

// One file being pulled: created at its final size, filled by chunk, then checked whole.
struct PullTarget {
  const VolumeFile* file = nullptr;
  std::string path;
  int fd = -1;
};

class PullTargets {
 public:
  PullTargets() = default;
  PullTargets(const PullTargets&) = delete;
  PullTargets& operator=(const PullTargets&) = delete;
  ~PullTargets() {
    for (const PullTarget& t : targets_) {
      if (t.fd >= 0) close(t.fd);
    }
  }
  Status Create(const VolumeFile& f, const std::string& root) {
    const fs::path path = fs::path(root) / f.path;
    std::error_code ec;
    fs::create_directories(path.parent_path(), ec);
    if (ec) return IoError("pull: create '" + path.parent_path().string() + "': " + ec.message());
    const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) return IoError(ErrnoMessage("create", path.string(), errno));
    targets_.push_back({&f, path.string(), fd});
    if (ftruncate(fd, static_cast<off_t>(f.size)) != 0) {
      return IoError(ErrnoMessage("size", path.string(), errno));
    }
    return Status::Ok();
  }
  std::vector<PullTarget>& all() { return targets_; }

 private:
  std::vector<PullTarget> targets_;
};

// Checks a written file against the manifest's whole-file sha256, then sets its mode and syncs.
Status FinishFile(const PullTarget& t) {
  const VolumeFile& f = *t.file;
  std::string actual = Sha256Hex({});
  if (f.size > 0) {
    ASSIGN_OR_RETURN(MappedFile map, MappedFile::OpenReadOnly(t.path));
    actual = Sha256Hex(map.bytes());
  }
  if (actual != f.sha256) {
    return DataLoss("file '" + f.path + "': sha256 " + actual + ", manifest says " + f.sha256);
  }
  if (fchmod(t.fd, f.mode) != 0) return IoError(ErrnoMessage("chmod", t.path, errno));
  if (fsync(t.fd) != 0) return IoError(ErrnoMessage("fsync", t.path, errno));
  return Status::Ok();
}

Status SyncPath(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return IoError(ErrnoMessage("open", path, errno));
  const int rc = fsync(fd);
  close(fd);
  return rc == 0 ? Status::Ok() : IoError(ErrnoMessage("fsync", path, errno));
}

}  // namespace

Status Volumes::Pull(const VolumeRef& ref, const std::string& dir, const PullOptions& options) {
  ASSIGN_OR_RETURN(VolumeVersion version, Show(ref));
  const std::string where = "pull " + version.ref.ToString();
  const std::string target = WithoutTrailingSlash(dir);
  RETURN_IF_ERROR(CheckTarget(target));
  ASSIGN_OR_RETURN(std::string temp_path, MakeTempSibling(target));
  TempTree temp(temp_path);
  PullProgress progress;
  progress.files_total = version.manifest.files.size();
  for (const VolumeFile& f : version.manifest.files) progress.bytes_total += f.size;
  PullTargets targets;
  struct Task {
    size_t target;
    size_t chunk;
  };
  std::vector<Task> tasks;
  for (const VolumeFile& f : version.manifest.files) {
    RETURN_IF_ERROR(targets.Create(f, temp.path()).WithPrefix(where));
    for (size_t k = 0; k < f.chunks.size(); ++k) tasks.push_back({targets.all().size() - 1, k});
  }
  auto interrupted = [&] {
    return options.cancel != nullptr && options.cancel->load(std::memory_order_relaxed)
               ? FailedPrecondition(where + ": interrupted; nothing was written to '" + target +
                                    "'")
               : Status::Ok();
  };
  // Chunks are fetched, verified and written at their offsets by several workers at once.
  std::mutex mu;
  RETURN_IF_ERROR(ParallelFor(
      tasks.size(), options.threads == 0 ? 8 : options.threads, [&](size_t i) -> Status {
        RETURN_IF_ERROR(interrupted());
        const PullTarget& t = targets.all()[tasks[i].target];
        const VolumeChunk& c = t.file->chunks[tasks[i].chunk];
        const std::string what =
            "file '" + t.file->path + "' chunk " + std::to_string(tasks[i].chunk);
        auto bytes = ReadChunk(c);
        if (!bytes.ok()) return bytes.status().WithPrefix(where + ": " + what);
        RETURN_IF_ERROR(WriteAt(t.fd, *bytes, c.offset, t.path).WithPrefix(where));
        std::lock_guard<std::mutex> lock(mu);
        progress.bytes_done += bytes->size();
        if (options.progress) options.progress(progress);
        return Status::Ok();
      }));
  RETURN_IF_ERROR(ParallelFor(targets.all().size(), DefaultThreads(), [&](size_t i) -> Status {
    RETURN_IF_ERROR(interrupted());
    RETURN_IF_ERROR(FinishFile(targets.all()[i]).WithPrefix(where));
    std::lock_guard<std::mutex> lock(mu);
    ++progress.files_done;
    if (options.progress) options.progress(progress);
    return Status::Ok();
  }));
  RETURN_IF_ERROR(SyncPath(temp.path()));
  RETURN_IF_ERROR(interrupted());
  RETURN_IF_ERROR(CheckTarget(target));
  if (rename(temp.path().c_str(), target.c_str()) != 0) {
    return IoError(where + ": " + ErrnoMessage("rename", temp.path(), errno));
  }
  temp.Release();
  const std::string parent = fs::path(target).parent_path().string();
  return SyncPath(parent.empty() ? "." : parent);
}

}  // namespace deltakv::deltasync
