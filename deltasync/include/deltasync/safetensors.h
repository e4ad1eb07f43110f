// Safetensors files: parse and validate a header, read tensors through mmap, write files.
//
// File layout: u64 little-endian N, N bytes of UTF-8 JSON header, then the data section. The
// header maps tensor names to {"dtype", "shape", "data_offsets": [begin, end]} (offsets
// relative to the data section) plus an optional "__metadata__" string->string map.
//
// Validation (each failure is InvalidArgument with a message naming the tensor or field and
// the values involved): header length larger than the cap or than the file (truncated file);
// JSON that is not valid (including a raw NUL byte anywhere, or nesting deeper than 8) or not
// an object; duplicate keys in any object (duplicate tensor names, repeated fields); a tensor
// entry that is not an object or lacks dtype, shape or data_offsets; unknown dtype; shape that
// is not an array of non-negative integers, or whose byte count (dtype size x element count)
// overflows 64 bits; data_offsets that is not [begin, end] of non-negative integers; begin >
// end; end beyond the data section; dtype size x element count != end - begin; two tensors
// overlapping; bytes of the data section not covered by any tensor (it must be exactly
// covered, as the reference implementation requires); "__metadata__" that is not an object of
// strings. The data section is the file_size - 8 - N bytes after the header.
// Accepted, as by the reference implementation: zero-size tensors (a 0 dimension, begin ==
// end, also several at one offset); scalars (shape [], one element); "__metadata__": null
// (no metadata); unknown fields in a tensor entry (ignored); trailing whitespace padding.
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

inline constexpr uint64_t kDefaultMaxHeaderBytes = 100'000'000;  // upstream's limit

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
  // Tensors sorted by begin offset (then end, then name: zero-size tensors may share one).
  std::vector<TensorInfo> tensors;
  std::map<std::string, std::string> metadata;
  uint64_t data_offset() const { return 8 + raw.size(); }
  uint64_t data_size = 0;  // sum of tensor sizes
  // Returns the tensor with this name, or nullptr. O(number of tensors).
  const TensorInfo* Find(std::string_view name) const;
};

// Parses and validates the header of a safetensors file of `file_size` bytes whose first
// bytes are `prefix` (at least 8 + N bytes, or the whole file if shorter).
// Returns InvalidArgument for every malformed input listed above, and also if `prefix` is
// longer than the file or stops before the end of the header (a caller error).
StatusOr<SafetensorsHeader> ParseSafetensorsHeader(
    std::span<const uint8_t> prefix, uint64_t file_size,
    uint64_t max_header_bytes = kDefaultMaxHeaderBytes);

// A safetensors file mapped read-only.
class SafetensorsFile {
 public:
  // Maps and validates `path`. IoError if it cannot be opened or changed while its header was
  // read (see MappedFile::CheckUnchanged); InvalidArgument if malformed. `shrink` says what a
  // read past the end of a file that shrank after it was mapped does (MappedFile::Shrink).
  static StatusOr<SafetensorsFile> Open(const std::string& path,
                                        uint64_t max_header_bytes = kDefaultMaxHeaderBytes,
                                        MappedFile::Shrink shrink = MappedFile::Shrink::kSignal);

  const std::string& path() const { return path_; }
  const SafetensorsHeader& header() const { return header_; }
  uint64_t file_size() const { return map_.size(); }
  // The bytes of one tensor of this file's header. REQUIRES: `t` came from header().
  std::span<const uint8_t> TensorBytes(const TensorInfo& t) const;
  std::span<const uint8_t> FileBytes() const { return map_.bytes(); }
  // Ok while the bytes read so far are the file's; see MappedFile::CheckUnchanged.
  Status CheckUnchanged() const { return map_.CheckUnchanged(); }

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
// back to back in the given order, "__metadata__" first when non-empty: compact JSON with the
// fields in the order dtype, shape, data_offsets, byte for byte what the reference writer
// produces for the same order. InvalidArgument if a tensor's data size does not match its
// dtype and shape (or that product, or the data section's total, overflows 64 bits), a name
// repeats, a tensor is named "__metadata__", or a name or metadata string is not valid UTF-8.
StatusOr<std::string> BuildSafetensorsHeader(const std::vector<TensorToWrite>& tensors,
                                             const std::map<std::string, std::string>& metadata);

// A tensor's declaration without its data.
struct TensorDecl {
  std::string name;
  DType dtype = DType::kU8;
  std::vector<uint64_t> shape;
};

// As BuildSafetensorsHeader, for a layout whose data will be written separately (for example
// straight into a mapped file). Same errors, minus the data size check.
StatusOr<std::string> BuildSafetensorsLayoutHeader(
    const std::vector<TensorDecl>& tensors, const std::map<std::string, std::string>& metadata);

// Writes a complete file at `path` (through a temporary name and a rename, so a crash never
// leaves a partial file under `path`; tensor data is streamed, not copied). InvalidArgument as
// for BuildSafetensorsHeader, before anything is written; IoError on a write failure, after
// which the temporary is removed and an older file at `path` is left as it was.
Status WriteSafetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                        const std::map<std::string, std::string>& metadata);

}  // namespace deltakv::deltasync
