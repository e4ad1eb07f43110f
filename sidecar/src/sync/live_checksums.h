// LiveChecksums: what the engine ranks report about the bytes they serve (VERIFY/VERIFIED,
// shm/PROTOCOL.md §9.4), combined per tensor.
//
// Each rank's OWNED sums add up to the tensor's Adler-32 as the engine serves it. The REPLICA
// sums of a rank h must equal the sum of the owners' REPLICA_REF sums for h; a difference
// names the tensor and rank h. Per-rank owned sums are kept too, so a mismatch against the
// checksum table (which stores them) or against a checkpoint's bytes names the rank whose
// bytes differ.
//
// Thread-safety: values; CollectLiveChecksums uses the channels' ends like CollectFromRanks.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "base/status.h"
#include "deltasync/adler32.h"
#include "deltasync/engine_tensors.h"
#include "deltasync/object_store.h"
#include "shm/control_block.h"
#include "shm/messages.h"

namespace deltakv::sidecar {

struct RankTensorSums {
  bool reported = false;  // the rank registered the tensor and sent its OWNED entry
  deltasync::AdlerDelta owned;
  bool has_replica = false;
  deltasync::AdlerDelta replica;
  std::map<uint32_t, deltasync::AdlerDelta> refs;  // holder rank -> this rank's owned bytes there
};

struct TensorLive {
  uint64_t canonical_bytes = 0;
  const deltasync::TensorLayout* layout = nullptr;  // points into the tables given to Collect
  std::vector<RankTensorSums> ranks;                 // index = rank
  // The Adler-32 of the tensor as the ranks serve it (their owned sums combined).
  uint32_t Adler32() const;
};

struct LiveChecksums {
  std::map<std::string, TensorLive> tensors;
  uint64_t bytes_read = 0;  // all ranks together
  double ms = 0;

  // "tensor 'X': rank h serves a replica that differs from its owner's bytes (…)", one per
  // disagreeing (tensor, rank).
  std::vector<std::string> ReplicaMismatches() const;
};

// Sends VERIFY(job_id, request) to every rank (channels[r] is rank r, tables[r] its tensor
// table) and collects their VERIFIED parts. Fails (naming the rank) on a rank's ERROR, a
// malformed or out-of-range report, a rank judged gone by `rank_gone`, or the timeout.
StatusOr<LiveChecksums> CollectLiveChecksums(
    const std::vector<shm::RankChannel*>& channels,
    const std::vector<deltasync::EngineTensorTable>& tables, uint64_t job_id,
    const shm::VerifyRequest& request, std::chrono::milliseconds timeout,
    const std::function<Status(uint32_t)>& rank_gone);

// The per-rank owned sums a correct engine holds for a tensor whose canonical bytes are
// `bytes` (index = rank, world ranks).
std::vector<deltasync::AdlerDelta> ExpectedOwnedSums(const deltasync::TensorLayout& layout,
                                                     std::span<const uint8_t> bytes,
                                                     uint32_t world);

// "ranks 1, 3" for the ranks whose owned sums differ between `live` and `expected`.
std::string DifferingRanks(const TensorLive& live, const std::vector<deltasync::AdlerDelta>& expected);

}  // namespace deltakv::sidecar
