// Test helper: chunks made of chosen bytes and an in-memory ChunkSource that counts fetches
// and can fail, corrupt or hold them.
#pragma once

#include <openssl/evp.h>

#include <atomic>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>

#include "mount/chunk_cache.h"

namespace deltakv::mount::testing {

inline std::string Sha256Hex(const std::string& bytes) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(bytes.data(), bytes.size(), md, &len, EVP_sha256(), nullptr);
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < len; ++i) {
    out += kHex[md[i] >> 4];
    out += kHex[md[i] & 15];
  }
  return out;
}

inline deltasync::VolumeChunk ChunkOf(const std::string& bytes, uint64_t offset = 0) {
  return {Sha256Hex(bytes), offset, bytes.size()};
}

class FakeSource {
 public:
  void Add(const std::string& bytes) { chunks_[Sha256Hex(bytes)] = bytes; }
  void Remove(const std::string& digest) { chunks_.erase(digest); }
  // Fetches block until Release() while held.
  void Hold() {
    std::lock_guard<std::mutex> lock(mu_);
    held_ = true;
  }
  void Release() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      held_ = false;
    }
    cv_.notify_all();
  }
  int fetches() const { return fetches_.load(); }
  int waiting() const { return waiting_.load(); }

  ChunkSource source() {
    return [this](const deltasync::VolumeChunk& c) -> StatusOr<std::string> {
      ++fetches_;
      {
        std::unique_lock<std::mutex> lock(mu_);
        ++waiting_;
        cv_.wait(lock, [this] { return !held_; });
        --waiting_;
      }
      auto it = chunks_.find(c.digest);
      if (it == chunks_.end()) return NotFound("chunk sha256:" + c.digest + " not in the store");
      return it->second;
    };
  }

 private:
  std::map<std::string, std::string> chunks_;
  std::atomic<int> fetches_{0};
  std::atomic<int> waiting_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  bool held_ = false;
};

}  // namespace deltakv::mount::testing
