// ChunkUploader: the chunk store step shared by Volumes::Push and Volumes::PushFrom.
#include "volume/chunk_uploader.h"

#include <filesystem>

#include "sha256.h"
#include "volume/chunk_object.h"
#include "volume/names.h"

namespace deltakv::deltasync {
namespace {

constexpr uint64_t kMaxPieceSize = 1ull << 30;
constexpr unsigned kMaxPushThreads = 256;

}  // namespace

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

void ApplyXorChains(const std::map<std::string, std::vector<XorLink>>& chains, VolumeManifest& m) {
  for (VolumeFile& f : m.files) {
    for (VolumeChunk& c : f.chunks) {
      const auto it = chains.find(c.digest);
      if (it != chains.end()) c.xor_chain = it->second;
    }
  }
}

ChunkUploader::ChunkUploader(Volumes& volumes, VolumeStore& store, std::function<int64_t()> now,
                             int64_t lease_ttl_s, std::string ns, std::string name,
                             const PushOptions& options)
    : volumes_(volumes),
      store_(store),
      now_(std::move(now)),
      lease_ttl_s_(lease_ttl_s),
      ns_(std::move(ns)),
      name_(std::move(name)),
      options_(options) {}

Status ChunkUploader::Upload(const std::string& digest, std::span<const uint8_t> bytes,
                             const std::string& path, const VolumeChunk* pc, bool recheck) {
  auto check_unchanged = [&]() -> Status {
    if (recheck && Sha256Hex(bytes) != digest) {
      return FailedPrecondition("push: file '" + path + "' changed while it was pushed");
    }
    return Status::Ok();
  };
  ASSIGN_OR_RETURN(bool present, store_.Exists(keys::Chunk(digest)));
  if (present) return Status::Ok();
  if (pc != nullptr && options_.xor_with_parent && pc->xor_chain.size() < options_.max_xor_chain) {
    ASSIGN_OR_RETURN(std::string base, ParentBytes(*pc, path));
    RETURN_IF_ERROR(check_unchanged());
    std::string object = EncodeXorChunkObject(bytes, Bytes(base));
    if (object.size() * 2 <= bytes.size()) return UploadDelta(digest, *pc, object);
  } else {
    RETURN_IF_ERROR(check_unchanged());
  }
  const std::string object = EncodeChunkObject(bytes);
  RETURN_IF_ERROR(store_.Put(keys::Chunk(digest), Bytes(object)));
  std::lock_guard<std::mutex> lock(mu_);
  ++counts_.chunks_uploaded;
  counts_.bytes_uploaded += object.size();
  return Status::Ok();
}

// A delta object is leased before it is stored, like every object a push relies on.
Status ChunkUploader::UploadDelta(const std::string& digest, const VolumeChunk& pc,
                                  const std::string& object) {
  const std::string hex = Sha256Hex(Bytes(object));
  const int64_t now = now_();
  ASSIGN_OR_RETURN(std::unique_ptr<Lease> lease,
                   Lease::Acquire(store_, ns_, name_, {{hex}, now + lease_ttl_s_}, now));
  {
    std::lock_guard<std::mutex> lock(mu_);
    leases_.push_back(std::move(lease));
  }
  ASSIGN_OR_RETURN(bool present, store_.Exists(keys::XorChunk(hex)));
  if (!present) RETURN_IF_ERROR(store_.Put(keys::XorChunk(hex), Bytes(object)));
  std::vector<XorLink> chain = {{pc.digest, hex}};
  chain.insert(chain.end(), pc.xor_chain.begin(), pc.xor_chain.end());
  std::lock_guard<std::mutex> lock(mu_);
  if (!present) {
    ++counts_.chunks_uploaded;
    counts_.bytes_uploaded += object.size();
    counts_.bytes_xor += object.size();
  }
  chains_[digest] = std::move(chain);
  ++counts_.chunks_xor;
  return Status::Ok();
}

// The parent chunk's bytes: from options.parent_dir when they verify there, else the store.
StatusOr<std::string> ChunkUploader::ParentBytes(const VolumeChunk& pc, const std::string& path) {
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
const MappedFile* ChunkUploader::ParentFile(const std::string& path) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = parent_files_.find(path);
  if (it == parent_files_.end()) {
    auto map =
        MappedFile::OpenReadOnly((std::filesystem::path(options_.parent_dir) / path).string());
    it = parent_files_
             .emplace(path, map.ok() ? std::make_unique<MappedFile>(std::move(*map)) : nullptr)
             .first;
  }
  return it->second.get();
}

uint64_t ChunkUploader::bytes_uploaded() const {
  std::lock_guard<std::mutex> lock(mu_);
  return counts_.bytes_uploaded;
}

void ChunkUploader::AddCounts(PushResult& result) const {
  std::lock_guard<std::mutex> lock(mu_);
  result.chunks_uploaded += counts_.chunks_uploaded;
  result.bytes_uploaded += counts_.bytes_uploaded;
  result.chunks_xor += counts_.chunks_xor;
  result.bytes_xor += counts_.bytes_xor;
}

}  // namespace deltakv::deltasync
