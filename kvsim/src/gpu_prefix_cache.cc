#include "gpu_prefix_cache.h"

#include <cassert>

namespace deltakv::kvsim {

GpuPrefixCache::GpuPrefixCache(uint32_t capacity) : capacity_(capacity), blocks_(capacity) {
  free_.reserve(capacity);
  for (uint32_t b = capacity; b > 0; --b) free_.push_back(b - 1);
  map_.reserve(capacity);
}

size_t GpuPrefixCache::MatchPrefix(std::span<const uint64_t> keys) const {
  size_t n = 0;
  while (n < keys.size() && map_.count(keys[n]) != 0) ++n;
  return n;
}

void GpuPrefixCache::LruRemove(uint32_t b) {
  Block& x = blocks_[b];
  if (x.prev != kNone) blocks_[x.prev].next = x.next; else lru_head_ = x.next;
  if (x.next != kNone) blocks_[x.next].prev = x.prev; else lru_tail_ = x.prev;
  x.prev = x.next = kNone;
  --lru_size_;
}

void GpuPrefixCache::LruPushBack(uint32_t b) {
  Block& x = blocks_[b];
  x.prev = lru_tail_;
  x.next = kNone;
  if (lru_tail_ != kNone) blocks_[lru_tail_].next = b; else lru_head_ = b;
  lru_tail_ = b;
  ++lru_size_;
}

void GpuPrefixCache::Ref(uint32_t block) {
  Block& x = blocks_[block];
  if (x.refs == 0 && x.cached) LruRemove(block);
  ++x.refs;
}

uint32_t GpuPrefixCache::Take(std::vector<EvictedBlock>* evicted) {
  uint32_t b;
  if (!free_.empty()) {
    b = free_.back();
    free_.pop_back();
  } else {
    assert(lru_head_ != kNone);
    b = lru_head_;
    LruRemove(b);
    Block& x = blocks_[b];
    map_.erase(x.key);
    evicted->push_back(EvictedBlock{x.key, x.key_hi, b});
    x.cached = false;
    ++evictions_;
  }
  blocks_[b].refs = 1;
  return b;
}

bool GpuPrefixCache::Publish(uint32_t block, uint64_t key, uint64_t hi) {
  Block& x = blocks_[block];
  if (x.cached) return false;
  if (!map_.emplace(key, block).second) return false;
  x.key = key;
  x.key_hi = hi;
  x.cached = true;
  return true;
}

void GpuPrefixCache::Unref(uint32_t block) {
  Block& x = blocks_[block];
  assert(x.refs > 0);
  if (--x.refs != 0) return;
  if (x.cached) {
    LruPushBack(block);
  } else {
    free_.push_back(block);
  }
}

}  // namespace deltakv::kvsim
