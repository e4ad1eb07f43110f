// ChunkCache: verified chunk bytes for a mounted volume, in memory and on the node's disk.
//
// Get(chunk) returns the decoded bytes of one manifest chunk. It looks in a small in-memory
// LRU first, then in the cache directory, and only then calls the ChunkSource (in production
// Volumes::ReadChunk, which fetches and verifies the chunk object). Concurrent Gets of the same
// digest share one lookup and one fetch.
//
// Disk layout: `<dir>/sha256/<hex[0:2]>/<hex>` holds a chunk's decoded bytes, nothing else.
// A file is written to `<dir>/sha256/<hex[0:2]>/.<hex>.tmp.<pid>.<n>` and renamed into place,
// so a reader sees a whole file or none. Every file read back is re-hashed: a file whose size
// or sha256 does not match its name is deleted and the chunk is fetched again; such bytes are
// never returned. Only bytes that the source returned (verified) are written.
//
// Bounds: the files in the directory never add up to more than `disk_bytes` (least recently
// used files are deleted before a new one is written; a chunk larger than the bound is served
// but not stored); the in-memory LRU holds at most `memory_bytes` of chunks (handles that
// callers still hold keep their bytes alive past eviction). Open takes an exclusive flock(2)
// on `<dir>/.lock` for the cache's lifetime, so the disk bound holds: one process uses a
// cache directory at a time.
//
// Thread-safety: every method may be called from any number of threads at once.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "base/status.h"
#include "deltasync/volume.h"

namespace deltakv::mount {

// Returns a chunk's verified bytes (exactly chunk.size bytes hashing to chunk.digest), or
// NotFound / DataLoss / IoError. Must be safe to call from several threads at once.
using ChunkSource =
    std::function<StatusOr<std::string>(const deltasync::VolumeChunk& chunk)>;

// A pinned chunk: its bytes stay valid while the handle is held.
using ChunkHandle = std::shared_ptr<const std::string>;

struct ChunkCacheOptions {
  std::string dir;                          // created if missing
  uint64_t disk_bytes = 8ull << 30;         // bound on the files under `dir`
  uint64_t memory_bytes = 256ull << 20;     // bound on the in-memory LRU
};

struct ChunkCacheStats {
  uint64_t memory_hits = 0;
  uint64_t disk_hits = 0;
  uint64_t fetches = 0;          // calls into the source
  uint64_t fetch_errors = 0;     // source calls that failed
  uint64_t corrupt_files = 0;    // cache files deleted because they did not verify
  uint64_t evictions = 0;        // cache files deleted to stay under disk_bytes
  uint64_t disk_bytes = 0;       // bytes of the files in the directory now
  uint64_t disk_files = 0;
  uint64_t memory_bytes = 0;     // bytes in the in-memory LRU now
};

class ChunkCache {
 public:
  // Opens (creating if needed) the cache directory, takes its lock, indexes the files already
  // there (oldest modification first in the LRU order), deletes leftover temporary files and
  // files whose names are not digests, and evicts down to disk_bytes. FailedPrecondition if
  // another process holds the directory's lock; IoError if it cannot be created or read.
  static StatusOr<std::unique_ptr<ChunkCache>> Open(const ChunkCacheOptions& options,
                                                    ChunkSource source);
  ~ChunkCache();
  ChunkCache(const ChunkCache&) = delete;
  ChunkCache& operator=(const ChunkCache&) = delete;

  // Returns the chunk's verified bytes: from memory, from disk (re-verified) or from the
  // source. The source's error (NotFound, DataLoss, IoError) is returned as is and nothing is
  // cached; a later Get tries the source again. A failure to write the cache file is not an
  // error (the bytes are served, the chunk is just not kept on disk).
  StatusOr<ChunkHandle> Get(const deltasync::VolumeChunk& chunk);

  // True if the chunk is in memory, on disk or being fetched (a prefetch can skip it).
  bool Has(const std::string& digest);

  ChunkCacheStats stats();

 private:
  struct Flight;
  struct DiskEntry {
    uint64_t size = 0;
    std::list<std::string>::iterator lru;
    bool writing = false;  // reserved, its temporary file not yet renamed: never evicted
  };
  struct MemoryEntry {
    ChunkHandle bytes;
    std::list<std::string>::iterator lru;
  };

  ChunkCache(ChunkCacheOptions options, ChunkSource source, int lock_fd);
  Status LoadIndex();
  std::string PathOf(const std::string& digest) const;
  // Reads and verifies the cache file; nullptr if absent or corrupt (then deleted).
  ChunkHandle ReadDisk(const deltasync::VolumeChunk& chunk);
  void WriteDisk(const std::string& digest, const std::string& bytes);
  StatusOr<ChunkHandle> Load(const deltasync::VolumeChunk& chunk);
  void RememberInMemory(const std::string& digest, const ChunkHandle& bytes);
  // REQUIRES: mu_ held. Deletes LRU files (not ones being written) until `incoming` more
  // bytes fit; false if they cannot be made to fit.
  bool EvictDiskLocked(uint64_t incoming);
  void ForgetDiskLocked(const std::string& digest);

  const ChunkCacheOptions options_;
  const ChunkSource source_;
  const int lock_fd_;

  std::mutex mu_;
  std::unordered_map<std::string, std::shared_ptr<Flight>> flights_;  // GUARDED_BY(mu_)
  std::unordered_map<std::string, MemoryEntry> memory_;               // GUARDED_BY(mu_)
  std::list<std::string> memory_lru_;  // most recent first; GUARDED_BY(mu_)
  std::unordered_map<std::string, DiskEntry> disk_;  // GUARDED_BY(mu_)
  std::list<std::string> disk_lru_;    // most recent first; GUARDED_BY(mu_)
  ChunkCacheStats stats_;              // GUARDED_BY(mu_)
  uint64_t temp_counter_ = 0;          // GUARDED_BY(mu_)
};

}  // namespace deltakv::mount
