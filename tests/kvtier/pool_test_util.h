// Helpers shared by the slot pool tests: unique segment names, block contents that are a
// deterministic function of the key, and a manual clock.
#pragma once

#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <string>

#include "kvtier/eviction_policy.h"
#include "kvtier/pool_key.h"

namespace deltakv::kvtier::testing {

inline std::string UniquePoolName(const std::string& tag) {
  static std::atomic<int> counter{0};
  return "dkv-pooltest-" + tag + "-" + std::to_string(getpid()) + "-" +
         std::to_string(counter.fetch_add(1));
}

inline PoolKey KeyOf(uint64_t i) { return PoolKey{i * 0x9E3779B97F4A7C15ull + 1, ~i}; }

// Fills `out` with bytes determined by `key` (a splitmix64 stream).
inline void FillForKey(const PoolKey& key, uint8_t* out, size_t n) {
  uint64_t x = key.lo ^ (key.hi * 31);
  size_t i = 0;
  while (i < n) {
    x += 0x9E3779B97F4A7C15ull;
    uint64_t z = x;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    size_t take = n - i < 8 ? n - i : 8;
    std::memcpy(out + i, &z, take);
    i += take;
  }
}

// True when `data` holds exactly FillForKey(key).
inline bool MatchesKey(const PoolKey& key, const uint8_t* data, size_t n) {
  std::string expected(n, '\0');
  FillForKey(key, reinterpret_cast<uint8_t*>(expected.data()), n);
  return std::memcmp(expected.data(), data, n) == 0;
}

class ManualClock final : public TickSource {
 public:
  uint64_t Now() override { return now_.fetch_add(1) + 1; }

 private:
  std::atomic<uint64_t> now_{0};
};

}  // namespace deltakv::kvtier::testing
