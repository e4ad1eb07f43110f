// GpuPrefixCache: the replay's model of an engine's block-granular GPU prefix cache.
//
// `capacity` blocks, each free, referenced by running requests, or cached (holding a published
// key) and unreferenced, in which case it sits on an LRU list and may be evicted to make room.
// Keys are 64-bit (the low half of a block's chained key). Blocks are released tail first by
// the caller, so the blocks of a prefix outlive its tail.
//
// Thread-safety: none (the replay is single-threaded).
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

namespace deltakv::kvsim {

// A cached block evicted to make room: its key halves and the block (still holding its bytes).
struct EvictedBlock {
  uint64_t lo = 0;
  uint64_t hi = 0;
  uint32_t block = 0;
};

class GpuPrefixCache {
 public:
  explicit GpuPrefixCache(uint32_t capacity);

  uint32_t capacity() const { return capacity_; }
  // Blocks a request could take now: free plus cached-and-unreferenced.
  uint32_t available() const { return static_cast<uint32_t>(free_.size()) + lru_size_; }
  // The number of leading keys cached.
  size_t MatchPrefix(std::span<const uint64_t> keys) const;
  // The block holding `key`. REQUIRES: the key is cached.
  uint32_t BlockOf(uint64_t key) const { return map_.at(key); }
  // True for a cached block no running request references (it is on the LRU list).
  bool IsIdle(uint32_t block) const { return blocks_[block].cached && blocks_[block].refs == 0; }
  // Adds a reference (a cached block leaves the LRU list).
  void Ref(uint32_t block);
  // A block for new content, referenced once: a free block, else the least recently used
  // cached one, whose key and block are appended to *evicted. REQUIRES: available() > 0.
  uint32_t Take(std::vector<EvictedBlock>* evicted);
  // Publishes the key (lo, hi) on referenced block `block`; lookups match `lo`. False (nothing
  // changes) when the key is already cached in another block or the block already holds one.
  bool Publish(uint32_t block, uint64_t lo, uint64_t hi);
  // Drops a reference; at zero a cached block goes to the most recent end of the LRU list and
  // an uncached one becomes free.
  void Unref(uint32_t block);
  uint64_t evictions() const { return evictions_; }

 private:
  static constexpr uint32_t kNone = UINT32_MAX;
  struct Block {
    uint64_t key = 0;
    uint64_t key_hi = 0;
    uint32_t refs = 0;
    bool cached = false;
    uint32_t prev = kNone, next = kNone;  // LRU links while cached and unreferenced
  };
  void LruRemove(uint32_t b);
  void LruPushBack(uint32_t b);

  uint32_t capacity_;
  std::vector<Block> blocks_;
  std::vector<uint32_t> free_;
  std::unordered_map<uint64_t, uint32_t> map_;
  uint32_t lru_head_ = kNone, lru_tail_ = kNone, lru_size_ = 0;
  uint64_t evictions_ = 0;
};

}  // namespace deltakv::kvsim
