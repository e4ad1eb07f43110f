// SyncPlanner: turns a delta into one write plan per engine rank, without ever building a
// dense tensor or reading model weights.
//
// Each shard object is fetched from the store once. Every frame is decoded by an XorDecoder
// into runs of nonzero XOR bytes; each run is split by the tensor's layout into per-rank
// pieces (rank, local offset, canonical offset) and appended to that rank's WritePlanWriter.
// Tensors shorter than kFullVerifyBelowBytes are planned in full (every byte, XOR zero where
// unchanged) and flagged, so ranks can return full-checksum partial sums for them.
//
// Errors: InvalidArgument when the delta does not fit the engine (a tensor the engine did not
// register, a length or layout disagreement between ranks); DataLoss for corrupt frames or
// objects; whatever the store returns for fetch failures; ResourceExhausted when a rank's plan
// buffer is full. A failed plan leaves the writers in an unspecified state (the caller drops
// them).
//
// Thread-safety: one planner call at a time per set of writers.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "base/status.h"
#include "deltasync/delta_manifest.h"
#include "deltasync/layout.h"
#include "deltasync/object_store.h"
#include "deltasync/write_plan.h"

namespace deltakv::deltasync {

// One canonical tensor as a rank registered it.
struct RankTensorEntry {
  uint32_t index = 0;  // the rank's registration index
  TensorLayout layout;
};

// name -> entry, one map per rank (index = rank).
using RankTensorTables = std::vector<std::map<std::string, RankTensorEntry, std::less<>>>;

struct PlanStats {
  uint64_t bytes_fetched = 0;
  uint64_t nonzero_bytes = 0;
  uint64_t tensors = 0;
  uint64_t frames = 0;
  double fetch_ms = 0;
  double decode_ms = 0;
};

// The plan tensor table shared by every rank's plan: one PlanTensor per manifest tensor,
// in manifest order (PlanTensor::rank_tensor is filled per rank). Checks that every rank
// registered every changed tensor with the same layout and the right canonical length.
StatusOr<std::vector<std::vector<PlanTensor>>> PlanTensorTables(const DeltaManifest& m,
                                                                const RankTensorTables& ranks);

struct PlannerOptions {
  std::string decoder;  // "" = default XorDecoder
  uint32_t max_window_log = 27;
  uint64_t max_object_bytes = 4ull << 30;
  // Called after each object with (objects done, objects total).
  std::function<void(size_t, size_t)> progress;
};

// Fills `writers` (one per rank, built over PlanTensorTables' tables) with the delta's pieces.
StatusOr<PlanStats> BuildSyncPlans(const DeltaManifest& m, ObjectStore& store,
                                   const RankTensorTables& ranks,
                                   std::vector<WritePlanWriter>& writers,
                                   const PlannerOptions& options);

}  // namespace deltakv::deltasync
