// Volumes::Pull: rebuild a version's files in a temporary sibling directory, verify, rename.
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>

#include "base/file_util.h"
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

Status WriteChunk(int fd, const std::string& bytes, const std::string& path) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return IoError(ErrnoMessage("write", path, errno));
    done += static_cast<size_t>(n);
  }
  return Status::Ok();
}

// Streams every chunk of `f` into `fd`, verifying each chunk and the whole file.
Status FillFile(Volumes& volumes, const VolumeFile& f, int fd, const std::string& path,
                const PullOptions& options, PullProgress& progress) {
  Sha256 whole;
  for (size_t i = 0; i < f.chunks.size(); ++i) {
    const std::string where = "file '" + f.path + "' chunk " + std::to_string(i);
    auto bytes = volumes.ReadChunk(f.chunks[i]);
    if (!bytes.ok()) return bytes.status().WithPrefix(where);
    whole.Update(Bytes(*bytes));
    RETURN_IF_ERROR(WriteChunk(fd, *bytes, path));
    progress.bytes_done += bytes->size();
    if (options.progress) options.progress(progress);
  }
  const std::string actual = whole.HexDigest();
  if (actual != f.sha256) {
    return DataLoss("file '" + f.path + "': sha256 " + actual + ", manifest says " + f.sha256);
  }
  return Status::Ok();
}

Status PullFile(Volumes& volumes, const VolumeFile& f, const std::string& root,
                const PullOptions& options, PullProgress& progress) {
  const fs::path path = fs::path(root) / f.path;
  std::error_code ec;
  fs::create_directories(path.parent_path(), ec);
  if (ec) return IoError("pull: create '" + path.parent_path().string() + "': " + ec.message());
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return IoError(ErrnoMessage("create", path.string(), errno));
  Status st = FillFile(volumes, f, fd, path.string(), options, progress);
  if (st.ok() && fchmod(fd, f.mode) != 0) st = IoError(ErrnoMessage("chmod", path.string(), errno));
  if (st.ok() && fsync(fd) != 0) st = IoError(ErrnoMessage("fsync", path.string(), errno));
  close(fd);
  return st;
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
  for (const VolumeFile& f : version.manifest.files) {
    RETURN_IF_ERROR(PullFile(*this, f, temp.path(), options, progress).WithPrefix(where));
    ++progress.files_done;
    if (options.progress) options.progress(progress);
  }
  RETURN_IF_ERROR(SyncPath(temp.path()));
  RETURN_IF_ERROR(CheckTarget(target));
  if (rename(temp.path().c_str(), target.c_str()) != 0) {
    return IoError(where + ": " + ErrnoMessage("rename", temp.path(), errno));
  }
  temp.Release();
  const std::string parent = fs::path(target).parent_path().string();
  return SyncPath(parent.empty() ? "." : parent);
}

}  // namespace deltakv::deltasync
