// Host memory probing for sizing the KV pool: how much RAM this process may still use, as the
// smaller of the kernel's MemAvailable and what the cgroup limit leaves (v2 memory.max minus
// memory.current, or v1 memory.limit_in_bytes minus memory.usage_in_bytes), and how many slots
// a fraction of it holds.
//
// The filesystem root is a parameter so tests can point it at a fake /proc and /sys tree.
// Thread-safety: stateless functions.
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"

namespace deltakv::kvtier {

struct HostMemoryInfo {
  uint64_t mem_available = 0;  // /proc/meminfo MemAvailable, bytes
  uint64_t cgroup_limit = 0;   // 0 = no limit found ("max" or no cgroup files)
  uint64_t cgroup_usage = 0;
  uint64_t usable = 0;  // min(mem_available, cgroup_limit - cgroup_usage)
};

// Reads `<root>/proc/meminfo` and the cgroup files under `<root>/sys/fs/cgroup`. IoError if
// meminfo is unreadable; InvalidArgument if it has no MemAvailable line.
StatusOr<HostMemoryInfo> ProbeHostMemory(const std::string& root = "/");

// floor(usable * fraction - reserve_bytes) / SlotStride(block_bytes) (pool metadata is not
// counted: it is under 0.5 % for blocks of 64 KiB and up). InvalidArgument for a fraction
// outside (0, 1] or block_bytes of 0; ResourceExhausted if not even one slot fits.
StatusOr<uint64_t> SlotsForHostMemory(const HostMemoryInfo& info, uint64_t block_bytes,
                                      double fraction, uint64_t reserve_bytes = 0);

}  // namespace deltakv::kvtier
