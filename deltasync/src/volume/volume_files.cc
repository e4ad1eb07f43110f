// OpenVolumeFiles: the files of a sealed version as an ObjectStore.
#include "deltasync/volume_files.h"

#include <algorithm>
#include <map>

namespace deltakv::deltasync {
namespace {

class VolumeFilesStore : public ObjectStore {
 public:
  VolumeFilesStore(std::unique_ptr<VolumeStore> store, const VolumesOptions& options,
                   VolumeVersion version)
      : store_(std::move(store)), volumes_(*store_, options), version_(std::move(version)) {
    for (const VolumeFile& f : version_.manifest.files) files_[f.path] = &f;
  }

  StatusOr<uint64_t> Size(const std::string& name) override {
    ASSIGN_OR_RETURN(const VolumeFile* f, Find(name));
    return f->size;
  }
  StatusOr<std::string> ReadRange(const std::string& name, uint64_t offset,
                                  uint64_t length) override {
    ASSIGN_OR_RETURN(const VolumeFile* f, Find(name));
    if (offset > f->size || length > f->size - offset) {
      return DataLoss("file '" + name + "' of " + Describe() + " is " + std::to_string(f->size) +
                      " bytes, shorter than the range asked for");
    }
    std::string out;
    out.reserve(length);
    const uint64_t end = offset + length;
    // The first chunk that ends after `offset`.
    auto it = std::upper_bound(f->chunks.begin(), f->chunks.end(), offset,
                               [](uint64_t o, const VolumeChunk& c) { return o < c.offset + c.size; });
    for (; it != f->chunks.end() && it->offset < end; ++it) {
      auto bytes = volumes_.ReadChunk(*it);
      if (!bytes.ok()) return bytes.status().WithPrefix("file '" + name + "' of " + Describe());
      const uint64_t from = std::max(offset, it->offset) - it->offset;
      const uint64_t to = std::min(end, it->offset + it->size) - it->offset;
      out.append(*bytes, from, to - from);
    }
    return out;
  }
  StatusOr<std::string> ReadObject(const std::string& name, uint64_t max_bytes) override {
    ASSIGN_OR_RETURN(const VolumeFile* f, Find(name));
    if (f->size > max_bytes) {
      return ResourceExhausted("file '" + name + "' of " + Describe() + " is " +
                               std::to_string(f->size) + " bytes, above the cap of " +
                               std::to_string(max_bytes));
    }
    return ReadRange(name, 0, f->size);
  }
  std::string Describe() const override { return "vol://" + version_.ref.ToString(); }

 private:
  StatusOr<const VolumeFile*> Find(const std::string& name) const {
    const auto it = files_.find(name);
    if (it == files_.end()) return NotFound("'" + name + "' is not a file of " + Describe());
    return it->second;
  }

  std::unique_ptr<VolumeStore> store_;
  Volumes volumes_;
  VolumeVersion version_;
  std::map<std::string, const VolumeFile*> files_;
};

}  // namespace

StatusOr<std::unique_ptr<ObjectStore>> OpenVolumeFiles(std::unique_ptr<VolumeStore> store,
                                                       const VolumeRef& ref,
                                                       const VolumesOptions& options) {
  VolumeVersion version;
  {
    Volumes volumes(*store, options);
    ASSIGN_OR_RETURN(version, volumes.Show(ref));
  }
  return std::unique_ptr<ObjectStore>(
      new VolumeFilesStore(std::move(store), options, std::move(version)));
}

}  // namespace deltakv::deltasync
