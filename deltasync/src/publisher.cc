#include "deltasync/publisher.h"

#include <fcntl.h>
#include <unistd.h>
#include <zstd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/file_util.h"
#include "base/parallel.h"
#include "base/progress.h"
#include "deltasync/adler32.h"
#include "deltasync/checkpoint.h"
#include "deltasync/delta_manifest.h"
#include "deltasync/xor_digest.h"
#include "json_fields.h"
#include "sha256.h"
#include "xor_sequences.h"

namespace deltakv::deltasync {

double PublishSummary::density() const {
  return checkpoint_bytes == 0
             ? 0.0
             : static_cast<double>(nonzero_bytes) / static_cast<double>(checkpoint_bytes);
}

namespace {

// One piece of one tensor: the unit of parallel work.
struct PieceJob {
  size_t tensor = 0;  // index into the new checkpoint's tensor order
  uint64_t offset = 0;
  uint64_t length = 0;
};

struct PieceResult {
  uint32_t parent_adler = kAdlerInitial;
  uint32_t new_adler = kAdlerInitial;
  uint64_t nonzero = 0;
  XorDigest xor_digest;        // of the piece's XOR bytes
  std::vector<uint8_t> frame;  // empty when the piece is unchanged
};

struct TensorPair {
  const TensorInfo* info = nullptr;  // in the new checkpoint
  std::span<const uint8_t> parent;
  std::span<const uint8_t> current;
};

// "F32 [4, 4]".
std::string DTypeAndShape(DType dtype, const std::vector<uint64_t>& shape) {
  std::string s = std::string(DTypeName(dtype)) + " [";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

Status ChangedDTypeOrShape(const std::string& name, DType parent_dtype,
                           const std::vector<uint64_t>& parent_shape, DType new_dtype,
                           const std::vector<uint64_t>& new_shape) {
  return InvalidArgument("tensor '" + name + "' changed dtype or shape between parent (" +
                         DTypeAndShape(parent_dtype, parent_shape) + ") and new (" +
                         DTypeAndShape(new_dtype, new_shape) + "); a delta cannot express it");
}

// Checks that both checkpoints hold the same tensors with the same dtype and shape, and
// returns them in the new checkpoint's file/offset order.
StatusOr<std::vector<TensorPair>> PairTensors(const Checkpoint& parent, const Checkpoint& next) {
  std::vector<TensorPair> out;
  for (const SafetensorsFile& f : next.files()) {
    for (const TensorInfo& t : f.header().tensors) {
      const TensorRef* p = parent.Find(t.name);
      if (p == nullptr) {
        return InvalidArgument("tensor '" + t.name +
                               "' is in the new checkpoint but not in the parent; a delta "
                               "cannot add tensors (publish a full checkpoint)");
      }
      if (p->info->dtype != t.dtype || p->info->shape != t.shape) {
        return ChangedDTypeOrShape(t.name, p->info->dtype, p->info->shape, t.dtype, t.shape);
      }
      out.push_back({&t, parent.Bytes(*p), f.TensorBytes(t)});
    }
  }
  if (out.size() != parent.tensor_count()) {
    for (const SafetensorsFile& f : parent.files()) {
      for (const TensorInfo& t : f.header().tensors) {
        if (next.Find(t.name) == nullptr) {
          return InvalidArgument("tensor '" + t.name +
                                 "' is in the parent but not in the new checkpoint; a delta "
                                 "cannot remove tensors");
        }
      }
    }
  }
  return out;
}

class FrameCompressor {
 public:
  FrameCompressor(int level, FrameSequences sequences) : level_(level), sequences_(sequences) {}
  ~FrameCompressor() { ZSTD_freeCCtx(cctx_); }

  Status Run(const TensorPair& t, const PieceJob& job, PieceResult* r) {
    std::span<const uint8_t> a = t.parent.subspan(job.offset, job.length);
    std::span<const uint8_t> b = t.current.subspan(job.offset, job.length);
    r->parent_adler = Adler32(a);
    r->new_adler = Adler32(b);
    if (std::memcmp(a.data(), b.data(), a.size()) == 0) return Status::Ok();
    xor_.resize(job.length);
    uint64_t nonzero = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      uint8_t x = a[i] ^ b[i];
      xor_[i] = x;
      nonzero += (x != 0);
    }
    r->nonzero = nonzero;
    r->xor_digest = ComputeXorDigest(xor_);
    if (cctx_ == nullptr) {
      cctx_ = ZSTD_createCCtx();
      if (cctx_ == nullptr) return Internal("ZSTD_createCCtx failed");
    }
    ZSTD_CCtx_reset(cctx_, ZSTD_reset_session_and_parameters);
    ZSTD_CCtx_setParameter(cctx_, ZSTD_c_compressionLevel, level_);
    ZSTD_CCtx_setParameter(cctx_, ZSTD_c_checksumFlag, 1);
    ZSTD_CCtx_setParameter(cctx_, ZSTD_c_contentSizeFlag, 1);
    if (sequences_ == FrameSequences::kXorRuns) RETURN_IF_ERROR(UseXorRunSequences(cctx_));
    r->frame.resize(ZSTD_compressBound(xor_.size()));
    size_t n = ZSTD_compress2(cctx_, r->frame.data(), r->frame.size(), xor_.data(), xor_.size());
    if (ZSTD_isError(n)) {
      return Internal(std::string("zstd compression failed: ") + ZSTD_getErrorName(n));
    }
    r->frame.resize(n);
    return Status::Ok();
  }

 private:
  int level_;
  FrameSequences sequences_;
  ZSTD_CCtx* cctx_ = nullptr;
  std::vector<uint8_t> xor_;
};

// Appends frames to numbered shard objects, rotating at a size threshold.
class ShardWriter {
 public:
  ShardWriter(std::string dir, uint64_t shard_bytes) : dir_(std::move(dir)), limit_(shard_bytes) {}
  ~ShardWriter() {
    if (fd_ >= 0) close(fd_);
  }

  // Appends one frame; returns where it went.
  Status Append(std::span<const uint8_t> frame, DeltaFrame* where) {
    if (fd_ < 0 || (size_ > 0 && size_ + frame.size() > limit_)) RETURN_IF_ERROR(Rotate());
    const uint8_t* p = frame.data();
    size_t left = frame.size();
    while (left > 0) {
      ssize_t w = write(fd_, p, left);
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) return IoError(ErrnoMessage("write", path_, errno));
      p += w;
      left -= static_cast<size_t>(w);
    }
    sha_->Update(frame);
    where->object = objects_.back().name;
    where->object_offset = size_;
    where->compressed_length = frame.size();
    size_ += frame.size();
    objects_.back().size = size_;
    return Status::Ok();
  }

  StatusOr<std::vector<DeltaObject>> Finish() {
    RETURN_IF_ERROR(CloseCurrent());
    return objects_;
  }

 private:
  Status CloseCurrent() {
    if (fd_ < 0) return Status::Ok();
    if (fsync(fd_) != 0) return IoError(ErrnoMessage("fsync", path_, errno));
    if (close(fd_) != 0) return IoError(ErrnoMessage("close", path_, errno));
    fd_ = -1;
    objects_.back().sha256 = sha_->HexDigest();
    return Status::Ok();
  }

  Status Rotate() {
    RETURN_IF_ERROR(CloseCurrent());
    char name[32];
    std::snprintf(name, sizeof(name), "shard-%05zu.zst", objects_.size());
    path_ = dir_ + "/" + name;
    fd_ = open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd_ < 0) return IoError(ErrnoMessage("create", path_, errno));
    objects_.push_back({name, 0, ""});
    sha_ = std::make_unique<Sha256>();
    size_ = 0;
    return Status::Ok();
  }

  std::string dir_;
  uint64_t limit_;
  int fd_ = -1;
  std::string path_;
  uint64_t size_ = 0;
  std::unique_ptr<Sha256> sha_;
  std::vector<DeltaObject> objects_;
};

}  // namespace

namespace {

Status CheckOptions(const PublishOptions& opt) {
  if (opt.frame_bytes == 0) return InvalidArgument("frame size must be > 0");
  if (opt.level < ZSTD_minCLevel() || opt.level > ZSTD_maxCLevel()) {
    return InvalidArgument("zstd level " + std::to_string(opt.level) + " is outside [" +
                           std::to_string(ZSTD_minCLevel()) + ", " +
                           std::to_string(ZSTD_maxCLevel()) + "]");
  }
  return Status::Ok();
}

// Compresses every changed piece of `tensors` into shards under `out_dir` and writes the
// manifest; `next` (may be null) gives the checkpoint section. `parent` and `next` (may be
// null) are the checkpoints the tensors are read from: a file of theirs that changed while it
// was read fails the publish with their error, before any other error it caused.
StatusOr<PublishSummary> PublishPairs(const std::vector<TensorPair>& tensors, PublishSummary sum,
                                      const PublishOptions& opt, const Checkpoint* parent,
                                      const Checkpoint* next,
                                      std::chrono::steady_clock::time_point start) {
  auto interrupted = [&]() -> Status {
    return opt.cancel != nullptr && opt.cancel->load(std::memory_order_relaxed)
               ? FailedPrecondition("interrupted; nothing was written to '" + opt.out_dir + "'")
               : Status::Ok();
  };
  auto inputs_unchanged = [&]() -> Status {
    if (parent != nullptr) RETURN_IF_ERROR(parent->CheckUnchanged());
    if (next != nullptr) RETURN_IF_ERROR(next->CheckUnchanged());
    return Status::Ok();
  };
  ASSIGN_OR_RETURN(StagingDir staging, StagingDir::Create(opt.out_dir));
  sum.tensors = tensors.size();
  std::vector<PieceJob> jobs;
  for (size_t i = 0; i < tensors.size(); ++i) {
    uint64_t len = tensors[i].info->size();
    sum.checkpoint_bytes += len;
    if (len == 0) jobs.push_back({i, 0, 0});
    for (uint64_t off = 0; off < len; off += opt.frame_bytes) {
      jobs.push_back({i, off, std::min(opt.frame_bytes, len - off)});
    }
  }

  // Each worker costs a compressor and a window slot up front: never more than the pieces.
  const unsigned threads = static_cast<unsigned>(std::max<size_t>(
      1, std::min<size_t>(opt.threads == 0 ? DefaultThreads() : opt.threads, jobs.size())));
  std::vector<std::unique_ptr<FrameCompressor>> compressors;
  for (unsigned t = 0; t < threads; ++t)
    compressors.push_back(std::make_unique<FrameCompressor>(opt.level, opt.sequences));

  DeltaManifest manifest;
  manifest.version = sum.version;
  manifest.parent_version = sum.parent_version;
  std::vector<DeltaTensor> per_tensor(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    per_tensor[i].name = tensors[i].info->name;
    per_tensor[i].length = tensors[i].info->size();
  }
  ShardWriter shards(staging.path(), opt.shard_bytes);
  Progress prog("publish", sum.checkpoint_bytes, opt.progress);

  // Jobs run in windows so compressed frames wait in memory only briefly, and are written in
  // job order so the output does not depend on scheduling.
  const size_t window = static_cast<size_t>(threads) * 2;
  std::vector<PieceResult> results;
  for (size_t base = 0; base < jobs.size(); base += window) {
    size_t n = std::min(window, jobs.size() - base);
    results.assign(n, PieceResult{});
    Status compressed = ParallelForWorkers(n, threads, [&](size_t k, unsigned worker) {
      RETURN_IF_ERROR(interrupted());
      const PieceJob& job = jobs[base + k];
      Status s = compressors[worker]->Run(tensors[job.tensor], job, &results[k]);
      prog.Add(job.length);
      return s;
    });
    if (!compressed.ok()) {
      RETURN_IF_ERROR(interrupted());
      RETURN_IF_ERROR(inputs_unchanged());
      return compressed;
    }
    for (size_t k = 0; k < n; ++k) {
      const PieceJob& job = jobs[base + k];
      PieceResult& r = results[k];
      DeltaTensor& dt = per_tensor[job.tensor];
      if (job.offset == 0) {
        dt.parent_adler32 = r.parent_adler;
        dt.adler32 = r.new_adler;
      } else {
        dt.parent_adler32 = Adler32Combine(dt.parent_adler32, r.parent_adler, job.length);
        dt.adler32 = Adler32Combine(dt.adler32, r.new_adler, job.length);
      }
      sum.nonzero_bytes += r.nonzero;
      if (r.frame.empty()) continue;
      DeltaFrame f;
      f.offset = job.offset;
      f.length = job.length;
      f.xor_digest = r.xor_digest;
      RETURN_IF_ERROR(shards.Append(r.frame, &f));
      dt.frames.push_back(std::move(f));
      sum.dense_bytes += job.length;
      ++sum.frames;
    }
  }
  prog.Finish();
  ASSIGN_OR_RETURN(manifest.objects, shards.Finish());
  for (const DeltaObject& o : manifest.objects) sum.compressed_bytes += o.size;
  sum.objects = manifest.objects.size();

  for (size_t i = 0; i < tensors.size(); ++i) {
    if (!per_tensor[i].frames.empty()) {
      manifest.tensors.push_back(per_tensor[i]);
      ++sum.tensors_changed;
    }
  }
  if (next != nullptr && opt.include_checkpoint) {
    size_t k = 0;
    for (size_t fi = 0; fi < next->files().size(); ++fi) {
      const SafetensorsFile& f = next->files()[fi];
      manifest.checkpoint_files.push_back({next->file_names()[fi], f.header().raw});
      for (const TensorInfo& t : f.header().tensors) {
        ManifestTensor mt{t.name,
                          t.dtype,
                          t.shape,
                          next->file_names()[fi],
                          f.header().data_offset() + t.begin,
                          f.header().data_offset() + t.end,
                          per_tensor[k].adler32};
        manifest.checkpoint_tensors.push_back(std::move(mt));
        ++k;
      }
    }
  }
  RETURN_IF_ERROR(interrupted());
  RETURN_IF_ERROR(inputs_unchanged());
  RETURN_IF_ERROR(
      WriteFileAtomic(staging.path() + "/" + kManifestFileName, DeltaManifestToJson(manifest)));
  RETURN_IF_ERROR(staging.Commit());
  sum.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return sum;
}

}  // namespace

StatusOr<PublishSummary> PublishDelta(const PublishOptions& opt) {
  const auto start = std::chrono::steady_clock::now();
  RETURN_IF_ERROR(CheckOptions(opt));
  // Trainers rewrite checkpoints in place: a file that shrinks while it is read must fail the
  // publish, not kill it with SIGBUS.
  ASSIGN_OR_RETURN(Checkpoint parent,
                   Checkpoint::Open(opt.parent_dir, MappedFile::Shrink::kReadZeros));
  ASSIGN_OR_RETURN(Checkpoint next, Checkpoint::Open(opt.new_dir, MappedFile::Shrink::kReadZeros));
  ASSIGN_OR_RETURN(std::vector<TensorPair> tensors, PairTensors(parent, next));
  PublishSummary sum;
  sum.parent_version =
      opt.parent_version.empty() ? CheckpointVersionId(opt.parent_dir) : opt.parent_version;
  sum.version = opt.version.empty() ? CheckpointVersionId(opt.new_dir) : opt.version;
  RETURN_IF_ERROR(json_fields::CheckUtf8("parent version", sum.parent_version));
  RETURN_IF_ERROR(json_fields::CheckUtf8("version", sum.version));
  for (const std::string& name : next.file_names()) {
    RETURN_IF_ERROR(json_fields::CheckUtf8("file name", name));
  }
  for (const TensorPair& t : tensors) {
    RETURN_IF_ERROR(json_fields::CheckUtf8("tensor name", t.info->name));
  }
  return PublishPairs(tensors, std::move(sum), opt, &parent, &next, start);
}

StatusOr<PublishSummary> PublishDeltaFromTensors(std::span<const TensorBytes> parent,
                                                 std::span<const TensorBytes> next,
                                                 const PublishOptions& opt) {
  const auto start = std::chrono::steady_clock::now();
  RETURN_IF_ERROR(CheckOptions(opt));
  if (opt.parent_version.empty() || opt.version.empty()) {
    return InvalidArgument("parent_version and version are required for in-memory tensors");
  }
  if (opt.parent_version == opt.version) {
    return InvalidArgument("parent_version and version are both '" + opt.version + "'");
  }
  RETURN_IF_ERROR(json_fields::CheckUtf8("parent version", opt.parent_version));
  RETURN_IF_ERROR(json_fields::CheckUtf8("version", opt.version));
  // The new set's infos, in its order; the parent's by name.
  std::vector<TensorInfo> infos(next.size());
  std::unordered_map<std::string_view, const TensorBytes*> by_name;
  auto check = [](const TensorBytes& t, const char* side) -> Status {
    if (t.name.empty()) return InvalidArgument(std::string(side) + ": a tensor has no name");
    RETURN_IF_ERROR(json_fields::CheckUtf8(std::string(side) + " tensor name", t.name));
    uint64_t elements = 1;
    for (uint64_t d : t.shape) {
      if (d != 0 && elements > UINT64_MAX / d) {
        return InvalidArgument(std::string(side) + " tensor '" + t.name + "': shape overflows");
      }
      elements *= d;
    }
    const uint64_t want = elements * DTypeSize(t.dtype);
    if (want / DTypeSize(t.dtype) != elements || t.bytes.size() != want) {
      return InvalidArgument(std::string(side) + " tensor '" + t.name + "' has " +
                             std::to_string(t.bytes.size()) + " bytes; its dtype " +
                             std::string(DTypeName(t.dtype)) + " and shape need " +
                             std::to_string(want));
    }
    return Status::Ok();
  };
  for (const TensorBytes& t : parent) {
    RETURN_IF_ERROR(check(t, "parent"));
    if (!by_name.emplace(t.name, &t).second) {
      return InvalidArgument("parent: tensor '" + t.name + "' appears twice");
    }
  }
  if (parent.size() != next.size()) {
    return InvalidArgument("the parent has " + std::to_string(parent.size()) +
                           " tensors and the new set " + std::to_string(next.size()) +
                           "; a delta cannot add or remove tensors");
  }
  std::vector<TensorPair> tensors(next.size());
  std::unordered_map<std::string_view, bool> seen;
  for (size_t i = 0; i < next.size(); ++i) {
    const TensorBytes& t = next[i];
    RETURN_IF_ERROR(check(t, "new"));
    if (!seen.emplace(t.name, true).second) {
      return InvalidArgument("new: tensor '" + t.name + "' appears twice");
    }
    auto it = by_name.find(t.name);
    if (it == by_name.end()) {
      return InvalidArgument("tensor '" + t.name +
                             "' is not in the parent; a delta cannot add tensors");
    }
    const TensorBytes& p = *it->second;
    if (p.dtype != t.dtype || p.shape != t.shape) {
      return ChangedDTypeOrShape(t.name, p.dtype, p.shape, t.dtype, t.shape);
    }
    infos[i] = TensorInfo{t.name, t.dtype, t.shape, 0, t.bytes.size()};
    tensors[i] = TensorPair{&infos[i], p.bytes, t.bytes};
  }
  PublishSummary sum;
  sum.parent_version = opt.parent_version;
  sum.version = opt.version;
  return PublishPairs(tensors, std::move(sum), opt, nullptr, nullptr, start);
}

}  // namespace deltakv::deltasync
