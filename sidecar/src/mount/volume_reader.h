// VolumeReader: byte-range reads of a mounted version's files, chunk by chunk, with
// read-ahead for sequential readers.
//
// Read(file, offset, size) returns slices of the cached chunks that cover the range (clipped
// to the file's end), in order; the caller writes them out while holding the slices, which pin
// the chunk bytes. A chunk that cannot be fetched or does not verify fails the whole read: the
// error names the file, the chunk (digest, offset, size) and the cause, and is also passed to
// the error sink (one line per failure), so an unverified byte is never returned.
//
// Read-ahead: each open file has a ReadStream. A read is sequential when it starts at offset 0
// or in the chunk the previous read ended in or the one after it (the kernel may deliver its
// own read-ahead slightly out of order); after a sequential read the next chunks (by count, or
// until a byte budget is covered) are handed to the Prefetcher.
//
// Ownership: borrows the manifest, cache and prefetcher (may be null: no read-ahead), which
// must outlive the reader.
// Thread-safety: Read may be called from any number of threads at once, also on one stream.
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "deltasync/volume.h"
#include "mount/chunk_cache.h"
#include "mount/prefetcher.h"

namespace deltakv::mount {

struct ReadaheadOptions {
  uint64_t chunks = 4;  // prefetch this many chunks past a sequential read...
  uint64_t bytes = 0;   // ...or, when non-zero, chunks until this many bytes are covered
};

// Per-open-file read pattern state.
class ReadStream {
 public:
  ReadStream() = default;

 private:
  friend class VolumeReader;
  std::mutex mu_;
  bool started_ = false;   // GUARDED_BY(mu_)
  size_t last_chunk_ = 0;  // GUARDED_BY(mu_): index of the chunk the last read ended in
};

struct ReadSlice {
  ChunkHandle chunk;
  size_t offset = 0;  // into *chunk
  size_t size = 0;
};

class VolumeReader {
 public:
  using ErrorSink = std::function<void(const std::string& line)>;

  VolumeReader(const deltasync::VolumeManifest& manifest, ChunkCache& cache,
               Prefetcher* prefetcher, ReadaheadOptions readahead, ErrorSink errors);

  // Returns the slices covering [offset, offset + size) of file `file_index`, clipped to the
  // file; empty at or past the end. Errors: the chunk's error (NotFound, DataLoss, IoError)
  // with the file and chunk named. REQUIRES: file_index < manifest.files.size().
  StatusOr<std::vector<ReadSlice>> Read(size_t file_index, uint64_t offset, uint64_t size,
                                        ReadStream* stream);

 private:
  void ReadAhead(const deltasync::VolumeFile& file, size_t after_chunk);

  const deltasync::VolumeManifest& manifest_;
  ChunkCache& cache_;
  Prefetcher* prefetcher_;
  const ReadaheadOptions readahead_;
  const ErrorSink errors_;
};

}  // namespace deltakv::mount
