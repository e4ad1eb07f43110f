// Volumes::Push: scan, chunk and hash a directory, upload missing chunks, seal the manifest.
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <map>

#include "base/file_util.h"
#include "base/mapped_file.h"
#include "deltasync/volume.h"
#include "sha256.h"
#include "volume/chunk_object.h"
#include "volume/names.h"
#include "volume/records.h"

namespace deltakv::deltasync {
namespace {

namespace fs = std::filesystem;

constexpr uint64_t kMaxPieceSize = 1ull << 30;

struct SourceFile {
  std::string path;  // relative, '/'-separated
  uint32_t mode = 0644;
  MappedFile map;
};

// Where the bytes of one distinct chunk can be read.
struct ChunkSource {
  const SourceFile* file = nullptr;
  ChunkSpan span;
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

ManifestFile DescribeFile(const SourceFile& f, uint64_t piece_size,
                          std::map<std::string, ChunkSource>& distinct,
                          std::vector<std::string>& order) {
  ManifestFile out;
  out.path = f.path;
  out.mode = f.mode;
  out.size = f.map.size();
  out.sha256 = Sha256Hex(f.map.bytes());
  for (const ChunkSpan& span : ChunkFile(f.map.bytes(), piece_size)) {
    std::string digest = Sha256Hex(f.map.bytes().subspan(span.offset, span.size));
    if (distinct.emplace(digest, ChunkSource{&f, span}).second) order.push_back(digest);
    out.chunks.push_back({std::move(digest), span.offset, span.size});
  }
  return out;
}

Status CheckPushArgs(std::string_view ns, std::string_view name, const PushOptions& options) {
  RETURN_IF_ERROR(ValidateVolumeName("namespace", ns).WithPrefix("push"));
  RETURN_IF_ERROR(ValidateVolumeName("name", name).WithPrefix("push"));
  if (!options.tag.empty()) RETURN_IF_ERROR(ValidateVolumeTag(options.tag).WithPrefix("push"));
  if (!options.parent.empty() && !IsHexDigest(options.parent)) {
    return InvalidArgument("push: parent '" + options.parent + "' is not 64 lowercase hex digits");
  }
  if (options.piece_size == 0 || options.piece_size > kMaxPieceSize) {
    return InvalidArgument("push: piece size " + std::to_string(options.piece_size) +
                           " is not in 1.." + std::to_string(kMaxPieceSize));
  }
  return Status::Ok();
}

// Uploads the chunk unless the store has it; returns the stored bytes written (0 if present).
StatusOr<uint64_t> UploadChunk(VolumeStore& store, const std::string& digest,
                               const ChunkSource& src) {
  const std::string key = keys::Chunk(digest);
  ASSIGN_OR_RETURN(bool present, store.Exists(key));
  if (present) return uint64_t{0};
  const std::span<const uint8_t> bytes =
      src.file->map.bytes().subspan(src.span.offset, src.span.size);
  if (Sha256Hex(bytes) != digest) {
    return FailedPrecondition("push: file '" + src.file->path + "' changed while it was pushed");
  }
  const std::string object = EncodeChunkObject(bytes);
  RETURN_IF_ERROR(store.Put(key, Bytes(object)));
  return uint64_t{object.size()};
}

// Uploads the distinct chunks in `order`, counting them into `result`.
Status UploadAll(VolumeStore& store, const std::vector<std::string>& order,
                 const std::map<std::string, ChunkSource>& distinct, const PushOptions& options,
                 PushResult& result) {
  for (size_t i = 0; i < order.size(); ++i) {
    ASSIGN_OR_RETURN(uint64_t written, UploadChunk(store, order[i], distinct.at(order[i])));
    result.chunks_uploaded += written > 0 ? 1 : 0;
    result.bytes_uploaded += written;
    if (options.progress) options.progress({i + 1, order.size(), result.bytes_uploaded});
  }
  return Status::Ok();
}

}  // namespace

StatusOr<PushResult> Volumes::Push(const std::string& dir, std::string_view ns,
                                   std::string_view name, const PushOptions& options) {
  RETURN_IF_ERROR(CheckPushArgs(ns, name, options));
  ASSIGN_OR_RETURN(std::vector<SourceFile> sources, ScanDir(dir));
  VolumeManifest manifest{std::string(ns), std::string(name), options.parent, {}};
  std::map<std::string, ChunkSource> distinct;
  std::vector<std::string> order;
  PushResult result;
  for (const SourceFile& f : sources) {
    manifest.files.push_back(DescribeFile(f, options.piece_size, distinct, order));
    result.bytes += f.map.size();
  }
  ASSIGN_OR_RETURN(std::string text, SerializeVolumeManifest(manifest));
  result.ref = VolumeRef{manifest.ns, manifest.name, ManifestDigest(text), ""};
  result.files = sources.size();
  result.chunks_total = order.size();

  ASSIGN_OR_RETURN(std::unique_ptr<Lease> lease,
                   Lease::Acquire(store_, manifest.ns, manifest.name,
                                  {order, Now() + options_.lease_ttl_s}, Now()));
  RETURN_IF_ERROR(UploadAll(store_, order, distinct, options, result));
  if (Now() >= lease->expires()) {
    return FailedPrecondition("push: the upload outlasted its lease (" +
                              std::to_string(options_.lease_ttl_s) +
                              " s); gc may have removed chunks it relied on; push again");
  }
  RETURN_IF_ERROR(SealManifest(manifest.ns, manifest.name, result.ref.digest, text));
  if (!options.tag.empty()) RETURN_IF_ERROR(Tag(result.ref, options.tag).status());
  return result;
}

}  // namespace deltakv::deltasync
