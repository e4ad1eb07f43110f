// Small filesystem helpers with Status errors: whole-file reads, atomic writes, and
// staging directories that become visible only when complete.
//
// Thread-safety: functions are reentrant; two callers must not stage the same target.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"

namespace deltakv {

// Reads a whole file, up to its end (also where stat reports another size, as under /proc).
// IoError if it cannot be read; ResourceExhausted if larger than max_bytes.
StatusOr<std::string> ReadFileToString(const std::string& path, uint64_t max_bytes = 1ull << 30);

// Writes `data` to `path` via "<path>.tmp.<pid>", fsync, rename. On failure nothing is left
// under `path` (an old file there stays as it was) and the temporary is removed.
Status WriteFileAtomic(const std::string& path, std::span<const uint8_t> data);
Status WriteFileAtomic(const std::string& path, std::string_view text);
// IoError when WriteFileAtomic could not write `path` (its directory is missing or not
// writable, or `path` is a directory): checked before long work whose result goes there. Creates
// and removes the temporary file WriteFileAtomic would write.
Status CheckWritableAtomic(const std::string& path);

// A directory built under a temporary sibling name ("<target>.partial.<pid>", or
// "<target>.partial.<pid>.<8 hex digits>" when that name is taken: an entry already there is
// never used or removed) and renamed to `target` by Commit(). If the object is destroyed
// without Commit(), the temporary directory and everything in it is removed, so no output that
// looks complete is ever left behind. Commit() fails with FailedPrecondition if `target`
// already exists (a symlink, dangling or not, counts), also when it appears during the rename.
class StagingDir {
 public:
  // Creates the temporary directory. IoError on failure (the parent of `target` does not exist
  // or is not a directory, say); FailedPrecondition if target exists (a symlink counts);
  // InvalidArgument for an empty target. Trailing slashes of `target` are dropped ("out/" is
  // the directory "out").
  static StatusOr<StagingDir> Create(const std::string& target);
  StagingDir(StagingDir&& other) noexcept;
  StagingDir& operator=(StagingDir&&) = delete;
  StagingDir(const StagingDir&) = delete;
  ~StagingDir();

  // Where to write files now.
  const std::string& path() const { return temp_; }
  const std::string& target() const { return target_; }
  // fsyncs the directory and renames it to target. After success the destructor does nothing.
  Status Commit();

 private:
  StagingDir(std::string target, std::string temp)
      : target_(std::move(target)), temp_(std::move(temp)) {}
  std::string target_;
  std::string temp_;
  bool done_ = false;
};

// Lists regular files in `dir` whose names end with `suffix`, sorted by name. With `others`,
// the names with that suffix that are not regular files (a directory, a dangling link), sorted,
// go there.
StatusOr<std::vector<std::string>> ListFiles(const std::string& dir, std::string_view suffix,
                                             std::vector<std::string>* others = nullptr);

// The IoError for a file of `size` bytes at `path` that the filesystem of `fd` cannot hold
// (`err` ENOSPC or EDQUOT from a reservation): "no space left on 'PATH': need N bytes, M
// available" (or ", over the disk quota"). Empties the file first, so blocks a failed
// reservation kept count as available.
Status NoSpaceError(const std::string& path, int fd, uint64_t size, int err);

// Returns the errno text: "open 'x': No such file or directory".
std::string ErrnoMessage(std::string_view what, const std::string& path, int err);
// "cannot rename 'FROM' to 'TO': <errno text>".
std::string RenameErrorMessage(const std::string& from, const std::string& to, int err);

}  // namespace deltakv
