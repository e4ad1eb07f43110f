// Volumes::PushFrom: seal the files of a plain source, streamed through the push chunker.
#include <algorithm>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <numeric>
#include <set>

#include "base/parallel.h"
#include "deltasync/volume.h"
#include "deltasync/volume_source.h"
#include "sha256.h"
#include "volume/chunk_uploader.h"
#include "volume/names.h"
#include "volume/records.h"
#include "volume/source_chunk_stream.h"

namespace deltakv::deltasync {
namespace {

constexpr unsigned kMaxFilesAtOnce = 64;
constexpr unsigned kMaxReadsAhead = 64;
constexpr uint64_t kMinReadBytes = 4 << 10;
constexpr uint64_t kMaxReadBytes = 1ull << 30;
constexpr uint64_t kMaxBatchBytes = 4ull << 30;

Status CheckReadOptions(const PushFromOptions& o) {
  if (o.files_at_once == 0 || o.files_at_once > kMaxFilesAtOnce) {
    return InvalidArgument("push: " + std::to_string(o.files_at_once) +
                           " files at once is not in 1.." + std::to_string(kMaxFilesAtOnce));
  }
  if (o.reads_ahead == 0 || o.reads_ahead > kMaxReadsAhead) {
    return InvalidArgument("push: " + std::to_string(o.reads_ahead) + " reads ahead is not in 1.." +
                           std::to_string(kMaxReadsAhead));
  }
  if (o.read_bytes < kMinReadBytes || o.read_bytes > kMaxReadBytes) {
    return InvalidArgument("push: read size " + std::to_string(o.read_bytes) + " is not in " +
                           std::to_string(kMinReadBytes) + ".." + std::to_string(kMaxReadBytes));
  }
  if (o.batch_bytes == 0 || o.batch_bytes > kMaxBatchBytes) {
    return InvalidArgument("push: batch size " + std::to_string(o.batch_bytes) + " is not in 1.." +
                           std::to_string(kMaxBatchBytes));
  }
  return Status::Ok();
}

// Sorts the listed files by path and checks what a manifest requires of them: valid paths
// and modes, no path twice, no path that is a directory of another.
Status CheckListing(const std::string& where, std::vector<ListedFile>& files) {
  std::sort(files.begin(), files.end(),
            [](const ListedFile& a, const ListedFile& b) { return a.path < b.path; });
  std::set<std::string_view> paths;
  for (size_t i = 0; i < files.size(); ++i) {
    const ListedFile& f = files[i];
    RETURN_IF_ERROR(ValidateVolumePath(f.path).WithPrefix(where));
    if (f.mode != 0644 && f.mode != 0755) {
      return InvalidArgument(where + ": file '" + f.path + "' has mode " + std::to_string(f.mode) +
                             ", not 0644 or 0755");
    }
    if (i > 0 && files[i - 1].path == f.path) {
      return InvalidArgument(where + ": file '" + f.path + "' is listed twice");
    }
    paths.insert(f.path);
  }
  for (const ListedFile& f : files) {
    for (size_t slash = f.path.find('/'); slash != std::string::npos;
         slash = f.path.find('/', slash + 1)) {
      const std::string_view dir = std::string_view(f.path).substr(0, slash);
      if (paths.count(dir) != 0) {
        return InvalidArgument(where + ": '" + std::string(dir) + "' is a file and also the " +
                               "directory of '" + f.path + "'; a volume cannot hold both");
      }
    }
  }
  return Status::Ok();
}

// Every object a version's chunks rely on: the chunks, and the bases and delta objects of
// their chains.
std::vector<std::string> ReliedOn(const VolumeManifest& m) {
  std::set<std::string> all;
  for (const VolumeFile& f : m.files) {
    for (const VolumeChunk& c : f.chunks) {
      all.insert(c.digest);
      for (const XorLink& link : c.xor_chain) {
        all.insert(link.base);
        all.insert(link.delta);
      }
    }
  }
  return {all.begin(), all.end()};
}

// The state of one PushFrom that its file workers share.
class SourcePush {
 public:
  SourcePush(VolumeStore& store, std::function<int64_t()> now, int64_t lease_ttl_s,
             const VolumeManifest& parent, VolumeManifest& manifest, FileSource& source,
             const std::vector<ListedFile>& files, const PushFromOptions& options,
             ChunkUploader& uploader)
      : store_(store),
        now_(std::move(now)),
        lease_ttl_s_(lease_ttl_s),
        manifest_(manifest),
        source_(source),
        files_(files),
        options_(options),
        uploader_(uploader) {
    for (const VolumeFile& f : parent.files) parent_files_[f.path] = &f;
    progress_.files_total = files.size();
    for (const ListedFile& f : files) progress_.bytes_total += f.size;
  }

  // Leases `digests` for this push (VOLUME.md section 6) and keeps the lease until the end.
  Status AddLease(std::vector<std::string> digests) {
    const int64_t now = now_();
    ASSIGN_OR_RETURN(std::unique_ptr<deltasync::Lease> lease,
                     Lease::Acquire(store_, manifest_.ns, manifest_.name,
                                    {std::move(digests), now + lease_ttl_s_}, now));
    std::lock_guard<std::mutex> lock(mu_);
    first_expiry_ = std::min(first_expiry_, lease->expires());
    leases_.push_back(std::move(lease));
    return Status::Ok();
  }

  // Streams file i through the chunker and stores its chunks, batch by batch.
  Status PushFile(size_t i) {
    const ListedFile& f = files_[i];
    VolumeFile& out = manifest_.files[i];
    const PushOptions& push = options_.push;
    SourceChunkStream stream(source_, f, push.piece_size, options_.read_bytes,
                             options_.reads_ahead);
    while (true) {
      ASSIGN_OR_RETURN(ChunkBatch batch, stream.Next(options_.batch_bytes));
      if (batch.chunks.empty()) break;
      RETURN_IF_ERROR(StoreBatch(f, batch, out));
    }
    out.sha256 = stream.FileSha256();
    std::lock_guard<std::mutex> lock(mu_);
    ++progress_.files_done;
    Report();
    return Status::Ok();
  }

  uint64_t chunks_total() const {
    std::lock_guard<std::mutex> lock(mu_);
    return claimed_.size();
  }
  int64_t first_expiry() const {
    std::lock_guard<std::mutex> lock(mu_);
    return first_expiry_;
  }

 private:
  // Hashes the batch's chunks, leases those no other batch has claimed, and stores them.
  Status StoreBatch(const ListedFile& f, const ChunkBatch& batch, VolumeFile& out) {
    const size_t n = batch.chunks.size();
    const unsigned threads = options_.push.threads == 0 ? 8 : options_.push.threads;
    std::vector<std::string> digests(n);
    RETURN_IF_ERROR(ParallelFor(n, threads, [&](size_t k) {
      digests[k] = Sha256Hex(batch.ChunkBytes(k));
      return Status::Ok();
    }));
    const size_t first_index = out.chunks.size();
    for (size_t k = 0; k < n; ++k) {
      out.chunks.push_back({digests[k], batch.chunks[k].offset, batch.chunks[k].size, {}});
    }
    // A digest is checked and stored by the first batch that claims it, in claim order: with
    // files read one at a time that is the first occurrence in path order, as for Push.
    std::vector<size_t> mine;
    std::vector<std::string> lease;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (size_t k = 0; k < n; ++k) {
        if (claimed_.insert(digests[k]).second) {
          mine.push_back(k);
          lease.push_back(digests[k]);
        }
      }
    }
    if (!mine.empty()) RETURN_IF_ERROR(AddLease(std::move(lease)));
    RETURN_IF_ERROR(ParallelFor(mine.size(), threads, [&](size_t j) -> Status {
      const size_t k = mine[j];
      const VolumeChunk* pc = ParentChunk(f.path, first_index + k, out.chunks[first_index + k]);
      return uploader_.Upload(digests[k], batch.ChunkBytes(k), f.path, pc, /*recheck=*/false);
    }));
    std::lock_guard<std::mutex> lock(mu_);
    progress_.bytes_read += batch.bytes.size();
    progress_.chunks_done += mine.size();
    Report();
    return Status::Ok();
  }

  // The parent's chunk of the same size at the same index of the same file, where it differs.
  const VolumeChunk* ParentChunk(const std::string& path, size_t index, const VolumeChunk& c) {
    const auto it = parent_files_.find(path);
    if (it == parent_files_.end() || index >= it->second->chunks.size()) return nullptr;
    const VolumeChunk& pc = it->second->chunks[index];
    return pc.size == c.size && pc.digest != c.digest ? &pc : nullptr;
  }

  void Report() {  // REQUIRES: mu_ held
    if (!options_.progress) return;
    progress_.bytes_uploaded = uploader_.bytes_uploaded();
    options_.progress(progress_);
  }

  VolumeStore& store_;
  const std::function<int64_t()> now_;
  const int64_t lease_ttl_s_;
  VolumeManifest& manifest_;  // each worker writes only the entry of its file
  FileSource& source_;
  const std::vector<ListedFile>& files_;
  const PushFromOptions& options_;
  ChunkUploader& uploader_;
  std::map<std::string_view, const VolumeFile*> parent_files_;
  mutable std::mutex mu_;  // guards everything below
  std::set<std::string> claimed_;
  std::vector<std::unique_ptr<deltasync::Lease>> leases_;
  int64_t first_expiry_ = std::numeric_limits<int64_t>::max();
  SourceProgress progress_;
};

}  // namespace

StatusOr<PushResult> Volumes::PushFrom(FileSource& source, std::string_view ns,
                                       std::string_view name, const PushFromOptions& options) {
  const PushOptions& push = options.push;
  RETURN_IF_ERROR(CheckPushArgs(ns, name, push));
  RETURN_IF_ERROR(CheckReadOptions(options));
  VolumeManifest parent;
  if (!push.parent.empty()) {
    auto m = ReadManifest(store_, std::string(ns), std::string(name), push.parent,
                          options_.max_manifest_bytes);
    if (m.status().code() == StatusCode::kNotFound) {
      return NotFound("push: parent sha256:" + push.parent + " is not a live version of " +
                      std::string(ns) + "/" + std::string(name));
    }
    if (!m.ok()) return m.status().WithPrefix("push: parent");
    parent = std::move(*m);
  }
  const std::string where = "source " + source.Describe();
  ASSIGN_OR_RETURN(std::vector<ListedFile> files, source.List());
  if (files.empty()) return NotFound(where + ": the source holds no files");
  RETURN_IF_ERROR(CheckListing(where, files));

  VolumeManifest manifest{std::string(ns), std::string(name), push.parent, {}};
  PushResult result;
  result.files = files.size();
  for (const ListedFile& f : files) {
    manifest.files.push_back({f.path, f.size, f.mode, "", {}});
    result.bytes += f.size;
  }
  ChunkUploader uploader(*this, store_, options_.clock, options_.lease_ttl_s, manifest.ns,
                         manifest.name, push);
  SourcePush state(store_, options_.clock, options_.lease_ttl_s, parent, manifest, source, files,
                   options, uploader);
  // With a parent, the chunks may be stored against the parent's: lease what those rely on.
  const bool xor_chunks = !push.parent.empty() && push.xor_with_parent;
  if (xor_chunks) {
    std::vector<std::string> relied_on = ReliedOn(parent);
    if (!relied_on.empty()) RETURN_IF_ERROR(state.AddLease(std::move(relied_on)));
  }
  // Large files first, so the last one to finish is short; with a parent, one file at a time
  // in path order, so each chunk is paired with the parent as Push pairs it (first occurrence).
  std::vector<size_t> order(files.size());
  std::iota(order.begin(), order.end(), size_t{0});
  if (!xor_chunks) {
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return files[a].size > files[b].size; });
  }
  RETURN_IF_ERROR(ParallelFor(files.size(), xor_chunks ? 1 : options.files_at_once,
                              [&](size_t i) { return state.PushFile(order[i]); }));
  result.chunks_total = state.chunks_total();
  RETURN_IF_ERROR(FinishPush(uploader, state.first_expiry(), manifest, push.tag, &result));
  return result;
}

}  // namespace deltakv::deltasync
