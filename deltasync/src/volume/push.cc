// Volumes::Push: scan, chunk and hash a directory, upload missing chunks, seal the manifest.
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>

#include "base/file_util.h"
#include "base/mapped_file.h"
#include "base/parallel.h"
#include "deltasync/volume.h"
#include "sha256.h"
#include "volume/chunk_uploader.h"
#include "volume/names.h"
#include "volume/records.h"

namespace deltakv::deltasync {
namespace {

namespace fs = std::filesystem;

struct SourceFile {
  std::string path;  // relative, '/'-separated
  uint32_t mode = 0644;
  MappedFile map;
};

// Where the bytes of one distinct chunk can be read, and where it first occurs.
struct ChunkSource {
  const SourceFile* file = nullptr;
  ChunkSpan span;
  size_t index = 0;                            // of the chunk in its file
  const VolumeChunk* parent_chunk = nullptr;  // the parent's chunk there, when it differs
};

std::string Describe(fs::file_type type) {
  switch (type) {
    case fs::file_type::symlink:
      return "a symbolic link";
    case fs::file_type::block:
    case fs::file_type::character:
      return "a device";
    case fs::file_type::fifo:
      return "a FIFO";
    case fs::file_type::socket:
      return "a socket";
    default:
      return "not a regular file";
  }
}

StatusOr<SourceFile> OpenSource(const fs::path& full, const std::string& rel) {
  RETURN_IF_ERROR(ValidateVolumePath(rel).WithPrefix("push: file '" + full.string() + "'"));
  struct stat st {};
  if (stat(full.c_str(), &st) != 0) return IoError(ErrnoMessage("stat", full.string(), errno));
  ASSIGN_OR_RETURN(MappedFile map, MappedFile::OpenReadOnly(full.string()));
  return SourceFile{rel, (st.st_mode & S_IXUSR) ? 0755u : 0644u, std::move(map)};
}

// Returns the regular files under `dir` sorted by path bytes; refuses anything else.
StatusOr<std::vector<SourceFile>> ScanDir(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return InvalidArgument("push: '" + dir + "' is not a directory");
  std::vector<SourceFile> files;
  fs::recursive_directory_iterator it(dir, ec), end;
  for (; !ec && it != end; it.increment(ec)) {
    const std::string rel = it->path().lexically_relative(dir).generic_string();
    // An entry that cannot be looked at (its joined path past the system's limit, say) fails
    // the push: skipped, the version would silently lack it.
    const fs::file_type type = it->symlink_status(ec).type();
    if (ec) {
      RETURN_IF_ERROR(
          ValidateVolumePath(rel).WithPrefix("push: file '" + it->path().string() + "'"));
      return IoError("push: '" + it->path().string() + "': " + ec.message());
    }
    if (type == fs::file_type::directory) continue;
    if (type != fs::file_type::regular) {
      return InvalidArgument("push: '" + it->path().string() + "' is " + Describe(type) +
                             "; a volume holds regular files only");
    }
    ASSIGN_OR_RETURN(SourceFile f, OpenSource(it->path(), rel));
    files.push_back(std::move(f));
  }
  if (ec) return IoError("push: scan '" + dir + "': " + ec.message());
  std::sort(files.begin(), files.end(),
            [](const SourceFile& a, const SourceFile& b) { return a.path < b.path; });
  return files;
}

// Chunks and hashes every file on `threads` threads: one task per whole-file sha256 and one
// per chunk, so one large file is hashed by many threads. Returns the files' manifest entries
// (in the order of `sources`) and fills the distinct chunks in first-occurrence order.
StatusOr<std::vector<VolumeFile>> DescribeFiles(const std::vector<SourceFile>& sources,
                                                uint64_t piece_size, unsigned threads,
                                                std::map<std::string, ChunkSource>& distinct,
                                                std::vector<std::string>& order) {
  std::vector<VolumeFile> files(sources.size());
  struct Task {
    size_t file;
    int64_t chunk;  // -1: the whole file
  };
  std::vector<Task> tasks;
  for (size_t i = 0; i < sources.size(); ++i) {
    VolumeFile& out = files[i];
    out.path = sources[i].path;
    out.mode = sources[i].mode;
    out.size = sources[i].map.size();
    tasks.push_back({i, -1});
    for (const ChunkSpan& span : ChunkFile(sources[i].map.bytes(), piece_size)) {
      tasks.push_back({i, static_cast<int64_t>(out.chunks.size())});
      out.chunks.push_back({"", span.offset, span.size, {}});
    }
  }
  // Large files first: their whole-file hash is the longest task.
  std::stable_sort(tasks.begin(), tasks.end(), [&](const Task& a, const Task& b) {
    return (a.chunk < 0 ? files[a.file].size : 0) > (b.chunk < 0 ? files[b.file].size : 0);
  });
  RETURN_IF_ERROR(ParallelFor(tasks.size(), threads, [&](size_t t) -> Status {
    const Task& task = tasks[t];
    const auto bytes = sources[task.file].map.bytes();
    if (task.chunk < 0) {
      files[task.file].sha256 = Sha256Hex(bytes);
    } else {
      VolumeChunk& c = files[task.file].chunks[task.chunk];
      c.digest = Sha256Hex(bytes.subspan(c.offset, c.size));
    }
    return Status::Ok();
  }));
  for (size_t i = 0; i < sources.size(); ++i) {
    for (size_t k = 0; k < files[i].chunks.size(); ++k) {
      const VolumeChunk& c = files[i].chunks[k];
      if (distinct.emplace(c.digest, ChunkSource{&sources[i], {c.offset, c.size}, k}).second) {
        order.push_back(c.digest);
      }
    }
  }
  return files;
}

// Pairs each distinct chunk with the parent's chunk of the same size at the same index of the
// same file, where that chunk differs; returns the objects those parent chunks rely on.
std::vector<std::string> MatchParent(const VolumeManifest& parent,
                                     std::map<std::string, ChunkSource>& distinct) {
  std::map<std::string_view, const VolumeFile*> files;
  for (const VolumeFile& f : parent.files) files[f.path] = &f;
  std::vector<std::string> relied_on;
  for (auto& [digest, src] : distinct) {
    const auto it = files.find(src.file->path);
    if (it == files.end() || src.index >= it->second->chunks.size()) continue;
    const VolumeChunk& pc = it->second->chunks[src.index];
    if (pc.size != src.span.size || pc.digest == digest) continue;
    src.parent_chunk = &pc;
    relied_on.push_back(pc.digest);
    for (const XorLink& link : pc.xor_chain) {
      relied_on.push_back(link.base);
      relied_on.push_back(link.delta);
    }
  }
  return relied_on;
}

}  // namespace

StatusOr<PushResult> Volumes::Push(const std::string& dir, std::string_view ns,
                                   std::string_view name, const PushOptions& options) {
  RETURN_IF_ERROR(CheckPushArgs(ns, name, options));
  VolumeManifest parent;
  if (!options.parent.empty()) {
    auto m = ReadManifest(store_, std::string(ns), std::string(name), options.parent,
                          options_.max_manifest_bytes);
    if (m.status().code() == StatusCode::kNotFound) {
      return NotFound("push: parent sha256:" + options.parent + " is not a live version of " +
                      std::string(ns) + "/" + std::string(name));
    }
    if (!m.ok()) return m.status().WithPrefix("push: parent");
    parent = std::move(*m);
  }
  ASSIGN_OR_RETURN(std::vector<SourceFile> sources, ScanDir(dir));
  VolumeManifest manifest{std::string(ns), std::string(name), options.parent, {}};
  std::map<std::string, ChunkSource> distinct;
  std::vector<std::string> order;
  PushResult result;
  const unsigned threads = options.threads == 0 ? DefaultThreads() : options.threads;
  ASSIGN_OR_RETURN(manifest.files,
                   DescribeFiles(sources, options.piece_size, threads, distinct, order));
  for (const SourceFile& f : sources) result.bytes += f.map.size();
  result.files = sources.size();
  result.chunks_total = order.size();

  // The lease covers the new chunks and whatever the parent's chunks they may be stored
  // against rely on; each delta object gets its own lease before it is stored.
  std::vector<std::string> relied_on = order;
  if (!options.parent.empty() && options.xor_with_parent) {
    for (std::string& d : MatchParent(parent, distinct)) relied_on.push_back(std::move(d));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<Lease> lease,
                   Lease::Acquire(store_, manifest.ns, manifest.name,
                                  {std::move(relied_on), Now() + options_.lease_ttl_s}, Now()));
  ChunkUploader upload(*this, store_, options_.clock, options_.lease_ttl_s, manifest.ns,
                       manifest.name, options);
  std::mutex mu;
  size_t done = 0;
  // Uploads are mostly waiting on the store: more of them than CPUs pay off.
  RETURN_IF_ERROR(ParallelFor(
      order.size(), options.threads == 0 ? 8 : options.threads, [&](size_t i) -> Status {
        const ChunkSource& src = distinct.at(order[i]);
        const auto bytes = src.file->map.bytes().subspan(src.span.offset, src.span.size);
        RETURN_IF_ERROR(
            upload.Upload(order[i], bytes, src.file->path, src.parent_chunk, /*recheck=*/true));
        std::lock_guard<std::mutex> lock(mu);
        ++done;
        if (options.progress) options.progress({done, order.size(), upload.bytes_uploaded()});
        return Status::Ok();
      }));
  RETURN_IF_ERROR(FinishPush(upload, lease->expires(), manifest, options.tag, &result));
  return result;
}

Status Volumes::FinishPush(const ChunkUploader& upload, int64_t lease_expiry,
                           VolumeManifest& manifest, const std::string& tag, PushResult* result) {
  upload.AddCounts(*result);
  if (Now() >= lease_expiry) {
    return FailedPrecondition("push: the upload outlasted its lease (" +
                              std::to_string(options_.lease_ttl_s) +
                              " s); gc may have removed chunks it relied on; push again");
  }
  ApplyXorChains(upload.chains(), manifest);
  ASSIGN_OR_RETURN(std::string text, SerializeVolumeManifest(manifest));
  result->ref = VolumeRef{manifest.ns, manifest.name, ManifestDigest(text), ""};
  RETURN_IF_ERROR(SealManifest(manifest.ns, manifest.name, result->ref.digest, text));
  if (!tag.empty()) {
    // The version is sealed whatever happens to the tag: say so, so a failure is not taken
    // for "nothing published".
    RETURN_IF_ERROR(Tag(result->ref, tag)
                        .status()
                        .WithPrefix("push: sealed " + result->ref.ToString() + ", but tag '" + tag +
                                    "' was not moved"));
  }
  return Status::Ok();
}

}  // namespace deltakv::deltasync
