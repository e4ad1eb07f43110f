// Checksums of a rank's live weights: the base of the checksum chain (shm/PROTOCOL.md §9.4).
//
// For every registered tensor the rank reads its local bytes through the device backend and
// reports partial Adler-32 sums over *canonical* positions (AdlerDelta::AddBytes), split three
// ways so the sidecar can check every byte the rank holds, not only the bytes it owns:
//   owned        the positions this rank owns (the lowest rank holding them): summed over all
//                ranks and applied to the checksum of n zero bytes they give the tensor's
//                Adler-32, to compare with a checkpoint manifest or the verified table;
//   replica      the positions this rank holds but does not own (replicated tensors, KV-head
//                replicas);
//   refs[h]      this rank's bytes (as owner) at the positions rank h holds as a replica. For
//                each rank h, the refs of all owners add up to what h's replica sums must be,
//                so a replica that differs from its owner is named with its rank.
// The owner computes each owned piece once; refs that cover a whole owned piece reuse it, so a
// replicated tensor costs every rank one read of its local bytes.
//
// Thread-safety: pure functions over the backend, which is used by one thread at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <vector>

#include "base/status.h"
#include "deltasync/adler32.h"
#include "deltasync/engine_tensors.h"
#include "shim/device_backend.h"
#include "shim/plan_stage.h"

namespace deltakv::shim {

struct TensorSums {
  deltasync::AdlerDelta owned;
  deltasync::AdlerDelta replica;
  bool holds_replica = false;                       // the rank holds non-owned positions
  std::map<uint32_t, deltasync::AdlerDelta> refs;   // holder rank -> owner's sums
};

struct ChecksumOptions {
  uint64_t rate_bytes_per_s = 0;  // 0 = as fast as the backend reads
  // The most bytes read between rate checks (values below 4096 read 4096).
  uint64_t chunk_bytes = 16 << 20;
  // Called between chunks; returning false stops the pass (Cancelled-like FailedPrecondition).
  std::function<bool()> keep_going;
};

// One TensorSums per registered tensor (same order), and the bytes read in *bytes_read.
// REQUIRES: tensors[i] and table[i] describe the same registered tensor, whose layout's
// local size for `rank` is tensors[i].bytes (Engine::RegisterTensor checks this).
// `rank` is the layout's (global) rank. Only ranks [node_lo, node_lo + node_count) count: a
// node serving a slice of a larger group owns each byte it holds at its lowest rank holding it,
// and refs name the other holders relative to node_lo (the node's local ranks).
// Errors of the backend's ChecksumRanges; FailedPrecondition if keep_going said stop.
StatusOr<std::vector<TensorSums>> ChecksumWeights(const std::vector<LocalTensor>& tensors,
                                                  const std::vector<deltasync::EngineTensor>& table,
                                                  uint32_t rank, DeviceBackend& backend,
                                                  const ChecksumOptions& options,
                                                  uint64_t* bytes_read, uint32_t node_lo = 0,
                                                  uint32_t node_count = UINT32_MAX);

}  // namespace deltakv::shim
