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
#include "volume/chunk_object.h"
#include "volume/names.h"
#include "volume/records.h"

namespace deltakv::deltasync {
namespace {

namespace fs = std::filesystem;

constexpr uint64_t kMaxPieceSize = 1ull << 30;
constexpr unsigned kMaxPushThreads = 256;

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
    const fs::file_type type = it->symlink_status(ec).type();
    if (ec || type == fs::file_type::directory) continue;
    if (type != fs::file_type::regular) {
      return InvalidArgument("push: '" + it->path().string() + "' is " + Describe(type) +
                             "; a volume holds regular files only");
    }
    const std::string rel = it->path().lexically_relative(dir).generic_string();
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

Status CheckPushArgs(std::string_view ns, std::string_view name, const PushOptions& options) {
  RETURN_IF_ERROR(ValidateVolumeName("namespace", ns).WithPrefix("push"));
  RETURN_IF_ERROR(ValidateVolumeName("name", name).WithPrefix("push"));
  if (!options.tag.empty()) RETURN_IF_ERROR(ValidateVolumeTag(options.tag).WithPrefix("push"));
  if (!options.parent.empty() && !IsHexDigest(options.parent)) {
    return InvalidArgument("push: parent '" + options.parent + "' is not 64 lowercase hex digits");
  }
  if (options.threads > kMaxPushThreads) {
    return InvalidArgument("push: " + std::to_string(options.threads) + " threads is above " +
                           std::to_string(kMaxPushThreads));
  }
  if (options.max_xor_chain == 0 || options.max_xor_chain > kMaxXorChain) {
    return InvalidArgument("push: max XOR chain " + std::to_string(options.max_xor_chain) +
                           " is not in 1.." + std::to_string(kMaxXorChain));
  }
  if (options.piece_size == 0 || options.piece_size > kMaxPieceSize) {
    return InvalidArgument("push: piece size " + std::to_string(options.piece_size) +
                           " is not in 1.." + std::to_string(kMaxPieceSize));
  }
  return Status::Ok();
}

Status CheckUnchanged(std::span<const uint8_t> bytes, const std::string& digest,
                      const ChunkSource& src) {
  if (Sha256Hex(bytes) != digest) {
    return FailedPrecondition("push: file '" + src.file->path + "' changed while it was pushed");
  }
  return Status::Ok();
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

// The upload of one push: distinct chunks in order, whole or as deltas against the parent.
class PushUpload {
 public:
  PushUpload(Volumes& volumes, VolumeStore& store, std::function<int64_t()> now,
             int64_t lease_ttl_s, const std::string& ns, const std::string& name,
             const PushOptions& options, PushResult& result)
      : volumes_(volumes),
        store_(store),
        now_(std::move(now)),
        lease_ttl_s_(lease_ttl_s),
        ns_(ns),
        name_(name),
        options_(options),
        result_(result) {}

  // Uploads what the store lacks on `threads` threads; records the chain of every chunk
  // stored as a delta.
  Status Run(const std::vector<std::string>& order,
             const std::map<std::string, ChunkSource>& distinct, unsigned threads) {
    size_t done = 0;
    return ParallelFor(order.size(), threads, [&](size_t i) -> Status {
      RETURN_IF_ERROR(UploadOne(order[i], distinct.at(order[i])));
      std::lock_guard<std::mutex> lock(mu_);
      ++done;
      if (options_.progress) options_.progress({done, order.size(), result_.bytes_uploaded});
      return Status::Ok();
    });
  }
  const std::map<std::string, std::vector<XorLink>>& chains() const { return chains_; }

 private:
  Status UploadOne(const std::string& digest, const ChunkSource& src) {
    VolumeStore& store = store_;
    ASSIGN_OR_RETURN(bool present, store.Exists(keys::Chunk(digest)));
    if (present) return Status::Ok();
    const std::span<const uint8_t> bytes =
        src.file->map.bytes().subspan(src.span.offset, src.span.size);
    const VolumeChunk* pc = src.parent_chunk;
    if (pc != nullptr && options_.xor_with_parent &&
        pc->xor_chain.size() < options_.max_xor_chain) {
      ASSIGN_OR_RETURN(std::string base, ParentBytes(*pc, src.file->path));
      RETURN_IF_ERROR(CheckUnchanged(bytes, digest, src));
      std::string object = EncodeXorChunkObject(bytes, Bytes(base));
      if (object.size() * 2 <= bytes.size()) return UploadDelta(digest, *pc, object);
    } else {
      RETURN_IF_ERROR(CheckUnchanged(bytes, digest, src));
    }
    const std::string object = EncodeChunkObject(bytes);
    RETURN_IF_ERROR(store.Put(keys::Chunk(digest), Bytes(object)));
    std::lock_guard<std::mutex> lock(mu_);
    ++result_.chunks_uploaded;
    result_.bytes_uploaded += object.size();
    return Status::Ok();
  }

  // A delta object is leased before it is stored, like every object a push relies on.
  Status UploadDelta(const std::string& digest, const VolumeChunk& pc,
                     const std::string& object) {
    VolumeStore& store = store_;
    const std::string hex = Sha256Hex(Bytes(object));
    const int64_t now = now_();
    ASSIGN_OR_RETURN(std::unique_ptr<Lease> lease,
                     Lease::Acquire(store, ns_, name_, {{hex}, now + lease_ttl_s_}, now));
    {
      std::lock_guard<std::mutex> lock(mu_);
      leases_.push_back(std::move(lease));
    }
    ASSIGN_OR_RETURN(bool present, store.Exists(keys::XorChunk(hex)));
    if (!present) RETURN_IF_ERROR(store.Put(keys::XorChunk(hex), Bytes(object)));
    std::vector<XorLink> chain = {{pc.digest, hex}};
    chain.insert(chain.end(), pc.xor_chain.begin(), pc.xor_chain.end());
    std::lock_guard<std::mutex> lock(mu_);
    if (!present) {
      ++result_.chunks_uploaded;
      result_.bytes_uploaded += object.size();
      result_.bytes_xor += object.size();
    }
    chains_[digest] = std::move(chain);
    ++result_.chunks_xor;
    return Status::Ok();
  }

  // The parent chunk's bytes: from options.parent_dir when they verify there, else the store.
  StatusOr<std::string> ParentBytes(const VolumeChunk& pc, const std::string& path) {
    if (!options_.parent_dir.empty()) {
      const MappedFile* file = ParentFile(path);
      if (file != nullptr && file->size() >= pc.offset + pc.size) {
        const auto bytes = file->bytes().subspan(pc.offset, pc.size);
        if (Sha256Hex(bytes) == pc.digest) {
          return std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size());
        }
      }
    }
    return volumes_.ReadChunk(pc);
  }

  // The parent's file at `path` under options.parent_dir, mapped once; nullptr if absent.
  const MappedFile* ParentFile(const std::string& path) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = parent_files_.find(path);
    if (it == parent_files_.end()) {
      auto map = MappedFile::OpenReadOnly((fs::path(options_.parent_dir) / path).string());
      it = parent_files_
               .emplace(path, map.ok() ? std::make_unique<MappedFile>(std::move(*map)) : nullptr)
               .first;
    }
    return it->second.get();
  }

  Volumes& volumes_;
  VolumeStore& store_;
  std::function<int64_t()> now_;
  int64_t lease_ttl_s_;
  const std::string& ns_;
  const std::string& name_;
  const PushOptions& options_;
  PushResult& result_;
  std::map<std::string, std::vector<XorLink>> chains_;
  std::mutex mu_;  // guards everything below and the counters of result_
  std::map<std::string, std::unique_ptr<MappedFile>> parent_files_;
  std::vector<std::unique_ptr<Lease>> leases_;
};

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
  PushUpload upload(*this, store_, options_.clock, options_.lease_ttl_s, manifest.ns,
                    manifest.name, options, result);
  // Uploads are mostly waiting on the store: more of them than CPUs pay off.
  RETURN_IF_ERROR(upload.Run(order, distinct, options.threads == 0 ? 8 : options.threads));
  if (Now() >= lease->expires()) {
    return FailedPrecondition("push: the upload outlasted its lease (" +
                              std::to_string(options_.lease_ttl_s) +
                              " s); gc may have removed chunks it relied on; push again");
  }
  for (VolumeFile& f : manifest.files) {
    for (VolumeChunk& c : f.chunks) {
      const auto it = upload.chains().find(c.digest);
      if (it != upload.chains().end()) c.xor_chain = it->second;
    }
  }
  ASSIGN_OR_RETURN(std::string text, SerializeVolumeManifest(manifest));
  result.ref = VolumeRef{manifest.ns, manifest.name, ManifestDigest(text), ""};
  RETURN_IF_ERROR(SealManifest(manifest.ns, manifest.name, result.ref.digest, text));
  if (!options.tag.empty()) RETURN_IF_ERROR(Tag(result.ref, options.tag).status());
  return result;
}

}  // namespace deltakv::deltasync
