// HostTier: the replay's host KV tier, a real kvtier pool segment used through a real
// KvTierClient with the cpu copy engine. Blocks move between the pool and the replay's GPU
// arena (the "engine memory": `gpu_blocks` blocks of `block_bytes`) with real copies.
//
// Ownership: owns the pool segment (unlinked on destruction), the client and the copy engine;
// borrows the arena, which must outlive it. Thread-safety: none (one replay thread).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "base/status.h"
#include "kvtier/copy_engine.h"
#include "kvtier/pool_key.h"
#include "kvtier/slot_pool.h"
#include "kvtier/tier_client.h"

namespace deltakv::kvsim {

class HostTier {
 public:
  // Creates pool `name` with `slots` slots of `block_bytes` (replacing a stale segment of that
  // name) and opens a client on it over `arena`.
  static StatusOr<std::unique_ptr<HostTier>> Create(const std::string& name, uint64_t slots,
                                                    uint64_t block_bytes, uint8_t* arena,
                                                    uint64_t gpu_blocks);

  // Stores the arena blocks `blocks` under `keys` (one each; keys already stored are skipped,
  // keys the pool refuses are counted). Waits for the copy and commits.
  Status Store(std::span<const kvtier::PoolKey> keys, std::span<const uint64_t> blocks);
  // The number of leading keys stored.
  size_t Lookup(std::span<const kvtier::PoolKey> keys);
  // Loads keys[0, blocks.size()) into the arena blocks `blocks` and waits for the copy.
  Status Load(std::span<const kvtier::PoolKey> keys, std::span<const uint64_t> blocks);

  uint64_t lookups() const { return lookups_; }
  uint64_t hit_blocks() const { return hit_blocks_; }
  uint64_t loads() const { return loads_; }
  uint64_t loaded_blocks() const { return loaded_blocks_; }
  uint64_t stored_blocks() const { return stored_blocks_; }
  uint64_t refused_blocks() const { return refused_blocks_; }
  uint64_t evictions() const;
  uint64_t pool_bytes() const { return pool_bytes_; }

 private:
  HostTier() = default;

  std::unique_ptr<kvtier::CpuCopyEngine> engine_;
  kvtier::SlotPool owner_;
  std::unique_ptr<kvtier::KvTierClient> client_;
  uint64_t lookups_ = 0, hit_blocks_ = 0, loads_ = 0, loaded_blocks_ = 0, stored_blocks_ = 0,
           refused_blocks_ = 0, pool_bytes_ = 0;
};

}  // namespace deltakv::kvsim
