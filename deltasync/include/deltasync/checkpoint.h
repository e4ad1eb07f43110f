// Checkpoint: a directory of safetensors files opened read-only, with a name -> tensor index,
// and its manifest (every tensor's dtype, shape, file, byte range and Adler-32).
//
// A checkpoint directory holds one or more "*.safetensors" files (order by file name) and,
// optionally, "manifest.json" (deltasync/FORMAT.md, "Checkpoint manifest"). Tensor names are
// unique across the whole directory.
//
// Thread-safety: an opened Checkpoint is immutable; reads from many threads are safe.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "base/mapped_file.h"
#include "base/status.h"
#include "deltasync/safetensors.h"

namespace deltakv::deltasync {

inline constexpr const char* kCheckpointFormat = "deltakv.checkpoint/1";
inline constexpr const char* kManifestFileName = "manifest.json";

struct TensorRef {
  size_t file = 0;  // index into Checkpoint::files()
  const TensorInfo* info = nullptr;
};

class Checkpoint {
 public:
  // Opens and validates every *.safetensors file in `dir`. IoError if the directory or one of
  // them cannot be read (a dangling link too); InvalidArgument for a malformed file, a
  // *.safetensors entry that is not a regular file, a directory without safetensors files or a
  // tensor name that appears in two files. `shrink` says what a read past the end of a file
  // that shrank after it was opened does (MappedFile::Shrink).
  static StatusOr<Checkpoint> Open(const std::string& dir,
                                   MappedFile::Shrink shrink = MappedFile::Shrink::kSignal);

  const std::string& dir() const { return dir_; }
  // File names (not paths), sorted.
  const std::vector<std::string>& file_names() const { return names_; }
  const std::vector<SafetensorsFile>& files() const { return files_; }
  // Returns the tensor with this name, or nullptr.
  const TensorRef* Find(const std::string& name) const;
  std::span<const uint8_t> Bytes(const TensorRef& ref) const {
    return files_[ref.file].TensorBytes(*ref.info);
  }
  size_t tensor_count() const { return index_.size(); }
  uint64_t total_tensor_bytes() const;
  // Ok while the bytes read so far are the files' as they were opened; else IoError naming
  // the first file that changed (see MappedFile::CheckUnchanged).
  Status CheckUnchanged() const;

 private:
  std::string dir_;
  std::vector<std::string> names_;
  std::vector<SafetensorsFile> files_;
  std::map<std::string, TensorRef, std::less<>> index_;
};

struct ManifestTensor {
  std::string name;
  DType dtype = DType::kU8;
  std::vector<uint64_t> shape;
  std::string file;
  uint64_t begin = 0;  // absolute byte range in `file`
  uint64_t end = 0;
  uint32_t adler32 = 0;
};

struct ManifestFile {
  std::string name;
  uint64_t size = 0;
  uint64_t header_size = 0;  // N, the JSON header length
};

struct CheckpointManifest {
  std::string version;  // optional, "" when unknown
  std::vector<ManifestFile> files;
  std::vector<ManifestTensor> tensors;  // in file order, then offset order
};

// Computes the manifest of an opened checkpoint: reads every tensor once (in parallel on
// `threads` threads; 0 = all CPUs). Progress goes to stderr when `progress` is set.
// InvalidArgument if `version` or a file or tensor name is not valid UTF-8 (the manifest is
// JSON); IoError if a file changed while it was read (Checkpoint::CheckUnchanged); the
// reader's errors otherwise.
StatusOr<CheckpointManifest> ComputeCheckpointManifest(const Checkpoint& ckpt,
                                                       const std::string& version, unsigned threads,
                                                       bool progress);

// Deterministic JSON text (two-space indent, trailing newline) for a manifest.
std::string CheckpointManifestToJson(const CheckpointManifest& m);

// Parses and validates manifest JSON. InvalidArgument naming the field on any error.
StatusOr<CheckpointManifest> ParseCheckpointManifest(std::string_view json_text);

}  // namespace deltakv::deltasync

namespace deltakv::deltasync {

// The default version id of the checkpoint in `dir`: the directory's name, with "." and ".."
// resolved against the working directory ("." in /ckpt/step-100 is "step-100"). A manifest.json
// in `dir` does not count: one copied along with an older checkpoint names that one.
std::string CheckpointVersionId(const std::string& dir);

}  // namespace deltakv::deltasync
