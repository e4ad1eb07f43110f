// Offline delta apply: rebuilds the new checkpoint from the parent checkpoint and a delta,
// byte for byte (tensor data and the safetensors files themselves), verifying every tensor.
//
// For each output tensor the parent bytes are copied while their Adler-32 is computed. A
// changed tensor must match the delta's parent checksum before its frames are decoded and
// XORed in; its new checksum is then derived incrementally (O(1) per changed byte; full
// recompute for tensors under 4 KiB) and must match the delta's. When the delta carries the
// new checkpoint's description, unchanged tensors are checked against it too.
//
// Failure leaves nothing at `out_dir` (the output is built under a temporary name and renamed
// at the end). Errors name the tensor and give expected vs actual values:
//   DataLoss        — wrong parent, checksum mismatch, corrupt or truncated frame or object
//   InvalidArgument — malformed manifest, a delta that does not fit the parent checkpoint
//   IoError         — the filesystem refused, or an input file (a parent file, a shard
//                     object) changed while it was read: "'PATH' changed while being read"
//                     (MappedFile::CheckUnchanged), reported before the mismatches it caused;
//                     a file that shrinks does not raise SIGBUS
//
// Thread-safety: ApplyDelta may run concurrently for distinct output directories.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "base/status.h"
#include "deltasync/xor_decoder.h"

namespace deltakv::deltasync {

// Tensors shorter than this are verified by a full checksum (Adler-32 is weak on short input).
inline constexpr uint64_t kFullVerifyBelowBytes = 4096;

struct ApplyOptions {
  std::string parent_dir;
  std::string delta_dir;
  std::string out_dir;
  unsigned threads = 0;          // 0 => all CPUs; never more than the tensors
  std::string decoder = "";      // "" => default; see MakeXorDecoder
  uint32_t max_window_log = 31;  // refuse frames with larger windows
  bool verify_objects = true;    // check shard sizes and sha256 before decoding
  bool progress = false;
  // When set, the apply checks it before each object checked, tensor, 4 MiB copied and frame:
  // once true, it stops, removes its temporary directory and fails with FailedPrecondition
  // ("interrupted"); `out_dir` is not made. (A signal handler may set it: the CLI's does on
  // SIGINT, SIGTERM and SIGHUP.)
  const std::atomic<bool>* cancel = nullptr;
};

struct ApplySummary {
  std::string parent_version;
  std::string version;
  std::string decoder;
  uint64_t tensors = 0;
  uint64_t tensors_changed = 0;
  uint64_t checkpoint_bytes = 0;
  uint64_t compressed_bytes = 0;
  uint64_t nonzero_bytes = 0;
  uint64_t frames = 0;
  double seconds = 0;
};

StatusOr<ApplySummary> ApplyDelta(const ApplyOptions& options);

struct FrameApplySummary {
  uint64_t length = 0;
  uint64_t frames = 0;
  uint64_t nonzero_bytes = 0;
  double seconds = 0;
};

// Writes `out_path` = base file XOR the decoded concatenated frames in `frame_path`.
// DataLoss if the decoded length differs from the base file's length or the frames are
// corrupt; IoError if either input changed while it was read. `out_path` is written
// atomically. `cancel` as ApplyOptions::cancel, checked before each 4 MiB of the base copied
// and once the frames are decoded.
StatusOr<FrameApplySummary> ApplyFramesToFile(const std::string& base_path,
                                              const std::string& frame_path,
                                              const std::string& out_path,
                                              const std::string& decoder, uint32_t max_window_log,
                                              const std::atomic<bool>* cancel = nullptr);

}  // namespace deltakv::deltasync
