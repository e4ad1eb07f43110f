// OpenVolumeDelta: a version pushed with a parent, presented as a delta parent -> version.
#include "deltasync/volume_delta.h"

#include <algorithm>
#include <map>

#include "deltasync/checkpoint.h"
#include "deltasync/delta_manifest.h"
#include "volume/chunk_object.h"
#include "volume/names.h"
#include "volume/records.h"

namespace deltakv::deltasync {
namespace {

constexpr std::string_view kObjectPrefix = "xchunk-";
constexpr uint64_t kMaxCheckpointManifestBytes = 1ull << 30;

const VolumeFile* FindFile(const VolumeManifest& m, const std::string& path) {
  const auto it = std::lower_bound(m.files.begin(), m.files.end(), path,
                                   [](const VolumeFile& f, const std::string& p) { return f.path < p; });
  return it != m.files.end() && it->path == path ? &*it : nullptr;
}

// The chunk of `f` that starts at `offset`, or nullptr.
const VolumeChunk* ChunkAt(const VolumeFile& f, uint64_t offset) {
  const auto it = std::lower_bound(f.chunks.begin(), f.chunks.end(), offset,
                                   [](const VolumeChunk& c, uint64_t o) { return c.offset < o; });
  return it != f.chunks.end() && it->offset == offset ? &*it : nullptr;
}

StatusOr<CheckpointManifest> ReadCheckpointManifest(Volumes& volumes, const VolumeManifest& m) {
  const std::string where = "version of " + m.ns + "/" + m.name;
  const VolumeFile* f = FindFile(m, kManifestFileName);
  if (f == nullptr) {
    return InvalidArgument(where + " has no " + kManifestFileName +
                           " (a checkpoint manifest, FORMAT.md 1.2); it cannot be synced live");
  }
  if (f->size > kMaxCheckpointManifestBytes) {
    return InvalidArgument(where + ": " + kManifestFileName + " is larger than 1 GiB");
  }
  std::string text;
  for (const VolumeChunk& c : f->chunks) {
    ASSIGN_OR_RETURN(std::string bytes, volumes.ReadChunk(c));
    text += bytes;
  }
  auto parsed = ParseCheckpointManifest(text);
  if (!parsed.ok()) return parsed.status().WithPrefix(where + ": " + kManifestFileName);
  return parsed;
}

class VolumeDeltaStore : public ObjectStore {
 public:
  VolumeDeltaStore(std::unique_ptr<VolumeStore> store, std::string describe, std::string manifest,
                   std::map<std::string, uint64_t> objects)
      : store_(std::move(store)),
        describe_(std::move(describe)),
        manifest_(std::move(manifest)),
        objects_(std::move(objects)) {}

  StatusOr<uint64_t> Size(const std::string& name) override {
    if (name == kManifestFileName) return uint64_t{manifest_.size()};
    RETURN_IF_ERROR(Known(name).status());
    return store_->Size(keys::XorChunk(name.substr(kObjectPrefix.size())));
  }
  StatusOr<std::string> ReadRange(const std::string& name, uint64_t offset,
                                  uint64_t length) override {
    std::string all;
    if (name == kManifestFileName) {
      all = manifest_;
    } else {
      ASSIGN_OR_RETURN(uint64_t chunk_size, Known(name));
      ASSIGN_OR_RETURN(all, Read(name, chunk_size));
    }
    if (offset > all.size() || length > all.size() - offset) {
      return DataLoss("object '" + name + "' of " + describe_ + " holds " +
                      std::to_string(all.size()) + " bytes, fewer than asked for");
    }
    return all.substr(offset, length);
  }
  StatusOr<std::string> ReadObject(const std::string& name, uint64_t max_bytes) override {
    ASSIGN_OR_RETURN(uint64_t size, Size(name));
    if (size > max_bytes) {
      return ResourceExhausted("object '" + name + "' of " + describe_ + " is " +
                               std::to_string(size) + " bytes, above the cap of " +
                               std::to_string(max_bytes));
    }
    return ReadRange(name, 0, size);
  }
  std::string Describe() const override { return describe_; }

 private:
  StatusOr<uint64_t> Known(const std::string& name) const {
    const auto it = objects_.find(name);
    if (it == objects_.end()) {
      return NotFound("object '" + name + "' is not part of " + describe_);
    }
    return it->second;
  }
  // The delta object, verified against the sha256 its name carries.
  StatusOr<std::string> Read(const std::string& name, uint64_t chunk_size) {
    return ReadDeltaObject(*store_, name.substr(kObjectPrefix.size()), chunk_size);
  }

  std::unique_ptr<VolumeStore> store_;
  std::string describe_;
  std::string manifest_;
  std::map<std::string, uint64_t> objects_;  // name -> size of the chunk it stands for
};

// The frames of one tensor: its pieces that differ from the parent's.
Status TensorFrames(const ManifestTensor& t, const ManifestTensor& pt, const VolumeFile& vf,
                    const VolumeFile& pf, DeltaTensor& out,
                    std::map<std::string, uint64_t>& objects) {
  const std::string where = "tensor '" + t.name + "'";
  uint64_t at = t.begin;
  while (at < t.end) {
    const VolumeChunk* c = ChunkAt(vf, at);
    const VolumeChunk* pc = ChunkAt(pf, pt.begin + (at - t.begin));
    if (c == nullptr || c->size > t.end - at || pc == nullptr || pc->size != c->size) {
      return InvalidArgument(where + ": its pieces are not cut on the same boundaries in the " +
                             "version and its parent (byte " + std::to_string(at - t.begin) + ")");
    }
    if (c->digest != pc->digest) {
      if (c->xor_chain.empty() || c->xor_chain[0].base != pc->digest) {
        return FailedPrecondition(where + ": bytes [" + std::to_string(at - t.begin) + ", " +
                                  std::to_string(at - t.begin + c->size) +
                                  ") are stored whole, not as a delta against the parent; push "
                                  "with --parent (and without --no-xor) to sync it live");
      }
      const std::string name = std::string(kObjectPrefix) + c->xor_chain[0].delta;
      objects[name] = c->size;
      out.frames.push_back({at - t.begin, c->size, name, kChunkHeaderBytes, 0});
    }
    at += c->size;
  }
  return Status::Ok();
}

}  // namespace

StatusOr<std::unique_ptr<ObjectStore>> OpenVolumeDelta(std::unique_ptr<VolumeStore> store,
                                                       const VolumeRef& ref,
                                                       const VolumesOptions& options) {
  Volumes volumes(*store, options);
  ASSIGN_OR_RETURN(VolumeVersion version, volumes.Show(ref));
  const std::string shown = "vol://" + version.ref.ToString();
  if (version.manifest.parent.empty()) {
    return FailedPrecondition(shown + " has no parent: push it with --parent to sync it live");
  }
  const VolumeRef parent_ref{version.ref.ns, version.ref.name, version.manifest.parent, ""};
  auto parent = volumes.Show(parent_ref);
  if (!parent.ok()) return parent.status().WithPrefix(shown + ": parent");
  ASSIGN_OR_RETURN(CheckpointManifest ckpt, ReadCheckpointManifest(volumes, version.manifest));
  ASSIGN_OR_RETURN(CheckpointManifest parent_ckpt,
                   ReadCheckpointManifest(volumes, parent->manifest));
  std::map<std::string, const ManifestTensor*> parent_tensors;
  for (const ManifestTensor& t : parent_ckpt.tensors) parent_tensors[t.name] = &t;

  DeltaManifest delta;
  delta.version = ckpt.version;
  delta.parent_version = parent_ckpt.version;
  std::map<std::string, uint64_t> objects;
  for (const ManifestTensor& t : ckpt.tensors) {
    const auto it = parent_tensors.find(t.name);
    if (it == parent_tensors.end() || it->second->end - it->second->begin != t.end - t.begin) {
      return InvalidArgument(shown + ": tensor '" + t.name +
                             (it == parent_tensors.end() ? "' is not in the parent"
                                                         : "' has another length in the parent"));
    }
    const ManifestTensor& pt = *it->second;
    const VolumeFile* vf = FindFile(version.manifest, t.file);
    const VolumeFile* pf = FindFile(parent->manifest, pt.file);
    if (vf == nullptr || pf == nullptr) {
      return InvalidArgument(shown + ": tensor '" + t.name + "' names a file the volume lacks");
    }
    DeltaTensor dt{t.name, t.end - t.begin, pt.adler32, t.adler32, {}};
    RETURN_IF_ERROR(TensorFrames(t, pt, *vf, *pf, dt, objects).WithPrefix(shown));
    if (dt.frames.empty() && dt.adler32 != dt.parent_adler32) {
      return DataLoss(shown + ": tensor '" + t.name +
                      "' has another checksum than in the parent but no changed piece");
    }
    if (!dt.frames.empty()) delta.tensors.push_back(std::move(dt));
  }
  // Object sizes and the frames' compressed lengths come from the stored objects.
  std::map<std::string, uint64_t> sizes;
  for (const auto& [name, chunk_size] : objects) {
    const std::string hex = name.substr(kObjectPrefix.size());
    ASSIGN_OR_RETURN(uint64_t size, store->Size(keys::XorChunk(hex)));
    if (size <= kChunkHeaderBytes) {
      return DataLoss(shown + ": delta object '" + keys::XorChunk(hex) + "' is truncated");
    }
    sizes[name] = size;
    delta.objects.push_back({name, size, hex});
  }
  for (DeltaTensor& t : delta.tensors) {
    for (DeltaFrame& f : t.frames) f.compressed_length = sizes.at(f.object) - kChunkHeaderBytes;
  }
  std::string text = DeltaManifestToJson(delta);
  RETURN_IF_ERROR(ParseDeltaManifest(text).status().WithPrefix(shown + ": built delta manifest"));
  return std::unique_ptr<ObjectStore>(
      new VolumeDeltaStore(std::move(store), shown, std::move(text), std::move(objects)));
}

}  // namespace deltakv::deltasync
