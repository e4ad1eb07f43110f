// EvictionPolicy: chooses which READY blocks PrepareStore may evict, and TickSource: the clock
// that stamps a slot's recency (lru_tick) on store, touch and pin.
//
// A policy only proposes. It reads slot metadata (without locks; values may be stale) and
// returns candidates best-victim-first; the pool then tries to evict each with a CAS and skips
// any that is pinned, being written, or changed since. A policy never changes slot state, so a
// wrong guess costs a retry, never a pinned block.
//
// LruEvictionPolicy is sampled LRU (as Redis does it): it scans a window of max(sample_window,
// 4 * wanted) slots (at most the used ones) starting at a cursor shared by all processes
// (PoolHeader.evict_cursor), and returns the unpinned READY slots in it oldest first; the
// cursor moves by the window. With a window >= slot_count it is exact LRU; with a smaller one
// an eviction costs O(window) instead of O(capacity), and a victim is among the oldest of the
// window. A FREE slot in the window is returned first (it costs nothing to take).
//
// Thread-safety: a policy object is used by one SlotPool; SlotPool calls it from any of its
// threads concurrently, so implementations must be thread-safe (LruEvictionPolicy keeps no
// mutable state of its own). TickSource implementations must be thread-safe.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kvtier/pool_layout.h"

namespace deltakv::kvtier {

class TickSource {
 public:
  virtual ~TickSource() = default;
  // A value that does not decrease; larger is more recent. Comparable across processes.
  virtual uint64_t Now() = 0;
};

// CLOCK_MONOTONIC nanoseconds (system-wide, so comparable across processes).
class MonotonicTickSource final : public TickSource {
 public:
  uint64_t Now() override;
};
// The process-wide default instance.
TickSource* DefaultTickSource();

// A read-only view of the slot table handed to a policy.
struct SlotTableView {
  const SlotMeta* slots = nullptr;
  uint64_t slot_count = 0;                  // slots that exist
  uint64_t used_count = 0;                  // slots [0, used_count) were ever allocated
  std::atomic<uint64_t>* cursor = nullptr;  // shared scan cursor (PoolHeader.evict_cursor)
};

struct EvictionCandidate {
  uint32_t slot = 0;
  uint32_t generation = 0;
  uint64_t lru_tick = 0;
};

class EvictionPolicy {
 public:
  virtual ~EvictionPolicy() = default;
  // Appends up to `wanted` candidates to `out`, best victim first. Returning fewer (or none)
  // means the policy found nothing more worth evicting now.
  virtual void SelectVictims(const SlotTableView& view, size_t wanted,
                             std::vector<EvictionCandidate>* out) = 0;
};

class LruEvictionPolicy final : public EvictionPolicy {
 public:
  static constexpr uint64_t kDefaultSampleWindow = 4096;
  // REQUIRES: sample_window >= 1.
  explicit LruEvictionPolicy(uint64_t sample_window = kDefaultSampleWindow)
      : sample_window_(sample_window) {}

  void SelectVictims(const SlotTableView& view, size_t wanted,
                     std::vector<EvictionCandidate>* out) override;

 private:
  uint64_t sample_window_;
};

// True when no process holds a pin on `meta` (all holder words zero), as of this load.
bool SlotUnpinned(const SlotMeta& meta);

}  // namespace deltakv::kvtier
