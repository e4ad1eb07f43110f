// Keys, salts, random draws and block contents of the replay. Everything is a function of the
// seed and the trace, so a run is reproducible on any platform.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace deltakv::kvsim {

inline uint64_t Mix64(uint64_t x) {  // the splitmix64 finalizer
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

inline uint64_t MixSalt(uint64_t a, uint64_t b, uint64_t c, uint64_t d) {
  return Mix64(Mix64(Mix64(Mix64(a) ^ b) ^ c) ^ d);
}

class SplitMix {
 public:
  explicit SplitMix(uint64_t seed) : s_(seed) {}
  uint64_t Next() { return Mix64(s_++ * 0x9E3779B97F4A7C15ull); }
  double NextDouble() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }  // [0, 1)

 private:
  uint64_t s_;
};

// The chained 128-bit keys of a prompt's whole blocks: key i covers hash ids [0, i] and the
// play's salt, so a key matches only behind the same prefix in the same play.
struct BlockKeys {
  std::vector<uint64_t> lo;
  std::vector<uint64_t> hi;
};

inline void ChainKeys(uint64_t salt, std::span<const uint64_t> ids, BlockKeys* out) {
  out->lo.resize(ids.size());
  out->hi.resize(ids.size());
  uint64_t lo = Mix64(salt ^ 0x6c6f), hi = Mix64(salt ^ 0x6869);
  for (size_t i = 0; i < ids.size(); ++i) {
    const uint64_t id = Mix64(ids[i]);
    lo = Mix64(lo ^ id);
    hi = Mix64(hi + id * 0xD6E8FEB86659FD93ull);
    out->lo[i] = lo;
    out->hi[i] = hi;
  }
}

// Word `offset / 8` of the bytes of the block with key `key_lo`.
inline uint64_t PatternWord(uint64_t key_lo, uint32_t offset) { return Mix64(key_lo + offset); }

}  // namespace deltakv::kvsim
