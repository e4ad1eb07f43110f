// Private: the layout of the checkpoint that apply writes, resolved against the parent.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "deltasync/checkpoint.h"
#include "deltasync/delta_manifest.h"

namespace deltakv::deltasync {

struct OutputTensor {
  const TensorInfo* info = nullptr;          // in OutputFile::header
  const TensorRef* parent = nullptr;         // same-named parent tensor, same byte length
  const DeltaTensor* delta = nullptr;        // nullptr if unchanged
  const ManifestTensor* expected = nullptr;  // from the delta's checkpoint section, if any
};

struct OutputFile {
  std::string name;
  SafetensorsHeader header;
  uint64_t file_size = 0;
  std::vector<OutputTensor> tensors;
};

struct OutputLayout {
  std::vector<OutputFile> files;
};

// The new checkpoint's files: from the delta's checkpoint section when present (each header
// re-validated and cross-checked against the section's tensor list), else the parent's files.
// Every output tensor must exist in the parent with the same byte length, and every tensor
// the delta changes must be in the output. InvalidArgument naming the tensor otherwise.
// The layout points into `m` and `parent`, which must outlive it.
StatusOr<OutputLayout> BuildOutputLayout(const DeltaManifest& m, const Checkpoint& parent);

// OK if the manifest has no checkpoint section, or if each of its files' headers validates
// (FORMAT.md 1.1, with the data size its tensors' byte ranges imply) and agrees with the
// section's tensor list on names, dtypes, shapes and byte ranges; InvalidArgument otherwise.
Status CheckCheckpointSection(const DeltaManifest& m);

// Writes the 8-byte little-endian header length and the header bytes at the start of `file`.
// REQUIRES: file.size() >= 8 + raw.size().
void WriteSafetensorsPrefix(const std::string& raw, std::span<uint8_t> file);

}  // namespace deltakv::deltasync
