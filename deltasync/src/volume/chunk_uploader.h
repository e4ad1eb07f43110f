// Private: storing the chunks of a push (Volumes::Push and Volumes::PushFrom). Each distinct
// chunk the store lacks is stored whole, or, with a parent, as a delta object against the
// parent's chunk at the same place when that is at most half its size (VOLUME.md 5.1).
//
// The caller leases every chunk digest before handing it to Upload, and the objects of the
// parent chunks it names (VOLUME.md section 6); Upload leases each delta object it writes.
// Ownership: borrows the Volumes, the store and the options, which must outlive it; owns the
// leases of the delta objects it wrote until it is destroyed.
// Thread-safety: Upload may be called from several threads at once for distinct digests.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/mapped_file.h"
#include "base/status.h"
#include "deltasync/volume.h"
#include "volume/records.h"

namespace deltakv::deltasync {

// OK if the volume name, tag, parent digest, thread count, XOR chain limit and piece size of a
// push are valid; InvalidArgument naming the first that is not.
Status CheckPushArgs(std::string_view ns, std::string_view name, const PushOptions& options);

// Records each chain in the chunks of `m` that have its digest.
void ApplyXorChains(const std::map<std::string, std::vector<XorLink>>& chains, VolumeManifest& m);

class ChunkUploader {
 public:
  ChunkUploader(Volumes& volumes, VolumeStore& store, std::function<int64_t()> now,
                int64_t lease_ttl_s, std::string ns, std::string name, const PushOptions& options);
  ChunkUploader(const ChunkUploader&) = delete;
  ChunkUploader& operator=(const ChunkUploader&) = delete;

  // Stores the chunk `bytes`, whose sha256 is `digest`, unless the store has it: as a delta
  // against `parent_chunk` (the parent's chunk of the same size at the same place of `path`,
  // nullptr if none) where the options allow and it pays, else whole. With `recheck`, hashes
  // the bytes again first: FailedPrecondition naming `path` if they no longer match (the file
  // changed while it was pushed). Errors of the store and of reading the parent chunk.
  Status Upload(const std::string& digest, std::span<const uint8_t> bytes, const std::string& path,
                const VolumeChunk* parent_chunk, bool recheck);

  // Stored bytes of the chunk and delta objects uploaded so far.
  uint64_t bytes_uploaded() const;
  // Adds chunks_uploaded, bytes_uploaded, chunks_xor and bytes_xor to `result`.
  void AddCounts(PushResult& result) const;
  // The chain of every chunk stored as a delta, by digest. Call after the last Upload.
  const std::map<std::string, std::vector<XorLink>>& chains() const { return chains_; }

 private:
  Status UploadDelta(const std::string& digest, const VolumeChunk& pc, const std::string& object);
  StatusOr<std::string> ParentBytes(const VolumeChunk& pc, const std::string& path);
  const MappedFile* ParentFile(const std::string& path);

  Volumes& volumes_;
  VolumeStore& store_;
  const std::function<int64_t()> now_;
  const int64_t lease_ttl_s_;
  const std::string ns_;
  const std::string name_;
  const PushOptions& options_;
  mutable std::mutex mu_;  // guards everything below
  PushResult counts_;      // only the upload counters
  std::map<std::string, std::vector<XorLink>> chains_;
  std::map<std::string, std::unique_ptr<MappedFile>> parent_files_;
  std::vector<std::unique_ptr<Lease>> leases_;
};

}  // namespace deltakv::deltasync
