#include "mount/chunk_cache.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <vector>

namespace deltakv::mount {
namespace {

namespace fs = std::filesystem;

std::string ErrnoText(const char* op, const std::string& path, int err) {
  return std::string(op) + " '" + path + "': " + std::strerror(err);
}

bool IsHexDigest(const std::string& s) {
  return s.size() == 64 && std::all_of(s.begin(), s.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

std::string Sha256Hex(const std::string& bytes) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_Digest(bytes.data(), bytes.size(), md, &len, EVP_sha256(), nullptr) != 1) return {};
  static const char kHex[] = "0123456789abcdef";
  std::string out(2 * len, '0');
  for (unsigned int i = 0; i < len; ++i) {
    out[2 * i] = kHex[md[i] >> 4];
    out[2 * i + 1] = kHex[md[i] & 15];
  }
  return out;
}

// Reads a whole file of exactly `size` bytes; false if it is absent, shorter or longer.
bool ReadExactly(const std::string& path, uint64_t size, std::string& out) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  struct stat st {};
  bool ok = fstat(fd, &st) == 0 && static_cast<uint64_t>(st.st_size) == size;
  if (ok) {
    out.resize(size);
    uint64_t done = 0;
    while (ok && done < size) {
      const ssize_t n = pread(fd, out.data() + done, size - done, static_cast<off_t>(done));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) ok = false;
      else done += static_cast<uint64_t>(n);
    }
    if (ok) futimens(fd, nullptr);  // records the use, so the LRU order survives a restart
  }
  close(fd);
  return ok;
}

bool WriteAll(int fd, const std::string& bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

struct ChunkCache::Flight {
  bool done = false;
  Status status;
  ChunkHandle bytes;
  std::condition_variable cv;
};

ChunkCache::ChunkCache(ChunkCacheOptions options, ChunkSource source, int lock_fd)
    : options_(std::move(options)), source_(std::move(source)), lock_fd_(lock_fd) {}

ChunkCache::~ChunkCache() {
  if (lock_fd_ >= 0) close(lock_fd_);  // releases the flock
}

StatusOr<std::unique_ptr<ChunkCache>> ChunkCache::Open(const ChunkCacheOptions& options,
                                                       ChunkSource source) {
  if (options.dir.empty()) return InvalidArgument("chunk cache: no directory given");
  std::error_code ec;
  fs::create_directories(fs::path(options.dir) / "sha256", ec);
  if (ec) {
    return IoError("chunk cache: create '" + options.dir + "/sha256': " + ec.message());
  }
  const std::string lock_path = options.dir + "/.lock";
  const int fd = open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return IoError("chunk cache: " + ErrnoText("open", lock_path, errno));
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    close(fd);
    if (err == EWOULDBLOCK) {
      return FailedPrecondition("chunk cache '" + options.dir +
                                "' is in use by another process (give each mount its own "
                                "--cache-dir)");
    }
    return IoError("chunk cache: " + ErrnoText("flock", lock_path, err));
  }
  std::unique_ptr<ChunkCache> cache(new ChunkCache(options, std::move(source), fd));
  RETURN_IF_ERROR(cache->LoadIndex());
  return cache;
}

Status ChunkCache::LoadIndex() {
  struct Found {
    std::string digest;
    uint64_t size;
    fs::file_time_type mtime;
  };
  std::vector<Found> found;
  std::error_code ec;
  const fs::path root = fs::path(options_.dir) / "sha256";
  for (fs::directory_iterator sub(root, ec), end; !ec && sub != end; sub.increment(ec)) {
    if (!sub->is_directory(ec)) continue;
    for (fs::directory_iterator it(sub->path(), ec); !ec && it != end; it.increment(ec)) {
      const std::string name = it->path().filename().string();
      std::error_code e2;
      const bool regular = it->is_regular_file(e2);
      const bool ours = regular && IsHexDigest(name) &&
                        sub->path().filename().string() == name.substr(0, 2);
      if (!ours) {
        // Leftover temporary files (this process holds the lock, so no writer is alive) and
        // anything else that is not a chunk file named by its digest.
        if (regular) fs::remove(it->path(), e2);
        continue;
      }
      found.push_back({name, static_cast<uint64_t>(it->file_size(e2)), it->last_write_time(e2)});
    }
  }
  if (ec) return IoError("chunk cache: read '" + root.string() + "': " + ec.message());
  std::sort(found.begin(), found.end(),
            [](const Found& a, const Found& b) { return a.mtime < b.mtime; });
  std::lock_guard<std::mutex> lock(mu_);
  for (const Found& f : found) {  // oldest first, so the newest ends at the front
    disk_lru_.push_front(f.digest);
    disk_[f.digest] = DiskEntry{f.size, disk_lru_.begin()};
    stats_.disk_bytes += f.size;
    ++stats_.disk_files;
  }
  (void)EvictDiskLocked(0);  // nothing is being written yet, so this always fits
  return Status::Ok();
}

std::string ChunkCache::PathOf(const std::string& digest) const {
  return options_.dir + "/sha256/" + digest.substr(0, 2) + "/" + digest;
}

void ChunkCache::ForgetDiskLocked(const std::string& digest) {
  auto it = disk_.find(digest);
  if (it == disk_.end()) return;
  stats_.disk_bytes -= it->second.size;
  --stats_.disk_files;
  disk_lru_.erase(it->second.lru);
  disk_.erase(it);
}

bool ChunkCache::EvictDiskLocked(uint64_t incoming) {
  // Files being written are skipped: their temporary files occupy the space they reserved,
  // and would outlive an eviction until their writers noticed it.
  auto it = disk_lru_.end();
  while (stats_.disk_bytes + incoming > options_.disk_bytes && it != disk_lru_.begin()) {
    --it;
    if (disk_.at(*it).writing) continue;
    const std::string victim = *it;
    it = std::next(it);  // ForgetDiskLocked erases the victim's list node
    unlink(PathOf(victim).c_str());
    ForgetDiskLocked(victim);
    ++stats_.evictions;
  }
  return stats_.disk_bytes + incoming <= options_.disk_bytes;
}

ChunkHandle ChunkCache::ReadDisk(const deltasync::VolumeChunk& chunk) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = disk_.find(chunk.digest);
    if (it == disk_.end()) return nullptr;
    disk_lru_.splice(disk_lru_.begin(), disk_lru_, it->second.lru);
  }
  auto bytes = std::make_shared<std::string>();
  const std::string path = PathOf(chunk.digest);
  if (ReadExactly(path, chunk.size, *bytes) && Sha256Hex(*bytes) == chunk.digest) return bytes;
  // Absent (evicted meanwhile), wrong size or wrong bytes: never served; drop the file.
  std::lock_guard<std::mutex> lock(mu_);
  if (disk_.count(chunk.digest) != 0) {
    unlink(path.c_str());
    ForgetDiskLocked(chunk.digest);
    ++stats_.corrupt_files;
  }
  return nullptr;
}

void ChunkCache::WriteDisk(const std::string& digest, const std::string& bytes) {
  const uint64_t size = bytes.size();
  if (size > options_.disk_bytes) return;
  const std::string dir = options_.dir + "/sha256/" + digest.substr(0, 2);
  std::string temp;
  {
    // Reserve the space first: the index counts the file before it exists, so concurrent
    // writers never take the directory past the bound between their evictions and renames.
    std::lock_guard<std::mutex> lock(mu_);
    if (disk_.count(digest) != 0 || !EvictDiskLocked(size)) return;
    disk_lru_.push_front(digest);
    disk_[digest] = DiskEntry{size, disk_lru_.begin(), /*writing=*/true};
    stats_.disk_bytes += size;
    ++stats_.disk_files;
    temp = dir + "/." + digest + ".tmp." + std::to_string(getpid()) + "." +
           std::to_string(temp_counter_++);
  }
  mkdir(dir.c_str(), 0755);
  bool ok = false;
  const int fd = open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd >= 0) {
    ok = WriteAll(fd, bytes);
    ok = close(fd) == 0 && ok;
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (ok && rename(temp.c_str(), PathOf(digest).c_str()) == 0) {
    disk_.at(digest).writing = false;
    return;
  }
  unlink(temp.c_str());
  ForgetDiskLocked(digest);
}

void ChunkCache::RememberInMemory(const std::string& digest, const ChunkHandle& bytes) {
  if (bytes->size() > options_.memory_bytes || memory_.count(digest) != 0) return;
  while (!memory_lru_.empty() && stats_.memory_bytes + bytes->size() > options_.memory_bytes) {
    auto victim = memory_.find(memory_lru_.back());
    stats_.memory_bytes -= victim->second.bytes->size();
    memory_.erase(victim);
    memory_lru_.pop_back();
  }
  memory_lru_.push_front(digest);
  memory_[digest] = MemoryEntry{bytes, memory_lru_.begin()};
  stats_.memory_bytes += bytes->size();
}

StatusOr<ChunkHandle> ChunkCache::Load(const deltasync::VolumeChunk& chunk) {
  if (ChunkHandle cached = ReadDisk(chunk)) {
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.disk_hits;
    return cached;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.fetches;
  }
  StatusOr<std::string> fetched = source_(chunk);
  if (fetched.ok() && fetched->size() != chunk.size) {
    fetched = DataLoss("chunk sha256:" + chunk.digest + ": source returned " +
                       std::to_string(fetched->size()) + " bytes, manifest says " +
                       std::to_string(chunk.size));
  }
  if (!fetched.ok()) {
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.fetch_errors;
    return fetched.status();
  }
  auto bytes = std::make_shared<const std::string>(std::move(fetched).value());
  WriteDisk(chunk.digest, *bytes);
  return ChunkHandle(bytes);
}

StatusOr<ChunkHandle> ChunkCache::Get(const deltasync::VolumeChunk& chunk) {
  std::unique_lock<std::mutex> lock(mu_);
  if (auto it = memory_.find(chunk.digest); it != memory_.end()) {
    memory_lru_.splice(memory_lru_.begin(), memory_lru_, it->second.lru);
    ++stats_.memory_hits;
    return it->second.bytes;
  }
  if (auto it = flights_.find(chunk.digest); it != flights_.end()) {
    std::shared_ptr<Flight> flight = it->second;
    flight->cv.wait(lock, [&] { return flight->done; });
    if (!flight->status.ok()) return flight->status;
    return flight->bytes;
  }
  auto flight = std::make_shared<Flight>();
  flights_[chunk.digest] = flight;
  lock.unlock();
  StatusOr<ChunkHandle> result = Load(chunk);
  lock.lock();
  flight->done = true;
  if (result.ok()) {
    flight->bytes = *result;
    RememberInMemory(chunk.digest, *result);
  } else {
    flight->status = result.status();
  }
  flights_.erase(chunk.digest);
  flight->cv.notify_all();
  return result;
}

bool ChunkCache::Has(const std::string& digest) {
  std::lock_guard<std::mutex> lock(mu_);
  return memory_.count(digest) != 0 || disk_.count(digest) != 0 || flights_.count(digest) != 0;
}

ChunkCacheStats ChunkCache::stats() {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

}  // namespace deltakv::mount
