// MappedFile: RAII read-only (or read-write) memory map of a whole file.
//
// Owns the mapping; moving transfers it; destruction unmaps. An empty file maps to an empty
// span without calling mmap.
//
// A file that shrinks while it is mapped (a trainer rewriting a checkpoint in place) makes a
// read of a page past its new end raise SIGBUS, which kills the process. A file opened with
// Shrink::kReadZeros is watched instead: such a read gets zeros, the file counts as changed,
// and CheckUnchanged() says so. A process-wide SIGBUS handler, installed by the first watched
// Open, does this for faults inside watched mappings only; any other SIGBUS gets the action
// that was in place before it.
//
// Thread-safety: the mapping is immutable after Open; reads from many threads are safe.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "base/status.h"

namespace deltakv {

struct MappedFileWatch;  // private to mapped_file.cc: a watched mapping's SIGBUS table entry

class MappedFile {
 public:
  // What a read of a page past the end of a file that shrank after it was mapped does.
  enum class Shrink {
    kSignal,     // raises SIGBUS (the kernel's behaviour)
    kReadZeros,  // reads zeros and marks the file changed: check CheckUnchanged() before
                 // trusting anything read through the mapping
  };

  MappedFile() = default;
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  // Maps `path` read-only. IoError (with the errno text and the path) on failure.
  static StatusOr<MappedFile> OpenReadOnly(const std::string& path,
                                           Shrink shrink = Shrink::kSignal);

  std::span<const uint8_t> bytes() const { return {data_, size_}; }
  uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }
  // Hints the kernel that the whole file will be read sequentially.
  void AdviseSequential() const;

  // Ok while everything read through the mapping came from the file as it was mapped: no read
  // went past the end of a watched file that shrank, and the file at path() (when it is still
  // the same file) has the size and modification time it had when mapped. Otherwise IoError
  // "'PATH' changed while being read (...)". Costs a stat().
  Status CheckUnchanged() const;

 private:
  std::string path_;
  uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
  MappedFileWatch* watch_ = nullptr;  // with Shrink::kReadZeros
  // The file as mapped, for CheckUnchanged().
  uint64_t device_ = 0;
  uint64_t inode_ = 0;
  int64_t mtime_ns_ = 0;
};

// MappedOutputFile: a new file of a fixed size, mapped read-write, written under
// "<path>.tmp.<pid>" (or "<path>.tmp.<pid>.<8 hex digits>" when that name is taken: a file
// already there is left alone) and renamed to `path` by Commit(). Destroying it without
// Commit() removes the temporary, so `path` never holds a partial file.
//
// Create() reserves the file's blocks with posix_fallocate before mapping: a store through the
// mapping into a block the filesystem cannot allocate raises SIGBUS instead of returning an
// error, so a full disk must be found while it can still be reported. Filesystems without
// fallocate support get a sparse file (space_reserved() is false, and Create() says so on
// stderr); copy-on-write filesystems may still need new blocks when the mapping is written.
class MappedOutputFile {
 public:
  MappedOutputFile() = default;
  MappedOutputFile(MappedOutputFile&& other) noexcept;
  MappedOutputFile& operator=(MappedOutputFile&&) = delete;
  MappedOutputFile(const MappedOutputFile&) = delete;
  ~MappedOutputFile();

  // Creates the temporary file with `size` zero bytes, reserves its space and maps it.
  // IoError on failure, "no space left on '<temp>': need N bytes, ..." when the filesystem
  // (or the disk quota) cannot hold it; the temporary is removed.
  static StatusOr<MappedOutputFile> Create(const std::string& path, uint64_t size);

  std::span<uint8_t> bytes() { return {data_, size_}; }
  const std::string& path() const { return path_; }
  // False when the filesystem could not reserve the space (the file is sparse).
  bool space_reserved() const { return space_reserved_; }
  // Flushes the mapping, fsyncs and renames into place. IoError on failure (the temporary is
  // then removed by the destructor).
  Status Commit();

 private:
  std::string path_;
  std::string temp_;
  int fd_ = -1;
  uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
  bool committed_ = false;
  bool space_reserved_ = true;
};

}  // namespace deltakv
