// PoolKey: the 128-bit key under which the slot pool indexes a KV block.
//
// The key spec (kvtier/keys.h, docs/KEYS.md) defines BlockKey, the chained prefix digest of a
// block; PoolKey is that type (an alias, so engine keys pass through unchanged). The pool treats
// keys as opaque bits: it mixes them into a bucket index itself and compares both halves on every
// hit, so any 128-bit value is a valid key (weak engine-supplied hashes included).
//
// Thread-safety: a value type.
#pragma once

#include <cstdint>

#include "kvtier/keys.h"

namespace deltakv::kvtier {
// The pool stores and compares exactly the two halves of the key spec's BlockKey.
using PoolKey = BlockKey;
}  // namespace deltakv::kvtier

namespace deltakv::kvtier {

inline bool SameKey(const PoolKey& a, const PoolKey& b) { return a.lo == b.lo && a.hi == b.hi; }

// A 64-bit mix of both halves (the murmur3 finalizer over lo ^ rotl(hi)); spreads keys over
// index buckets even when the engine's hashes are poorly distributed.
inline uint64_t MixKey(const PoolKey& key) {
  uint64_t x = key.lo ^ ((key.hi << 29) | (key.hi >> 35)) ^ 0x9E3779B97F4A7C15ull;
  x ^= x >> 33;
  x *= 0xFF51AFD7ED558CCDull;
  x ^= x >> 33;
  x *= 0xC4CEB9FE1A85EC53ull;
  x ^= x >> 33;
  return x;
}

}  // namespace deltakv::kvtier
