// Safetensors files: parse and validate a header, read tensors through mmap, write files.
//
// File layout: u64 little-endian N, N bytes of UTF-8 JSON header, then the data section. The
// header maps tensor names to {"dtype", "shape", "data_offsets": [begin, end]} (offsets
// relative to the data section) plus an optional "__metadata__" string->string map.
//
// Validation (each failure is InvalidArgument with a message naming the tensor or field):
// header length larger than the cap or than the file; JSON that is not an object; unknown
// dtype; shape with negative or non-integer dims or an element count that overflows;
// dtype size x element count != end - begin; begin > end; end beyond the data section;
// two tensors overlapping; a gap in the data section (data must be exactly covered, as the
// reference implementation requires); metadata values that are not strings.
//
// Thread-safety: SafetensorsFile is immutable after Open and may be read from many threads.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/mapped_file.h"
#include "base/status.h"
#include "deltasync/dtype.h"

namespace deltakv::deltasync {

inline constexpr uint64_t kDefaultMaxHeaderBytes = 100ull << 20;  // 100 MiB, as upstream

struct TensorInfo {
  std::string name;
  DType dtype = DType::kU8;
  std::vector<uint64_t> shape;
  uint64_t begin = 0;  // offsets relative to the start of the data section
  uint64_t end = 0;
  uint64_t size() const { return end - begin; }
};

struct SafetensorsHeader {
  // The exact header bytes as stored (JSON plus any trailing padding spaces).
  std::string raw;
  // Tensors sorted by begin offset.
  std::vector<TensorInfo> tensors;
  std::map<std::string, std::string> metadata;
  uint64_t data_offset() const { return 8 + raw.size(); }
  uint64_t data_size = 0;  // sum of tensor sizes
  // Returns the tensor with this name, or nullptr.
  const TensorInfo* Find(std::string_view name) const;
};

// Parses and validates the header of a safetensors file of `file_size` bytes whose first
// bytes are `prefix` (at least 8 + N bytes, or the whole file if shorter).
// Returns InvalidArgument for every malformed input listed above.
StatusOr<SafetensorsHeader> ParseSafetensorsHeader(std::span<const uint8_t> prefix,
                                                   uint64_t file_size,
                                                   uint64_t max_header_bytes =
                                                       kDefaultMaxHeaderBytes);

// A safetensors file mapped read-only.
class SafetensorsFile {
 public:
  // Maps and validates `path`. IoError if it cannot be opened; InvalidArgument if malformed.
  static StatusOr<SafetensorsFile> Open(const std::string& path,
                                        uint64_t max_header_bytes = kDefaultMaxHeaderBytes);

  const std::string& path() const { return path_; }
  const SafetensorsHeader& header() const { return header_; }
  uint64_t file_size() const { return map_.size(); }
  // The bytes of one tensor of this file's header. REQUIRES: `t` came from header().
  std::span<const uint8_t> TensorBytes(const TensorInfo& t) const;
  std::span<const uint8_t> FileBytes() const { return map_.bytes(); }

 private:
  std::string path_;
  MappedFile map_;
  SafetensorsHeader header_;
};

struct TensorToWrite {
  std::string name;
  DType dtype = DType::kU8;
  std::vector<uint64_t> shape;
  std::span<const uint8_t> data;  // REQUIRES: size == DTypeSize(dtype) * prod(shape)
};

// Returns the header bytes (JSON padded with spaces to a multiple of 8) for tensors laid out
// in the given order, "__metadata__" first when non-empty. InvalidArgument if a tensor's
// data size does not match its dtype and shape or a name repeats.
StatusOr<std::string> BuildSafetensorsHeader(const std::vector<TensorToWrite>& tensors,
                                             const std::map<std::string, std::string>& metadata);

// Writes a complete file at `path` (through a temporary name and a rename, so a crash never
// leaves a partial file under `path`). IoError on a write failure.
Status WriteSafetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                        const std::map<std::string, std::string>& metadata);

}  // namespace deltakv::deltasync
