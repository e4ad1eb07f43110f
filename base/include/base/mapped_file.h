// MappedFile: RAII read-only (or read-write) memory map of a whole file.
//
// Owns the mapping; moving transfers it; destruction unmaps. An empty file maps to an empty
// span without calling mmap.
//
// Thread-safety: the mapping is immutable after Open; reads from many threads are safe.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "base/status.h"

namespace deltakv {

class MappedFile {
 public:
  MappedFile() = default;
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  // Maps `path` read-only. IoError (with the errno text and the path) on failure.
  static StatusOr<MappedFile> OpenReadOnly(const std::string& path);

  std::span<const uint8_t> bytes() const { return {data_, size_}; }
  uint64_t size() const { return size_; }
  // Hints the kernel that the whole file will be read sequentially.
  void AdviseSequential() const;

 private:
  uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
};

}  // namespace deltakv
