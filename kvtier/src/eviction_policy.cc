#include "kvtier/eviction_policy.h"

#include <algorithm>

#include "shm/liveness.h"

namespace deltakv::kvtier {

uint64_t MonotonicTickSource::Now() { return shm::MonotonicNowNs(); }

TickSource* DefaultTickSource() {
  static MonotonicTickSource source;
  return &source;
}

bool SlotUnpinned(const SlotMeta& meta) {
  for (const auto& holder : meta.holders) {
    if (holder.load(std::memory_order_seq_cst) != 0) return false;
  }
  return true;
}

void LruEvictionPolicy::SelectVictims(const SlotTableView& view, size_t wanted,
                                      std::vector<EvictionCandidate>* out) {
  if (wanted == 0 || view.used_count == 0) return;
  const uint64_t window = std::min<uint64_t>(
      view.used_count, std::max<uint64_t>(sample_window_, 4 * static_cast<uint64_t>(wanted)));
  const uint64_t start =
      window >= view.used_count ? 0 : view.cursor->fetch_add(window, std::memory_order_relaxed);
  std::vector<EvictionCandidate> free_slots;
  std::vector<EvictionCandidate> ready;
  for (uint64_t i = 0; i < window; ++i) {
    const uint64_t slot = (start + i) % view.used_count;
    const SlotMeta& meta = view.slots[slot];
    SlotWord word = SlotWord::Decode(meta.state.load(std::memory_order_acquire));
    EvictionCandidate c{static_cast<uint32_t>(slot), word.generation,
                        meta.lru_tick.load(std::memory_order_relaxed)};
    if (word.state == SlotState::kFree) {
      if (free_slots.size() < wanted) free_slots.push_back(c);
    } else if (word.state == SlotState::kReady && SlotUnpinned(meta)) {
      ready.push_back(c);
    }
  }
  size_t take_ready = wanted > free_slots.size() ? wanted - free_slots.size() : 0;
  take_ready = std::min(take_ready, ready.size());
  std::partial_sort(ready.begin(), ready.begin() + static_cast<ptrdiff_t>(take_ready), ready.end(),
                    [](const EvictionCandidate& a, const EvictionCandidate& b) {
                      return a.lru_tick != b.lru_tick ? a.lru_tick < b.lru_tick : a.slot < b.slot;
                    });
  out->insert(out->end(), free_slots.begin(), free_slots.end());
  out->insert(out->end(), ready.begin(), ready.begin() + static_cast<ptrdiff_t>(take_ready));
}

}  // namespace deltakv::kvtier
