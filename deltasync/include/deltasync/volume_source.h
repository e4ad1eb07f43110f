// Plain sources for sealed volumes: files that deltakv did not write (objects under a prefix of
// an S3 bucket uploaded by `aws s3 cp`, ...), sealed by Volumes::PushFrom without staging whole
// files on local disk.
//
// A FileSource lists its files once, each with its size and a version token that names the
// bytes listed (an S3 ETag), and then reads ranges of a listed file. Every read checks that the
// file is still the one listed, so a sealed version never mixes bytes of two states of a file.
//
// Volumes::PushFrom cuts each file exactly as Volumes::Push cuts a local file with the same bytes
// (VOLUME.md section 4), so a source and a directory holding the same files seal the same
// version. It reads each file front to back in ranged reads (a few ahead of the chunker), hashes
// it on the way, and uploads the chunks the store lacks in batches, each batch under a lease of
// its own (VOLUME.md section 6, "Push from a plain source").
//
// Ownership: PushFrom borrows the source for the duration of the call.
// Thread-safety: FileSource implementations must be safe to call from several threads at once.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "base/status.h"
#include "deltasync/volume.h"

namespace deltakv::deltasync {

// One file as a FileSource lists it.
struct ListedFile {
  std::string path;  // relative, '/'-separated: the path the manifest records
  uint64_t size = 0;
  uint32_t mode = 0644;  // 0644 or 0755
  std::string version;   // opaque, names the bytes listed (an ETag); may be empty
};

class FileSource {
 public:
  virtual ~FileSource() = default;

  // Returns every file of the source, in any order. Errors are the source's own (NotFound if
  // its location does not exist, IoError if it cannot be read, InvalidArgument for an entry
  // that cannot be a file), each naming the source.
  virtual StatusOr<std::vector<ListedFile>> List() = 0;

  // Returns exactly bytes [offset, offset + length) of a file List returned.
  // FailedPrecondition naming the file if it changed since it was listed (another version or
  // size) or was removed; IoError if it cannot be read.
  // REQUIRES: length > 0 and offset + length <= file.size.
  virtual StatusOr<std::string> ReadRange(const ListedFile& file, uint64_t offset,
                                          uint64_t length) = 0;

  // "s3://bucket/prefix", for messages.
  virtual std::string Describe() const = 0;
};

struct SourceProgress {
  uint64_t files_done = 0;
  uint64_t files_total = 0;
  uint64_t bytes_read = 0;  // source bytes read, chunked and hashed
  uint64_t bytes_total = 0;
  uint64_t chunks_done = 0;  // distinct chunks checked against the store or uploaded so far
  uint64_t bytes_uploaded = 0;
};

// Limits of one PushFrom. Memory stays below about
//   files_at_once x (reads_ahead x read_bytes + batch_bytes + the largest chunk)
// (safetensors pieces are at most push.piece_size; a safetensors header is read whole).
struct PushFromOptions {
  // As for Push: tag, parent, piece_size, xor_with_parent, max_xor_chain and parent_dir;
  // push.threads is the number of chunks hashed and uploaded at once per file (0 = 8).
  // push.progress is not called; `progress` below is.
  PushOptions push;
  unsigned files_at_once = 4;          // files read at once, 1..64
  uint64_t read_bytes = 8ull << 20;    // bytes per ranged read, 4 KiB..1 GiB
  unsigned reads_ahead = 4;            // ranged reads in flight per file, 1..64
  uint64_t batch_bytes = 32ull << 20;  // chunk bytes per lease and upload batch, 1..4 GiB
  // Called after each batch and each finished file, from the worker that did it, one call at a
  // time.
  std::function<void(const SourceProgress&)> progress;
};

}  // namespace deltakv::deltasync
