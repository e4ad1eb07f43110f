// Volumes::CopyFrom: copy one version from another store, chunk by chunk, then seal it here.
#include <mutex>
#include <set>

#include "base/parallel.h"

#include "deltasync/volume.h"
#include "volume/chunk_object.h"
#include "volume/names.h"
#include "volume/records.h"

namespace deltakv::deltasync {
namespace {

// Copies one whole chunk unless `dest` has it; returns the stored bytes written (0 if present).
StatusOr<uint64_t> CopyChunk(VolumeStore& source, VolumeStore& dest, const std::string& digest,
                             uint64_t size) {
  const std::string key = keys::Chunk(digest);
  ASSIGN_OR_RETURN(bool present, dest.Exists(key));
  if (present) return uint64_t{0};
  auto object = source.Get(key, MaxChunkObjectBytes(size));
  if (!object.ok()) return object.status().WithPrefix("copy: source " + source.Describe());
  RETURN_IF_ERROR(DecodeChunkObject(key, *object, size, digest)
                      .status()
                      .WithPrefix("copy: source " + source.Describe()));
  RETURN_IF_ERROR(dest.Put(key, Bytes(*object)));
  return uint64_t{object->size()};
}

// Copies one delta object unless `dest` has it (verified by its own digest).
StatusOr<uint64_t> CopyDelta(VolumeStore& source, VolumeStore& dest, const std::string& hex,
                             uint64_t size) {
  const std::string key = keys::XorChunk(hex);
  ASSIGN_OR_RETURN(bool present, dest.Exists(key));
  if (present) return uint64_t{0};
  auto object = ReadDeltaObject(source, hex, size);
  if (!object.ok()) return object.status().WithPrefix("copy: source " + source.Describe());
  RETURN_IF_ERROR(dest.Put(key, Bytes(*object)));
  return uint64_t{object->size()};
}

// Copies the objects a chunk is stored as: itself whole, or its delta objects and the whole
// chunk its chain ends at.
StatusOr<uint64_t> CopyChunkObjects(VolumeStore& source, VolumeStore& dest,
                                    const VolumeChunk& c) {
  if (c.xor_chain.empty()) return CopyChunk(source, dest, c.digest, c.size);
  uint64_t written = 0;
  for (const XorLink& link : c.xor_chain) {
    ASSIGN_OR_RETURN(uint64_t n, CopyDelta(source, dest, link.delta, c.size));
    written += n;
  }
  ASSIGN_OR_RETURN(uint64_t n, CopyChunk(source, dest, c.xor_chain.back().base, c.size));
  return written + n;
}

}  // namespace

StatusOr<PushResult> Volumes::CopyFrom(VolumeStore& source, const VolumeRef& ref,
                                       std::string_view ns, std::string_view name,
                                       const CopyOptions& options) {
  RETURN_IF_ERROR(ValidateVolumeName("namespace", ns).WithPrefix("copy"));
  RETURN_IF_ERROR(ValidateVolumeName("name", name).WithPrefix("copy"));
  if (!options.tag.empty()) RETURN_IF_ERROR(ValidateVolumeTag(options.tag).WithPrefix("copy"));
  Volumes from(source, options_);
  auto version = from.Show(ref);
  if (!version.ok()) return version.status().WithPrefix("copy: source " + source.Describe());
  VolumeManifest manifest = std::move(version->manifest);
  if (manifest.ns != ns || manifest.name != name) {
    manifest.ns = std::string(ns);
    manifest.name = std::string(name);
    manifest.parent.clear();
  }
  ASSIGN_OR_RETURN(std::string text, SerializeVolumeManifest(manifest));
  PushResult result;
  result.ref = VolumeRef{manifest.ns, manifest.name, ManifestDigest(text), ""};
  result.files = manifest.files.size();
  std::set<std::string> seen;
  std::vector<const VolumeChunk*> order;
  std::vector<std::string> digests;
  for (const VolumeFile& f : manifest.files) {
    result.bytes += f.size;
    for (const VolumeChunk& c : f.chunks) {
      if (seen.insert(c.digest).second) {
        order.push_back(&c);
        digests.push_back(c.digest);
        for (const XorLink& link : c.xor_chain) {
          digests.push_back(link.base);
          digests.push_back(link.delta);
        }
      }
    }
  }
  result.chunks_total = order.size();
  ASSIGN_OR_RETURN(std::unique_ptr<Lease> lease,
                   Lease::Acquire(store_, manifest.ns, manifest.name,
                                  {std::move(digests), Now() + options_.lease_ttl_s}, Now()));
  std::mutex mu;
  size_t done = 0;
  RETURN_IF_ERROR(ParallelFor(order.size(), options.threads == 0 ? 8 : options.threads,
                              [&](size_t i) -> Status {
    ASSIGN_OR_RETURN(uint64_t written, CopyChunkObjects(source, store_, *order[i]));
    std::lock_guard<std::mutex> lock(mu);
    result.chunks_uploaded += written > 0 ? 1 : 0;
    result.chunks_xor += order[i]->xor_chain.empty() ? 0 : 1;
    result.bytes_uploaded += written;
    ++done;
    if (options.progress) options.progress({done, order.size(), result.bytes_uploaded});
    return Status::Ok();
  }));
  if (Now() >= lease->expires()) {
    return FailedPrecondition("copy: the copy outlasted its lease (" +
                              std::to_string(options_.lease_ttl_s) +
                              " s); gc may have removed chunks it relied on; copy again");
  }
  RETURN_IF_ERROR(SealManifest(manifest.ns, manifest.name, result.ref.digest, text));
  if (!options.tag.empty()) RETURN_IF_ERROR(Tag(result.ref, options.tag).status());
  return result;
}

}  // namespace deltakv::deltasync
