#include "output_layout.h"

#include <cstring>
#include <map>

namespace deltakv::deltasync {

void WriteSafetensorsPrefix(const std::string& raw, std::span<uint8_t> file) {
  uint64_t n = raw.size();
  for (int i = 0; i < 8; ++i) file[static_cast<size_t>(i)] = static_cast<uint8_t>(n >> (8 * i));
  std::memcpy(file.data() + 8, raw.data(), raw.size());
}

namespace {

// Rebuilds a header from the delta's checkpoint section and checks it against the section's
// tensor list.
StatusOr<OutputFile> FileFromSection(
    const DeltaCheckpointFile& f, const std::map<std::string_view, const ManifestTensor*>& by_name,
    size_t* matched) {
  const std::string where = "delta manifest: checkpoint file '" + f.name + "'";
  // The section's tensors give the data size, so the header can be validated as a whole file.
  uint64_t header_end = 8 + static_cast<uint64_t>(f.header.size());
  uint64_t file_size = header_end;
  for (const auto& [name, t] : by_name) {
    if (t->file == f.name) file_size = std::max(file_size, t->end);
  }
  std::string prefix(header_end, '\0');
  WriteSafetensorsPrefix(
      f.header, std::span<uint8_t>(reinterpret_cast<uint8_t*>(prefix.data()), prefix.size()));
  auto header = ParseSafetensorsHeader(
      std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(prefix.data()), prefix.size()),
      file_size);
  if (!header.ok()) return header.status().WithPrefix(where);
  OutputFile out{f.name, std::move(header).value(), file_size, {}};
  for (const TensorInfo& t : out.header.tensors) {
    auto it = by_name.find(t.name);
    if (it == by_name.end() || it->second->file != f.name) {
      return InvalidArgument(where + ": header has tensor '" + t.name +
                             "' that the section's tensor list does not place in this file");
    }
    const ManifestTensor& mt = *it->second;
    uint64_t begin = out.header.data_offset() + t.begin;
    if (mt.dtype != t.dtype || mt.shape != t.shape || mt.begin != begin ||
        mt.end != out.header.data_offset() + t.end) {
      return InvalidArgument(where + ": tensor '" + t.name +
                             "' has a different dtype, shape or byte range in the header than "
                             "in the section's tensor list");
    }
    ++*matched;
  }
  return out;
}

// The files of the checkpoint section, each header checked against the section's tensors.
StatusOr<std::vector<OutputFile>> FilesFromSection(const DeltaManifest& m) {
  std::vector<OutputFile> files;
  std::map<std::string_view, const ManifestTensor*> by_name;
  for (const ManifestTensor& t : m.checkpoint_tensors) by_name.emplace(t.name, &t);
  size_t matched = 0;
  for (const DeltaCheckpointFile& f : m.checkpoint_files) {
    ASSIGN_OR_RETURN(OutputFile of, FileFromSection(f, by_name, &matched));
    files.push_back(std::move(of));
  }
  if (matched != m.checkpoint_tensors.size()) {
    return InvalidArgument("delta manifest: checkpoint section lists " +
                           std::to_string(m.checkpoint_tensors.size()) +
                           " tensors but its file headers hold " + std::to_string(matched));
  }
  return files;
}

}  // namespace

Status CheckCheckpointSection(const DeltaManifest& m) {
  if (m.checkpoint_files.empty()) return Status::Ok();
  return FilesFromSection(m).status();
}

StatusOr<OutputLayout> BuildOutputLayout(const DeltaManifest& m, const Checkpoint& parent) {
  OutputLayout layout;
  if (!m.checkpoint_files.empty()) {
    ASSIGN_OR_RETURN(layout.files, FilesFromSection(m));
  } else {
    for (size_t i = 0; i < parent.files().size(); ++i) {
      const SafetensorsFile& f = parent.files()[i];
      layout.files.push_back({parent.file_names()[i], f.header(), f.file_size(), {}});
    }
  }
  std::map<std::string_view, const DeltaTensor*> changed;
  for (const DeltaTensor& t : m.tensors) changed.emplace(t.name, &t);
  std::map<std::string_view, const ManifestTensor*> expected;
  for (const ManifestTensor& t : m.checkpoint_tensors) expected.emplace(t.name, &t);
  size_t placed = 0;
  for (OutputFile& of : layout.files) {
    for (const TensorInfo& t : of.header.tensors) {
      const TensorRef* p = parent.Find(t.name);
      if (p == nullptr) {
        return InvalidArgument("tensor '" + t.name +
                               "' of the new checkpoint is not in the parent checkpoint");
      }
      if (p->info->size() != t.size()) {
        return InvalidArgument("tensor '" + t.name + "' is " + std::to_string(t.size()) +
                               " bytes in the new checkpoint but " +
                               std::to_string(p->info->size()) + " in the parent");
      }
      OutputTensor ot{&t, p, nullptr, nullptr};
      if (auto it = changed.find(t.name); it != changed.end()) {
        ot.delta = it->second;
        ++placed;
        if (ot.delta->length != t.size()) {
          return InvalidArgument("delta manifest: tensor '" + t.name + "' has length " +
                                 std::to_string(ot.delta->length) + " but the checkpoint's is " +
                                 std::to_string(t.size()) + " bytes");
        }
        if (!m.checkpoint_tensors.empty() && expected.at(t.name)->adler32 != ot.delta->adler32) {
          return InvalidArgument("delta manifest: tensor '" + t.name +
                                 "' has two different new checksums");
        }
      }
      if (auto it = expected.find(t.name); it != expected.end()) ot.expected = it->second;
      of.tensors.push_back(ot);
    }
  }
  if (placed != m.tensors.size()) {
    for (const DeltaTensor& t : m.tensors) {
      bool found = false;
      for (const OutputFile& of : layout.files) found = found || of.header.Find(t.name) != nullptr;
      if (!found) {
        return InvalidArgument("delta changes tensor '" + t.name + "', which the " +
                               (m.checkpoint_files.empty() ? "parent" : "new") +
                               " checkpoint does not have");
      }
    }
  }
  return layout;
}

}  // namespace deltakv::deltasync
