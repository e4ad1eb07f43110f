// Publisher: writes the delta parent -> new between two checkpoints (deltasync/FORMAT.md).
//
// For every tensor the publisher compares parent and new bytes in pieces of `frame_bytes`;
// each piece that differs becomes one zstd frame of (parent XOR new), compressed at `level`
// with content size and content checksum; `sequences` chooses how the bytes are parsed into
// zstd sequences (FORMAT.md §2). Pieces and tensors that are equal are omitted.
// Frames are appended in tensor order to shard objects of about `shard_bytes` each. The
// output is deterministic: the same inputs and options give the same bytes at any thread
// count.
//
// The output directory is built under a temporary name and renamed into place at the end; on
// any failure nothing is left at `out_dir`.
//
// Thread-safety: PublishDelta may run concurrently for distinct output directories.
#pragma once

#include <atomic>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "deltasync/dtype.h"

namespace deltakv::deltasync {

// How a frame's XOR bytes become zstd sequences.
enum class FrameSequences {
  // One sequence per run of nonzero bytes: the run and one zero as literals, the rest of the
  // zero gap as a match at offset 1 (deltasync/src/xor_sequences.h). Fewer sequences than
  // libzstd's match finders make of a sparse delta (so a faster walk) and smaller frames.
  kXorRuns,
  // libzstd's own match finder at `level`.
  kZstd,
};

struct PublishOptions {
  std::string parent_dir;
  std::string new_dir;
  std::string out_dir;
  std::string parent_version;  // "" => the parent directory's name (CheckpointVersionId)
  std::string version;         // "" => the new directory's name (CheckpointVersionId)
  int level = 3;               // zstd level (negative levels allowed)
  FrameSequences sequences = FrameSequences::kXorRuns;  // with kXorRuns the level sets the
                                                        // entropy stage only
  unsigned threads = 0;        // 0 => all CPUs; never more than the pieces to compress
  uint64_t frame_bytes = 64ull << 20;
  uint64_t shard_bytes = 1ull << 30;
  bool include_checkpoint = true;  // write the "checkpoint" section
  bool progress = false;           // progress lines on stderr
  // When set, the publish checks it before each piece: once true, it stops, removes its
  // temporary directory and fails with FailedPrecondition ("interrupted"); `out_dir` is not
  // made. (A signal handler may set it: the CLI's does on SIGINT, SIGTERM and SIGHUP.)
  const std::atomic<bool>* cancel = nullptr;
};

struct PublishSummary {
  std::string parent_version;
  std::string version;
  uint64_t tensors = 0;
  uint64_t tensors_changed = 0;
  uint64_t checkpoint_bytes = 0;  // all tensor bytes of the new checkpoint
  uint64_t dense_bytes = 0;       // bytes covered by frames
  uint64_t compressed_bytes = 0;  // total size of the shard objects
  uint64_t nonzero_bytes = 0;     // nonzero bytes of parent XOR new
  uint64_t frames = 0;
  uint64_t objects = 0;
  double seconds = 0;
  // nonzero_bytes / checkpoint_bytes
  double density() const;
};

// Writes the delta. InvalidArgument if the checkpoints are malformed or do not have the same
// tensors with the same dtype and shape, or a version (given, or the default) or a file or
// tensor name is not valid UTF-8 (the manifest is JSON); FailedPrecondition if out_dir exists;
// IoError on a write failure, or when an input file changed while it was read ("'PATH'
// changed while being read", Checkpoint::CheckUnchanged; a file that shrinks fails the
// publish, it does not raise SIGBUS).
StatusOr<PublishSummary> PublishDelta(const PublishOptions& options);

// A tensor held in memory by the caller: its bytes in the canonical (row-major) layout.
struct TensorBytes {
  std::string name;
  DType dtype = DType::kU8;
  std::vector<uint64_t> shape;
  std::span<const uint8_t> bytes;  // borrowed for the call
};

// Writes the delta parent -> next between two in-memory tensor sets, with the same frames and
// shards as PublishDelta. options.parent_dir, new_dir and include_checkpoint are not used (the
// manifest has no checkpoint section: there are no files); parent_version and version are
// required and must differ. Tensors are taken in `next`'s order. InvalidArgument if the sets do
// not hold the same names with the same dtype and shape, a name or version is empty, repeated
// or not valid UTF-8, or a tensor's byte count does not match its dtype and shape; errors
// otherwise as PublishDelta.
StatusOr<PublishSummary> PublishDeltaFromTensors(std::span<const TensorBytes> parent,
                                                 std::span<const TensorBytes> next,
                                                 const PublishOptions& options);

}  // namespace deltakv::deltasync
