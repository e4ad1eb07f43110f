// DeltaManifest: the manifest.json of a delta parent -> version (deltasync/FORMAT.md).
//
// A delta is a directory (or object-store prefix) holding manifest.json and shard objects of
// zstd frames. For every changed tensor the manifest gives the parent and new Adler-32, the
// tensor's byte length and the frames that cover it: each frame XOR-decodes to `length`
// bytes that start at `offset` in the tensor's canonical bytes. Bytes not covered by a
// frame are unchanged. Unchanged tensors are omitted. An optional "checkpoint" section
// describes the complete new checkpoint (file headers and every tensor's checksum) so that
// apply can rebuild the safetensors files byte for byte and verify every tensor.
//
// Parsing validates everything that can be checked without the objects: format id, the
// metadata keys, safe object names, hex checksums, frames sorted, non-overlapping and inside
// the tensor, offsets and lengths free of overflow, unique tensor names. Every error is
// InvalidArgument and names the tensor/frame/field.
//
// Thread-safety: values.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "deltasync/checkpoint.h"
#include "deltasync/xor_digest.h"

namespace deltakv::deltasync {

inline constexpr const char* kDeltaFormat = "deltakv.delta/1";

struct DeltaFrame {
  uint64_t offset = 0;             // first tensor byte this frame covers
  uint64_t length = 0;             // dense (decoded) length
  std::string object;              // shard object name within the delta
  uint64_t object_offset = 0;      // where the compressed bytes start in the object
  uint64_t compressed_length = 0;  // compressed bytes (one or more whole zstd frames)
  // XorDigest of the `length` decoded bytes (FORMAT.md §2.5), when the manifest records one.
  // A reader that has it checks it instead of the frames' XXH64 content checksums.
  std::optional<XorDigest> xor_digest;
};

struct DeltaTensor {
  std::string name;
  uint64_t length = 0;
  uint32_t parent_adler32 = 0;
  uint32_t adler32 = 0;  // of the new tensor bytes
  std::vector<DeltaFrame> frames;
};

struct DeltaObject {
  std::string name;
  uint64_t size = 0;
  std::string sha256;  // lowercase hex, or "" when not recorded
};

// The new checkpoint's files with their exact header bytes.
struct DeltaCheckpointFile {
  std::string name;
  std::string header;  // the safetensors JSON header as stored, padding included
};

struct DeltaManifest {
  std::string version;         // metadata.version
  std::string parent_version;  // metadata.base_version
  std::vector<DeltaObject> objects;
  std::vector<DeltaTensor> tensors;
  // Optional description of the whole new checkpoint; empty files => absent.
  std::vector<DeltaCheckpointFile> checkpoint_files;
  std::vector<ManifestTensor> checkpoint_tensors;

  // Returns the object with this name, or nullptr.
  const DeltaObject* FindObject(std::string_view name) const;
};

// Returns true if `name` is a safe object or file name: 1-255 bytes of [A-Za-z0-9._-],
// not "." or "..".
bool IsSafeObjectName(std::string_view name);

// Formats an Adler-32 as 8 lowercase hex digits; parses the same (exactly 8 hex digits).
std::string FormatChecksum(uint32_t adler);
StatusOr<uint32_t> ParseChecksum(std::string_view text, std::string_view what);

std::string DeltaManifestToJson(const DeltaManifest& m);
StatusOr<DeltaManifest> ParseDeltaManifest(std::string_view json_text);

}  // namespace deltakv::deltasync
