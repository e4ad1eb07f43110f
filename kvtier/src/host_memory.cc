#include "kvtier/host_memory.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include "kvtier/pool_layout.h"

namespace deltakv::kvtier {
namespace {

// The first token of `path` as a number; false if absent or not a number ("max").
bool ReadNumber(const std::string& path, uint64_t* value) {
  std::ifstream in(path);
  std::string token;
  if (!(in >> token) || token.empty() ||
      token.find_first_not_of("0123456789") != std::string::npos) {
    return false;
  }
  *value = std::stoull(token);
  return true;
}

}  // namespace

StatusOr<HostMemoryInfo> ProbeHostMemory(const std::string& root) {
  std::string base = root.empty() || root.back() != '/' ? root + "/" : root;
  std::ifstream meminfo(base + "proc/meminfo");
  if (!meminfo) return IoError("cannot read " + base + "proc/meminfo");
  HostMemoryInfo info;
  bool found = false;
  std::string line;
  while (std::getline(meminfo, line)) {
    std::istringstream fields(line);
    std::string name, unit;
    uint64_t kib = 0;
    if (fields >> name >> kib && name == "MemAvailable:") {
      info.mem_available = kib * 1024;
      found = true;
      break;
    }
  }
  if (!found) return InvalidArgument(base + "proc/meminfo has no MemAvailable line");
  const std::string cg = base + "sys/fs/cgroup/";
  uint64_t limit = 0, usage = 0;
  if (ReadNumber(cg + "memory.max", &limit)) {
    (void)ReadNumber(cg + "memory.current", &usage);
  } else if (ReadNumber(cg + "memory/memory.limit_in_bytes", &limit) ||
             ReadNumber(cg + "memory.limit_in_bytes", &limit)) {
    if (!ReadNumber(cg + "memory/memory.usage_in_bytes", &usage)) {
      (void)ReadNumber(cg + "memory.usage_in_bytes", &usage);
    }
    if (limit >= (1ull << 62)) limit = 0;  // v1 reports "unlimited" as a huge number
  }
  info.cgroup_limit = limit;
  info.cgroup_usage = usage;
  info.usable = info.mem_available;
  if (limit != 0) info.usable = std::min(info.usable, limit > usage ? limit - usage : 0);
  return info;
}

StatusOr<uint64_t> SlotsForHostMemory(const HostMemoryInfo& info, uint64_t block_bytes,
                                      double fraction, uint64_t reserve_bytes) {
  if (!(fraction > 0.0 && fraction <= 1.0)) {
    return InvalidArgument("kv pool sizing: fraction " + std::to_string(fraction) +
                           " must be in (0, 1]");
  }
  if (block_bytes == 0) return InvalidArgument("kv pool sizing: block_bytes is 0");
  const auto budget = static_cast<uint64_t>(static_cast<double>(info.usable) * fraction);
  const uint64_t bytes = budget > reserve_bytes ? budget - reserve_bytes : 0;
  const uint64_t slots = std::min<uint64_t>(bytes / SlotStride(block_bytes), kMaxSlots);
  if (slots == 0) {
    return ResourceExhausted("kv pool sizing: " + std::to_string(bytes) +
                             " usable bytes hold no block of " + std::to_string(block_bytes));
  }
  return slots;
}

}  // namespace deltakv::kvtier
