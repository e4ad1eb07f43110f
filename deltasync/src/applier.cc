#include "deltasync/applier.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "base/file_util.h"
#include "base/mapped_file.h"
#include "base/parallel.h"
#include "base/progress.h"
#include "deltasync/adler32.h"
#include "deltasync/checkpoint.h"
#include "deltasync/delta_manifest.h"
#include "output_layout.h"
#include "sha256.h"
#include "xor_apply_sink.h"

namespace deltakv::deltasync {

namespace {

using Clock = std::chrono::steady_clock;

std::string Hex(uint32_t v) { return "0x" + FormatChecksum(v); }

using ObjectMaps = std::map<std::string, MappedFile, std::less<>>;

// Ok while every shard object read so far is as it was mapped.
Status ObjectsUnchanged(const ObjectMaps& objects) {
  for (const auto& [name, map] : objects) RETURN_IF_ERROR(map.CheckUnchanged());
  return Status::Ok();
}

// Maps every shard object and checks its size (and sha256 when recorded).
StatusOr<ObjectMaps> OpenObjects(const DeltaManifest& m, const std::string& dir, bool verify,
                                 unsigned threads, const std::function<Status()>& interrupted) {
  ObjectMaps out;
  for (const DeltaObject& o : m.objects) {
    auto f = MappedFile::OpenReadOnly(dir + "/" + o.name, MappedFile::Shrink::kReadZeros);
    if (!f.ok()) return f.status().WithPrefix("delta object '" + o.name + "'");
    if (f->size() != o.size) {
      return DataLoss("delta object '" + o.name + "' is " + std::to_string(f->size()) +
                      " bytes but the manifest says " + std::to_string(o.size) +
                      (f->size() < o.size ? " (truncated)" : ""));
    }
    out.emplace(o.name, std::move(f).value());
  }
  if (!verify) return out;
  Status verified = ParallelFor(m.objects.size(), threads, [&](size_t i) -> Status {
    RETURN_IF_ERROR(interrupted());
    const DeltaObject& o = m.objects[i];
    if (o.sha256.empty()) return Status::Ok();
    std::string actual = Sha256Hex(out.find(o.name)->second.bytes());
    if (actual != o.sha256) {
      return DataLoss("delta object '" + o.name + "': sha256 mismatch: expected " + o.sha256 +
                      ", actual " + actual);
    }
    return Status::Ok();
  });
  RETURN_IF_ERROR(interrupted());
  RETURN_IF_ERROR(ObjectsUnchanged(out));
  RETURN_IF_ERROR(verified);
  return out;
}

struct TensorJob {
  size_t file = 0;
  const TensorInfo* info = nullptr;
  std::span<const uint8_t> parent;
  const DeltaTensor* delta = nullptr;        // nullptr if unchanged
  const ManifestTensor* expected = nullptr;  // from the checkpoint section, if any
  uint32_t new_adler = 0;
};

class TensorApplier {
 public:
  // `interrupted` returns an error once the apply is to stop.
  TensorApplier(const ObjectMaps& objects, std::unique_ptr<XorDecoder> decoder,
                uint32_t max_window_log, const std::function<Status()>& interrupted)
      : objects_(objects),
        decoder_(std::move(decoder)),
        max_window_log_(max_window_log),
        interrupted_(interrupted) {}

  // Copies, verifies and patches one tensor into `dst`.
  Status Run(TensorJob& job, std::span<uint8_t> dst, const std::string& parent_version,
             Progress& prog, uint64_t* nonzero) {
    constexpr size_t kChunk = 4u << 20;
    uint32_t parent_adler = kAdlerInitial;
    for (size_t off = 0; off < job.parent.size(); off += kChunk) {
      RETURN_IF_ERROR(interrupted_());
      size_t n = std::min(kChunk, job.parent.size() - off);
      std::memcpy(dst.data() + off, job.parent.data() + off, n);
      parent_adler = Adler32(job.parent.subspan(off, n), parent_adler);
      prog.Add(n);
    }
    if (job.delta == nullptr) {
      job.new_adler = parent_adler;
      if (job.expected != nullptr && job.expected->adler32 != parent_adler) {
        return DataLoss("not changed by the delta, but the parent's checksum " + Hex(parent_adler) +
                        " differs from the new checkpoint's " + Hex(job.expected->adler32) +
                        " (is the parent checkpoint version '" + parent_version + "'?)");
      }
      return Status::Ok();
    }
    const DeltaTensor& dt = *job.delta;
    if (parent_adler != dt.parent_adler32) {
      return DataLoss("parent checksum mismatch: expected " + Hex(dt.parent_adler32) + ", actual " +
                      Hex(parent_adler) + " (is the parent checkpoint version '" + parent_version +
                      "'?)");
    }
    AdlerDelta delta;
    for (size_t k = 0; k < dt.frames.size(); ++k) {
      RETURN_IF_ERROR(interrupted_());
      const DeltaFrame& f = dt.frames[k];
      std::span<const uint8_t> obj = objects_.find(f.object)->second.bytes();
      std::span<const uint8_t> input = obj.subspan(f.object_offset, f.compressed_length);
      XorApplySink sink(dst.subspan(f.offset, f.length), f.offset, &delta);
      std::string where = "frame " + std::to_string(k) + " (object '" + f.object + "' at " +
                          std::to_string(f.object_offset) + ")";
      ASSIGN_OR_RETURN(DecodeResult r, DecodeDeltaFrame(*decoder_, input, f.length,
                                                        max_window_log_, sink, where,
                                                        f.xor_digest));
      *nonzero += r.nonzero_bytes;
    }
    uint32_t derived = delta.Apply(parent_adler, dt.length);
    if (dt.length < kFullVerifyBelowBytes) {
      uint32_t full = Adler32(dst.first(dt.length));
      if (full != derived) {
        return Internal("incremental checksum " + Hex(derived) + " disagrees with full " +
                        Hex(full));
      }
    }
    if (derived != dt.adler32) {
      return DataLoss("new checksum mismatch after applying the delta: expected " +
                      Hex(dt.adler32) + ", actual " + Hex(derived));
    }
    job.new_adler = derived;
    return Status::Ok();
  }

 private:
  const ObjectMaps& objects_;
  std::unique_ptr<XorDecoder> decoder_;
  uint32_t max_window_log_;
  const std::function<Status()>& interrupted_;
};

// One file of the output, created when the first of its tensors starts and committed when the
// last one is done: only the files being written are open, not every file of the checkpoint
// (a checkpoint of thousands of files would need as many descriptors).
class OutputSlot {
 public:
  OutputSlot(std::string path, const OutputFile& layout)
      : path_(std::move(path)), layout_(&layout), pending_(layout.tensors.size()) {}

  // The bytes of `t`, a tensor of this file, creating the file if it does not exist yet.
  StatusOr<std::span<uint8_t>> Open(const TensorInfo& t) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!file_.has_value()) {
      ASSIGN_OR_RETURN(MappedOutputFile f, MappedOutputFile::Create(path_, layout_->file_size));
      WriteSafetensorsPrefix(layout_->header.raw, f.bytes());
      file_.emplace(std::move(f));
    }
    return file_->bytes().subspan(layout_->header.data_offset() + t.begin, t.size());
  }

  // One of its tensors is written; after the last one the file is committed and closed.
  Status Done() {
    std::lock_guard<std::mutex> lock(mu_);
    if (--pending_ > 0) return Status::Ok();
    Status s = file_->Commit();
    file_.reset();
    return s;
  }

  // Writes a file that holds no tensors (its header alone).
  Status WriteEmpty() {
    ASSIGN_OR_RETURN(MappedOutputFile f, MappedOutputFile::Create(path_, layout_->file_size));
    WriteSafetensorsPrefix(layout_->header.raw, f.bytes());
    return f.Commit();
  }

 private:
  const std::string path_;
  const OutputFile* layout_;
  std::mutex mu_;
  std::optional<MappedOutputFile> file_;  // GUARDED_BY(mu_)
  size_t pending_;                        // GUARDED_BY(mu_): tensors not yet written
};

}  // namespace

StatusOr<ApplySummary> ApplyDelta(const ApplyOptions& opt) {
  auto start = Clock::now();
  const std::function<Status()> interrupted = [&opt]() -> Status {
    return opt.cancel != nullptr && opt.cancel->load(std::memory_order_relaxed)
               ? FailedPrecondition("interrupted; nothing was written to '" + opt.out_dir + "'")
               : Status::Ok();
  };
  const std::string manifest_path = opt.delta_dir + "/" + kManifestFileName;
  ASSIGN_OR_RETURN(std::string text, ReadFileToString(manifest_path, 1ull << 30));
  ASSIGN_OR_RETURN(DeltaManifest m, ParseDeltaManifest(text));
  unsigned threads = opt.threads == 0 ? DefaultThreads() : opt.threads;
  ASSIGN_OR_RETURN(auto objects,
                   OpenObjects(m, opt.delta_dir, opt.verify_objects, threads, interrupted));
  // A parent file or shard object that shrinks while it is read fails the apply (IoError), it
  // does not raise SIGBUS.
  ASSIGN_OR_RETURN(Checkpoint parent,
                   Checkpoint::Open(opt.parent_dir, MappedFile::Shrink::kReadZeros));
  ASSIGN_OR_RETURN(OutputLayout layout, BuildOutputLayout(m, parent));

  ApplySummary sum;
  sum.parent_version = m.parent_version;
  sum.version = m.version;
  for (const DeltaObject& o : m.objects) sum.compressed_bytes += o.size;

  // Each worker costs a decoder up front: never more than the tensors.
  size_t tensor_count = 0;
  for (const OutputFile& of : layout.files) tensor_count += of.tensors.size();
  threads = static_cast<unsigned>(std::max<size_t>(1, std::min<size_t>(threads, tensor_count)));
  std::vector<std::unique_ptr<XorDecoder>> decoders;
  for (unsigned t = 0; t < threads; ++t) {
    ASSIGN_OR_RETURN(auto d, MakeXorDecoder(opt.decoder));
    decoders.push_back(std::move(d));
  }
  sum.decoder = std::string(decoders[0]->name());
  std::vector<TensorApplier> appliers;
  for (auto& d : decoders) {
    appliers.emplace_back(objects, std::move(d), opt.max_window_log, interrupted);
  }

  ASSIGN_OR_RETURN(StagingDir staging, StagingDir::Create(opt.out_dir));
  std::deque<OutputSlot> outs;  // not movable (a mutex each)
  std::vector<TensorJob> jobs;
  for (size_t fi = 0; fi < layout.files.size(); ++fi) {
    const OutputFile& of = layout.files[fi];
    outs.emplace_back(staging.path() + "/" + of.name, of);
    if (of.tensors.empty()) RETURN_IF_ERROR(outs.back().WriteEmpty());
    for (const OutputTensor& ot : of.tensors) {
      jobs.push_back({fi, ot.info, parent.Bytes(*ot.parent), ot.delta, ot.expected, 0});
      sum.checkpoint_bytes += ot.info->size();
      if (ot.delta != nullptr) {
        ++sum.tensors_changed;
        sum.frames += ot.delta->frames.size();
      }
    }
  }
  sum.tensors = jobs.size();

  Progress prog("apply", sum.checkpoint_bytes, opt.progress);
  std::vector<uint64_t> nonzero(threads, 0);
  // Jobs start in file order, so the files open at once are about as many as the workers.
  Status applied = ParallelForWorkers(jobs.size(), threads, [&](size_t i, unsigned w) -> Status {
    RETURN_IF_ERROR(interrupted());
    TensorJob& job = jobs[i];
    OutputSlot& out = outs[job.file];
    ASSIGN_OR_RETURN(std::span<uint8_t> dst, out.Open(*job.info));
    RETURN_IF_ERROR(appliers[w]
                        .Run(job, dst, m.parent_version, prog, &nonzero[w])
                        .WithPrefix("tensor '" + job.info->name + "'"));
    return out.Done();
  });
  prog.Finish();
  RETURN_IF_ERROR(interrupted());
  // Before the errors that bytes read as zeros cause (checksum mismatches).
  RETURN_IF_ERROR(parent.CheckUnchanged());
  RETURN_IF_ERROR(ObjectsUnchanged(objects));
  RETURN_IF_ERROR(applied);
  for (uint64_t n : nonzero) sum.nonzero_bytes += n;

  CheckpointManifest out_manifest;
  out_manifest.version = m.version;
  for (size_t fi = 0; fi < layout.files.size(); ++fi) {
    const OutputFile& of = layout.files[fi];
    out_manifest.files.push_back({of.name, of.file_size, of.header.raw.size()});
  }
  for (const TensorJob& job : jobs) {
    const OutputFile& of = layout.files[job.file];
    out_manifest.tensors.push_back({job.info->name, job.info->dtype, job.info->shape, of.name,
                                    of.header.data_offset() + job.info->begin,
                                    of.header.data_offset() + job.info->end, job.new_adler});
  }
  RETURN_IF_ERROR(WriteFileAtomic(staging.path() + "/" + kManifestFileName,
                                  CheckpointManifestToJson(out_manifest)));
  RETURN_IF_ERROR(staging.Commit());
  sum.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return sum;
}

StatusOr<FrameApplySummary> ApplyFramesToFile(
    const std::string& base_path, const std::string& frame_path, const std::string& out_path,
    const std::string& decoder_name, uint32_t max_window_log, const std::atomic<bool>* cancel) {
  auto start = Clock::now();
  auto interrupted = [&]() -> Status {
    return cancel != nullptr && cancel->load(std::memory_order_relaxed)
               ? FailedPrecondition("interrupted; nothing was written to '" + out_path + "'")
               : Status::Ok();
  };
  ASSIGN_OR_RETURN(MappedFile base,
                   MappedFile::OpenReadOnly(base_path, MappedFile::Shrink::kReadZeros));
  ASSIGN_OR_RETURN(MappedFile frames,
                   MappedFile::OpenReadOnly(frame_path, MappedFile::Shrink::kReadZeros));
  ASSIGN_OR_RETURN(auto decoder, MakeXorDecoder(decoder_name));
  ASSIGN_OR_RETURN(MappedOutputFile out, MappedOutputFile::Create(out_path, base.size()));
  constexpr size_t kChunk = 4u << 20;
  for (size_t off = 0; off < base.size(); off += kChunk) {
    RETURN_IF_ERROR(interrupted());
    std::memcpy(out.bytes().data() + off, base.bytes().data() + off,
                std::min<size_t>(kChunk, base.size() - off));
  }
  AdlerDelta unused;
  XorApplySink sink(out.bytes(), 0, &unused);
  StatusOr<DecodeResult> r =
      DecodeDeltaFrame(*decoder, frames.bytes(), base.size(), max_window_log, sink,
                       "frames of '" + frame_path + "' against the base file");
  RETURN_IF_ERROR(interrupted());
  RETURN_IF_ERROR(base.CheckUnchanged());
  RETURN_IF_ERROR(frames.CheckUnchanged());
  RETURN_IF_ERROR(r.status());
  RETURN_IF_ERROR(out.Commit());
  FrameApplySummary s;
  s.length = base.size();
  s.frames = r->frames;
  s.nonzero_bytes = r->nonzero_bytes;
  s.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return s;
}

}  // namespace deltakv::deltasync
