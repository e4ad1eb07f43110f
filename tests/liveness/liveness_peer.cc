// liveness_peer: an engine-like process for the cross-PID-namespace liveness tests. Run under
// `unshare --pid --fork`, it sees itself as pid 1 of a namespace of its own while sharing
// /dev/shm (the segments and the liveness tokens) with the test.
//
//   liveness_peer pool <pool> <ready key>  opens the KV pool, claims a slot for key 1000
//                                          (WRITING, never committed) and pins the READY block
//                                          of <ready key>
//   liveness_peer rank <control> <rank> <world>  registers the rank on the control block
//
// Then it prints one line, "ready <pid as it sees it> <detail>", and stays until killed. A rank
// that finds its slot reclaimed while it is alive prints "lost" and exits 3.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "kvtier/slot_pool.h"
#include "shm/control_block.h"

namespace {

using deltakv::kvtier::PoolKey;

// The key numbering of the tests (tests/kvtier/pool_test_util.h).
PoolKey KeyOf(uint64_t i) { return PoolKey{i * 0x9E3779B97F4A7C15ull + 1, ~i}; }

int Fail(const std::string& what) {
  std::printf("error %s\n", what.c_str());
  std::fflush(stdout);
  return 2;
}

int Pool(const std::string& name, uint64_t ready_key) {
  auto pool = deltakv::kvtier::SlotPool::Open(name);
  if (!pool.ok()) return Fail(pool.status().ToString());
  const PoolKey writing_key = KeyOf(1000);
  auto stored = pool->PrepareStore(std::span<const PoolKey>(&writing_key, 1));
  if (!stored.ok() || stored->allocated != 1) return Fail("prepare store");
  const PoolKey pinned_key = KeyOf(ready_key);
  deltakv::kvtier::PinnedBlocks pins = pool->PinPrefix(std::span<const PoolKey>(&pinned_key, 1));
  if (pins.size() != 1) return Fail("pin");
  std::printf("ready %d slot %u\n", static_cast<int>(getpid()), stored->slots[0].ref.slot);
  std::fflush(stdout);
  for (;;) pause();
}

int Rank(const std::string& name, uint32_t rank, uint32_t world) {
  auto control = deltakv::shm::ControlBlock::Attach(name);
  if (!control.ok()) return Fail(control.status().ToString());
  auto handle = (*control)->RegisterRank(rank, world);
  if (!handle.ok()) return Fail(handle.status().ToString());
  // How this process, in its own PID namespace, judges the sidecar of the test's namespace.
  const std::string sidecar = deltakv::shm::PeerStateName((*control)->CheckSidecar().state);
  std::printf("ready %d sidecar %s\n", static_cast<int>(getpid()), sidecar.c_str());
  std::fflush(stdout);
  for (;;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (!handle->StillRegistered()) {
      std::printf("lost\n");
      std::fflush(stdout);
      return 3;
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "pool" && argc == 4) return Pool(argv[2], std::strtoull(argv[3], nullptr, 10));
  if (mode == "rank" && argc == 5) {
    return Rank(argv[2], static_cast<uint32_t>(std::strtoul(argv[3], nullptr, 10)),
                static_cast<uint32_t>(std::strtoul(argv[4], nullptr, 10)));
  }
  std::fprintf(stderr,
               "usage: liveness_peer pool <pool> <ready key> | rank <control> <rank> <world>\n");
  return 64;
}
